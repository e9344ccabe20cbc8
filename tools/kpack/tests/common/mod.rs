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

/// Runs [`kpack_bounded`] and asserts the input was refused: exit 2,
/// stderr naming `needle`. Returns stderr.
pub fn refused_bounded(args: &[&str], needle: &str) -> String {
    let o = kpack_bounded(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    err
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

/// `kpack split --artifact-dir input --artifact-prefix prefix --output-dir
/// out extra…`.
pub fn split(input: &Path, prefix: &str, out: &Path, extra: &[&str]) -> Output {
    let mut args = split_args(input, prefix, out);
    args.extend_from_slice(extra);
    kpack(&args)
}

/// `kpack split --batch-artifact-parent-dir parent --output-dir out extra…`.
pub fn split_batch(parent: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "split",
        "--batch-artifact-parent-dir",
        s(parent),
        "--output-dir",
        s(out),
    ];
    args.extend_from_slice(extra);
    kpack(&args)
}

/// `kpack split --batch-artifact-parent-dir` for every fixture shard into
/// `dir/shards/<shard>`; returns `dir/shards`.
pub fn split_all(dir: &Path) -> PathBuf {
    let out = dir.join("shards");
    for sh in SHARDS {
        let o = split_batch(
            &artifacts().join(sh),
            &out.join(sh),
            &["--split-databases", "rocblas", "hipblaslt", "aotriton"],
        );
        assert!(o.status.success(), "split {sh}: {}", stderr(&o));
    }
    out
}

/// An artifact `dir/x_lib` whose prefix `lib` holds `name` with `bytes`.
pub fn artifact_with(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let art = dir.join("x_lib");
    write(&art.join("lib").join(name), bytes);
    write(&art.join("artifact_manifest.txt"), b"lib\n");
    art
}

/// [`artifact_with`] `lib/libx.so`, a copy of the fixture `libfx_multi.so`
/// (code objects for gfx1100 and gfx906, and host code).
pub fn multi_artifact(dir: &Path) -> PathBuf {
    let fat = std::fs::read(fatbins().join("libfx_multi.so")).expect("read libfx_multi.so");
    artifact_with(dir, "libx.so", &fat)
}

/// Asserts exit 2, the message names every one of `needles`, and nothing
/// was written (no output, no staging leftovers beside it). Returns stderr.
pub fn fails_cleanly(o: &Output, out: &Path, needles: &[&str]) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
    assert!(!out.exists(), "partial output left at {}", out.display());
    let parent = out.parent().expect("output has a parent");
    if parent.exists() {
        for n in dir_names(parent) {
            assert!(!n.contains(".partial-"), "staging dir {n} left behind");
        }
    }
    err
}

/// `kpack inspect --json extra… path`, asserted to succeed, parsed.
pub fn inspect_json(path: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["inspect", "--json"];
    args.extend_from_slice(extra);
    args.push(s(path));
    let o = kpack(&args);
    assert!(
        o.status.success(),
        "kpack inspect {}: {}",
        path.display(),
        stderr(&o)
    );
    serde_json::from_slice(&o.stdout).expect("inspect --json prints JSON")
}

/// The strings of the JSON array `v`.
pub fn json_strs(v: &serde_json::Value) -> Vec<&str> {
    json_items(v)
        .iter()
        .map(|x| x.as_str().unwrap_or_else(|| panic!("not a string: {x}")))
        .collect()
}

/// Field `field` (a string) of each object of the JSON array `v`.
pub fn json_field_strs<'a>(v: &'a serde_json::Value, field: &str) -> Vec<&'a str> {
    json_items(v)
        .iter()
        .map(|x| {
            x[field]
                .as_str()
                .unwrap_or_else(|| panic!("no string {field:?} in {x}"))
        })
        .collect()
}

/// The elements of the JSON array `v`.
pub fn json_items(v: &serde_json::Value) -> &[serde_json::Value] {
    v.as_array()
        .unwrap_or_else(|| panic!("not a JSON array: {v}"))
}

/// The kpack binary a memory or I/O test measures: `$KPACK_UNDER_TEST`
/// (e.g. an older build, to show the test fails on it), else this build's.
pub fn kpack_under_test() -> String {
    std::env::var("KPACK_UNDER_TEST").unwrap_or_else(|_| KPACK.to_string())
}

/// Output and peak RSS in KiB (an upper bound: `run_measured_peak_cmd`) of `cmd`.
pub fn run_peak(cmd: &std::process::Command) -> (std::process::Output, u64) {
    let (o, u) = run_measured_peak_cmd(cmd);
    (o, u.max_rss_kib)
}
