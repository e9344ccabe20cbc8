//! Issue 22: split and reassembly of a PE32+ DLL do not hold the image.
//! A 512 MiB DLL (256 MiB of host `.rdata`, one bundle of 16 targets x 16
//! MiB code objects in `.hip_fat`, one HIPF wrapper with a DIR64 base
//! relocation; linked by lld as ROCm's Windows builds are) is split with
//! `--compression none` and reassembled. The peak RSS of each run
//! (`wait4`) must stay within 64 MiB; building the image in memory (the
//! host part for the split, the whole image and its bundle section for the
//! reassembly) does not. The reassembled DLL must be the input.
//!
//! The 512 MiB COFF object the DLL is linked from (`fat.obj`) is then put
//! in the split's generic artifact and `kpack verify --artifacts-dir`
//! reports it (a fat COFF object, 1 bundle) under an address-space limit
//! of 192 MiB (`ulimit -v`): the object's analysis holds only the tables
//! it reads, never the object (before: a buffer the object's size, refused
//! with ENOMEM under the limit: "cannot read file"). `kpack split` of that
//! artifact classifies the object the same way under the same limit and
//! copies it to the generic artifact (before: the object was mapped).
//!
//! `KPACK_UNDER_TEST=/path/to/kpack` runs another binary (to show the test
//! fails on an older build).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::*;

const TARGETS: [&str; 16] = [
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx1010", "gfx1011",
    "gfx1012", "gfx1030", "gfx1031", "gfx1100", "gfx1101", "gfx1102", "gfx1200",
];
const CO_SIZE: u64 = 16 << 20;
const HOST_MIB: u64 = 256;
/// Peak RSS allowed to split and reassembly.
const MAX_RSS_KIB: u64 = 64 * 1024;
/// Address space allowed to the verification of the COFF object.
const MAX_AS_KIB: u64 = 192 * 1024;
const CLANG: &str = "/usr/lib/llvm-19/bin/clang";

fn tool(mut c: Command, what: &str) {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{what}: {}", stderr(&o));
}

/// Builds `dir/art/big/bin/fx_big.dll` (and leaves the object it is linked
/// from, `dir/fat.obj`); returns the artifact directory.
fn build_dll(dir: &Path) -> std::path::PathBuf {
    write_big_bundle(&dir.join("blob.bin"), &TARGETS, CO_SIZE);
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("host.bin")).unwrap());
    let block = pseudo_random(24, 1 << 20);
    for _ in 0..HOST_MIB {
        f.write_all(&block).unwrap();
    }
    f.flush().unwrap();
    drop(f);
    std::fs::write(
        dir.join("fat.s"),
        ".section .rdata,\"dr\"\n.p2align 4\n.globl host_blob\nhost_blob:\n.incbin \"host.bin\"\n\
         .section .hip_fatbin,\"dr\"\n.p2align 12\nfatbin_0:\n.incbin \"blob.bin\"\n\
         .section .hipFatBinSegment,\"dw\"\n.p2align 3\n\
         .long 0x48495046, 1\n.quad fatbin_0\n.quad 0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.c"),
        "extern const char host_blob[];\n\
         __declspec(dllexport) int fx_big(int i) { return host_blob[i]; }\n",
    )
    .unwrap();
    let mut c = Command::new(CLANG);
    c.current_dir(dir).args([
        "--target=x86_64-w64-windows-gnu",
        "-c",
        "fat.s",
        "-o",
        "fat.obj",
    ]);
    tool(c, "assemble");
    for f in ["blob.bin", "host.bin"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let art = dir.join("art");
    let bin = art.join("big/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(art.join("big/artifact_manifest.txt"), "bin\n").unwrap();
    let mut c = Command::new(CLANG);
    c.current_dir(dir)
        .args([
            "--target=x86_64-w64-windows-gnu",
            "-fuse-ld=lld",
            "-shared",
            "main.c",
            "fat.obj",
            "-o",
        ])
        .arg(bin.join("fx_big.dll"));
    tool(c, "link");
    art
}

#[test]
fn pe_split_and_reassembly_memory_do_not_grow_with_the_image() {
    if !Path::new(CLANG).exists() || !have_tool("cmp") {
        return;
    }
    let tmp = tempdir();
    let art = build_dll(tmp.path());
    let dll = art.join("big/bin/fx_big.dll");
    let size = std::fs::metadata(&dll).unwrap().len();
    assert!(size >= 512 << 20, "input is only {size} bytes");
    let out = tmp.path().join("out");
    let mut cmd = Command::new(kpack_under_test());
    cmd.args(["split", "--artifact-dir"])
        .arg(art.join("big"))
        .args(["--artifact-prefix", "big", "--output-dir"])
        .arg(&out)
        .args(["--compression", "none", "--jobs", "1"])
        .env("MALLOC_ARENA_MAX", "1");
    let t0 = Instant::now();
    let (o, rss) = run_peak(&cmd);
    eprintln!(
        "split of a {size}-byte DLL: peak RSS {rss} KiB, wall {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(o.status.success(), "split: {}", stderr(&o));
    let host = out.join("big_generic/bin/fx_big.dll");
    let host_len = std::fs::metadata(&host).unwrap().len();
    assert!(
        host_len >= HOST_MIB << 20 && host_len < size - (64 << 20),
        "host image is {host_len} bytes"
    );
    assert!(
        rss <= MAX_RSS_KIB,
        "split of a {size}-byte DLL ({host_len}-byte host image): peak RSS {rss} KiB"
    );
    let back = tmp.path().join("back.dll");
    let mut cmd = Command::new(kpack_under_test());
    cmd.arg("reassemble")
        .arg("--host")
        .arg(&host)
        .arg("--kpack-dir")
        .arg(&out)
        .arg("-o")
        .arg(&back)
        .env("MALLOC_ARENA_MAX", "1");
    let t0 = Instant::now();
    let (o, rss) = run_peak(&cmd);
    eprintln!(
        "reassembly of a {size}-byte DLL: peak RSS {rss} KiB, wall {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(o.status.success(), "reassemble: {}", stderr(&o));
    let same = Command::new("cmp")
        .arg("-s")
        .arg(&back)
        .arg(&dll)
        .status()
        .unwrap()
        .success();
    assert!(same, "the reassembled DLL differs from the input");
    assert!(
        rss <= MAX_RSS_KIB,
        "reassembly of a {size}-byte DLL: peak RSS {rss} KiB"
    );
    std::fs::remove_file(&back).unwrap();

    // The fat COFF object in a generic artifact, verified under the
    // address-space limit.
    let tree = tmp.path().join("objtree");
    std::fs::create_dir_all(tree.join("big_generic/bin")).unwrap();
    std::fs::write(tree.join("big_generic/artifact_manifest.txt"), "bin\n").unwrap();
    let obj = tree.join("big_generic/bin/fat.obj");
    std::fs::rename(tmp.path().join("fat.obj"), &obj).unwrap();
    let obj_len = std::fs::metadata(&obj).unwrap().len();
    assert!(obj_len >= 512 << 20, "object is only {obj_len} bytes");
    let mut cmd = under_vmem_limit(kpack_under_test(), MAX_AS_KIB);
    cmd.args(["verify", "--artifacts-dir"])
        .arg(&tree)
        .env("MALLOC_ARENA_MAX", "1");
    let t0 = Instant::now();
    let (o, rss) = run_peak(&cmd);
    eprintln!(
        "verify of a {obj_len}-byte COFF object under ulimit -v {MAX_AS_KIB}: peak RSS {rss} KiB, wall {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        o.status.success()
            && text.contains(
                "bin/fat.obj: fat COFF object (1 bundle(s) of HIP device code) in a generic package"
            ),
        "verify --artifacts-dir with a {obj_len}-byte fat COFF object: {text}"
    );
    assert!(
        rss <= MAX_RSS_KIB,
        "verify of a {obj_len}-byte COFF object: peak RSS {rss} KiB"
    );

    // And split, which classifies the object the same way (headers and
    // tables only) and copies it to the generic artifact with a warning.
    let out = tmp.path().join("objsplit");
    let mut cmd = under_vmem_limit(kpack_under_test(), MAX_AS_KIB);
    cmd.args(["split", "--artifact-dir"])
        .arg(tree.join("big_generic"))
        .args(["--artifact-prefix", "o", "--output-dir"])
        .arg(&out)
        .env("MALLOC_ARENA_MAX", "1");
    let (o, rss) = run_peak(&cmd);
    eprintln!(
        "split of a {obj_len}-byte COFF object under ulimit -v {MAX_AS_KIB}: peak RSS {rss} KiB"
    );
    assert!(
        o.status.success(),
        "split with a {obj_len}-byte fat COFF object: {}{}",
        stdout(&o),
        stderr(&o)
    );
    assert_eq!(
        std::fs::metadata(out.join("o_generic/bin/fat.obj"))
            .unwrap()
            .len(),
        obj_len
    );
    assert!(
        rss <= MAX_RSS_KIB,
        "split of a {obj_len}-byte COFF object: peak RSS {rss} KiB"
    );
}
