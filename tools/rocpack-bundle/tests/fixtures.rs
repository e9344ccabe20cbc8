//! The library against the real fixtures: every bundle row of
//! expected-unbundle.tsv whose bundle has a file offset is parsed straight
//! from the file slice (CCOB hashes verified), and every code object's
//! target, size and sha256 must match.

use rocpack_testsupport as common;

use std::collections::BTreeMap;

use rocpack_bundle::*;

#[test]
fn every_sliceable_tsv_row_matches() {
    let shared = common::shared();
    let tsv = std::fs::read_to_string(shared.join("fixtures/expected-unbundle.tsv"))
        .expect("fixtures/expected-unbundle.tsv (set ROCPACK_SHARED)");
    // (file, bundle offset, size) -> rows
    let mut groups: BTreeMap<(String, u64, u64), Vec<Vec<String>>> = BTreeMap::new();
    let mut rows = 0;
    for line in tsv.lines().skip(1) {
        let c: Vec<String> = line.split('\t').map(str::to_string).collect();
        let (Ok(off), Ok(size)) = (c[2].parse::<u64>(), c[3].parse::<u64>()) else {
            continue;
        };
        // archive members are checked through the CLI test
        if c[0].contains('(') {
            continue;
        }
        rows += 1;
        groups.entry((c[0].clone(), off, size)).or_default().push(c);
    }
    assert!(rows > 100, "only {rows} sliceable rows");
    let opts = ParseOptions {
        verify_hash: true,
        ..Default::default()
    };
    for ((file, off, size), want) in groups {
        let data = std::fs::read(shared.join("fixtures").join(&file)).unwrap();
        let bytes = &data[off as usize..];
        let b = parse_bundle_with(bytes, &opts).unwrap_or_else(|e| panic!("{file}@{off}: {e}"));
        assert_eq!(b.len, size, "{file}@{off}: bundle size");
        assert_eq!(b.format.to_string(), want[0][4], "{file}@{off}: format");
        assert_eq!(b.entries.len(), want.len(), "{file}@{off}: entry count");
        for row in &want {
            let e = b
                .entries
                .iter()
                .find(|e| e.id.as_str() == row[7])
                .unwrap_or_else(|| panic!("{file}@{off}: no entry {}", row[7]));
            assert_eq!(e.size.to_string(), row[9], "{file}@{off} {}: size", row[7]);
            assert_eq!(
                common::sha256_hex(&e.data),
                row[8],
                "{file}@{off} {}: sha256",
                row[7]
            );
            if b.format == Format::Uncompressed {
                assert_eq!(
                    e.offset.to_string(),
                    row[6],
                    "{file}@{off} {}: offset",
                    row[7]
                );
            }
        }
    }
}

#[test]
fn clang19_ccob_hash_is_md5_low64() {
    // libfx_multi_compressed.so: CCOB v2 zstd at file offset 12288, 3871 bytes
    let data =
        std::fs::read(common::shared().join("fixtures/fatbins/libfx_multi_compressed.so")).unwrap();
    let c = &data[12288..12288 + 3871];
    let h = parse_ccob_header(c).unwrap();
    assert_eq!(
        (h.version, h.method, h.total_size, h.uncompressed_size),
        (2, Method::Zstd, Some(3871), 94656)
    );
    let (_, used, payload) = decompress_ccob(c, &ParseOptions::default()).unwrap();
    assert_eq!(used, 3871);
    assert_eq!(ccob_hash(&payload), h.hash);
    // and re-compressing with our writer gives an equivalent CCOB
    let again = write_ccob(&payload, 2, Method::Zstd).unwrap();
    assert_eq!(&again[..8], &c[..8]);
    assert_eq!(&again[12..24], &c[12..24]); // sizes + hash
}
