//! `kpack verify` on real `kpack split` + `kpack recombine` output: passes on
//! clean trees, fails (exit 1, every violation listed) on corrupted ones.

use std::fs;
use std::path::{Path, PathBuf};

mod common;
use common::{artifacts, assert_ok, kpack, s, split_all, split_args, stdout};

fn recombined(dir: &Path) -> PathBuf {
    let shards = split_all(dir);
    let out = dir.join("out");
    let o = kpack(&[
        "recombine",
        "--input-shards-dir",
        s(&shards),
        "--config",
        s(&artifacts().join("packaging-config.json")),
        "--output-dir",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

#[test]
fn verify_lists_every_violation_as_json() {
    let tmp = tempfile::tempdir().unwrap();
    let out = recombined(tmp.path());
    let cfg = artifacts().join("packaging-config.json");
    let o = kpack(&[
        "verify",
        "--artifacts-dir",
        s(&out),
        "--config",
        s(&cfg),
        "--json",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["lookups"].as_u64(),
            v["lookups_resolved"].as_u64()
        ),
        (Some(true), Some(48), Some(48))
    );
    // 24 lookups per install model, all resolved in both.
    for (m, name) in v["models"]
        .as_array()
        .unwrap()
        .iter()
        .zip(["overlay", "flatten"])
    {
        assert_eq!(m["model"], name);
        assert_eq!(
            (m["lookups"].as_u64(), m["resolved"].as_u64()),
            (Some(24), Some(24)),
            "{m}"
        );
    }

    // Move an aotriton gfx1151 kernel into the gfx110X package, remove the
    // hipBLASLt gfx1102 archive.
    let k = "ml-libs/aotriton/stage/lib/aotriton/kernels/gfx1151/flash/bwd_kernel_dk_dv/bwd_kernel_dk_dv-Sig-F__^bf16@16_64_True-Gpu-gfx1151.hsaco";
    let to = out.join("aotriton_lib_gfx110X").join(k);
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    fs::rename(out.join("aotriton_lib_gfx115X").join(k), &to).unwrap();
    fs::remove_file(
        out.join("blas_lib_gfx110X/math-libs/BLAS/hipBLASLt/stage/.kpack/blas_lib_gfx1102.kpack"),
    )
    .unwrap();
    for with_config in [true, false] {
        let mut args = vec!["verify", "--artifacts-dir", s(&out), "--json"];
        if with_config {
            args.extend(["--config", s(&cfg)]);
        }
        let o = kpack(&args);
        assert_eq!(o.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let vio = v["violations"].as_array().unwrap();
        let has = |kind: &str, pkg: &str, path_end: &str| {
            vio.iter().any(|x| {
                x["kind"] == kind
                    && x["package"] == pkg
                    && x["path"].as_str().unwrap().ends_with(path_end)
            })
        };
        assert!(
            has("cross_arch", "aotriton_lib_gfx110X", "Gpu-gfx1151.hsaco"),
            "{vio:#?}"
        );
        assert!(
            has("unresolved", "blas_lib_generic", "libhipblaslt.so.1.0"),
            "{vio:#?}"
        );
        // Overlaid, hipBLASLt's gfx1102 lookup now fails; flattened, the
        // rocBLAS prefix's copy of the same archive still serves it.
        let per_model: Vec<(u64, u64)> = v["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["lookups"].as_u64().unwrap(),
                    m["resolved"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(per_model, [(24, 23), (24, 24)]);
    }
    // Missing directory → exit 2.
    let o = kpack(&["verify", "--artifacts-dir", s(&tmp.path().join("nope"))]);
    assert_eq!(o.status.code(), Some(2));
}

/// The layout rocpack 0.1 wrote (each prefix's `.kpack/` holding only its
/// own binaries' kernels) resolves overlaid but breaks flattened: verify
/// must say so, per model.
#[test]
fn verify_fails_a_tree_that_breaks_when_flattened() {
    let tmp = tempfile::tempdir().unwrap();
    let out = recombined(tmp.path());
    // Hand-break: strip the hipBLASLt kernels from rocBLAS's copy of every
    // gfx110X archive (rocBLAS sorts last, so its copy wins when flattened).
    let pkg = out.join("blas_lib_gfx110X");
    for arch in ["gfx1100", "gfx1101", "gfx1102"] {
        let kp = pkg.join(format!(
            "math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_{arch}.kpack"
        ));
        let r = rocpack_kpack::KpackReader::open(&kp).unwrap();
        let mut w = rocpack_kpack::KpackWriter::new(rocpack_kpack::Compression::None);
        w.group_name(r.group_name())
            .arch_family(r.gfx_arch_family())
            .arches(r.gfx_arches().iter().map(String::as_str));
        for e in r.entries() {
            if e.key.starts_with("math-libs/BLAS/rocBLAS/") {
                w.add(&e.key, &e.target, r.get_entry(e).unwrap().into_owned())
                    .unwrap();
            }
        }
        drop(r);
        w.write_to_path(&kp).unwrap();
    }
    let run = |model: &str| {
        let o = kpack(&[
            "verify",
            "--artifacts-dir",
            s(&out),
            "--install-model",
            model,
        ]);
        (o.status.code(), stdout(&o))
    };
    let (code, text) = run("overlay");
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = run("flatten");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("flatten install: wrapper co_index 0, arch gfx1100"),
        "{text}"
    );
    assert!(text.contains("libhipblaslt.so"), "{text}");
    let (code, text) = run("both");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("overlay install: 24/24") || text.contains("overlay install:"),
        "{text}"
    );
}

/// Each translation unit has its own arch set: in libfx_mixed.so gfx1101
/// exists only in bundle 0 and gfx1200 only in bundle 1. A correct split of
/// it verifies, counting those lookups as "not built", not as failures.
#[test]
fn verify_accepts_per_translation_unit_arch_sets() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("x_lib");
    fs::create_dir_all(art.join("lib")).unwrap();
    fs::copy(
        artifacts().join("../fatbins/libfx_mixed.so"),
        art.join("lib/libfx_mixed.so"),
    )
    .unwrap();
    fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
    let out = tmp.path().join("o");
    assert_ok(&kpack(&split_args(&art, "x_lib", &out)));
    let o = kpack(&["verify", "--artifacts-dir", s(&out), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    for m in v["models"].as_array().unwrap() {
        assert_eq!(
            (
                m["lookups"].as_u64(),
                m["resolved"].as_u64(),
                m["not_built"].as_u64()
            ),
            (Some(6), Some(4), Some(2)),
            "{m}"
        );
    }
}

/// Hardening items 8 and 10, verify's side: a symlink chain that is
/// lexically inside the package but physically outside (`lib/up -> ..`,
/// `lib/esc -> up/../…/outside/x`, out of the tree) and a fat ELF verify cannot analyse
/// (device code kept in the generic package behind an `e_phnum` of 0xffff)
/// each fail `kpack verify`, naming the file; the clean tree passes.
#[test]
fn verify_refuses_symlink_chains_and_unanalysable_fat_elves() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let out = recombined(tmp.path());
    let run = |dir: &Path| {
        let o = kpack(&["verify", "--artifacts-dir", s(dir)]);
        (
            o.status.code(),
            format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr)),
        )
    };
    assert_eq!(run(&out).0, Some(0));

    // The chain, in a copy of the tree.
    let chain = tmp.path().join("chain");
    rocpack_testsupport::copy_tree(&out, &chain);
    fs::create_dir_all(tmp.path().join("outside")).unwrap();
    fs::write(tmp.path().join("outside/x"), "secret").unwrap();
    let lib = chain.join("blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib");
    assert!(lib.is_dir(), "{}", lib.display());
    symlink("..", lib.join("up")).unwrap();
    symlink("up/../../../../../../../outside/x", lib.join("esc")).unwrap();
    let (code, text) = run(&chain);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("esc"), "{text}");

    // A fat ELF the analysis refuses, left in the generic package.
    let odd = tmp.path().join("odd");
    rocpack_testsupport::copy_tree(&out, &odd);
    let mut fat = fs::read(rocpack_testsupport::fatbins().join("libfx_multi.so")).unwrap();
    fat[56..58].copy_from_slice(&0xffffu16.to_le_bytes()); // e_phnum = PN_XNUM
    fs::write(
        odd.join("blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib/libodd.so"),
        &fat,
    )
    .unwrap();
    let (code, text) = run(&odd);
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("libodd.so"), "{text}");
}

/// Issue 25 item 1, the CI gate of a BLAS build: hipBLASLt's Tensile files
/// add archs (gfx1103, gfx1201) librocblas and libhipblaslt have no code
/// for. Their packages hold only database files; every lookup of a split
/// binary for those archs is "not built", in both install models — and an
/// arch a binary had and lost (every gfx1101 archive removed while the
/// package keeps its Tensile files) still fails, in both models.
#[test]
fn verify_counts_database_only_archs_as_not_built_but_fails_a_lost_arch() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("blas_lib_gfx110X-dgpu");
    rocpack_testsupport::copy_tree(
        &artifacts().join("gfx110X-build/blas_lib_gfx110X-dgpu"),
        &art,
    );
    let lib = art.join("math-libs/BLAS/hipBLASLt/stage/lib/hipblaslt/library");
    fs::create_dir_all(&lib).unwrap();
    for arch in ["gfx1103", "gfx1201"] {
        fs::write(lib.join(format!("TensileLibrary_lazy_{arch}.dat")), arch).unwrap();
        fs::write(lib.join(format!("Kernels.so-000-{arch}.hsaco")), arch).unwrap();
    }
    let out = tmp.path().join("out");
    let mut args = split_args(&art, "blas_lib", &out);
    args.extend(["--split-databases", "rocblas", "hipblaslt"]);
    assert_ok(&kpack(&args));
    for arch in ["gfx1103", "gfx1201"] {
        let pkg = out.join(format!("blas_lib_{arch}"));
        assert!(pkg.is_dir(), "{}", pkg.display());
        assert!(
            !rocpack_testsupport::list_files(&pkg)
                .iter()
                .any(|f| f.ends_with(".kpack")),
            "{arch} must hold database files only"
        );
    }
    let run = |dir: &Path| {
        let o = kpack(&["verify", "--artifacts-dir", s(dir), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code(), v)
    };
    let (code, v) = run(&out);
    assert_eq!(code, Some(0), "{v:#}");
    for m in v["models"].as_array().unwrap() {
        let (l, r, nb) = (
            m["lookups"].as_u64().unwrap(),
            m["resolved"].as_u64().unwrap(),
            m["not_built"].as_u64().unwrap(),
        );
        // 3 host binaries' wrappers × (gfx1103, gfx1201) at least.
        assert!(nb >= 6, "{m}");
        assert_eq!(l, r + nb, "{m}");
    }

    // Lose gfx1101: remove every gfx1101 archive, keep its Tensile files.
    let lost = tmp.path().join("lost");
    rocpack_testsupport::copy_tree(&out, &lost);
    let pkg = lost.join("blas_lib_gfx1101");
    let mut removed = 0;
    for f in rocpack_testsupport::list_files(&pkg) {
        if f.ends_with(".kpack") {
            fs::remove_file(pkg.join(&f)).unwrap();
            removed += 1;
        }
    }
    assert_eq!(removed, 2, "one archive per prefix with fat binaries");
    assert!(rocpack_testsupport::list_files(&pkg)
        .iter()
        .any(|f| f.contains("gfx1101")));
    let (code, v) = run(&lost);
    assert_eq!(code, Some(1), "{v:#}");
    let vio = v["violations"].as_array().unwrap();
    for model in ["overlay", "flatten"] {
        for bin in ["librocblas.so.5.2", "libhipblaslt.so.1.0"] {
            assert!(
                vio.iter().any(|x| x["kind"] == "unresolved"
                    && x["path"].as_str().unwrap().ends_with(bin)
                    && x["message"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("{model} install"))
                    && x["message"].as_str().unwrap().contains("arch gfx1101")
                    && x["message"]
                        .as_str()
                        .unwrap()
                        .contains("recorded gfx1101 code")),
                "{model} {bin}: {vio:#?}"
            );
        }
    }
    // …and none for the archs nobody built.
    assert!(
        !vio.iter().any(|x| {
            let m = x["message"].as_str().unwrap();
            m.contains("gfx1103") || m.contains("gfx1201")
        }),
        "{vio:#?}"
    );
}

/// Issue 24 item 4: zero packages checked is a failure (an empty directory,
/// a directory of other things); package directories that are symlinks (as
/// build-system outputs are) are followed and checked, and one that leads
/// nowhere is a violation.
#[test]
fn verify_fails_on_nothing_checked_and_follows_symlinked_packages() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let run = |dir: &Path| {
        let o = kpack(&["verify", "--artifacts-dir", s(dir), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code(), v)
    };
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let (code, v) = run(&empty);
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["violations"][0]["kind"], "no_packages", "{v:#}");
    let o = kpack(&["verify", "--artifacts-dir", s(&empty)]);
    assert!(stdout(&o).contains("FAILED: 0 packages"), "{}", stdout(&o));
    fs::write(empty.join("README"), "not a package").unwrap();
    assert_eq!(run(&empty).0, Some(1));

    // A split, and a directory of links to its packages (how rule outputs
    // are gathered): the same packages, files and lookups.
    let shards = split_all(tmp.path());
    let real = shards.join("gfx110X-build");
    let (code, want) = run(&real);
    assert_eq!(code, Some(0), "{want:#}");
    assert!(want["packages"].as_u64().unwrap() >= 4, "{want:#}");
    let links = tmp.path().join("links");
    fs::create_dir(&links).unwrap();
    for n in fs::read_dir(&real).unwrap() {
        let n = n.unwrap().file_name();
        symlink(real.join(&n), links.join(&n)).unwrap();
    }
    let (code, v) = run(&links);
    assert_eq!(code, Some(0), "{v:#}");
    for k in [
        "packages",
        "files",
        "kpack_files",
        "host_binaries",
        "lookups",
        "lookups_resolved",
    ] {
        assert_eq!(v[k], want[k], "{k}");
    }
    // A dangling package link is a violation, not a skip.
    symlink(tmp.path().join("gone"), links.join("blas_lib_gfx1199")).unwrap();
    let (code, v) = run(&links);
    assert_eq!(code, Some(1), "{v:#}");
    assert!(
        v["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["kind"] == "bad_package" && x["package"] == "blas_lib_gfx1199"),
        "{v:#}"
    );
}
