//! `kpack pack` / `kpack unpack` driven through the real binary.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{golden, kpack, kpack_ok as ok, s, KPACK};

#[test]
fn unpack_then_pack_reproduces_golden_files() {
    for name in ["test_noop.kpack", "test_zstd.kpack"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("objs");
        let listing = ok(&["unpack", s(&golden(name)), "--output-dir", s(&out)]);
        assert_eq!(listing.lines().count(), 3, "{listing}");
        let rebuilt = dir.path().join(name);
        ok(&["pack", "--input-dir", s(&out), "-o", s(&rebuilt)]);
        assert_eq!(
            std::fs::read(&rebuilt).unwrap(),
            std::fs::read(golden(name)).unwrap(),
            "{name}"
        );
    }
}

/// `kpack unpack` of the golden archive `name` into `objs`; returns the
/// path of an unpacked code object given its file name.
fn unpack_golden(name: &str, objs: &Path) -> impl Fn(&str) -> String {
    ok(&["unpack", s(&golden(name)), "--output-dir", s(objs)]);
    let objs = objs.to_path_buf();
    move |n| s(&objs.join(n)).to_owned()
}

#[test]
fn pack_from_code_objects_reproduces_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    let f = unpack_golden("test_zstd.kpack", &dir.path().join("objs"));
    let out = dir.path().join("z.kpack");
    ok(&[
        "pack",
        "--compression",
        "zstd",
        "--no-zstd-checksum",
        "--group-name",
        "test",
        "--arch-family",
        "gfx110X",
        "--arch",
        "gfx1100",
        "--arch",
        "gfx1101",
        "--entry",
        "lib/libhip.so#0",
        "gfx1100",
        &f("0000_lib_libhip.so#0_gfx1100.hsaco"),
        "--entry",
        "lib/libhip.so#0",
        "gfx1101",
        &f("0001_lib_libhip.so#0_gfx1101.hsaco"),
        "--entry",
        "bin/hiptest#0",
        "gfx1100",
        &f("0002_bin_hiptest#0_gfx1100.hsaco"),
        "-o",
        s(&out),
    ]);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(golden("test_zstd.kpack")).unwrap()
    );

    // Same for the uncompressed one, mixing --code-object (one binary) and --entry.
    let f = unpack_golden("test_noop.kpack", &dir.path().join("noop"));
    let out = dir.path().join("n.kpack");
    ok(&[
        "pack",
        "--compression",
        "none",
        "--group-name",
        "test",
        "--arch-family",
        "gfx900X",
        "--arch",
        "gfx900",
        "--arch",
        "gfx906",
        "--kernel-name",
        "lib/libtest.so",
        "--code-object",
        &format!("gfx900={}", f("0000_lib_libtest.so#0_gfx900.hsaco")),
        "--code-object",
        &format!("gfx906={}", f("0001_lib_libtest.so#0_gfx906.hsaco")),
        "--entry",
        "bin/testapp#0",
        "gfx900",
        &f("0002_bin_testapp#0_gfx900.hsaco"),
        "-o",
        s(&out),
    ]);
    // --entry items come before --code-object items (documented order), so
    // ordinals differ from the golden file; contents must still match.
    let a = rocpack_kpack::KpackReader::open(&out).unwrap();
    let g = rocpack_kpack::KpackReader::open(golden("test_noop.kpack")).unwrap();
    for e in g.entries() {
        assert_eq!(
            a.get(&e.key, &e.target).unwrap(),
            g.get(&e.key, &e.target).unwrap()
        );
    }
}

#[test]
fn code_objects_round_trip_and_index_per_target() {
    let dir = tempfile::tempdir().unwrap();
    let inputs: Vec<(String, PathBuf, Vec<u8>)> =
        [("gfx1100", 0u8), ("gfx90a:xnack+", 1), ("gfx1100", 2)]
            .iter()
            .map(|(t, i)| {
                let p = dir.path().join(format!("in{i}.co"));
                let data: Vec<u8> = (0..1000u32)
                    .map(|x| (x * (u32::from(*i) + 3) % 251) as u8)
                    .collect();
                std::fs::write(&p, &data).unwrap();
                ((*t).to_owned(), p, data)
            })
            .collect();
    for comp in ["none", "zstd", "zstd:19"] {
        let out = dir.path().join(format!("x-{comp}.kpack"));
        let mut args: Vec<String> = vec![
            "pack".into(),
            "--kernel-name".into(),
            "hip/lib/libx.so".into(),
        ];
        for (t, p, _) in &inputs {
            args.push("--code-object".into());
            args.push(format!("{t}={}", p.display()));
        }
        args.extend([
            "--compression".into(),
            comp.into(),
            "-o".into(),
            out.display().to_string(),
        ]);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&a);

        let r = rocpack_kpack::KpackReader::open(&out).unwrap();
        let keys: Vec<(&str, &str)> = r.kernels().collect();
        assert_eq!(
            keys,
            [
                ("hip/lib/libx.so#0", "gfx1100"),
                ("hip/lib/libx.so#0", "gfx90a:xnack+"),
                ("hip/lib/libx.so#1", "gfx1100")
            ],
            "TOC groups by binary key; ordinals follow the command line"
        );
        assert_eq!(r.entry("hip/lib/libx.so#1", "gfx1100").unwrap().ordinal, 2);
        assert_eq!(r.gfx_arches(), ["gfx1100", "gfx90a:xnack+"]);

        let un = dir.path().join(format!("un-{comp}"));
        ok(&["unpack", s(&out), "--output-dir", s(&un)]);
        let m = rocpack_kpack::UnpackManifest::read(&un).unwrap();
        for k in &m.kernels {
            let want = match (k.key.as_str(), k.target.as_str()) {
                ("hip/lib/libx.so#0", "gfx1100") => &inputs[0].2,
                ("hip/lib/libx.so#0", "gfx90a:xnack+") => &inputs[1].2,
                ("hip/lib/libx.so#1", "gfx1100") => &inputs[2].2,
                other => panic!("{other:?}"),
            };
            assert_eq!(&std::fs::read(un.join(&k.file)).unwrap(), want);
        }
        // Re-pack from the unpacked dir: identical archive, scheme kept.
        let again = dir.path().join(format!("again-{comp}.kpack"));
        let level_args: Vec<&str> = if comp == "zstd:19" {
            vec!["--compression", "zstd:19"]
        } else {
            vec![]
        };
        let mut a = vec!["pack", "--input-dir", s(&un), "-o", s(&again)];
        a.extend(level_args);
        ok(&a);
        assert_eq!(
            std::fs::read(&again).unwrap(),
            std::fs::read(&out).unwrap(),
            "{comp}"
        );
    }
}

#[test]
fn plain_directory_from_an_unbundler() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("unbundled");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(
        src.join("libx-hipv4-amdgcn-amd-amdhsa--gfx1100.hsaco"),
        b"A",
    )
    .unwrap();
    std::fs::write(
        src.join("libx-hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-.hsaco"),
        b"B",
    )
    .unwrap();
    std::fs::write(src.join("gfx906.co"), b"C").unwrap();
    // kpack unbundle style, more than 10 bundles: indices follow bundle order.
    for b in 0..12 {
        std::fs::write(
            src.join(format!("b{b}-e1-hipv4-amdgcn-amd-amdhsa--gfx90a.hsaco")),
            format!("bundle{b}"),
        )
        .unwrap();
    }
    let out = dir.path().join("o.kpack");
    // Without --kernel-name there is no key stem.
    let o = kpack(&["pack", "--input-dir", s(&src), "-o", s(&out)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--kernel-name"));
    assert!(!out.exists());
    ok(&[
        "pack",
        "--input-dir",
        s(&src),
        "--kernel-name",
        "lib/libx.so",
        "-o",
        s(&out),
    ]);
    let r = rocpack_kpack::KpackReader::open(&out).unwrap();
    let keys: Vec<(&str, &str)> = r.kernels().filter(|(_, t)| *t != "gfx90a").collect();
    assert_eq!(
        keys,
        [
            ("lib/libx.so#0", "gfx906"),
            ("lib/libx.so#0", "gfx942:sramecc+:xnack-"),
            ("lib/libx.so#0", "gfx1100")
        ]
    );
    assert_eq!(
        &*r.get("lib/libx.so#0", "gfx942:sramecc+:xnack-").unwrap(),
        b"B"
    );
}

#[test]
fn bad_input_exits_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.kpack");
    for args in [
        vec!["pack", "-o", s(&out)],
        vec![
            "pack",
            "--kernel-name",
            "k",
            "--code-object",
            "gfx900",
            "-o",
            s(&out),
        ],
        vec![
            "pack",
            "--kernel-name",
            "k",
            "--code-object",
            "gfx900=/nonexistent/x",
            "-o",
            s(&out),
        ],
        vec![
            "pack",
            "--compression",
            "lz4",
            "--entry",
            "k#0",
            "gfx900",
            "/dev/null",
            "-o",
            s(&out),
        ],
    ] {
        let o = kpack(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(!o.stderr.is_empty());
        assert!(!out.exists(), "no partial output for {args:?}");
    }
    let bad = dir.path().join("bad.kpack");
    let mut d = std::fs::read(golden("test_noop.kpack")).unwrap();
    d.truncate(600);
    std::fs::write(&bad, &d).unwrap();
    let o = kpack(&["unpack", s(&bad), "--output-dir", s(&dir.path().join("u"))]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.kpack") && err.contains("byte offset"),
        "{err}"
    );
    assert!(!dir.path().join("u").exists(), "nothing partial");
}

/// Hardening item 9: `unpack` into an existing directory is all or nothing.
/// Killed in the middle of its commit (after 1 and 2 of its renames), the
/// next unpack into that directory completes the interrupted one first, so
/// the directory ends up holding every file of the archive, byte-identical
/// to a clean unpack, and other files are kept.
#[test]
fn unpack_into_existing_dir_is_all_or_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = golden("test_zstd.kpack");
    let reference = tmp.path().join("ref");
    ok(&["unpack", s(&archive), "--output-dir", s(&reference)]);
    let list = |d: &Path| -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let want = list(&reference);
    assert!(want.len() >= 3, "{}", want.len());
    for k in [1usize, 2] {
        let out = tmp.path().join(format!("o{k}"));
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("keep.txt"), b"k").unwrap();
        let o = Command::new(KPACK)
            .args(["unpack", s(&archive), "--output-dir", s(&out)])
            .env("ROCPACK_FAULT_COMMIT_AFTER", k.to_string())
            .output()
            .unwrap();
        assert!(!o.status.success(), "fault {k} did not fire");
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1 + k);
        let again = kpack(&["unpack", s(&archive), "--output-dir", s(&out)]);
        assert!(!again.status.success());
        assert!(
            String::from_utf8_lossy(&again.stderr).contains("already exists"),
            "{}",
            String::from_utf8_lossy(&again.stderr)
        );
        std::fs::remove_file(out.join("keep.txt")).unwrap();
        assert_eq!(list(&out), want, "fault after {k}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".partial-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
