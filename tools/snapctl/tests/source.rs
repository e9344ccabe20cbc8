//! Source snapshots (`create --kind source`, `rotate`, `check`, `record-patch`)
//! against a real git repository. Oracles: `git ls-tree` + `git cat-file`
//! for what a cut must hold, `rocpack_testsupport::snapshot` for trees.

mod common;

use common::*;
use rocpack_testsupport::{git, git_blob_sha256, git_commit_all, git_init, s, snapshot, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A git repository `src/` with a library `lib/rcl` (two packages, a
/// symlink, an executable, a tests/ dir) and `n` commits changing it.
/// Returns the commit ids, oldest first.
fn make_repo(dir: &Path, n: usize) -> Vec<String> {
    let r = dir.join("src");
    git_init(&r);
    let lib = r.join("lib/rcl");
    fs::create_dir_all(lib.join("core")).unwrap();
    fs::create_dir_all(lib.join("tests")).unwrap();
    fs::write(r.join("README"), "outside the subtree\n").unwrap();
    fs::write(lib.join("tests/t.c"), "int test;\n").unwrap();
    fs::write(lib.join("build.sh"), "#!/bin/sh\necho build\n").unwrap();
    fs::set_permissions(lib.join("build.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("core/api.h", lib.join("api.h")).unwrap();
    let mut ids = Vec::new();
    for i in 1..=n {
        fs::write(
            lib.join("core/api.h"),
            format!("#define RCL_VERSION {i}\nint rcl_add(int, int);\n"),
        )
        .unwrap();
        fs::write(
            lib.join("core/impl.c"),
            format!(
                "int rcl_add(int a, int b) {{ return a + b + {}; }}\n",
                i - 1
            ),
        )
        .unwrap();
        ids.push(git_commit_all(&r, &format!("rcl drop {i}: nranks check")));
    }
    ids
}

/// What a cut of `lib/rcl` at `commit` (tests/ excluded) must hold, from
/// `git ls-tree` and `git cat-file` (not from git archive or snapctl).
fn expected_tree(repo: &Path, commit: &str) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let ls = git(repo, &["ls-tree", "-r", "-t", commit, "--", "lib/rcl"]);
    for line in ls.lines() {
        let (meta, path) = line.split_once('\t').unwrap();
        if path.contains("/tests") {
            continue;
        }
        let f: Vec<&str> = meta.split(' ').collect();
        let node = match f[0] {
            "040000" => Node::Dir,
            "120000" => Node::Link(PathBuf::from(git(repo, &["cat-file", "blob", f[2]]))),
            m => Node::File {
                mode: if m == "100755" { 0o755 } else { 0o644 },
                sha: git_blob_sha256(repo, f[2]),
            },
        };
        out.insert(path.to_string(), node);
    }
    out.insert("lib".into(), Node::Dir);
    out
}

/// A snapshot directory's tree without its own files (metadata.txt, manifest.txt).
fn snapshot_tree(dir: &Path) -> BTreeMap<String, Node> {
    let mut t = snapshot(dir);
    t.remove("metadata.txt");
    t.remove("manifest.txt");
    t
}

/// A channel's tree without its own files.
fn channel_tree(root: &Path, ch: &str) -> BTreeMap<String, Node> {
    snapshot_tree(&root.join(ch))
}

fn meta_value(root: &Path, ch: &str, key: &str) -> Option<String> {
    let text = fs::read_to_string(root.join(ch).join("metadata.txt")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")).map(str::to_string))
}

fn cut_args(rev: &str) -> Vec<String> {
    [
        "create",
        "--kind",
        "source",
        "--snapshots-root",
        "root",
        "--repo",
        "src",
        "--rev",
        rev,
        "--subtree",
        "lib/rcl",
        "--exclude",
        "**/tests/**",
        "--exclude",
        "tests/**",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn check(dir: &Path) -> Output {
    snapctl_now(dir, &["check", "--snapshots-root", "root"])
}

#[test]
fn cut_rotate_patch_and_check() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    let ids = make_repo(d, 3);
    let src = d.join("src");
    let root = d.join("root");

    // First cut: stable = ids[0], exactly git's content, symlink kept, tests excluded.
    let out = ok(&snapctl_now(d, &cut_args(&ids[0])));
    assert!(out.contains("stable <- "), "{out}");
    assert_eq!(channel_tree(&root, "stable"), expected_tree(&src, &ids[0]));
    assert!(fs::symlink_metadata(root.join("stable/lib/rcl/api.h"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!root.join("stable/lib/rcl/tests").exists());
    assert_eq!(
        meta_value(&root, "stable", "source_commit").unwrap(),
        ids[0]
    );
    assert_eq!(
        meta_value(&root, "stable", "source_commit_description").unwrap(),
        "rcl drop 1: nranks check"
    );
    assert_eq!(
        meta_value(&root, "stable", "source_commit_date").unwrap(),
        git(&src, &["log", "-1", "--format=%cI", &ids[0]])
    );
    assert_eq!(
        meta_value(&root, "stable", "repo_revision").unwrap(),
        ids[2]
    );
    // Real UTC, not the local clock labelled UTC.
    let created = meta_value(&root, "stable", "snapshot_created").unwrap();
    let secs = |args: &[&str]| -> i64 {
        stdout(&Command::new("date").args(args).output().unwrap())
            .trim()
            .parse()
            .unwrap()
    };
    let skew = secs(&["-u", "+%s"]) - secs(&["-u", "-d", &created, "+%s"]);
    assert!(
        created.ends_with('Z') && (0..120).contains(&skew),
        "{created}: {skew} s from now"
    );
    assert!(!root.join("last-stable").exists());
    ok(&check(d));

    // An unrecorded edit is a red check naming the channel; record-patch makes it honest.
    fs::write(
        root.join("stable/lib/rcl/core/impl.c"),
        "int rcl_add(int a, int b) { return a + b; } /* hotfix */\n",
    )
    .unwrap();
    let o = check(d);
    let msg = stdout(&o);
    assert_eq!(code(&o), 1, "{msg}");
    assert!(
        msg.contains("BAD stable") && msg.contains("edited without being recorded"),
        "{msg}"
    );
    assert!(
        msg.contains("\n    changed lib/rcl/core/impl.c (content)\n"),
        "{msg}"
    );
    let err = fails_with(
        &snapctl_now(d, &cut_args(&ids[1])),
        2,
        "refusing to rotate stable",
    );
    assert!(
        err.contains("changed lib/rcl/core/impl.c (content)"),
        "{err}"
    );
    let o = snapctl_now(
        d,
        &[
            "record-patch",
            "--snapshots-root",
            "root",
            "--channel",
            "stable",
            "--who",
            "dev@example.com",
            "--why",
            "backport of the init-hang fix",
        ],
    );
    ok(&o);
    ok(&check(d));
    let patched = channel_tree(&root, "stable");
    let again = snapctl_now(
        d,
        &[
            "record-patch",
            "--snapshots-root",
            "root",
            "--who",
            "x",
            "--why",
            "y",
        ],
    );
    fails_with(&again, 2, "nothing to record");

    // Second cut rotates: last-stable = the patched stable, byte for byte.
    ok(&snapctl_now(d, &cut_args(&ids[1])));
    assert_eq!(channel_tree(&root, "last-stable"), patched);
    assert_eq!(channel_tree(&root, "stable"), expected_tree(&src, &ids[1]));
    assert_eq!(
        meta_value(&root, "last-stable", "source_commit").unwrap(),
        ids[0]
    );
    assert_eq!(
        meta_value(&root, "last-stable", "rotated_from").unwrap(),
        "stable"
    );
    assert!(meta_value(&root, "last-stable", "patch")
        .unwrap()
        .contains("by dev@example.com: backport"));
    ok(&check(d));

    // Third cut: the old last-stable goes to archives/, whole.
    ok(&snapctl_now(d, &cut_args(&ids[2])));
    let arch: Vec<_> = fs::read_dir(root.join("archives"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(arch.len(), 1, "{arch:?}");
    assert_eq!(snapshot_tree(&arch[0]), patched);
    // Same cut again: nothing to do.
    let out = ok(&snapctl_now(d, &cut_args(&ids[2])));
    assert!(out.contains("nothing to do"), "{out}");

    // Hand-editing tree_digest to hide an edit is caught too.
    fs::write(root.join("stable/lib/rcl/core/impl.c"), "sneaky\n").unwrap();
    let manifest_digest = {
        // Make metadata claim the new digest without a patch line.
        let o = check(d);
        let m = stdout(&o);
        let i = m.find("tree digest ").unwrap() + "tree digest ".len();
        m[i..i + 71].to_string()
    };
    let mp = root.join("stable/metadata.txt");
    let text = fs::read_to_string(&mp).unwrap();
    let old = meta_value(&root, "stable", "tree_digest").unwrap();
    let forged = text.replace(
        &format!("\ntree_digest: {old}"),
        &format!("\ntree_digest: {manifest_digest}"),
    );
    assert_ne!(forged, text);
    fs::write(&mp, &forged).unwrap();
    let o = check(d);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("edited by hand"), "{}", stdout(&o));
    // Forging both digests passes the plain check; re-cutting the recorded commit does not.
    fs::write(
        &mp,
        forged.replace(
            &format!("cut_tree_digest: {old}"),
            &format!("cut_tree_digest: {manifest_digest}"),
        ),
    )
    .unwrap();
    ok(&check(d));
    let o = snapctl_now(d, &["check", "--snapshots-root", "root", "--repo", "src"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o).contains("is not what this tree came from"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn recorded_commit_drift_is_red_with_repo() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    let ids = make_repo(d, 2);
    ok(&snapctl_now(d, &cut_args(&ids[0])));
    let with_repo = ["check", "--snapshots-root", "root", "--repo", "src"];
    ok(&snapctl_now(d, &with_repo));
    // Upstream's failure: the recorded commit names another commit than the contents.
    let mp = d.join("root/stable/metadata.txt");
    let text = fs::read_to_string(&mp).unwrap();
    fs::write(&mp, text.replace(&ids[0], &ids[1])).unwrap();
    ok(&check(d)); // the tree itself is unchanged...
    let o = snapctl_now(d, &with_repo);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("is not what this tree came from"),
        "{}",
        stdout(&o)
    );
}

/// `manifest.txt` of a channel, checked against the recorded tree_digest.
fn recorded_manifest(root: &Path, ch: &str) -> String {
    let m = fs::read_to_string(root.join(ch).join("manifest.txt")).unwrap();
    assert_eq!(
        format!("sha256:{}", sha256_hex(m.as_bytes())),
        meta_value(root, ch, "tree_digest").unwrap(),
        "{ch}/manifest.txt is not the manifest of its tree_digest"
    );
    m
}

#[test]
fn check_names_each_added_removed_and_changed_file() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    let ids = make_repo(d, 2);
    let root = d.join("root");
    ok(&snapctl_now(d, &cut_args(&ids[0])));
    // The cut records its manifest: one line per entry, its sha256 the tree digest.
    let m = recorded_manifest(&root, "stable");
    assert!(
        m.contains(" lib/rcl/core/impl.c\n") && m.starts_with("dir  - lib\n"),
        "{m}"
    );
    let rcl = root.join("stable/lib/rcl");
    fs::write(
        rcl.join("core/impl.c"),
        "int rcl_add(int a, int b) { return 0; }\n",
    )
    .unwrap();
    fs::write(rcl.join("core/extra.c"), "int extra;\n").unwrap();
    fs::remove_file(rcl.join("api.h")).unwrap();
    fs::set_permissions(rcl.join("build.sh"), fs::Permissions::from_mode(0o644)).unwrap();
    let o = check(d);
    let msg = stdout(&o);
    assert_eq!(code(&o), 1, "{msg}");
    let named: Vec<&str> = msg.lines().filter(|l| l.starts_with("    ")).collect();
    assert_eq!(
        named,
        [
            "    removed lib/rcl/api.h",
            "    changed lib/rcl/build.sh (x bit cleared)",
            "    added   lib/rcl/core/extra.c",
            "    changed lib/rcl/core/impl.c (content)",
        ],
        "{msg}"
    );
    // A deliberate edit: record-patch records the new manifest with it, and the
    // next edit is named against the patched tree, not the cut.
    ok(&snapctl_now(
        d,
        &[
            "record-patch",
            "--snapshots-root",
            "root",
            "--who",
            "a",
            "--why",
            "b",
        ],
    ));
    ok(&check(d));
    recorded_manifest(&root, "stable");
    fs::write(rcl.join("core/extra.c"), "int extra2;\n").unwrap();
    let msg = stdout(&check(d));
    assert!(
        msg.contains("\n    changed lib/rcl/core/extra.c (content)\n"),
        "{msg}"
    );
    assert_eq!(
        msg.lines().filter(|l| l.starts_with("    ")).count(),
        1,
        "{msg}"
    );
    fs::write(rcl.join("core/extra.c"), "int extra;\n").unwrap();
    // Rotation gives last-stable the manifest of the tree it copied.
    let patched = recorded_manifest(&root, "stable");
    ok(&snapctl_now(d, &cut_args(&ids[1])));
    assert_eq!(recorded_manifest(&root, "last-stable"), patched);
    recorded_manifest(&root, "stable");
    ok(&check(d));

    // A tampered manifest is not trusted: the verdict stands, the names are refused.
    let mp = root.join("stable/manifest.txt");
    let good = fs::read_to_string(&mp).unwrap();
    fs::write(
        &mp,
        good.replace("lib/rcl/core/impl.c", "lib/rcl/core/other.c"),
    )
    .unwrap();
    ok(&check(d)); // manifest.txt is not part of the tree
    fs::write(root.join("stable/lib/rcl/core/impl.c"), "edited\n").unwrap();
    let msg = stdout(&check(d));
    assert!(msg.contains("edited without being recorded"), "{msg}");
    assert!(
        msg.contains("manifest.txt is not the manifest of sha256:"),
        "{msg}"
    );
    // An older snapshot without one: the verdict stands and it says why no file is named.
    fs::remove_file(&mp).unwrap();
    let o = check(d);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("no manifest.txt (the snapshot predates per-file manifests)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn recut_with_repo_names_the_files_the_recorded_commit_does_not_hold() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    let ids = make_repo(d, 2);
    ok(&snapctl_now(d, &cut_args(&ids[0])));
    let mp = d.join("root/stable/metadata.txt");
    let text = fs::read_to_string(&mp).unwrap();
    fs::write(&mp, text.replace(&ids[0], &ids[1])).unwrap();
    let o = snapctl_now(d, &["check", "--snapshots-root", "root", "--repo", "src"]);
    let msg = stdout(&o);
    assert_eq!(code(&o), 1, "{msg}");
    let named: Vec<&str> = msg.lines().filter(|l| l.starts_with("    ")).collect();
    assert_eq!(
        named,
        [
            "    changed lib/rcl/core/api.h (content)",
            "    changed lib/rcl/core/impl.c (content)",
        ],
        "{msg}"
    );
}

const ERA2B: &str = "# RCCLX Snapshot Metadata\n# The rcclx/ directory holds the current stable snapshot sources\n#\n# x\n\nsource_commit: 6f840ba5d808aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nsource_commit_date: 2026-01-30 10:00 -0800\nsource_commit_description: DDA nranks check patch\n\nfbsource_revision: 34f53cfe1715bbbbbbbbbbbbbbbbbbbbbbbbbbbb\nfbsource_revision_date: 2026-08-20 09:00 -0700\n\nsnapshot_created: 2026-08-21T11:00:00.000001\ncreated_by: create_snapshot.py\n";
const ERA2A: &str = "# RCCLX Snapshot Metadata\n# c\n# c\n\ncommit: 3a4e8509bb07cccccccccccccccccccccccccccc\ncommit_date: 2025-11-10 10:00 -0800\ncommit_description: old drop\nsnapshot_created: 2026-02-01T16:26:17.476463\ncreated_by: create_snapshot.py\n";

#[test]
fn era2_trees_are_read_adopted_and_rotated() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    let root = d.join("root");
    for (ch, meta) in [("stable", ERA2B), ("last-stable", ERA2A)] {
        fs::create_dir_all(root.join(ch).join("comms/rcclx")).unwrap();
        fs::write(root.join(ch).join("metadata.txt"), meta).unwrap();
        fs::write(
            root.join(ch).join("comms/rcclx/rccl.h"),
            format!("/* {ch} */\n"),
        )
        .unwrap();
    }
    let st = ok(&snapctl_now(
        d,
        &["status", "--snapshots-root", "root", "--json"],
    ));
    let v: serde_json::Value = serde_json::from_str(&st).unwrap();
    assert_eq!(
        v[0]["source_commit"],
        "6f840ba5d808aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    );
    assert_eq!(
        v[0]["repo_revision"],
        "34f53cfe1715bbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    );
    assert_eq!(
        v[1]["source_commit"],
        "3a4e8509bb07cccccccccccccccccccccccccccc"
    );
    // Never verified: red until adopted.
    let o = check(d);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("no tree_digest recorded"),
        "{}",
        stdout(&o)
    );
    fails_with(
        &snapctl_now(d, &["rotate", "--snapshots-root", "root"]),
        2,
        "refusing to rotate stable",
    );
    for ch in ["stable", "last-stable"] {
        ok(&snapctl_now(
            d,
            &[
                "record-patch",
                "--snapshots-root",
                "root",
                "--channel",
                ch,
                "--who",
                "snap",
                "--why",
                "adopt the era-2 tree",
            ],
        ));
    }
    ok(&check(d));
    let stable_tree = channel_tree(&root, "stable");
    ok(&snapctl_now(d, &["rotate", "--snapshots-root", "root"]));
    assert_eq!(channel_tree(&root, "last-stable"), stable_tree);
    assert_eq!(
        meta_value(&root, "last-stable", "repo_revision").unwrap(),
        "34f53cfe1715bbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    );
    ok(&check(d));
}

/// (stable commit, last-stable commit) plus both trees: the observable state.
type State = (
    Option<String>,
    Option<String>,
    BTreeMap<String, Node>,
    BTreeMap<String, Node>,
);

fn state(root: &Path) -> State {
    let tree_of = |ch: &str| {
        if root.join(ch).exists() {
            channel_tree(root, ch)
        } else {
            BTreeMap::new()
        }
    };
    (
        meta_value(root, "stable", "source_commit"),
        meta_value(root, "last-stable", "source_commit"),
        tree_of("stable"),
        tree_of("last-stable"),
    )
}

fn template(d: &Path, cuts: usize) -> Vec<String> {
    let ids = make_repo(d, 4);
    for id in ids.iter().take(cuts) {
        ok(&snapctl_now(d, &cut_args(id)));
    }
    ids
}

#[test]
fn every_step_of_a_source_rotation_survives_a_crash() {
    let t = rocpack_testsupport::tempdir();
    let base = t.path().join("base");
    let ids = template(&base, 2);
    let before = state(&base.join("root"));
    let reference = t.path().join("ref");
    copy_tree(&base, &reference);
    let o = snapctl_now_cmd(&reference, &cut_args(&ids[2]))
        .env("SNAPCTL_TRACE_STEPS", "1")
        .output()
        .unwrap();
    ok(&o);
    let steps = stderr(&o)
        .lines()
        .filter(|l| l.starts_with("snapctl-step "))
        .count();
    let after = state(&reference.join("root"));
    assert!(steps >= 6, "{}", stderr(&o));
    let (mut old, mut new) = (0, 0);
    for n in 1..=steps {
        let w = t.path().join(format!("w{n}"));
        copy_tree(&base, &w);
        let o = snapctl_now_cmd(&w, &cut_args(&ids[2]))
            .env("SNAPCTL_FAIL_AT", n.to_string())
            .output()
            .unwrap();
        assert_eq!(code(&o), 86, "step {n}: {}", stderr(&o));
        ok(&snapctl_now(&w, &["recover", "--snapshots-root", "root"]));
        let s = state(&w.join("root"));
        if s == before {
            old += 1;
        } else if s == after {
            new += 1;
        } else {
            panic!(
                "crash before step {n}: neither the old nor the new state: {:?} {:?}",
                s.0, s.1
            );
        }
        ok(&check(&w));
        ok(&snapctl_now(&w, &cut_args(&ids[2])));
        assert_eq!(state(&w.join("root")), after, "step {n}: re-run");
        assert!(!w.join("root/.snapctl/journal.json").exists());
        assert!(
            fs::read_dir(w.join("root/.snapctl/staging")).map_or(true, |mut r| r.next().is_none())
        );
    }
    eprintln!("{steps} crash points: {old} rolled back, {new} completed");
    assert!(old > 0 && new > 0, "{old} {new}");
}

#[test]
fn kill_9_at_random_moments_leaves_old_or_new() {
    let t = rocpack_testsupport::tempdir();
    let base = t.path().join("base");
    let ids = template(&base, 2);
    let before = state(&base.join("root"));
    let reference = t.path().join("ref");
    copy_tree(&base, &reference);
    let t0 = Instant::now();
    ok(&snapctl_now(&reference, &cut_args(&ids[2])));
    let dur = t0.elapsed();
    let after = state(&reference.join("root"));
    let rounds = 30u64;
    let (mut old, mut new) = (0, 0);
    for i in 0..rounds {
        let w = t.path().join(format!("k{i}"));
        copy_tree(&base, &w);
        // Deterministic spread over 0..1.3x an uninterrupted run, on the real clock.
        let delay = dur.mul_f64(1.3 * (det_bytes(i + 1, 1)[0] as f64) / 255.0);
        let mut child = snapctl_now_cmd(&w, &cut_args(&ids[2]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        // Any later command recovers; `check` must then pass.
        ok(&check(&w));
        ok(&snapctl_now(&w, &["recover", "--snapshots-root", "root"]));
        let s = state(&w.join("root"));
        if s == before {
            old += 1;
        } else if s == after {
            new += 1;
        } else {
            panic!(
                "kill after {delay:?}: neither old nor new: {:?} {:?}",
                s.0, s.1
            );
        }
        fs::remove_dir_all(&w).unwrap();
    }
    eprintln!("kill -9 x{rounds} (run takes {dur:?}): {old} old, {new} new");
    assert_eq!(old + new, rounds);
}

#[test]
fn concurrent_rotations_lose_nothing() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    let ids = make_repo(d, 6);
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            snapctl_now_cmd(d, &cut_args(id))
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
    // Every cut is reachable exactly once: stable, last-stable or an archive.
    let root = d.join("root");
    let mut found = Vec::new();
    for ch in ["stable", "last-stable"] {
        found.extend(meta_value(&root, ch, "source_commit"));
    }
    for e in fs::read_dir(root.join("archives")).unwrap() {
        let p = e.unwrap().path();
        let text = fs::read_to_string(p.join("metadata.txt")).unwrap();
        found.extend(
            text.lines()
                .find_map(|l| l.strip_prefix("source_commit: ").map(str::to_string)),
        );
    }
    let set: BTreeSet<&String> = found.iter().collect();
    assert_eq!(
        set.len(),
        found.len(),
        "a cut is reachable twice: {found:?}"
    );
    let want: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(set, want, "lost cuts");
    ok(&check(d));
    let _ = Duration::from_secs(0);
}

/// A tree object written from raw entries (`git hash-object --literally`,
/// so git's own tree checks do not refuse it): `(mode, name, object id)`.
fn raw_tree(repo: &Path, entries: &[(&str, &str, &str)]) -> String {
    let mut bytes = Vec::new();
    for (mode, name, id) in entries {
        bytes.extend_from_slice(format!("{mode} {name}\0").as_bytes());
        bytes.extend_from_slice(&hex::decode(id).unwrap());
    }
    let f = repo.join(".git/raw-tree");
    fs::write(&f, bytes).unwrap();
    git(
        repo,
        &["hash-object", "-t", "tree", "-w", "--literally", s(&f)],
    )
}

/// A blob object holding `data`.
fn blob(repo: &Path, data: &str) -> String {
    let f = repo.join(".git/raw-blob");
    fs::write(&f, data).unwrap();
    git(repo, &["hash-object", "-w", s(&f)])
}

/// The escape through a tree holding two entries named `a` (a symlink to a
/// directory outside the snapshot root, then a directory `a/` with a file):
/// git never writes such a tree, but `git fetch` takes one with git's default
/// configuration (`transfer.fsckObjects` off). Neither `create --kind source`
/// nor the read-only `check --repo` may write through the link; both refuse
/// the tree, in the crafting repository and in one that fetched it.
#[test]
fn a_tree_with_two_entries_of_one_name_is_refused_and_nothing_escapes() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    let outside = d.join("outside");
    fs::create_dir(&outside).unwrap();
    let src = d.join("src");
    git_init(&src);
    fs::create_dir_all(src.join("lib")).unwrap();
    fs::write(src.join("lib/x.h"), "int x;\n").unwrap();
    let clean = git_commit_all(&src, "clean");
    let file = blob(&src, "written through the link\n");
    let sub = raw_tree(&src, &[("100644", "pwned", &file)]);
    let link = blob(&src, s(&outside));
    let lib = raw_tree(&src, &[("120000", "a", &link), ("40000", "a", &sub)]);
    let top = raw_tree(&src, &[("40000", "lib", &lib)]);
    let crafted = git(&src, &["commit-tree", "-p", &clean, "-m", "crafted", &top]);
    git(&src, &["update-ref", "refs/heads/main", &crafted]);
    // git archive really emits the link, then the directory and its file.
    let ls = git(&src, &["ls-tree", "-r", "-t", "--name-only", &crafted]);
    assert_eq!(ls, "lib\nlib/a\nlib/a\nlib/a/pwned", "{ls}");
    let second = d.join("second");
    git_init(&second);
    git(
        &second,
        &["fetch", "-q", s(&src), "main:refs/heads/crafted"],
    );
    assert_eq!(git(&second, &["rev-parse", "crafted"]), crafted);

    let untouched = |when: &str| {
        let left = rocpack_testsupport::dir_names(&outside);
        assert!(
            left.is_empty(),
            "{when}: written outside the root: {left:?}"
        );
    };
    for repo in ["src", "second"] {
        let o = snapctl_now(
            d,
            &[
                "create",
                "--kind",
                "source",
                "--snapshots-root",
                "root",
                "--repo",
                repo,
                "--rev",
                &crafted,
                "--subtree",
                "lib",
            ],
        );
        untouched(&format!("create from {repo}"));
        assert_ne!(code(&o), 0, "create from {repo} took the crafted tree");
        assert!(
            stderr(&o).contains("two entries with this name"),
            "{}",
            stderr(&o)
        );
        assert!(!d.join("root/stable").exists());
    }
    // A good cut whose recorded commit is then pointed at the crafted one:
    // `check --repo` re-cuts that commit (in a scratch directory) and must
    // report it, not follow the link.
    let cut = [
        "create",
        "--kind",
        "source",
        "--snapshots-root",
        "root",
        "--repo",
        "src",
        "--rev",
        &clean,
        "--subtree",
        "lib",
    ];
    ok(&snapctl_now(d, &cut));
    let mp = d.join("root/stable/metadata.txt");
    let text = fs::read_to_string(&mp).unwrap();
    fs::write(&mp, text.replace(&clean, &crafted)).unwrap();
    for repo in ["src", "second"] {
        let o = snapctl_now(d, &["check", "--snapshots-root", "root", "--repo", repo]);
        untouched(&format!("check --repo {repo}"));
        assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
        assert!(
            stdout(&o).contains("two entries with this name"),
            "{}",
            stdout(&o)
        );
    }
}
