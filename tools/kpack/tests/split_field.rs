//! Issue 25 (items 4, 5 and 7, split's side): what a release engineer
//! running `kpack split` on every nightly build must never get silently —
//! device code dropped or copied unsplit, a handler or filter that matched
//! nothing, a runaway thread count, a wrong reason or a false "nothing was
//! written".

use std::fs;

mod common;
use common::*;

/// Replaces the first occurrence of `from` in `data` with `to` (same length).
fn patch(data: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let at = data
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{} not found", String::from_utf8_lossy(from)));
    data[at..at + to.len()].copy_from_slice(to);
}

/// Item 7: a bundle entry whose target split does not recognise (no `--`
/// before the target, so no target at all) used to be dropped with exit 0;
/// IDs verify rejects (`GFX1100`, `hip64-…--gfx1100` → arch `-gfx1100`)
/// used to be accepted. Each is refused, naming the entry; nothing written.
#[test]
fn unrecognised_bundle_targets_are_refused_never_dropped() {
    let orig = fs::read(fatbins().join("libfx_multi.so")).unwrap();
    for bad in [
        "hipv4-amdgcn-amd-amdhsa-xgfx1100", // no `--`: no target
        "hipv4-amdgcn-amd-amdhsa--GFX1100",
        "hip64-amdgcn-amd-amdhsa--gfx1100",
    ] {
        let tmp = tempdir();
        let mut data = orig.clone();
        patch(
            &mut data,
            b"hipv4-amdgcn-amd-amdhsa--gfx1100",
            bad.as_bytes(),
        );
        let art = artifact_with(tmp.path(), "libx.so", &data);
        let out = tmp.path().join("out");
        fails_cleanly(
            &split(&art, "x", &out, &[]),
            &out,
            &[
                "libx.so",
                bad,
                "does not name an AMDGPU target",
                "stored nowhere",
            ],
        );
    }
}

/// Item 7: ELFCLASS32, big-endian and nested-`ar` inputs carrying device
/// code used to pass split as generic files (a fat binary shipped unsplit
/// and unchecked). Refused, naming the reason; a 32-bit ELF without device
/// code still passes as a generic file.
#[test]
fn elf32_big_endian_and_nested_ar_fat_inputs_are_fails_cleanly() {
    let fat = fs::read(fatbins().join("libfx_multi.so")).unwrap();
    for (at, val, what) in [(4, 1u8, "ELFCLASS32"), (5, 2u8, "big-endian")] {
        let tmp = tempdir();
        let mut data = fat.clone();
        data[at] = val;
        let art = artifact_with(tmp.path(), "libodd.so", &data);
        let out = tmp.path().join("out");
        fails_cleanly(
            &split(&art, "x", &out, &[]),
            &out,
            &["libodd.so", what, "device code"],
        );
    }
    // An archive whose member is an archive of fat objects.
    let inner = fs::read(fatbins().join("libfx_static.a")).unwrap();
    let mut outer = b"!<arch>\n".to_vec();
    outer.extend_from_slice(
        format!(
            "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            "inner.a/",
            0,
            0,
            0,
            644,
            inner.len()
        )
        .as_bytes(),
    );
    outer.extend_from_slice(&inner);
    if inner.len() % 2 == 1 {
        outer.push(b'\n');
    }
    let tmp = tempdir();
    let art = artifact_with(tmp.path(), "libnested.a", &outer);
    let out = tmp.path().join("out");
    fails_cleanly(
        &split(&art, "x", &out, &[]),
        &out,
        &["libnested.a", "inner.a", "nested `ar` archive"],
    );
    // Without device code a 32-bit ELF is an ordinary generic file.
    let tmp = tempdir();
    let mut host = fs::read(fatbins().join("libfx_hostonly.so")).unwrap();
    host[4] = 1;
    let art = artifact_with(tmp.path(), "libhost32.so", &host);
    let out = tmp.path().join("out");
    assert_ok(&split(&art, "x", &out, &[]));
    assert!(out.join("x_generic/lib/libhost32.so").is_file());
}

/// Item 7: a symlinked output directory is refused before any work, saying
/// it is a symlink (it used to fail at the commit with "exists and is not a
/// directory").
#[test]
fn symlinked_output_directory_is_refused_for_what_it_is() {
    let tmp = tempdir();
    let real = tmp.path().join("real");
    fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let art = multi_artifact(tmp.path());
    let o = split(&art, "x", &link, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is a symlink") && err.contains("pass the directory it points to"),
        "{err}"
    );
    assert!(!err.contains("not a directory"), "{err}");
    assert!(dir_names(&real).is_empty());
    assert!(fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
}

/// Item 7: a commit into an existing output directory that fails after
/// its outputs started moving must not say "nothing was written": it says
/// the commit was interrupted and that the next run completes it — and the
/// next run does (rolled forward, every output there).
#[test]
fn failed_commit_does_not_claim_nothing_was_written() {
    let tmp = tempdir();
    let art = multi_artifact(tmp.path());
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("unrelated"), "kept").unwrap();
    let mut cmd = std::process::Command::new(KPACK);
    cmd.args(split_args(&art, "x", &out))
        .env("ROCPACK_FAULT_COMMIT_ERROR_AFTER", "1");
    let o = cmd.output().unwrap();
    let err = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("nothing was written"), "{err}");
    assert!(err.contains("commit interrupted"), "{err}");
    assert!(
        err.contains("the next split or recombine into it completes the commit"),
        "{err}"
    );
    let moved = dir_names(&out).len() - 1;
    assert_eq!(moved, 1, "exactly one output moved before the error");
    // The next run into the same directory rolls the commit forward first.
    let art2 = tmp.path().join("y_lib");
    copy_tree(&art, &art2);
    assert_ok(&split(&art2, "y", &out, &[]));
    let names = dir_names(&out);
    for want in [
        "x_generic",
        "x_gfx1100",
        "x_gfx906",
        "y_generic",
        "y_gfx1100",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    let leftovers: Vec<_> = dir_names(tmp.path())
        .into_iter()
        .filter(|n| n.contains(".partial-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Item 7: `--gpu-targets` with `--exclude-arch` removing everything it
/// kept blames `--exclude-arch` (it used to say the artifact had no such
/// code, while it has).
#[test]
fn exclude_arch_is_blamed_when_it_removes_what_gpu_targets_kept() {
    let tmp = tempdir();
    let art = multi_artifact(tmp.path());
    let out = tmp.path().join("out");
    let err = fails_cleanly(
        &split(
            &art,
            "x",
            &out,
            &["--gpu-targets", "gfx1100", "--exclude-arch", "gfx1100"],
        ),
        &out,
        &["--exclude-arch gfx1100 drops every code object --gpu-targets gfx1100 keeps"],
    );
    assert!(!err.contains("leaves no code object"), "{err}");
    // Still the old message when the artifact lacks the target.
    fails_cleanly(
        &split(&art, "x", &out, &["--gpu-targets", "gfx1030"]),
        &out,
        &["--gpu-targets gfx1030 leaves no code object", "gfx1100"],
    );
    // Not a target at all (one rule for both options).
    assert_exit(&split(&art, "x", &out, &["--exclude-arch", "GFX1100"]), 2);
}

/// Item 4: Debian's versioned Tensile layout (`rocblas/4.4.1/library/`) is
/// claimed; a handler that claims nothing, and a `--gpu-targets` target the
/// artifact lacks, say so on stderr (and in `--json`'s `warnings`).
#[test]
fn versioned_layouts_are_claimed_and_no_ops_are_reported() {
    let tmp = tempdir();
    let art = multi_artifact(tmp.path());
    let lib = art.join("lib/rocblas/4.4.1/library");
    fs::create_dir_all(&lib).unwrap();
    fs::write(lib.join("TensileLibrary_lazy_gfx1100.dat"), "t").unwrap();
    fs::write(lib.join("TensileLibrary.dat"), "t").unwrap();
    let out = tmp.path().join("out");
    let o = split(
        &art,
        "x",
        &out,
        &[
            "--split-databases",
            "rocblas",
            "aotriton",
            "--gpu-targets",
            "gfx1100",
            "gfx1201",
            "gfx1030",
            "--json",
        ],
    );
    assert_ok(&o);
    assert!(out
        .join("x_gfx1100/lib/rocblas/4.4.1/library/TensileLibrary_lazy_gfx1100.dat")
        .is_file());
    assert!(out
        .join("x_generic/lib/rocblas/4.4.1/library/TensileLibrary.dat")
        .is_file());
    let err = stderr(&o);
    assert!(
        err.contains("warning: --split-databases aotriton: no file in the artifact matched"),
        "{err}"
    );
    assert!(!err.contains("--split-databases rocblas: no file"), "{err}");
    assert!(err.contains("warning: --gpu-targets gfx1030: the artifact has no code object or database file for it"), "{err}");
    assert!(!err.contains("--gpu-targets gfx1201"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["warnings"].as_array().unwrap().len(), 2, "{v:#}");
    assert_eq!(v["unmatched_databases"], serde_json::json!(["aotriton"]));
    assert_eq!(v["unmatched_gpu_targets"], serde_json::json!(["gfx1030"]));

    // A batch of two artifacts: aotriton matches in one of them (no
    // warning: each family artifact has its own libraries), gfx1030 in
    // none (one warning for the batch, not one per artifact).
    let parent = tmp.path().join("batch");
    copy_tree(&art, &parent.join("x_gfx110X"));
    let aot = parent.join("y_gfx110X");
    copy_tree(&art, &aot);
    let k = aot.join("lib/aotriton/kernels/gfx1100");
    fs::create_dir_all(&k).unwrap();
    fs::write(k.join("a.hsaco"), "k").unwrap();
    let o = split_batch(
        &parent,
        &tmp.path().join("bout"),
        &[
            "--split-databases",
            "rocblas",
            "aotriton",
            "--gpu-targets",
            "gfx1100",
            "gfx1030",
        ],
    );
    assert_ok(&o);
    let err = stderr(&o);
    assert!(!err.contains("--split-databases aotriton"), "{err}");
    assert_eq!(err.matches("--gpu-targets gfx1030").count(), 1, "{err}");
    assert!(err.contains("any artifact of the batch"), "{err}");
}

/// Item 4: `--gpu-targets` that leaves nothing fails (docs: "fails when
/// nothing is left") instead of writing an output without device code: on
/// an artifact of database files only (it used to succeed with a generic
/// artifact and nothing else), and on one whose fat binaries lack the
/// target while its Tensile files have it.
#[test]
fn gpu_targets_leaving_no_device_code_fails() {
    let tmp = tempdir();
    let art = artifact_with(tmp.path(), "README", b"db only");
    let lib = art.join("lib/rocblas/library");
    fs::create_dir_all(&lib).unwrap();
    fs::write(lib.join("TensileLibrary_lazy_gfx1100.dat"), "t").unwrap();
    let out = tmp.path().join("out");
    fails_cleanly(
        &split(
            &art,
            "x",
            &out,
            &["--split-databases", "rocblas", "--gpu-targets", "gfx1201"],
        ),
        &out,
        &["--gpu-targets gfx1201 leaves nothing", "gfx1100"],
    );

    let art = tmp.path().join("blas_lib_gfx110X-dgpu");
    copy_tree(
        &fixture_shard("gfx110X-build").join("blas_lib_gfx110X-dgpu"),
        &art,
    );
    let lib = art.join("math-libs/BLAS/hipBLASLt/stage/lib/hipblaslt/library");
    fs::create_dir_all(&lib).unwrap();
    fs::write(lib.join("TensileLibrary_lazy_gfx1201.dat"), "t").unwrap();
    fails_cleanly(
        &split(
            &art,
            "blas_lib",
            &out,
            &[
                "--split-databases",
                "rocblas",
                "hipblaslt",
                "--gpu-targets",
                "gfx1201",
            ],
        ),
        &out,
        &["--gpu-targets gfx1201 leaves no code object"],
    );
}

/// Item 5: `--jobs 100000` is capped (it used to start thousands of
/// threads) with a note saying so; the output is the same as `--jobs 1`.
#[test]
fn runaway_jobs_are_capped_with_a_note() {
    let tmp = tempdir();
    let art = multi_artifact(tmp.path());
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let o = split(&art, "x", &a, &["--jobs", "100000"]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(err.contains("note: --jobs 100000 reduced to"), "{err}");
    let o = split(&art, "x", &b, &["--jobs", "1"]);
    assert_ok(&o);
    assert!(!stderr(&o).contains("reduced"), "{}", stderr(&o));
    assert_eq!(snapshot(&a), snapshot(&b));
}
