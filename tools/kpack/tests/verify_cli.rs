//! `kpack verify` on real `kpack split` + `kpack recombine` output: passes on
//! clean trees, fails (exit 1, every violation listed) on corrupted ones.

use std::fs;
use std::path::{Path, PathBuf};

mod common;
use common::{artifacts, kpack, s, split_all};

fn recombined(dir: &Path) -> PathBuf {
    let shards = split_all(dir);
    let out = dir.join("out");
    let o = kpack(&[
        "recombine",
        "--input-shards-dir",
        s(&shards),
        "--config",
        s(&artifacts().join("packaging-config.json")),
        "--output-dir",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

#[test]
fn verify_lists_every_violation_as_json() {
    let tmp = tempfile::tempdir().unwrap();
    let out = recombined(tmp.path());
    let cfg = artifacts().join("packaging-config.json");
    let o = kpack(&[
        "verify",
        "--artifacts-dir",
        s(&out),
        "--config",
        s(&cfg),
        "--json",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["lookups"].as_u64(),
            v["lookups_resolved"].as_u64()
        ),
        (Some(true), Some(24), Some(24))
    );

    // Move an aotriton gfx1151 kernel into the gfx110X package, remove the
    // hipBLASLt gfx1102 archive.
    let k = "ml-libs/aotriton/stage/lib/aotriton/kernels/gfx1151/flash/bwd_kernel_dk_dv/bwd_kernel_dk_dv-Sig-F__^bf16@16_64_True-Gpu-gfx1151.hsaco";
    let to = out.join("aotriton_lib_gfx110X").join(k);
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    fs::rename(out.join("aotriton_lib_gfx115X").join(k), &to).unwrap();
    fs::remove_file(
        out.join("blas_lib_gfx110X/math-libs/BLAS/hipBLASLt/stage/.kpack/blas_lib_gfx1102.kpack"),
    )
    .unwrap();
    for with_config in [true, false] {
        let mut args = vec!["verify", "--artifacts-dir", s(&out), "--json"];
        if with_config {
            args.extend(["--config", s(&cfg)]);
        }
        let o = kpack(&args);
        assert_eq!(o.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let vio = v["violations"].as_array().unwrap();
        let has = |kind: &str, pkg: &str, path_end: &str| {
            vio.iter().any(|x| {
                x["kind"] == kind
                    && x["package"] == pkg
                    && x["path"].as_str().unwrap().ends_with(path_end)
            })
        };
        assert!(
            has("cross_arch", "aotriton_lib_gfx110X", "Gpu-gfx1151.hsaco"),
            "{vio:#?}"
        );
        assert!(
            has("unresolved", "blas_lib_generic", "libhipblaslt.so.1.0"),
            "{vio:#?}"
        );
        assert_eq!(v["lookups_resolved"].as_u64(), Some(23));
    }
    // Missing directory → exit 2.
    let o = kpack(&["verify", "--artifacts-dir", s(&tmp.path().join("nope"))]);
    assert_eq!(o.status.code(), Some(2));
}
