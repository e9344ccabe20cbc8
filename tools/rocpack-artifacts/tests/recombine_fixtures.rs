//! Recombine + verify on the real fixture shards (`shared/fixtures/artifacts`),
//! each first split with this crate's `split_batch`: the "Done means" of
//! issue 5, asserted on the produced tree.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::databases::{self, DatabaseKind};
use rocpack_artifacts::recombine::{
    recombine, LinkMode, RecombineError, RecombineOptions, RecombineReport,
};
use rocpack_artifacts::split::{split_batch, NoProgress, SplitOptions};
use rocpack_artifacts::verify::{verify, VerifyOptions, VerifyReport};

mod common;
use common::verify_dir;
use rocpack_testsupport::{artifacts, copy_tree, flip_byte, list_files as files};

const SHARDS: [&str; 3] = ["gfx110X-build", "gfx1151-build", "gfx120X-build"];

/// Splits the three fixture shards into `<dir>/split/<shard>`.
fn split_shards(dir: &Path) -> PathBuf {
    split_shards_with(dir, rocpack_kpack::Compression::Zstd { level: 3 })
}

/// [`split_shards`] with archives in `compression`.
fn split_shards_with(dir: &Path, compression: rocpack_kpack::Compression) -> PathBuf {
    let out = dir.join("split");
    for s in SHARDS {
        let opts = SplitOptions {
            databases: vec![
                DatabaseKind::Rocblas,
                DatabaseKind::Hipblaslt,
                DatabaseKind::Aotriton,
            ],
            compression,
            ..SplitOptions::new(PathBuf::new(), String::new(), out.join(s))
        };
        split_batch(&artifacts().join(s), &opts, &NoProgress)
            .unwrap_or_else(|e| panic!("split {s}: {e}"));
    }
    out
}

fn config(name: &str) -> PackagingConfig {
    PackagingConfig::load(&artifacts().join(name)).unwrap()
}

fn run(input: &Path, cfg: PackagingConfig, out: &Path) -> Result<RecombineReport, RecombineError> {
    let opts = RecombineOptions {
        input_shards_dir: input.to_path_buf(),
        config: cfg,
        output_dir: out.to_path_buf(),
        link_mode: LinkMode::Copy,
        component: None,
        jobs: None,
        staging_roots: Vec::new(),
    };
    recombine(&opts, &mut |_| {})
}

fn kpack_arches(p: &Path) -> Vec<String> {
    rocpack_kpack::KpackReader::open(p)
        .unwrap()
        .gfx_arches()
        .to_vec()
}

fn db_arch(rel: &str) -> Option<String> {
    databases::classify(&DatabaseKind::ALL, rel).map(|(_, a)| a)
}

#[test]
fn recombined_fixture_tree_has_the_promised_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let split = split_shards(tmp.path());
    let out = tmp.path().join("out");
    let report = run(&split, config("packaging-config.json"), &out).unwrap();

    let names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        names,
        [
            "aotriton_lib_generic",
            "aotriton_lib_gfx110X",
            "aotriton_lib_gfx115X",
            "aotriton_lib_gfx120X",
            "blas_lib_generic",
            "blas_lib_gfx110X",
            "blas_lib_gfx115X",
            "blas_lib_gfx120X",
            "blas_test_generic",
            "blas_test_gfx110X",
            "blas_test_gfx115X",
            "blas_test_gfx120X",
            "support_dev_generic",
        ]
    );

    // blas_lib_generic: host-only .so files (split, with marker) and generic DB files only.
    let gen = out.join("blas_lib_generic");
    let gfiles = files(&gen);
    let mut split_hosts = 0;
    for f in &gfiles {
        if f == "artifact_manifest.txt" {
            continue;
        }
        assert!(!f.contains(".kpack"), "{f}");
        assert_eq!(
            db_arch(f),
            None,
            "arch database file in generic package: {f}"
        );
        assert!(
            databases::arch_from_file_name(f.rsplit('/').next().unwrap()).is_none(),
            "{f}"
        );
        let data = fs::read(gen.join(f)).unwrap();
        if data.starts_with(b"\x7fELF") {
            let info = rocpack_elf::analyze(&data).unwrap();
            assert!(!info.has_device_code(), "fat binary in generic: {f}");
            if info.state == rocpack_elf::State::Split {
                split_hosts += 1;
            }
        } else {
            // Generic database files, or the text stand-ins the fixture sync
            // leaves where the `lib*.so.N` symlinks were.
            let name = f.rsplit('/').next().unwrap();
            assert!(
                f.contains("/library/") || (name.starts_with("lib") && data.len() < 256),
                "unexpected generic file {f}"
            );
        }
    }
    assert!(gfiles.iter().any(|f| f.ends_with("lib/librocblas.so.5.2")));
    assert!(gfiles
        .iter()
        .any(|f| f.ends_with("lib/libhipblaslt.so.1.0")));
    assert!(gfiles
        .iter()
        .any(|f| f
            .ends_with("TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat")));
    assert!(gfiles
        .iter()
        .any(|f| f.ends_with("hipblasltExtOpLibrary.dat")));
    assert!(split_hosts >= 2, "{split_hosts}");

    // blas_lib_gfx110X: only gfx1100/1101/1102 .kpack and arch DB files.
    let want: BTreeSet<&str> = ["gfx1100", "gfx1101", "gfx1102"].into();
    let pkg = out.join("blas_lib_gfx110X");
    let mut seen = BTreeSet::new();
    let mut kpacks = 0;
    for f in files(&pkg) {
        if f == "artifact_manifest.txt" {
            continue;
        }
        if f.ends_with(".kpack") {
            assert!(f.contains("/.kpack/"), "{f}");
            kpacks += 1;
            for a in kpack_arches(&pkg.join(&f)) {
                assert!(want.contains(a.as_str()), "{f}: {a}");
                seen.insert(a);
            }
        } else {
            let a = db_arch(&f).unwrap_or_else(|| panic!("non-arch file in arch package: {f}"));
            assert!(want.contains(a.as_str()), "{f}: {a}");
            seen.insert(a);
        }
    }
    assert_eq!(
        seen.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        want
    );
    // One archive per arch and per prefix holding fat binaries (rocBLAS and hipBLASLt).
    assert_eq!(kpacks, 6);
    assert_eq!(
        fs::read_to_string(pkg.join("artifact_manifest.txt")).unwrap(),
        "math-libs/BLAS/hipBLASLt/stage\nmath-libs/BLAS/rocBLAS/stage\n"
    );

    // support_dev: generic only.
    assert!(out
        .join("support_dev_generic/artifact_manifest.txt")
        .is_file());
    assert!(!names
        .iter()
        .any(|n| n.starts_with("support_dev_") && n != "support_dev_generic"));
    assert_eq!(report.generic_only_components, ["support_dev"]);

    // AOTriton kernel trees land in their group.
    for (group, archs) in [
        ("gfx110X", vec!["gfx1100", "gfx1101", "gfx1102"]),
        ("gfx115X", vec!["gfx1151"]),
        ("gfx120X", vec!["gfx1200", "gfx1201"]),
    ] {
        let pkg = out.join(format!("aotriton_lib_{group}"));
        let fs_ = files(&pkg);
        let kernel_dirs: BTreeSet<String> = fs_
            .iter()
            .filter_map(|f| f.split("/aotriton/kernels/").nth(1))
            .map(|r| r.split('/').next().unwrap().to_string())
            .collect();
        assert_eq!(
            kernel_dirs,
            archs.iter().map(|s| s.to_string()).collect(),
            "{group}"
        );
        assert!(fs_.iter().any(|f| f.ends_with(".hsaco")));
    }
    assert!(!files(&out.join("aotriton_lib_generic"))
        .iter()
        .any(|f| f.contains("/kernels/")));

    // gfx906 is excluded and reported.
    let excl: Vec<&str> = report
        .excluded_architectures
        .iter()
        .map(|e| e.architecture.as_str())
        .collect();
    assert!(excl.contains(&"gfx906"), "{excl:?}");
    assert!(!files(&out).iter().any(|f| f.contains("gfx906")));

    // Every package has a manifest listing exactly its top-level prefixes.
    for n in &names {
        let m = rocpack_artifacts::manifest::ArtifactManifest::read_dir(&out.join(n)).unwrap();
        assert!(!m.is_empty(), "{n}");
        for p in m.prefixes() {
            assert!(out.join(n).join(p).is_dir(), "{n}: {p}");
        }
    }

    // verify passes on the recombined tree and on every split shard.
    let r = verify_dir(&out);
    assert!(r.ok, "{:#?}", r.violations);
    // Every (binary, wrapper, arch) lookup resolves installed overlaid and
    // installed flattened.
    assert_eq!(r.lookups, 48);
    assert_eq!(r.lookups_resolved, 48);
    let models: Vec<(&str, usize, usize)> = r
        .models
        .iter()
        .map(|m| (m.model.as_str(), m.lookups, m.resolved))
        .collect();
    assert_eq!(models, [("overlay", 24, 24), ("flatten", 24, 24)]);
    for s in SHARDS {
        let r = verify_dir(&split.join(s));
        assert!(r.ok, "{s}: {:#?}", r.violations);
        assert!(r.lookups > 0);
    }

    // Deterministic: a second run (one thread, hard links) gives the same tree.
    let out2 = tmp.path().join("out2");
    let opts = RecombineOptions {
        input_shards_dir: split.clone(),
        config: config("packaging-config.json"),
        output_dir: out2.clone(),
        link_mode: LinkMode::Hardlink,
        component: None,
        jobs: Some(1),
        staging_roots: Vec::new(),
    };
    let report2 = recombine(&opts, &mut |_| {}).unwrap();
    assert_eq!(report, report2);
    let (a, b) = (files(&out), files(&out2));
    assert_eq!(a, b);
    for f in &a {
        assert_eq!(
            fs::read(out.join(f)).unwrap(),
            fs::read(out2.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn strict_config_fails_naming_gfx1150_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let split = split_shards(tmp.path());
    let out = tmp.path().join("out");
    let err = run(&split, config("packaging-config-strict.json"), &out).unwrap_err();
    assert_eq!(err.exit_code(), 1);
    let RecombineError::Validation(v) = &err else {
        panic!("{err}")
    };
    assert!(
        v.iter()
            .any(|x| x.kind == "missing_architecture" && x.message.contains("gfx1150")),
        "{err}"
    );
    // gfx906 is identical in every shard: no duplicate-code violation.
    assert!(
        !v.iter().any(|x| x.kind == "duplicate_device_code"),
        "{err}"
    );
    assert!(!out.exists());
    let leftovers: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, ["split"]);
}

#[test]
fn strict_config_without_gfx1150_packages_gfx906_once() {
    let tmp = tempfile::tempdir().unwrap();
    let split = split_shards(tmp.path());
    let mut cfg = config("packaging-config-strict.json");
    for g in &mut cfg.architecture_groups {
        g.architectures.retain(|a| a != "gfx1150");
    }
    cfg.validation.verify_generic_artifacts_match = false;
    let out = tmp.path().join("out");
    let report = run(&split, cfg.clone(), &out).unwrap();
    let d: Vec<_> = report
        .duplicate_architectures
        .iter()
        .filter(|d| d.architecture == "gfx906")
        .collect();
    assert!(!d.is_empty());
    assert!(d
        .iter()
        .all(|d| d.identical && d.shards.len() == 3 && d.used == "gfx110X-build"));
    assert!(out.join("blas_lib_gfx906").is_dir());
    assert!(
        report.excluded_architectures.is_empty(),
        "{:?}",
        report.excluded_architectures
    );
    let r = verify(
        &VerifyOptions {
            artifacts_dir: out.clone(),
            config: Some(cfg),
            ..VerifyOptions::default()
        },
        &mut |_| {},
    )
    .unwrap();
    assert!(r.ok, "{:#?}", r.violations);
}

#[test]
fn generic_match_check_compares_markers_not_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let split = split_shards(tmp.path());
    let mut cfg = config("packaging-config.json");
    cfg.validation.verify_generic_artifacts_match = true;
    let err = run(&split, cfg, &tmp.path().join("out")).unwrap_err();
    let RecombineError::Validation(v) = &err else {
        panic!("{err}")
    };
    // The device-only transform bundle really differs between shards ...
    assert!(v.iter().all(|x| x.kind == "generic_mismatch"), "{err}");
    assert!(
        v.iter()
            .any(|x| x.message.contains("hipblasltTransform.hsaco")),
        "{err}"
    );
    // ... but split host binaries, whose layout differs, carry the same marker.
    assert!(
        !v.iter().any(|x| x.message.contains("librocblas.so.5.2")),
        "{err}"
    );
    assert!(
        !v.iter().any(|x| x.message.contains("support_dev")),
        "{err}"
    );
}

#[test]
fn tampered_gfx906_code_object_fails_naming_both_shards_and_file() {
    let tmp = tempfile::tempdir().unwrap();
    let split = split_shards(tmp.path());
    let rel = "math-libs/BLAS/rocBLAS/stage/lib/rocblas/library/TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx906.co";
    flip_byte(&split.join("gfx120X-build/blas_lib_gfx906").join(rel), 200);
    let out = tmp.path().join("out");
    let err = run(&split, config("packaging-config.json"), &out).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("gfx110X-build") && msg.contains("gfx120X-build"),
        "{msg}"
    );
    assert!(msg.contains(rel), "{msg}");
    assert!(msg.contains("error_on_duplicate_device_code"), "{msg}");
    assert!(!msg.contains("gfx1151-build"), "{msg}");
    assert!(!out.exists());

    // With the flag off it is a warning and the primary's copy is used.
    let mut cfg = config("packaging-config.json");
    cfg.validation.error_on_duplicate_device_code = false;
    let report = run(&split, cfg, &out).unwrap();
    assert!(report.warnings.iter().any(|w| w.contains(rel)));
    assert!(report
        .duplicate_architectures
        .iter()
        .any(|d| d.architecture == "gfx906" && d.component == "blas_lib" && !d.identical));
}

#[test]
fn tampered_kernel_inside_a_kpack_is_found_kernel_by_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let split = split_shards(tmp.path());
    let kp = split.join(
        "gfx1151-build/blas_lib_gfx906/math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_gfx906.kpack",
    );
    let r = rocpack_kpack::KpackReader::open(&kp).unwrap();
    let mut w = rocpack_kpack::KpackWriter::new(rocpack_kpack::Compression::None);
    w.group_name(r.group_name())
        .arch_family(r.gfx_arch_family())
        .arches(r.gfx_arches().iter().cloned());
    let mut tampered_key = String::new();
    for (i, e) in r.entries_by_ordinal().into_iter().enumerate() {
        let mut bytes = r.get_entry(e).unwrap().into_owned();
        if i == 0 {
            bytes[100] ^= 1;
            tampered_key = e.key.clone();
        }
        w.add(&e.key, &e.target, bytes).unwrap();
    }
    let data = w.to_vec().unwrap();
    drop(r);
    fs::remove_file(&kp).unwrap();
    fs::write(&kp, data).unwrap();
    let err = run(
        &split,
        config("packaging-config.json"),
        &tmp.path().join("out"),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("gfx1151-build") && msg.contains("gfx110X-build"),
        "{msg}"
    );
    assert!(msg.contains(".kpack/blas_lib_gfx906.kpack"), "{msg}");
    assert!(msg.contains(&tampered_key), "{msg}");
}

#[test]
fn verify_fails_on_corrupted_trees() {
    let tmp = tempfile::tempdir().unwrap();
    let split = split_shards(tmp.path());
    let out = tmp.path().join("out");
    run(&split, config("packaging-config.json"), &out).unwrap();
    let kinds = |r: &VerifyReport| r.violations.iter().map(|v| v.kind).collect::<BTreeSet<_>>();

    // (a) one .kpack removed: the rocBLAS lookups for that arch fail.
    let a = tmp.path().join("a");
    copy_tree(&out, &a);
    fs::remove_file(
        a.join("blas_lib_gfx110X/math-libs/BLAS/rocBLAS/stage/.kpack/blas_lib_gfx1101.kpack"),
    )
    .unwrap();
    let r = verify_dir(&a);
    assert!(!r.ok);
    let unresolved: Vec<_> = r
        .violations
        .iter()
        .filter(|v| v.kind == "unresolved")
        .collect();
    // librocblas has two wrappers → two failed lookups for gfx1101.
    assert_eq!(unresolved.len(), 2, "{:#?}", r.violations);
    assert!(unresolved
        .iter()
        .all(|v| v.path.ends_with("librocblas.so.5.2") && v.message.contains("gfx1101")));

    // (b) host binary swapped for the fat original.
    let b = tmp.path().join("b");
    copy_tree(&out, &b);
    let rel = "math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2";
    fs::copy(
        artifacts()
            .join("gfx110X-build/blas_lib_gfx110X-dgpu")
            .join(rel),
        b.join("blas_lib_generic").join(rel),
    )
    .unwrap();
    let r = verify_dir(&b);
    assert!(!r.ok);
    assert!(
        r.violations
            .iter()
            .any(|v| v.kind == "fat_binary" && v.path == rel),
        "{:#?}",
        r.violations
    );
    assert!(kinds(&r).contains("orphan_kernel"), "{:#?}", r.violations);

    // (c) an arch file moved into the wrong package.
    let c = tmp.path().join("c");
    copy_tree(&out, &c);
    let rel = "math-libs/BLAS/rocBLAS/stage/lib/rocblas/library/TensileLibrary_lazy_gfx1200.dat";
    fs::rename(
        c.join("blas_lib_gfx120X").join(rel),
        c.join("blas_lib_gfx110X").join(rel),
    )
    .unwrap();
    let r = verify_dir(&c);
    assert!(!r.ok);
    assert!(
        r.violations
            .iter()
            .any(|v| v.kind == "cross_arch" && v.package == "blas_lib_gfx110X" && v.path == rel),
        "{:#?}",
        r.violations
    );

    // (d) a .kpack moved from gfx120X into gfx110X, and a manifest removed.
    let d = tmp.path().join("d");
    copy_tree(&out, &d);
    let k = "math-libs/BLAS/hipBLASLt/stage/.kpack/blas_lib_gfx1200.kpack";
    fs::rename(
        d.join("blas_lib_gfx120X").join(k),
        d.join("blas_lib_gfx110X").join(k),
    )
    .unwrap();
    fs::remove_file(d.join("blas_test_gfx115X/artifact_manifest.txt")).unwrap();
    let r = verify_dir(&d);
    let ks = kinds(&r);
    assert!(
        ks.contains("cross_arch") && ks.contains("missing_manifest"),
        "{:#?}",
        r.violations
    );

    // (e) a corrupt .kpack.
    let e = tmp.path().join("e");
    copy_tree(&out, &e);
    let k = e.join("blas_test_gfx120X/math-libs/BLAS/rocBLAS/stage/.kpack/blas_test_gfx1201.kpack");
    let len = fs::metadata(&k).unwrap().len();
    flip_byte(&k, (len - 3) as usize);
    let r = verify_dir(&e);
    assert!(
        kinds(&r).contains("bad_kpack") || kinds(&r).contains("unresolved"),
        "{:#?}",
        r.violations
    );
    assert!(!r.ok);
}

/// Issue 10, "both install models": the generic package and every group
/// package of the recombined fixture shards, installed overlaid (prefixes
/// kept) and flattened (every prefix into one root), resolve every
/// (binary, co_index, arch) lookup with the runtime's loader model, for
/// zstd and uncompressed archives. The expected count comes from the
/// archives themselves: one lookup per distinct (TOC key, arch) of the
/// group packages, in each model.
#[test]
fn both_install_models_resolve_every_lookup_for_zstd_and_none() {
    use rocpack_artifacts::verify::InstallModel;
    for (compression, scheme) in [
        (
            rocpack_kpack::Compression::zstd(),
            rocpack_kpack::Scheme::ZstdPerKernel,
        ),
        (
            rocpack_kpack::Compression::None,
            rocpack_kpack::Scheme::None,
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let split = split_shards_with(tmp.path(), compression);
        let out = tmp.path().join("out");
        run(&split, config("packaging-config.json"), &out).unwrap();

        // The oracle: distinct (key, arch) over every group package's archives.
        let mut entries = BTreeSet::new();
        for f in files(&out) {
            let group = !f.split('/').next().unwrap().ends_with("_generic");
            if group && f.ends_with(".kpack") {
                let r = rocpack_kpack::KpackReader::open(out.join(&f)).unwrap();
                assert_eq!(r.scheme(), scheme, "{f}");
                for (key, arch) in r.kernels() {
                    entries.insert((key.to_string(), arch.to_string()));
                }
            }
        }
        assert!(entries.len() >= 20, "{} archive entries", entries.len());

        let report = verify(
            &VerifyOptions {
                artifacts_dir: out.clone(),
                config: None,
                install_models: vec![InstallModel::Overlay, InstallModel::Flatten],
            },
            &mut |_| {},
        )
        .unwrap();
        assert!(report.ok, "{compression:?}: {:#?}", report.violations);
        let models: Vec<&str> = report.models.iter().map(|m| m.model.as_str()).collect();
        assert_eq!(models, ["overlay", "flatten"]);
        for m in &report.models {
            assert_eq!(m.lookups, entries.len(), "{compression:?} {}", m.model);
            assert_eq!(m.resolved, m.lookups, "{compression:?} {}", m.model);
            assert_eq!(m.not_built, 0, "{compression:?} {}", m.model);
        }
        assert_eq!(report.lookups, 2 * entries.len());
        assert_eq!(report.lookups_resolved, report.lookups);
    }
}
