//! Round trip through the real clang-offload-bundler (clang-tools-19):
//! bundles we write must list and unbundle to identical bytes.
//! Skipped with a note when the tool is missing, unless env CI is set.

use rocpack_testsupport as common;

use std::path::{Path, PathBuf};
use std::process::Command;

use rocpack_bundle::*;

fn bundler() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("CLANG_OFFLOAD_BUNDLER").map(PathBuf::from),
        Some(PathBuf::from("/usr/lib/llvm-19/bin/clang-offload-bundler")),
    ];
    for c in candidates.into_iter().flatten() {
        if c.is_file() {
            return Some(c);
        }
    }
    if std::env::var_os("CI").is_some() {
        panic!("clang-offload-bundler (clang-tools-19) is required in CI but missing");
    }
    eprintln!("NOTE: clang-offload-bundler not found; skipping the round-trip test (apt-get install clang-tools-19)");
    None
}

const DEVICE: &[&str] = &[
    "hipv4-amdgcn-amd-amdhsa--gfx1100",
    "hipv4-amdgcn-amd-amdhsa--gfx1201",
    "hipv4-amdgcn-amd-amdhsa--gfx906",
    "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
    "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
];

fn entries() -> Vec<(String, Vec<u8>)> {
    let mut v = vec![("host-x86_64-unknown-linux--".to_string(), Vec::new())];
    for (i, id) in DEVICE.iter().enumerate() {
        v.push((
            id.to_string(),
            common::pseudo_random(i as u64 + 10, 3000 + 1111 * i),
        ));
    }
    v
}

fn unbundle_and_compare(tool: &Path, dir: &Path, input: &Path, want: &[(String, Vec<u8>)]) {
    let list = Command::new(tool)
        .args(["--list", "--type=o"])
        .arg(format!("--input={}", input.display()))
        .output()
        .unwrap();
    assert!(
        list.status.success(),
        "--list {}: {}",
        input.display(),
        String::from_utf8_lossy(&list.stderr)
    );
    let mut listed: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    listed.sort();
    let mut ids: Vec<String> = want.iter().map(|(i, _)| i.clone()).collect();
    ids.sort();
    assert_eq!(listed, ids, "--list {}", input.display());

    let devices: Vec<&(String, Vec<u8>)> = want
        .iter()
        .filter(|(i, _)| !i.starts_with("host"))
        .collect();
    let mut cmd = Command::new(tool);
    cmd.args(["--unbundle", "--type=o"])
        .arg(format!("--input={}", input.display()));
    let targets: Vec<&str> = devices.iter().map(|(i, _)| i.as_str()).collect();
    cmd.arg(format!("--targets={}", targets.join(",")));
    let outs: Vec<PathBuf> = (0..devices.len())
        .map(|i| dir.join(format!("out{i}.co")))
        .collect();
    for o in &outs {
        cmd.arg(format!("--output={}", o.display()));
    }
    let r = cmd.output().unwrap();
    assert!(
        r.status.success(),
        "--unbundle {}: {}",
        input.display(),
        String::from_utf8_lossy(&r.stderr)
    );
    for ((id, data), o) in devices.iter().zip(&outs) {
        let got = std::fs::read(o).unwrap();
        assert!(
            got == *data,
            "{}: {id} differs after unbundling ({} vs {} bytes)",
            input.display(),
            got.len(),
            data.len()
        );
    }
    // host entry (LLVM 19 only accepts it without the trailing `--`)
    let host = dir.join("host.bin");
    let r = Command::new(tool)
        .args([
            "--unbundle",
            "--type=o",
            "--targets=host-x86_64-unknown-linux",
        ])
        .arg(format!("--input={}", input.display()))
        .arg(format!("--output={}", host.display()))
        .output()
        .unwrap();
    assert!(
        r.status.success(),
        "host unbundle: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(std::fs::read(&host).unwrap().len(), 0);
}

#[test]
fn clang_offload_bundler_accepts_our_bundles() {
    let Some(tool) = bundler() else { return };
    let dir = tempfile::tempdir().unwrap();
    let want = entries();
    let raw = write_uncompressed(&want);
    let mut cases: Vec<(String, Vec<u8>)> = vec![("uncompressed".into(), raw.clone())];
    cases.push(("unaligned".into(), write_uncompressed_aligned(&want, 1)));
    for method in [Method::Zstd, Method::Zlib] {
        cases.push((
            format!("ccob-v2-{method}"),
            write_ccob(&raw, 2, method).unwrap(),
        ));
        cases.push((
            format!("ccob-v1-{method}"),
            write_ccob(&raw, 1, method).unwrap(),
        ));
    }
    for (name, bytes) in &cases {
        let p = dir.path().join(format!("{name}.bundle"));
        std::fs::write(&p, bytes).unwrap();
        unbundle_and_compare(&tool, dir.path(), &p, &want);
    }
    // CCOB v3 (64-bit sizes) is newer than LLVM 19: its bundler reads the
    // header as v2 and fails. Record that, so a toolchain that learns v3
    // shows up here (then add v3 to the cases above).
    let v3 = dir.path().join("v3.bundle");
    std::fs::write(&v3, write_ccob(&raw, 3, Method::Zstd).unwrap()).unwrap();
    let r = Command::new(&tool)
        .args(["--list", "--type=o"])
        .arg(format!("--input={}", v3.display()))
        .output()
        .unwrap();
    assert!(
        !r.status.success(),
        "this clang-offload-bundler accepts CCOB v3 now: test it"
    );
}

#[test]
fn clang_offload_bundler_output_parses_identically() {
    // The other direction: clang bundles (uncompressed and -compress) are
    // read back to the exact inputs.
    let Some(tool) = bundler() else { return };
    let dir = tempfile::tempdir().unwrap();
    let want = entries();
    let mut inputs = vec![];
    let mut targets = vec![];
    for (i, (id, data)) in want.iter().enumerate() {
        let p = dir.path().join(format!("in{i}"));
        std::fs::write(&p, data).unwrap();
        inputs.push(p);
        targets.push(id.trim_end_matches("--").to_string());
    }
    for (name, extra) in [("plain", vec![]), ("compressed", vec!["-compress"])] {
        let out = dir.path().join(format!("{name}.bundle"));
        let mut cmd = Command::new(&tool);
        cmd.args(["--type=o", "-bundle-align=4096"])
            .arg(format!("--targets={}", targets.join(",")))
            .arg(format!("--output={}", out.display()))
            .args(&extra);
        for p in &inputs {
            cmd.arg(format!("--input={}", p.display()));
        }
        let r = cmd.output().unwrap();
        assert!(
            r.status.success(),
            "bundle {name}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        let bytes = std::fs::read(&out).unwrap();
        let opts = ParseOptions {
            verify_hash: true,
            ..Default::default()
        };
        let b = parse_bundle_with(&bytes, &opts).unwrap();
        assert_eq!(b.len, bytes.len() as u64, "{name}");
        for (id, data) in &want {
            if id.starts_with("host") {
                continue;
            }
            let e = b
                .entries
                .iter()
                .find(|e| e.id.as_str() == id)
                .unwrap_or_else(|| panic!("{name}: {id} missing"));
            assert!(*e.data == data[..], "{name}: {id}");
        }
        if name == "plain" {
            // our writer reproduces clang's uncompressed layout byte for byte
            let ours: Vec<(&str, &[u8])> = b
                .entries
                .iter()
                .map(|e| (e.id.as_str(), &*e.data))
                .collect();
            assert_eq!(
                write_uncompressed(&ours),
                bytes,
                "uncompressed layout differs from clang's"
            );
        }
    }
}

/// What `kpack inspect` follows by default (docs/cli/inspect-json.md):
/// clang-offload-bundler unbundles a CCOB whose stored hash is wrong without
/// a word, and compares the hash only with `-verbose`.
#[test]
fn clang_checks_the_ccob_hash_only_when_verbose() {
    let Some(tool) = bundler() else { return };
    let dir = tempfile::tempdir().unwrap();
    let want = entries();
    let mut ccob = write_ccob(&write_uncompressed(&want), 2, Method::Zstd).unwrap();
    // v2 header: magic, version, method, total size, uncompressed size, hash.
    ccob[16] ^= 0xff;
    let p = dir.path().join("bad-hash.bundle");
    std::fs::write(&p, &ccob).unwrap();
    unbundle_and_compare(&tool, dir.path(), &p, &want);
    let r = Command::new(&tool)
        .args(["--unbundle", "--verbose", "--type=o"])
        .arg(format!("--input={}", p.display()))
        .arg(format!("--targets={}", DEVICE[0]))
        .arg(format!("--output={}", dir.path().join("v.co").display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("Hashes match: No"), "{err}");
}

/// `write_ccob_long` (what `kpack reassemble` falls back to when a bundle
/// must shrink to fit): repeats farther apart than the level's own window
/// are found, and clang-offload-bundler reads the result back exactly.
#[test]
fn long_distance_ccobs_are_smaller_and_clang_reads_them() {
    let Some(tool) = bundler() else { return };
    let dir = tempfile::tempdir().unwrap();
    // One 12 MiB code object per target, the same bytes: the repeats are
    // 12 MiB apart, beyond level 9's 8 MiB window.
    let blob = common::pseudo_random(99, 12 << 20);
    let mut want = vec![("host-x86_64-unknown-linux--".to_string(), Vec::new())];
    want.extend(DEVICE[..3].iter().map(|id| (id.to_string(), blob.clone())));
    let raw = write_uncompressed(&want);
    let plain = write_ccob_level(&raw, 2, Method::Zstd, 9).unwrap();
    let long = write_ccob_long(&raw, 2, Method::Zstd, 9).unwrap();
    assert!(
        long.len() * 2 < plain.len(),
        "long {} vs plain {}",
        long.len(),
        plain.len()
    );
    let p = dir.path().join("long.bundle");
    std::fs::write(&p, &long).unwrap();
    unbundle_and_compare(&tool, dir.path(), &p, &want);
}
