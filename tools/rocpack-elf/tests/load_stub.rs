//! GPU-less load test: a stub `libamdhip64.so.5` (tests/elf/hip_stub.c,
//! symbol version hip_4.2) records every wrapper given to
//! `__hipRegisterFatBinary`; split libraries are dlopen()ed by a small C
//! loader and split executables are run, before and after GNU strip
//! (--strip-debug, --strip-unneeded) and llvm-strip-19.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use rocpack_elf::{analyze, split_host};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/elf");

fn build_harness(dir: &Path) -> PathBuf {
    let stub = dir.join("libamdhip64.so.5");
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1"])
        .arg(format!("-Wl,--version-script={SRC}/hip_stub.map"))
        .arg("-Wl,-soname,libamdhip64.so.5")
        .arg("-o")
        .arg(&stub)
        .arg(format!("{SRC}/hip_stub.c"))
        .status()
        .unwrap();
    assert!(st.success(), "building the stub failed");
    let loader = dir.join("loader");
    let st = Command::new("gcc")
        .arg("-o")
        .arg(&loader)
        .arg(format!("{SRC}/loader.c"))
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(st.success(), "building the loader failed");
    loader
}

/// Load or run `file` with the stub first in the library path; returns the
/// recorded wrapper lines.
fn load(loader: &Path, libdir: &Path, file: &Path, dump_len: usize) -> Vec<String> {
    let log = libdir.join("wrappers.log");
    let _ = std::fs::remove_file(&log);
    let is_lib = file.to_string_lossy().contains(".so");
    let mut cmd = if is_lib {
        let mut c = Command::new(loader);
        c.arg(file);
        c
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
        Command::new(file)
    };
    let o = cmd
        .env("LD_LIBRARY_PATH", libdir)
        .env("ROCPACK_STUB_LOG", &log)
        .env("ROCPACK_STUB_LEN", dump_len.to_string())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}: exit {:?}: {}",
        file.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn strip(variant: &str, input: &Path, output: &Path) {
    let mut c = match variant {
        "strip-debug" => {
            let mut c = Command::new("strip");
            c.arg("--strip-debug");
            c
        }
        "strip-unneeded" => {
            let mut c = Command::new("strip");
            c.arg("--strip-unneeded");
            c
        }
        "llvm-strip-19" => Command::new("llvm-strip-19"),
        _ => unreachable!(),
    };
    let o = c.arg("-o").arg(output).arg(input).output().unwrap();
    assert!(
        o.status.success(),
        "{variant} {}: {}",
        input.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn split_binaries_load_and_register_hipk_after_every_strip() {
    if !have_fixtures() || !have_tool("gcc") || !have_tool("strip") || !have_tool("llvm-strip-19") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let loader = build_harness(tmp.path());
    let mut checked = 0;
    for p in fat_elfs() {
        let data = std::fs::read(&p).unwrap();
        let orig = analyze(&data).unwrap();
        let marker = marker_for(&p);
        let split = split_host(&data, &marker).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        // rocblas-test needs librocblas.so.5: give it the (split or fat) library.
        let libdir = tmp.path().join(format!("lib-{checked}"));
        std::fs::create_dir_all(&libdir).unwrap();
        std::fs::copy(
            tmp.path().join("libamdhip64.so.5"),
            libdir.join("libamdhip64.so.5"),
        )
        .unwrap();
        let rocblas = PathBuf::from(
            p.to_string_lossy()
                .replace("blas_test_", "blas_lib_")
                .replace("/bin/rocblas-test", "/lib/librocblas.so.5.2"),
        );
        let has_rocblas = name == "rocblas-test";

        // Unsplit: HIPF and the bundle's first bytes.
        if has_rocblas {
            std::fs::copy(&rocblas, libdir.join("librocblas.so.5")).unwrap();
        }
        let fat = libdir.join(&name);
        std::fs::write(&fat, &data).unwrap();
        let lines = load(&loader, &libdir, &fat, 24);
        assert!(!lines.is_empty(), "{name}: nothing registered");
        let mut bundle_hex: Vec<String> = Vec::new();
        for l in &lines {
            // "FPIH" is how HIPF's little-endian bytes print.
            assert!(l.starts_with("magic=FPIH version=1"), "{name}: {l}");
            let idx: usize = l
                .split("index=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(idx, 0, "{name}: {l}");
            let hexdata = l.split("data=").nth(1).unwrap();
            bundle_hex = orig
                .bundles
                .iter()
                .map(|b| hex::encode(&data[b.file_offset as usize..b.file_offset as usize + 24]))
                .collect();
            if has_rocblas {
                // librocblas.so.5 registers its own bundles too.
                let lib = std::fs::read(&rocblas).unwrap();
                let li = analyze(&lib).unwrap();
                bundle_hex.extend(li.bundles.iter().map(|b| {
                    hex::encode(&lib[b.file_offset as usize..b.file_offset as usize + 24])
                }));
            }
            assert!(bundle_hex.iter().any(|h| h == hexdata), "{name}: {l}");
        }

        if has_rocblas {
            let lib = std::fs::read(&rocblas).unwrap();
            std::fs::write(
                libdir.join("librocblas.so.5"),
                split_host(&lib, b"rocblas-marker").unwrap(),
            )
            .unwrap();
        }
        let split_path = libdir.join(&name);
        for variant in ["none", "strip-debug", "strip-unneeded", "llvm-strip-19"] {
            std::fs::write(&split_path, &split).unwrap();
            if variant != "none" {
                let stripped = libdir.join(format!("{name}.stripped"));
                strip(variant, &split_path, &stripped);
                std::fs::rename(&stripped, &split_path).unwrap();
                // Still a split binary whose wrappers point at the marker.
                let again = analyze(&std::fs::read(&split_path).unwrap()).unwrap();
                assert!(
                    again.wrappers.iter().all(|w| w.points_to_marker),
                    "{name} {variant}"
                );
            }
            let lines = load(&loader, &libdir, &split_path, marker.len());
            assert!(!lines.is_empty(), "{name} {variant}: nothing registered");
            for l in &lines {
                assert!(
                    l.starts_with("magic=HIPK version=1"),
                    "{name} {variant}: {l}"
                );
                let ours = l.ends_with(&format!("data={}", hex::encode(&marker)));
                let rocblas_lib =
                    has_rocblas && l.contains(&format!("data={}", hex::encode(b"rocblas-marker")));
                assert!(ours || rocblas_lib, "{name} {variant}: {l}");
            }
            // Reassembling the (stripped) split binary gives a loadable fat
            // binary registering HIPF and the original bundles again.
            let stripped = std::fs::read(&split_path).unwrap();
            let back = rocpack_elf::reassemble(&stripped, &bundles_of(&data)).unwrap();
            assert_eq!(code_objects(&back), code_objects(&data), "{name} {variant}");
            std::fs::write(&split_path, &back).unwrap();
            let lines = load(&loader, &libdir, &split_path, 24);
            for l in &lines {
                if has_rocblas && l.starts_with("magic=HIPK") {
                    continue; // the split librocblas beside it
                }
                assert!(
                    l.starts_with("magic=FPIH version=1"),
                    "{name} {variant} reassembled: {l}"
                );
                let hexdata = l.split("data=").nth(1).unwrap();
                assert!(
                    bundle_hex.iter().any(|h| h == hexdata),
                    "{name} {variant} reassembled: {l}"
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 20);
}
