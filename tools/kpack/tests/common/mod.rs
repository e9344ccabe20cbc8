//! Helpers shared by the CLI tests that drive `kpack` (on top of
//! `rocpack-testsupport`, which they re-export).
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;

pub use rocpack_testsupport::*;

/// The `kpack` binary under test.
pub const KPACK: &str = env!("CARGO_BIN_EXE_kpack");
/// The fixture shards (`<artifacts>/<shard>`).
pub const SHARDS: [&str; 3] = ["gfx110X-build", "gfx1151-build", "gfx120X-build"];

/// Runs `kpack args…`.
pub fn kpack<S: AsRef<OsStr>>(args: &[S]) -> Output {
    run(KPACK, args)
}

/// Runs `kpack args…`, asserts success and returns its stdout.
pub fn kpack_ok<S: AsRef<OsStr>>(args: &[S]) -> String {
    let o = kpack(args);
    assert_ok(&o);
    stdout(&o)
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
