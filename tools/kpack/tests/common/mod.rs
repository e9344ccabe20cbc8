//! Helpers shared by the CLI tests that drive `kpack` (on top of
//! `rocpack-testsupport`, which they re-export).
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

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

/// Runs `kpack args…` under a 256 MiB address-space ceiling (one malloc
/// arena, so the ceiling measures the heap, not per-thread reservations);
/// fails the test when it is still running after 20 s.
pub fn kpack_bounded(args: &[&str]) -> Output {
    let mut cmd = under_vmem_limit(KPACK, 262_144);
    cmd.args(args).env("MALLOC_ARENA_MAX", "1");
    output_within(cmd, Duration::from_secs(20), &format!("kpack {args:?}"))
}

/// Two inputs no reader may take whole: a FIFO `dir/fifo` and a symlink
/// `dir/zero` to `/dev/zero`. Returns (FIFO, link).
pub fn fifo_and_dev_zero(dir: &Path, fifo: &str, zero: &str) -> (PathBuf, PathBuf) {
    let (f, z) = (dir.join(fifo), dir.join(zero));
    mkfifo(&f);
    std::os::unix::fs::symlink("/dev/zero", &z).unwrap();
    (f, z)
}

/// The arguments of `kpack split --artifact-dir art --artifact-prefix
/// prefix --output-dir out`.
pub fn split_args<'a>(art: &'a Path, prefix: &'a str, out: &'a Path) -> Vec<&'a str> {
    vec![
        "split",
        "--artifact-dir",
        s(art),
        "--artifact-prefix",
        prefix,
        "--output-dir",
        s(out),
    ]
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
