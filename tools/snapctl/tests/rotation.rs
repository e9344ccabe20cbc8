//! Rotation, rollback, checksums generation/check, verify, fetch, status, gc, bad input.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::time::SystemTime;

fn three_creates(s: &Scratch) -> [String; 3] {
    let mut shas = [String::new(), String::new(), String::new()];
    for (i, n) in [1u64, 2, 3].iter().enumerate() {
        shas[i] = s.artifact(*n);
        ok(&s.run(&s.create_args(*n, "6.4"), &[]));
    }
    shas
}

fn meta(s: &Scratch, rel: &str) -> String {
    fs::read_to_string(s.root().join(rel)).unwrap()
}

/// Content and metadata mtime of the seed's snapshots other than 6.4, which
/// creates of 6.4 must leave alone.
fn other_versions(s: &Scratch) -> Vec<(BTreeMap<String, Vec<u8>>, SystemTime)> {
    [
        "stable/6.2",
        "stable/7.0",
        "last-stable/6.2",
        "last-stable/7.0",
    ]
    .iter()
    .map(|d| {
        let dir = s.root().join(d);
        let mtime = fs::metadata(dir.join("metadata.txt"))
            .unwrap()
            .modified()
            .unwrap();
        (tree(&dir), mtime)
    })
    .collect()
}

#[test]
fn three_creates_rotate_and_never_touch_blobs_or_other_versions() {
    let s = Scratch::new(true);
    let before_other = other_versions(&s);

    let a1 = s.artifact(1);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    let stats1 = blob_stats(&s.store());
    assert_eq!(stats1.len(), 1);
    let a2 = s.artifact(2);
    ok(&s.run(&s.create_args(2, "6.4"), &[]));
    let stats2 = blob_stats(&s.store());
    let a3 = s.artifact(3);
    let out = ok(&s.run(&s.create_args(3, "6.4"), &[]));
    assert!(
        out.contains("archived archives/6.4/20260127_101112_metadata.txt"),
        "{out}"
    );
    let stats3 = blob_stats(&s.store());

    // Store: exactly three blobs, named by digest, each written once (same inode and mtime
    // ever since, one link: no temp copy left behind), content matching.
    assert_eq!(stats3.keys().cloned().collect::<Vec<_>>(), {
        let mut v = vec![a1.clone(), a2.clone(), a3.clone()];
        v.sort();
        v
    });
    for (k, v) in &stats1 {
        assert_eq!(stats3.get(k), Some(v), "blob {k} was rewritten or moved");
    }
    for (k, v) in &stats2 {
        assert_eq!(stats3.get(k), Some(v), "blob {k} was rewritten or moved");
    }
    for (k, (_, _, nlink)) in &stats3 {
        assert_eq!(*nlink, 1, "{k}");
        assert_eq!(
            sha256_hex(&fs::read(s.store().join("cas/sha256").join(k)).unwrap()),
            *k
        );
    }

    // stable = 3rd, last-stable = 2nd, archives = 1st (metadata + header).
    assert!(meta(&s, "stable/6.4/metadata.txt").contains(&format!("sha256: {a3}")));
    assert!(meta(&s, "last-stable/6.4/metadata.txt").contains(&format!("sha256: {a2}")));
    let arch = meta(&s, "archives/6.4/20260127_101112_metadata.txt");
    assert!(arch.contains(&format!("sha256: {a1}")), "{arch}");
    assert_eq!(
        meta(&s, "stable/6.4/rccl.h"),
        "/* rccl.h of build 3 */\n#define RCCLX_BUILD 3\n"
    );
    assert_eq!(
        meta(&s, "last-stable/6.4/rccl.h"),
        "/* rccl.h of build 2 */\n#define RCCLX_BUILD 2\n"
    );
    assert_eq!(
        meta(&s, "archives/6.4/20260127_101112_rccl.h"),
        "/* rccl.h of build 1 */\n#define RCCLX_BUILD 1\n"
    );
    let archives = fs::read_dir(s.root().join("archives/6.4")).unwrap().count();
    assert_eq!(archives, 2);
    assert!(!s.root().join("archives/6.2").exists() && !s.root().join("archives/7.0").exists());

    // Metadata written by snapctl: seed fields plus artifact name, size, store key.
    let m = meta(&s, "stable/6.4/metadata.txt");
    assert!(
        m.starts_with(
            "Snapshot created: 2026-01-27 10:11:12 UTC\nROCm version: 6.4\n\nChecksums:\n  sha1: "
        ),
        "{m}"
    );
    assert!(
        m.contains(&format!(
            "Artifact:\n  name: librcclx-dev.a\n  size: 53000\n  store_key: cas/sha256/{a3}\n"
        )),
        "{m}"
    );
    assert!(
        m.contains(&format!("Commit Hashes:\n  rcclx: {:040x}\n", 3)),
        "{m}"
    );

    // Other versions untouched (content and mtime).
    let after_other = other_versions(&s);
    assert_eq!(before_other, after_other);

    // No transaction leftovers.
    assert!(!s.root().join(".snapctl/journal.json").exists());
    assert_eq!(
        fs::read_dir(s.root().join(".snapctl/staging"))
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );

    // The checksums file is fresh and verify passes for 6.4 (the seed's blobs are not in this store).
    ok(&s.check("root/stable_checksums.bzl"));
}

#[test]
fn rerun_of_the_same_create_is_a_no_op() {
    let s = Scratch::new(false);
    three_creates(&s);
    let before = tree(&s.root());
    let out = ok(&s.run(&s.create_args(3, "6.4"), &[]));
    assert!(out.contains("nothing to do"), "{out}");
    assert_same_tree(&before, &tree(&s.root()), "re-run");
}

#[test]
fn rollback_swaps_last_stable_back() {
    let s = Scratch::new(true);
    let [_a1, a2, a3] = three_creates(&s);
    let out = ok(&s.cmd(&["rollback", "--snapshots-root", "root", "--version", "6.4"]));
    assert!(out.contains(&format!("stable/6.4 <- sha256 {a2}")), "{out}");
    assert!(meta(&s, "stable/6.4/metadata.txt").contains(&format!("sha256: {a2}")));
    assert_eq!(
        meta(&s, "stable/6.4/rccl.h"),
        "/* rccl.h of build 2 */\n#define RCCLX_BUILD 2\n"
    );
    assert!(!s.root().join("last-stable/6.4/metadata.txt").exists());
    // The old stable went to archives, with a stamp after the previous archive's.
    let m = meta(&s, "archives/6.4/20260127_101113_metadata.txt");
    assert!(m.contains(&format!("sha256: {a3}")), "{m}");
    assert!(s
        .root()
        .join("archives/6.4/20260127_101113_rccl.h")
        .exists());
    let bzl = meta(&s, "stable_checksums.bzl");
    assert!(bzl.contains(&format!("    \"6.4\": \"{a2}\",")), "{bzl}");
    ok(&s.check("root/stable_checksums.bzl"));
    // Nothing left to roll back to.
    let o = s.cmd(&["rollback", "--snapshots-root", "root", "--version", "6.4"]);
    fails_with(&o, 2, "no last-stable snapshot of ROCm 6.4");
}

#[test]
fn golden_checksums() {
    let s = Scratch::new(true);
    three_creates(&s);
    ok(&s.cmd(&[
        "gen-checksums",
        "--snapshots-root",
        "root",
        "--output",
        "a.bzl",
    ]));
    ok(&s.cmd(&[
        "gen-checksums",
        "--snapshots-root",
        "root",
        "--output",
        "b.bzl",
        "--prefix",
        "RCCLX",
    ]));
    let a = fs::read_to_string(s.path().join("a.bzl")).unwrap();
    let b = fs::read_to_string(s.path().join("b.bzl")).unwrap();
    assert_eq!(a, b, "gen-checksums is not byte-stable");
    // The file create wrote is the same too.
    assert_eq!(a, meta(&s, "stable_checksums.bzl"));
    let golden = golden_dir().join("stable_checksums.bzl");
    if std::env::var_os("SNAPCTL_UPDATE_GOLDEN").is_some() {
        fs::create_dir_all(golden_dir()).unwrap();
        fs::write(&golden, &a).unwrap();
    }
    assert_eq!(
        a,
        fs::read_to_string(&golden).unwrap(),
        "differs from {}",
        golden.display()
    );
    // The seed's own metadata (6.2, 7.0) is read unchanged.
    assert!(a.contains(
        "\"6.2\": \"d20d911c72f1295cc8782b023118647660d6e814610b5a102a59fa9eee7f50ad\","
    ));

    // Custom prefix renames the dicts.
    let o = ok(&s.cmd(&[
        "gen-checksums",
        "--snapshots-root",
        "root",
        "--output",
        "-",
        "--prefix",
        "NCCLX",
    ]));
    assert!(o.contains("NCCLX_STABLE_CHECKSUMS = {") && o.contains("NCCLX_SNAPSHOT_ARTIFACTS = {"));
    let o = s.cmd(&[
        "gen-checksums",
        "--snapshots-root",
        "root",
        "--output",
        "-",
        "--prefix",
        "bad-prefix",
    ]);
    assert_eq!(code(&o), 2);
}

#[test]
fn empty_root_gives_the_empty_form() {
    let s = Scratch::new(false);
    let o = ok(&s.cmd(&["gen-checksums", "--snapshots-root", "root", "--output", "-"]));
    let golden = golden_dir().join("empty_checksums.bzl");
    if std::env::var_os("SNAPCTL_UPDATE_GOLDEN").is_some() {
        fs::create_dir_all(golden_dir()).unwrap();
        fs::write(&golden, &o).unwrap();
    }
    assert_eq!(o, fs::read_to_string(golden).unwrap());
    assert!(o.contains("RCCLX_STABLE_CHECKSUMS = {\n}\n"));
    // gen-checksums on a read-only view creates nothing in the root.
    assert!(!s.root().join(".snapctl").exists());
}

#[test]
fn check_reports_stale_file_with_diff() {
    let s = Scratch::new(true);
    s.artifact(1);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    let stale = fs::read_to_string(s.root().join("stable_checksums.bzl")).unwrap();
    fs::write(s.path().join("checked_in.bzl"), &stale).unwrap();
    ok(&s.check("checked_in.bzl"));
    let a2 = s.artifact(2);
    ok(&s.run(&s.create_args(2, "6.4"), &[]));
    let o = s.check("checked_in.bzl");
    assert_eq!(code(&o), 1);
    let d = stdout(&o);
    assert!(
        d.starts_with("--- checked_in.bzl\n+++ checked_in.bzl (expected)\n@@"),
        "{d}"
    );
    assert!(d.contains(&format!("+    \"6.4\": \"{a2}\",")), "{d}");
    assert!(
        stderr(&o).contains("snapctl gen-checksums"),
        "{}",
        stderr(&o)
    );
    // A missing checked-in file is stale too.
    let o = s.check("nope.bzl");
    assert_eq!(code(&o), 1);
}

#[test]
fn verify_detects_corrupt_and_missing_blobs() {
    let s = Scratch::new(false);
    let [a1, a2, a3] = three_creates(&s);
    let o = s.cmd(&["verify", "--snapshots-root", "root", "--all"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));

    // Corrupt the stable blob.
    let p = s.store().join("cas/sha256").join(&a3);
    let mut perm = fs::metadata(&p).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    fs::set_permissions(&p, perm).unwrap();
    let mut bytes = fs::read(&p).unwrap();
    bytes[100] ^= 0xff;
    fs::write(&p, &bytes).unwrap();
    let actual = sha256_hex(&bytes);
    let o = s.cmd(&["verify", "--snapshots-root", "root"]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(out.contains("BAD 6.4 stable:"), "{out}");
    assert!(
        out.contains(&format!("expected sha256 {a3}, actual sha256 {actual}")),
        "{out}"
    );

    // fetch refuses it and writes nothing.
    let o = s.fetch(&[], Some("stable"), "6.4", "out.a");
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("expected sha256 {a3}, actual {actual}")),
        "{}",
        stderr(&o)
    );
    assert!(!s.path().join("out.a").exists());
    assert!(fs::read_dir(s.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains(".part")));

    // Missing last-stable blob.
    fs::remove_file(s.store().join("cas/sha256").join(&a2)).unwrap();
    let o = s.cmd(&["verify", "--snapshots-root", "root", "--json"]);
    assert_eq!(code(&o), 1);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let bad = v["bad"].as_array().unwrap();
    assert_eq!(bad.len(), 2, "{v}");
    assert!(bad.iter().any(|b| b["channel"] == "last-stable"
        && b["version"] == "6.4"
        && b["problem"]
            .as_str()
            .unwrap()
            .contains(&format!("expected sha256 {a2}, actual: missing"))));

    // Archived snapshot's blob is fine, and is checked with --all only.
    let o = s.cmd(&["verify", "--snapshots-root", "root", "--all"]);
    assert!(!stdout(&o).contains(&a1), "{}", stdout(&o));

    // A tampered header is reported too.
    fs::write(s.root().join("stable/6.4/rccl.h"), "tampered").unwrap();
    let o = s.cmd(&["verify", "--snapshots-root", "root"]);
    assert!(
        stdout(&o).contains("BAD 6.4 stable: header rccl.h: expected sha256"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn fetch_status_gc() {
    let s = Scratch::new(false);
    let [a1, a2, a3] = three_creates(&s);
    ok(&s.fetch(&[], Some("last-stable"), "6.4", "got.a"));
    assert_eq!(s.sha_of("got.a"), a2);
    let o = s.fetch(&[], None, "7.0", "x.a");
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("no stable snapshot of ROCm 7.0") && stderr(&o).contains("it has: 6.4"),
        "{}",
        stderr(&o)
    );

    let o = ok(&s.cmd(&["status", "--snapshots-root", "root", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert_eq!(v[0]["channel"], "stable");
    assert_eq!(v[0]["sha256"], a3.as_str());
    assert_eq!(v[0]["size"], 53000);
    assert_eq!(v[0]["created"], "2026-01-27 10:11:12");
    assert_eq!(v[1]["channel"], "last_stable");
    let o = ok(&s.cmd(&["status", "--snapshots-root", "root"]));
    assert!(
        o.lines()
            .nth(1)
            .unwrap()
            .starts_with("stable       6.4      "),
        "{o}"
    );

    // Every blob is referenced (archives count); an extra one is reported, not deleted.
    let o = ok(&s.cmd(&["gc", "--snapshots-root", "root", "--dry-run"]));
    assert_eq!(o, "");
    fs::write(s.store().join("cas/sha256").join("ab".repeat(32)), "x").unwrap();
    let o = ok(&s.cmd(&["gc", "--snapshots-root", "root", "--dry-run"]));
    assert_eq!(
        o.trim(),
        format!("would delete cas/sha256/{} (1 bytes)", "ab".repeat(32))
    );
    assert!(!o.contains(&a1));
    assert_eq!(code(&s.cmd(&["gc", "--snapshots-root", "root"])), 2);
}

fn assert_bad_input(s: &Scratch, args: &[String], needle: &str) {
    let before = tree(s.path());
    let o = s.run(args, &[]);
    assert_eq!(code(&o), 2, "stdout {} stderr {}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains(needle),
        "expected {needle:?} in: {}",
        stderr(&o)
    );
    assert_same_tree(&before, &tree(s.path()), "bad input must write nothing");
}

#[test]
fn bad_input_exits_2_naming_file_and_line_and_writes_nothing() {
    let s = Scratch::new(true);
    s.artifact(1);
    let args = s.create_args(1, "6.4");
    let m62 = s.root().join("stable/6.2/metadata.txt");
    let good = fs::read_to_string(&m62).unwrap();
    let sha = "d20d911c72f1295cc8782b023118647660d6e814610b5a102a59fa9eee7f50ad";

    fs::write(&m62, good.replace(&format!("  sha256: {sha}\n"), "")).unwrap();
    assert_bad_input(
        &s,
        &args,
        "root/stable/6.2/metadata.txt:4: missing checksum",
    );
    fs::write(&m62, good.replace(sha, &sha.replace('d', "z"))).unwrap();
    assert_bad_input(
        &s,
        &args,
        "root/stable/6.2/metadata.txt:6: sha256 must be 64 hex digits",
    );
    fs::write(&m62, good.replace(sha, &sha[..60])).unwrap();
    assert_bad_input(
        &s,
        &args,
        "root/stable/6.2/metadata.txt:6: sha256 must be 64 hex digits, found",
    );
    fs::write(&m62, good.replace("ROCm version: 6.2", "ROCm version: 6.x")).unwrap();
    assert_bad_input(
        &s,
        &args,
        "root/stable/6.2/metadata.txt:2: unknown ROCm version string \"6.x\"",
    );
    fs::write(&m62, good.replace("ROCm version: 6.2", "ROCm version: 6.4")).unwrap();
    assert_bad_input(
        &s,
        &args,
        "root/stable/6.2/metadata.txt:2: ROCm version 6.4 does not match",
    );
    fs::write(&m62, good.replace("Commit Hashes:", "Commit hashes:")).unwrap();
    assert_bad_input(
        &s,
        &args,
        "root/stable/6.2/metadata.txt:8: unknown field \"Commit hashes\"",
    );
    fs::write(&m62, &good).unwrap();

    // One bad value of `create_args` at a time: (index of the value, bad
    // value, what the message must say).
    for (i, bad, needle) in [
        // Unknown version string on the command line.
        (4, "6.4-rc1", "unknown ROCm version string \"6.4-rc1\""),
        // Artifact that does not exist.
        (6, "art/missing.a", "art/missing.a: artifact:"),
        // Header that does not exist.
        (8, "art/nope.h", "art/nope.h: header:"),
        // Malformed --commit.
        (10, "rcclx", "expected NAME=HASH"),
    ] {
        let mut a = args.clone();
        a[i] = bad.into();
        assert_bad_input(&s, &a, needle);
    }
    // Unreadable store: configured store is a file.
    fs::write(s.root().join("snapctl.conf"), "# cfg\nstore = notadir\n").unwrap();
    fs::write(s.root().join("notadir"), "x").unwrap();
    assert_bad_input(&s, &args, "root/snapctl.conf:2: store = notadir: store");
    fs::write(s.root().join("snapctl.conf"), "stor = x\n").unwrap();
    assert_bad_input(&s, &args, "root/snapctl.conf:1: unknown key \"stor\"");
    fs::remove_file(s.root().join("snapctl.conf")).unwrap();
    // Store given on the command line that cannot be used.
    let mut a = args.clone();
    a.extend(["--store".to_string(), "root/notadir".to_string()]);
    assert_bad_input(&s, &a, "not a directory");
    let mut a = args.clone();
    a.extend(["--store".to_string(), "ftp://x/y".to_string()]);
    assert_bad_input(&s, &a, "unsupported scheme ftp://");
    // Finally the good run works.
    ok(&s.run(&args, &[]));
}

#[test]
fn store_and_checksums_are_configured_once() {
    let s = Scratch::new(false);
    s.artifact(1);
    s.artifact(2);
    let mut a = s.create_args(1, "6.4");
    a.extend([
        "--store".into(),
        "blobs".into(),
        "--checksums".into(),
        "out/stable_checksums.bzl".into(),
    ]);
    ok(&s.run(&a, &[]));
    assert_eq!(
        fs::read_to_string(s.root().join("snapctl.conf")).unwrap(),
        "# snapctl configuration of this snapshots root (relative paths are relative to it).\nstore = ../blobs\nchecksums = ../out/stable_checksums.bzl\n"
    );
    // Second run: no --store / --checksums; the configured ones are used.
    ok(&s.run(&s.create_args(2, "6.4"), &[]));
    assert_eq!(blob_stats(&s.path().join("blobs")).len(), 2);
    assert!(!s.root().join("store").exists());
    ok(&s.check("out/stable_checksums.bzl"));
    ok(&s.cmd(&["verify", "--snapshots-root", "root"]));
}

#[test]
fn gen_checksums_on_a_symlink_farm_matches() {
    // Build systems stage the snapshots root as symlinks (files and whole directories).
    let s = Scratch::new(true);
    three_creates(&s);
    let farm = s.path().join("farm");
    for ch in ["stable", "last-stable"] {
        fs::create_dir_all(farm.join(ch)).unwrap();
        for v in ["6.2", "6.4"] {
            fs::create_dir_all(farm.join(ch).join(v)).unwrap();
            std::os::unix::fs::symlink(
                s.root().join(ch).join(v).join("metadata.txt"),
                farm.join(ch).join(v).join("metadata.txt"),
            )
            .unwrap();
        }
        std::os::unix::fs::symlink(s.root().join(ch).join("7.0"), farm.join(ch).join("7.0"))
            .unwrap();
    }
    let o = ok(&s.cmd(&["gen-checksums", "--snapshots-root", "farm", "--output", "-"]));
    assert_eq!(o, meta(&s, "stable_checksums.bzl"));
    ok(&s.cmd(&[
        "check",
        "--snapshots-root",
        "farm",
        "--checksums",
        "root/stable_checksums.bzl",
    ]));
    ok(&s.cmd(&[
        "fetch",
        "--snapshots-root",
        "farm",
        "--store",
        "root/store",
        "--version",
        "6.4",
        "-o",
        "f.a",
    ]));
    assert!(!farm.join(".snapctl").exists());
}

/// A non-rcclx library: the first `create --prefix` is remembered in snapctl.conf, so a later
/// `create`, `rollback` or `gen-checksums` without `--prefix` (the command the rules' missing
/// snapshot message prints) keeps the library's dict names; a different `--prefix` is refused.
#[test]
fn prefix_is_remembered_and_never_reverts_to_rcclx() {
    let s = Scratch::new(false);
    s.artifact(1);
    s.artifact(2);
    let mut first = s.create_args(1, "6.4");
    first.extend(["--prefix".into(), "MYLIB".into()]);
    ok(&s.run(&first, &[]));
    let conf = meta(&s, "snapctl.conf");
    assert!(conf.contains("prefix = MYLIB"), "{conf}");

    ok(&s.run(&s.create_args(2, "6.4"), &[]));
    let bzl = meta(&s, "stable_checksums.bzl");
    assert!(bzl.contains("MYLIB_STABLE_CHECKSUMS"), "{bzl}");
    assert!(bzl.contains("MYLIB_LAST_STABLE_CHECKSUMS"), "{bzl}");
    assert!(!bzl.contains("RCCLX"), "{bzl}");

    ok(&s.cmd(&["rollback", "--snapshots-root", "root", "--version", "6.4"]));
    let bzl = meta(&s, "stable_checksums.bzl");
    assert!(
        bzl.contains("MYLIB_STABLE_CHECKSUMS") && !bzl.contains("RCCLX"),
        "{bzl}"
    );
    let gen = ok(&s.cmd(&["gen-checksums", "--snapshots-root", "root", "--output", "-"]));
    assert!(gen.contains("MYLIB_STABLE_CHECKSUMS"), "{gen}");
    ok(&s.check("root/stable_checksums.bzl"));

    let mut other = s.create_args(1, "6.4");
    other.extend(["--prefix".into(), "OTHER".into()]);
    let o = s.run(&other, &[]);
    fails_with(&o, 2, "differs from prefix = MYLIB");
}

/// Item 5: `rollback` refuses a last-stable snapshot with a missing or changed header
/// (exit 2, nothing changes); readers leave uncommitted staging leftovers alone, so they
/// work on a read-only tree (they write nothing at all).
#[test]
fn rollback_refuses_incomplete_snapshot_and_readers_write_nothing() {
    let s = Scratch::new(false);
    s.artifact(1);
    s.artifact(2);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    ok(&s.run(&s.create_args(2, "6.4"), &[]));
    let header = s.root().join("last-stable/6.4/rccl.h");
    fs::remove_file(&header).unwrap();
    let before = tree(&s.root());
    let o = s.cmd(&["rollback", "--snapshots-root", "root", "--version", "6.4"]);
    fails_with(&o, 2, "rccl.h");
    assert!(stderr(&o).contains("incomplete"), "{}", stderr(&o));
    assert_same_tree(&before, &tree(&s.root()), "root after a refused rollback");
    fs::write(&header, b"changed\n").unwrap();
    let o = s.cmd(&["rollback", "--snapshots-root", "root", "--version", "6.4"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));

    // A stale, uncommitted staging directory (a writer killed before its commit).
    let staging = s.root().join(".snapctl/staging/leftover");
    fs::create_dir_all(&staging).unwrap();
    fs::write(staging.join("metadata.txt"), b"half").unwrap();
    let before = tree(&s.root());
    let mtime = |p: &std::path::Path| fs::metadata(p).unwrap().modified().unwrap();
    let dirs_before = (mtime(&s.root()), mtime(&staging));
    for args in [
        vec!["status", "--snapshots-root", "root"],
        vec!["gen-checksums", "--snapshots-root", "root", "--output", "-"],
        vec![
            "check",
            "--snapshots-root",
            "root",
            "--checksums",
            "root/stable_checksums.bzl",
        ],
    ] {
        ok(&s.cmd(&args));
    }
    assert_same_tree(&before, &tree(&s.root()), "root after readers");
    assert_eq!(dirs_before, (mtime(&s.root()), mtime(&staging)));
}
