//! `kpack reassemble`: split fixtures with rocpack-elf, pack their code
//! objects per arch with rocpack-kpack (TOC key `<kernel_name>#<co_index>`),
//! then rebuild with the CLI and compare code objects with the original.

use std::path::{Path, PathBuf};
use std::process::Command;

use rocpack_kpack::{Compression, KpackWriter, Marker};

mod common;
use common::{fixtures, KPACK};

/// Sorted (target id, bytes) per bundle.
fn code_objects(data: &[u8]) -> Vec<Vec<(String, Vec<u8>)>> {
    let info = rocpack_elf::analyze(data).unwrap();
    (0..info.bundles.len())
        .map(|i| {
            let b =
                rocpack_bundle::parse_bundle(rocpack_elf::bundle_bytes(data, &info, i).unwrap())
                    .unwrap();
            let mut v: Vec<_> = b
                .device_entries()
                .map(|e| (e.id.as_str().to_string(), e.data.to_vec()))
                .collect();
            v.sort();
            v
        })
        .collect()
}

/// Split `data`, write the host file and per-arch .kpack files under `dir`.
fn split_and_pack(data: &[u8], dir: &Path, compression: Compression) -> PathBuf {
    let marker = Marker::new(["../.kpack/test_@GFXARCH@.kpack"], "lib/fixture").encode();
    let host = rocpack_elf::split_host(data, &marker).unwrap();
    let info = rocpack_elf::analyze(data).unwrap();
    let mut per_arch: std::collections::BTreeMap<String, KpackWriter<'static>> = Default::default();
    for i in 0..info.bundles.len() {
        let b = rocpack_bundle::parse_bundle(rocpack_elf::bundle_bytes(data, &info, i).unwrap())
            .unwrap();
        for e in b.device_entries() {
            let arch = e.id.target_id().to_string();
            let w = per_arch.entry(arch.clone()).or_insert_with(|| {
                let mut w = KpackWriter::new(compression);
                w.arches([arch.clone()]);
                w
            });
            w.add(&format!("lib/fixture#{i}"), &arch, e.data.to_vec())
                .unwrap();
        }
    }
    let kdir = dir.join(".kpack");
    std::fs::create_dir_all(&kdir).unwrap();
    for (arch, w) in per_arch {
        let name = format!("test_{}.kpack", arch.replace(':', "_"));
        w.write_to_path(kdir.join(name)).unwrap();
    }
    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    let p = libdir.join("fixture");
    std::fs::write(&p, host).unwrap();
    p
}

#[test]
fn reassemble_cli_round_trips_every_fixture() {
    let dir = fixtures().join("fatbins");
    if !dir.is_dir() {
        assert!(std::env::var_os("CI").is_none(), "fixtures missing");
        eprintln!("note: fixtures missing, skipping");
        return;
    }
    for (n, name) in [
        "libfx_multi.so",
        "libfx_multi_compressed.so",
        "libfx_mixed.so",
        "libfx_two_tu.so",
        "libfx_rdc.so",
        "libfx_relr.so",
        "fx_app_nopie",
        "libfx_generic.so",
    ]
    .into_iter()
    .enumerate()
    {
        let data = std::fs::read(dir.join(name)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let comp = if n % 2 == 0 {
            Compression::None
        } else {
            Compression::Zstd { level: 3 }
        };
        let host = split_and_pack(&data, tmp.path(), comp);
        let out = tmp.path().join("out.bin");
        let o = Command::new(KPACK)
            .arg("reassemble")
            .arg("--host")
            .arg(&host)
            .arg("--kpack-dir")
            .arg(tmp.path().join(".kpack"))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let back = std::fs::read(&out).unwrap();
        assert_eq!(code_objects(&back), code_objects(&data), "{name}");
    }
}

#[test]
fn reassemble_cli_fails_with_exit_2_on_missing_kpack() {
    let p = fixtures().join("fatbins/libfx_multi.so");
    if !p.exists() {
        return;
    }
    let data = std::fs::read(p).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let host = split_and_pack(&data, tmp.path(), Compression::None);
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = tmp.path().join("out.bin");
    let o = Command::new(KPACK)
        .args(["reassemble", "--host"])
        .arg(&host)
        .arg("--kpack-dir")
        .arg(&empty)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists(), "no partial output");
}

/// `kpack split` of the fixture `name` (as `lib/<name>` of an artifact)
/// under `dir`: the split host file and the split output directory.
fn cli_split(name: &str, dir: &Path) -> (PathBuf, PathBuf) {
    let fat = std::fs::read(fixtures().join("fatbins").join(name)).unwrap();
    let art = common::artifact_with(dir, name, &fat);
    let out = dir.join("split");
    let o = common::split(&art, "x", &out, &[]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    (out.join("x_generic/lib").join(name), out)
}

/// `kpack reassemble --host host --kpack-dir kpacks -o out`.
fn cli_reassemble(host: &Path, kpacks: &Path, out: &Path) -> std::process::Output {
    common::kpack(&[
        "reassemble",
        "--host",
        common::s(host),
        "--kpack-dir",
        common::s(kpacks),
        "-o",
        common::s(out),
    ])
}

#[test]
fn reassemble_says_which_compressed_bundles_were_recompressed() {
    if !fixtures().join("fatbins").is_dir() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Bundle 0 uncompressed, bundle 1 a CCOB.
    let (host, kpacks) = cli_split("libfx_mixed.so", tmp.path());
    let out = tmp.path().join("back.so");
    let o = cli_reassemble(&host, &kpacks, &out);
    let err = common::stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("differs from the original"), "{err}");
    assert!(
        err.contains("1 compressed bundle(s) recompressed (bundle 1)"),
        "{err}"
    );
    // An all-uncompressed file comes back byte for byte and says nothing.
    let (host, kpacks) = cli_split("libfx_multi.so", &tmp.path().join("m"));
    let out = tmp.path().join("multi.so");
    let o = cli_reassemble(&host, &kpacks, &out);
    let err = common::stderr(&o);
    assert!(o.status.success() && !err.contains("note:"), "{err}");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(fixtures().join("fatbins/libfx_multi.so")).unwrap()
    );
}

#[test]
fn a_missing_archive_member_code_object_is_not_reported_as_a_layout_error() {
    if !fixtures().join("fatbins").is_dir() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (host, _) = cli_split("libfx_static.a", &tmp.path().join("a"));
    // Archives of another binary: none holds the members' code objects.
    let (_, other) = cli_split("libfx_multi.so", &tmp.path().join("b"));
    let out = tmp.path().join("back.a");
    let o = cli_reassemble(&host, &other, &out);
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no code objects for"), "{err}");
    assert!(!err.contains("layout"), "{err}");
    assert!(!out.exists());
}
