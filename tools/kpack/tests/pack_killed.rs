//! A `kpack pack` killed by `SIGKILL` while it writes leaves nothing in
//! the output directory: the archive is an unnamed `O_TMPFILE` there until
//! its commit links it into place (before: an empty or partial
//! `.kpack-tmp-XXXXXX` was left per kill).
//!
//! Each round packs 4 x 48 MiB of code-like data with zstd and is killed at
//! a random moment after it opened a file in the output directory (polled
//! from `/proc/<pid>/fd`, no pinned clocks); what the directory holds
//! afterwards is counted: at most the finished archive, nothing else.
//!
//! `KPACK_UNDER_TEST=/path/to/kpack` runs another binary (to show the test
//! fails on an older build).

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const ROUNDS: usize = 6;
const INPUTS: usize = 4;
const INPUT_MIB: u64 = 48;

/// Whether process `pid` has a file open below `dir`.
fn has_fd_in(pid: u32, dir: &Path) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|e| fs::read_link(e.path()).ok())
        .any(|t| t.starts_with(dir))
}

#[test]
fn pack_killed_while_writing_leaves_nothing() {
    if !Path::new("/proc/self/fd").is_dir() {
        return;
    }
    let kpack = kpack_under_test();
    let tmp = tempdir();
    let root = fs::canonicalize(tmp.path()).unwrap();
    let mut args = vec![
        "pack".to_string(),
        "--compression".into(),
        "zstd".into(),
        "--kernel-name".into(),
        "lib/libbig.so".into(),
    ];
    for i in 0..INPUTS {
        let p = root.join(format!("in{i}.hsaco"));
        write_large_code_like(&p, INPUT_MIB);
        args.push("--code-object".into());
        args.push(format!("gfx1100={}", p.display()));
    }
    // Random moments: a seed from the clock, printed.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut killed, mut stray) = (0, Vec::new());
    for round in 0..ROUNDS {
        let out = root.join(format!("out{round}"));
        fs::create_dir(&out).unwrap();
        let mut child = Command::new(&kpack)
            .args(&args)
            .arg("-o")
            .arg(out.join("big_gfx1100.kpack"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let t0 = Instant::now();
        while !has_fd_in(pid, &out) && child.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "pack never opened its output"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Then a random number of polls more (0 to about 0.5 s).
        for _ in 0..next() % 500 {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let finished = child.try_wait().unwrap().is_some();
        if !finished {
            child.kill().unwrap();
            killed += 1;
        }
        let status = child.wait().unwrap();
        let left: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !(status.success() && n == "big_gfx1100.kpack"))
            .collect();
        eprintln!(
            "round {round}: {} after {:.3} s, left {left:?}",
            if finished { "finished" } else { "killed" },
            t0.elapsed().as_secs_f64()
        );
        stray.extend(left);
    }
    eprintln!("seed {seed}: {killed} of {ROUNDS} rounds killed while writing");
    assert!(
        killed >= ROUNDS / 2,
        "only {killed} of {ROUNDS} rounds were killed while writing"
    );
    assert!(stray.is_empty(), "files left by killed packs: {stray:?}");
}
