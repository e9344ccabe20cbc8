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

/// A writer counting bytes.
struct Tally<W: Write> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Tally<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let k = self.inner.write(b)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// [`rocpack_testsupport::write_big_bundle`] as CCOB v3 zstd at LLVM's default level, streamed (this
/// process never holds the payload: a child's peak RSS from `wait4`
/// may include its parent's high-water mark).
fn write_ccob_bundle(path: &Path, targets: &[&str], co_size: u64) {
    use std::os::unix::fs::FileExt;
    let mut count = Tally {
        inner: std::io::sink(),
        n: 0,
    };
    rocpack_testsupport::write_big_bundle_to(&mut count, targets, co_size);
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
    let mut t = Tally { inner: enc, n: 0 };
    rocpack_testsupport::write_big_bundle_to(&mut t, targets, co_size);
    let (mut w, header, _) = t.inner.finish().unwrap();
    w.flush().unwrap();
    drop(w);
    f.write_all_at(&header, 0).unwrap();
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
        let (o, rss) = run_peak(&cmd);
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
        let (o, rss) = run_peak(&cmd);
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

/// Peak RSS allowed to `pack`, `unpack` and `split` of large code objects
/// (issue 22's bound).
const MAX_RSS_PACK_KIB: u64 = 256 * 1024;

/// Issue 22: `kpack pack` of 4 x 512 MiB code objects with zstd (level 1,
/// to keep the test quick; the code path is the default level's) and
/// `kpack unpack` of that ~0.9 GiB archive hold no code object and no
/// frame: peak RSS <= 256 MiB each (before: pack 1.5 GB, unpack 400 MB).
/// One 512 MiB input is packed under four keys (disk: 0.5 + 0.9 + 2 GiB).
/// The unpacked files are the input; an archive damaged in the middle of a
/// frame unpacks to nothing (no partial output).
#[test]
fn pack_and_unpack_of_large_code_objects_stay_flat() {
    let tmp = tempdir();
    let co = tmp.path().join("co.bin");
    write_large_code_like(&co, 512);
    let want = sha256_file(&co);
    let archive = tmp.path().join("big.kpack");
    let mut args: Vec<String> = vec!["pack".into(), "-o".into(), s(&archive).into()];
    for k in ["a", "b", "c", "d"] {
        args.extend([
            "--entry".into(),
            format!("lib/{k}.so#0"),
            "gfx1100".into(),
            s(&co).into(),
        ]);
    }
    args.extend(["--compression".into(), "zstd:1".into()]);
    let arena = |a: &[String]| {
        let mut c = Command::new(KPACK);
        c.args(a).env("MALLOC_ARENA_MAX", "1");
        c
    };
    let (o, u) = run_measured_peak_cmd(&arena(&args));
    assert_ok(&o);
    eprintln!(
        "pack 4 x 512 MiB (zstd:1): peak RSS {} KiB, {:.1} s wall",
        u.max_rss_kib, u.wall
    );
    std::fs::remove_file(&co).unwrap();
    let r = rocpack_kpack::KpackReader::open_file(&archive).unwrap();
    let frame = r.checked_location(0).unwrap();
    assert!(
        frame.size > 128 << 20,
        "frames of {} bytes are too small to show a frame held in memory",
        frame.size
    );
    assert!(
        u.max_rss_kib <= MAX_RSS_PACK_KIB,
        "pack of 4 x 512 MiB: peak RSS {} KiB",
        u.max_rss_kib
    );
    let out = tmp.path().join("un");
    let args: Vec<String> = vec![
        "unpack".into(),
        s(&archive).into(),
        "-o".into(),
        s(&out).into(),
        "--json".into(),
    ];
    let (o, u) = run_measured_peak_cmd(&arena(&args));
    assert_ok(&o);
    eprintln!(
        "unpack of {} bytes: peak RSS {} KiB, {:.1} s wall",
        std::fs::metadata(&archive).unwrap().len(),
        u.max_rss_kib,
        u.wall
    );
    assert!(
        u.max_rss_kib <= MAX_RSS_PACK_KIB,
        "unpack of 4 x 512 MiB frames: peak RSS {} KiB",
        u.max_rss_kib
    );
    let m: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ks = m["kernels"].as_array().unwrap();
    assert_eq!(ks.len(), 4);
    for (i, k) in ks.iter().enumerate() {
        let f = out.join(k["file"].as_str().unwrap());
        assert_eq!(k["sha256"], want.as_str(), "{}", f.display());
        if i == 0 {
            // The manifest's hash is kpack's; one file hashed here too.
            assert_eq!(sha256_file(&f), want, "{}", f.display());
        }
        std::fs::remove_file(f).unwrap();
    }
    // One byte in the middle of the last frame: the checksum fails after
    // most of it was written; nothing is left behind.
    let last = r.checked_location(3).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&archive)
            .unwrap();
        let at = last.offset + last.size / 2;
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
    }
    let bad = tmp.path().join("un-bad");
    let o = kpack(&["unpack", s(&archive), "-o", s(&bad)]);
    assert_exit(&o, 2);
    assert!(!bad.exists(), "a failed unpack left {}", bad.display());
}

/// Issue 22: `kpack split` (zstd) of a library with one 512 MiB plain
/// code object peaks at <= 256 MiB (before: the code object and its frame,
/// 530 MB), and the archive holds that code object.
#[test]
fn split_of_a_512mib_code_object_stays_flat() {
    if !have_tool("objcopy") || !have_tool("gcc") {
        return;
    }
    let tmp = tempdir();
    let art = big_fat_library(tmp.path(), &["gfx1100"], 512 << 20, 0);
    let out = tmp.path().join("out");
    let mut cmd = Command::new(KPACK);
    cmd.args(["split", "--artifact-dir"])
        .arg(art.join("big"))
        .args(["--artifact-prefix", "big", "--output-dir"])
        .arg(&out)
        .args(["--jobs", "2"])
        .env("MALLOC_ARENA_MAX", "1");
    let (o, u) = run_measured_peak_cmd(&cmd);
    assert_ok(&o);
    eprintln!(
        "split of a 512 MiB code object (zstd): peak RSS {} KiB, {:.1} s wall",
        u.max_rss_kib, u.wall
    );
    assert!(
        u.max_rss_kib <= MAX_RSS_PACK_KIB,
        "split of a 512 MiB code object: peak RSS {} KiB",
        u.max_rss_kib
    );
    let kp = out.join("big_gfx1100/lib/.kpack/big_gfx1100.kpack");
    let r = rocpack_kpack::KpackReader::open_file(&kp).unwrap();
    let e = &r.entries()[0];
    assert_eq!(e.original_size, 512 << 20);
    let (mut n, mut h) = (0u64, {
        use sha2::Digest;
        sha2::Sha256::new()
    });
    r.stream_entry::<rocpack_kpack::Error>(e, &mut |b| {
        use sha2::Digest;
        n += b.len() as u64;
        h.update(b);
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 512 << 20);
    // The bundle's code object: a 1 MiB block repeated, its first 8 bytes
    // the entry number (1).
    let mut block = pseudo_random(22, 1 << 20);
    block[..8].copy_from_slice(&1u64.to_le_bytes());
    let mut want = {
        use sha2::Digest;
        sha2::Sha256::new()
    };
    for _ in 0..512 {
        use sha2::Digest;
        want.update(&block);
    }
    use sha2::Digest;
    assert_eq!(h.finalize(), want.finalize());
    // The streamed frame does not depend on the thread count.
    let one = tmp.path().join("out-1");
    let o = kpack(&[
        "split",
        "--artifact-dir",
        s(&art.join("big")),
        "--artifact-prefix",
        "big",
        "--output-dir",
        s(&one),
        "--jobs",
        "1",
    ]);
    assert_ok(&o);
    assert!(
        same_file(&kp, &one.join("big_gfx1100/lib/.kpack/big_gfx1100.kpack")),
        "--jobs 1 and --jobs 2 archives differ"
    );
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
    let art = rocpack_testsupport::big_fat_library_from(tmp.path(), 0, |blob| {
        write_ccob_bundle(blob, &TARGETS, CO)
    });
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
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "kpack split: {}", stderr(&o));
    let mut outputs = Vec::new();
    for threads in ["1", "2"] {
        let back = tmp.path().join(format!("back-{threads}.so"));
        let mut cmd = reassemble_cmd(Command::new(KPACK), &out, &back);
        cmd.env("RAYON_NUM_THREADS", threads);
        let (o, rss) = run_peak(&cmd);
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

/// Issue 22: `split --compression none` of a CCOB writes each code object
/// once, decompressed straight into its archive (before: into a spill file,
/// then copied into the archive, twice the bytes). A library whose CCOB v3
/// holds 16 x 4 MiB of code objects is split; the bytes the child passed to
/// write-like system calls (`wchar`, copies included) may exceed the code
/// objects plus the input file's size (a bound on the host rewrite) by at
/// most 1 MiB (TOCs, manifests). Each archive holds its code object's
/// bytes.
#[test]
fn split_none_writes_each_ccob_code_object_once() {
    if !have_tool("objcopy") || !have_tool("gcc") {
        return;
    }
    const CO: u64 = 4 << 20;
    let tmp = tempdir();
    let art = rocpack_testsupport::big_fat_library_from(tmp.path(), 0, |blob| {
        write_ccob_bundle(blob, &TARGETS, CO)
    });
    let lib = art.join("big/lib/libbig.so");
    let out = tmp.path().join("out");
    let mut cmd = Command::new(kpack_under_test());
    cmd.args(["split", "--compression", "none", "--artifact-dir"])
        .arg(art.join("big"))
        .args(["--artifact-prefix", "big", "--output-dir"])
        .arg(&out);
    let (o, u) = run_measured_peak_cmd(&cmd);
    assert!(o.status.success(), "kpack split: {}", stderr(&o));
    let code = TARGETS.len() as u64 * CO;
    let input = std::fs::metadata(&lib).unwrap().len();
    eprintln!(
        "split --compression none of {code} bytes of CCOB code objects ({input}-byte input): {} bytes written",
        u.written
    );
    assert!(
        u.written <= code + input + (1 << 20),
        "split --compression none wrote {} bytes for {code} bytes of code objects and a {input}-byte input",
        u.written
    );
    // Each archive holds its target's code object (write_big_bundle_to:
    // a 1 MiB block stamped with the entry's number, repeated).
    let block = rocpack_testsupport::pseudo_random(22, 1 << 20);
    for (n, t) in TARGETS.iter().enumerate() {
        let p = out.join(format!("big_{t}/lib/.kpack/big_{t}.kpack"));
        let r = rocpack_kpack::KpackReader::open(&p).unwrap();
        let got = r.get("lib/libbig.so#0", t).unwrap();
        let mut b = block.clone();
        b[..8].copy_from_slice(&(n as u64 + 1).to_le_bytes());
        assert_eq!(got.len() as u64, CO, "{t}");
        assert!(
            got.chunks(1 << 20).all(|c| c == b.as_slice()),
            "{t}: code object bytes"
        );
    }
}
