//! Side by side with ROCm's own `librocm_kpack` (the C++ library, as
//! released and with today's search loop and TOC parser, from
//! `<shared>/oracles/rocm-kpack/`): ROCm's black-box gtests against this
//! library, and the runtime's edge cases run against all three libraries,
//! one child process per library (`tests/runtime/harness.c`). This
//! library's answer must equal each ROCm build's, or be a difference listed
//! in docs/runtime.md ("Differences from ROCm, side by side"), and every
//! listed difference must really be one.
//!
//! The oracles are found through `ROCPACK_SHARED_DIR` (default: the `shared` directory
//! beside the checkout). Without them both tests are skipped with a loud
//! message on stderr; with `ROCPACK_REQUIRE_ORACLES=1` they fail instead.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rocpack_kpack::{Compression, KpackWriter, Marker};
use rocpack_testsupport as ts;

/// `<shared>/oracles/rocm-kpack`, or `None` after a loud skip message.
fn oracles(test: &str) -> Option<PathBuf> {
    let dir = ts::shared_dir().join("oracles/rocm-kpack");
    if dir.join("test_kpack_runtime").is_file() {
        return Some(dir);
    }
    let msg = format!(
        "{test}: ROCm's librocm_kpack oracles are not at {} (set ROCPACK_SHARED_DIR)",
        dir.display()
    );
    assert!(
        std::env::var_os("ROCPACK_REQUIRE_ORACLES").is_none(),
        "{msg}"
    );
    // Straight to stderr: libtest captures only the print macros, and a
    // skip must be seen in CI's log.
    let bar = "!".repeat(76);
    let _ = writeln!(std::io::stderr(), "\n{bar}\n!!! SKIPPED {msg}\n{bar}\n");
    None
}

/// A directory whose `librocm_kpack.so.0` is the ROCm build in `build`
/// (`ref` or `current`). The shared directory may hold the SONAME link as a
/// text file naming its target (symlinks copied as text): then a real
/// link to that file is made under `tmp`.
fn rocm_lib_dir(oracles: &Path, build: &str, tmp: &Path) -> PathBuf {
    let dir = oracles.join(build);
    let so = dir.join("librocm_kpack.so.0");
    let head = std::fs::read(&so).unwrap_or_default();
    if head.starts_with(b"\x7fELF") {
        return dir;
    }
    let name = String::from_utf8_lossy(&head).trim().to_owned();
    assert!(
        !name.is_empty() && !name.contains('/') && dir.join(&name).is_file(),
        "{}: neither a library nor the name of one",
        so.display()
    );
    let out = tmp.join(build);
    std::fs::create_dir_all(&out).unwrap();
    std::os::unix::fs::symlink(dir.join(&name), out.join("librocm_kpack.so.0")).unwrap();
    out
}

/// ROCm's own 64 black-box tests pass against this library.
#[test]
fn rocm_blackbox_tests_pass() {
    let Some(o) = oracles("rocm_blackbox_tests_pass") else {
        return;
    };
    let lib = ts::test_exe_dir();
    assert!(
        lib.join("librocm_kpack.so.0").exists(),
        "no SONAME link in {}",
        lib.display()
    );
    let t = std::time::Instant::now();
    let mut cmd = Command::new(o.join("run-blackbox-tests"));
    cmd.arg(&lib).arg("--gtest_brief=1");
    for k in ENV_KEYS {
        cmd.env_remove(k);
    }
    let out = ts::output_within(cmd, Duration::from_secs(300), "run-blackbox-tests");
    let text = format!("{}{}", ts::stdout(&out), ts::stderr(&out));
    eprintln!("{text}\nrun-blackbox-tests: {:?}", t.elapsed());
    assert!(out.status.success(), "ROCm's black-box tests failed");
    assert!(
        text.contains("[  PASSED  ] 64 tests."),
        "expected 64 passing tests"
    );
}

const ENV_KEYS: [&str; 4] = [
    "ROCM_KPACK_PATH",
    "ROCM_KPACK_PATH_PREFIX",
    "ROCM_KPACK_DISABLE",
    "ROCM_KPACK_DEBUG",
];

// ------------------------------------------------------------- archives

const KEY: &str = "lib/libx.so#0";

/// `len` incompressible bytes (splitmix64): zstd stores them in raw
/// blocks, so archives of different seeds have the same size (an in-place
/// rewrite of the same size is one of the cases).
fn kernel(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// An archive of `kernels` (`(key, target, bytes)`) listing `arches`.
fn archive(
    c: Compression,
    checksum: bool,
    arches: &[&str],
    kernels: &[(&str, &str, &[u8])],
) -> Vec<u8> {
    let mut w = KpackWriter::new(c);
    w.group_name("g")
        .arch_family(arches.first().copied().unwrap_or("gfx1100"))
        .arches(arches.iter().copied());
    w.content_checksum(checksum);
    for (k, t, b) in kernels {
        w.add(k, t, b.to_vec()).unwrap();
    }
    let (cur, _) = w.write_to(std::io::Cursor::new(Vec::new())).unwrap();
    cur.into_inner()
}

fn zstd() -> Compression {
    Compression::Zstd { level: 3 }
}

/// One gfx1100 kernel under [`KEY`] (seed picks the bytes).
fn one(c: Compression, seed: u64) -> Vec<u8> {
    archive(
        c,
        false,
        &["gfx1100"],
        &[(KEY, "gfx1100", &kernel(seed, 5000))],
    )
}

fn toc_offset(b: &[u8]) -> usize {
    u64::from_le_bytes(b[8..16].try_into().unwrap()) as usize
}

/// `b` with its TOC decoded, changed by `f` and written back.
fn with_toc(b: &[u8], f: impl FnOnce(&mut Vec<(rmpv::Value, rmpv::Value)>)) -> Vec<u8> {
    let at = toc_offset(b);
    let mut toc = rmpv::decode::read_value(&mut &b[at..]).unwrap();
    let rmpv::Value::Map(m) = &mut toc else {
        panic!("TOC is not a map")
    };
    f(m);
    let mut out = b[..at].to_vec();
    rmpv::encode::write_value(&mut out, &toc).unwrap();
    out
}

fn field<'a>(m: &'a mut [(rmpv::Value, rmpv::Value)], k: &str) -> &'a mut rmpv::Value {
    &mut m
        .iter_mut()
        .find(|(key, _)| key.as_str() == Some(k))
        .unwrap()
        .1
}

/// The entry map of (key, target).
fn entry<'a>(
    m: &'a mut [(rmpv::Value, rmpv::Value)],
    key: &str,
    target: &str,
) -> &'a mut Vec<(rmpv::Value, rmpv::Value)> {
    let rmpv::Value::Map(toc) = field(m, "toc") else {
        panic!()
    };
    let rmpv::Value::Map(per) = &mut toc
        .iter_mut()
        .find(|(k, _)| k.as_str() == Some(key))
        .unwrap()
        .1
    else {
        panic!()
    };
    let rmpv::Value::Map(e) = &mut per
        .iter_mut()
        .find(|(k, _)| k.as_str() == Some(target))
        .unwrap()
        .1
    else {
        panic!()
    };
    e
}

/// Offset of zstd frame 0 (after the count and its size prefix).
const FRAME0: usize = 64 + 4 + 4;

// ---------------------------------------------------------------- cases

/// A case: files under its directory and the harness operations.
struct Case {
    name: &'static str,
    files: Vec<(String, Vec<u8>)>,
    ops: Vec<String>,
}

impl Case {
    fn new(name: &'static str) -> Case {
        Case {
            name,
            files: Vec::new(),
            ops: Vec::new(),
        }
    }
    fn file(mut self, path: &str, bytes: impl Into<Vec<u8>>) -> Case {
        self.files.push((path.to_owned(), bytes.into()));
        self
    }
    fn op(mut self, op: &str) -> Case {
        self.ops.push(op.to_owned());
        self
    }
    /// The usual layout: lib/libx.so with a marker searching
    /// `.kpack/x_@GFXARCH@.kpack` (marker.bin).
    fn split_layout(self) -> Case {
        self.file("lib/libx.so", "host").file(
            "marker.bin",
            Marker::new([".kpack/x_@GFXARCH@.kpack"], "lib/libx.so").encode(),
        )
    }
}

const LOAD: &str = "load marker.bin lib/libx.so 0 gfx1100";

/// Archive replaced by rename, deleted, truncated and rewritten in place
/// after a cache opened it, for both schemes; and a new cache afterwards.
fn changed_file_cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (scheme, c) in [("zstd", zstd()), ("none", Compression::None)] {
        let old = one(c, 1);
        let new = one(c, 2);
        assert_eq!(old.len(), new.len());
        let base = |name| {
            Case::new(name)
                .split_layout()
                .file("lib/.kpack/x_gfx1100.kpack", old.clone())
                .file("new.kpack", new.clone())
                .op("cache")
                .op(LOAD)
        };
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        out.push(
            base(leak(format!("replaced_by_rename_{scheme}")))
                .op("sh cp new.kpack lib/.kpack/tmp && mv lib/.kpack/tmp lib/.kpack/x_gfx1100.kpack")
                .op(LOAD)
                .op("cache")
                .op(LOAD),
        );
        out.push(
            base(leak(format!("deleted_{scheme}")))
                .op("sh rm lib/.kpack/x_gfx1100.kpack")
                .op(LOAD)
                .op("cache")
                .op(LOAD),
        );
        out.push(
            base(leak(format!("truncated_{scheme}")))
                .op("sh truncate -s 100 lib/.kpack/x_gfx1100.kpack")
                .op(LOAD),
        );
        out.push(
            base(leak(format!("rewritten_in_place_{scheme}")))
                .op("sh sleep 0.02; cp new.kpack lib/.kpack/x_gfx1100.kpack")
                .op(LOAD),
        );
        out.push(
            Case::new(leak(format!("archive_api_truncated_{scheme}")))
                .file("a.kpack", old.clone())
                .op("hold a.kpack")
                .op(&format!("get {KEY} gfx1100"))
                .op("sh truncate -s 100 a.kpack")
                .op(&format!("get {KEY} gfx1100"))
                .op("release"),
        );
    }
    out
}

/// ROCM_KPACK_DISABLE / _PATH / _PATH_PREFIX values, read at cache creation.
fn env_cases() -> Vec<Case> {
    let a = one(zstd(), 1);
    let b = one(zstd(), 2);
    let mut disable = Case::new("env_disable_values")
        .split_layout()
        .file("lib/.kpack/x_gfx1100.kpack", a.clone());
    for v in ["0", "00", "0abc", "1", "false", "no", "%20"] {
        let v = if v == "%20" { " " } else { v };
        disable = disable
            .op(&format!("setenv ROCM_KPACK_DISABLE {v}"))
            .op("cache")
            .op(LOAD);
    }
    disable = disable
        .op("setenv ROCM_KPACK_DISABLE ")
        .op("cache")
        .op(LOAD)
        .op("unsetenv ROCM_KPACK_DISABLE")
        .op("setenv ROCM_KPACK_DEBUG 1")
        .op("cache")
        .op(LOAD);
    let paths = Case::new("env_paths")
        .split_layout()
        .file("lib/.kpack/x_gfx1100.kpack", a)
        .file("other/b.kpack", b)
        .op("setenv ROCM_KPACK_PATH :")
        .op("cache")
        .op(LOAD)
        .op("setenv ROCM_KPACK_PATH /nonexistent.kpack:other/b.kpack")
        .op("cache")
        .op(LOAD)
        .op("setenv ROCM_KPACK_PATH /nonexistent.kpack")
        .op("cache")
        .op(LOAD)
        .op("unsetenv ROCM_KPACK_PATH")
        .op("setenv ROCM_KPACK_PATH_PREFIX ::other/b.kpack")
        .op("cache")
        .op(LOAD)
        .op("setenv ROCM_KPACK_PATH_PREFIX /nonexistent.kpack")
        .op("cache")
        .op(LOAD);
    vec![disable, paths]
}

fn null_arch_cases() -> Vec<Case> {
    let a = one(zstd(), 1);
    let direct = Marker::new([".kpack/x_gfx1100.kpack"], "lib/libx.so").encode();
    vec![Case::new("null_arch_entries")
        .split_layout()
        .file("lib/.kpack/x_gfx1100.kpack", a)
        .file("direct.bin", direct)
        .op("cache")
        .op("load marker.bin lib/libx.so 0 NULL,gfx1100")
        .op("load marker.bin lib/libx.so 0 NULL")
        .op("load marker.bin lib/libx.so 0 NULL,NULL")
        .op("load direct.bin lib/libx.so 0 NULL")
        .op("load direct.bin lib/libx.so 0 gfx1100,NULL")]
}

/// Damaged headers and TOCs, opened directly and met during a lookup
/// (a damaged archive first, an intact one second).
fn damaged_toc_cases() -> Vec<Case> {
    let good = one(zstd(), 1);
    let none = one(Compression::None, 1);
    let mut bad: Vec<(&str, Vec<u8>)> = Vec::new();
    bad.push(("magic", [b"XPAK".as_slice(), &good[4..]].concat()));
    let mut v = good.clone();
    v[4] = 2;
    bad.push(("version", v));
    let mut v = good.clone();
    v[8..16].copy_from_slice(&(good.len() as u64 + 10).to_le_bytes());
    bad.push(("toc_offset_past_end", v));
    bad.push(("toc_truncated", good[..good.len() - 3].to_vec()));
    bad.push(("toc_trailing_bytes", [good.as_slice(), &[0xc0]].concat()));
    bad.push((
        "unknown_scheme",
        with_toc(&good, |m| *field(m, "compression_scheme") = "lz4".into()),
    ));
    bad.push((
        "no_gfx_arches",
        with_toc(&good, |m| {
            m.retain(|(k, _)| k.as_str() != Some("gfx_arches"))
        }),
    ));
    bad.push((
        "ordinal_out_of_range",
        with_toc(&good, |m| {
            *field(entry(m, KEY, "gfx1100"), "ordinal") = 7.into();
        }),
    ));
    bad.push((
        "none_blob_past_end",
        with_toc(&none, |m| {
            let rmpv::Value::Array(b) = field(m, "blobs") else {
                panic!()
            };
            let rmpv::Value::Map(e) = &mut b[0] else {
                panic!()
            };
            *field(e, "size") = 1_000_000.into();
        }),
    ));
    bad.push(("empty", Vec::new()));
    let mut open = Case::new("damaged_tocs_open");
    let mut lookup = Case::new("damaged_tocs_lookup")
        .file("lib/libx.so", "host")
        .file("b.kpack", one(zstd(), 2));
    for (name, bytes) in bad {
        let p = format!("{name}.kpack");
        open = open.file(&p, bytes.clone()).op(&format!("open {p}"));
        let m = Marker::new([format!("../{p}"), "../b.kpack".into()], "lib/libx.so").encode();
        lookup = lookup
            .file(&p, bytes)
            .file(&format!("{name}.marker"), m)
            .op("cache")
            .op(&format!("load {name}.marker lib/libx.so 0 gfx1100"));
    }
    open = open
        .op("sh mkdir dir.kpack")
        .op("open dir.kpack")
        .op("open missing.kpack");
    vec![open, lookup]
}

/// zstd frames: count one more than present, damaged size prefixes,
/// contradicting `original_size` (with and without an address-space
/// limit), content checksums and flipped bytes.
fn frame_cases() -> Vec<Case> {
    let two = |checksum| {
        archive(
            zstd(),
            checksum,
            &["gfx1100"],
            &[
                (KEY, "gfx1100", &kernel(1, 5000)),
                ("lib/liby.so#0", "gfx1100", &kernel(2, 5000)),
            ],
        )
    };
    let plain = two(false);
    let summed = two(true);
    let mut files: Vec<(&str, Vec<u8>)> =
        vec![("plain", plain.clone()), ("checksum", summed.clone())];
    let mut v = plain.clone();
    let n = u32::from_le_bytes(v[64..68].try_into().unwrap());
    v[64..68].copy_from_slice(&(n + 1).to_le_bytes());
    files.push(("count_one_more", v));
    let mut v = plain.clone();
    v[68..72].copy_from_slice(&1_000_000u32.to_le_bytes());
    files.push(("size_prefix_past_blob", v));
    files.push((
        "original_size_one_less",
        with_toc(&plain, |m| {
            *field(entry(m, KEY, "gfx1100"), "original_size") = 4999.into();
        }),
    ));
    // Flipped bytes: in the content (a literal block byte near the end of
    // frame 0) and in the checksum (the frame's last 4 bytes).
    let frame0_len = u32::from_le_bytes(summed[68..72].try_into().unwrap()) as usize;
    let mut v = summed.clone();
    v[FRAME0 + frame0_len - 10] ^= 0x40;
    files.push(("checksum_content_flipped", v));
    let mut v = summed.clone();
    v[FRAME0 + frame0_len - 2] ^= 0x01;
    files.push(("checksum_flipped", v));
    let mut c = Case::new("zstd_frames");
    for (name, bytes) in files {
        let p = format!("{name}.kpack");
        c = c.file(&p, bytes).op(&format!("open {p}"));
    }
    // An original_size of 2^31 / 2^32 on a 5 KB frame, under a 1 GiB
    // address-space limit: nothing may be allocated for it.
    let mut out = vec![c];
    for (name, shift) in [
        ("zstd_original_size_2g_limited", 31),
        ("zstd_original_size_4g_limited", 32),
    ] {
        out.push(
            Case::new(name)
                .file(
                    "a.kpack",
                    with_toc(&plain, |m| {
                        *field(entry(m, KEY, "gfx1100"), "original_size") = (1u64 << shift).into();
                    }),
                )
                .op("rlimit_as 1024")
                .op("open a.kpack"),
        );
    }
    out
}

/// More than 64 archives on ROCM_KPACK_PATH; the kernel only in the last.
fn many_archives_case() -> Case {
    let mut c = Case::new("seventy_archives").split_layout();
    let mut list = Vec::new();
    for i in 0..70u64 {
        let p = format!("k/a{i}.kpack");
        let key = if i == 69 { KEY } else { "lib/other.so#0" };
        c = c.file(
            &p,
            archive(
                zstd(),
                false,
                &["gfx1100"],
                &[(key, "gfx1100", &kernel(i, 300))],
            ),
        );
        list.push(p);
    }
    c.op(&format!("setenv ROCM_KPACK_PATH {}", list.join(":")))
        .op("cache")
        .op(LOAD)
}

/// Marker headers claiming more bytes than are mapped (the marker ends
/// at an inaccessible page).
fn oversized_marker_cases() -> Vec<Case> {
    let good = Marker::new([".kpack/x_@GFXARCH@.kpack"], "lib/libx.so").encode();
    // fixmap(2) "kernel_name" str32 claiming 1 GiB.
    let mut str32 = vec![0x82, 0xab];
    str32.extend_from_slice(b"kernel_name");
    str32.extend_from_slice(&[0xdb, 0x40, 0, 0, 0, b'x']);
    let array32 = vec![0xdd, 0x7f, 0xff, 0xff, 0xff, 0xc0];
    let map32 = vec![0xdf, 0x7f, 0xff, 0xff, 0xff, 0xc0];
    vec![Case::new("oversized_marker_headers")
        .split_layout()
        .file("lib/.kpack/x_gfx1100.kpack", one(zstd(), 1))
        .file("good.bin", good)
        .file("array32.bin", array32)
        .file("map32.bin", map32)
        .file("str32.bin", str32)
        .op("cache")
        .op("loadedge good.bin lib/libx.so 0 gfx1100")
        .op("loadedge array32.bin lib/libx.so 0 gfx1100")
        .op("loadedge map32.bin lib/libx.so 0 gfx1100")
        .op("loadedge str32.bin lib/libx.so 0 gfx1100")]
}

/// An ISA with 6 features and 32 `@GFXARCH@` paths: 2,048 candidates, the
/// archive at the least specific target of the last path; then one at the
/// most specific target of the first path (the walk stops there).
fn many_features_cases() -> Vec<Case> {
    let isa = "gfx942:f0+:f1+:f2+:f3+:f4+:f5+";
    let paths: Vec<String> = (0..32)
        .map(|i| format!(".kpack/p{i}_@GFXARCH@.kpack"))
        .collect();
    let marker = Marker::new(paths, "lib/libx.so").encode();
    let k = |t: &str, seed| archive(zstd(), false, &[t], &[(KEY, t, &kernel(seed, 3000))]);
    let least = Case::new("six_features_least_specific")
        .file("lib/libx.so", "host")
        .file("m.bin", marker.clone())
        .file("lib/.kpack/p31_gfx942.kpack", k("gfx942", 1))
        .op("cache")
        .op(&format!("load m.bin lib/libx.so 0 {isa},gfx942"));
    let most = Case::new("six_features_most_specific")
        .file("lib/libx.so", "host")
        .file("m.bin", marker)
        .file("lib/.kpack/p31_gfx942.kpack", k("gfx942", 1))
        .file(&format!("lib/.kpack/p0_{isa}.kpack"), k(isa, 2))
        .file(&format!("lib/.kpack/p5_{isa}.kpack"), k(isa, 3))
        .op("cache")
        .op(&format!("load m.bin lib/libx.so 0 {isa}"))
        .op(&format!("sh rm lib/.kpack/p0_{isa}.kpack"))
        .op("cache")
        .op(&format!("load m.bin lib/libx.so 0 {isa}"));
    vec![least, most]
}

/// kpack_discover_binary_path on a shared object deleted after loading.
fn deleted_binary_case(tmp: &Path) -> Case {
    let src = tmp.join("probe.c");
    std::fs::write(&src, "int kpack_probe(void) { return 1; }\n").unwrap();
    let so = tmp.join("probe.so");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    Case::new("discover_deleted_binary")
        .file("probe.so", std::fs::read(&so).unwrap())
        .op("deleted ./probe.so kpack_probe")
}

// ------------------------------------------------------------- running

fn compile_harness(tmp: &Path) -> PathBuf {
    let exe = tmp.join("harness");
    let src = ts::repo_root().join("tests/runtime/harness.c");
    let st = Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .status()
        .expect("cc is needed for the side-by-side runtime tests");
    assert!(st.success(), "compiling {} failed", src.display());
    exe
}

/// The case's answers from the library `lib`: the harness's lines, and a
/// last line saying how it ended when that was not a clean exit.
fn run_case(harness: &Path, lib: &Path, case: &Case, dir: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    for (p, b) in &case.files {
        ts::write(&dir.join(p), b);
    }
    std::fs::write(dir.join("ops.txt"), case.ops.join("\n") + "\n").unwrap();
    let mut cmd = Command::new(harness);
    cmd.arg(lib).arg("ops.txt").current_dir(dir);
    for k in ENV_KEYS {
        cmd.env_remove(k);
    }
    let out = ts::output_within(cmd, Duration::from_secs(120), case.name);
    let mut lines: Vec<String> = ts::stdout(&out).lines().map(str::to_owned).collect();
    if !out.status.success() {
        use std::os::unix::process::ExitStatusExt;
        lines.push(match out.status.signal() {
            Some(s) => format!("killed by signal {s}"),
            None => format!("exit {:?}: {}", out.status.code(), ts::stderr(&out).trim()),
        });
    }
    lines
}

/// A difference docs/runtime.md lists: in `case`, against ROCm build
/// `build` (`ref`, `current` or `both`), an answer line that differs holds
/// `rocm` in ROCm's answer and `here` in this library's. Every differing
/// line must match a listed one and every listed one a differing line.
#[derive(Debug)]
struct Listed {
    build: String,
    rocm: String,
    here: String,
}

/// The table between the `side-by-side differences` markers of
/// docs/runtime.md: `| case | build | ROCm | here | why |`, cells in
/// backticks.
fn listed_differences() -> BTreeMap<String, Vec<Listed>> {
    let doc = std::fs::read_to_string(ts::repo_root().join("docs/runtime.md")).unwrap();
    let start = doc
        .find("<!-- side-by-side differences: begin -->")
        .expect("docs/runtime.md: side-by-side differences table");
    let end = doc.find("<!-- side-by-side differences: end -->").unwrap();
    let mut out: BTreeMap<String, Vec<Listed>> = BTreeMap::new();
    for line in doc[start..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line
            .split(" | ")
            .map(|c| c.trim_matches(['|', ' ']))
            .collect();
        let code = |i: usize| cells[i].trim_matches('`').to_owned();
        out.entry(code(0)).or_default().push(Listed {
            build: code(1),
            rocm: code(2),
            here: code(3),
        });
    }
    out
}

/// Every case, against ROCm as released (`ref`), ROCm's current search
/// loop and TOC parser (`current`) and this library.
#[test]
fn runtime_edge_cases_match_rocm() {
    let Some(o) = oracles("runtime_edge_cases_match_rocm") else {
        return;
    };
    let t0 = std::time::Instant::now();
    let tmp = ts::tempdir();
    let harness = compile_harness(tmp.path());
    let libs = [
        (
            "ref",
            rocm_lib_dir(&o, "ref", tmp.path()).join("librocm_kpack.so.0"),
        ),
        (
            "current",
            rocm_lib_dir(&o, "current", tmp.path()).join("librocm_kpack.so.0"),
        ),
        ("here", ts::test_exe_dir().join("librocm_kpack.so")),
    ];
    let mut cases = changed_file_cases();
    cases.extend(env_cases());
    cases.extend(null_arch_cases());
    cases.extend(damaged_toc_cases());
    cases.extend(frame_cases());
    cases.push(many_archives_case());
    cases.extend(oversized_marker_cases());
    cases.extend(many_features_cases());
    cases.push(deleted_binary_case(tmp.path()));
    let listed = listed_differences();
    let mut failures = Vec::new();
    let mut used = 0;
    for case in &cases {
        let mut got = BTreeMap::new();
        for (name, lib) in &libs {
            let dir = tmp.path().join(name).join(case.name);
            let t = std::time::Instant::now();
            got.insert(*name, run_case(&harness, lib, case, &dir));
            eprintln!("   ({name}: {:?})", t.elapsed());
        }
        let here = &got["here"];
        eprintln!("== {}", case.name);
        for l in here {
            eprintln!("   here:    {l}");
        }
        for build in ["ref", "current"] {
            let rocm = &got[build];
            let diffs: Vec<(&str, &str)> = (0..rocm.len().max(here.len()))
                .filter(|&i| rocm.get(i) != here.get(i))
                .map(|i| {
                    (
                        rocm.get(i).map_or("", String::as_str),
                        here.get(i).map_or("", String::as_str),
                    )
                })
                .collect();
            let rows: Vec<&Listed> = listed
                .get(case.name)
                .map(|v| {
                    v.iter()
                        .filter(|d| d.build == build || d.build == "both")
                        .collect()
                })
                .unwrap_or_default();
            let matches =
                |d: &Listed, (r, h): (&str, &str)| r.contains(&d.rocm) && h.contains(&d.here);
            for &(r, h) in &diffs {
                eprintln!("   {build}: {r}");
                if !rows.iter().any(|d| matches(d, (r, h))) {
                    failures.push(format!(
                        "{}: differs from ROCm {build}, and docs/runtime.md lists no such difference:\n   {build}: {r}\n   here: {h}",
                        case.name
                    ));
                }
            }
            for d in rows {
                used += 1;
                if !diffs.iter().any(|&x| matches(d, x)) {
                    failures.push(format!(
                        "{}: docs/runtime.md lists a difference from {build} (`{}` / `{}`) that is not one: the answers agree",
                        case.name, d.rocm, d.here
                    ));
                }
            }
        }
    }
    for name in listed.keys() {
        if !cases.iter().any(|c| c.name == name) {
            failures.push(format!(
                "docs/runtime.md lists {name}, which is no case here"
            ));
        }
    }
    eprintln!(
        "{} cases x 3 libraries, {used} listed differences, in {:?}",
        cases.len(),
        t0.elapsed()
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
