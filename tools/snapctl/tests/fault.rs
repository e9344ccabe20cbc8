//! Fault injection (every durable step of the rotation is interrupted in turn) and
//! concurrent creates on one root.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

const FAULT_EXIT: i32 = 86;

/// Runs `args` uninterrupted with step tracing; returns the step labels.
fn traced_steps(s: &Scratch, args: &[String]) -> Vec<String> {
    let o = s.run(args, &[("SNAPCTL_TRACE_STEPS", "1")]);
    ok(&o);
    stderr(&o)
        .lines()
        .filter_map(|l| l.strip_prefix("snapctl-step "))
        .map(|l| l.split_once(' ').map(|x| x.1).unwrap_or(""))
        .map(|l| l.rsplit_once(" [+").map_or(l, |x| x.0).to_string())
        .collect()
}

/// Every piece of content that existed (metadata, headers, blobs) must still exist
/// somewhere under the root after a crash: nothing lost.
fn assert_nothing_lost(
    before: &BTreeMap<String, Vec<u8>>,
    now: &BTreeMap<String, Vec<u8>>,
    ctx: &str,
) {
    let contents: std::collections::HashSet<&Vec<u8>> = now.values().collect();
    for (k, v) in before {
        if k.ends_with("stable_checksums.bzl") || k.ends_with("snapctl.conf") {
            continue; // regenerated files; checked for atomicity below
        }
        assert!(contents.contains(v), "{ctx}: content of {k} lost");
    }
    // Blobs are never removed, and the checksums file is old or new, never partial.
    for k in before.keys().filter(|k| k.contains("cas/sha256/")) {
        assert_eq!(before.get(k), now.get(k), "{ctx}: blob {k} changed");
    }
}

/// For each step n of `op` (run on a copy of `template`): crash at n, then re-run
/// (after an explicit `recover` for odd n, relying on automatic recovery for even n)
/// and require the final tree to equal the uninterrupted run's.
/// `idempotent`: re-running `op` after its own completion is a no-op (create); otherwise
/// (rollback) the re-run happens only when recovery rolled the transaction back.
fn enumerate_faults(template: &Scratch, op: &[String], what: &str, idempotent: bool) -> usize {
    let reference = Scratch::new(false);
    copy_tree(template.path(), reference.path());
    let steps = traced_steps(&reference, op);
    let expected = tree(&reference.root());
    assert!(
        steps.len() >= 5,
        "{what}: suspiciously few steps: {steps:?}"
    );
    let before = tree(&template.root());
    for (i, label) in steps.iter().enumerate() {
        let n = i + 1;
        let s = Scratch::new(false);
        copy_tree(template.path(), s.path());
        let o = s.run(op, &[("SNAPCTL_FAIL_AT", &n.to_string())]);
        assert_eq!(
            code(&o),
            FAULT_EXIT,
            "{what}: step {n} ({label}) did not fire: {}",
            stderr(&o)
        );
        let ctx = format!("{what}: crash before step {n} ({label})");
        let crashed = tree(&s.root());
        assert_nothing_lost(&before, &crashed, &ctx);
        let bzl_now = crashed.get("stable_checksums.bzl");
        assert!(
            bzl_now == before.get("stable_checksums.bzl")
                || bzl_now == expected.get("stable_checksums.bzl"),
            "{ctx}: checksums file is neither old nor new"
        );
        let mut completed = false;
        if n % 2 == 1 {
            // Explicit recovery.
            let r = ok(&s.cmd(&["recover", "--snapshots-root", "root"]));
            completed = r.starts_with("completed");
            assert!(
                completed || r.starts_with("rolled back") || r.starts_with("nothing"),
                "{ctx}: {r}"
            );
        } else if !idempotent {
            // Automatic recovery by any command.
            let o = s.cmd(&["status", "--snapshots-root", "root"]);
            ok(&o);
            completed = stderr(&o).contains("recovery: completed");
        }
        if idempotent || !completed {
            ok(&s.run(op, &[]));
        }
        assert_same_tree(&expected, &tree(&s.root()), &ctx);
        assert!(!s.root().join(".snapctl/journal.json").exists(), "{ctx}");
    }
    steps.len()
}

fn template_with_two_creates(seed: bool) -> Scratch {
    let t = Scratch::new(seed);
    for n in [1, 2, 3] {
        t.artifact(n);
    }
    ok(&t.run(&t.create_args(1, "6.4"), &[]));
    ok(&t.run(&t.create_args(2, "6.4"), &[]));
    t
}

#[test]
fn every_step_of_a_full_rotation_survives_a_crash() {
    let t = template_with_two_creates(true);
    // The third create uploads a blob, archives last-stable, rotates, installs, regenerates.
    let n = enumerate_faults(&t, &t.create_args(3, "6.4"), "create #3", true);
    eprintln!("create #3: {n} steps enumerated");
}

#[test]
fn every_step_of_a_first_create_and_a_config_write_survives_a_crash() {
    let t = Scratch::new(true);
    t.artifact(1);
    let mut args = t.create_args(1, "6.4");
    args.extend(["--store".into(), "blobs".into()]);
    enumerate_faults(&t, &args, "create #1", true);
}

#[test]
fn every_step_of_a_rollback_survives_a_crash() {
    let t = template_with_two_creates(true);
    ok(&t.run(&t.create_args(3, "6.4"), &[]));
    let op: Vec<String> = ["rollback", "--snapshots-root", "root", "--version", "6.4"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    enumerate_faults(&t, &op, "rollback", false);
}

#[test]
fn two_concurrent_creates_both_land_in_order() {
    let s = template_with_two_creates(false); // stable = 2, last-stable = 1
    let (a4, a5) = (s.artifact(4), s.artifact(5));
    let spawn = |n: u64| {
        snapctl_cmd(s.path(), &s.create_args(n, "6.4"))
            .spawn()
            .unwrap()
    };
    let (mut p4, mut p5) = (spawn(4), spawn(5));
    assert!(p4.wait().unwrap().success());
    assert!(p5.wait().unwrap().success());
    let stable = fs::read_to_string(s.root().join("stable/6.4/metadata.txt")).unwrap();
    let last = fs::read_to_string(s.root().join("last-stable/6.4/metadata.txt")).unwrap();
    let (first, second) = if stable.contains(&a5) {
        (&a4, &a5)
    } else {
        (&a5, &a4)
    };
    assert!(stable.contains(&format!("sha256: {second}")), "{stable}");
    assert!(last.contains(&format!("sha256: {first}")), "{last}");
    // History in order: archive 1 = build 1 (from create #3 of the pair), archive 2 = build 2.
    let arch: Vec<String> = fs::read_dir(s.root().join("archives/6.4"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("_metadata.txt"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(arch.len(), 2, "{arch:?}");
    let a1 = s.sha_of("art/lib1/librcclx-dev.a");
    let a2 = s.sha_of("art/lib2/librcclx-dev.a");
    assert!(
        fs::read_to_string(s.root().join("archives/6.4").join(&arch[0]))
            .unwrap()
            .contains(&a1)
    );
    assert!(
        fs::read_to_string(s.root().join("archives/6.4").join(&arch[1]))
            .unwrap()
            .contains(&a2)
    );
    assert_eq!(blob_stats(&s.store()).len(), 4);
    ok(&s.cmd(&[
        "verify",
        "--snapshots-root",
        "root",
        "--all",
        "--store",
        "root/store",
    ]));
    ok(&s.check("root/stable_checksums.bzl"));
}

#[test]
fn second_create_waits_for_the_lock_or_times_out() {
    let s = Scratch::new(false);
    s.artifact(1);
    s.artifact(2);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    let lock = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(s.root().join(".snapctl/lock"))
        .unwrap();
    lock.lock().unwrap();
    // Times out.
    let mut a = s.create_args(2, "6.4");
    a.extend(["--lock-timeout".into(), "1".into()]);
    let before = tree(&s.root());
    let o = s.run(&a, &[]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("waiting for the lock"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("timed out after 1 s"), "{}", stderr(&o));
    // The holder named is the live one (this test process), from the kernel's
    // lock table, never the pid an earlier (now dead) writer left behind.
    assert!(
        stderr(&o).contains(&format!("held by writer pid {}", std::process::id())),
        "{}",
        stderr(&o)
    );
    assert_same_tree(&before, &tree(&s.root()), "timed-out create");
    // Waits, then proceeds once the lock is released.
    let child = snapctl_cmd(s.path(), &s.create_args(2, "6.4"))
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_same_tree(&before, &tree(&s.root()), "waiting create");
    lock.unlock().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("waiting for the lock"));
    assert!(Path::new(&s.root().join("last-stable/6.4/metadata.txt")).exists());
}

#[test]
fn every_step_of_a_rotation_with_removals_survives_a_crash() {
    // Build 1 has rccl.h + extra.h, build 2 only rccl.h, build 3 no header: the third create
    // must remove last-stable/6.4/extra.h (archived first) and stable/6.4/rccl.h (rotated first).
    let t = Scratch::new(false);
    for n in [1, 2, 3] {
        t.artifact(n);
    }
    fs::write(t.path().join("art/lib1/extra.h"), "/* extra */\n").unwrap();
    let args = |n: u64, headers: &[&str]| {
        let mut a: Vec<String> = [
            "create",
            "--snapshots-root",
            "root",
            "--version",
            "6.4",
            "--artifact",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(format!("art/lib{n}/librcclx-dev.a"));
        for h in headers {
            a.push("--header".into());
            a.push(format!("art/lib{n}/{h}"));
        }
        a
    };
    ok(&t.run(&args(1, &["rccl.h", "extra.h"]), &[]));
    ok(&t.run(&args(2, &["rccl.h"]), &[]));
    let op = args(3, &[]);
    let reference = Scratch::new(false);
    copy_tree(t.path(), reference.path());
    let steps = traced_steps(&reference, &op);
    assert!(
        steps.iter().any(|s| s == "remove last-stable/6.4/extra.h"),
        "{steps:?}"
    );
    assert!(
        steps.iter().any(|s| s == "remove stable/6.4/rccl.h"),
        "{steps:?}"
    );
    assert!(!reference.root().join("stable/6.4/rccl.h").exists());
    assert!(reference
        .root()
        .join("archives/6.4/20260127_101112_extra.h")
        .exists());
    enumerate_faults(&t, &op, "create #3 with removals", true);
}
