//! Issue 22: split and reassembly of an `ar` archive hold one member at a
//! time, not the archive. Two static libraries of 2 and 8 fat objects (each
//! a 32 MiB `.rodata` host part and one bundle of 4 targets x 4 MiB code
//! objects) are split with `--compression none` and reassembled; the peak
//! RSS (`wait4`) of the 8-member runs may exceed the 2-member ones by at
//! most [`MAX_GROWTH_KIB`] (rebuilding the archive in memory grows by the
//! six extra members' host parts or more). Reassembled archives must be
//! the inputs byte for byte.
//!
//! `KPACK_UNDER_TEST=/path/to/kpack` runs another binary (to show the test
//! fails on an older build).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const TARGETS: [&str; 4] = ["gfx900", "gfx90a", "gfx1100", "gfx1200"];
const CO_SIZE: u64 = 4 << 20;
const HOST_MIB: u64 = 32;
/// Allowed peak RSS growth from 2 to 8 members (one member is 48 MiB).
const MAX_GROWTH_KIB: u64 = 32 * 1024;

fn tool(mut c: Command, what: &str) {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{what}: {}", stderr(&o));
}

/// `dir/m<i>.o`: a fat relocatable object (HIPF wrapper relocated against
/// the bundle's symbol, the bundle in `.hip_fatbin`, host data in `.rodata.big`).
fn fat_object(dir: &Path, i: usize) -> PathBuf {
    write_big_bundle(&dir.join("blob.bin"), &TARGETS, CO_SIZE);
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("host.bin")).unwrap());
    let block = pseudo_random(100 + i as u64, 1 << 20);
    for _ in 0..HOST_MIB {
        f.write_all(&block).unwrap();
    }
    f.flush().unwrap();
    drop(f);
    for (bin, section) in [
        ("blob", ".hip_fatbin,alloc,load,readonly,data,contents"),
        ("host", ".rodata.big,alloc,load,readonly,data,contents"),
    ] {
        let mut c = Command::new("ld");
        c.current_dir(dir).args([
            "-r",
            "-b",
            "binary",
            &format!("{bin}.bin"),
            "-o",
            &format!("{bin}.o"),
        ]);
        tool(c, "ld -r -b binary");
        let mut c = Command::new("objcopy");
        c.current_dir(dir).args([
            "--rename-section",
            &format!(".data={section}"),
            &format!("{bin}.o"),
        ]);
        tool(c, "objcopy");
        std::fs::remove_file(dir.join(format!("{bin}.bin"))).unwrap();
    }
    std::fs::write(dir.join("wrapper.c"), rocpack_testsupport::BIG_WRAPPER_C).unwrap();
    let mut c = Command::new("gcc");
    c.current_dir(dir)
        .args(["-c", "wrapper.c", "-o", "wrapper.o"]);
    tool(c, "gcc -c");
    let out = dir.join(format!("m{i}.o"));
    let mut c = Command::new("ld");
    c.current_dir(dir)
        .args(["-r", "wrapper.o", "blob.o", "host.o", "-o"])
        .arg(&out);
    tool(c, "ld -r");
    out
}

/// Splits and reassembles `art/big/lib/libbig.a`; the peak RSS of each.
fn split_and_back(dir: &Path, art: &Path) -> (u64, u64) {
    let out = dir.join("out");
    let mut cmd = Command::new(kpack_under_test());
    cmd.args(["split", "--artifact-dir"])
        .arg(art)
        .args(["--artifact-prefix", "big", "--output-dir"])
        .arg(&out)
        .args(["--compression", "none", "--jobs", "1"])
        .env("MALLOC_ARENA_MAX", "1");
    let (o, split) = run_peak(&cmd);
    assert!(o.status.success(), "split: {}", stderr(&o));
    let back = dir.join("back.a");
    let mut cmd = Command::new(kpack_under_test());
    cmd.arg("reassemble")
        .arg("--host")
        .arg(out.join("big_generic/lib/libbig.a"))
        .arg("--kpack-dir")
        .arg(&out)
        .arg("-o")
        .arg(&back)
        .env("MALLOC_ARENA_MAX", "1");
    let (o, reas) = run_peak(&cmd);
    assert!(o.status.success(), "reassemble: {}", stderr(&o));
    let same = Command::new("cmp")
        .arg("-s")
        .arg(&back)
        .arg(art.join("lib/libbig.a"))
        .status()
        .unwrap()
        .success();
    assert!(same, "the reassembled archive differs from the input");
    std::fs::remove_dir_all(&out).unwrap();
    std::fs::remove_file(&back).unwrap();
    (split, reas)
}

#[test]
fn archive_split_and_reassembly_memory_do_not_grow_with_the_member_count() {
    if !have_tool("objcopy") || !have_tool("gcc") || !have_tool("ar") || !have_tool("cmp") {
        return;
    }
    let tmp = tempdir();
    let objs: Vec<PathBuf> = (0..8).map(|i| fat_object(tmp.path(), i)).collect();
    let mut runs = Vec::new();
    for n in [2usize, 8] {
        let dir = tmp.path().join(format!("a{n}"));
        let art = dir.join("art/big");
        std::fs::create_dir_all(art.join("lib")).unwrap();
        std::fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
        let mut c = Command::new("ar");
        c.arg("rcsD").arg(art.join("lib/libbig.a")).args(&objs[..n]);
        tool(c, "ar");
        let size = std::fs::metadata(art.join("lib/libbig.a")).unwrap().len();
        let (split, reas) = split_and_back(&dir, &art);
        eprintln!("{n} members ({size} bytes): split peak RSS {split} KiB, reassembly {reas} KiB");
        runs.push((split, reas));
    }
    let (a, b) = (runs[0], runs[1]);
    assert!(
        b.0.saturating_sub(a.0) <= MAX_GROWTH_KIB,
        "split peak RSS grows from {} KiB (2 members) to {} KiB (8 members)",
        a.0,
        b.0
    );
    assert!(
        b.1.saturating_sub(a.1) <= MAX_GROWTH_KIB,
        "reassembly peak RSS grows from {} KiB (2 members) to {} KiB (8 members)",
        a.1,
        b.1
    );
}
