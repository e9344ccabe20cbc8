//! Races and hostile trees with the real clock (no SOURCE_DATE_EPOCH): a
//! pinned clock cannot see two rotations within one second.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Output, Stdio};

use common::*;

/// snapctl with the real clock.
fn real_clock(s: &Scratch, args: &[String]) -> Output {
    snapctl_now(s.path(), args)
}

/// Every commit reachable from stable, last-stable and archives of `ver`.
fn reachable_commits(root: &Path, ver: &str) -> Vec<String> {
    let mut files = vec![
        root.join("stable").join(ver).join("metadata.txt"),
        root.join("last-stable").join(ver).join("metadata.txt"),
    ];
    if let Ok(rd) = std::fs::read_dir(root.join("archives").join(ver)) {
        for e in rd {
            let p = e.unwrap().path();
            if p.to_string_lossy().ends_with("_metadata.txt") {
                files.push(p);
            }
        }
    }
    let mut commits = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix("rcclx:") {
                commits.push(rest.trim().to_owned());
            }
        }
    }
    commits
}

fn assert_none_lost(root: &Path, ver: &str, n: u64) {
    let got = reachable_commits(root, ver);
    let set: BTreeSet<&String> = got.iter().collect();
    assert_eq!(
        set.len(),
        got.len(),
        "a snapshot is reachable twice: {got:?}"
    );
    let want: BTreeSet<String> = (1..=n).map(|i| format!("{i:040x}")).collect();
    let have: BTreeSet<String> = got.iter().cloned().collect();
    let lost: Vec<&String> = want.difference(&have).collect();
    assert!(
        lost.is_empty(),
        "{} of {n} snapshots lost: {lost:?}",
        lost.len()
    );
}

#[test]
fn quick_sequential_creates_lose_no_snapshot() {
    let s = Scratch::new(false);
    let n = 8;
    for i in 1..=n {
        s.artifact(i);
        ok(&real_clock(&s, &s.create_args(i, "6.4")));
    }
    assert_none_lost(&s.root(), "6.4", n);
    // verify and check agree with what is there.
    ok(&s.cmd(&["verify", "--snapshots-root", "root"]));
}

#[test]
fn concurrent_creates_lose_no_snapshot() {
    let s = Scratch::new(false);
    let (rounds, per_round) = (3u64, 8u64);
    for i in 1..=rounds * per_round {
        s.artifact(i);
    }
    for r in 0..rounds {
        let children: Vec<_> = (1..=per_round)
            .map(|k| {
                let i = r * per_round + k;
                snapctl_now_cmd(s.path(), &s.create_args(i, "7.0"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
    }
    assert_none_lost(&s.root(), "7.0", rounds * per_round);
}

#[test]
fn special_files_are_refused_not_read() {
    let s = Scratch::new(false);
    s.artifact(1);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    let meta = s.root().join("stable/6.4/metadata.txt");
    let conf = s.root().join("snapctl.conf");
    let conf_text = std::fs::read(&conf).ok();

    // metadata.txt -> /dev/zero, then a FIFO.
    std::fs::remove_file(&meta).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &meta).unwrap();
    let o = bounded(&s, &["status", "--snapshots-root", "root"]);
    fails_with(&o, 2, "not a regular file");
    std::fs::remove_file(&meta).unwrap();
    rocpack_testsupport::mkfifo(&meta);
    let o = bounded(&s, &["status", "--snapshots-root", "root"]);
    fails_with(&o, 2, "FIFO");
    std::fs::remove_file(&meta).unwrap();

    // snapctl.conf -> /dev/zero.
    let _ = std::fs::remove_file(&conf);
    std::os::unix::fs::symlink("/dev/zero", &conf).unwrap();
    let o = bounded(&s, &["status", "--snapshots-root", "root"]);
    fails_with(&o, 2, "snapctl.conf");
    std::fs::remove_file(&conf).unwrap();
    if let Some(t) = conf_text {
        std::fs::write(&conf, t).unwrap();
    }
    ok(&s.cmd(&["status", "--snapshots-root", "root"]));
}
