//! Issue 22: memory does not grow with the input. A 1 GiB fat library (a
//! 512 MiB host part: `.rodata`; one plain bundle of 16 targets x 32 MiB
//! code objects; built by `rocpack_testsupport::big_fat_library` and
//! removed afterwards) is split with zstd and with `--compression none`,
//! and each split is reassembled under an address-space ceiling of the host
//! file (its mapping) + 320 MiB. The peak RSS of every run (`wait4`) must
//! stay within 256 MiB: building the host file in memory (512 MiB), holding
//! the code objects, the bundle, the archives or the output fails. The
//! reassembled file must be the input.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const TARGETS: [&str; 16] = [
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx1010", "gfx1011",
    "gfx1012", "gfx1030", "gfx1031", "gfx1100", "gfx1101", "gfx1102", "gfx1200",
];
const CO_SIZE: u64 = 32 << 20;
/// Host data (`.rodata`) of the test library, MiB.
const HOST_MIB: u64 = 512;
/// Peak RSS allowed to `split` and `reassemble` (issue 22's bound).
const MAX_RSS_KIB: u64 = 256 * 1024;

/// `kpack reassemble` of the split in `out` (the host file of libbig.so)
/// into `back`.
fn reassemble_cmd(mut cmd: Command, out: &Path, back: &Path) -> Command {
    cmd.arg("reassemble")
        .arg("--host")
        .arg(out.join("big_generic/lib/libbig.so"))
        .arg("--kpack-dir")
        .arg(out)
        .arg("-o")
        .arg(back)
        .env("MALLOC_ARENA_MAX", "1");
    cmd
}

fn same_file(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .arg("-s")
        .arg(a)
        .arg(b)
        .status()
        .unwrap()
        .success()
}

#[test]
fn split_and_reassembly_memory_do_not_grow_with_a_1gib_input() {
    if !have_tool("objcopy") || !have_tool("gcc") || !have_tool("cmp") {
        return;
    }
    let tmp = tempdir();
    let art = big_fat_library(tmp.path(), &TARGETS, CO_SIZE, HOST_MIB);
    let lib = art.join("big/lib/libbig.so");
    let size = std::fs::metadata(&lib).unwrap().len();
    assert!(size >= 1 << 30, "input is only {size} bytes");
    for compression in ["zstd", "none"] {
        let out = tmp.path().join(format!("out-{compression}"));
        let mut cmd = Command::new(KPACK);
        cmd.args(["split", "--artifact-dir"])
            .arg(art.join("big"))
            .args(["--artifact-prefix", "big", "--output-dir"])
            .arg(&out)
            .args(["--compression", compression, "--jobs", "2"])
            .env("MALLOC_ARENA_MAX", "1");
        let (o, rss) = run_peak_rss(cmd, tmp.path(), "kpack split (1 GiB)");
        eprintln!("split --compression {compression}: peak RSS {rss} KiB");
        assert!(
            o.status.success(),
            "split --compression {compression}: {}",
            stderr(&o)
        );
        // One line per artifact: the generic one and one per target.
        assert_eq!(
            stdout(&o).lines().count(),
            1 + TARGETS.len(),
            "{compression}: {}",
            stdout(&o)
        );
        let host = out.join("big_generic/lib/libbig.so");
        let host_len = std::fs::metadata(&host).unwrap().len();
        assert!(
            host_len >= HOST_MIB << 20,
            "host file is only {host_len} bytes"
        );
        assert!(
            rss <= MAX_RSS_KIB,
            "split --compression {compression} of a {size}-byte input with a {host_len}-byte host part: peak RSS {rss} KiB"
        );
        // Reassembly holds no code object, bundle or output: the host file
        // (mapped for its headers) + 320 MiB of address space.
        let limit_kib = host_len / 1024 + 320 * 1024;
        let back = tmp.path().join("back.so");
        let cmd = reassemble_cmd(under_vmem_limit(KPACK, limit_kib), &out, &back);
        let (o, rss) = run_peak_rss(cmd, tmp.path(), "kpack reassemble (1 GiB)");
        eprintln!("reassemble ({compression}): peak RSS {rss} KiB");
        assert!(
            o.status.success(),
            "reassemble of the --compression {compression} split under {limit_kib} KiB: {}",
            stderr(&o)
        );
        assert!(
            rss <= MAX_RSS_KIB,
            "reassemble ({compression}) of a {host_len}-byte host file: peak RSS {rss} KiB"
        );
        assert!(
            same_file(&back, &lib),
            "{compression}: reassembled file differs from the input"
        );
        std::fs::remove_file(&back).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
    }
}
