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
