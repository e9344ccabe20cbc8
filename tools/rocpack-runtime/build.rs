//! The shared library's SONAME is `librocm_kpack.so.0`, as ROCm's; so that
//! `target/<profile>/` is a runnable layout (README's `gcc -L target/release
//! -lrocm_kpack` recipe), a `librocm_kpack.so.0 -> librocm_kpack.so`
//! symlink is placed beside the library (`install.sh` lays out a real
//! install tree).
//!
//! This is the one write outside `OUT_DIR` (which Cargo discourages), kept on
//! purpose: Cargo has no post-build step, a build script is the only code of
//! the package that a plain `cargo build` runs, and the SONAME must stay
//! ROCm's. It writes nothing but that symlink, leaves a correct one alone,
//! and does nothing off Linux. Nothing else depends on it: `install.sh`,
//! the CMake and pkg-config files and the Bazel and Buck2 targets
//! (`rules/*/runtime.bzl`) name the library themselves (docs/runtime.md).
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os != "linux" {
        return;
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librocm_kpack.so.0");
    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out; the library
    // lands in <target>/<profile>.
    let Ok(out) = std::env::var("OUT_DIR") else {
        return;
    };
    let Some(profile_dir) = Path::new(&out).ancestors().nth(3) else {
        return;
    };
    // `cargo test` leaves the library in deps/ only: link there too.
    for dir in [profile_dir.to_path_buf(), profile_dir.join("deps")] {
        let link = dir.join("librocm_kpack.so.0");
        if std::fs::read_link(&link).is_ok_and(|t| t == Path::new("librocm_kpack.so")) {
            continue;
        }
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink("librocm_kpack.so", &link) {
            println!("cargo:warning=cannot create {}: {e}", link.display());
        }
    }
}
