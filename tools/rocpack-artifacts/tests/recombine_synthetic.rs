//! Recombine on small hand-built shard trees: the cases the fixtures do not
//! cover (symlinks, hard links, feature-qualified archs, group conflicts,
//! empty arch artifacts, a missing generic artifact, component filter).

use std::fs;
use std::path::Path;

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::recombine::{
    recombine, LinkMode, RecombineError, RecombineOptions, RecombineReport,
};
use rocpack_testsupport::write;

fn kpack(arch: &str, payload: &[u8]) -> Vec<u8> {
    let mut w = rocpack_kpack::KpackWriter::new(rocpack_kpack::Compression::None);
    w.group_name("lib").arch_family(arch).arches([arch]);
    w.add("p/lib/libx.so#0", arch, payload.to_vec()).unwrap();
    w.to_vec().unwrap()
}

/// `<root>/<shard>/lib_generic` + `lib_<arch>` for each arch.
fn shard(root: &Path, shard: &str, archs: &[&str], payload: &[u8]) {
    let g = root.join(shard).join("lib_generic");
    write(&g.join("artifact_manifest.txt"), b"p\n");
    write(&g.join("p/lib/libx.so.1.0"), b"host");
    fs::create_dir_all(g.join("p/share/empty")).unwrap();
    std::os::unix::fs::symlink("libx.so.1.0", g.join("p/lib/libx.so.1")).unwrap();
    for a in archs {
        let d = root.join(shard).join(format!("lib_{a}"));
        write(&d.join("artifact_manifest.txt"), b"p\n");
        write(
            &d.join(format!("p/.kpack/lib_{a}.kpack")),
            &kpack(a, payload),
        );
        write(
            &d.join(format!("p/lib/rocblas/library/TensileLibrary_lazy_{a}.dat")),
            a.as_bytes(),
        );
    }
}

fn cfg(json: &str) -> PackagingConfig {
    PackagingConfig::parse(json.as_bytes(), Path::new("cfg.json")).unwrap()
}

fn run(
    input: &Path,
    c: PackagingConfig,
    out: &Path,
    mode: LinkMode,
    component: Option<&str>,
) -> Result<RecombineReport, RecombineError> {
    recombine(
        &RecombineOptions {
            input_shards_dir: input.to_path_buf(),
            config: c,
            output_dir: out.to_path_buf(),
            link_mode: mode,
            component: component.map(str::to_string),
            jobs: Some(2),
            staging_roots: Vec::new(),
        },
        &mut |_| {},
    )
}

#[test]
fn symlinks_dirs_and_hardlinks() {
    use std::os::unix::fs::MetadataExt;
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    shard(&input, "a", &["gfx1100"], b"K1100");
    shard(&input, "b", &["gfx1200"], b"K1200");
    let c = cfg(
        r#"{"primary_shard":"a","architecture_groups":{"g11":{"architectures":["gfx1100"]},"g12":{"architectures":["gfx1200"]}}}"#,
    );
    let out = t.path().join("out");
    let r = run(&input, c, &out, LinkMode::Hardlink, None).unwrap();
    let link = out.join("lib_generic/p/lib/libx.so.1");
    assert_eq!(fs::read_link(&link).unwrap(), Path::new("libx.so.1.0"));
    assert!(out.join("lib_generic/p/share/empty").is_dir());
    let src = input.join("b/lib_gfx1200/p/.kpack/lib_gfx1200.kpack");
    let dst = out.join("lib_g12/p/.kpack/lib_gfx1200.kpack");
    assert_eq!(
        fs::metadata(&src).unwrap().ino(),
        fs::metadata(&dst).unwrap().ino()
    );
    assert_eq!(
        fs::read_to_string(out.join("lib_g12/artifact_manifest.txt")).unwrap(),
        "p\n"
    );
    let g = r.packages.iter().find(|p| p.name == "lib_generic").unwrap();
    assert_eq!((g.files, g.symlinks), (1, 1));
    let g12 = r.packages.iter().find(|p| p.name == "lib_g12").unwrap();
    assert_eq!(g12.source_shards, ["b"]);
    assert_eq!(g12.architectures, ["gfx1200"]);
}

#[test]
fn feature_qualified_archs_follow_their_processor() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    shard(
        &input,
        "a",
        &["gfx90a:xnack+", "gfx90a:xnack-", "gfx942"],
        b"K",
    );
    // xnack+ and xnack- code go to separate groups; gfx942 is in none.
    let c = cfg(
        r#"{"primary_shard":"a","architecture_groups":{"on":{"architectures":["gfx90a:xnack+"]},"off":{"architectures":["gfx90a:xnack-"]}}}"#,
    );
    let out = t.path().join("out");
    let r = run(&input, c, &out, LinkMode::Copy, None).unwrap();
    assert!(out
        .join("lib_on/p/.kpack/lib_gfx90a:xnack+.kpack")
        .is_file());
    assert!(!out.join("lib_on/p/.kpack/lib_gfx90a:xnack-.kpack").exists());
    assert!(out
        .join("lib_off/p/.kpack/lib_gfx90a:xnack-.kpack")
        .is_file());
    assert_eq!(r.excluded_architectures.len(), 1);
    assert_eq!(r.excluded_architectures[0].architecture, "gfx942");
}

#[test]
fn empty_arch_artifacts_make_no_package_and_generic_only_is_reported() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    shard(&input, "a", &[], b"");
    // An arch artifact with a manifest but no files.
    write(&input.join("a/lib_gfx1100/artifact_manifest.txt"), b"p\n");
    // A stray directory is skipped with a warning.
    fs::create_dir_all(input.join("a/notes")).unwrap();
    let c =
        cfg(r#"{"primary_shard":"a","architecture_groups":{"g11":{"architectures":["gfx1100"]}}}"#);
    let out = t.path().join("out");
    let r = run(&input, c, &out, LinkMode::Copy, None).unwrap();
    assert!(!out.join("lib_g11").exists());
    assert_eq!(r.generic_only_components, ["lib"]);
    assert!(
        r.warnings.iter().any(|w| w.contains("notes")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn conflicts_and_missing_generic_are_violations() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    shard(&input, "a", &["gfx1100", "gfx1101"], b"K");
    // Two archs of one group providing different files at one path.
    write(
        &input.join("a/lib_gfx1101/p/lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat"),
        b"other",
    );
    // A component whose generic artifact is only in a non-primary shard.
    write(&input.join("b/other_generic/artifact_manifest.txt"), b"q\n");
    write(&input.join("b/other_generic/q/x"), b"x");
    let c = cfg(
        r#"{"primary_shard":"a","architecture_groups":{"g11":{"architectures":["gfx1100","gfx1101"]}}}"#,
    );
    let out = t.path().join("out");
    let err = run(&input, c.clone(), &out, LinkMode::Copy, None).unwrap_err();
    let RecombineError::Validation(v) = &err else {
        panic!("{err}")
    };
    let kinds: Vec<&str> = v.iter().map(|x| x.kind).collect();
    assert!(
        kinds.contains(&"group_conflict") && kinds.contains(&"missing_generic"),
        "{err}"
    );
    assert!(
        err.to_string().contains("TensileLibrary_lazy_gfx1100.dat"),
        "{err}"
    );
    assert!(!out.exists());
    // --component limits the run (and its checks) to one component.
    fs::remove_file(
        input.join("a/lib_gfx1101/p/lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat"),
    )
    .unwrap();
    let r = run(&input, c.clone(), &out, LinkMode::Copy, Some("lib")).unwrap();
    assert!(r.packages.iter().all(|p| p.component == "lib"));
    let err = run(
        &input,
        c,
        &t.path().join("o2"),
        LinkMode::Copy,
        Some("nope"),
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn duplicate_kpacks_compare_kernels_not_bytes() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    shard(&input, "a", &["gfx906"], b"SAME");
    shard(&input, "b", &["gfx906"], b"SAME");
    // Same kernel, different compression: not byte-identical, same code.
    let mut w = rocpack_kpack::KpackWriter::new(rocpack_kpack::Compression::zstd());
    w.group_name("lib").arch_family("gfx906").arches(["gfx906"]);
    w.add("p/lib/libx.so#0", "gfx906", b"SAME".to_vec())
        .unwrap();
    let p = input.join("b/lib_gfx906/p/.kpack/lib_gfx906.kpack");
    fs::write(&p, w.to_vec().unwrap()).unwrap();
    let c =
        cfg(r#"{"primary_shard":"b","architecture_groups":{"old":{"architectures":["gfx906"]}}}"#);
    let r = run(
        &input,
        c.clone(),
        &t.path().join("out"),
        LinkMode::Copy,
        None,
    )
    .unwrap();
    assert!(r.duplicate_architectures[0].identical);
    assert_eq!(
        r.duplicate_architectures[0].used, "b",
        "primary shard's copy wins"
    );
    // Now a different kernel in shard a.
    fs::write(
        input.join("a/lib_gfx906/p/.kpack/lib_gfx906.kpack"),
        kpack("gfx906", b"DIFF"),
    )
    .unwrap();
    let err = run(&input, c, &t.path().join("out2"), LinkMode::Copy, None).unwrap_err();
    let m = err.to_string();
    assert!(
        m.contains("p/lib/libx.so#0") && m.contains("shards b and a"),
        "{m}"
    );
}

#[test]
fn shards_staged_as_symlinks_need_their_staging_roots() {
    // Buck2's symlinked_dir: <staged>/<shard> -> the split output elsewhere.
    let t = tempfile::tempdir().unwrap();
    let outputs = t.path().join("outputs");
    shard(&outputs.join("split_a"), "x", &["gfx1100"], b"K1100");
    let staged = t.path().join("staged");
    fs::create_dir_all(&staged).unwrap();
    std::os::unix::fs::symlink(outputs.join("split_a/x"), staged.join("a")).unwrap();
    let c = || {
        cfg(r#"{"primary_shard":"a","architecture_groups":{"g11":{"architectures":["gfx1100"]}}}"#)
    };
    let opts = |roots: Vec<std::path::PathBuf>, out: &str| RecombineOptions {
        input_shards_dir: staged.clone(),
        config: c(),
        output_dir: t.path().join(out),
        link_mode: LinkMode::Copy,
        component: None,
        jobs: Some(1),
        staging_roots: roots,
    };
    let err = recombine(&opts(Vec::new(), "o1"), &mut |_| {}).unwrap_err();
    assert!(
        err.to_string().contains("outside the shards directory"),
        "{err}"
    );
    // A staging root that does not hold the shard does not help.
    let err = recombine(&opts(vec![t.path().join("staged")], "o2"), &mut |_| {}).unwrap_err();
    assert!(
        err.to_string().contains("outside the shards directory"),
        "{err}"
    );
    let r = recombine(&opts(vec![outputs.join("split_a")], "o3"), &mut |_| {}).unwrap();
    assert!(r.packages.iter().any(|p| p.name == "lib_g11"));
    let link = t.path().join("o3/lib_generic/p/lib/libx.so.1");
    assert_eq!(fs::read_link(link).unwrap(), Path::new("libx.so.1.0"));
}
