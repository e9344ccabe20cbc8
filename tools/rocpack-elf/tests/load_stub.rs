//! GPU-less load test: a stub `libamdhip64.so.5` (tests/elf/hip_stub.c,
//! symbol version hip_4.2) records every wrapper given to
//! `__hipRegisterFatBinary`; split libraries are dlopen()ed by a small C
//! loader and split executables are run, before and after GNU strip
//! (--strip-debug, --strip-unneeded) and llvm-strip-19.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use rocpack_elf::{analyze, split_host};
use rocpack_testsupport::assert_no_new_elflint_messages;

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/elf");

fn build_harness(dir: &Path) -> PathBuf {
    let stub = dir.join("libamdhip64.so.5");
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O1"])
        .arg(format!("-Wl,--version-script={SRC}/hip_stub.map"))
        .arg("-Wl,-soname,libamdhip64.so.5")
        .arg("-o")
        .arg(&stub)
        .arg(format!("{SRC}/hip_stub.c"))
        .status()
        .unwrap();
    assert!(st.success(), "building the stub failed");
    let loader = dir.join("loader");
    let st = Command::new("gcc")
        .arg("-o")
        .arg(&loader)
        .arg(format!("{SRC}/loader.c"))
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(st.success(), "building the loader failed");
    loader
}

/// Load or run `file` with the stub first in the library path; returns the
/// recorded wrapper lines.
fn load(loader: &Path, libdir: &Path, file: &Path, dump_len: usize) -> Vec<String> {
    let log = libdir.join("wrappers.log");
    let _ = std::fs::remove_file(&log);
    let is_lib = file.to_string_lossy().contains(".so");
    let mut cmd = if is_lib {
        let mut c = Command::new(loader);
        c.arg(file);
        c
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o755)).unwrap();
        Command::new(file)
    };
    cmd.env("LD_LIBRARY_PATH", libdir)
        .env("ROCPACK_STUB_LOG", &log)
        .env("ROCPACK_STUB_LEN", dump_len.to_string());
    // A file just written can be "busy" for a moment: a child another test
    // thread forks in between holds the write descriptor until its exec.
    let mut tries = 0;
    let o = loop {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(26) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.unwrap(),
        }
    };
    assert!(
        o.status.success(),
        "{}: exit {:?}: {}",
        file.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Distribution tools a split binary must survive, in the order tested.
const TOOLS: [&str; 8] = [
    "none",
    "strip-debug",
    "strip-unneeded",
    "llvm-strip-19",
    "eu-strip",
    "objcopy-debuglink",
    "dh_strip",
    "debugedit",
];

fn run_tool(mut c: Command, what: &str) {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{what}: {c:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Apply distribution tool `variant` to `input`, writing `output`.
fn strip(variant: &str, input: &Path, output: &Path) {
    let cmd = |prog: &str, args: &[&str]| {
        let mut c = Command::new(prog);
        c.args(args);
        c
    };
    match variant {
        "strip-debug" | "strip-unneeded" => {
            let mut c = cmd("strip", &[&format!("--{variant}")]);
            c.arg("-o").arg(output).arg(input);
            run_tool(c, variant);
        }
        "llvm-strip-19" | "eu-strip" => {
            let mut c = cmd(variant, &[]);
            c.arg("-o").arg(output).arg(input);
            run_tool(c, variant);
        }
        "objcopy-debuglink" => {
            // Separate debug info, strip, link the two (what rpm and many
            // packagers do by hand).
            let dbg = output.with_extension("debug");
            let mut c = cmd("objcopy", &["--only-keep-debug"]);
            c.arg(input).arg(&dbg);
            run_tool(c, variant);
            let mut c = cmd("objcopy", &["--strip-debug"]);
            c.arg(format!("--add-gnu-debuglink={}", dbg.display()))
                .arg(input)
                .arg(output);
            run_tool(c, variant);
            // The separated debug file keeps `.hip_fatbin` only as NOBITS.
            let d = std::fs::read(&dbg).unwrap();
            if let Ok(info) = analyze(&d) {
                assert!(
                    !info.has_device_code(),
                    "{}: debug file has device code",
                    dbg.display()
                );
            }
        }
        "dh_strip" => {
            // Debian's packaging path, run for real in a minimal source tree.
            let tree = output.with_extension("deb-tree");
            let inst = tree.join("debian/fxpkg/usr/lib/x86_64-linux-gnu");
            std::fs::create_dir_all(&inst).unwrap();
            std::fs::write(tree.join("debian/control"), DEB_CONTROL).unwrap();
            std::fs::write(tree.join("debian/changelog"), DEB_CHANGELOG).unwrap();
            let name = input.file_name().unwrap();
            std::fs::copy(input, inst.join(name)).unwrap();
            let mut c = cmd("dh_strip", &[]);
            c.current_dir(&tree);
            run_tool(c, variant);
            std::fs::copy(inst.join(name), output).unwrap();
            std::fs::remove_dir_all(&tree).unwrap();
        }
        "debugedit" => {
            // Rewrites DWARF paths and recomputes the build ID in place,
            // through libelf.
            std::fs::copy(input, output).unwrap();
            let mut c = cmd("debugedit", &["-b", "/", "-d", "/usr/src/debug", "-i"]);
            c.arg(output);
            run_tool(c, variant);
        }
        _ => unreachable!("{variant}"),
    }
}

const DEB_CONTROL: &str = "Source: fxpkg\nSection: libs\nPriority: optional\n\
Maintainer: rocpack tests <tests@example.invalid>\nBuild-Depends: debhelper-compat (= 13)\n\
Standards-Version: 4.6.2\n\nPackage: fxpkg\nArchitecture: any\nDescription: split fixture\n test\n";
const DEB_CHANGELOG: &str = "fxpkg (1.0-1) unstable; urgency=medium\n\n  * test\n\n \
-- rocpack tests <tests@example.invalid>  Thu, 01 Jan 2026 00:00:00 +0000\n";

/// Program headers as `readelf -lW` (binutils, not our reader) prints them:
/// (type, offset, vaddr, filesz).
/// [`readelf_phdrs`] of bytes (written to a scratch file in `dir`).
fn readelf_phdrs_bytes(data: &[u8], dir: &Path) -> Vec<(String, u64, u64, u64)> {
    let f = dir.join("phdrs.scratch");
    std::fs::write(&f, data).unwrap();
    readelf_phdrs(&f)
}

fn readelf_phdrs(file: &Path) -> Vec<(String, u64, u64, u64)> {
    let o = Command::new("readelf")
        .arg("-lW")
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "readelf -lW {}", file.display());
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[1].starts_with("0x") && f[2].starts_with("0x"))
                .then(|| (f[0].to_owned(), hex(f[1]), hex(f[2]), hex(f[4])))
        })
        .collect()
}

/// The program-header table sits inside the first PT_LOAD at the congruent
/// place: EL8's kernel computes AT_PHDR = load address + e_phoff.
fn assert_phdr_invariant(file: &Path, what: &str) {
    let ph = readelf_phdrs(file);
    let Some(phdr) = ph.iter().find(|p| p.0 == "PHDR") else {
        return; // shared libraries usually have none
    };
    let load = ph.iter().find(|p| p.0 == "LOAD").expect("a PT_LOAD");
    assert_eq!(
        phdr.2.wrapping_sub(phdr.1),
        load.2.wrapping_sub(load.1),
        "{what}: PT_PHDR vaddr-offset differs from the first PT_LOAD's"
    );
    assert!(
        phdr.1 >= load.1 && phdr.1 + phdr.3 <= load.1 + load.3,
        "{what}: program headers outside the first PT_LOAD"
    );
}

/// Copies of the lld-linked fixtures whose first PT_LOAD says p_align
/// 0x8000 while the others keep 0x1000 (as lld-linked ROCm plugins on PyPI
/// do): valid ELF that a rewrite must accept.
fn mixed_align_copies(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for name in ["libfx_multi_lld.so", "libfx_relr.so", "fx_app_relr"] {
        let src = fixtures().join("fatbins").join(name);
        let Ok(mut d) = std::fs::read(&src) else {
            continue;
        };
        let phoff = u64::from_le_bytes(d[32..40].try_into().unwrap()) as usize;
        let phnum = u16::from_le_bytes(d[56..58].try_into().unwrap()) as usize;
        for i in 0..phnum {
            let at = phoff + i * 56;
            if u32::from_le_bytes(d[at..at + 4].try_into().unwrap()) == 1 {
                let off = u64::from_le_bytes(d[at + 8..at + 16].try_into().unwrap());
                let va = u64::from_le_bytes(d[at + 16..at + 24].try_into().unwrap());
                assert_eq!(off % 0x8000, va % 0x8000, "{name}: first PT_LOAD");
                d[at + 48..at + 56].copy_from_slice(&0x8000u64.to_le_bytes());
                break;
            }
        }
        let dst = dir.join(format!("{name}.align8000"));
        std::fs::write(&dst, d).unwrap();
        std::fs::set_permissions(&dst, std::fs::metadata(&src).unwrap().permissions()).unwrap();
        out.push(dst);
    }
    out
}

/// Copies of shared-library fixtures run through `patchelf --set-rpath`
/// with a long rpath, as auditwheel does to manylinux wheels: `.dynstr`
/// moves into a new PT_LOAD behind `.symtab`/`.shstrtab`, so non-allocated
/// sections sit between loaded segments.
fn patchelf_copies(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for name in ["libfx_multi.so", "libfx_relr.so", "libfx_two_tu.so"] {
        let src = fixtures().join("fatbins").join(name);
        if !src.is_file() {
            continue;
        }
        let dst = dir.join(format!("{name}.patchelf"));
        std::fs::copy(&src, &dst).unwrap();
        let mut c = Command::new("patchelf");
        c.arg("--set-rpath")
            .arg(format!("$ORIGIN/{}", "r".repeat(200)))
            .arg(&dst);
        run_tool(c, "patchelf --set-rpath");
        out.push(dst);
    }
    out
}

/// A library whose compressed `.hip_fatbin` (~2 KB, one target) is smaller
/// than the `.dynsym` lld puts right behind the program headers (no
/// build-id, 400 exported functions): the rewrite cannot make room for a
/// program header and must split in place, as for small PyPI plugins.
fn in_place_copy(dir: &Path) -> PathBuf {
    let src = fixtures().join("src");
    let mut hip = std::fs::read_to_string(src.join("kern_a.hip")).unwrap();
    for i in 0..400 {
        hip.push_str(&format!(
            "extern \"C\" int rocpack_exported_{i}() {{ return {i}; }}\n"
        ));
    }
    let file = dir.join("tiny_inplace.hip");
    std::fs::write(&file, hip).unwrap();
    let out = dir.join("libfx_tiny_inplace.so");
    let mut c = Command::new("/usr/lib/llvm-19/bin/clang++");
    c.args([
        "-x",
        "hip",
        "-nogpulib",
        "-nogpuinc",
        "-O2",
        "-fPIC",
        "-std=c++17",
    ])
    .arg(format!("-I{}", src.display()))
    .args([
        "--offload-arch=gfx1100",
        "--offload-compress",
        "-fuse-ld=lld",
        "-Wl,--build-id=none",
        "-shared",
    ])
    .arg(&file)
    .arg("-o")
    .arg(&out);
    run_tool(c, "clang++ (in-place fixture)");
    out
}

#[test]
fn split_binaries_load_and_register_hipk_after_every_strip() {
    assert!(have_fixtures(), "fixtures missing (set ROCPACK_SHARED)");
    for t in [
        "gcc",
        "strip",
        "llvm-strip-19",
        "eu-strip",
        "objcopy",
        "dh_strip",
        "debugedit",
        "patchelf",
        "eu-elflint",
    ] {
        assert!(
            have_tool(t),
            "{t} is needed (tests/ci/10-rust.sh installs it)"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let loader = build_harness(tmp.path());
    let mut checked = 0;
    let mixed = tmp.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    let mut inputs = fat_elfs();
    inputs.extend(mixed_align_copies(&mixed));
    inputs.extend(patchelf_copies(&mixed));
    let in_place = in_place_copy(&mixed);
    inputs.push(in_place.clone());
    for p in inputs {
        let data = std::fs::read(&p).unwrap();
        let orig = analyze(&data).unwrap();
        let name = p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".align8000")
            .trim_end_matches(".patchelf")
            .to_owned();
        let marker = if p.starts_with(fixtures()) {
            marker_for(&p)
        } else {
            marker_for(&fixtures().join("fatbins").join(&name))
        };
        let split = split_host(&data, &marker).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let split_copy = mixed.join(format!("{name}.split-{checked}"));
        std::fs::write(&split_copy, &split).unwrap();
        assert_no_new_elflint_messages(&p, &split_copy);
        if p == in_place {
            // In place: the marker sits where the bundles were, nothing moved.
            let s = analyze(&split).unwrap();
            let fb = orig.fatbin.unwrap();
            assert_eq!(s.marker.as_ref().unwrap().section.addr, fb.addr, "{name}");
            // Only a section header and its name are added.
            assert!(
                split.len() <= data.len() + 128,
                "{name}: file grew by {}",
                split.len() - data.len()
            );
            assert_eq!(
                readelf_phdrs(&p),
                readelf_phdrs_bytes(&split, tmp.path()),
                "{name}: segments changed"
            );
            // Reassembled with its original bundle, the file is the input again.
            let bundle = rocpack_elf::bundle_bytes(&data, &orig, 0).unwrap().to_vec();
            let back = rocpack_elf::reassemble(&split, &[bundle]).unwrap();
            assert!(back == data, "{name}: reassembly is not the original file");
        }
        // rocblas-test needs librocblas.so.5: give it the (split or fat) library.
        let libdir = tmp.path().join(format!("lib-{checked}"));
        std::fs::create_dir_all(&libdir).unwrap();
        std::fs::copy(
            tmp.path().join("libamdhip64.so.5"),
            libdir.join("libamdhip64.so.5"),
        )
        .unwrap();
        let rocblas = PathBuf::from(
            p.to_string_lossy()
                .replace("blas_test_", "blas_lib_")
                .replace("/bin/rocblas-test", "/lib/librocblas.so.5.2"),
        );
        let has_rocblas = name == "rocblas-test";

        // Unsplit: HIPF and the bundle's first bytes.
        if has_rocblas {
            std::fs::copy(&rocblas, libdir.join("librocblas.so.5")).unwrap();
        }
        let fat = libdir.join(&name);
        std::fs::write(&fat, &data).unwrap();
        let lines = load(&loader, &libdir, &fat, 24);
        assert!(!lines.is_empty(), "{name}: nothing registered");
        let mut bundle_hex: Vec<String> = Vec::new();
        for l in &lines {
            // "FPIH" is how HIPF's little-endian bytes print.
            assert!(l.starts_with("magic=FPIH version=1"), "{name}: {l}");
            let idx: usize = l
                .split("index=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(idx, 0, "{name}: {l}");
            let hexdata = l.split("data=").nth(1).unwrap();
            bundle_hex = orig
                .bundles
                .iter()
                .map(|b| hex::encode(&data[b.file_offset as usize..b.file_offset as usize + 24]))
                .collect();
            if has_rocblas {
                // librocblas.so.5 registers its own bundles too.
                let lib = std::fs::read(&rocblas).unwrap();
                let li = analyze(&lib).unwrap();
                bundle_hex.extend(li.bundles.iter().map(|b| {
                    hex::encode(&lib[b.file_offset as usize..b.file_offset as usize + 24])
                }));
            }
            assert!(bundle_hex.iter().any(|h| h == hexdata), "{name}: {l}");
        }

        if has_rocblas {
            let lib = std::fs::read(&rocblas).unwrap();
            std::fs::write(
                libdir.join("librocblas.so.5"),
                split_host(&lib, b"rocblas-marker").unwrap(),
            )
            .unwrap();
        }
        let split_path = libdir.join(&name);
        for variant in TOOLS {
            std::fs::write(&split_path, &split).unwrap();
            assert_phdr_invariant(&split_path, &format!("{name} split"));
            if variant != "none" {
                let stripped = libdir.join(format!("{name}.stripped"));
                strip(variant, &split_path, &stripped);
                std::fs::rename(&stripped, &split_path).unwrap();
                assert_phdr_invariant(&split_path, &format!("{name} split, {variant}"));
                // Still a split binary whose wrappers point at the marker.
                let again = analyze(&std::fs::read(&split_path).unwrap()).unwrap();
                assert!(
                    again.wrappers.iter().all(|w| w.points_to_marker),
                    "{name} {variant}"
                );
            }
            let lines = load(&loader, &libdir, &split_path, marker.len());
            assert!(!lines.is_empty(), "{name} {variant}: nothing registered");
            for l in &lines {
                assert!(
                    l.starts_with("magic=HIPK version=1"),
                    "{name} {variant}: {l}"
                );
                let ours = l.ends_with(&format!("data={}", hex::encode(&marker)));
                let rocblas_lib =
                    has_rocblas && l.contains(&format!("data={}", hex::encode(b"rocblas-marker")));
                assert!(ours || rocblas_lib, "{name} {variant}: {l}");
            }
            // Reassembling the (stripped) split binary gives a loadable fat
            // binary registering HIPF and the original bundles again.
            let stripped = std::fs::read(&split_path).unwrap();
            let back = rocpack_elf::reassemble(&stripped, &bundles_of(&data)).unwrap();
            assert_eq!(code_objects(&back), code_objects(&data), "{name} {variant}");
            std::fs::write(&split_path, &back).unwrap();
            let lines = load(&loader, &libdir, &split_path, 24);
            for l in &lines {
                if has_rocblas && l.starts_with("magic=HIPK") {
                    continue; // the split librocblas beside it
                }
                assert!(
                    l.starts_with("magic=FPIH version=1"),
                    "{name} {variant} reassembled: {l}"
                );
                let hexdata = l.split("data=").nth(1).unwrap();
                assert!(
                    bundle_hex.iter().any(|h| h == hexdata),
                    "{name} {variant} reassembled: {l}"
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 23, "{checked} binaries checked");
}

/// `p_align` of every PT_LOAD (read from the program headers directly).
fn load_aligns(d: &[u8]) -> Vec<u64> {
    let le64 = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
    let phoff = le64(32) as usize;
    let phnum = u16::from_le_bytes(d[56..58].try_into().unwrap()) as usize;
    (0..phnum)
        .map(|i| phoff + i * 56)
        .filter(|&at| u32::from_le_bytes(d[at..at + 4].try_into().unwrap()) == 1)
        .map(|at| le64(at + 48))
        .collect()
}

/// Whether `clang++ -fuse-ld=<ld>` can find the linker.
fn have_linker(ld: &str) -> bool {
    Command::new(format!("ld.{ld}"))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Linkers × page sizes: GNU ld (bfd), gold, lld and mold (when installed),
/// each with 4 KiB and 64 KiB maximum page sizes. Every output also holds
/// a 32 KiB-aligned data section, so with 4 KiB pages its PT_LOADs have
/// different `p_align` (the layout of lld-linked ROCm plugins on PyPI).
/// Each shared library and executable (uncompressed and CCOB bundles)
/// splits, keeps the PT_PHDR invariant, loads under the stub runtime and
/// registers only the marker, then reassembles to its original bundles and
/// registers them again.
#[test]
fn every_linker_and_page_size_splits_loads_and_reassembles() {
    assert!(have_fixtures(), "fixtures missing (set ROCPACK_SHARED)");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let loader = build_harness(dir);
    let src = fixtures().join("src");
    let clang = "/usr/lib/llvm-19/bin/clang++";
    let hip = |file: &str, out: &Path, extra: &[&str]| {
        let mut c = Command::new(clang);
        c.args(["-x", "hip", "-nogpulib", "-nogpuinc", "-O2", "-fPIC"])
            .args(["-std=c++17", "--offload-arch=gfx1100"])
            .args(["--offload-arch=gfx90a:xnack-"])
            .arg(format!("-I{}", src.display()))
            .args(extra)
            .arg("-c")
            .arg(src.join(file))
            .arg("-o")
            .arg(out);
        run_tool(c, file);
    };
    let kern = dir.join("kern.o");
    hip("kern_a.hip", &kern, &[]);
    let app = dir.join("app.o");
    hip("app.hip", &app, &["--offload-compress"]);
    let align_src = dir.join("align.cpp");
    std::fs::write(
        &align_src,
        "alignas(32768) unsigned char rocpack_aligned[64] = {1, 2, 3};\n\
         extern \"C\" int rocpack_aligned_byte(int i) { return rocpack_aligned[i]; }\n",
    )
    .unwrap();
    let align = dir.join("align.o");
    let mut c = Command::new(clang);
    c.args(["-O2", "-fPIC", "-c"])
        .arg(&align_src)
        .arg("-o")
        .arg(&align);
    run_tool(c, "align.cpp");

    let mut linkers = vec!["bfd", "gold", "lld"];
    if have_linker("mold") {
        linkers.push("mold");
    } else {
        eprintln!("note: mold not installed (apt-get install mold), its layouts are not checked");
    }
    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    std::fs::copy(
        dir.join("libamdhip64.so.5"),
        libdir.join("libamdhip64.so.5"),
    )
    .unwrap();
    let mut mixed = Vec::new();
    let mut checked = 0;
    for ld in &linkers {
        for (page, size) in [("4k", "0x1000"), ("64k", "0x10000")] {
            let flags = [
                format!("-fuse-ld={ld}"),
                format!("-Wl,-z,max-page-size={size}"),
            ];
            let lib = dir.join(format!("libfx_{ld}_{page}.so"));
            let mut c = Command::new(clang);
            c.args(&flags)
                .args(["-shared", "-Wl,-soname,libfx.so"])
                .arg(&kern)
                .arg(&align)
                .arg("-o")
                .arg(&lib);
            run_tool(c, &format!("link {}", lib.display()));
            let exe = dir.join(format!("fx_app_{ld}_{page}"));
            let mut c = Command::new(clang);
            c.args(&flags)
                .arg(&app)
                .arg(&align)
                .arg(format!("-L{}", libdir.display()))
                .arg("-l:libamdhip64.so.5")
                .arg("-o")
                .arg(&exe);
            run_tool(c, &format!("link {}", exe.display()));

            for input in [lib, exe] {
                let name = input.file_name().unwrap().to_string_lossy().into_owned();
                let data = std::fs::read(&input).unwrap();
                let aligns = load_aligns(&data);
                if aligns.iter().any(|&a| a != aligns[0]) {
                    mixed.push(format!("{name} {aligns:x?}"));
                }
                let info = analyze(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(info.has_device_code(), "{name}: no device code");
                let marker = format!("rocpack-test-marker:{name}").into_bytes();
                let split = split_host(&data, &marker).unwrap_or_else(|e| panic!("{name}: {e}"));
                let path = libdir.join(&name);
                std::fs::write(&path, &split).unwrap();
                assert_no_new_elflint_messages(&input, &path);
                assert_phdr_invariant(&path, &format!("{name} split"));
                let lines = load(&loader, &libdir, &path, marker.len());
                assert!(!lines.is_empty(), "{name}: nothing registered");
                for l in &lines {
                    assert!(
                        l.starts_with("magic=HIPK version=1")
                            && l.ends_with(&format!("data={}", hex::encode(&marker))),
                        "{name}: {l}"
                    );
                }
                let back = rocpack_elf::reassemble(&split, &bundles_of(&data))
                    .unwrap_or_else(|e| panic!("{name} reassemble: {e}"));
                assert_eq!(bundles_of(&back), bundles_of(&data), "{name}");
                std::fs::write(&path, &back).unwrap();
                let lines = load(&loader, &libdir, &path, 24);
                assert!(!lines.is_empty(), "{name} reassembled: nothing registered");
                for l in &lines {
                    assert!(l.starts_with("magic=FPIH version=1"), "{name}: {l}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, linkers.len() * 4);
    // With 4 KiB pages, the 32 KiB-aligned section gets a PT_LOAD of its
    // own alignment from every linker.
    assert_eq!(
        mixed.len(),
        linkers.len() * 2,
        "4 KiB outputs without mixed PT_LOAD p_align: {mixed:?}"
    );
    eprintln!("mixed p_align layouts: {mixed:?}");
}

/// (p_type, p_flags, p_vaddr, p_memsz) of every program header.
fn phdr_flags(d: &[u8]) -> Vec<(u32, u32, u64, u64)> {
    let le64 = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
    let le32 = |at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
    let phoff = le64(32) as usize;
    let phnum = u16::from_le_bytes(d[56..58].try_into().unwrap()) as usize;
    (0..phnum)
        .map(|i| phoff + i * 56)
        .map(|at| (le32(at), le32(at + 4), le64(at + 16), le64(at + 40)))
        .collect()
}

/// Issue 25 item 2: `.hip_fatbin` in the RW PT_LOAD after `.bss` (linked by
/// ld.lld with tests/elf/rw_fatbin.ld). The new PT_LOAD holding the moved
/// read-only metadata and the marker gets the least permission its
/// sections need (R), eu-elflint --gnu-ld finds nothing new, the split
/// library loads and registers the marker, and reassembly is the original.
#[test]
fn readonly_data_split_from_writable_load_is_not_writable() {
    assert!(have_fixtures(), "fixtures missing (set ROCPACK_SHARED)");
    assert!(have_tool("eu-elflint"), "eu-elflint (elfutils) is needed");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let loader = build_harness(dir);
    let src = fixtures().join("src");
    let clang = "/usr/lib/llvm-19/bin/clang++";
    let obj = dir.join("kern.o");
    let mut c = Command::new(clang);
    c.args([
        "-x",
        "hip",
        "-nogpulib",
        "-nogpuinc",
        "-O2",
        "-fPIC",
        "-std=c++17",
    ])
    .args(["--offload-arch=gfx1100", "--offload-arch=gfx90a:xnack-"])
    .arg(format!("-I{}", src.display()))
    .arg("-c")
    .arg(src.join("kern_a.hip"))
    .arg("-o")
    .arg(&obj);
    run_tool(c, "kern_a.hip");
    let lib = dir.join("libfx_rw_fatbin.so");
    let mut c = Command::new(clang);
    c.args(["-fuse-ld=lld", "-shared"])
        .arg(format!("-Wl,-T,{SRC}/rw_fatbin.ld"))
        .arg(&obj)
        .arg("-o")
        .arg(&lib);
    run_tool(c, "link with rw_fatbin.ld");
    let data = std::fs::read(&lib).unwrap();
    let info = analyze(&data).unwrap();
    let fb = info.fatbin.unwrap();
    // The layout under test: .hip_fatbin inside a writable PT_LOAD.
    let load_of = |phdrs: &[(u32, u32, u64, u64)], a: u64| {
        phdrs
            .iter()
            .find(|p| p.0 == 1 && a >= p.2 && a < p.2 + p.3)
            .copied()
            .unwrap()
    };
    let orig = phdr_flags(&data);
    assert_eq!(
        load_of(&orig, fb.addr).1,
        6,
        "fixture: .hip_fatbin not in an RW load"
    );

    let marker = b"rocpack-test-marker:rw_fatbin".to_vec();
    let split = split_host(&data, &marker).unwrap();
    let s = analyze(&split).unwrap();
    let m = s.marker.as_ref().unwrap().section.addr;
    let phdrs = phdr_flags(&split);
    let l2 = load_of(&phdrs, m);
    assert_eq!(
        l2.1, 4,
        "new PT_LOAD with the marker has flags {:#x}, want R",
        l2.1
    );
    // The data the original segment held before .hip_fatbin stays writable.
    let data_sec = load_of(&phdrs, fb.addr);
    assert_eq!(data_sec.1, 6, "L1 lost its write permission");

    let libdir = dir.join("lib");
    std::fs::create_dir_all(&libdir).unwrap();
    std::fs::copy(
        dir.join("libamdhip64.so.5"),
        libdir.join("libamdhip64.so.5"),
    )
    .unwrap();
    let path = libdir.join("libfx_rw_fatbin.so");
    std::fs::write(&path, &split).unwrap();
    assert_no_new_elflint_messages(&lib, &path);
    assert_phdr_invariant(&path, "rw_fatbin split");
    let lines = load(&loader, &libdir, &path, marker.len());
    assert!(!lines.is_empty(), "nothing registered");
    for l in &lines {
        assert!(
            l.starts_with("magic=HIPK version=1")
                && l.ends_with(&format!("data={}", hex::encode(&marker))),
            "{l}"
        );
    }
    let back = rocpack_elf::reassemble(&split, &bundles_of(&data)).unwrap();
    assert!(back == data, "reassembly is not the original file");
}

/// Issue 25 item 3: libraries run through `patchelf --set-rpath` (what
/// auditwheel does) have `.shstrtab` and the section header table among the
/// loaded segments. Split records where they were; reassembly puts them
/// back, byte-identical, and every split passes eu-elflint --gnu-ld with
/// nothing new.
#[test]
fn patchelf_libraries_reassemble_byte_identical() {
    assert!(have_fixtures(), "fixtures missing (set ROCPACK_SHARED)");
    assert!(have_tool("patchelf"), "patchelf is needed");
    let tmp = tempfile::tempdir().unwrap();
    let copies = patchelf_copies(tmp.path());
    assert_eq!(copies.len(), 3);
    for p in copies {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let data = std::fs::read(&p).unwrap();
        let shoff = u64::from_le_bytes(data[40..48].try_into().unwrap());
        assert!(
            shoff + 64 < data.len() as u64,
            "{name}: patchelf left the section headers at the end: not the layout under test"
        );
        let split = split_host(&data, format!("marker:{name}").as_bytes()).unwrap();
        let f = tmp.path().join(format!("{name}.split"));
        std::fs::write(&f, &split).unwrap();
        assert_no_new_elflint_messages(&p, &f);
        let back = rocpack_elf::reassemble(&split, &bundles_of(&data)).unwrap();
        assert_eq!(back.len(), data.len(), "{name}: reassembled size");
        let diff: Vec<usize> = (0..data.len()).filter(|&i| back[i] != data[i]).collect();
        assert!(
            diff.is_empty(),
            "{name}: reassembly is not byte-identical: {} bytes differ, first at {:#x?}",
            diff.len(),
            &diff[..diff.len().min(8)]
        );
    }
}

/// Bytes after everything the headers describe (the last segment, section
/// and the section header table) are not device code and come back after
/// reassembly: patchelf'd libraries as auditwheel repairs them (a `0x00`
/// behind the last PT_LOAD, as in torch-scatter-rocm), a library with
/// appended bytes behind its section header table, and a split in place.
/// A split file something appended to afterwards still reassembles (then
/// without the trailing bytes: they can no longer be told apart).
#[test]
fn trailing_bytes_reassemble_byte_identical() {
    assert!(have_fixtures(), "fixtures missing (set ROCPACK_SHARED)");
    assert!(have_tool("patchelf"), "patchelf is needed");
    assert!(have_tool("eu-elflint"), "eu-elflint is needed");
    let tmp = tempfile::tempdir().unwrap();
    let mut inputs: Vec<(PathBuf, &[u8])> = Vec::new();
    for p in patchelf_copies(tmp.path()) {
        inputs.push((p, b"\0"));
    }
    let plain = tmp.path().join("libfx_multi.so.signed");
    std::fs::copy(fixtures().join("fatbins/libfx_multi.so"), &plain).unwrap();
    inputs.push((plain, b"\0\0\0appended signature block\n"));
    inputs.push((in_place_copy(tmp.path()), b"\x01"));
    for (p, trail) in inputs {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let mut data = std::fs::read(&p).unwrap();
        data.extend_from_slice(trail);
        let p = tmp.path().join(format!("{name}.trail"));
        std::fs::write(&p, &data).unwrap();
        let split = split_host(&data, format!("marker:{name}").as_bytes()).unwrap();
        assert!(
            split.ends_with(trail),
            "{name}: the split dropped the trailing bytes"
        );
        let f = tmp.path().join(format!("{name}.split"));
        std::fs::write(&f, &split).unwrap();
        assert_no_new_elflint_messages(&p, &f);
        let back = rocpack_elf::reassemble(&split, &bundles_of(&data)).unwrap();
        assert_eq!(back.len(), data.len(), "{name}: reassembled size");
        assert!(back == data, "{name}: reassembly is not byte-identical");
        // Bytes appended to the split file: the record no longer matches
        // its end; reassembly neither fails nor takes the wrong bytes.
        let mut more = split.clone();
        more.extend_from_slice(b"xyz");
        let back = rocpack_elf::reassemble(&more, &bundles_of(&data)).unwrap();
        assert_eq!(
            back.len(),
            data.len() - trail.len(),
            "{name}: appended split"
        );
        assert!(data.starts_with(&back), "{name}: appended split");
    }
}
