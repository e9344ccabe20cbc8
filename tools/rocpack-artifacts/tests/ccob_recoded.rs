//! Fixture binaries whose bundles are re-encoded as CCOBs ([`recoded`]).
//!
//! Split: the bundles of one fat binary are walked in parallel (a CCOB
//! decompressed once, its code objects decoded straight into the buffers
//! that are compressed, or spilled raw for `--compression none`), and the
//! result does not depend on the thread count: CCOBs of v3 zstd, v2 zlib
//! and v1 zstd (one with a target dropped by `--exclude-arch`) split into
//! byte-identical trees with 1, 2 and 4 jobs, for both compressions, and
//! every archive entry holds the code object the in-memory parser finds in
//! the input.
//!
//! Reassembly: the host takes the bundles' total, so a rebuilt bundle
//! larger than its original is kept while the others leave room; it is not
//! compressed again.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use rocpack_artifacts::reassemble::reassemble;
use rocpack_artifacts::split::{split_artifact, CountingProgress, SplitOptions};
use rocpack_bundle::Compression as Method;
use rocpack_testsupport::fixtures;

const PREFIX: &str = "lib";

/// `base` with every bundle re-encoded by `encode` (zero-padded to its
/// old size).
fn recoded(base: &[u8], encode: &dyn Fn(usize, &[u8]) -> Vec<u8>) -> Vec<u8> {
    let info = rocpack_elf::analyze(base).unwrap();
    let bundles: Vec<Vec<u8>> = info
        .bundles
        .iter()
        .map(|b| {
            let bytes = rocpack_elf::bundle_bytes(base, &info, b.index).unwrap();
            let parsed = rocpack_bundle::parse_bundle(bytes).unwrap();
            let raw = match &parsed.decompressed {
                Some(d) => d.to_vec(),
                None => bytes[..parsed.len as usize].to_vec(),
            };
            // Zero padding after it keeps the section's layout (the
            // rewrite does not move what follows `.hip_fatbin`).
            let mut enc = encode(b.index, &raw);
            assert!(enc.len() <= bytes.len());
            enc.resize(bytes.len(), 0);
            enc
        })
        .collect();
    let host = rocpack_elf::split_host(base, b"test").unwrap();
    rocpack_elf::reassemble(&host, &bundles).unwrap()
}

/// Every regular file under `root`, by relative path.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                let bytes = if t.is_symlink() {
                    fs::read_link(e.path())
                        .unwrap()
                        .display()
                        .to_string()
                        .into_bytes()
                } else {
                    fs::read(e.path()).unwrap()
                };
                out.insert(rel, bytes);
            }
        }
    }
    out
}

/// (TOC key, target ID) -> code object, for every device entry of `files`.
fn expected(files: &[(String, Vec<u8>)]) -> BTreeMap<(String, String), Vec<u8>> {
    let mut want = BTreeMap::new();
    for (rel, data) in files {
        let info = rocpack_elf::analyze(data).unwrap();
        for b in &info.bundles {
            let bytes = rocpack_elf::bundle_bytes(data, &info, b.index).unwrap();
            let parsed = rocpack_bundle::parse_bundle(bytes).unwrap();
            for e in parsed.device_entries() {
                let key = rocpack_kpack::toc_key(&format!("{PREFIX}/{rel}"), b.index as u64);
                want.insert((key, e.id.target_id().to_string()), e.data.to_vec());
            }
        }
    }
    want
}

#[test]
fn ccob_bundles_split_identically_for_any_job_count() {
    let tmp = tempfile::tempdir().unwrap();
    let fat = |n: &str| fs::read(fixtures().join("fatbins").join(n)).unwrap();
    let two = fat("libfx_two_tu.so");
    let files: Vec<(String, Vec<u8>)> = vec![
        (
            "libtwo_v3.so".into(),
            recoded(&two, &|_, raw| {
                rocpack_bundle::write_ccob(raw, 3, Method::Zstd).unwrap()
            }),
        ),
        (
            "libtwo_mixed.so".into(),
            recoded(&two, &|i, raw| match i {
                0 => rocpack_bundle::write_ccob(raw, 2, Method::Zlib).unwrap(),
                _ => rocpack_bundle::write_ccob(raw, 1, Method::Zstd).unwrap(),
            }),
        ),
        ("libfx_mixed.so".into(), fat("libfx_mixed.so")),
        (
            "libfx_multi_compressed.so".into(),
            fat("libfx_multi_compressed.so"),
        ),
    ];
    let art = tmp.path().join("art");
    for (rel, data) in &files {
        let p = art.join(PREFIX).join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }
    fs::write(art.join("artifact_manifest.txt"), format!("{PREFIX}\n")).unwrap();
    let want = expected(&files);
    assert!(want.len() > 20, "{}", want.len());
    let dropped = "gfx1101";
    for compression in [
        rocpack_kpack::Compression::zstd(),
        rocpack_kpack::Compression::None,
    ] {
        let mut first: Option<BTreeMap<String, Vec<u8>>> = None;
        for jobs in [1, 2, 4] {
            let out = tmp.path().join(format!("out-{compression:?}-{jobs}"));
            let opts = SplitOptions {
                compression,
                jobs: Some(jobs),
                exclude_arch: vec![dropped.into()],
                ..SplitOptions::new(art.clone(), "t", out.clone())
            };
            split_artifact(&opts, &CountingProgress::default()).unwrap();
            let t = tree(&out);
            // Every kept code object, with the parser's bytes; nothing else.
            let mut seen = 0;
            for (rel, bytes) in &t {
                if !rel.ends_with(".kpack") {
                    continue;
                }
                let r = rocpack_kpack::KpackReader::from_bytes(bytes).unwrap();
                for (key, arch) in r.kernels() {
                    let got = r.get(key, arch).unwrap();
                    let w = &want[&(key.to_string(), arch.to_string())];
                    assert!(got[..] == w[..], "{rel}: {key} {arch}");
                    assert_ne!(arch, dropped);
                    seen += 1;
                }
            }
            let kept = want.keys().filter(|(_, a)| a != dropped).count();
            assert_eq!(seen, kept, "{compression:?} jobs {jobs}");
            match &first {
                None => first = Some(t),
                Some(f) => assert!(f == &t, "{compression:?}: jobs {jobs} differs from jobs 1"),
            }
        }
    }
}

/// (`total_size` of the CCOB, its decompressed bundle) of every bundle of
/// the ELF file `data`.
fn ccobs(data: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let info = rocpack_elf::analyze(data).unwrap();
    info.bundles
        .iter()
        .map(|b| {
            let bytes = rocpack_elf::bundle_bytes(data, &info, b.index).unwrap();
            assert!(bytes.starts_with(b"CCOB"), "bundle {}", b.index);
            let parsed = rocpack_bundle::parse_bundle(bytes).unwrap();
            (parsed.len, parsed.decompressed.unwrap().to_vec())
        })
        .collect()
}

/// Bundle 1 was compressed harder (level 19, long matching) than the first
/// effort rebuilds it, bundle 0 more lightly (level 1); each slot is padded
/// to the uncompressed size, so the section has room for both at the first
/// effort. Bundle 0 is the heavier one: the first bundles built, the ones
/// that speak for the rest, are no larger than their originals. Both come
/// back at the first effort, bundle 1 larger than its original (squeezing
/// it again on its own would cost a second compression for nothing), and
/// each decompresses to the original bundle.
#[test]
fn a_rebuilt_bundle_larger_than_its_original_is_kept_when_the_total_fits() {
    let tmp = tempfile::tempdir().unwrap();
    let two = fs::read(fixtures().join("fatbins/libfx_two_tu.so")).unwrap();
    let fat = recoded(&two, &|i, raw| match i {
        0 => rocpack_bundle::write_ccob_level(raw, 3, Method::Zstd, 1).unwrap(),
        _ => rocpack_bundle::write_ccob_long(raw, 3, Method::Zstd, 19).unwrap(),
    });
    let art = tmp.path().join("art");
    fs::create_dir_all(art.join(PREFIX)).unwrap();
    fs::write(art.join(PREFIX).join("libtwo.so"), &fat).unwrap();
    fs::write(art.join("artifact_manifest.txt"), format!("{PREFIX}\n")).unwrap();
    let out = tmp.path().join("split");
    let opts = SplitOptions::new(art.clone(), "t", out.clone());
    split_artifact(&opts, &CountingProgress::default()).unwrap();
    let back = tmp.path().join("back.so");
    let report = reassemble(
        &out.join("t_generic").join(PREFIX).join("libtwo.so"),
        &out,
        &back,
    )
    .unwrap();
    assert_eq!(report.effort, Some(0), "{report:?}");
    let (before, after) = (ccobs(&fat), ccobs(&fs::read(&back).unwrap()));
    assert_eq!(before.len(), 2);
    assert_eq!(after.len(), 2);
    for (i, ((_, a), (_, b))) in before.iter().zip(&after).enumerate() {
        assert!(a == b, "bundle {i} decompresses to another bundle");
    }
    assert!(after[0].0 < before[0].0, "{} {}", after[0].0, before[0].0);
    assert!(
        after[1].0 > before[1].0,
        "bundle 1: {} rebuilt bytes, {} original: squeezed again although the total fits",
        after[1].0,
        before[1].0
    );
}
