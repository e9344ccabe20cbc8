//! `kpack split` end to end over the artifact shards in the shared fixtures:
//! output layout, host-only binaries, `.kpack` contents against
//! `expected-unbundle.tsv`, markers that resolve, database handlers,
//! symlinks, determinism and bad input.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::*;

/// The gfx110X `blas_lib` artifact (rocBLAS and hipBLASLt: fat binaries,
/// databases, symlinks), the input most tests split.
fn blas_dgpu() -> PathBuf {
    fixture_shard("gfx110X-build").join("blas_lib_gfx110X-dgpu")
}

/// Splits `input` as `blas_lib` into `dir/out` and asserts it
/// [`fails_cleanly`] naming every one of `needles`.
fn refuse_blas_split(dir: &Path, input: &Path, needles: &[&str]) {
    let out = dir.join("out");
    let o = split(input, "blas_lib", &out, &[]);
    fails_cleanly(&o, &out, needles);
}

/// Rows of expected-unbundle.tsv: (file, bundle_index, target, sha256, size).
struct Row {
    file: String,
    bundle: u64,
    target: String,
    sha: String,
}

fn expected_rows() -> Vec<Row> {
    let text = fs::read_to_string(fixtures().join("expected-unbundle.tsv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            Row {
                file: c[0].to_string(),
                bundle: c[1].parse().unwrap(),
                target: c[7].to_string(),
                sha: c[8].to_string(),
            }
        })
        .collect()
}

fn arch_of(target: &str) -> &str {
    target.rsplit_once("--").map(|(_, a)| a).unwrap_or(target)
}

/// Splits one component of a shard and checks everything the contract
/// promises about the result.
fn check_component(shard_name: &str, component: &str, prefix: &str, dbs: &[&str], n_fat: usize) {
    let input = fixture_shard(shard_name).join(component);
    let tmp = tempdir();
    let out = tmp.path().join("out");
    let mut extra = vec!["--json"];
    if !dbs.is_empty() {
        extra.push("--split-databases");
        extra.extend_from_slice(dbs);
    }
    let o = split(&input, prefix, &out, &extra);
    assert_ok(&o);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json report");
    let stderr = stderr(&o);
    assert!(stderr.contains("architectures:"), "{stderr}");

    let manifest = fs::read_to_string(input.join("artifact_manifest.txt")).unwrap();
    let prefixes: Vec<&str> = manifest.lines().filter(|l| !l.is_empty()).collect();
    let generic = out.join(format!("{prefix}_generic"));
    assert_eq!(
        fs::read_to_string(generic.join("artifact_manifest.txt")).unwrap(),
        manifest
    );

    // Expected code objects of fat binaries in this component, per binary.
    let rel_root = format!("artifacts/{shard_name}/{component}/");
    let rows: Vec<Row> = expected_rows()
        .into_iter()
        .filter(|r| r.file.starts_with(&rel_root) && !r.target.starts_with("host"))
        .collect();
    let inventory = fs::read_to_string(fixtures().join("artifacts-inventory.tsv")).unwrap();
    let fat: BTreeSet<String> = inventory
        .lines()
        .filter(|l| l.contains("\thost-elf-with-hip_fatbin\t") && l.starts_with(&rel_root))
        .map(|l| l.split('\t').next().unwrap()[rel_root.len()..].to_string())
        .collect();

    assert_eq!(
        fat.len(),
        n_fat,
        "{component}: fat binaries in the inventory: {fat:?}"
    );
    assert!(
        rows.len() >= 2 * n_fat,
        "{component}: {} expected code objects",
        rows.len()
    );
    let fat_json = report["fat_binaries"].as_array().unwrap();
    assert_eq!(
        fat_json.len(),
        n_fat,
        "{component}: report lists {fat_json:?}"
    );
    let mut archs_seen = BTreeSet::new();
    let mut kpack_paths = BTreeSet::new();
    for bin in &fat {
        let host_path = generic.join(bin);
        let orig = fs::read(input.join(bin)).unwrap();
        let host = fs::read(&host_path).unwrap();
        assert!(host.len() < orig.len(), "{bin}: host-only not smaller");
        let info = rocpack_elf::analyze(&host).unwrap();
        assert_eq!(info.state, rocpack_elf::State::Split, "{bin}");
        let marker =
            rocpack_kpack::Marker::decode(&info.marker.as_ref().expect("marker").bytes).unwrap();
        assert_eq!(marker.kernel_name, *bin, "{bin}: kernel name");
        for w in &info.wrappers {
            assert_eq!(
                w.magic,
                rocpack_elf::HIPK_MAGIC,
                "{bin}: wrapper {}",
                w.index
            );
        }
        // No code object of the original survives in the host binary.
        for r in rows.iter().filter(|r| r.file == format!("{rel_root}{bin}")) {
            let arch = arch_of(&r.target);
            archs_seen.insert(arch.to_string());
            // The marker's search path, resolved from the binary's directory
            // in the arch artifact, must name an existing archive with the
            // code object under key `<kernel_name>#<bundle index>`.
            let bin_dir_rel = Path::new(bin).parent().unwrap();
            let arch_root = out.join(format!("{prefix}_{arch}"));
            let sp = marker.kpack_search_paths[0].replace("@GFXARCH@", arch);
            let kp = normalize(&arch_root.join(bin_dir_rel).join(&sp));
            assert!(
                kp.starts_with(&arch_root),
                "{bin}: {sp} leaves the artifact"
            );
            let reader = rocpack_kpack::KpackReader::open(&kp).unwrap_or_else(|e| {
                panic!(
                    "{bin} {arch}: marker path {} does not open: {e}",
                    kp.display()
                )
            });
            assert_eq!(reader.gfx_arches(), [arch.to_string()]);
            let key = marker.lookup_key(r.bundle);
            let co = reader
                .get(&key, arch)
                .unwrap_or_else(|e| panic!("{bin} {key} {arch}: {e}"));
            assert_eq!(sha256_hex(&co), r.sha, "{bin} {key} {arch}");
            let needle = &co[co.len() / 2..co.len() / 2 + 64];
            assert!(
                !host.windows(64).any(|w| w == needle),
                "{bin}: device code of {arch} still in the host binary"
            );
            kpack_paths.insert(kp);
        }
    }
    // Each arch has one archive holding exactly the expected code objects of
    // every prefix (no extras), the same bytes in each prefix's `.kpack/`.
    let mut expected_count = BTreeMap::<String, usize>::new();
    let mut homes = BTreeMap::<String, BTreeSet<PathBuf>>::new();
    for bin in &fat {
        for r in rows.iter().filter(|r| r.file == format!("{rel_root}{bin}")) {
            let arch = arch_of(&r.target);
            let top = bin.split("/stage/").next().unwrap();
            let kp = out.join(format!(
                "{prefix}_{arch}/{top}/stage/.kpack/{prefix}_{arch}.kpack"
            ));
            *expected_count.entry(arch.to_string()).or_default() += 1;
            homes.entry(arch.to_string()).or_default().insert(kp);
        }
    }
    for (arch, n) in &expected_count {
        let copies: Vec<Vec<u8>> = homes[arch].iter().map(|p| fs::read(p).unwrap()).collect();
        assert!(
            copies.windows(2).all(|w| w[0] == w[1]),
            "{arch}: copies differ"
        );
        let first = homes[arch].iter().next().unwrap();
        assert_eq!(
            rocpack_kpack::KpackReader::open(first).unwrap().len(),
            *n,
            "{}",
            first.display()
        );
    }

    // Each arch artifact holds only its manifest, .kpack files of that arch
    // and database files naming that arch.
    let db_arch = |rel: &str| -> Option<String> {
        let name = rel.rsplit('/').next().unwrap();
        let aot = rel
            .split("/aotriton/kernels/")
            .nth(1)
            .map(|r| r.split('/').next().unwrap().to_string());
        aot.or_else(|| rocpack_artifacts::databases::arch_from_file_name(name))
    };
    let mut arch_dirs = Vec::new();
    for n in dir_names(&out) {
        if n == format!("{prefix}_generic") {
            continue;
        }
        let arch = n
            .strip_prefix(&format!("{prefix}_"))
            .expect("output named NAME_<arch>")
            .to_string();
        arch_dirs.push(arch.clone());
        let root = out.join(&n);
        let m = fs::read_to_string(root.join("artifact_manifest.txt")).unwrap();
        for l in m.lines() {
            assert!(
                prefixes.contains(&l),
                "{n}: manifest lists unknown prefix {l}"
            );
        }
        for f in list_files(&root) {
            if f == "artifact_manifest.txt" {
                continue;
            }
            if f.ends_with(".kpack") {
                assert!(
                    f.ends_with(&format!("/.kpack/{prefix}_{arch}.kpack")),
                    "{n}: {f}"
                );
                continue;
            }
            assert_eq!(
                db_arch(&f).as_deref(),
                Some(arch.as_str()),
                "{n}: foreign file {f}"
            );
            let orig = fs::read(input.join(&f)).unwrap();
            assert_eq!(fs::read(root.join(&f)).unwrap(), orig, "{n}: {f} changed");
        }
    }
    // Every arch found in fat binaries has an artifact; the JSON agrees.
    for a in &archs_seen {
        assert!(arch_dirs.contains(a), "no artifact for {a}: {arch_dirs:?}");
    }
    let json_archs = json_strs(&report["architectures"]);
    arch_dirs.sort();
    assert_eq!(json_archs, arch_dirs);

    // Generic: no database file of a handler that ran, every other input
    // file present (fat ones rewritten, others identical), symlinks kept.
    let in_snap = snapshot(&input);
    let gen_snap = snapshot(&generic);
    for (rel, node) in &in_snap {
        let is_db = db_arch(rel).is_some() && !dbs.is_empty() && {
            let dbkinds: Vec<rocpack_artifacts::databases::DatabaseKind> =
                dbs.iter().map(|d| d.parse().unwrap()).collect();
            let prefix_of = prefixes.iter().find(|p| rel.starts_with(&format!("{p}/")));
            prefix_of.is_some_and(|p| {
                rocpack_artifacts::databases::classify(&dbkinds, &rel[p.len() + 1..]).is_some()
            })
        };
        match node {
            Node::Link(t) => assert_eq!(gen_snap.get(rel), Some(&Node::Link(t.clone())), "{rel}"),
            Node::Dir => {
                // Kept, unless everything below it moved to arch artifacts.
                let below = format!("{rel}/");
                let kept_below = gen_snap.keys().any(|k| k.starts_with(&below));
                let had_below = in_snap.keys().any(|k| k.starts_with(&below));
                if kept_below || !had_below {
                    assert_eq!(gen_snap.get(rel), Some(&Node::Dir), "{rel}");
                } else {
                    assert!(!gen_snap.contains_key(rel), "{rel}: emptied directory left");
                }
            }
            Node::File { sha, .. } if is_db => {
                assert!(
                    !gen_snap.contains_key(rel),
                    "database file {rel} left in generic"
                );
                let _ = sha;
            }
            Node::File { sha, .. } if fat.contains(rel) => {
                assert!(
                    matches!(gen_snap.get(rel), Some(Node::File { sha: s2, .. }) if s2 != sha),
                    "{rel}"
                );
            }
            Node::File { .. } if rel == "artifact_manifest.txt" => {}
            Node::File { .. } => assert_eq!(gen_snap.get(rel), Some(node), "{rel}"),
        }
    }
    for rel in gen_snap.keys() {
        assert!(in_snap.contains_key(rel), "generic has extra {rel}");
    }
}

/// Lexical normalisation (`a/b/../c` → `a/c`).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn split_blas_lib_every_shard() {
    for (sh, comp) in [
        ("gfx110X-build", "blas_lib_gfx110X-dgpu"),
        ("gfx1151-build", "blas_lib_gfx1151"),
        ("gfx120X-build", "blas_lib_gfx120X-all"),
    ] {
        check_component(sh, comp, "blas_lib", &["rocblas", "hipblaslt"], 2);
    }
}

#[test]
fn split_blas_test_executable() {
    check_component(
        "gfx110X-build",
        "blas_test_gfx110X-dgpu",
        "blas_test",
        &[],
        1,
    );
}

#[test]
fn split_aotriton_and_support() {
    check_component(
        "gfx110X-build",
        "aotriton_lib_gfx110X-dgpu",
        "aotriton_lib",
        &["aotriton"],
        0,
    );
    check_component(
        "gfx110X-build",
        "support_dev_gfx110X-dgpu",
        "support_dev",
        &["rocblas"],
        0,
    );
    // support_dev has no device code: only the generic artifact.
    let tmp = tempdir();
    let out = tmp.path().join("o");
    assert_ok(&split(
        &fixture_shard("gfx120X-build").join("support_dev_gfx120X-all"),
        "support_dev",
        &out,
        &[],
    ));
    assert_eq!(dir_names(&out), ["support_dev_generic"]);
}

#[test]
fn database_arch_names_keep_features() {
    let tmp = tempdir();
    let out = tmp.path().join("o");
    let input = blas_dgpu();
    assert_ok(&split(
        &input,
        "blas_lib",
        &out,
        &["--split-databases", "rocblas", "hipblaslt"],
    ));
    let lib = "math-libs/BLAS/rocBLAS/stage/lib/rocblas/library";
    assert!(out
        .join(format!(
            "blas_lib_gfx906:xnack-/{lib}/Kernels.so-000-gfx906-xnack-.hsaco"
        ))
        .is_file());
    assert!(out
        .join(format!(
            "blas_lib_gfx1100/{lib}/TensileLibrary_lazy_gfx1100.dat"
        ))
        .is_file());
    // No arch in the name: stays generic (also the multi-arch bundle).
    assert!(out
        .join(format!(
            "blas_lib_generic/{lib}/TensileLibrary_Type_HH_Contraction_l_Ailk_Bljk_Cijk_Dijk_fallback.dat"
        ))
        .is_file());
    assert!(out
        .join("blas_lib_generic/math-libs/BLAS/hipBLASLt/stage/lib/hipblaslt/library/hipblasltTransform.hsaco")
        .is_file());
    // Without --split-databases everything non-fat is generic.
    let out2 = tmp.path().join("o2");
    assert_ok(&split(&input, "blas_lib", &out2, &[]));
    assert!(out2
        .join(format!(
            "blas_lib_generic/{lib}/TensileLibrary_lazy_gfx1100.dat"
        ))
        .is_file());
    assert!(!out2.join("blas_lib_gfx906:xnack-").exists());
}

#[test]
fn every_prefix_kpack_serves_both_install_models() {
    // rocBLAS and hipBLASLt are two prefixes of one artifact. Installed with
    // prefixes kept, each library's marker resolves inside its own prefix;
    // flattened into one root (TheRock's dist/), both prefixes' `.kpack/`
    // meet at one path. So each prefix holds the same archive, with the
    // kernels of both.
    let tmp = tempdir();
    let out = tmp.path().join("o");
    assert_ok(&split(&blas_dgpu(), "blas_lib", &out, &[]));
    let mut bytes = Vec::new();
    for p in ["rocBLAS", "hipBLASLt"] {
        let kp = out.join(format!(
            "blas_lib_gfx1100/math-libs/BLAS/{p}/stage/.kpack/blas_lib_gfx1100.kpack"
        ));
        let r = rocpack_kpack::KpackReader::open(&kp).unwrap();
        for q in ["rocBLAS", "hipBLASLt"] {
            assert!(
                r.kernels()
                    .any(|(key, _)| key.starts_with(&format!("math-libs/BLAS/{q}/stage/"))),
                "no {q} kernel in {}",
                kp.display()
            );
        }
        bytes.push(fs::read(&kp).unwrap());
    }
    assert_eq!(bytes[0], bytes[1], "the two prefixes' archives differ");
    // kpack verify checks both install models.
    let o = kpack(&["verify", "--artifacts-dir", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("overlay install:") && text.contains("flatten install:"),
        "{text}"
    );
}

#[test]
fn compression_and_exclusion() {
    let tmp = tempdir();
    let input = blas_dgpu();
    let kp = "math-libs/BLAS/rocBLAS/stage/.kpack";
    let z = tmp.path().join("z");
    assert_ok(&split(&input, "blas_lib", &z, &[]));
    let n = tmp.path().join("n");
    assert_ok(&split(&input, "blas_lib", &n, &["--compression", "none"]));
    let rz = rocpack_kpack::KpackReader::open(
        z.join(format!("blas_lib_gfx1100/{kp}/blas_lib_gfx1100.kpack")),
    )
    .unwrap();
    let rn = rocpack_kpack::KpackReader::open(
        n.join(format!("blas_lib_gfx1100/{kp}/blas_lib_gfx1100.kpack")),
    )
    .unwrap();
    assert_eq!(rz.scheme(), rocpack_kpack::Scheme::ZstdPerKernel);
    assert_eq!(rn.scheme(), rocpack_kpack::Scheme::None);
    for (key, arch) in rn.kernels() {
        assert_eq!(rz.get(key, arch).unwrap(), rn.get(key, arch).unwrap());
    }

    let x = tmp.path().join("x");
    let o = split(
        &input,
        "blas_lib",
        &x,
        &[
            "--exclude-arch",
            "gfx906",
            "--split-databases",
            "rocblas",
            "--json",
        ],
    );
    assert_ok(&o);
    let names = dir_names(&x);
    assert!(names.iter().all(|n| !n.contains("gfx906")), "{names:?}");
    assert!(names.iter().any(|n| n == "blas_lib_gfx1100"), "{names:?}");
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ex = json_strs(&j["excluded_architectures"]);
    assert_eq!(ex, ["gfx906", "gfx906:xnack-"]);
    // The excluded DB file is not left in generic either.
    assert!(!x
        .join("blas_lib_generic/math-libs/BLAS/rocBLAS/stage/lib/rocblas/library/TensileLibrary_lazy_gfx906.dat")
        .exists());
}

#[test]
fn aliases_and_ignored_flags() {
    let tmp = tempdir();
    let out = tmp.path().join("o");
    let input = fixture_shard("gfx1151-build").join("blas_test_gfx1151");
    let o = kpack(&[
        "split",
        "--input-dir",
        s(&input),
        "--component-name",
        "blas_test",
        "--output-dir",
        s(&out),
        "--clang-offload-bundler",
        "/nonexistent/clang-offload-bundler",
        "--tmp-dir",
        "/nonexistent",
    ]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains("--clang-offload-bundler") && err.contains("ignored"),
        "{err}"
    );
    assert!(err.contains("--tmp-dir"), "{err}");
    assert!(out.join("blas_test_gfx1151").is_dir());
    // stdout lists the output artifact directories.
    let so = String::from_utf8_lossy(&o.stdout);
    assert!(so.lines().any(|l| l.ends_with("blas_test_generic")), "{so}");
}

#[test]
fn batch_mode_splits_every_artifact() {
    let tmp = tempdir();
    let out = tmp.path().join("o");
    let o = split_batch(
        &fixture_shard("gfx120X-build"),
        &out,
        &[
            "--split-databases",
            "rocblas",
            "hipblaslt",
            "aotriton",
            "--json",
        ],
    );
    assert_ok(&o);
    let names = dir_names(&out);
    for n in [
        "aotriton_lib_generic",
        "aotriton_lib_gfx1200",
        "blas_lib_generic",
        "blas_lib_gfx1201",
        "blas_test_generic",
        "blas_test_gfx906",
        "support_dev_generic",
    ] {
        assert!(names.iter().any(|m| m == n), "{n} missing: {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("support_dev_gfx")),
        "{names:?}"
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j.as_array().unwrap().len(), 4);
    // Same result as splitting one artifact on its own.
    let single = tmp.path().join("single");
    assert_ok(&split(
        &fixture_shard("gfx120X-build").join("blas_lib_gfx120X-all"),
        "blas_lib",
        &single,
        &["--split-databases", "rocblas", "hipblaslt", "aotriton"],
    ));
    for n in dir_names(&single) {
        assert_eq!(snapshot(&single.join(&n)), snapshot(&out.join(&n)), "{n:?}");
    }
}

#[test]
fn deterministic_across_dirs_and_jobs() {
    let tmp = tempdir();
    let a_in = tmp.path().join("first/in/blas_lib_gfx110X-dgpu");
    let b_in = tmp.path().join("second/deeper/input/blas_lib_gfx110X-dgpu");
    copy_tree(&blas_dgpu(), &a_in);
    copy_tree(&blas_dgpu(), &b_in);
    let a_out = tmp.path().join("out-a");
    let b_out = tmp.path().join("elsewhere/out-b");
    let dbs = ["--split-databases", "rocblas", "hipblaslt"];
    assert_ok(&split(
        &a_in,
        "blas_lib",
        &a_out,
        &[&["--jobs", "1"][..], &dbs].concat(),
    ));
    assert_ok(&split(
        &b_in,
        "blas_lib",
        &b_out,
        &[&["--jobs", "4"][..], &dbs].concat(),
    ));
    let (sa, sb) = (snapshot(&a_out), snapshot(&b_out));
    assert!(sa.len() > 50, "{}", sa.len());
    assert_eq!(sa, sb);
    // And with --compression none too.
    let (c, d) = (tmp.path().join("c"), tmp.path().join("d"));
    assert_ok(&split(
        &a_in,
        "blas_lib",
        &c,
        &["--compression", "none", "-j", "3"],
    ));
    assert_ok(&split(
        &b_in,
        "blas_lib",
        &d,
        &["--compression", "none", "-j", "1"],
    ));
    assert_eq!(snapshot(&c), snapshot(&d));
}

#[test]
fn bad_manifest_prefixes() {
    for (text, needle) in [
        ("math-libs/BLAS/rocBLAS/stage\n../../escape\n", "`..`"),
        ("/abs/stage\n", "absolute"),
    ] {
        let tmp = tempdir();
        let input = tmp.path().join("in");
        copy_tree(&blas_dgpu(), &input);
        fs::write(input.join("artifact_manifest.txt"), text).unwrap();
        let out = tmp.path().join("outdir/out");
        let o = split(&input, "blas_lib", &out, &[]);
        fails_cleanly(&o, &out, &["artifact_manifest.txt", needle, "line"]);
    }
}

#[test]
fn symlink_escaping_the_tree() {
    let tmp = tempdir();
    let input = tmp.path().join("in");
    copy_tree(&blas_dgpu(), &input);
    let lib = input.join("math-libs/BLAS/rocBLAS/stage/lib");
    std::os::unix::fs::symlink("../../../../../../etc/passwd", lib.join("evil")).unwrap();
    refuse_blas_split(tmp.path(), &input, &["lib/evil", "outside"]);

    fs::remove_file(lib.join("evil")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", lib.join("abs")).unwrap();
    refuse_blas_split(tmp.path(), &input, &["lib/abs", "outside"]);
}

#[test]
fn truncated_elf_names_file_and_offset() {
    let tmp = tempdir();
    let input = tmp.path().join("in");
    copy_tree(&blas_dgpu(), &input);
    let f = input.join("math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2");
    let bytes = fs::read(&f).unwrap();
    // Cut inside .hip_fatbin (bundles start at 12288).
    fs::write(&f, &bytes[..20000]).unwrap();
    refuse_blas_split(tmp.path(), &input, &["librocblas.so.5.2", "offset"]);
}

#[test]
fn refuses_existing_output_and_output_inside_input() {
    let tmp = tempdir();
    let input = fixture_shard("gfx1151-build").join("blas_test_gfx1151");
    let out = tmp.path().join("out");
    fs::create_dir_all(out.join("blas_test_generic")).unwrap();
    fs::write(out.join("blas_test_generic/keep"), b"mine").unwrap();
    let o = split(&input, "blas_test", &out, &[]);
    assert_exit(&o, 2);
    assert_eq!(
        fs::read(out.join("blas_test_generic/keep")).unwrap(),
        b"mine"
    );
    assert!(!out.join("blas_test_gfx1151").exists());

    let copy = tmp.path().join("copy");
    copy_tree(&input, &copy);
    let o = split(&copy, "blas_test", &copy.join("math-libs/out"), &[]);
    assert_exit(&o, 2);
    assert!(!copy.join("math-libs/out").exists());
}

#[test]
fn usage_errors_exit_2() {
    let tmp = tempdir();
    let out = tmp.path().join("o");
    // --artifact-dir without --artifact-prefix
    let o = kpack(&[
        "split",
        "--artifact-dir",
        s(&fixture_shard("gfx1151-build")),
        "--output-dir",
        s(&out),
    ]);
    assert_exit(&o, 2);
    // unknown database handler
    let o = split(
        &fixture_shard("gfx1151-build").join("blas_lib_gfx1151"),
        "blas_lib",
        &out,
        &["--split-databases", "nope"],
    );
    assert_exit(&o, 2);
    // missing manifest
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let o = split(&empty, "x", &out, &[]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("artifact_manifest.txt"));
    assert!(!out.exists());
}

#[test]
fn batch_mode_is_all_or_nothing() {
    let tmp = tempdir();
    let parent = tmp.path().join("shard");
    copy_tree(&fixture_shard("gfx1151-build"), &parent);
    // Break one of the four artifacts: its manifest escapes the directory.
    fs::write(
        parent.join("blas_test_gfx1151/artifact_manifest.txt"),
        "../../x\n",
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = split_batch(&parent, &out, &[]);
    fails_cleanly(&o, &out, &["blas_test_gfx1151/artifact_manifest.txt"]);
    // A `<name>_generic` directory is never treated as an input artifact.
    fs::write(
        parent.join("blas_test_gfx1151/artifact_manifest.txt"),
        "math-libs/BLAS/rocBLAS/stage\n",
    )
    .unwrap();
    copy_tree(
        &parent.join("support_dev_gfx1151"),
        &parent.join("support_dev_generic"),
    );
    let o = split_batch(&parent, &out, &["--json"]);
    assert_ok(&o);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j.as_array().unwrap().len(), 4);
}

#[test]
fn overlapping_bundle_entries_name_file_and_offset() {
    let tmp = tempdir();
    let input = tmp.path().join("in");
    copy_tree(&blas_dgpu(), &input);
    let f = input.join("math-libs/BLAS/rocBLAS/stage/lib/librocblas.so.5.2");
    let mut b = fs::read(&f).unwrap();
    // First bundle at 12288 (expected-unbundle.tsv): magic, u64 count, then
    // entries {u64 offset, u64 size, u64 id_len, id}. Point entry 2 into entry 1.
    let base = 12288;
    assert_eq!(&b[base..base + 24], b"__CLANG_OFFLOAD_BUNDLE__");
    let u64_at = |b: &[u8], p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
    let mut pos = base + 32;
    let mut entries = Vec::new();
    for _ in 0..3 {
        entries.push((pos, u64_at(&b, pos)));
        pos += 24 + u64_at(&b, pos + 16) as usize;
    }
    let overlap = entries[1].1 + 16;
    b[entries[2].0..entries[2].0 + 8].copy_from_slice(&overlap.to_le_bytes());
    fs::write(&f, &b).unwrap();
    refuse_blas_split(
        tmp.path(),
        &input,
        &["librocblas.so.5.2", "offset 12288", "overlap"],
    );
}

#[test]
fn generic_packages_keep_no_emptied_directories() {
    let tmp = tempdir();
    let out = tmp.path().join("o");
    assert_ok(&split(
        &fixture_shard("gfx110X-build").join("aotriton_lib_gfx110X-dgpu"),
        "aotriton_lib",
        &out,
        &["--split-databases", "aotriton"],
    ));
    let generic = snapshot(&out.join("aotriton_lib_generic"));
    let empty: Vec<&String> = generic
        .iter()
        .filter(|(k, n)| {
            **n == Node::Dir && !generic.keys().any(|o| o.starts_with(&format!("{k}/")))
        })
        .map(|(k, _)| k)
        .collect();
    assert!(
        empty.is_empty(),
        "empty directories left in the generic package: {empty:?}"
    );
}

/// Splitting an already split tree changes nothing: the generic package
/// split again is byte-identical, and no arch package appears; with either
/// compression of the arch packages.
#[test]
fn re_split_is_byte_identical() {
    let tmp = tempdir();
    for compression in ["zstd", "none"] {
        for (i, sh) in ["gfx110X-build", "gfx1151-build", "gfx120X-build"]
            .iter()
            .enumerate()
        {
            for comp in ["blas_lib", "blas_test", "aotriton_lib", "support_dev"] {
                let Some(input) = fs::read_dir(fixture_shard(sh))
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(comp))
                else {
                    continue;
                };
                let args = [
                    "--compression",
                    compression,
                    "--split-databases",
                    "rocblas",
                    "hipblaslt",
                    "aotriton",
                ];
                let once = tmp.path().join(format!("{compression}-{i}-{comp}-1"));
                assert_ok(&split(&input, comp, &once, &args));
                let generic = once.join(format!("{comp}_generic"));
                let twice = tmp.path().join(format!("{compression}-{i}-{comp}-2"));
                assert_ok(&split(&generic, comp, &twice, &args));
                assert_eq!(
                    dir_names(&twice),
                    [format!("{comp}_generic")],
                    "{sh} {comp}"
                );
                assert!(
                    snapshot(&generic) == snapshot(&twice.join(format!("{comp}_generic"))),
                    "{sh} {comp} ({compression}): re-split changed the generic package"
                );
            }
        }
    }
}

/// Separated debug files (`objcopy --only-keep-debug`: `.hip_fatbin` is
/// NOBITS) are copied untouched, as are `*_dbg` artifacts' files.
#[test]
fn debug_files_pass_through() {
    let tmp = tempdir();
    let art = tmp.path().join("fx_lib_dbg");
    let lib = art.join("hip/lib");
    fs::create_dir_all(lib.join(".debug")).unwrap();
    let fat = fixtures().join("fatbins/libfx_multi.so");
    let dbg = lib.join(".debug/libfx_multi.so.debug");
    let st = Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&fat)
        .arg(&dbg)
        .status()
        .expect("objcopy (binutils)");
    assert!(st.success());
    fs::write(art.join("artifact_manifest.txt"), "hip\n").unwrap();
    let out = tmp.path().join("o");
    assert_ok(&split(&art, "fx_lib", &out, &[]));
    let copied = out.join("fx_lib_generic/hip/lib/.debug/libfx_multi.so.debug");
    assert_eq!(fs::read(&copied).unwrap(), fs::read(&dbg).unwrap());
    assert_eq!(dir_names(&out), ["fx_lib_generic"]);
}

/// `--gpu-targets` keeps targets by base arch and never drops a feature
/// variant (ROCM-25535: rocBLAS lost `…_gfx90a-xnack-.hsaco` with
/// `--gpu-targets gfx90a`); what it does not keep is gone from every
/// artifact; a filter that keeps nothing fails.
#[test]
fn gpu_targets_keep_variants_and_fail_when_empty() {
    let tmp = tempdir();
    let art = tmp.path().join("blas_lib_gfxall");
    let lib = art.join("blas/lib");
    fs::create_dir_all(lib.join("rocblas/library")).unwrap();
    fs::copy(
        fixtures().join("fatbins/libfx_multi.so"),
        lib.join("librocblas.so"),
    )
    .unwrap();
    for t in ["gfx90a-xnack-", "gfx90a-xnack+", "gfx1100", "gfx942"] {
        fs::write(
            lib.join(format!("rocblas/library/TensileLibrary_lazy_{t}.hsaco")),
            t,
        )
        .unwrap();
    }
    fs::write(art.join("artifact_manifest.txt"), "blas\n").unwrap();
    let out = tmp.path().join("o");
    assert_ok(&split(
        &art,
        "blas_lib",
        &out,
        &[
            "--split-databases",
            "rocblas",
            "--gpu-targets",
            "gfx90a",
            "gfx1100",
        ],
    ));
    assert_eq!(
        dir_names(&out),
        [
            "blas_lib_generic",
            "blas_lib_gfx1100",
            "blas_lib_gfx90a:xnack+",
            "blas_lib_gfx90a:xnack-"
        ]
    );
    for (t, dir) in [
        ("gfx90a-xnack-", "gfx90a:xnack-"),
        ("gfx90a-xnack+", "gfx90a:xnack+"),
    ] {
        let f = out.join(format!(
            "blas_lib_{dir}/blas/lib/rocblas/library/TensileLibrary_lazy_{t}.hsaco"
        ));
        assert!(f.is_file(), "{} missing", f.display());
    }
    // gfx942 is gone everywhere: no artifact, not left in generic.
    assert!(!out
        .join("blas_lib_generic/blas/lib/rocblas/library/TensileLibrary_lazy_gfx942.hsaco")
        .exists());
    // The kept fat binary's archives hold only kept targets.
    for d in ["blas_lib_gfx90a:xnack+", "blas_lib_gfx1100"] {
        assert_eq!(dir_names(&out.join(d).join("blas/.kpack")).len(), 1, "{d}");
    }

    // Nothing left: exit 2, a message naming what the artifact has.
    let o2 = tmp.path().join("o2");
    let o = split(&art, "blas_lib", &o2, &["--gpu-targets", "gfx1250-strict"]);
    fails_cleanly(&o, &o2, &["leaves no code object", "gfx1100"]);
    // Not a target at all: a usage error.
    let o = split(&art, "x", &o2, &["--gpu-targets", "sm_90"]);
    fails_cleanly(&o, &o2, &["sm_90"]);
}

/// Hostile trees: a symlink chain that is lexically inside but physically
/// outside, a manifest prefix with a symlink in the middle, an output
/// directory inside the input through a symlinked parent. Each fails with
/// exit 2 naming the culprit, and writes nothing.
#[test]
fn symlink_escapes_are_refused() {
    use std::os::unix::fs::symlink;
    let tmp = tempdir();
    let t = tmp.path();
    fs::create_dir_all(t.join("outside")).unwrap();
    fs::write(t.join("outside/x"), "secret").unwrap();

    let chain = t.join("chain/x_lib");
    fs::create_dir_all(chain.join("pfx/lib")).unwrap();
    symlink("..", chain.join("pfx/lib/up")).unwrap();
    // Lexically inside (lib/up/../../outside/x), physically outside.
    symlink("up/../../outside/x", chain.join("pfx/lib/esc")).unwrap();
    fs::write(chain.join("artifact_manifest.txt"), "pfx\n").unwrap();

    let mid = t.join("mid/y");
    fs::create_dir_all(&mid).unwrap();
    fs::create_dir_all(t.join("elsewhere/sub")).unwrap();
    fs::write(t.join("elsewhere/sub/f"), "f").unwrap();
    symlink(t.join("elsewhere"), mid.join("m")).unwrap();
    fs::write(mid.join("artifact_manifest.txt"), "m/sub\n").unwrap();

    let inner = t.join("inner/z");
    fs::create_dir_all(inner.join("lib")).unwrap();
    fs::write(inner.join("artifact_manifest.txt"), "lib\n").unwrap();
    symlink(&inner, t.join("alias")).unwrap();

    for (art, out, needle) in [
        (&chain, t.join("o1"), "pfx/lib/esc"),
        (&mid, t.join("o2"), "symlink inside prefix"),
        (
            &inner,
            t.join("alias/lib/out"),
            "inside the artifact directory",
        ),
    ] {
        let o = split(art, "p", &out, &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", art.display());
        assert!(err.contains(needle), "{err}");
        assert!(!out.join("p_generic").exists(), "{}", out.display());
    }
}

/// Hardening item 9: a split killed in the middle of committing into an
/// existing output directory (after 0, 1, … renames; `abort`, so no cleanup
/// runs, as with `kill -9`) never leaves a subset of its outputs for good:
/// the next split into that directory rolls the interrupted commit forward,
/// so the directory ends up with every output, byte-identical to a clean run,
/// and no staging leftovers.
#[test]
fn split_killed_during_commit_rolls_forward() {
    let tmp = tempdir();
    let parent = fixture_shard("gfx120X-build");
    let args = |out: &Path| -> Vec<String> {
        [
            "split",
            "--batch-artifact-parent-dir",
            s(&parent),
            "--output-dir",
            s(out),
            "--split-databases",
            "rocblas",
            "hipblaslt",
            "aotriton",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let reference = tmp.path().join("ref");
    fs::create_dir(&reference).unwrap();
    let a = args(&reference);
    assert_ok(&kpack(&a.iter().map(String::as_str).collect::<Vec<_>>()));
    let n_out = dir_names(&reference).len();
    assert!(n_out >= 5, "{n_out}");
    let want = snapshot(&reference);
    for k in 0..n_out {
        let out = tmp.path().join(format!("o{k}"));
        fs::create_dir(&out).unwrap();
        fs::write(out.join("unrelated.txt"), b"kept").unwrap();
        let a = args(&out);
        let o = Command::new(KPACK)
            .args(&a)
            .env("ROCPACK_FAULT_COMMIT_AFTER", k.to_string())
            .output()
            .unwrap();
        assert!(!o.status.success(), "fault {k} did not fire");
        let present = dir_names(&out).len() - 1;
        assert_eq!(present, k, "after {k} renames");
        // The next split into the directory completes the commit first;
        // every output then exists, so this run itself refuses to overwrite.
        let again = kpack(&a.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
        assert!(
            stderr(&again).contains("already exists"),
            "{}",
            stderr(&again)
        );
        fs::remove_file(out.join("unrelated.txt")).unwrap();
        assert_eq!(snapshot(&out), want, "fault after {k} renames");
        let leftovers: Vec<_> = dir_names(tmp.path())
            .into_iter()
            .filter(|n| n.contains(".partial-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

/// Every bundle of a fat ELF, as bytes.
fn bundles_of(data: &[u8]) -> Vec<Vec<u8>> {
    let info = rocpack_elf::analyze(data).unwrap();
    (0..info.bundles.len())
        .map(|i| rocpack_elf::bundle_bytes(data, &info, i).unwrap().to_vec())
        .collect()
}

/// Issue 10, reassembly: every fixture fat ELF (uncompressed and CCOB
/// bundles, several TUs, `-fgpu-rdc`, generic targets, lld/RELR/non-PIE
/// layouts), split by `kpack split` with zstd and with `none` archives,
/// comes back from `kpack reassemble` with each bundle as the input's:
/// container format, CCOB version and method, and the (decompressed)
/// bundle byte for byte — entry IDs, entry order, offsets, code objects.
/// (A CCOB's compressed stream may differ: clang's zstd parameters are
/// not recorded.)
#[test]
fn reassemble_restores_every_fixture_bundle_exactly() {
    require_fixtures();
    let tmp = tempdir();
    let art = tmp.path().join("fx_lib_gfxall");
    let lib = art.join("hip/lib");
    fs::create_dir_all(&lib).unwrap();
    let mut names = Vec::new();
    let mut all: Vec<PathBuf> = fs::read_dir(fatbins())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    all.sort();
    for p in all {
        let d = fs::read(&p).unwrap();
        let fat = d.starts_with(b"\x7fELF")
            && rocpack_elf::analyze(&d).is_ok_and(|i| i.has_device_code());
        if fat {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            fs::write(lib.join(&name), &d).unwrap();
            names.push(name);
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    assert_reassembles_exactly(tmp.path(), &art, &names);
}

/// Splits `art` (files `names` under `hip/lib`) with zstd and with `none`
/// archives, reassembles each file and compares every bundle with the
/// input's: container format, CCOB version and method, and the
/// (decompressed) bundle byte for byte.
fn assert_reassembles_exactly(tmp: &Path, art: &Path, names: &[String]) {
    let lib = art.join("hip/lib");
    write(&art.join("artifact_manifest.txt"), b"hip\n");
    for comp in ["zstd", "none"] {
        let out = tmp.join(format!("o-{comp}"));
        assert_ok(&split(art, "fx_lib", &out, &["--compression", comp]));
        for name in names {
            let host = out.join("fx_lib_generic/hip/lib").join(name);
            let back = tmp.join(format!("back-{comp}-{name}"));
            assert_ok(&kpack(&[
                "reassemble",
                "--host",
                s(&host),
                "--kpack-dir",
                s(&out),
                "-o",
                s(&back),
            ]));
            let want = bundles_of(&fs::read(lib.join(name)).unwrap());
            let got = bundles_of(&fs::read(&back).unwrap());
            assert_eq!(got.len(), want.len(), "{comp} {name}: bundle count");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let what = format!("{comp} {name}: bundle {i}");
                let (pg, pw) = (
                    rocpack_bundle::parse_bundle(g).unwrap(),
                    rocpack_bundle::parse_bundle(w).unwrap(),
                );
                assert_eq!(pg.format, pw.format, "{what}: container format");
                match (&pg.decompressed, &pw.decompressed) {
                    // CCOB: same version and method (above), and the
                    // decompressed bundle byte for byte (entry IDs, order,
                    // offsets, code objects; the stored hash covers it).
                    (Some(a), Some(b)) => assert!(a == b, "{what}: decompressed bundle differs"),
                    _ => assert!(g == w, "{what}: bundle bytes differ"),
                }
            }
        }
    }
}

/// Issue 10, reassembly of every container the fixtures' clang does not
/// write: a fixture object's bundle re-encoded as CCOB v1, v2 and v3, with
/// zlib and with zstd (rocpack_bundle's writer, which clang-offload-bundler
/// 19 reads back for v1/v2), put back with `objcopy --update-section` and
/// linked into a shared library with `cc -shared`; the object and the
/// library each split and reassemble to the same container and bytes.
#[test]
fn reassemble_restores_ccob_v1_v2_v3_zlib_and_zstd() {
    require_fixtures();
    let tmp = tempdir();
    let work = tmp.path().join("work");
    fs::create_dir_all(&work).unwrap();
    let run = |cmd: &mut Command| {
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
    };
    run(Command::new("ar")
        .current_dir(&work)
        .arg("x")
        .arg(fatbins().join("libfx_static.a"))
        .arg("kern_a.o"));
    run(Command::new("objcopy").current_dir(&work).args([
        "--dump-section",
        ".hip_fatbin=raw.bin",
        "kern_a.o",
    ]));
    let raw = fs::read(work.join("raw.bin")).unwrap();
    assert!(raw.starts_with(b"__CLANG_OFFLOAD_BUNDLE__"));
    let art = tmp.path().join("fx_lib_gfxall");
    let lib = art.join("hip/lib");
    fs::create_dir_all(&lib).unwrap();
    let mut names = Vec::new();
    for (v, m) in [
        (1, rocpack_bundle::Method::Zlib),
        (1, rocpack_bundle::Method::Zstd),
        (2, rocpack_bundle::Method::Zlib),
        (3, rocpack_bundle::Method::Zlib),
        (3, rocpack_bundle::Method::Zstd),
    ] {
        let tag = format!("v{v}_{}", m.name());
        let ccob = rocpack_bundle::write_ccob(&raw, v, m).unwrap();
        fs::write(work.join(format!("{tag}.bin")), &ccob).unwrap();
        let obj = format!("kern_{tag}.o");
        run(Command::new("objcopy").current_dir(&work).args([
            "--update-section",
            &format!(".hip_fatbin={tag}.bin"),
            "kern_a.o",
            &obj,
        ]));
        let so = format!("libkern_{tag}.so");
        run(Command::new("cc")
            .current_dir(&work)
            .args(["-shared", "-o", &so, &obj]));
        for f in [obj, so] {
            let d = fs::read(work.join(&f)).unwrap();
            let b = bundles_of(&d);
            assert_eq!(b.len(), 1, "{f}");
            let p = rocpack_bundle::parse_bundle(&b[0]).unwrap();
            assert_eq!(
                p.format,
                rocpack_bundle::Format::Ccob {
                    version: v,
                    method: m
                },
                "{f}"
            );
            fs::write(lib.join(&f), &d).unwrap();
            names.push(f);
        }
    }
    assert_reassembles_exactly(tmp.path(), &art, &names);
}
