//! `kpack inspect` / `kpack unbundle` on every kind of input, including
//! look-alikes that must not be mis-parsed as fat binaries, and bad input.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod common;
use common::{assert_ok, inspect_json, kpack, sha256_hex, shared, tempdir};

/// `kpack inspect --json --check-hash path`, parsed.
fn inspect(path: &Path) -> Value {
    inspect_json(path, &["--check-hash"])
}

/// `kpack unbundle input <flag> out`; `flag` is `-o` or `--output-dir`
/// (both spellings are tested).
fn unbundle(input: &Path, flag: &str, out: &Path) -> Output {
    kpack(&[
        "unbundle".as_ref(),
        input.as_os_str(),
        flag.as_ref(),
        out.as_os_str(),
    ])
}

#[test]
fn every_artifact_file_is_classified_like_the_inventory() {
    let fixtures = shared().join("fixtures");
    let inv = std::fs::read_to_string(fixtures.join("artifacts-inventory.tsv")).unwrap();
    let mut seen = 0;
    for line in inv.lines().skip(1) {
        let c: Vec<&str> = line.split('\t').collect();
        let (path, kind) = (c[0], c[1]);
        if kind.starts_with("symlink") {
            continue;
        }
        let v = inspect(&fixtures.join(path));
        let n_bundles = v["bundles"].as_array().unwrap().len();
        match kind {
            "amdgpu-code-object" => {
                assert_eq!(v["kind"], "amdgpu-code-object", "{path}");
                assert_eq!(n_bundles, 0, "{path}");
            }
            "data" => {
                assert_eq!(v["kind"], "unknown", "{path}");
                assert_eq!(n_bundles, 0, "{path}");
            }
            "host-elf-no-device-code" => {
                assert_eq!(v["kind"], "elf", "{path}");
                assert_eq!(v["elf"]["state"], "host-only", "{path}");
                assert_eq!(n_bundles, 0, "{path}");
            }
            "host-elf-with-hip_fatbin" => {
                assert_eq!(v["kind"], "elf", "{path}");
                assert_eq!(v["elf"]["state"], "fat", "{path}");
                assert!(n_bundles >= 1, "{path}");
                assert!(
                    v["wrappers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|w| w["bundle"].is_u64()),
                    "{path}"
                );
            }
            "offload-bundle" => {
                assert_eq!(v["kind"], "bundle", "{path}");
                assert_eq!(n_bundles, 1, "{path}");
            }
            k => panic!("unknown inventory kind {k}"),
        }
        seen += 1;
    }
    assert!(seen > 150, "{seen}");
}

#[test]
fn a_library_that_merely_contains_the_magic_is_host_only() {
    // Like libamdhip64 / libamd_comgr: the magic string as a constant, no
    // .hip_fatbin. Appending bytes after the section data keeps a valid ELF.
    let mut so = std::fs::read(shared().join("fixtures/fatbins/libfx_hostonly.so")).unwrap();
    let at = so.len();
    so.extend_from_slice(b"\0__CLANG_OFFLOAD_BUNDLE__\0\x02\0\0\0\0\0\0\0CCOB");
    let dir = tempdir();
    let p = dir.path().join("liblookalike.so");
    std::fs::write(&p, &so).unwrap();
    let v = inspect(&p);
    assert_eq!(v["kind"], "elf");
    assert_eq!(v["elf"]["state"], "host-only");
    assert_eq!(v["bundles"].as_array().unwrap().len(), 0);
    let notes = v["notes"].to_string();
    assert!(notes.contains("outside any bundle section"), "{notes}");
    assert!(
        notes.contains(&format!("first at byte offset {}", at + 1)),
        "{notes}"
    );

    // unbundle finds nothing and creates an empty directory
    let out = dir.path().join("out");
    let r = unbundle(&p, "--output-dir", &out);
    assert_ok(&r);
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);

    // a non-ELF blob with the magic inside is "unknown", not a bundle
    let mut blob = vec![7u8; 1000];
    blob.extend_from_slice(b"__CLANG_OFFLOAD_BUNDLE__");
    blob.extend_from_slice(&[0u8; 100]);
    let p = dir.path().join("blob.dat");
    std::fs::write(&p, &blob).unwrap();
    let v = inspect(&p);
    assert_eq!(v["kind"], "unknown");
    assert_eq!(v["bundles"].as_array().unwrap().len(), 0);
    assert!(v["notes"].to_string().contains("first at byte offset 1000"));
}

#[test]
fn raw_bundles_ccob_and_kpack_files() {
    let dir = tempdir();
    let entries = [
        ("host-x86_64-unknown-linux--", Vec::new()),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx1100",
            b"\x7fELF-gfx1100-code".to_vec(),
        ),
        (
            "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
            b"\x7fELF-gfx942-code".repeat(50),
        ),
    ];
    let raw = rocpack_bundle::write_uncompressed(&entries);
    let v3 = rocpack_bundle::write_ccob(&raw, 3, rocpack_bundle::Method::Zlib).unwrap();
    for (name, bytes, kind) in [("a.bundle", &raw, "bundle"), ("a.ccob", &v3, "ccob")] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let v = inspect(&p);
        assert_eq!(v["kind"], kind);
        let cos = v["bundles"][0]["code_objects"].as_array().unwrap();
        assert_eq!(cos.len(), 3);
        for (c, (id, data)) in cos.iter().zip(&entries) {
            assert_eq!(c["target"], *id);
            assert_eq!(c["sha256"], sha256_hex(data));
        }
        if kind == "ccob" {
            assert_eq!(v["bundles"][0]["version"], 3);
            assert_eq!(v["bundles"][0]["compression"], "zlib");
            assert_eq!(v["bundles"][0]["hash_matches"], true);
        }
        // unbundle writes the device entries byte for byte
        let out = dir.path().join(format!("{name}.out"));
        let r = unbundle(&p, "-o", &out);
        assert_ok(&r);
        let gfx942 = out.join("b0-e2-hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-.hsaco");
        assert_eq!(std::fs::read(&gfx942).unwrap(), entries[2].1);
        assert_eq!(
            std::fs::read_dir(&out).unwrap().count(),
            2,
            "host entry skipped"
        );
        // a second run refuses the non-empty directory
        let r = unbundle(&p, "-o", &out);
        assert_eq!(r.status.code(), Some(2));
    }
    let golden = shared().join("fixtures/kpack-golden/test_zstd.kpack");
    let v = inspect(&golden);
    assert_eq!(v["kind"], "kpack");
    assert_eq!(v["kpack"]["compression_scheme"], "zstd-per-kernel");
    assert_eq!(
        v["kpack"]["gfx_arches"],
        serde_json::json!(["gfx1100", "gfx1101"])
    );
    let ks = v["kpack"]["kernels"].as_array().unwrap();
    assert_eq!(ks.len(), 3);
    assert_eq!(
        ks.iter()
            .map(|k| k["original_size"].as_u64().unwrap())
            .sum::<u64>(),
        1019 + 619 + 1018
    );
}

#[test]
fn unbundle_static_archive_matches_the_tsv() {
    let fixtures = shared().join("fixtures");
    let dir = tempdir();
    let out = dir.path().join("static");
    let a = fixtures.join("fatbins/libfx_static.a");
    let r = unbundle(&a, "--output-dir", &out);
    assert_ok(&r);
    let tsv = std::fs::read_to_string(fixtures.join("expected-unbundle.tsv")).unwrap();
    let mut n = 0;
    for line in tsv
        .lines()
        .filter(|l| l.starts_with("fatbins/libfx_static.a("))
    {
        let c: Vec<&str> = line.split('\t').collect();
        if c[7].starts_with("host-") {
            continue;
        }
        let member = c[0].split_once('(').unwrap().1.trim_end_matches(')');
        let f = out
            .join(member)
            .join(format!("b{}-e{}-{}.hsaco", c[1], c[5], c[7]));
        let bytes = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(sha256_hex(&bytes), c[8], "{}", f.display());
        n += 1;
    }
    assert_eq!(n, 6);
    let listed = String::from_utf8(r.stdout).unwrap();
    assert_eq!(listed.lines().count(), 6, "{listed}");
}

#[test]
fn bad_input_exits_2_naming_the_offset_and_leaves_nothing() {
    let dir = tempdir();
    // fat binary whose bundle entry table is corrupted (entry count huge)
    let mut so = std::fs::read(shared().join("fixtures/fatbins/libfx_multi.so")).unwrap();
    so[12288 + 24..12288 + 32].copy_from_slice(&u64::MAX.to_le_bytes());
    let p = dir.path().join("bad.so");
    std::fs::write(&p, &so).unwrap();
    let r = kpack(&["inspect".as_ref(), p.as_os_str()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("bad.so"), "{err}");
    // the absolute offset of the bad field, in decimal or hex
    assert!(
        err.contains(&(12288 + 24).to_string()) || err.contains(&format!("{:#x}", 12288 + 24)),
        "{err}"
    );
    let out = dir.path().join("out");
    let r = unbundle(&p, "-o", &out);
    assert_eq!(r.status.code(), Some(2));
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "temporary files left behind"
    );
    // truncated file
    let p2 = dir.path().join("trunc.so");
    std::fs::write(&p2, &so[..20000]).unwrap();
    let r = kpack(&["inspect".as_ref(), "--json".as_ref(), p2.as_os_str()]);
    assert_eq!(r.status.code(), Some(2));
    assert!(r.stdout.is_empty());
    // missing file, empty file
    let r = kpack(&["inspect".as_ref(), dir.path().join("nope").as_os_str()]);
    assert_eq!(r.status.code(), Some(2));
    let e = dir.path().join("empty");
    std::fs::write(&e, b"").unwrap();
    let v = inspect(&e);
    assert_eq!(v["kind"], "unknown");
}

#[test]
fn json_is_deterministic_and_text_mode_works() {
    let p = shared().join("fixtures/fatbins/libfx_two_tu.so");
    let a = kpack(&["inspect".as_ref(), "--json".as_ref(), p.as_os_str()]);
    let b = kpack(&["inspect".as_ref(), "--json".as_ref(), p.as_os_str()]);
    assert_eq!(a.stdout, b.stdout);
    let v: Value = serde_json::from_slice(&a.stdout).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "file",
            "file_offset",
            "size",
            "kind",
            "elf",
            "bundles",
            "wrappers",
            "marker",
            "kpack",
            "members",
            "notes"
        ]
    );
    let t = kpack(&["inspect".as_ref(), p.as_os_str()]);
    assert!(t.status.success());
    let text = String::from_utf8(t.stdout).unwrap();
    assert!(
        text.contains("bundle 1 [.hip_fatbin] at 53248 size 37096 uncompressed"),
        "{text}"
    );
}

#[test]
fn split_binary_shows_hipk_wrappers_and_marker() {
    let so = std::fs::read(shared().join("fixtures/fatbins/libfx_two_tu.so")).unwrap();
    let marker = rocpack_kpack::Marker::new(["../.kpack/x_@GFXARCH@.kpack"], "lib/libfx_two_tu.so");
    let split = rocpack_elf::split_host(&so, &marker.encode()).expect("split");
    let dir = tempdir();
    let p = dir.path().join("split.so");
    std::fs::write(&p, &split).unwrap();
    let v = inspect(&p);
    assert_eq!(v["kind"], "elf");
    assert_eq!(v["elf"]["state"], "split");
    assert_eq!(v["bundles"].as_array().unwrap().len(), 0);
    let ws = v["wrappers"].as_array().unwrap();
    assert_eq!(ws.len(), 2);
    for (i, w) in ws.iter().enumerate() {
        assert_eq!(w["magic"], "HIPK");
        assert_eq!(w["points_to_marker"], true);
        assert_eq!(w["co_index"], i);
    }
    assert_eq!(v["marker"]["kernel_name"], "lib/libfx_two_tu.so");
    assert_eq!(
        v["marker"]["kpack_search_paths"],
        serde_json::json!(["../.kpack/x_@GFXARCH@.kpack"])
    );
}
