//! `kpack select-family`: runtime-style ISA feature matching, exit codes, JSON.

use std::fs;

mod common;
use common::{artifacts, kpack, s, stdout};

#[test]
fn select_family_matches_features_like_the_runtime() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("c.json");
    fs::write(
        &cfg,
        r#"{"primary_shard": "a", "architecture_groups": {
            "gfx90X": {"display_name": "CDNA2", "architectures": ["gfx90a", "gfx908"]},
            "gfx94X": {"architectures": ["gfx942:sramecc+"]},
            "gfx11-generic": {"architectures": ["gfx11-generic"]}}}"#,
    )
    .unwrap();
    let sel = |arch: &str| -> (Option<i32>, String) {
        let o = kpack(&["select-family", "--arch", arch, "--config", s(&cfg)]);
        (o.status.code(), stdout(&o))
    };
    let (c, out) = sel("gfx90a:xnack+");
    assert_eq!(c, Some(0));
    assert_eq!(out.lines().next(), Some("gfx90X"));
    assert!(out.contains("<component>_gfx90X"), "{out}");
    assert_eq!(
        sel("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-")
            .1
            .lines()
            .next(),
        Some("gfx94X")
    );
    // sramecc- cannot load sramecc+ code.
    assert_eq!(sel("gfx942:sramecc-:xnack-").0, Some(1));
    // Generic fallback, as CLR does.
    assert_eq!(sel("gfx1103").1.lines().next(), Some("gfx11-generic"));
    assert_eq!(sel("gfx1030").0, Some(1));
    let o = kpack(&["select-family", "--arch", "nvidia", "--config", s(&cfg)]);
    assert_eq!(o.status.code(), Some(2));
    let o = kpack(&[
        "select-family",
        "--arch",
        "gfx908",
        "--config",
        s(&cfg),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["group"], "gfx90X");
    assert_eq!(v["display_name"], "CDNA2");
    assert_eq!(v["match_kind"], "exact");
    // Fixture config.
    let o = kpack(&[
        "select-family",
        "--arch",
        "gfx1151",
        "--config",
        s(&artifacts().join("packaging-config.json")),
    ]);
    assert_eq!(stdout(&o).lines().next(), Some("gfx115X"));
}

/// `--detect`: ROCPACK_GPU_TARGETS (any spelling) over the kfd topology
/// under ROCPACK_SYSFS_ROOT over the selector's default; packages from a
/// selector's data, a generic wheel for a processor without its own; exit
/// 1 for a target without a wheel or none found, 2 for a bad spelling.
#[test]
fn select_family_detect_follows_the_order_of_choice() {
    let tmp = tempfile::tempdir().unwrap();
    let sys = tmp.path().join("sys");
    for (n, v) in [("0", 0), ("1", 110003), ("2", 90402), ("3", 90402)] {
        let d = sys.join("class/kfd/kfd/topology/nodes").join(n);
        fs::create_dir_all(&d).unwrap();
        fs::write(
            d.join("properties"),
            format!("simd_count 4\ngfx_target_version {v}\n"),
        )
        .unwrap();
    }
    let sel = tmp.path().join("selector.json");
    fs::write(
        &sel,
        r#"{"selector": 1, "name": "p-device", "version": "1", "host": "p", "summary": "s",
            "targets": {"gfx942": "p-device-gfx942", "gfx11-generic": "p-device-gfx11-generic"},
            "generic": {"gfx1103": "gfx11-generic"}, "default": ["gfx942"]}"#,
    )
    .unwrap();
    let detect = |env: Option<&str>, root: &std::path::Path| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kpack"));
        c.args(["select-family", "--detect", "--selector", s(&sel), "--json"])
            .env("ROCPACK_SYSFS_ROOT", root)
            .env_remove("ROCPACK_GPU_TARGETS");
        if let Some(e) = env {
            c.env("ROCPACK_GPU_TARGETS", e);
        }
        let o = c.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        (o.status.code(), v)
    };
    let (c, v) = detect(None, &sys);
    assert_eq!(c, Some(0), "{v}");
    assert_eq!(v["source"], "sysfs");
    assert_eq!(v["targets"], serde_json::json!(["gfx1103", "gfx942"]));
    assert_eq!(
        v["packages"],
        serde_json::json!(["p-device-gfx11-generic", "p-device-gfx942"])
    );
    let (c, v) = detect(Some("amdgcn-amd-amdhsa--gfx942:sramecc+,gfx1030"), &sys);
    assert_eq!(
        (c, &v["source"]),
        (Some(1), &serde_json::json!("ROCPACK_GPU_TARGETS"))
    );
    assert_eq!(v["missing"], serde_json::json!(["gfx1030"]));
    let (c, v) = detect(None, &tmp.path().join("none"));
    assert_eq!(
        (c, &v["source"], &v["packages"]),
        (
            Some(0),
            &serde_json::json!("default"),
            &serde_json::json!(["p-device-gfx942"])
        )
    );
    assert_eq!(detect(Some("gfx1100,sm_90"), &sys).0, Some(2));
}

#[test]
fn select_family_lists_packages_found_in_packages_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("c.json");
    fs::write(
        &cfg,
        r#"{"primary_shard": "a", "architecture_groups": {
            "gfx110X": {"architectures": ["gfx1100"]}}}"#,
    )
    .unwrap();
    let pkgs = tmp.path().join("pkgs");
    for d in ["rocblas_gfx110X", "blas_generic", "blas_gfx94X"] {
        fs::create_dir_all(pkgs.join(d)).unwrap();
    }
    fs::write(pkgs.join("notes_generic"), b"a file, not a package").unwrap();
    let args = ["select-family", "--arch", "gfx1100", "--config", s(&cfg)];
    let o = kpack(&[&args[..], &["--packages-dir", s(&pkgs)]].concat());
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).ends_with("packages: blas_generic rocblas_gfx110X\n"),
        "{}",
        stdout(&o)
    );
    let missing = tmp.path().join("missing");
    let o = kpack(&[&args[..], &["--packages-dir", s(&missing)]].concat());
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    let want = format!(
        "kpack: error: {}: No such file or directory",
        missing.display()
    );
    assert!(err.starts_with(&want), "{err}");
}
