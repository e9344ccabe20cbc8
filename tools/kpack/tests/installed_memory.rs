//! Issue 22: `kpack verify --installed-tree`, `kpack verify
//! --artifacts-dir` and `kpack split-wheel --overlay-root` do not read a
//! host binary whole. A 1 GiB split host
//! library (`rocpack_testsupport::big_fat_library` with a 1 GiB `.rodata`,
//! split by `kpack split`) is installed with its `.kpack` archive and
//! verified, then put outside the overlay of a wheel that is split (every
//! ELF outside the overlay is checked for device code). The peak RSS of
//! each run (`wait4`) must stay within 256 MiB;
//! reading the file whole took about 1.05 GiB. Every run is also under an
//! address-space limit of 192 MiB (`ulimit -v`, less than a fifth of the
//! file): the analysis holds only the pieces it reads, never a buffer the
//! size of the file (before: a file-sized anonymous mapping, refused with
//! ENOMEM under the limit). Results: every lookup resolves, and the host
//! wheel carries the library byte for byte.
//!
//! `KPACK_UNDER_TEST=/path/to/kpack` runs another binary (to show the test
//! fails on an older build).

mod common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::*;
use sha2::{Digest, Sha256};

/// Host data of the library, MiB (the split host file is larger).
const HOST_MIB: u64 = 1024;
/// Peak RSS allowed (issue 22's bound).
const MAX_RSS_KIB: u64 = 256 * 1024;
/// Address space allowed (`ulimit -v`), far below the library's size.
const MAX_AS_KIB: u64 = 192 * 1024;

/// The kpack under test, under the address-space limit (one malloc arena:
/// each thread arena reserves 64 MiB of address space).
fn kpack_under_limit() -> Command {
    let bin = kpack_under_test();
    let mut c = under_vmem_limit(bin, MAX_AS_KIB);
    c.env("MALLOC_ARENA_MAX", "1");
    c
}

/// Moves every file of `from` to the same place below `to`.
fn merge(from: &Path, to: &Path) {
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            fs::create_dir_all(&dst).unwrap();
            merge(&e.path(), &dst);
        } else {
            fs::rename(e.path(), dst).unwrap();
        }
    }
}

/// SHA-256 of a file, streamed.
fn digest(p: &Path) -> Vec<u8> {
    let mut h = Sha256::new();
    std::io::copy(&mut fs::File::open(p).unwrap(), &mut h).unwrap();
    h.finalize().to_vec()
}

/// A wheel with a small fat binary below the overlay `fxpkg` and `big`
/// (stored, uncompressed) outside it as `other/libbig.so`.
fn make_wheel(path: &Path, big: &Path) {
    let fat = fs::read(fatbins().join("libfx_multi.so")).unwrap();
    let meta = b"Metadata-Version: 2.1\nName: fxpkg\nVersion: 1.0\n".to_vec();
    let wheel =
        b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n".to_vec();
    let b64 = |d: &[u8]| rocpack_wheel::meta::b64url(d);
    let mut record = String::new();
    for (name, b) in [
        ("fxpkg/lib/libfx_multi.so", &fat),
        ("fxpkg-1.0.dist-info/METADATA", &meta),
        ("fxpkg-1.0.dist-info/WHEEL", &wheel),
    ] {
        record.push_str(&format!(
            "{name},sha256={},{}\n",
            b64(&Sha256::digest(b)),
            b.len()
        ));
    }
    let big_len = fs::metadata(big).unwrap().len();
    record.push_str(&format!(
        "other/libbig.so,sha256={},{big_len}\nfxpkg-1.0.dist-info/RECORD,,\n",
        b64(&digest(big))
    ));
    let mut z = zip::ZipWriter::new(std::io::BufWriter::new(fs::File::create(path).unwrap()));
    let opts = zip::write::SimpleFileOptions::default();
    z.start_file("fxpkg/lib/libfx_multi.so", opts.unix_permissions(0o755))
        .unwrap();
    z.write_all(&fat).unwrap();
    z.start_file(
        "other/libbig.so",
        opts.unix_permissions(0o755)
            .compression_method(zip::CompressionMethod::Stored),
    )
    .unwrap();
    std::io::copy(&mut fs::File::open(big).unwrap(), &mut z).unwrap();
    for (name, b) in [
        ("fxpkg-1.0.dist-info/METADATA", meta),
        ("fxpkg-1.0.dist-info/WHEEL", wheel),
        ("fxpkg-1.0.dist-info/RECORD", record.into_bytes()),
    ] {
        z.start_file(name, opts.unix_permissions(0o644)).unwrap();
        z.write_all(&b).unwrap();
    }
    z.finish().unwrap();
}

#[test]
fn installed_tree_and_overlay_checks_do_not_read_a_1gib_library_whole() {
    if !have_tool("objcopy") || !have_tool("gcc") {
        return;
    }
    require_fixtures();
    let tmp = tempdir();
    let art = big_fat_library(tmp.path(), &["gfx1100"], 1 << 20, HOST_MIB);
    let out = tmp.path().join("split");
    kpack_ok(&[
        "split".as_ref(),
        "--artifact-dir".as_ref(),
        art.join("big").as_os_str(),
        "--artifact-prefix".as_ref(),
        "big".as_ref(),
        "--output-dir".as_ref(),
        out.as_os_str(),
        "--compression".as_ref(),
        "none".as_ref(),
    ]);
    fs::remove_dir_all(&art).unwrap();
    // verify --artifacts-dir of the split (the host file is judged by its
    // headers, tables, wrappers and marker).
    let mut cmd = kpack_under_limit();
    cmd.args(["verify", "--artifacts-dir"]).arg(&out);
    let t0 = Instant::now();
    let (o, rss) = run_peak(&cmd);
    eprintln!(
        "verify --artifacts-dir (1 GiB host file): peak RSS {rss} KiB, wall {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    // The split host is found and judged; its lookups fail only on the
    // synthetic code objects (random bytes, not AMDGPU ELF files).
    let text = stdout(&o);
    assert!(
        text.contains("2 packages, 2 files, 1 kpack archives, 1 split host binaries")
            && text
                .lines()
                .filter(|l| l.starts_with("FAIL ["))
                .all(|l| l.contains("is not an AMDGPU ELF code object")),
        "verify --artifacts-dir: {text}{}",
        stderr(&o)
    );
    assert!(
        rss <= MAX_RSS_KIB,
        "verify --artifacts-dir of a 1 GiB host file: peak RSS {rss} KiB"
    );
    let site = tmp.path().join("site");
    fs::create_dir_all(&site).unwrap();
    merge(&out.join("big_generic"), &site);
    merge(&out.join("big_gfx1100"), &site);
    let lib = site.join("lib/libbig.so");
    let size = fs::metadata(&lib).unwrap().len();
    assert!(size >= 1 << 30, "split host is only {size} bytes");

    // verify --installed-tree
    let mut cmd = kpack_under_limit();
    cmd.args(["verify", "--installed-tree"])
        .arg(&site)
        .args(["--gpu-target", "gfx1100", "--json"]);
    let t0 = Instant::now();
    let (o, rss) = run_peak(&cmd);
    eprintln!(
        "verify --installed-tree ({size}-byte library): peak RSS {rss} KiB, wall {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert_ok(&o);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&r["ok"], &r["host_binaries"], &r["lookups"], &r["resolved"]),
        (&true.into(), &1.into(), &1.into(), &1.into()),
        "{r}"
    );
    assert!(
        rss <= MAX_RSS_KIB,
        "verify --installed-tree of a {size}-byte library: peak RSS {rss} KiB"
    );

    // split-wheel --overlay-root with the library outside the overlay.
    fs::remove_dir_all(&out).unwrap();
    let whl = tmp.path().join("fxpkg-1.0-py3-none-linux_x86_64.whl");
    make_wheel(&whl, &lib);
    let want = digest(&lib);
    fs::remove_dir_all(&site).unwrap();
    let wout = tmp.path().join("wheels");
    let mut cmd = kpack_under_limit();
    cmd.arg("split-wheel").arg(&whl).arg("-o").arg(&wout).args([
        "--overlay-root",
        "fxpkg",
        "-j",
        "1",
        "--compression",
        "none",
    ]);
    let t0 = Instant::now();
    let (o, rss) = run_peak(&cmd);
    eprintln!(
        "split-wheel --overlay-root ({size}-byte library outside the overlay): peak RSS {rss} KiB, wall {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert_ok(&o);
    let mut host =
        zip::ZipArchive::new(fs::File::open(wout.join(whl.file_name().unwrap())).unwrap()).unwrap();
    let mut h = Sha256::new();
    std::io::copy(&mut host.by_name("other/libbig.so").unwrap(), &mut h).unwrap();
    assert_eq!(h.finalize().to_vec(), want, "the library in the host wheel");
    assert!(
        rss <= MAX_RSS_KIB,
        "split-wheel --overlay-root with a {size}-byte library outside the overlay: peak RSS {rss} KiB"
    );
}
