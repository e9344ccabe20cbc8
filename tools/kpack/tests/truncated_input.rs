//! An input truncated by another process while `kpack inspect` reads it
//! (issue 20, item 10): an error (exit 2 with a message), never a death by
//! `SIGBUS`. Racy by nature: every run's outcome is counted and none may be
//! a signal.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{pseudo_random, KPACK};
use rocpack_kpack::{Compression, KpackWriter};

#[test]
fn inspect_of_a_kpack_truncated_while_read_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.kpack");
    // Many incompressible frames: inspect walks every size prefix.
    let mut w = KpackWriter::new(Compression::Zstd { level: 1 });
    w.group_name("g").arch_family("gfx900").arches(["gfx900"]);
    for i in 0..4000u32 {
        w.add(
            &format!("k{i}#0"),
            "gfx900",
            pseudo_random(u64::from(i), 8192),
        )
        .unwrap();
    }
    let bytes = w.to_vec().unwrap();
    let (mut ok, mut refused, mut other, mut sigbus) = (0, 0, 0, 0);
    for round in 0..12u64 {
        std::fs::write(&path, &bytes).unwrap();
        let child = Command::new(KPACK)
            .arg("inspect")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(2 + round * 3));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.signal().is_none(),
            "round {round}: kpack died of signal {:?}",
            out.status.signal()
        );
        match out.status.code() {
            Some(0) => ok += 1,
            Some(2) => {
                refused += 1;
                if String::from_utf8_lossy(&out.stderr).contains("SIGBUS") {
                    sigbus += 1;
                }
            }
            c => {
                other += 1;
                eprintln!(
                    "round {round}: exit {c:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    eprintln!(
        "{ok} read before the truncation, {refused} refused (exit 2; {sigbus} of them \
         interrupted by SIGBUS), {other} other"
    );
    assert_eq!(other, 0);
}
