//! Hardening item 6, the cases `special_files.rs` does not cover:
//! `artifact_manifest.txt` as a symlink to /dev/zero (split, verify) and
//! the packaging config as a FIFO or /dev/zero (recombine). Each is refused
//! at once (exit 2, saying what it is) under a 256 MiB address-space
//! ceiling: before, /dev/zero was read whole and a FIFO hung.

mod common;
use common::*;

#[test]
fn manifests_and_configs_that_are_special_files_are_refused() {
    let tmp = tempdir();
    let t = tmp.path();
    // An artifact whose manifest is a symlink to /dev/zero.
    let art = t.join("x_lib");
    std::fs::create_dir_all(art.join("lib")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", art.join("artifact_manifest.txt")).unwrap();
    // A shards directory whose one shard's manifest is /dev/zero too.
    let shards = t.join("shards");
    let pkg = shards.join("s1/x_lib_generic");
    std::fs::create_dir_all(&pkg).unwrap();
    std::os::unix::fs::symlink("/dev/zero", pkg.join("artifact_manifest.txt")).unwrap();
    let (fifo, zero) = fifo_and_dev_zero(t, "config.json", "zero.json");
    let out = t.join("o");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (split_args(&art, "x_lib", &out), "artifact_manifest.txt"),
        (
            vec![
                "recombine",
                "--input-shards-dir",
                s(&shards),
                "--config",
                s(&fifo),
                "--output-dir",
                s(&out),
            ],
            "FIFO",
        ),
        (
            vec![
                "recombine",
                "--input-shards-dir",
                s(&shards),
                "--config",
                s(&zero),
                "--output-dir",
                s(&out),
            ],
            "device",
        ),
    ];
    for (args, needle) in cases {
        let err = refused_bounded(&args, needle);
        assert!(
            err.contains("not a regular file") || err.contains("device"),
            "{args:?}: {err}"
        );
        assert!(!out.exists(), "{args:?}");
    }
}

/// `pack` code objects and the `reassemble` host are regular files read up to
/// their size: a FIFO or a link to /dev/zero is refused at once (it used to
/// hang, or be read until memory ran out).
#[test]
fn pack_and_reassemble_inputs_that_are_special_files_are_refused() {
    let tmp = tempdir();
    let t = tmp.path();
    let (fifo, zero) = fifo_and_dev_zero(t, "co.hsaco", "zero.hsaco");
    let kdir = t.join("kpacks");
    std::fs::create_dir_all(&kdir).unwrap();
    let out = t.join("out.kpack");
    for special in [&fifo, &zero] {
        let spec = format!("gfx1100={}", s(special));
        let o = kpack_bounded(&[
            "pack",
            "-o",
            s(&out),
            "--kernel-name",
            "k",
            "--code-object",
            &spec,
        ]);
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "pack {spec}: {err}");
        assert!(err.contains("not a regular file"), "pack {spec}: {err}");
        assert!(!out.exists());
        let host_out = t.join("fat.so");
        let o = kpack_bounded(&[
            "reassemble",
            "--host",
            s(special),
            "--kpack-dir",
            s(&kdir),
            "-o",
            s(&host_out),
        ]);
        let err = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "reassemble {}: {err}", s(special));
        assert!(err.contains("not a regular file"), "reassemble: {err}");
        assert!(!host_out.exists());
    }
}
