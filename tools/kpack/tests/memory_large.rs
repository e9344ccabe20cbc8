//! Issue 22: split's memory does not grow with the input. A 1 GiB fat
//! library (one plain bundle, 16 targets x 64 MiB code objects, built here
//! with `ld -r -b binary` + objcopy + gcc and removed afterwards) is split
//! with zstd and with `--compression none` under an address-space ceiling of
//! the input's size (its read-only mapping) + 320 MiB: anything that held
//! the code objects, the archives or the input in heap memory fails.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const TARGETS: [&str; 16] = [
    "gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx1010", "gfx1011",
    "gfx1012", "gfx1030", "gfx1031", "gfx1100", "gfx1101", "gfx1102", "gfx1200",
];
const CO_SIZE: u64 = 64 << 20;

/// Writes an uncompressed offload bundle: a host entry and one 64 MiB code
/// object per target (a 1 MiB pseudo-random block repeated, varied per
/// target), each at a 4 KiB-aligned offset.
fn write_bundle(path: &Path) {
    let ids: Vec<String> = std::iter::once("host-x86_64-unknown-linux-gnu".to_string())
        .chain(
            TARGETS
                .iter()
                .map(|t| format!("hipv4-amdgcn-amd-amdhsa--{t}")),
        )
        .collect();
    let header_len: u64 = 24 + 8 + ids.iter().map(|i| 24 + i.len() as u64).sum::<u64>();
    let mut off = header_len.div_ceil(4096) * 4096;
    let mut header = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    header.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    let mut offsets = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let size = if n == 0 { 0 } else { CO_SIZE };
        header.extend_from_slice(&off.to_le_bytes());
        header.extend_from_slice(&size.to_le_bytes());
        header.extend_from_slice(&(id.len() as u64).to_le_bytes());
        header.extend_from_slice(id.as_bytes());
        offsets.push(off);
        off += size.div_ceil(4096) * 4096;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    f.write_all(&header).unwrap();
    let mut pos = header.len() as u64;
    let block = pseudo_random(22, 1 << 20);
    for (n, &o) in offsets.iter().enumerate().skip(1) {
        f.write_all(&vec![0u8; (o - pos) as usize]).unwrap();
        let mut b = block.clone();
        b[..8].copy_from_slice(&(n as u64).to_le_bytes());
        for _ in 0..(CO_SIZE >> 20) {
            f.write_all(&b).unwrap();
        }
        pos = o + CO_SIZE;
    }
    f.flush().unwrap();
}

fn tool(mut c: Command, what: &str) {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds `dir/art/big/lib/libbig.so` around the bundle; returns the artifact dir.
fn build_library(dir: &Path) -> std::path::PathBuf {
    write_bundle(&dir.join("blob.bin"));
    let mut c = Command::new("ld");
    c.current_dir(dir)
        .args(["-r", "-b", "binary", "blob.bin", "-o", "blob.o"]);
    tool(c, "ld -r -b binary");
    std::fs::remove_file(dir.join("blob.bin")).unwrap();
    let mut c = Command::new("objcopy");
    c.current_dir(dir).args([
        "--rename-section",
        ".data=.hip_fatbin,alloc,load,readonly,data,contents",
        "--set-section-alignment",
        ".hip_fatbin=4096",
        "blob.o",
    ]);
    tool(c, "objcopy");
    std::fs::write(
        dir.join("wrapper.c"),
        "extern const char _binary_blob_bin_start[];\n\
         struct w { unsigned magic, version; const void *binary; void *reserved; };\n\
         __attribute__((section(\".hipFatBinSegment\"), used, aligned(8)))\n\
         struct w rocpack_wrapper = { 0x48495046, 1, _binary_blob_bin_start, 0 };\n",
    )
    .unwrap();
    let art = dir.join("art");
    let lib = art.join("big/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(art.join("big/artifact_manifest.txt"), "lib\n").unwrap();
    let mut c = Command::new("gcc");
    c.current_dir(dir)
        .args([
            "-shared",
            "-fPIC",
            "-Wl,-z,noexecstack",
            "wrapper.c",
            "blob.o",
            "-o",
        ])
        .arg(lib.join("libbig.so"));
    tool(c, "gcc -shared");
    std::fs::remove_file(dir.join("blob.o")).unwrap();
    art
}

#[test]
fn split_memory_does_not_grow_with_a_1gib_input() {
    if !have_tool("objcopy") || !have_tool("gcc") {
        return;
    }
    let tmp = tempdir();
    let art = build_library(tmp.path());
    let lib = art.join("big/lib/libbig.so");
    let size = std::fs::metadata(&lib).unwrap().len();
    assert!(size >= 1 << 30, "input is only {size} bytes");
    for compression in ["zstd", "none"] {
        let out = tmp.path().join(format!("out-{compression}"));
        let limit_kib = size / 1024 + 320 * 1024;
        let mut cmd = under_vmem_limit(KPACK, limit_kib);
        cmd.args(["split", "--artifact-dir"])
            .arg(art.join("big"))
            .args(["--artifact-prefix", "big", "--output-dir"])
            .arg(&out)
            .args(["--compression", compression, "--jobs", "2"])
            .env("MALLOC_ARENA_MAX", "1");
        let o = output_within(cmd, Duration::from_secs(300), "kpack split (1 GiB)");
        assert!(
            o.status.success(),
            "split --compression {compression} of a {size}-byte input under {limit_kib} KiB: {}",
            stderr(&o)
        );
        // One line per artifact: the generic one and one per target.
        assert_eq!(
            stdout(&o).lines().count(),
            1 + TARGETS.len(),
            "{compression}: {}",
            stdout(&o)
        );
        std::fs::remove_dir_all(&out).unwrap();
    }
}
