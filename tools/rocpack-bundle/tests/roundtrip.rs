//! Writers and readers agree; every CCOB version and method; hash checks;
//! several bundles in one section.

use rocpack_testsupport as common;

use rocpack_bundle::*;

fn sample_entries() -> Vec<(String, Vec<u8>)> {
    vec![
        ("host-x86_64-unknown-linux--".to_string(), Vec::new()),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx1100".to_string(),
            common::pseudo_random(1, 5000),
        ),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx11-generic".to_string(),
            common::pseudo_random(2, 100),
        ),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+".to_string(),
            common::pseudo_random(3, 9000),
        ),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-".to_string(),
            common::pseudo_random(4, 1),
        ),
    ]
}

fn check_entries(b: &Bundle<'_>, want: &[(String, Vec<u8>)]) {
    assert_eq!(b.entries.len(), want.len());
    for (e, (id, data)) in b.entries.iter().zip(want) {
        assert_eq!(e.id.as_str(), id);
        assert_eq!(&*e.data, &data[..]);
        assert_eq!(e.size, data.len() as u64);
    }
}

#[test]
fn uncompressed_layout_matches_clang() {
    let entries = sample_entries();
    let b = write_uncompressed(&entries);
    assert!(b.starts_with(BUNDLE_MAGIC));
    let parsed = parse_bundle(&b).unwrap();
    check_entries(&parsed, &entries);
    assert_eq!(parsed.format, Format::Uncompressed);
    assert_eq!(parsed.len, b.len() as u64);
    // host entry shares its 4096-aligned offset with the first device entry
    assert_eq!(parsed.entries[0].offset, 4096);
    assert_eq!(parsed.entries[1].offset, 4096);
    for e in &parsed.entries {
        assert_eq!(e.offset % 4096, 0);
    }
    // no alignment
    let b1 = write_uncompressed_aligned(&entries, 1);
    let p1 = parse_bundle(&b1).unwrap();
    check_entries(&p1, &entries);
    assert!(b1.len() < b.len());
}

#[test]
fn ccob_every_version_and_method() {
    let entries = sample_entries();
    let raw = write_uncompressed(&entries);
    for version in [1u16, 2, 3] {
        for method in [Method::Zlib, Method::Zstd] {
            let c = write_ccob(&raw, version, method).unwrap();
            let h = parse_ccob_header(&c).unwrap();
            assert_eq!(h.version, version);
            assert_eq!(h.method, method);
            assert_eq!(h.uncompressed_size, raw.len() as u64);
            assert_eq!(h.hash, ccob_hash(&raw));
            let opts = ParseOptions {
                verify_hash: true,
                ..Default::default()
            };
            let b = parse_bundle_with(&c, &opts).unwrap();
            check_entries(&b, &entries);
            assert_eq!(b.format, Format::Ccob { version, method });
            assert_eq!(b.len, c.len() as u64, "v{version} {method}");
            assert_eq!(b.decompressed.as_deref(), Some(&raw[..]));
            assert_eq!(bundle_extent(&c).unwrap().1, c.len() as u64);
            // v1 has no total size: trailing padding must not be swallowed
            let mut padded = c.clone();
            padded.extend_from_slice(&[0u8; 100]);
            assert_eq!(
                bundle_extent(&padded).unwrap().1,
                c.len() as u64,
                "v{version} {method}"
            );
            assert_eq!(parse_bundle(&padded).unwrap().len, c.len() as u64);
        }
    }
}

#[test]
fn hash_is_truncated_md5() {
    // md5("") = d41d8cd98f00b204e9800998ecf8427e; low() reads the first 8 bytes LE
    assert_eq!(
        ccob_hash(b""),
        u64::from_le_bytes([0xd4, 0x1d, 0x8c, 0xd9, 0x8f, 0x00, 0xb2, 0x04])
    );
}

#[test]
fn hash_mismatch_is_reported_only_when_asked() {
    let raw = write_uncompressed(&sample_entries());
    let mut c = write_ccob(&raw, 2, Method::Zstd).unwrap();
    c[16] ^= 0x55; // hash byte
    assert!(parse_bundle(&c).is_ok());
    let opts = ParseOptions {
        verify_hash: true,
        ..Default::default()
    };
    match parse_bundle_with(&c, &opts) {
        Err(Error::HashMismatch {
            stored, computed, ..
        }) => assert_ne!(stored, computed),
        other => panic!("expected hash mismatch, got {other:?}"),
    }
}

#[test]
fn finds_every_bundle_in_a_section() {
    let entries = sample_entries();
    let raw = write_uncompressed(&entries);
    let mut section = Vec::new();
    let mut expect = Vec::new();
    let pieces: Vec<(Vec<u8>, Format)> = vec![
        (raw.clone(), Format::Uncompressed),
        (
            write_ccob(&raw, 2, Method::Zstd).unwrap(),
            Format::Ccob {
                version: 2,
                method: Method::Zstd,
            },
        ),
        (
            write_ccob(&raw, 1, Method::Zlib).unwrap(),
            Format::Ccob {
                version: 1,
                method: Method::Zlib,
            },
        ),
        (
            write_ccob(&raw, 3, Method::Zlib).unwrap(),
            Format::Ccob {
                version: 3,
                method: Method::Zlib,
            },
        ),
        (
            write_ccob(&raw, 1, Method::Zstd).unwrap(),
            Format::Ccob {
                version: 1,
                method: Method::Zstd,
            },
        ),
        (raw.clone(), Format::Uncompressed),
    ];
    for (p, f) in &pieces {
        section.resize(section.len().div_ceil(4096) * 4096, 0);
        expect.push(BundleSpan {
            offset: section.len() as u64,
            len: p.len() as u64,
            format: *f,
        });
        section.extend_from_slice(p);
    }
    section.resize(section.len() + 333, 0);
    let spans = find_bundles(&section).unwrap();
    assert_eq!(spans, expect);
    for s in &spans {
        let b = parse_bundle(&section[s.offset as usize..]).unwrap();
        check_entries(&b, &entries);
        assert_eq!(b.len, s.len);
    }
    // The same through positioned reads of a file (no slice fast paths),
    // placed at an odd offset inside it: spans and entry tables agree.
    let mut file = tempfile::tempfile().unwrap();
    let lead = 777u64;
    std::io::Write::write_all(&mut file, &vec![0xee; lead as usize]).unwrap();
    std::io::Write::write_all(&mut file, &section).unwrap();
    let src = FileRange::new(&file, lead, section.len() as u64);
    assert_eq!(find_bundles_in(&src).unwrap(), expect);
    for s in &spans {
        let w = Window::new(&src, s.offset, s.len);
        let from_file = index_bundle_in(&w, &Default::default()).unwrap();
        let from_slice = index_bundle(
            &section[s.offset as usize..(s.offset + s.len) as usize],
            &Default::default(),
        )
        .unwrap();
        assert_eq!(from_file, from_slice);
        assert_eq!(from_file.len, s.len);
        // A source cut short inside the bundle is an error, not a guess.
        let short = Window::new(&src, s.offset, s.len - 1);
        assert!(index_bundle_in(&short, &Default::default()).is_err());
    }
    // garbage in the padding is an error with its offset
    let at = (expect[1].offset - 10) as usize;
    section[at] = 0x41;
    match find_bundles(&section) {
        Err(e) => assert_eq!(e.offset(), Some(at as u64), "{e}"),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
    std::os::unix::fs::FileExt::write_all_at(&file, &[0x41], lead + at as u64).unwrap();
    match find_bundles_in(&src) {
        Err(e) => assert_eq!(e.offset(), Some(at as u64), "{e}"),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
    assert_eq!(find_bundles(&[0u8; 8192]).unwrap(), vec![]);
    assert_eq!(find_bundles(&[]).unwrap(), vec![]);
}

#[test]
fn find_bundles_is_linear() {
    // 2000 tiny bundles separated by page padding: a quadratic scan would
    // take minutes; this must be instant even in debug builds.
    let one = write_uncompressed_aligned(&[("hipv4-amdgcn-amd-amdhsa--gfx1100", &b"x"[..])], 1);
    let c = write_ccob(&one, 2, Method::Zstd).unwrap();
    let mut section = Vec::new();
    for i in 0..2000 {
        section.resize(section.len().div_ceil(4096) * 4096, 0);
        section.extend_from_slice(if i % 2 == 0 { &one } else { &c });
    }
    let t = std::time::Instant::now();
    let spans = find_bundles(&section).unwrap();
    assert_eq!(spans.len(), 2000);
    // generous bound; a real regression (O(n^2)) is orders of magnitude off
    assert!(t.elapsed().as_secs() < 20);
}

#[test]
fn writer_rejects_unknown_versions_and_v2_overflow_is_checked() {
    assert!(write_ccob(b"", 4, Method::Zstd).is_err());
    assert!(write_ccob(b"", 0, Method::Zstd).is_err());
}
