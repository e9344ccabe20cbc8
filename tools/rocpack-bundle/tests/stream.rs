//! The streaming reader agrees with the in-memory parser on every bundle
//! shape (uncompressed, CCOB v1/v2/v3, zlib and zstd, overlapping entries,
//! padding), detects the same defects, and keeps memory to a chunk: a
//! counting allocator bounds the bytes live while a 64 MiB payload whose
//! 32 entries all overlap is walked.

use rocpack_testsupport::CountingAlloc;

use rocpack_bundle::{
    copy_payload, index_bundle, parse_bundle, walk_bundle, walk_entries, write_ccob,
    write_uncompressed, write_uncompressed_aligned, BundleIndex, BundleLayout, Compression,
    EntryDest, EntryTarget, Error, ParseOptions, ReadAt, WalkSummary, BUNDLE_MAGIC,
};

#[global_allocator]
static A: CountingAlloc = CountingAlloc::new();

/// Deterministic pseudo-random bytes (xorshift), compressible a little.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 3 == 0 {
                0
            } else {
                x as u8
            }
        })
        .collect()
}

/// An uncompressed bundle with `n` entries all covering the same bytes.
fn overlapping(n: usize, size: usize) -> Vec<u8> {
    let ids: Vec<String> = (0..n)
        .map(|i| format!("hipv4-amdgcn-amd-amdhsa--gfx{}", 1100 + i))
        .collect();
    let table: usize = 32 + ids.iter().map(|id| 24 + id.len()).sum::<usize>();
    let at = table.div_ceil(4096) * 4096;
    let mut b = BUNDLE_MAGIC.to_vec();
    b.extend_from_slice(&(n as u64).to_le_bytes());
    for (i, id) in ids.iter().enumerate() {
        // Staggered starts: partial overlaps, not only identical ranges.
        b.extend_from_slice(&((at + i * 17) as u64).to_le_bytes());
        b.extend_from_slice(&((size - i * 17) as u64).to_le_bytes());
        b.extend_from_slice(&(id.len() as u64).to_le_bytes());
        b.extend_from_slice(id.as_bytes());
    }
    b.resize(at, 0);
    b.extend(bytes(7, size));
    b
}

fn shapes() -> Vec<(String, Vec<u8>)> {
    let a = bytes(1, 300_000);
    let b = bytes(2, 5);
    let c = bytes(3, 700_001);
    let plain = write_uncompressed(&[
        ("host-x86_64-unknown-linux-gnu-", &b""[..]),
        ("hipv4-amdgcn-amd-amdhsa--gfx1100", &a[..]),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", &b[..]),
        ("hipv4-amdgcn-amd-amdhsa--gfx942", &c[..]),
    ]);
    let aligned = write_uncompressed_aligned(
        &[
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", &a[..]),
            ("hipv4-amdgcn-amd-amdhsa--gfx942", &c[..]),
        ],
        4096,
    );
    let over = overlapping(8, 600_000);
    let mut out = Vec::new();
    for (name, raw) in [("plain", plain), ("aligned", aligned), ("overlap", over)] {
        for (v, m) in [
            (1, Compression::Zstd),
            (2, Compression::Zlib),
            (3, Compression::Zstd),
            (1, Compression::Zlib),
        ] {
            out.push((
                format!("{name} CCOBv{v}-{m}"),
                write_ccob(&raw, v, m).unwrap(),
            ));
        }
        out.push((name.to_string(), raw));
    }
    out
}

#[test]
fn walk_gives_every_code_object_the_parser_gives() {
    let opts = ParseOptions::default();
    for (name, input) in shapes() {
        let parsed = parse_bundle(&input).unwrap();
        let index = index_bundle(&input, &opts).unwrap();
        assert_eq!(index.format, parsed.format, "{name}");
        assert_eq!(index.len, parsed.len, "{name}");
        assert_eq!(index.ccob, parsed.ccob, "{name}");
        assert_eq!(index.entries.len(), parsed.entries.len(), "{name}");
        for (i, p) in index.entries.iter().zip(&parsed.entries) {
            assert_eq!(
                (&i.id, i.offset, i.size),
                (&p.id, p.offset, p.size),
                "{name}"
            );
        }
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); index.entries.len()];
        let mut raw = Vec::new();
        let summary = walk_bundle::<Error>(
            &input,
            &index,
            &opts,
            &mut |c| {
                raw.extend_from_slice(c);
                Ok(())
            },
            &mut |i, off, c| {
                assert_eq!(off as usize, got[i].len(), "{name}: chunks in order");
                assert!(c.len() <= rocpack_bundle::CHUNK);
                got[i].extend_from_slice(c);
                Ok(())
            },
        )
        .unwrap();
        for (g, p) in got.iter().zip(&parsed.entries) {
            assert_eq!(&g[..], &*p.data, "{name}");
        }
        let whole = parsed.decompressed.as_deref().unwrap_or(&input);
        assert_eq!(&raw[..], &whole[..raw.len()], "{name}");
        assert_eq!(
            summary.hash_matches,
            parsed.ccob.map(
                |h| rocpack_bundle::ccob_hash(parsed.decompressed.as_deref().unwrap()) == h.hash
            ),
            "{name}"
        );
        // Same layout decision as the in-memory check.
        assert_eq!(
            BundleLayout::of_index(&index, &summary),
            BundleLayout::of(&parsed, whole),
            "{name}"
        );
        let ov = index.overlaps();
        assert_eq!(
            !ov.is_empty(),
            name.starts_with("overlap"),
            "{name}: {ov:?}"
        );
        // copy_payload writes the same bytes.
        let mut spill = Vec::new();
        copy_payload(&input, &index, &opts, &mut spill).unwrap();
        assert_eq!(spill, raw, "{name}");
    }
}

#[test]
fn walk_finds_the_defects_the_parser_finds() {
    let opts = ParseOptions {
        verify_hash: true,
        ..Default::default()
    };
    let a = bytes(4, 100_000);
    let raw = write_uncompressed(&[("hipv4-amdgcn-amd-amdhsa--gfx1100", &a[..])]);
    // Non-zero bytes after the last code object.
    let mut tail = raw.clone();
    tail.extend_from_slice(&[0, 0, 9]);
    // A header claiming one byte more than the payload has.
    let mut short = write_ccob(&raw, 3, Compression::Zstd).unwrap();
    let claim = u64::from_le_bytes(short[16..24].try_into().unwrap()) + 1;
    short[16..24].copy_from_slice(&claim.to_le_bytes());
    // A stored hash that does not match.
    let mut hash = write_ccob(&raw, 3, Compression::Zstd).unwrap();
    hash[24] ^= 1;
    let cases = [
        write_ccob(&tail, 3, Compression::Zstd).unwrap(),
        short,
        hash,
    ];
    for input in cases {
        let parser = parse_bundle_checked(&input, &opts).unwrap_err();
        let err = index_bundle(&input, &opts).and_then(|index| {
            walk_bundle::<Error>(
                &input,
                &index,
                &opts,
                &mut |_| Ok(()),
                &mut |_, _, _| Ok(()),
            )
        });
        let err = err.unwrap_err();
        assert_eq!(
            std::mem::discriminant(&err),
            std::mem::discriminant(&parser),
            "{err} vs {parser}"
        );
        let index = index_bundle(&input, &opts).unwrap();
        for policy in [|_| 0, |_| 1, |_| 2] {
            let e = entries_walk(&input.as_slice(), &index, &opts, policy).unwrap_err();
            assert_eq!(e.to_string(), err.to_string());
        }
    }
}

/// A source that is not a slice (as a file is), counting the bytes read.
struct Counted<'a>(&'a [u8], std::cell::Cell<u64>);

impl ReadAt for Counted<'_> {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (&self.0).read_at(offset, buf)?;
        self.1.set(self.1.get() + n as u64);
        Ok(n)
    }
}

/// Collects what [`walk_entries`] hands out, asking for `policy(i)`.
struct Collect {
    policy: fn(usize) -> u8,
    got: Handed,
}

impl EntryTarget<Error> for Collect {
    fn dest(&mut self, i: usize) -> Result<EntryDest, Error> {
        Ok(match (self.policy)(i) {
            0 => EntryDest::Skip,
            1 => {
                self.got[i] = Some(Vec::new());
                EntryDest::Chunks
            }
            // A reused buffer larger than the entry: it is cut to size.
            _ => EntryDest::Buffer(vec![0xAA; 1 << 20]),
        })
    }
    fn filled(&mut self, i: usize, buf: Vec<u8>) -> Result<(), Error> {
        assert!(self.got[i].is_none(), "entry {i} filled twice");
        self.got[i] = Some(buf);
        Ok(())
    }
    fn chunk(&mut self, i: usize, off: u64, c: &[u8]) -> Result<(), Error> {
        let g = self.got[i]
            .as_mut()
            .expect("chunk of an entry not asked for");
        assert_eq!(off as usize, g.len(), "chunks in order");
        assert!(c.len() <= rocpack_bundle::CHUNK);
        g.extend_from_slice(c);
        Ok(())
    }
}

/// Per entry, the code object handed out (`None`: not asked for).
type Handed = Vec<Option<Vec<u8>>>;

fn entries_walk(
    src: &dyn ReadAt,
    index: &BundleIndex,
    opts: &ParseOptions,
    policy: fn(usize) -> u8,
) -> Result<(WalkSummary, Handed), Error> {
    let mut c = Collect {
        policy,
        got: vec![None; index.entries.len()],
    };
    let s = walk_entries(src, index, opts, &mut c)?;
    Ok((s, c.got))
}

/// `walk_entries` hands every code object asked for (into the caller's
/// buffer, in chunks, or not at all) with the bytes the parser gives, and
/// the summary `walk_bundle` gives, from a slice and from positioned reads;
/// with every entry skipped, an uncompressed bundle's code objects are not
/// read.
#[test]
fn walk_entries_agrees_with_walk_bundle() {
    let policies: [fn(usize) -> u8; 4] = [|_| 0, |_| 1, |_| 2, |i| (i % 3) as u8];
    for hash in [false, true] {
        let opts = ParseOptions {
            walk_hash: hash,
            ..Default::default()
        };
        for (name, input) in shapes() {
            let parsed = parse_bundle(&input).unwrap();
            let index = index_bundle(&input, &opts).unwrap();
            let want = walk_bundle::<Error>(
                &input,
                &index,
                &opts,
                &mut |_| Ok(()),
                &mut |_, _, _| Ok(()),
            )
            .unwrap();
            for (pi, policy) in policies.iter().enumerate() {
                let counted = Counted(&input, Default::default());
                for src in [&input.as_slice() as &dyn ReadAt, &counted] {
                    let (summary, got) = entries_walk(src, &index, &opts, *policy).unwrap();
                    assert_eq!(summary, want, "{name} policy {pi}");
                    for (i, (g, p)) in got.iter().zip(&parsed.entries).enumerate() {
                        let asked = p.size > 0 && policy(i) != 0;
                        match g {
                            Some(g) => assert_eq!(&g[..], &*p.data, "{name} policy {pi} #{i}"),
                            None => assert!(!asked, "{name} policy {pi}: entry {i} not handed"),
                        }
                    }
                }
                if pi == 0 && parsed.ccob.is_none() && !name.starts_with("overlap") {
                    let code: u64 = index.entries.iter().map(|e| e.size).sum();
                    assert!(
                        counted.1.get() <= input.len() as u64 - code,
                        "{name}: {} bytes read of {} with {code} bytes of code skipped",
                        counted.1.get(),
                        input.len()
                    );
                }
            }
        }
    }
}

fn parse_bundle_checked(b: &[u8], opts: &ParseOptions) -> Result<(), Error> {
    rocpack_bundle::parse_bundle_with(b, opts).map(|_| ())
}

#[test]
fn walk_memory_is_a_chunk_not_the_payload() {
    let size = 64 << 20;
    let raw = overlapping(32, size);
    let ccob = write_ccob(&raw, 3, Compression::Zstd).unwrap();
    drop(raw);
    let opts = ParseOptions::default();
    let base = A.start();
    let index = index_bundle(&ccob, &opts).unwrap();
    let mut total = 0u64;
    let summary = walk_bundle::<Error>(&ccob, &index, &opts, &mut |_| Ok(()), &mut |_, _, c| {
        total += c.len() as u64;
        Ok(())
    })
    .unwrap();
    assert_eq!(summary.hash_matches, Some(true));
    let want: u64 = index.entries.iter().map(|e| e.size).sum();
    assert_eq!(total, want);
    let peak = A.peak_since(base);
    // A chunk, the zstd window (8 MiB at most for level 3 frames) and the
    // table; the payload is 64 MiB and the entries cover 2 GiB.
    assert!(
        peak < 16 << 20,
        "peak {peak} bytes live for a {size}-byte payload"
    );
}

/// A payload large enough for the MD5 to run on its own thread (fed with
/// reused chunk buffers): the computed hash is the MD5 of the decompressed
/// payload (the `md-5` crate over the parser's bytes) and a wrong stored
/// hash is reported, or refused with `verify_hash`.
#[test]
fn large_payload_hash_is_checked_on_the_second_thread() {
    use md5::Digest;
    let a = bytes(7, 20 << 20);
    let raw = write_uncompressed(&[("hipv4-amdgcn-amd-amdhsa--gfx1100", &a[..])]);
    let good = write_ccob(&raw, 3, Compression::Zstd).unwrap();
    let digest = md5::Md5::digest(&raw);
    let want = u64::from_le_bytes(digest[..8].try_into().unwrap());
    let mut bad = good.clone();
    bad[24] ^= 1;
    for (input, matches) in [(&good, true), (&bad, false)] {
        let opts = ParseOptions::default();
        let index = index_bundle(input, &opts).unwrap();
        let summary =
            walk_bundle::<Error>(input, &index, &opts, &mut |_| Ok(()), &mut |_, _, _| Ok(()))
                .unwrap();
        assert_eq!(summary.computed_hash, Some(want));
        assert_eq!(summary.hash_matches, Some(matches));
        let strict = ParseOptions {
            verify_hash: true,
            ..Default::default()
        };
        let r = walk_bundle::<Error>(input, &index, &strict, &mut |_| Ok(()), &mut |_, _, _| {
            Ok(())
        });
        assert_eq!(r.is_ok(), matches, "{r:?}");
        if !matches {
            assert!(matches!(r, Err(Error::HashMismatch { .. })), "{r:?}");
        }
    }
}

/// The CCOB encoder's window is the one asked for, with or without
/// long-distance matching: a payload whose repeats lie 4 MiB apart (like a
/// bundle of one code object per target) compresses to a fraction at a
/// 2^24 window, and does not at the level's default window (2^21 at level
/// 4). Reassembly relies on it to fit a bundle back into a `.hip_fatbin`
/// without slack at low cost.
#[test]
fn ccob_encoder_uses_the_window_asked_for() {
    let mut block = vec![0u8; 4 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in block.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let payload: Vec<u8> = block.iter().chain(block.iter()).copied().collect();
    let packed = |max_window_log: u32| {
        let params = rocpack_bundle::CcobParams {
            level: 4,
            long: false,
            max_window_log,
        };
        let mut e = rocpack_bundle::CcobEncoder::new(
            Vec::new(),
            3,
            rocpack_bundle::Method::Zstd,
            payload.len() as u64,
            params,
            None,
        )
        .unwrap();
        std::io::Write::write_all(&mut e, &payload).unwrap();
        let (out, _header, _) = e.finish().unwrap();
        out.len()
    };
    let wide = packed(24);
    let narrow = packed(21);
    assert!(
        wide < payload.len() * 6 / 10,
        "2^24 window: {wide} bytes for {} (the repeat was not found)",
        payload.len()
    );
    assert!(
        narrow > payload.len() * 9 / 10,
        "2^21 window: {narrow} bytes"
    );
}
