//! End to end without a GPU: fixture fat binaries are split by `kpack split`,
//! installed, and loaded (dlopen, or run) with a stub `libamdhip64.so.5`
//! that resolves every HIPK wrapper through this library, exactly as a HIP
//! runtime does. Each code object must be byte-identical to the one
//! `clang-offload-bundler` extracted from the original fat binary
//! (`expected-unbundle.tsv`, an oracle independent of our code).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const LIBS: [&str; 9] = [
    "libfx_multi.so",
    "libfx_multi_compressed.so",
    "libfx_multi_lld.so",
    "libfx_two_tu.so",
    "libfx_mixed.so",
    "libfx_relr.so",
    "libfx_rdc.so",
    "libfx_generic.so",
    "libfx_clang15.so",
];
const EXES: [&str; 3] = ["fx_app", "fx_app_relr", "fx_app_nopie"];

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lib_dir() -> PathBuf {
    rocpack_testsupport::test_exe_dir()
}

fn fixtures() -> PathBuf {
    rocpack_testsupport::require_fixtures();
    rocpack_testsupport::fixtures()
}

/// The `kpack` binary: $ROCPACK_KPACK, or built next to this test.
fn kpack() -> PathBuf {
    if let Some(p) = std::env::var_os("ROCPACK_KPACK") {
        return PathBuf::from(p);
    }
    let p = lib_dir().parent().unwrap().join("kpack");
    if !p.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-p", "kpack"])
            .current_dir(manifest_dir())
            .status()
            .unwrap();
        assert!(st.success(), "cargo build -p kpack");
    }
    p
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (file, bundle index, target) -> sha256, for device entries.
fn expected(fx: &Path) -> BTreeMap<(String, u64, String), String> {
    let tsv = std::fs::read_to_string(fx.join("expected-unbundle.tsv")).unwrap();
    let mut m = BTreeMap::new();
    for line in tsv.lines().skip(1) {
        let c: Vec<&str> = line.split('\t').collect();
        let Some(file) = c[0].strip_prefix("fatbins/") else {
            continue;
        };
        let target = c[7];
        let Some(arch) = target
            .strip_prefix("hipv4-amdgcn-amd-amdhsa--")
            .or_else(|| target.strip_prefix("hip-amdgcn-amd-amdhsa--"))
        else {
            continue;
        };
        m.insert(
            (file.to_owned(), c[1].parse().unwrap(), arch.to_owned()),
            c[8].to_owned(),
        );
    }
    m
}

struct Harness {
    stub_dir: PathBuf,
    loader: PathBuf,
    lib_path: String,
}

fn build_harness(dir: &Path) -> Harness {
    let inc = manifest_dir().join("include");
    let c = manifest_dir().join("tests/c");
    let inst = dir.join("kpacklib");
    std::fs::create_dir_all(&inst).unwrap();
    std::fs::copy(
        lib_dir().join("librocm_kpack.so"),
        inst.join("librocm_kpack.so.0"),
    )
    .unwrap();
    std::os::unix::fs::symlink("librocm_kpack.so.0", inst.join("librocm_kpack.so")).unwrap();
    let stub_dir = dir.join("stub");
    std::fs::create_dir_all(&stub_dir).unwrap();
    run_ok(
        Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-I"])
            .arg(&inc)
            .arg(format!(
                "-Wl,--version-script={}",
                c.join("hip_stub.map").display()
            ))
            .arg("-Wl,-soname,libamdhip64.so.5")
            .arg("-o")
            .arg(stub_dir.join("libamdhip64.so.5"))
            .arg(c.join("hip_stub.c"))
            .arg(format!("-L{}", inst.display()))
            .arg("-lrocm_kpack"),
    );
    let loader = dir.join("dlopen_all");
    run_ok(
        Command::new("cc")
            .arg("-o")
            .arg(&loader)
            .arg(c.join("dlopen_all.c"))
            .arg("-ldl"),
    );
    Harness {
        lib_path: format!("{}:{}", stub_dir.display(), inst.display()),
        stub_dir,
        loader,
    }
}

/// Load (or run) `file` with the stub for `arch`: (co_index, error, bytes).
fn load(h: &Harness, file: &Path, exe: bool, arch: &str, out: &Path) -> Vec<(u64, i32, Vec<u8>)> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    let mut cmd = if exe {
        Command::new(file)
    } else {
        let mut c = Command::new(&h.loader);
        c.arg(file);
        c
    };
    for k in [
        "ROCM_KPACK_PATH",
        "ROCM_KPACK_PATH_PREFIX",
        "ROCM_KPACK_DISABLE",
    ] {
        cmd.env_remove(k);
    }
    run_ok(
        cmd.env("LD_LIBRARY_PATH", &h.lib_path)
            .env("ROCPACK_STUB_OUT", out)
            .env("ROCPACK_STUB_ARCH", arch),
    );
    let _ = &h.stub_dir;
    let log = std::fs::read_to_string(out.join("log")).unwrap_or_default();
    log.lines()
        .map(|l| {
            let c: Vec<&str> = l.split(' ').collect();
            let bytes = std::fs::read(out.join(format!("{}.co", c[0]))).unwrap_or_default();
            (c[1].parse().unwrap(), c[2].parse().unwrap(), bytes)
        })
        .collect()
}

fn split_install_and_load(compression: &str) {
    let fx = fixtures();
    let want = expected(&fx);
    let tmp = rocpack_testsupport::tempdir();
    let art = tmp.path().join("art/fx_lib");
    std::fs::create_dir_all(art.join("lib")).unwrap();
    std::fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
    let mut files = Vec::new();
    for (name, exe) in LIBS
        .iter()
        .map(|n| (*n, false))
        .chain(EXES.iter().map(|n| (*n, true)))
    {
        let src = fx.join("fatbins").join(name);
        if src.is_file() {
            std::fs::copy(&src, art.join("lib").join(name)).unwrap();
            files.push((name, exe));
        }
    }
    let out = tmp.path().join("out");
    run_ok(
        Command::new(kpack())
            .args([
                "split",
                "--artifact-prefix",
                "fx_lib",
                "--compression",
                compression,
            ])
            .arg("--artifact-dir")
            .arg(&art)
            .arg("--output-dir")
            .arg(&out),
    );
    // Overlay install: every package's `lib` prefix into one root.
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    for pkg in std::fs::read_dir(&out).unwrap() {
        let pkg = pkg.unwrap().path();
        if pkg.join("lib").is_dir() {
            run_ok(Command::new("cp").arg("-a").arg(pkg.join("lib")).arg(&root));
        }
    }
    let h = build_harness(tmp.path());
    let (mut resolved, mut misses) = (0usize, 0usize);
    for (name, exe) in files {
        let archs: BTreeSet<&str> = want
            .keys()
            .filter(|(f, _, _)| f == name)
            .map(|(_, _, a)| a.as_str())
            .collect();
        assert!(
            !archs.is_empty(),
            "{name}: no rows in expected-unbundle.tsv"
        );
        for arch in archs {
            let got = load(
                &h,
                &root.join("lib").join(name),
                exe,
                arch,
                &tmp.path().join("dump"),
            );
            assert!(
                !got.is_empty(),
                "{name} [{arch}]: no HIPK wrapper registered"
            );
            for (co, err, bytes) in got {
                match want.get(&(name.to_owned(), co, arch.to_owned())) {
                    Some(sha) => {
                        assert_eq!(err, 0, "{name}#{co} [{arch}]: kpack error {err}");
                        assert_eq!(
                            &rocpack_testsupport::sha256_hex(&bytes),
                            sha,
                            "{name}#{co} [{arch}]: code object differs from clang-offload-bundler's"
                        );
                        resolved += 1;
                    }
                    // This translation unit was not built for `arch`.
                    None => {
                        assert_ne!(
                            err, 0,
                            "{name}#{co} [{arch}]: resolved a kernel that never existed"
                        );
                        misses += 1;
                    }
                }
            }
        }
    }
    eprintln!("{compression}: {resolved} code objects resolved through librocm_kpack, {misses} expected misses");
    assert!(resolved >= 60, "only {resolved} lookups");
}

#[test]
fn stub_hip_runtime_resolves_split_fixtures_zstd() {
    split_install_and_load("zstd");
}

#[test]
fn stub_hip_runtime_resolves_split_fixtures_none() {
    split_install_and_load("none");
}
