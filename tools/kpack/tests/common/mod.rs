//! Helpers shared by the CLI tests that drive `kpack` over the fixture shards.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const KPACK: &str = env!("CARGO_BIN_EXE_kpack");
pub const SHARDS: [&str; 3] = ["gfx110X-build", "gfx1151-build", "gfx120X-build"];

/// `../shared/fixtures/artifacts` (or `$ROCPACK_SHARED/fixtures/artifacts`).
pub fn artifacts() -> PathBuf {
    std::env::var_os("ROCPACK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")))
        .join("fixtures/artifacts")
}

pub fn kpack(args: &[&str]) -> Output {
    Command::new(KPACK).args(args).output().unwrap()
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `kpack split --batch-artifact-parent-dir` for every fixture shard into
/// `dir/shards/<shard>`; returns `dir/shards`.
pub fn split_all(dir: &Path) -> PathBuf {
    let out = dir.join("shards");
    for sh in SHARDS {
        let o = kpack(&[
            "split",
            "--batch-artifact-parent-dir",
            s(&artifacts().join(sh)),
            "--output-dir",
            s(&out.join(sh)),
            "--split-databases",
            "rocblas",
            "hipblaslt",
            "aotriton",
        ]);
        assert!(o.status.success(), "split {sh}: {}", stderr(&o));
    }
    out
}
