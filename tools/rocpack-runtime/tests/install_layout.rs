//! Installable: the build leaves a runnable layout (README's gcc recipe
//! links with `-L <target dir> -lrocm_kpack` and the program starts), and
//! `install.sh` lays out ROCm's install tree (versioned shared library and
//! its symlinks, static library, headers, pkg-config file, CMake package
//! with imported targets) that a pkg-config and a CMake consumer build
//! against and run.

use std::path::{Path, PathBuf};
use std::process::Command;

use rocpack_testsupport::{assert_ok, run, s, stdout, tempdir, test_exe_dir};

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn consumer_src() -> PathBuf {
    manifest_dir().join("tests/c/consumer.c")
}

fn archive() -> PathBuf {
    rocpack_testsupport::repo_root().join("tests/fixtures/kpack-golden/test_zstd.kpack")
}

/// Where `cargo build` put the library (`target/<profile>`), or, under a
/// plain `cargo test`, the deps directory beside the test executable.
fn build_dir() -> PathBuf {
    let deps = test_exe_dir();
    let profile = deps.parent().unwrap().to_path_buf();
    if profile.join("librocm_kpack.so").is_file() {
        profile
    } else {
        deps
    }
}

fn run_consumer(exe: &Path, ld_path: Option<&Path>) {
    let mut cmd = Command::new(exe);
    cmd.arg(archive()).env_remove("LD_LIBRARY_PATH");
    if let Some(p) = ld_path {
        cmd.env("LD_LIBRARY_PATH", p);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success() && stdout(&out).ends_with("ok\n"),
        "{} did not run: {}{}",
        exe.display(),
        stdout(&out),
        rocpack_testsupport::stderr(&out)
    );
}

/// README: `cc -I tools/rocpack-runtime/include -L target/release
/// -lrocm_kpack`, run with the library directory on LD_LIBRARY_PATH. The
/// SONAME is librocm_kpack.so.0, so that file must be there.
#[test]
fn readme_recipe_builds_and_runs_from_the_build_directory() {
    let dir = build_dir();
    let soname = dir.join("librocm_kpack.so.0");
    assert!(
        soname.exists(),
        "{} is missing: a program linked with -lrocm_kpack cannot start",
        soname.display()
    );
    let tmp = tempdir();
    let exe = tmp.path().join("consumer");
    let o = run(
        "cc",
        &[
            "-I",
            s(&manifest_dir().join("include")),
            s(&consumer_src()),
            "-o",
            s(&exe),
            "-L",
            s(&dir),
            "-lrocm_kpack",
        ],
    );
    assert_ok(&o);
    run_consumer(&exe, Some(&dir));
}

/// `ldd EXE` as a user would run it (cargo test sets LD_LIBRARY_PATH).
fn ldd(exe: &Path) -> std::process::Output {
    Command::new("ldd")
        .arg(exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap()
}

fn install(prefix: &Path) {
    let o = Command::new("bash")
        .arg(manifest_dir().join("install.sh"))
        .args(["--prefix", s(prefix), "--no-build", "--build-dir"])
        .arg(build_dir())
        .output()
        .unwrap();
    assert_ok(&o);
}

#[test]
fn install_lays_out_rocms_tree() {
    let tmp = tempdir();
    let prefix = tmp.path().join("opt/rocm");
    install(&prefix);
    let lib = prefix.join("lib");
    let version = env!("CARGO_PKG_VERSION");
    let real = format!("librocm_kpack.so.0.{}", version.split_once('.').unwrap().1);
    assert!(lib.join(&real).is_file(), "{real}");
    assert_eq!(
        std::fs::read_link(lib.join("librocm_kpack.so.0")).unwrap(),
        Path::new(&real)
    );
    assert_eq!(
        std::fs::read_link(lib.join("librocm_kpack.so")).unwrap(),
        Path::new("librocm_kpack.so.0")
    );
    assert!(lib.join("librocm_kpack.a").is_file());
    for h in ["kpack.h", "kpack_types.h", "kpack_export.h"] {
        assert!(prefix.join("include/rocm_kpack").join(h).is_file(), "{h}");
    }
    for f in [
        "pkgconfig/rocm_kpack.pc",
        "pkgconfig/rocm_kpack-shared.pc",
        "cmake/rocm_kpack/rocm_kpack-config.cmake",
        "cmake/rocm_kpack/rocm_kpack-config-version.cmake",
        "cmake/rocm-kpack/rocm-kpack-config.cmake",
    ] {
        assert!(lib.join(f).is_file(), "{f}");
    }
    // Relocatable: the tree works after it is moved.
    let moved = tmp.path().join("elsewhere");
    std::fs::rename(&prefix, &moved).unwrap();
    let lib = moved.join("lib");

    // pkg-config consumer, shared and static.
    let pc = |args: &[&str]| {
        let o = Command::new("pkg-config")
            .args(args)
            .arg("rocm_kpack")
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
            .output()
            .expect("pkg-config");
        assert_ok(&o);
        stdout(&o)
    };
    assert_eq!(pc(&["--modversion"]).trim(), version);
    let flags = pc(&["--cflags", "--libs"]);
    let exe = tmp.path().join("pc_consumer");
    let mut cmd = Command::new("cc");
    cmd.arg(consumer_src()).arg("-o").arg(&exe);
    cmd.args(flags.split_whitespace());
    cmd.arg(format!("-Wl,-rpath,{}", lib.display()));
    assert!(cmd.status().unwrap().success(), "{cmd:?}");
    run_consumer(&exe, None);
    let ldd = ldd(&exe);
    assert!(
        stdout(&ldd).contains(&format!("{}/librocm_kpack.so.0", lib.display())),
        "{}",
        stdout(&ldd)
    );
    // `--static`, used as is (no library passed by path): the program
    // takes everything from librocm_kpack.a and needs no librocm_kpack.so.0
    // (the .pc of old linked the shared library here too).
    let flags = pc(&["--static", "--cflags", "--libs"]);
    let exe = tmp.path().join("pc_consumer_static");
    let mut cmd = Command::new("cc");
    cmd.arg(consumer_src()).arg("-o").arg(&exe);
    cmd.args(flags.split_whitespace());
    assert!(cmd.status().unwrap().success(), "{cmd:?}");
    run_consumer(&exe, None);
    let needed = stdout(&run("readelf", &["-d", s(&exe)]));
    assert!(
        !needed.contains("librocm_kpack"),
        "pkg-config --static linked the shared library ({flags}):\n{needed}"
    );

    cmake_consumer(tmp.path(), &moved);
}

/// `find_package(rocm_kpack)` and ROCm's `find_package(rocm-kpack)`, the
/// imported targets `rocm::rocm_kpack` and `rocm::rocm_kpack_static`.
fn cmake_consumer(tmp: &Path, prefix: &Path) {
    if !rocpack_testsupport::have_tool("cmake") {
        assert!(
            std::env::var_os("CI").is_none(),
            "cmake is missing (tests/ci/10-rust.sh installs it)"
        );
        eprintln!("SKIP cmake consumer: cmake not installed");
        return;
    }
    let build = tmp.join("cmake-build");
    let o = Command::new("cmake")
        .arg("-S")
        .arg(manifest_dir().join("tests/cmake_consumer"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .arg(format!("-DCONSUMER_SRC={}", consumer_src().display()))
        .output()
        .unwrap();
    assert_ok(&o);
    let o = Command::new("cmake")
        .arg("--build")
        .arg(&build)
        .output()
        .unwrap();
    assert_ok(&o);
    run_consumer(&build.join("consumer_shared"), None);
    run_consumer(&build.join("consumer_static"), None);
    let ldd = ldd(&build.join("consumer_static"));
    assert!(
        !stdout(&ldd).contains("librocm_kpack"),
        "static consumer links the .so"
    );
}

/// tools/release/make-prebuilt.sh's archive carries librocm_kpack in
/// ROCm's layout (SONAME link, static library, headers, pkg-config and
/// CMake files) beside kpack and snapctl, and the single files and digests
/// for Buck2; a program builds against the extracted archive through
/// pkg-config (shared and --static) and starts.
#[test]
fn prebuilt_release_carries_the_library() {
    let tmp = tempdir();
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for b in ["kpack", "snapctl"] {
        // Stand-ins: this test is about the library part of the release.
        rocpack_testsupport::write(&bin.join(b), b"#!/bin/sh\nexit 0\n");
        assert_ok(&run("chmod", &["+x", s(&bin.join(b))]));
    }
    let out = tmp.path().join("release");
    let script = rocpack_testsupport::repo_root().join("tools/release/make-prebuilt.sh");
    let o = Command::new("bash")
        .arg(&script)
        .args(["--out", s(&out), "--bin-dir", s(&bin), "--lib-dir"])
        .arg(build_dir())
        .args(["--version", "9.8.7", "--base-url", "http://127.0.0.1:1/r"])
        .output()
        .unwrap();
    assert_ok(&o);
    let plat = "x86_64-unknown-linux-gnu";
    let snippets = stdout(&o);
    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    for f in [
        format!("librocm_kpack-9.8.7-{plat}.so"),
        format!("librocm_kpack-9.8.7-{plat}.a"),
    ] {
        let sha = rocpack_testsupport::sha256_file(&out.join(&f));
        assert!(
            sums.contains(&format!("{sha}  {f}")),
            "{f} not in SHA256SUMS"
        );
        assert!(
            snippets.contains(&sha),
            "{f}'s sha256 not in the Buck2 lines"
        );
    }
    assert!(snippets.contains(&format!(
        "rocm_kpack_so_url = http://127.0.0.1:1/r/librocm_kpack-9.8.7-{plat}.so"
    )));
    let x = tmp.path().join("x");
    std::fs::create_dir_all(&x).unwrap();
    let tarball = out.join(format!("rocpack-9.8.7-{plat}.tar.gz"));
    assert_ok(&run("tar", &["-xzf", s(&tarball), "-C", s(&x)]));
    let lib = x.join("lib");
    // The library's own version (Cargo.toml), whatever the release is called.
    let version = env!("CARGO_PKG_VERSION");
    let real = format!("librocm_kpack.so.0.{}", version.split_once('.').unwrap().1);
    assert_eq!(
        std::fs::read_link(lib.join("librocm_kpack.so.0")).unwrap(),
        Path::new(&real)
    );
    for f in [
        "kpack",
        "snapctl",
        "lib/librocm_kpack.a",
        "include/rocm_kpack/kpack.h",
        "lib/pkgconfig/rocm_kpack.pc",
        "lib/cmake/rocm_kpack/rocm_kpack-config.cmake",
    ] {
        assert!(x.join(f).is_file(), "{f} missing from the release archive");
    }
    for (static_link, name) in [(false, "rel_shared"), (true, "rel_static")] {
        let mut args = vec!["--cflags", "--libs"];
        if static_link {
            args.push("--static");
        }
        let o = Command::new("pkg-config")
            .args(&args)
            .arg("rocm_kpack")
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
            .output()
            .expect("pkg-config");
        assert_ok(&o);
        let exe = tmp.path().join(name);
        let mut cmd = Command::new("cc");
        cmd.arg(consumer_src()).arg("-o").arg(&exe);
        cmd.args(stdout(&o).split_whitespace());
        cmd.arg(format!("-Wl,-rpath,{}", lib.display()));
        assert!(cmd.status().unwrap().success(), "{cmd:?}");
        run_consumer(&exe, None);
        let needed = stdout(&run("readelf", &["-d", s(&exe)]));
        assert_eq!(
            needed.contains("librocm_kpack.so.0"),
            !static_link,
            "{name}: {needed}"
        );
    }
}
