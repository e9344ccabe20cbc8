//! Helpers shared by the snapctl integration tests (they drive the real binary).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

// Each test binary uses only part of these.
#[allow(unused_imports)]
pub use rocpack_testsupport::{copy_tree, repo_root, sh, sha256_hex, stderr, stdout};

pub const EPOCH: &str = "1769508672"; // 2026-01-27 10:11:12 UTC

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_snapctl")
}

pub fn seed_dir() -> PathBuf {
    repo_root().join("tests/snapshot/seed")
}

pub fn golden_dir() -> PathBuf {
    repo_root().join("tests/snapshot/golden")
}

/// A snapctl command in `cwd` with `args`, SOURCE_DATE_EPOCH fixed and the
/// fault-injection variables cleared.
pub fn snapctl_cmd<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> Command {
    let mut c = Command::new(bin());
    c.current_dir(cwd)
        .args(args)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env_remove("SNAPCTL_FAIL_AT")
        .env_remove("SNAPCTL_TRACE_STEPS");
    c
}

/// Runs snapctl with `args` in `cwd`, SOURCE_DATE_EPOCH fixed, extra env applied.
pub fn snapctl<S: AsRef<OsStr>>(cwd: &Path, args: &[S], env: &[(&str, &str)]) -> Output {
    let mut c = snapctl_cmd(cwd, args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run snapctl")
}

/// [`snapctl_cmd`] on the real clock (no SOURCE_DATE_EPOCH).
pub fn snapctl_now_cmd<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> Command {
    let mut c = snapctl_cmd(cwd, args);
    c.env_remove("SOURCE_DATE_EPOCH");
    c
}

/// Runs snapctl with `args` in `cwd` on the real clock.
pub fn snapctl_now<S: AsRef<OsStr>>(cwd: &Path, args: &[S]) -> Output {
    snapctl_now_cmd(cwd, args).output().expect("run snapctl")
}

/// snapctl in the scratch dir on the real clock, with a 256 MiB address-space
/// ceiling; panics when it still runs after 20 s (special files must be
/// refused, never read whole or waited on).
pub fn bounded(s: &Scratch, args: &[&str]) -> Output {
    let mut cmd = rocpack_testsupport::under_vmem_limit(bin(), 262_144);
    cmd.current_dir(s.path())
        .args(args)
        .env_remove("SOURCE_DATE_EPOCH");
    rocpack_testsupport::output_within(
        cmd,
        std::time::Duration::from_secs(20),
        &format!("snapctl {args:?}"),
    )
}

pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "snapctl failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Asserts `o` exited with `want` and its stderr contains `needle`; returns
/// the stderr.
pub fn fails_with(o: &Output, want: i32, needle: &str) -> String {
    let err = stderr(o);
    assert_eq!(code(o), want, "{err}");
    assert!(err.contains(needle), "`{needle}` not in: {err}");
    err
}

/// Deterministic pseudo-random bytes (xorshift), so digests are stable across runs.
pub fn det_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Every regular file under `dir`: relative path → content. Skips the lock file and
/// temp files of interrupted blob uploads (`cas/sha256/.tmp-*`).
pub fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let e = e.unwrap();
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            walk(base, &p, out);
        } else if !(rel.ends_with(".snapctl/lock")
            || rel.ends_with(".snapctl/.gitignore")
            || rel.contains("cas/sha256/.tmp-"))
        {
            out.insert(rel, fs::read(&p).unwrap());
        }
    }
}

/// (inode, mtime ns) of every blob in a local store.
pub fn blob_stats(store: &Path) -> BTreeMap<String, (u64, i64, u64)> {
    let mut out = BTreeMap::new();
    let cas = store.join("cas/sha256");
    for e in fs::read_dir(&cas).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let m = e.metadata().unwrap();
        out.insert(
            name,
            (
                m.ino(),
                m.mtime() * 1_000_000_000 + m.mtime_nsec(),
                m.nlink(),
            ),
        );
    }
    out
}

/// A scratch dir holding `root/` (copy of the seed), `art/` (artifacts, headers).
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new(with_seed: bool) -> Scratch {
        let dir = rocpack_testsupport::tempdir();
        if with_seed {
            copy_tree(&seed_dir(), &dir.path().join("root"));
        } else {
            fs::create_dir_all(dir.path().join("root")).unwrap();
        }
        fs::create_dir_all(dir.path().join("art")).unwrap();
        Scratch { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn root(&self) -> PathBuf {
        self.path().join("root")
    }
    pub fn store(&self) -> PathBuf {
        self.root().join("store")
    }
    /// Writes artifact `n` (deterministic content) and header `rccl.h` variant `n`; returns
    /// the artifact's sha256.
    pub fn artifact(&self, n: u64) -> String {
        let bytes = det_bytes(n, 50_000 + n as usize * 1000);
        fs::create_dir_all(self.path().join(format!("art/lib{n}"))).unwrap();
        fs::write(
            self.path().join(format!("art/lib{n}/librcclx-dev.a")),
            &bytes,
        )
        .unwrap();
        fs::write(
            self.path().join(format!("art/lib{n}/rccl.h")),
            format!("/* rccl.h of build {n} */\n#define RCCLX_BUILD {n}\n"),
        )
        .unwrap();
        sha256_hex(&bytes)
    }
    /// Args of `snapctl create` for artifact `n` and version `ver` (paths relative to the scratch dir).
    pub fn create_args(&self, n: u64, ver: &str) -> Vec<String> {
        vec![
            "create".into(),
            "--snapshots-root".into(),
            "root".into(),
            "--version".into(),
            ver.into(),
            "--artifact".into(),
            format!("art/lib{n}/librcclx-dev.a"),
            "--header".into(),
            format!("art/lib{n}/rccl.h"),
            "--commit".into(),
            format!("rcclx={:040x}", n),
        ]
    }
    pub fn run(&self, args: &[String], env: &[(&str, &str)]) -> Output {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        snapctl(self.path(), &a, env)
    }
    pub fn cmd(&self, args: &[&str]) -> Output {
        snapctl(self.path(), args, &[])
    }
    /// `snapctl check --snapshots-root root --checksums <checksums>`.
    pub fn check(&self, checksums: &str) -> Output {
        self.cmd(&[
            "check",
            "--snapshots-root",
            "root",
            "--checksums",
            checksums,
        ])
    }
    /// `snapctl fetch --snapshots-root root <store…> [--channel <channel>]
    /// --version <version> -o <out>`; `store` is empty or `["--store", …]`.
    pub fn fetch(&self, store: &[&str], channel: Option<&str>, version: &str, out: &str) -> Output {
        let mut a = vec!["fetch", "--snapshots-root", "root"];
        a.extend_from_slice(store);
        if let Some(c) = channel {
            a.extend(["--channel", c]);
        }
        a.extend(["--version", version, "-o", out]);
        self.cmd(&a)
    }
    /// SHA-256 of the file at `rel` in the scratch dir.
    pub fn sha_of(&self, rel: &str) -> String {
        sha256_hex(&fs::read(self.path().join(rel)).unwrap())
    }
}

/// Asserts two trees are equal, printing only the differing paths.
pub fn assert_same_tree(a: &BTreeMap<String, Vec<u8>>, b: &BTreeMap<String, Vec<u8>>, what: &str) {
    let mut diff = Vec::new();
    for k in a.keys().chain(b.keys()) {
        if a.get(k) != b.get(k) && !diff.contains(k) {
            diff.push(k.clone());
        }
    }
    assert!(diff.is_empty(), "{what}: trees differ at {diff:?}");
}
