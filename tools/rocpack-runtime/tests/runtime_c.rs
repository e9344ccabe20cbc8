//! The C ABI, tested from C: `tests/c/abi_test.c` is compiled against
//! `include/rocm_kpack/kpack.h` and linked with the shared and the static
//! library, then run against golden archives (written by ROCm's rocm-kpack)
//! and a small install tree.

use std::path::{Path, PathBuf};
use std::process::Command;

use rocpack_kpack::{Compression, KpackWriter, Marker};

const SYMBOLS: [&str; 14] = [
    "kpack_cache_create",
    "kpack_cache_destroy",
    "kpack_close",
    "kpack_discover_binary_path",
    "kpack_enumerate_architectures",
    "kpack_free_code_object",
    "kpack_free_kernel",
    "kpack_get_architecture",
    "kpack_get_architecture_count",
    "kpack_get_binary",
    "kpack_get_binary_count",
    "kpack_get_kernel",
    "kpack_load_code_object",
    "kpack_open",
];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lib_dir() -> PathBuf {
    rocpack_testsupport::test_exe_dir()
}

fn golden() -> PathBuf {
    rocpack_testsupport::repo_root().join("tests/fixtures/kpack-golden")
}

/// The first zstd frame after the header, decoded by the zstd crate: an
/// oracle for `kpack_get_kernel` that does not use our reader.
fn first_zstd_kernel(archive: &Path) -> Vec<u8> {
    let b = std::fs::read(archive).unwrap();
    let at = (64..b.len() - 4)
        .find(|&i| b[i..i + 4] == [0x28, 0xb5, 0x2f, 0xfd])
        .expect("a zstd frame");
    let mut out = Vec::new();
    let mut d = zstd::stream::read::Decoder::new(&b[at..])
        .unwrap()
        .single_frame();
    std::io::copy(&mut d, &mut out).unwrap();
    out
}

fn write(p: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// The tree the C program reads (see the modes in abi_test.c).
fn setup(dir: &Path) {
    let g = golden();
    for f in ["test_noop.kpack", "test_zstd.kpack"] {
        write(
            &dir.join("golden").join(f),
            &std::fs::read(g.join(f)).unwrap(),
        );
    }
    let zstd = std::fs::read(g.join("test_zstd.kpack")).unwrap();
    write(
        &dir.join("expect/libhip_gfx1100.bin"),
        &first_zstd_kernel(&g.join("test_zstd.kpack")),
    );
    // Reader errors.
    write(&dir.join("bad/empty.kpack"), b"");
    write(&dir.join("bad/magic.kpack"), &[b'X'; 80]);
    let mut v = zstd[..80].to_vec();
    v[4] = 2;
    write(&dir.join("bad/version.kpack"), &v);
    let mut t = zstd[..64].to_vec();
    t[8..16].copy_from_slice(&64u64.to_le_bytes());
    t.push(0x2a);
    write(&dir.join("bad/toc.kpack"), &t);
    // Marker with two search paths; lib/ has only the first archive.
    let marker = Marker::new(
        [".kpack/x_@GFXARCH@.kpack", ".kpack/y_@GFXARCH@.kpack"],
        "lib/libhip.so",
    );
    write(&dir.join("marker.msgpack"), &marker.encode());
    write(&dir.join("lib/libhip.so"), b"host");
    write(&dir.join("lib/.kpack/x_gfx1100.kpack"), &zstd);
    write(&dir.join("lib/.kpack/x_gfx1101.kpack"), &zstd);
    // lib2: x lists gfx1100 but lacks the kernel; y has it (fall-through).
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("other")
        .arch_family("gfx110X")
        .arches(["gfx1100"]);
    w.add("other#0", "gfx1100", vec![1u8, 2, 3]).unwrap();
    let (cur, _) = w.write_to(std::io::Cursor::new(Vec::new())).unwrap();
    let other = cur.into_inner();
    write(&dir.join("lib2/libhip.so"), b"host");
    write(&dir.join("lib2/.kpack/x_gfx1100.kpack"), &other);
    write(&dir.join("lib2/.kpack/y_gfx1100.kpack"), &zstd);
    // lib3: x holds the key but its frame does not decode; y has it.
    // lib4: only that broken archive.
    let broken = broken_frame_archive();
    for d in ["lib3", "lib4"] {
        write(&dir.join(d).join("libhip.so"), b"host");
        write(&dir.join(d).join(".kpack/x_gfx1100.kpack"), &broken);
    }
    write(&dir.join("lib3/.kpack/y_gfx1100.kpack"), &zstd);
    // A 64 MiB `none` kernel (the OUT_OF_MEMORY test).
    let mut w = KpackWriter::new(Compression::None);
    w.group_name("big").arch_family("gfx942").arches(["gfx942"]);
    w.add("big#0", "gfx942", vec![7u8; 64 << 20]).unwrap();
    let (cur, _) = w.write_to(std::io::Cursor::new(Vec::new())).unwrap();
    write(&dir.join("big/none.kpack"), &cur.into_inner());
}

/// A zstd archive holding `lib/libhip.so#0` for gfx1100 whose frame passes
/// every open-time check (frame length, content size) but fails to decode:
/// one byte of the compressed block is changed, chosen with the zstd crate
/// as the oracle (it must reject the frame) and our reader as the filter
/// (it must still open the archive).
fn broken_frame_archive() -> Vec<u8> {
    let data: Vec<u8> = (0..16384u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 & 0x1f)
        .collect();
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("broken")
        .arch_family("gfx110X")
        .arches(["gfx1100"]);
    w.add("lib/libhip.so#0", "gfx1100", data).unwrap();
    let (cur, _) = w.write_to(std::io::Cursor::new(Vec::new())).unwrap();
    let good = cur.into_inner();
    let r = rocpack_kpack::KpackReader::from_bytes(&good).unwrap();
    let e = r.entry("lib/libhip.so#0", "gfx1100").unwrap();
    let loc = r.blob_location(e.ordinal).unwrap();
    let (start, end) = (loc.offset as usize, (loc.offset + loc.size) as usize);
    for pos in (start + 8..end).rev() {
        for x in [0xffu8, 0x80, 0x01] {
            let mut v = good.clone();
            v[pos] ^= x;
            let decodes =
                zstd::bulk::decompress(&v[start..end], 1 << 20).is_ok_and(|d| d.len() == 16384);
            if !decodes && rocpack_kpack::KpackReader::from_bytes(&v).is_ok() {
                return v;
            }
        }
    }
    panic!("no single-byte change breaks the frame yet passes the reader");
}

fn compile(out: &Path, static_link: bool) -> PathBuf {
    let exe = out.join(if static_link {
        "abi_test_static"
    } else {
        "abi_test_shared"
    });
    let lib = lib_dir();
    let mut cmd = Command::new("cc");
    cmd.arg("-std=c11")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(manifest_dir().join("include"))
        .arg(manifest_dir().join("tests/c/abi_test.c"))
        .arg("-o")
        .arg(&exe);
    if static_link {
        cmd.arg(lib.join("librocm_kpack.a")).args([
            "-lpthread",
            "-ldl",
            "-lm",
            "-lrt",
            "-lutil",
            "-lgcc_s",
        ]);
    } else {
        // Install as a distribution would: the real file under its SONAME,
        // the development symlink beside it.
        let inst = out.join("lib");
        std::fs::create_dir_all(&inst).unwrap();
        std::fs::copy(
            lib.join("librocm_kpack.so"),
            inst.join("librocm_kpack.so.0"),
        )
        .unwrap();
        std::os::unix::fs::symlink("librocm_kpack.so.0", inst.join("librocm_kpack.so")).unwrap();
        cmd.arg(format!("-L{}", inst.display()))
            .arg(format!("-Wl,-rpath,{}", inst.display()))
            .arg("-lrocm_kpack")
            .arg("-lpthread");
    }
    let st = cmd.status().expect("cc (gcc) is needed for the C ABI test");
    assert!(st.success(), "compiling abi_test.c failed: {cmd:?}");
    exe
}

fn run(exe: &Path, mode: &str, dir: &Path, env: &[(&str, String)]) -> String {
    let mut cmd = Command::new(exe);
    cmd.arg(mode).arg(dir);
    for k in [
        "ROCM_KPACK_PATH",
        "ROCM_KPACK_PATH_PREFIX",
        "ROCM_KPACK_DISABLE",
        "ROCM_KPACK_DEBUG",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{} {mode}: {stdout}", exe.display());
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "{mode} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn all_modes(static_link: bool) {
    let tmp = rocpack_testsupport::tempdir();
    let dir = tmp.path().join("tree");
    setup(&dir);
    let exe = compile(tmp.path(), static_link);
    run(&exe, "api", &dir, &[]);
    run(&exe, "load", &dir, &[]);
    run(&exe, "threads", &dir, &[]);
    run(&exe, "oom", &dir, &[]);
    let err = run(&exe, "envonce", &dir, &[]);
    assert!(
        !err.contains("kpack: "),
        "ROCM_KPACK_DEBUG set after kpack_cache_create printed: {err}"
    );
    // Truthiness (ROCm's loader.cpp): only the first character counts;
    // empty or starting with '0' is off, anything else on.
    for v in ["1", "true", "yes", "false", "no", " ", "off", "10"] {
        run(&exe, "disabled", &dir, &[("ROCM_KPACK_DISABLE", v.into())]);
    }
    for v in ["0", "", "00", "0x", "0abc", "0 "] {
        run(&exe, "load", &dir, &[("ROCM_KPACK_DISABLE", v.into())]);
    }
    // ROCM_KPACK_PATH of separators only: unset, the marker's paths work.
    run(&exe, "load", &dir, &[("ROCM_KPACK_PATH", ":".into())]);
    // ROCM_KPACK_DEBUG: `kpack: ` lines on stderr when on, silence when off.
    for v in ["1", "x", "false"] {
        let err = run(&exe, "debug", &dir, &[("ROCM_KPACK_DEBUG", v.into())]);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("kpack: ")).collect();
        assert!(lines.len() >= 2, "ROCM_KPACK_DEBUG={v:?}: {err}");
        assert!(
            lines.iter().any(|l| l.contains("lib/libhip.so#0 -> ")),
            "{err}"
        );
    }
    for v in ["0", "", "00", "0x"] {
        let err = run(&exe, "debug", &dir, &[("ROCM_KPACK_DEBUG", v.into())]);
        assert!(
            !err.contains("kpack: "),
            "ROCM_KPACK_DEBUG={v:?} printed: {err}"
        );
    }
    let err = run(&exe, "debug", &dir, &[]);
    assert!(
        !err.contains("kpack: "),
        "unset ROCM_KPACK_DEBUG printed: {err}"
    );
    let only = dir.join("lib/.kpack/x_gfx1100.kpack").display().to_string();
    run(&exe, "archnf", &dir, &[("ROCM_KPACK_PATH", only.clone())]);
    // ROCM_KPACK_PATH_PREFIX is searched first, and ignored when PATH is set.
    run(
        &exe,
        "load",
        &dir,
        &[(
            "ROCM_KPACK_PATH_PREFIX",
            format!("{}:", dir.join("missing").display()),
        )],
    );
    run(
        &exe,
        "archnf",
        &dir,
        &[
            ("ROCM_KPACK_PATH", only),
            (
                "ROCM_KPACK_PATH_PREFIX",
                dir.join("lib2/.kpack/x_gfx1100.kpack")
                    .display()
                    .to_string(),
            ),
        ],
    );
}

#[test]
fn c_abi_shared_library() {
    all_modes(false);
}

#[test]
fn c_abi_static_library() {
    all_modes(true);
}

#[test]
fn exports_exactly_the_fourteen_functions() {
    let so = lib_dir().join("librocm_kpack.so");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success());
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect();
    names.sort();
    assert_eq!(names, SYMBOLS, "exported symbols of {}", so.display());
    let d = Command::new("readelf").arg("-d").arg(&so).output().unwrap();
    assert!(
        String::from_utf8_lossy(&d.stdout).contains("Library soname: [librocm_kpack.so.0]"),
        "SONAME"
    );
}

#[test]
fn header_compiles_and_links_as_cpp() {
    let tmp = rocpack_testsupport::tempdir();
    let exe = tmp.path().join("header_cpp");
    let lib = lib_dir();
    let st = Command::new("c++")
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(manifest_dir().join("include"))
        .arg(manifest_dir().join("tests/c/header_cpp.cpp"))
        .arg("-o")
        .arg(&exe)
        .arg(lib.join("librocm_kpack.a"))
        .args(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"])
        .status()
        .expect("c++ (g++) is needed for the C++ header test");
    assert!(st.success(), "compiling header_cpp.cpp failed");
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success() && out.stdout == b"ok\n", "{out:?}");
}
