//! Issue 22: memory does not grow with the input. A 1 GiB fat library (a
//! 512 MiB host part: `.rodata`; one plain bundle of 16 targets x 32 MiB
//! code objects; built here with `ld -r -b binary` + objcopy + gcc and
//! removed afterwards) is split with zstd and with `--compression none`,
//! and each split is reassembled under an address-space ceiling of the host
//! file (its mapping) + 320 MiB. The peak RSS of every run (`wait4`) must
//! stay within 256 MiB: building the host file in memory (512 MiB), holding
//! the code objects, the bundle, the archives or the output fails. The
//! reassembled file must be the input.

mod common;

use std::io::Write;
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

/// Writes an uncompressed offload bundle: a host entry and one code object
/// of `co_size` bytes (a multiple of 1 MiB: a 1 MiB pseudo-random block
/// repeated, varied per target) per target, each at a 4 KiB-aligned offset.
fn write_bundle(path: &Path, targets: &[&str], co_size: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    write_bundle_to(&mut f, targets, co_size);
    f.flush().unwrap();
}

/// [`write_bundle`] into `f`.
fn write_bundle_to(f: &mut dyn Write, targets: &[&str], co_size: u64) {
    let ids: Vec<String> = std::iter::once("host-x86_64-unknown-linux-gnu".to_string())
        .chain(
            targets
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
        let size = if n == 0 { 0 } else { co_size };
        header.extend_from_slice(&off.to_le_bytes());
        header.extend_from_slice(&size.to_le_bytes());
        header.extend_from_slice(&(id.len() as u64).to_le_bytes());
        header.extend_from_slice(id.as_bytes());
        offsets.push(off);
        off += size.div_ceil(4096) * 4096;
    }
    f.write_all(&header).unwrap();
    let mut pos = header.len() as u64;
    let block = pseudo_random(22, 1 << 20);
    for (n, &o) in offsets.iter().enumerate().skip(1) {
        f.write_all(&vec![0u8; (o - pos) as usize]).unwrap();
        let mut b = block.clone();
        b[..8].copy_from_slice(&(n as u64).to_le_bytes());
        for _ in 0..(co_size >> 20) {
            f.write_all(&b).unwrap();
        }
        pos = o + co_size;
    }
}

/// A writer counting bytes and hashing them.
struct Tally<W: Write> {
    inner: W,
    n: u64,
    sha: sha2::Sha256,
}

impl<W: Write> Write for Tally<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        use sha2::Digest;
        let k = self.inner.write(b)?;
        self.n += k as u64;
        self.sha.update(&b[..k]);
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// [`write_bundle`] as CCOB v3 zstd at LLVM's default level, streamed (this
/// process never holds the payload: a child's peak RSS from `wait4`
/// includes its parent's high-water mark). Returns the payload's length
/// and SHA-256.
fn write_ccob_bundle(path: &Path, targets: &[&str], co_size: u64) -> (u64, String) {
    use std::os::unix::fs::FileExt;
    let mut count = Tally {
        inner: std::io::sink(),
        n: 0,
        sha: Default::default(),
    };
    write_bundle_to(&mut count, targets, co_size);
    let f = std::fs::File::create(path).unwrap();
    let head = rocpack_bundle::ccob_header_len(3).unwrap();
    let params = rocpack_bundle::CcobParams {
        level: rocpack_bundle::DEFAULT_ZSTD_LEVEL,
        long: false,
        max_window_log: 27,
    };
    let mut w = std::io::BufWriter::new(&f);
    w.write_all(&vec![0; head as usize]).unwrap();
    let enc =
        rocpack_bundle::CcobEncoder::new(w, 3, rocpack_bundle::Method::Zstd, count.n, params, None)
            .unwrap();
    let mut t = Tally {
        inner: enc,
        n: 0,
        sha: Default::default(),
    };
    write_bundle_to(&mut t, targets, co_size);
    let (mut w, header, _) = t.inner.finish().unwrap();
    w.flush().unwrap();
    drop(w);
    f.write_all_at(&header, 0).unwrap();
    use sha2::Digest;
    (t.n, hex(&t.sha.finalize()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn tool(mut c: Command, what: &str) {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Builds `dir/art/big/lib/libbig.so` around a bundle of `co_size`-byte
/// code objects for `targets` (as CCOB v3 zstd at LLVM's default level
/// when `ccob`, [`write_ccob_bundle`]) and, when `host_mib` > 0, a `.rodata` blob of
/// that many MiB of host data; returns the artifact dir.
fn build_library(
    dir: &Path,
    targets: &[&str],
    co_size: u64,
    host_mib: u64,
    ccob: bool,
) -> std::path::PathBuf {
    if ccob {
        write_ccob_bundle(&dir.join("blob.bin"), targets, co_size);
    } else {
        write_bundle(&dir.join("blob.bin"), targets, co_size);
    }
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
    let mut objs = vec!["wrapper.c", "blob.o"];
    if host_mib > 0 {
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("host.bin")).unwrap());
        let block = pseudo_random(23, 1 << 20);
        for _ in 0..host_mib {
            f.write_all(&block).unwrap();
        }
        f.flush().unwrap();
        drop(f);
        let mut c = Command::new("ld");
        c.current_dir(dir)
            .args(["-r", "-b", "binary", "host.bin", "-o", "host.o"]);
        tool(c, "ld -r -b binary (host)");
        std::fs::remove_file(dir.join("host.bin")).unwrap();
        let mut c = Command::new("objcopy");
        c.current_dir(dir).args([
            "--rename-section",
            ".data=.rodata.big,alloc,load,readonly,data,contents",
            "host.o",
        ]);
        tool(c, "objcopy (host)");
        objs.push("host.o");
    }
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
        .args(["-shared", "-fPIC", "-Wl,-z,noexecstack"])
        .args(&objs)
        .arg("-o")
        .arg(lib.join("libbig.so"));
    tool(c, "gcc -shared");
    std::fs::remove_file(dir.join("blob.o")).unwrap();
    let _ = std::fs::remove_file(dir.join("host.o"));
    art
}

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

/// Runs `cmd` to completion; its output and its peak resident set in KiB
/// (`ru_maxrss` from `wait4` of that one process).
#[allow(unsafe_code)]
fn run_peak_rss(mut cmd: Command, dir: &Path, what: &str) -> (std::process::Output, u64) {
    use std::process::Stdio;
    let (o, e) = (dir.join("rss.out"), dir.join("rss.err"));
    let child = cmd
        .stdout(Stdio::from(std::fs::File::create(&o).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&e).unwrap()))
        .spawn()
        .unwrap_or_else(|x| panic!("{what}: {x}"));
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain FFI call with valid out-pointers; `child` is not
    // waited on by std afterwards (its Drop neither waits nor kills).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "{what}: wait4");
    drop(child);
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: std::fs::read(&o).unwrap(),
        stderr: std::fs::read(&e).unwrap(),
    };
    (out, ru.ru_maxrss as u64)
}

#[test]
fn split_and_reassembly_memory_do_not_grow_with_a_1gib_input() {
    if !have_tool("objcopy") || !have_tool("gcc") || !have_tool("cmp") {
        return;
    }
    let tmp = tempdir();
    let art = build_library(tmp.path(), &TARGETS, CO_SIZE, HOST_MIB, false);
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

/// Peak RSS allowed to the reassembly of a CCOB bundle (the zstd encoder's
/// window is capped at 16 MiB whatever the bundle's size).
const MAX_CCOB_RSS_KIB: u64 = 128 * 1024;

/// Issue 22: reassembly streams code objects through the compressor. A
/// library whose one CCOB v3 (zstd) bundle holds 16 x 16 MiB = 256 MiB of
/// code objects is split and reassembled with one and with two workers:
/// peak RSS within 128 MiB each time (holding the code objects, the
/// uncompressed bundle or an encoder window covering it fails), the same
/// bytes for both, and the bundle decompresses (this process's parser) to
/// the original payload with the original's stored hash.
#[test]
fn reassembly_of_a_256mib_ccob_streams() {
    if !have_tool("objcopy") || !have_tool("gcc") {
        return;
    }
    const CO: u64 = 16 << 20;
    let tmp = tempdir();
    let art = build_library(tmp.path(), &TARGETS, CO, 0, true);
    let lib = art.join("big/lib/libbig.so");
    // The CCOB header, and the payload's length and SHA-256.
    let bundle_of = |path: &Path| -> (rocpack_bundle::CcobHeader, u64, String) {
        let file = std::fs::read(path).unwrap();
        let info = rocpack_elf::analyze(&file).unwrap();
        assert_eq!(info.bundles.len(), 1);
        let b = &info.bundles[0];
        let p = rocpack_bundle::parse_bundle(&file[b.file_offset as usize..]).unwrap();
        let payload = p.decompressed.as_deref().expect("a payload");
        (
            p.ccob.expect("a CCOB"),
            payload.len() as u64,
            sha256_hex(payload),
        )
    };
    let out = tmp.path().join("out");
    let mut cmd = Command::new(KPACK);
    cmd.args(["split", "--artifact-dir"])
        .arg(art.join("big"))
        .args(["--artifact-prefix", "big", "--output-dir"])
        .arg(&out);
    tool(cmd, "kpack split");
    let mut outputs = Vec::new();
    for threads in ["1", "2"] {
        let back = tmp.path().join(format!("back-{threads}.so"));
        let mut cmd = reassemble_cmd(Command::new(KPACK), &out, &back);
        cmd.env("RAYON_NUM_THREADS", threads);
        let (o, rss) = run_peak_rss(cmd, tmp.path(), "kpack reassemble (CCOB)");
        eprintln!("reassemble of a 256 MiB CCOB, {threads} worker(s): peak RSS {rss} KiB");
        assert!(o.status.success(), "reassemble: {}", stderr(&o));
        assert!(
            rss <= MAX_CCOB_RSS_KIB,
            "reassemble of a 256 MiB CCOB with {threads} worker(s): peak RSS {rss} KiB"
        );
        outputs.push(back);
    }
    assert!(
        same_file(&outputs[0], &outputs[1]),
        "output depends on the worker count"
    );
    // Only now (see write_ccob_bundle): the payloads in this process.
    let (want_head, want_len, want) = bundle_of(&lib);
    assert!(want_len >= TARGETS.len() as u64 * CO);
    let (head, got_len, got) = bundle_of(&outputs[0]);
    assert_eq!((got_len, got), (want_len, want), "decompressed bundle");
    assert_eq!(
        (head.version, head.method),
        (want_head.version, want_head.method)
    );
    assert_eq!(head.hash, want_head.hash, "stored hash");
}
