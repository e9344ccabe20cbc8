//! Hostile inputs: every truncation, bit flips, oversized counts and sizes
//! give an error or a value — never a panic, never an allocation beyond a
//! small multiple of the input.

use rocpack_testsupport as common;

use rocpack_bundle::*;

fn seeds() -> Vec<Vec<u8>> {
    let entries = vec![
        ("host-x86_64-unknown-linux--", Vec::new()),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
            common::pseudo_random(7, 700),
        ),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
            common::pseudo_random(8, 300),
        ),
    ];
    let raw = write_uncompressed_aligned(&entries, 64);
    let mut v = vec![raw.clone()];
    for ver in [1, 2, 3] {
        for m in [Method::Zlib, Method::Zstd] {
            v.push(write_ccob(&raw, ver, m).unwrap());
        }
    }
    v
}

/// Exercise every entry point on one input.
fn exercise(b: &[u8]) {
    let opts = ParseOptions {
        verify_hash: true,
        max_decompressed_size: 1 << 24,
        ..Default::default()
    };
    let _ = parse_bundle_with(b, &opts);
    let _ = parse_bundle(b);
    let _ = bundle_extent(b);
    let _ = parse_ccob_header(b);
    if let Ok(spans) = find_bundles(b) {
        for s in spans {
            assert!(s.offset + s.len <= b.len() as u64);
            let _ = parse_bundle_with(&b[s.offset as usize..], &opts);
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    for seed in seeds() {
        for n in 0..seed.len() {
            let cut = &seed[..n];
            exercise(cut);
            assert!(
                parse_bundle(cut).is_err(),
                "prefix of {n}/{} bytes parsed",
                seed.len()
            );
        }
        assert!(parse_bundle(&seed).is_ok());
    }
}

#[test]
fn bit_flips_never_panic() {
    for seed in seeds() {
        let step = (seed.len() / 600).max(1);
        for i in (0..seed.len()).step_by(step) {
            for bit in [0u8, 3, 7] {
                let mut m = seed.clone();
                m[i] ^= 1 << bit;
                exercise(&m);
            }
        }
    }
}

#[test]
fn oversized_counts_and_sizes_are_rejected_cheaply() {
    let raw = write_uncompressed(&[("hipv4-amdgcn-amd-amdhsa--gfx1100", b"abc")]);
    // entry count 2^63
    let mut m = raw.clone();
    m[24..32].copy_from_slice(&(1u64 << 63).to_le_bytes());
    let e = parse_bundle(&m).unwrap_err();
    assert_eq!(e.offset(), Some(24), "{e}");
    // entry size past the end
    let mut m = raw.clone();
    m[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        parse_bundle(&m),
        Err(Error::Malformed { offset: 32, .. })
    ));
    // offset + size overflow
    let mut m = raw.clone();
    m[32..40].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
    assert!(parse_bundle(&m).is_err());
    // id length huge
    let mut m = raw.clone();
    m[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(parse_bundle(&m), Err(Error::Truncated { .. })));

    // CCOB claiming 2^60 uncompressed bytes (v3) and 4 GiB (v2)
    let mut c = write_ccob(&raw, 3, Method::Zstd).unwrap();
    c[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(parse_bundle(&c).is_err());
    let mut c = write_ccob(&raw, 2, Method::Zlib).unwrap();
    c[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(parse_bundle(&c).is_err());
    // total size beyond the input, and smaller than the header
    let mut c = write_ccob(&raw, 2, Method::Zstd).unwrap();
    c[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(parse_bundle(&c), Err(Error::Truncated { .. })));
    c[8..12].copy_from_slice(&3u32.to_le_bytes());
    assert!(matches!(parse_bundle(&c), Err(Error::Malformed { .. })));
    // a zstd bomb: 2 MiB of zeros claimed and delivered, but limit 1 MiB
    let zeros = vec![0u8; 2 << 20];
    let mut bomb = write_ccob(&zeros, 3, Method::Zstd).unwrap();
    let opts = ParseOptions {
        verify_hash: false,
        max_decompressed_size: 1 << 20,
        ..Default::default()
    };
    assert!(decompress_ccob(&bomb, &opts).is_err());
    // ... and more than MAX_CCOB_RATIO, claimed by a tiny payload
    bomb.truncate(40);
    bomb[8..16].copy_from_slice(&40u64.to_le_bytes());
    bomb[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(decompress_ccob(&bomb, &ParseOptions::default()).is_err());
    // unknown version and method
    let mut c = write_ccob(&raw, 2, Method::Zstd).unwrap();
    c[4] = 9;
    assert!(matches!(
        parse_bundle(&c),
        Err(Error::Unsupported { offset: 4, .. })
    ));
    c[4] = 2;
    c[6] = 7;
    assert!(matches!(
        parse_bundle(&c),
        Err(Error::Unsupported { offset: 6, .. })
    ));
}

#[test]
fn decompressed_payload_must_be_a_bundle() {
    let c = write_ccob(b"not a bundle at all", 2, Method::Zstd).unwrap();
    let e = parse_bundle(&c).unwrap_err();
    assert!(e.to_string().contains("not an uncompressed bundle"), "{e}");
    let c = write_ccob(b"", 2, Method::Zlib).unwrap();
    assert!(parse_bundle(&c).is_err());
}

#[test]
fn target_id_round_trips_or_errors() {
    for s in [
        "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
        "x",
        "-",
        "--",
        "host",
        "host-",
        "gfx",
        "gfx:",
        "hipv4-amdgcn-amd-amdhsa--gfx10-3-generic:xnack-",
        "\u{e9}",
        "a-b-c-d-e-f-g",
    ] {
        if let Ok(t) = TargetId::parse(s) {
            assert_eq!(t.to_string(), s);
            let _ = compatible_targets(&t);
            let _ = isa_matches(&t, &t);
        }
    }
}
