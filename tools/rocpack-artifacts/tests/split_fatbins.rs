//! Library-level split over an artifact directory built from every fixture
//! fat binary (shared libraries, PIE / non-PIE / RELR executables, static
//! archives, `-fgpu-rdc`, compressed, multi-TU, generic targets): every
//! `.kpack` holds exactly the code objects `expected-unbundle.tsv` lists,
//! under `<kernel_name>#<bundle index>`, and nothing else.

use std::collections::BTreeMap;
use std::fs;
use std::sync::atomic::Ordering;

use rocpack_artifacts::split::{split_artifact, CountingProgress, SplitOptions};
use rocpack_testsupport::{fixtures, sha256_hex};

const PREFIX: &str = "hip/stage";

/// (fixture file, path below the prefix)
const FILES: &[(&str, &str)] = &[
    ("fx_app", "bin/fx_app"),
    ("fx_app_nopie", "bin/fx_app_nopie"),
    ("fx_app_relr", "bin/fx_app_relr"),
    ("libfx_clang15.so", "lib/libfx_clang15.so"),
    ("libfx_generic.so", "lib/libfx_generic.so"),
    ("libfx_mixed.so", "lib/libfx_mixed.so"),
    ("libfx_multi.so", "lib/libfx_multi.so"),
    ("libfx_multi_compressed.so", "lib/libfx_multi_compressed.so"),
    ("libfx_multi_lld.so", "lib/libfx_multi_lld.so"),
    ("libfx_multi_stripped.so", "lib/libfx_multi_stripped.so"),
    ("libfx_rdc.so", "lib/libfx_rdc.so"),
    ("libfx_relr.so", "lib/libfx_relr.so"),
    ("libfx_two_tu.so", "lib/libfx_two_tu.so"),
    ("libfx_static.a", "lib/static/libfx_static.a"),
    ("libfx_rdc.a", "lib/static/libfx_rdc.a"),
    ("libfx_hostonly.so", "lib/libfx_hostonly.so"),
];

#[test]
fn every_fixture_binary_splits_into_the_expected_code_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let art = tmp.path().join("hip_lib_gfxall");
    for (src, rel) in FILES {
        let dst = art.join(PREFIX).join(rel);
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::copy(fixtures().join("fatbins").join(src), &dst).unwrap();
    }
    fs::write(
        art.join("artifact_manifest.txt"),
        format!("{PREFIX}\nnot/there\n"),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let opts = SplitOptions {
        compression: rocpack_kpack::Compression::zstd(),
        jobs: Some(2),
        ..SplitOptions::new(art.clone(), "hip_lib", out.clone())
    };
    let progress = CountingProgress::default();
    let report = split_artifact(&opts, &progress).unwrap();
    assert_eq!(report.missing_prefixes, ["not/there"]);
    assert_eq!(report.prefixes, [PREFIX]);

    // Expected: (kpack arch, toc key) -> sha256 for every device entry.
    let tsv = fs::read_to_string(fixtures().join("expected-unbundle.tsv")).unwrap();
    let mut expected = BTreeMap::new();
    for l in tsv.lines().skip(1) {
        let c: Vec<&str> = l.split('\t').collect();
        let Some(name) = c[0].strip_prefix("fatbins/") else {
            continue;
        };
        if c[7].starts_with("host") || c[4] == "elf-sections" || c[4] == "hetero-archive" {
            continue;
        }
        let (file, member) = match name.split_once('(') {
            Some((f, m)) => (f, Some(m.trim_end_matches(')'))),
            None => (name, None),
        };
        let rel = FILES.iter().find(|(s, _)| *s == file).unwrap().1;
        let kernel = match member {
            Some(m) => format!("{PREFIX}/{rel}({m})"),
            None => format!("{PREFIX}/{rel}"),
        };
        let arch = c[7].rsplit_once("--").unwrap().1.to_string();
        expected.insert((arch, format!("{kernel}#{}", c[1])), c[8].to_string());
    }
    assert!(expected.len() > 70, "{}", expected.len());

    let mut found = BTreeMap::new();
    for a in &report.arch_artifacts {
        for k in &a.kpacks {
            let r = rocpack_kpack::KpackReader::open(out.join(&k.path)).unwrap();
            assert_eq!(r.gfx_arches(), std::slice::from_ref(&a.arch));
            assert_eq!(r.group_name(), "hip_lib");
            for (key, arch) in r.kernels() {
                let co = r.get(key, arch).unwrap();
                let sha = sha256_hex(&co);
                found.insert((arch.to_string(), key.to_string()), sha);
            }
        }
    }
    assert_eq!(found, expected);
    assert_eq!(
        progress.done.load(Ordering::Relaxed) as usize,
        FILES.len() + expected.len()
    );

    // Host-only, RDC archive (bitcode, no .hip_fatbin) pass through unchanged.
    let generic = out.join("hip_lib_generic").join(PREFIX);
    for (src, rel) in [
        ("libfx_hostonly.so", "lib/libfx_hostonly.so"),
        ("libfx_rdc.a", "lib/static/libfx_rdc.a"),
    ] {
        assert_eq!(
            fs::read(generic.join(rel)).unwrap(),
            fs::read(fixtures().join("fatbins").join(src)).unwrap(),
            "{rel}"
        );
    }
    // Every other binary became smaller and holds no bundle magic.
    for (src, rel) in FILES
        .iter()
        .filter(|(s, _)| !s.contains("hostonly") && !s.contains("rdc.a"))
    {
        let host = fs::read(generic.join(rel)).unwrap();
        let orig = fs::read(fixtures().join("fatbins").join(src)).unwrap();
        assert!(
            host.len() < orig.len(),
            "{rel}: {} >= {}",
            host.len(),
            orig.len()
        );
        assert!(
            !host.windows(24).any(|w| w == b"__CLANG_OFFLOAD_BUNDLE__"),
            "{rel}: bundle left"
        );
    }
    // Executables stay executable.
    use std::os::unix::fs::PermissionsExt;
    let m = fs::metadata(generic.join("bin/fx_app"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        m & 0o111,
        0o111
            & fs::metadata(fixtures().join("fatbins/fx_app"))
                .unwrap()
                .permissions()
                .mode()
    );
}

/// A fat binary the ELF reader cannot handle (odd `e_type`, PN_XNUM
/// program headers) must fail the split naming the file, never be copied
/// into the generic package with its device code.
#[test]
fn unreadable_fat_elf_fails_the_split() {
    for (what, patch) in [
        ("e_type", (16usize, 4u16)),    // ET_CORE
        ("PN_XNUM", (56usize, 0xffff)), // e_phnum
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let art = tmp.path().join("hip_lib_gfxall");
        let dst = art.join(PREFIX).join("lib/libfx_multi.so");
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        let mut d = fs::read(fixtures().join("fatbins/libfx_multi.so")).unwrap();
        d[patch.0..patch.0 + 2].copy_from_slice(&patch.1.to_le_bytes());
        fs::write(&dst, d).unwrap();
        fs::write(art.join("artifact_manifest.txt"), format!("{PREFIX}\n")).unwrap();
        let out = tmp.path().join("out");
        let opts = SplitOptions {
            compression: rocpack_kpack::Compression::None,
            jobs: Some(1),
            ..SplitOptions::new(art.clone(), "hip_lib", out.clone())
        };
        let err = split_artifact(&opts, &CountingProgress::default())
            .expect_err(what)
            .to_string();
        assert!(err.contains("libfx_multi.so"), "{what}: {err}");
        assert!(
            !out.join("hip_lib_generic").exists(),
            "{what}: partial output"
        );
    }
}

/// `ar q` can store two members of one name; each gets its own kernel name
/// (`lib.a(kern.o)`, `lib.a(kern.o;2)`), so both split and resolve.
#[test]
fn archive_with_two_members_of_one_name_splits() {
    use std::process::Command;
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("w");
    fs::create_dir_all(&work).unwrap();
    let run = |args: &[&str]| {
        let st = Command::new("ar")
            .args(args)
            .current_dir(&work)
            .status()
            .expect("ar (binutils)");
        assert!(st.success(), "ar {args:?}");
    };
    fs::copy(fixtures().join("fatbins/libfx_static.a"), work.join("s.a")).unwrap();
    run(&["x", "s.a"]);
    run(&["q", "dup.a", "kern_a.o"]);
    fs::copy(work.join("kern_b.o"), work.join("kern_a.o")).unwrap();
    run(&["q", "dup.a", "kern_a.o"]);
    let art = tmp.path().join("x_lib");
    fs::create_dir_all(art.join("lib")).unwrap();
    fs::copy(work.join("dup.a"), art.join("lib/dup.a")).unwrap();
    fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
    let out = tmp.path().join("o");
    let opts = SplitOptions {
        compression: rocpack_kpack::Compression::None,
        jobs: Some(1),
        ..SplitOptions::new(art, "x_lib", out.clone())
    };
    split_artifact(&opts, &CountingProgress::default()).unwrap();
    let r =
        rocpack_kpack::KpackReader::open(out.join("x_lib_gfx1100/lib/.kpack/x_lib_gfx1100.kpack"))
            .unwrap();
    let keys: Vec<&str> = r.kernels().map(|(k, _)| k).collect();
    assert_eq!(keys, ["lib/dup.a(kern_a.o)#0", "lib/dup.a(kern_a.o;2)#0"]);
    let v = rocpack_artifacts::verify::verify(
        &rocpack_artifacts::verify::VerifyOptions {
            artifacts_dir: out,
            ..Default::default()
        },
        &mut |_| {},
    )
    .unwrap();
    assert!(
        v.ok && v.lookups_resolved == v.lookups && v.lookups > 0,
        "{v:#?}"
    );
}

/// Issue 10: layout problems are reported before any bundle is
/// decompressed. A compressed fixture whose CCOB payload is damaged splits
/// with a decompression error; the same file whose last PT_LOAD is also no
/// longer congruent (p_vaddr moved by 8) fails on the layout instead: the
/// rewrite looked at the segments first and never reached the payload.
#[test]
fn layout_errors_come_before_any_decompression() {
    let base = fs::read(fixtures().join("fatbins/libfx_multi_compressed.so")).unwrap();
    let fb = ccob_offset(&base);
    let mut damaged = base.clone();
    for b in &mut damaged[fb + 64..fb + 256] {
        *b ^= 0x5a;
    }
    let mut both = damaged.clone();
    // Program header 3 (the RW PT_LOAD): p_vaddr and p_paddr + 8.
    let ph = 64 + 3 * 56;
    assert_eq!(u32::from_le_bytes(both[ph..ph + 4].try_into().unwrap()), 1);
    for at in [ph + 16, ph + 24] {
        let v = u64::from_le_bytes(both[at..at + 8].try_into().unwrap()) + 8;
        both[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    let run = |data: &[u8]| {
        let tmp = tempfile::tempdir().unwrap();
        let art = tmp.path().join("hip_lib_gfxall");
        let dst = art.join(PREFIX).join("lib/libfx.so");
        fs::create_dir_all(dst.parent().unwrap()).unwrap();
        fs::write(&dst, data).unwrap();
        fs::write(art.join("artifact_manifest.txt"), format!("{PREFIX}\n")).unwrap();
        let opts = SplitOptions {
            jobs: Some(1),
            ..SplitOptions::new(art.clone(), "hip_lib", tmp.path().join("out"))
        };
        split_artifact(&opts, &CountingProgress::default())
            .expect_err("must fail")
            .to_string()
    };
    let payload_err = run(&damaged);
    assert!(!payload_err.contains("congruent"), "{payload_err}");
    let layout_err = run(&both);
    assert!(layout_err.contains("libfx.so"), "{layout_err}");
    assert!(
        layout_err.contains("congruent") || layout_err.contains("layout"),
        "{layout_err}"
    );
    assert_ne!(payload_err, layout_err);
}

fn ccob_offset(d: &[u8]) -> usize {
    d.windows(4)
        .position(|w| w == b"CCOB")
        .expect("a CCOB bundle")
}
