//! Regression tests for the snapshot items of the hardening issue that the
//! other files do not cover: crash and ENOSPC leftovers in the store, a
//! corrupt local blob, a source truncated while it is copied, special files
//! planted in the private directory, and readers on a really read-only tree.

mod common;

use common::*;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Names in the store's `cas/sha256/` that are not blobs.
fn store_temps(s: &Scratch) -> Vec<String> {
    fs::read_dir(s.store().join("cas/sha256"))
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| !(n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit())))
                .collect()
        })
        .unwrap_or_default()
}

/// Item 3: `kill -9` while the artifact is being copied into the store leaves
/// no temp file there (the copy has no name until it is linked into place).
#[test]
fn kill_during_upload_leaves_no_temp_file_in_the_store() {
    let s = Scratch::new(false);
    s.artifact(1);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    s.artifact(2);
    // A large artifact so the copy is still running when the kill lands.
    let big = s.path().join("art/lib2/librcclx-dev.a");
    let f = fs::File::create(&big).unwrap();
    f.set_len(1 << 30).unwrap();
    drop(f);
    let mut child = Command::new(bin())
        .current_dir(s.path())
        .args(s.create_args(2, "6.4"))
        .env_remove("SOURCE_DATE_EPOCH")
        .env("SNAPCTL_TRACE_STEPS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "create ended early");
        if line.contains("upload: copy artifact") {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    child.kill().unwrap(); // SIGKILL
    let st = child.wait().unwrap();
    assert!(st.code().is_none(), "create finished before the kill");
    assert_eq!(store_temps(&s), Vec::<String>::new());
    ok(&s.cmd(&["verify", "--snapshots-root", "root"]));
}

/// Item 3: an artifact truncated while `create` copies it is an error or a
/// consistent snapshot of what was read, never SIGBUS; no temp file remains.
#[test]
fn artifact_truncated_while_copied_is_not_sigbus() {
    let s = Scratch::new(false);
    s.artifact(1);
    let art = s.path().join("art/lib1/librcclx-dev.a");
    for round in 0..3u64 {
        let f = fs::File::create(&art).unwrap();
        f.set_len(128 << 20).unwrap();
        drop(f);
        let mut args = s.create_args(1, "6.4");
        args.pop();
        args.push(format!("rcclx={:040x}", 10 + round));
        let child = Command::new(bin())
            .current_dir(s.path())
            .args(&args)
            .env_remove("SOURCE_DATE_EPOCH")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 * round));
        fs::OpenOptions::new()
            .write(true)
            .open(&art)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(
            o.status.code().is_some(),
            "killed by a signal: {:?}",
            o.status
        );
        assert_eq!(store_temps(&s), Vec::<String>::new());
    }
    ok(&s.cmd(&["verify", "--snapshots-root", "root", "--all"]));
}

/// A local blob whose bytes do not hash to its name no longer makes every
/// later `create` of that artifact fail: the verified upload replaces it.
#[test]
fn corrupt_local_blob_is_replaced_by_the_next_upload() {
    let s = Scratch::new(false);
    let sha = s.artifact(1);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    let blob = s.store().join("cas/sha256").join(&sha);
    fs::remove_file(&blob).unwrap();
    fs::write(&blob, b"rotten").unwrap();
    let o = s.cmd(&["verify", "--snapshots-root", "root"]);
    assert_eq!(code(&o), 1);
    let o = s.run(&s.create_args(1, "7.0"), &[]);
    fails_with(&o, 0, "replacing it");
    assert_eq!(sha256_hex(&fs::read(&blob).unwrap()), sha);
    assert_eq!(store_temps(&s), Vec::<String>::new());
    ok(&s.cmd(&["verify", "--snapshots-root", "root", "--all"]));
}

/// snapctl with a 256 MiB address-space ceiling; panics when it runs 20 s.
fn bounded(s: &Scratch, args: &[&str]) -> Output {
    let mut cmd = rocpack_testsupport::under_vmem_limit(bin(), 262_144);
    cmd.current_dir(s.path())
        .args(args)
        .env_remove("SOURCE_DATE_EPOCH");
    rocpack_testsupport::output_within(cmd, Duration::from_secs(20), &format!("snapctl {args:?}"))
}

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

/// Item 6: the journal and the lock of `.snapctl/` as special files (a
/// symlink to /dev/zero, a FIFO) are refused, never read whole or waited on.
#[test]
fn special_files_in_the_private_dir_are_refused_not_read() {
    let s = Scratch::new(false);
    s.artifact(1);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    let pdir = s.root().join(".snapctl");
    let journal = pdir.join("journal.json");

    std::os::unix::fs::symlink("/dev/zero", &journal).unwrap();
    for args in [
        vec!["status", "--snapshots-root", "root"],
        vec!["recover", "--snapshots-root", "root"],
    ] {
        let o = bounded(&s, &args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("journal.json"), "{}", stderr(&o));
        assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    }
    fs::remove_file(&journal).unwrap();
    mkfifo(&journal);
    let o = bounded(&s, &["status", "--snapshots-root", "root"]);
    fails_with(&o, 2, "FIFO");
    fs::remove_file(&journal).unwrap();

    // The lock a FIFO (a reader would block opening it) and .gitignore a FIFO
    // (a writer would block writing it): both go on.
    let lock = pdir.join("lock");
    fs::remove_file(&lock).unwrap();
    mkfifo(&lock);
    ok(&bounded(&s, &["status", "--snapshots-root", "root"]));
    fs::remove_file(&lock).unwrap();
    let gi = pdir.join(".gitignore");
    fs::remove_file(&gi).unwrap();
    mkfifo(&gi);
    s.artifact(2);
    let args: Vec<String> = s.create_args(2, "6.4");
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&bounded(&s, &a));
    assert_eq!(fs::read(&gi).unwrap(), b"*\n");
    ok(&s.cmd(&["verify", "--snapshots-root", "root"]));
}

/// Item 5: readers work on a really read-only tree (a read-only bind mount)
/// that holds a stale staging directory. Needs root for the mount; without
/// it the test says so and checks nothing.
#[test]
fn readers_work_on_a_read_only_mount_with_stale_staging() {
    let s = Scratch::new(false);
    s.artifact(1);
    s.artifact(2);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    ok(&s.run(&s.create_args(2, "6.4"), &[]));
    let staging = s.root().join(".snapctl/staging/20260101_000000-1");
    fs::create_dir_all(&staging).unwrap();
    fs::write(staging.join("000"), b"half").unwrap();
    let ro = s.path().join("ro");
    fs::create_dir(&ro).unwrap();
    let mounted = Command::new("mount")
        .args(["--bind", "-o", "ro"])
        .arg(s.root())
        .arg(&ro)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|st| st.success())
        && Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(&ro)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|st| st.success());
    if !mounted {
        let _ = Command::new("umount").arg(&ro).status();
        eprintln!("SKIPPED: cannot make a read-only bind mount (needs root)");
        return;
    }
    // Really read-only.
    assert!(fs::write(ro.join("probe"), b"x").is_err());
    let mut results = Vec::new();
    for args in [
        vec!["status", "--snapshots-root", "ro"],
        vec!["verify", "--snapshots-root", "ro", "--all"],
        vec!["gen-checksums", "--snapshots-root", "ro", "--output", "-"],
        vec![
            "check",
            "--snapshots-root",
            "ro",
            "--checksums",
            "ro/stable_checksums.bzl",
        ],
        vec![
            "fetch",
            "--snapshots-root",
            "ro",
            "--version",
            "6.4",
            "-o",
            "got.a",
        ],
    ] {
        results.push((args.clone(), s.cmd(&args)));
    }
    let _ = Command::new("umount").arg(&ro).status();
    for (args, o) in results {
        assert_eq!(code(&o), 0, "{args:?}: {}{}", stdout(&o), stderr(&o));
    }
}
