//! `kpack recombine` / `kpack verify` / `kpack select-family` driven as a
//! user would: real `kpack split` output of the fixture shards, exit codes,
//! stdout/stderr and the tree on disk.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{
    artifacts, json_field_strs, json_strs, kpack, s, split_all, stderr, stdout, tempdir, SHARDS,
};
use tempfile::TempDir;

fn recombine(input: &Path, config: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "recombine",
        "--input-shards-dir",
        s(input),
        "--config",
        s(config),
        "--output-dir",
        s(out),
    ];
    args.extend_from_slice(extra);
    kpack(&args)
}

/// `recombine` with the fixtures' `packaging-config.json`.
fn recombine_default(input: &Path, out: &Path, extra: &[&str]) -> Output {
    recombine(
        input,
        &artifacts().join("packaging-config.json"),
        out,
        extra,
    )
}

/// A temporary directory holding `split_all` of the fixture shards, and the
/// shards directory in it.
fn split_fixture_shards() -> (TempDir, PathBuf) {
    let tmp = tempdir();
    let shards = split_all(tmp.path());
    (tmp, shards)
}

/// Nothing but `keep` in `dir` (no output, no staging leftovers).
fn only(dir: &Path, keep: &[&str]) {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn recombine_json_report_and_verify_round_trip() {
    let (tmp, shards) = split_fixture_shards();
    let out = tmp.path().join("out");
    let o = recombine_default(&shards, &out, &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(
        v["generic_only_components"],
        serde_json::json!(["support_dev"])
    );
    let excluded = json_field_strs(&v["excluded_architectures"], "architecture");
    assert!(excluded.contains(&"gfx906"), "{excluded:?}");
    let err = stderr(&o);
    assert!(
        err.contains("generic-only") && err.contains("support_dev"),
        "{err}"
    );
    assert!(err.contains("excluded") && err.contains("gfx906"), "{err}");
    let pkgs = json_field_strs(&v["packages"], "name");
    assert!(pkgs.contains(&"blas_lib_gfx110X") && pkgs.contains(&"support_dev_generic"));
    assert!(!pkgs.iter().any(|p| p.starts_with("support_dev_gfx")));

    // verify: passes on the recombined tree and on every split shard.
    let o = kpack(&["verify", "--artifacts-dir", s(&out)]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("24/24 lookups resolved"),
        "{}",
        stdout(&o)
    );
    for sh in SHARDS {
        let o = kpack(&["verify", "--artifacts-dir", s(&shards.join(sh)), "--json"]);
        assert!(o.status.success(), "{sh}: {}", stdout(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["ok"], true);
    }

    // verify: a removed .kpack and a fat host binary → exit 1, each listed.
    fs::remove_file(
        out.join("blas_lib_gfx120X/math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_gfx1201.kpack"),
    )
    .unwrap();
    let host = "blas_test_generic/math-libs/BLAS/rocBLAS/stage/bin/rocblas-test";
    fs::remove_file(out.join(host)).unwrap();
    fs::copy(
        artifacts().join(
            "gfx110X-build/blas_test_gfx110X-dgpu/math-libs/BLAS/rocBLAS/stage/bin/rocblas-test",
        ),
        out.join(host),
    )
    .unwrap();
    let o = kpack(&["verify", "--artifacts-dir", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "FAIL [unresolved] blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!("FAIL [fat_binary] {host}")),
        "{text}"
    );
    assert!(text.lines().last().unwrap().starts_with("FAILED"), "{text}");

    // select-family against the recombined tree lists its packages.
    let o = kpack(&[
        "select-family",
        "--arch",
        "amdgcn-amd-amdhsa--gfx1101",
        "--config",
        s(&artifacts().join("packaging-config.json")),
        "--packages-dir",
        s(&out),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["group"], "gfx110X");
    let p = json_strs(&v["packages"]);
    assert!(
        p.contains(&"blas_lib_gfx110X")
            && p.contains(&"blas_lib_generic")
            && !p.contains(&"blas_lib_gfx120X"),
        "{p:?}"
    );
}

#[test]
fn strict_config_fails_with_exit_1_naming_gfx1150() {
    let (tmp, shards) = split_fixture_shards();
    let out = tmp.path().join("out");
    let o = recombine(
        &shards,
        &artifacts().join("packaging-config-strict.json"),
        &out,
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("gfx1150") && err.contains("error_on_missing_architecture"),
        "{err}"
    );
    only(tmp.path(), &["shards"]);
}

#[test]
fn bad_inputs_exit_2_without_partial_output() {
    let (tmp, shards) = split_fixture_shards();
    let cfgdir = tmp.path().join("cfg");
    fs::create_dir(&cfgdir).unwrap();
    let good = fs::read_to_string(artifacts().join("packaging-config.json")).unwrap();
    let cases: Vec<(&str, String, &[&str])> = vec![
        (
            "malformed.json",
            good.replacen("\"gfx110X\":", "\"gfx110X\"", 1),
            &["malformed JSON", "line 4"],
        ),
        (
            "empty-group.json",
            good.replacen("[\"gfx1151\"]", "[]", 1),
            &[
                "architecture_groups.gfx115X.architectures",
                "no architectures",
            ],
        ),
        (
            "two-groups.json",
            good.replacen("[\"gfx1151\"]", "[\"gfx1151\", \"gfx1101\"]", 1),
            &[
                "architecture_groups.gfx115X.architectures[1]",
                "gfx1101",
                "two groups",
            ],
        ),
        (
            "unknown-key.json",
            good.replacen(
                "\"validation\": {",
                "\"validation\": {\"error_on_everything\": true,",
                1,
            ),
            &["validation.error_on_everything", "unknown field"],
        ),
        (
            "wrong-type.json",
            good.replacen(
                "\"verify_generic_artifacts_match\": false",
                "\"verify_generic_artifacts_match\": \"no\"",
                1,
            ),
            &[
                "validation.verify_generic_artifacts_match",
                "expected a boolean",
            ],
        ),
        (
            "missing-shard.json",
            good.replacen(
                "\"primary_shard\": \"gfx110X-build\"",
                "\"primary_shard\": \"gfx942-build\"",
                1,
            ),
            &["primary shard `gfx942-build` not found", "gfx110X-build"],
        ),
    ];
    for (name, text, needles) in cases {
        assert_ne!(text, good, "{name}: replacement did not apply");
        let cfg = cfgdir.join(name);
        fs::write(&cfg, text).unwrap();
        let out = tmp.path().join("out");
        let o = recombine(&shards, &cfg, &out, &[]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        let err = stderr(&o);
        for n in needles {
            assert!(err.contains(n), "{name}: `{n}` not in: {err}");
        }
        assert!(
            err.contains(name) || name == "missing-shard.json",
            "{name}: file not named: {err}"
        );
        only(tmp.path(), &["shards", "cfg"]);
    }
    // Missing shards directory.
    let o = recombine_default(&tmp.path().join("nope"), &tmp.path().join("out"), &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope"), "{}", stderr(&o));
    only(tmp.path(), &["shards", "cfg"]);
    // Output directory not empty.
    let out = tmp.path().join("busy");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("x"), b"x").unwrap();
    let o = recombine_default(&shards, &out, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    only(&out, &["x"]);
    // An existing empty output directory is fine.
    let out = tmp.path().join("empty");
    fs::create_dir(&out).unwrap();
    let o = recombine_default(&shards, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("blas_lib_generic/artifact_manifest.txt").is_file());
}

#[test]
fn tampered_shard_fails_duplicate_check_naming_both_shards_and_file() {
    let (tmp, shards) = split_fixture_shards();
    let rel = "ml-libs/aotriton/stage/lib/aotriton/kernels/gfx906/flash/attn_fwd/attn_fwd-Sig-F__^fp16@16_128_False_False_0-Gpu-gfx906.hsaco";
    let p = shards.join("gfx1151-build/aotriton_lib_gfx906").join(rel);
    let mut d = fs::read(&p).unwrap();
    d[300] ^= 0x55;
    fs::remove_file(&p).unwrap(); // never write through a hard link to the fixtures
    fs::write(&p, d).unwrap();
    let out = tmp.path().join("out");
    let o = recombine_default(&shards, &out, &["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("gfx110X-build") && err.contains("gfx1151-build") && err.contains(rel),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["violations"][0]["kind"], "duplicate_device_code");
    only(tmp.path(), &["shards"]);
}

/// A shard package that is a symlink to a directory outside the shards
/// directory is refused (it would package whatever it points at); one that
/// points inside is a staged input and accepted.
#[test]
fn symlinked_shard_package_outside_is_refused() {
    let (tmp, shards) = split_fixture_shards();
    let cfg = artifacts().join("packaging-config.json");
    let elsewhere = tmp.path().join("elsewhere");
    let pkg = shards.join("gfx1151-build/blas_lib_gfx1151");
    std::fs::rename(&pkg, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &pkg).unwrap();
    let out = tmp.path().join("out");
    let o = recombine(&shards, &cfg, &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("outside the shards directory"),
        "{}",
        stderr(&o)
    );
    // Inside the shards directory: fine.
    let inside = shards.join(".staged-blas_lib_gfx1151");
    std::fs::remove_file(&pkg).unwrap();
    std::fs::rename(&elsewhere, &inside).unwrap();
    std::os::unix::fs::symlink(&inside, &pkg).unwrap();
    let o = recombine(&shards, &cfg, &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}
