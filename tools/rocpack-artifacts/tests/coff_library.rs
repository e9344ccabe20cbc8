//! A Windows static library (`ar` archive of COFF objects) whose members
//! carry HIP device code: `verify` flags it as a fat binary in a generic
//! package, and `split` refuses it naming the COFF member (COFF objects
//! are not split). An import library without device code passes both.

use std::fs;
use std::path::Path;

use rocpack_artifacts::split::{split_artifact, NoProgress, SplitOptions};
use rocpack_artifacts::verify::{verify, VerifyOptions};
use rocpack_testsupport::win_fatbin;

/// An `ar` archive (GNU member names) holding `members`.
fn ar(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = b"!<arch>\n".to_vec();
    for (name, data) in members {
        let header = format!(
            "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            format!("{name}/"),
            0,
            0,
            0,
            644,
            data.len()
        );
        assert_eq!(header.len(), 60);
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        if data.len() % 2 == 1 {
            out.push(b'\n');
        }
    }
    out
}

/// `dir/<package>/lib/{fx_kern.lib, libamdhip64.dll.a}` with a manifest.
fn package(dir: &Path, package: &str) -> bool {
    let obj = win_fatbin("fx_win_kern.obj");
    let import = win_fatbin("libamdhip64.dll.a");
    if !obj.exists() || !import.exists() {
        eprintln!("note: Windows fixtures missing, skipping");
        return false;
    }
    let lib = dir.join(package).join("lib");
    fs::create_dir_all(&lib).unwrap();
    let kern = fs::read(obj).unwrap();
    fs::write(lib.join("fx_kern.lib"), ar(&[("fx_win_kern.obj", &kern)])).unwrap();
    fs::copy(import, lib.join("libamdhip64.dll.a")).unwrap();
    fs::write(dir.join(package).join("artifact_manifest.txt"), "lib\n").unwrap();
    true
}

#[test]
fn verify_flags_a_coff_library_with_device_code() {
    let tmp = tempfile::tempdir().unwrap();
    if !package(tmp.path(), "x_generic") {
        return;
    }
    let opts = VerifyOptions {
        artifacts_dir: tmp.path().to_path_buf(),
        config: None,
        install_models: Vec::new(),
    };
    let report = verify(&opts, &mut |_| {}).unwrap();
    let found: Vec<(&str, &str)> = report
        .violations
        .iter()
        .map(|v| (v.kind, v.path.as_str()))
        .collect();
    assert_eq!(
        found,
        [("fat_binary", "lib/fx_kern.lib(fx_win_kern.obj)")],
        "{:?}",
        report.violations
    );
    assert!(!report.ok);
}

#[test]
fn split_refuses_a_coff_library_with_device_code_naming_the_member() {
    let tmp = tempfile::tempdir().unwrap();
    if !package(tmp.path(), "x_lib") {
        return;
    }
    let out = tmp.path().join("out");
    let opts = SplitOptions::new(tmp.path().join("x_lib"), "x", &out);
    let e = split_artifact(&opts, &NoProgress).unwrap_err().to_string();
    assert!(
        e.contains("fx_kern.lib: archive member `fx_win_kern.obj`"),
        "{e}"
    );
    assert!(e.contains("a COFF object"), "{e}");
    assert!(!out.exists());
    // Without the fat library, the import library is copied as it is.
    fs::remove_file(tmp.path().join("x_lib/lib/fx_kern.lib")).unwrap();
    split_artifact(&opts, &NoProgress).unwrap();
    assert!(out.join("x_generic/lib/libamdhip64.dll.a").is_file());
}
