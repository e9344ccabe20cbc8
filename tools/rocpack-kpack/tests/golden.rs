//! Golden interop tests against rocm-kpack's own test assets
//! (`runtime/tests/test_assets/*.kpack|*.kpm`, copied to the shared fixtures).

use rocpack_kpack::{Compression, KpackReader, KpackWriter, Kpm, Scheme};
use rocpack_testsupport::golden;

fn read(name: &str) -> Vec<u8> {
    std::fs::read(golden(name)).unwrap_or_else(|e| panic!("{}: {e}", golden(name).display()))
}

#[test]
fn noop_decodes_as_documented() {
    let r = KpackReader::open(golden("test_noop.kpack")).unwrap();
    assert_eq!(r.scheme(), Scheme::None);
    assert_eq!(r.group_name(), "test");
    assert_eq!(r.gfx_arch_family(), "gfx900X");
    assert_eq!(r.gfx_arches(), ["gfx900", "gfx906"]);
    assert_eq!(r.toc_offset(), 570);
    assert_eq!(r.bytes().len(), 903);
    let got: Vec<(&str, &str, u32, u64)> = r
        .entries()
        .iter()
        .map(|e| {
            (
                e.key.as_str(),
                e.target.as_str(),
                e.ordinal,
                e.original_size,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("lib/libtest.so#0", "gfx900", 0, 119),
            ("lib/libtest.so#0", "gfx906", 1, 219),
            ("bin/testapp#0", "gfx900", 2, 168)
        ]
    );
    let locs: Vec<(u64, u64)> = (0..3)
        .map(|i| {
            let l = r.blob_location(i).unwrap();
            (l.offset, l.size)
        })
        .collect();
    assert_eq!(locs, [(64, 119), (183, 219), (402, 168)]);
    let k = r.get("lib/libtest.so#0", "gfx900").unwrap();
    assert!(k.starts_with(b"KERNEL1_GFX900_DATA"), "{:?}", &k[..20]);
    // Zero-copy: the slice points into the mapping.
    assert!(matches!(k, std::borrow::Cow::Borrowed(_)));
    let base = r.bytes().as_ptr() as usize;
    assert_eq!(k.as_ptr() as usize - base, 64);
    assert!(r.get("lib/libtest.so#0", "gfx1100").is_err());
    assert_eq!(r.arch(), None);
    let keys: Vec<&str> = r.binary_keys().collect();
    assert_eq!(keys, ["lib/libtest.so#0", "bin/testapp#0"]);
}

#[test]
fn zstd_decodes_as_documented() {
    let r = KpackReader::open(golden("test_zstd.kpack")).unwrap();
    assert_eq!(r.scheme(), Scheme::ZstdPerKernel);
    assert_eq!(r.group_name(), "test");
    assert_eq!(r.gfx_arch_family(), "gfx110X");
    assert_eq!(r.gfx_arches(), ["gfx1100", "gfx1101"]);
    let z = r.zstd_region().unwrap();
    assert_eq!((z.offset, z.size), (64, 134));
    let sizes: Vec<(String, String, u32, usize)> = r
        .entries()
        .iter()
        .map(|e| {
            let d = r.get_entry(e).unwrap();
            assert_eq!(d.len() as u64, e.original_size);
            (e.key.clone(), e.target.clone(), e.ordinal, d.len())
        })
        .collect();
    assert_eq!(
        sizes,
        [
            ("lib/libhip.so#0".into(), "gfx1100".into(), 0, 1019),
            ("lib/libhip.so#0".into(), "gfx1101".into(), 1, 619),
            ("bin/hiptest#0".into(), "gfx1100".into(), 2, 1018)
        ]
    );
    assert!(r
        .get("lib/libhip.so#0", "gfx1100")
        .unwrap()
        .starts_with(b"HIP_KERNEL_GFX1100_A"));
}

#[test]
fn noop_rebuilt_byte_for_byte() {
    let orig = read("test_noop.kpack");
    let r = KpackReader::from_bytes(&orig).unwrap();
    assert_eq!(
        r.to_writer(Compression::None).unwrap().to_vec().unwrap(),
        orig
    );
}

#[test]
fn zstd_rebuilt_byte_for_byte() {
    let orig = read("test_zstd.kpack");
    let r = KpackReader::from_bytes(&orig).unwrap();
    assert_eq!(
        r.to_writer(Compression::zstd()).unwrap().to_vec().unwrap(),
        orig
    );
}

/// Rebuild from the code objects alone, with the parameters the reference
/// test generator used (group, family, arch list, add order).
fn rebuild_from_objects(
    name: &str,
    compression: Compression,
    group: &str,
    family: &str,
    arches: &[&str],
) {
    let orig = read(name);
    let objects: Vec<(String, String, Vec<u8>)> = {
        let r = KpackReader::from_bytes(&orig).unwrap();
        r.entries_by_ordinal()
            .into_iter()
            .map(|e| {
                (
                    e.key.clone(),
                    e.target.clone(),
                    r.get_entry(e).unwrap().into_owned(),
                )
            })
            .collect()
    };
    let mut w = KpackWriter::new(compression);
    // ROCm's Python writer: frames without content checksums.
    w.content_checksum(false);
    w.group_name(group)
        .arch_family(family)
        .arches(arches.iter().copied());
    for (key, target, data) in objects {
        w.add(&key, &target, data).unwrap();
    }
    assert_eq!(w.to_vec().unwrap(), orig, "{name}");
    // And through a file on disk.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(name);
    w.write_to_path(&out).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), orig);
}

#[test]
fn noop_rebuilt_from_code_objects() {
    rebuild_from_objects(
        "test_noop.kpack",
        Compression::None,
        "test",
        "gfx900X",
        &["gfx900", "gfx906"],
    );
}

#[test]
fn zstd_rebuilt_from_code_objects() {
    rebuild_from_objects(
        "test_zstd.kpack",
        Compression::Zstd { level: 3 },
        "test",
        "gfx110X",
        &["gfx1100", "gfx1101"],
    );
}

#[test]
fn kpm_files_decode_and_reencode() {
    let noop = Kpm::open(golden("test_noop.kpm")).unwrap();
    assert_eq!(noop.format_version, 1);
    assert_eq!(noop.component_name, "test_noop");
    assert_eq!(noop.prefix, "lib");
    let files: Vec<(&str, &str, u64, u64)> = noop
        .kpack_files
        .iter()
        .map(|f| (f.arch.as_str(), f.file.as_str(), f.size, f.kernel_count))
        .collect();
    assert_eq!(
        files,
        [
            ("gfx900", "test_noop.kpack", 903, 2),
            ("gfx906", "test_noop.kpack", 903, 1)
        ]
    );

    let zstd = Kpm::open(golden("test_zstd.kpm")).unwrap();
    assert_eq!(zstd.component_name, "test_zstd");
    let archs: Vec<&str> = zstd.kpack_files.iter().map(|f| f.arch.as_str()).collect();
    assert_eq!(archs, ["gfx1100", "gfx1101"]);
    assert!(zstd
        .kpack_files
        .iter()
        .all(|f| f.size == 518 && f.file == "test_zstd.kpack"));

    let partial = Kpm::open(golden("test_partial.kpm")).unwrap();
    assert_eq!(partial.component_name, "test_partial");
    assert_eq!(partial.kpack_files.len(), 1);
    assert_eq!(partial.kpack_files[0].arch, "gfx900");

    for name in ["test_noop.kpm", "test_zstd.kpm", "test_partial.kpm"] {
        let bytes = read(name);
        assert_eq!(
            Kpm::decode(&bytes).unwrap().encode().unwrap(),
            bytes,
            "{name}"
        );
    }
}

#[test]
fn kpm_counts_agree_with_archives() {
    // The manifests describe the archives next to them.
    for (kpm, kpack) in [
        ("test_noop.kpm", "test_noop.kpack"),
        ("test_zstd.kpm", "test_zstd.kpack"),
    ] {
        let m = Kpm::open(golden(kpm)).unwrap();
        let r = KpackReader::open(golden(kpack)).unwrap();
        for f in &m.kpack_files {
            assert_eq!(f.size, r.bytes().len() as u64);
            let n = r.entries().iter().filter(|e| e.target == f.arch).count() as u64;
            assert_eq!(n, f.kernel_count, "{kpm} {}", f.arch);
        }
    }
}
