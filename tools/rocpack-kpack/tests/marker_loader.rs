//! Marker payload encoding and the runtime's lookup algorithm.

use std::path::Path;

use rocpack_kpack::{
    candidate_paths, compatible_targets, kpack_file_name, marker_search_path, Compression,
    KpackWriter, LoadError, Loader, LoaderEnv, Marker,
};

#[test]
fn marker_encoding_matches_msgpack_python() {
    let m = Marker::new(
        ["../.kpack/hip_lib_@GFXARCH@.kpack"],
        "hip/stage/lib/libtest_kernel_multi.so.1.0",
    );
    let b = m.encode();
    // packb({'kpack_search_paths': [...], 'kernel_name': ...}, use_bin_type=True)
    let mut want = vec![0x82, 0xb2];
    want.extend_from_slice(b"kpack_search_paths");
    want.push(0x91);
    want.extend_from_slice(&[0xd9, 33]); // str8 for 32..=255 bytes
    want.extend_from_slice(b"../.kpack/hip_lib_@GFXARCH@.kpack");
    want.push(0xab);
    want.extend_from_slice(b"kernel_name");
    want.extend_from_slice(&[0xd9, 41]);
    want.extend_from_slice(b"hip/stage/lib/libtest_kernel_multi.so.1.0");
    assert_eq!(b, want);
    assert_eq!(Marker::decode(&b).unwrap(), m);
    assert_eq!(Marker::decode_strict(&b).unwrap(), m);
    assert_eq!(
        m.lookup_key(3),
        "hip/stage/lib/libtest_kernel_multi.so.1.0#3"
    );

    // Short strings use fixstr.
    let s = Marker::new(["a"], "k").encode();
    assert_eq!(&s[s.len() - 2..], &[0xa1, b'k']);
}

#[test]
fn marker_split_paths() {
    assert_eq!(
        marker_search_path("hip_lib", 0),
        ".kpack/hip_lib_@GFXARCH@.kpack"
    );
    assert_eq!(
        marker_search_path("hip_lib", 2),
        "../../.kpack/hip_lib_@GFXARCH@.kpack"
    );
    let m = Marker::for_split("hip_lib", 1, "hip/stage/lib/libx.so");
    assert_eq!(m.kpack_search_paths, ["../.kpack/hip_lib_@GFXARCH@.kpack"]);
    assert_eq!(
        kpack_file_name("x_lib", "gfx942:sramecc+:xnack-"),
        "x_lib_gfx942:sramecc+:xnack-.kpack"
    );
}

#[test]
fn marker_decode_follows_runtime_rules() {
    // Trailing padding (PE raw size) is ignored by decode, refused by decode_strict.
    let mut b = Marker::new(["p"], "k").encode();
    b.extend_from_slice(&[0; 16]);
    assert_eq!(Marker::decode(&b).unwrap().kernel_name, "k");
    assert!(Marker::decode_strict(&b).is_err());

    // Non-str paths skipped; extra keys ignored; key order free.
    let v = rmpv::Value::Map(vec![
        ("kernel_name".into(), "k".into()),
        ("extra".into(), rmpv::Value::from(5)),
        (
            "kpack_search_paths".into(),
            rmpv::Value::Array(vec![rmpv::Value::from(1), "a/b.kpack".into()]),
        ),
    ]);
    let mut b = Vec::new();
    rmpv::encode::write_value(&mut b, &v).unwrap();
    let m = Marker::decode(&b).unwrap();
    assert_eq!(m.kpack_search_paths, ["a/b.kpack"]);
    assert!(Marker::decode_strict(&b).is_err());

    // Missing kernel_name / no str path / not a map -> errors.
    for v in [
        rmpv::Value::Map(vec![(
            "kpack_search_paths".into(),
            rmpv::Value::Array(vec!["a".into()]),
        )]),
        rmpv::Value::Map(vec![
            (
                "kpack_search_paths".into(),
                rmpv::Value::Array(vec![rmpv::Value::from(1)]),
            ),
            ("kernel_name".into(), "k".into()),
        ]),
        rmpv::Value::Map(vec![
            (
                "kpack_search_paths".into(),
                rmpv::Value::Array(vec!["a".into()]),
            ),
            ("kernel_name".into(), rmpv::Value::from(3)),
        ]),
        rmpv::Value::Array(vec![]),
    ] {
        let mut b = Vec::new();
        rmpv::encode::write_value(&mut b, &v).unwrap();
        assert!(Marker::decode(&b).is_err(), "{v:?}");
    }
    assert!(Marker::decode(&[]).is_err());
}

#[test]
fn compatible_target_order_is_the_runtimes() {
    assert_eq!(compatible_targets("gfx1100"), ["gfx1100"]);
    assert_eq!(
        compatible_targets("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"),
        [
            "gfx942:sramecc+:xnack-",
            "gfx942:sramecc+",
            "gfx942:xnack-",
            "gfx942"
        ]
    );
    assert_eq!(
        compatible_targets("gfx90a:xnack+"),
        ["gfx90a:xnack+", "gfx90a"]
    );
    // n = 3: descending bitmask, not by cardinality.
    assert_eq!(
        compatible_targets("gfx9:a:b:c"),
        [
            "gfx9:a:b:c",
            "gfx9:a:b",
            "gfx9:a:c",
            "gfx9:a",
            "gfx9:b:c",
            "gfx9:b",
            "gfx9:c",
            "gfx9"
        ]
    );
    // Empty features dropped; bare prefix is not stripped.
    assert_eq!(compatible_targets("gfx1100::"), ["gfx1100"]);
    assert_eq!(
        compatible_targets("amdgcn-amd-amdhsa--"),
        ["amdgcn-amd-amdhsa--"]
    );
}

/// A split-like tree: `<root>/.kpack/hip_lib_<arch>.kpack`, binary in `<root>/lib`.
fn tree(root: &Path, arches: &[(&str, &[&str])]) {
    std::fs::create_dir_all(root.join(".kpack")).unwrap();
    std::fs::create_dir_all(root.join("lib")).unwrap();
    for (arch, keys) in arches {
        let mut w = KpackWriter::new(Compression::None);
        w.group_name("hip_lib").arch_family(*arch).arches([*arch]);
        for k in *keys {
            w.add(k, arch, format!("{k}@{arch}").into_bytes()).unwrap();
        }
        w.write_to_path(root.join(".kpack").join(kpack_file_name("hip_lib", arch)))
            .unwrap();
    }
}

#[test]
fn loader_resolves_like_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    tree(
        &root,
        &[
            ("gfx1100", &["hip/lib/libx.so#0", "hip/lib/libx.so#1"]),
            ("gfx942:sramecc+", &["hip/lib/libx.so#0"]),
        ],
    );
    let m = Marker::for_split("hip_lib", 1, "hip/lib/libx.so");
    let bin_dir = root.join("lib");
    let mut l = Loader::new(LoaderEnv::none());

    let (r, bytes) = l
        .load(&m, &bin_dir, 1, &["amdgcn-amd-amdhsa--gfx1100"])
        .unwrap();
    assert_eq!(r.archive, root.join(".kpack/hip_lib_gfx1100.kpack"));
    assert_eq!(r.target, "gfx1100");
    assert_eq!(r.key, "hip/lib/libx.so#1");
    assert_eq!(bytes, b"hip/lib/libx.so#1@gfx1100");

    // Agent with features matches a less specific archive.
    let r = l
        .resolve(
            &m,
            &bin_dir,
            0,
            &["amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"],
        )
        .unwrap();
    assert_eq!(r.target, "gfx942:sramecc+");
    assert!(r.archive.ends_with(".kpack/hip_lib_gfx942:sramecc+.kpack"));

    // Runtime-verified outcomes: unknown arch -> 13, missing co_index -> 5.
    let e = l.resolve(&m, &bin_dir, 0, &["gfx1101"]).unwrap_err();
    assert_eq!(e.code(), 13, "{e}");
    let e = l.resolve(&m, &bin_dir, 3, &["gfx1100"]).unwrap_err();
    assert!(matches!(e, LoadError::KernelNotFound { .. }));
    assert_eq!(e.code(), 5);
    // An archive exists, but lists another arch -> 14.
    let direct = Marker::new(["../.kpack/hip_lib_gfx1100.kpack"], "hip/lib/libx.so");
    let e = l.resolve(&direct, &bin_dir, 0, &["gfx1101"]).unwrap_err();
    assert_eq!(e.code(), 14, "{e}");
    // No arch (ROCm: an arch_list of NULLs): nothing to expand -> 13 (the
    // C ABI refuses arch_count == 0 itself with 1).
    let e = l.resolve(&m, &bin_dir, 0, &[]).unwrap_err();
    assert_eq!(e.code(), 13);

    // Arch priority: first requested arch that matches wins.
    let r = l.resolve(&m, &bin_dir, 0, &["gfx1101", "gfx1100"]).unwrap();
    assert_eq!(r.requested_arch, "gfx1100");

    // Bytes path: runtime decode.
    let r = l
        .resolve_bytes(&m.encode(), &bin_dir, 0, &["gfx1100"])
        .unwrap();
    assert_eq!(r.key, "hip/lib/libx.so#0");
    let e = l
        .resolve_bytes(b"\x90", &bin_dir, 0, &["gfx1100"])
        .unwrap_err();
    assert_eq!(e.code(), 12);
}

#[test]
fn loader_env_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    tree(&root, &[("gfx1100", &["k#0"])]);
    let other = root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let mut w = KpackWriter::new(Compression::zstd());
    w.arches(["gfx1100"]);
    w.add("k#0", "gfx1100", b"from-prefix".as_slice()).unwrap();
    let pre = other.join("p.kpack");
    w.write_to_path(&pre).unwrap();

    let m = Marker::for_split("hip_lib", 1, "k");
    let bin_dir = root.join("lib");
    // PREFIX is searched before marker paths.
    let env = LoaderEnv::from_values(None, Some(&format!("::{}", pre.display())));
    assert_eq!(env.kpack_path_prefix, std::slice::from_ref(&pre));
    let mut l = Loader::new(env);
    let (r, b) = l.load(&m, &bin_dir, 0, &["gfx1100"]).unwrap();
    assert_eq!(r.archive, pre);
    assert_eq!(b, b"from-prefix");

    // ROCM_KPACK_PATH replaces everything, without @GFXARCH@ expansion.
    let env = LoaderEnv::from_values(Some("/nonexistent/@GFXARCH@.kpack"), None);
    let c = candidate_paths(&m, &bin_dir, &["gfx1100"], &env);
    assert_eq!(c, [Path::new("/nonexistent/@GFXARCH@.kpack")]);
    let e = Loader::new(env)
        .resolve(&m, &bin_dir, 0, &["gfx1100"])
        .unwrap_err();
    assert_eq!(e.code(), 13);

    // Candidate order: each arch, each compatible target; paths normalised.
    let c = candidate_paths(
        &m,
        &bin_dir,
        &["gfx90a:xnack+", "gfx9-generic"],
        &LoaderEnv::none(),
    );
    let names: Vec<String> = c
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            ".kpack/hip_lib_gfx90a:xnack+.kpack",
            ".kpack/hip_lib_gfx90a.kpack",
            ".kpack/hip_lib_gfx9-generic.kpack"
        ]
    );
}

#[test]
fn loader_reports_rejected_archives() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".kpack")).unwrap();
    std::fs::create_dir_all(root.join("lib")).unwrap();
    std::fs::write(root.join(".kpack/hip_lib_gfx1100.kpack"), b"KPAK garbage").unwrap();
    let m = Marker::for_split("hip_lib", 1, "k");
    let e = Loader::new(LoaderEnv::none())
        .resolve(&m, &root.join("lib"), 0, &["gfx1100"])
        .unwrap_err();
    match &e {
        LoadError::ArchiveNotFound { rejected, .. } => assert_eq!(rejected.len(), 1, "{e}"),
        other => panic!("{other}"),
    }
}

/// One archive: `dir/<name>` listing `arches`, holding `keys` for each.
fn archive(dir: &Path, name: &str, arches: &[&str], keys: &[&str]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut w = KpackWriter::new(Compression::None);
    w.group_name("g")
        .arch_family("f")
        .arches(arches.iter().copied());
    for a in arches {
        for k in keys {
            w.add(k, a, format!("{name}:{k}@{a}").into_bytes()).unwrap();
        }
    }
    w.write_to_path(dir.join(name)).unwrap();
}

#[test]
fn loader_falls_through_archives_listing_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let k = root.join(".kpack");
    // a: lists gfx90a but lacks libx (the torch-on-gfx90a case); b has it.
    archive(&k, "a_gfx90a.kpack", &["gfx90a"], &["other#0"]);
    archive(&k, "b_gfx90a.kpack", &["gfx90a"], &["libx.so#0"]);
    archive(&k, "c_gfx90a.kpack", &["gfx90a"], &[]);
    let m = Marker::new(
        [".kpack/a_@GFXARCH@.kpack", ".kpack/b_@GFXARCH@.kpack"],
        "libx.so",
    );
    let mut l = Loader::new(LoaderEnv::none());
    let (r, bytes) = l.load(&m, &root, 0, &["gfx90a:xnack-"]).unwrap();
    assert_eq!(r.archive, k.join("b_gfx90a.kpack"));
    assert_eq!(bytes, b"b_gfx90a.kpack:libx.so#0@gfx90a");

    // Every listing archive misses: the last miss is reported (5).
    let m2 = Marker::new(
        [".kpack/b_@GFXARCH@.kpack", ".kpack/a_@GFXARCH@.kpack"],
        "liby.so",
    );
    match l.resolve(&m2, &root, 0, &["gfx90a"]).unwrap_err() {
        LoadError::KernelNotFound { archive, .. } => assert_eq!(archive, k.join("a_gfx90a.kpack")),
        e => panic!("expected KERNEL_NOT_FOUND, got {e}"),
    }
    // No archive lists a compatible target: 14 even though archives exist.
    assert_eq!(
        l.resolve(&m, &root, 0, &["gfx1100"]).unwrap_err().code(),
        13
    );
    let direct = Marker::new([".kpack/a_gfx90a.kpack"], "libx.so");
    assert_eq!(
        l.resolve(&direct, &root, 0, &["gfx1100"])
            .unwrap_err()
            .code(),
        14
    );
    // Too many search paths: invalid metadata.
    let many = Marker::new((0..33).map(|i| format!("p{i}")), "libx.so");
    assert_eq!(
        l.resolve(&many, &root, 0, &["gfx90a"]).unwrap_err().code(),
        12
    );
}

#[test]
fn lookup_lists_every_candidate_in_runtime_order() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let k = root.join(".kpack");
    archive(
        &k,
        "a_gfx90a:xnack-.kpack",
        &["gfx90a:xnack-"],
        &["libx.so#0"],
    );
    archive(&k, "a_gfx90a.kpack", &["gfx90a"], &[]);
    archive(&k, "b_gfx90a.kpack", &["gfx90a"], &["libx.so#0"]);
    archive(
        &k,
        "b_gfx90a-generic.kpack",
        &["gfx9-generic"],
        &["libx.so#0"],
    );
    let m = Marker::new(
        [".kpack/a_@GFXARCH@.kpack", ".kpack/b_@GFXARCH@.kpack"],
        "libx.so",
    );
    let mut l = Loader::new(LoaderEnv::none());
    // lookup() stops at the first archive listing the first arch's most
    // specific target and holding the key: nothing can come before it.
    let first = l
        .lookup(&m, &root, 0, &["gfx90a:xnack-", "gfx9-generic"])
        .unwrap();
    assert!(!first.complete);
    assert_eq!(first.archives, [k.join("a_gfx90a:xnack-.kpack")]);
    let got = l
        .lookup_all(&m, &root, 0, &["gfx90a:xnack-", "gfx9-generic"])
        .unwrap();
    assert!(got.complete);
    assert_eq!(got.key, "libx.so#0");
    let order: Vec<(String, String, String)> = got
        .candidates
        .iter()
        .map(|c| {
            (
                c.archive
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
                c.target.clone(),
                c.requested_arch.clone(),
            )
        })
        .collect();
    // Arch priority, then most specific target, then candidate order; the
    // archive listing gfx90a but lacking the key stays in (it is tried).
    let want = [
        ("a_gfx90a:xnack-.kpack", "gfx90a:xnack-", "gfx90a:xnack-"),
        ("a_gfx90a.kpack", "gfx90a", "gfx90a:xnack-"),
        ("b_gfx90a.kpack", "gfx90a", "gfx90a:xnack-"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(order, want);
    // resolve() is lookup() + "the first that holds the key".
    let r = l.resolve(&m, &root, 0, &["gfx90a:xnack-"]).unwrap();
    assert_eq!(r.archive, k.join("a_gfx90a:xnack-.kpack"));
    let r = l.resolve(&m, &root, 0, &["gfx90a"]).unwrap();
    assert_eq!(r.archive, k.join("b_gfx90a.kpack"));
    // The pieces verify uses on its own trees agree with the loader.
    assert_eq!(
        rocpack_kpack::expand_search_path("x_@GFXARCH@_@GFXARCH@", &["gfx942:xnack-"]),
        ["x_gfx942:xnack-_@GFXARCH@", "x_gfx942_@GFXARCH@"]
    );
    assert_eq!(
        rocpack_kpack::expand_search_path("plain.kpack", &["gfx942"]),
        ["plain.kpack"]
    );
}

/// Fall-through is past *any* per-archive failure, not only a missing key:
/// an archive whose kernel does not read (a damaged zstd frame) gives way to
/// the next archive listing the target, as in the runtime library (one
/// `fall_through` loop serves both, and `kpack verify`).
#[test]
fn loader_falls_through_an_archive_whose_kernel_does_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let k = root.join(".kpack");
    std::fs::create_dir_all(&k).unwrap();
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("g").arch_family("f").arches(["gfx90a"]);
    w.add("libx.so#0", "gfx90a", vec![7u8; 4096]).unwrap();
    let (cur, _) = w.write_to(std::io::Cursor::new(Vec::new())).unwrap();
    let mut bad = cur.into_inner();
    let r = rocpack_kpack::KpackReader::from_bytes(&bad).unwrap();
    let ord = r.entry("libx.so#0", "gfx90a").unwrap().ordinal;
    let at = r.blob_location(ord).unwrap().offset as usize;
    drop(r);
    bad[at] = !bad[at]; // no longer a zstd frame
    std::fs::write(k.join("a_gfx90a.kpack"), &bad).unwrap();
    archive(&k, "b_gfx90a.kpack", &["gfx90a"], &["libx.so#0"]);
    let m = Marker::new(
        [".kpack/a_@GFXARCH@.kpack", ".kpack/b_@GFXARCH@.kpack"],
        "libx.so",
    );
    let mut l = Loader::new(LoaderEnv::none());
    let (r, bytes) = l.load(&m, &root, 0, &["gfx90a"]).unwrap();
    assert_eq!(r.archive, k.join("b_gfx90a.kpack"));
    assert_eq!(bytes, b"b_gfx90a.kpack:libx.so#0@gfx90a");
    // Alone, the damaged archive's failure is the answer (6, not 5).
    let only = Marker::new([".kpack/a_@GFXARCH@.kpack"], "libx.so");
    assert_eq!(l.load(&only, &root, 0, &["gfx90a"]).unwrap_err().code(), 6);
}

/// Item 8 of issue 20: no per-lookup archive cap (ROCm's current loader
/// falls through to the 65th archive and later): with 70 archives on
/// ROCM_KPACK_PATH, all listing the target and only the last holding the
/// key, the last one answers (main stopped at 64 with KERNEL_NOT_FOUND).
#[test]
fn every_valid_archive_is_searched() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let k = root.join(".kpack");
    let mut paths = Vec::new();
    for i in 0..70 {
        let name = format!("a{i:02}_gfx90a.kpack");
        let keys: &[&str] = if i == 69 {
            &["libx.so#0"]
        } else {
            &["other#0"]
        };
        archive(&k, &name, &["gfx90a"], keys);
        paths.push(k.join(name).display().to_string());
    }
    let m = Marker::new([".kpack/none_@GFXARCH@.kpack"], "libx.so");
    let mut l = Loader::new(LoaderEnv::from_values(Some(&paths.join(":")), None));
    let r = l.resolve(&m, &root, 0, &["gfx90a"]).unwrap();
    assert_eq!(r.archive, k.join("a69_gfx90a.kpack"));
}

/// Candidates are deduplicated by `candidate_paths` (first occurrence
/// kept); a lookup walks them without a cap, in order.
#[test]
fn candidates_are_deduplicated() {
    let root = Path::new("/nonexistent-root");
    // [isa, generic]: the generic's targets repeat the ISA's last one.
    let m = Marker::new(["a_@GFXARCH@.kpack", "a_@GFXARCH@.kpack"], "x");
    let c = candidate_paths(&m, root, &["gfx942:xnack-", "gfx942"], &LoaderEnv::none());
    let names: Vec<String> = c
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["a_gfx942:xnack-.kpack", "a_gfx942.kpack"]);
}

/// No candidate cap changes an answer: an ISA with 6 features and 32
/// `@GFXARCH@` paths makes 2,048 candidates, and the only archive is at
/// the least specific target of the last path (ROCm finds it; the 1,024
/// cap of old answered ARCHIVE_NOT_FOUND). With 12 features (131,072
/// candidates) the walk still finds it and nothing is listed.
#[test]
fn many_candidates_are_walked_without_a_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join(".kpack")).unwrap();
    archive(
        &root.join(".kpack"),
        "p31_gfx942.kpack",
        &["gfx942"],
        &["x#0"],
    );
    let paths: Vec<String> = (0..32)
        .map(|i| format!(".kpack/p{i}_@GFXARCH@.kpack"))
        .collect();
    let m = Marker::new(paths, "x");
    for n in [6, 12] {
        let feats: String = (0..n).map(|i| format!(":f{i}+")).collect();
        let isa = format!("gfx942{feats}");
        let t = std::time::Instant::now();
        let mut l = Loader::new(LoaderEnv::none());
        let r = l.resolve(&m, root, 0, &[&isa]).unwrap();
        assert!(r.archive.ends_with(".kpack/p31_gfx942.kpack"), "{r:?}");
        assert_eq!(r.target, "gfx942");
        eprintln!(
            "{n} features x 32 paths: {} candidates, found in {:?}",
            32usize << n,
            t.elapsed()
        );
    }
}

/// Item 4: ROCM_KPACK_PATH holding only separators is unset (ROCm: the
/// split list is empty, so the marker's paths are used).
#[test]
fn separator_only_kpack_path_is_unset() {
    assert_eq!(LoaderEnv::from_values(Some(":"), None), LoaderEnv::none());
    assert_eq!(
        LoaderEnv::from_values(Some(":::"), Some(":")),
        LoaderEnv::none()
    );
}
