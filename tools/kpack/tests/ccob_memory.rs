//! Hardening item 7: compressed bundles cost neither memory nor output in
//! proportion to their payload or to how their entries overlap.
//!
//! A fat object (the first fat member of a fixture archive) whose CCOB payload is 256 MiB (24 GPU targets, built from a
//! fixture's code objects by our own bundle writer, `examples/mkfat.rs`) is
//! inspected and unbundled under a 160 MiB address-space ceiling
//! (`prlimit --as`): the payload cannot be held, so only a streaming reader
//! passes (before: the whole payload was decompressed into memory). Every
//! code object's sha256 is checked against the in-memory parser in this
//! process (an independent path). Overlapping bundle entries and
//! overlapping `.kpack` blobs are refused by unbundle/unpack instead of
//! writing the shared bytes once per entry, and inspect stays bounded.

#[path = "../examples/mkfat.rs"]
#[allow(dead_code)]
mod mkfat;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::*;

const CEILING: u64 = 160 << 20;

/// kpack under an address-space ceiling (one malloc arena, so thread
/// arenas do not reserve 64 MiB of address space each).
fn bounded(args: &[&str]) -> Output {
    under_vmem_limit(KPACK, CEILING >> 10)
        .args(args)
        .env("MALLOC_ARENA_MAX", "1")
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("kpack runs")
}

/// Per bundle entry ID: the sha256, size and target ID of its code object.
type Want = BTreeMap<String, (String, u64, String)>;

/// The large fat binary and, per entry ID, the sha256, size and target ID
/// of its code object according to the in-memory parser.
fn large_fat(dir: &Path) -> (PathBuf, Want) {
    let base = std::fs::read(fatbins().join("libfx_static.a")).unwrap();
    let (fat, _) = mkfat::make(&base, 256, 24).unwrap();
    let info = rocpack_elf::analyze(&fat).unwrap();
    let bytes = rocpack_elf::bundle_bytes(&fat, &info, 0).unwrap();
    let parsed = rocpack_bundle::parse_bundle(bytes).unwrap();
    assert!(parsed.ccob.is_some());
    assert!(parsed.decompressed.as_ref().unwrap().len() >= 256 << 20);
    let want = parsed
        .entries
        .iter()
        .filter(|e| !e.id.is_host())
        .map(|e| {
            let target = e.id.target_id().to_string();
            (e.id.to_string(), (sha256_hex(&e.data), e.size, target))
        })
        .collect();
    let path = dir.join("big.o");
    std::fs::write(&path, &fat).unwrap();
    (path, want)
}

#[test]
fn inspect_and_unbundle_of_a_large_ccob_stay_under_the_ceiling() {
    let tmp = tempdir();
    let (fat, want) = large_fat(tmp.path());
    assert_eq!(want.len(), 24);

    let o = bounded(&["inspect", "--json", "--check-hash", s(&fat)]);
    assert!(o.status.success(), "inspect: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let b = &v["bundles"][0];
    assert_eq!(b["format"], "ccob");
    assert_eq!(b["hash_matches"], true);
    let mut seen = 0;
    for c in b["code_objects"].as_array().unwrap() {
        if c["is_host"] == true {
            continue;
        }
        let (h, size, _) = &want[c["target"].as_str().unwrap()];
        assert_eq!(c["sha256"].as_str().unwrap(), h);
        assert_eq!(c["size"].as_u64().unwrap(), *size);
        seen += 1;
    }
    assert_eq!(seen, want.len());

    let out = tmp.path().join("un");
    let o = bounded(&["unbundle", s(&fat), "--output-dir", s(&out)]);
    assert!(o.status.success(), "unbundle: {}", stderr(&o));
    let lines = String::from_utf8(o.stdout).unwrap();
    assert_eq!(lines.lines().count(), want.len());
    for line in lines.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let (h, size, _) = &want[f[1]];
        let bytes = std::fs::read(f[0]).unwrap();
        assert_eq!(bytes.len() as u64, *size, "{line}");
        assert_eq!(&sha256_hex(&bytes), h, "{line}");
        assert_eq!(f[3], h, "{line}");
    }
}

/// A CCOB whose 400 entries all cover the same 1 MiB (partly shifted):
/// 400 MiB of "code objects" in a tiny file.
fn overlapping_ccob() -> Vec<u8> {
    let n = 400;
    let size = 1usize << 20;
    let ids: Vec<String> = (0..n)
        .map(|i| format!("hipv4-amdgcn-amd-amdhsa--gfx{}", 1000 + i))
        .collect();
    let table: usize = 32 + ids.iter().map(|id| 24 + id.len()).sum::<usize>();
    let at = table.div_ceil(4096) * 4096;
    let mut b = rocpack_bundle::BUNDLE_MAGIC.to_vec();
    b.extend_from_slice(&(n as u64).to_le_bytes());
    for (i, id) in ids.iter().enumerate() {
        b.extend_from_slice(&((at + i) as u64).to_le_bytes());
        b.extend_from_slice(&((size - i) as u64).to_le_bytes());
        b.extend_from_slice(&(id.len() as u64).to_le_bytes());
        b.extend_from_slice(id.as_bytes());
    }
    b.resize(at, 0);
    b.extend((0..size).map(|i| (i % 251) as u8));
    rocpack_bundle::write_ccob(&b, 3, rocpack_bundle::Compression::Zstd).unwrap()
}

#[test]
fn overlapping_bundle_entries_are_not_amplified() {
    let tmp = tempdir();
    let f = tmp.path().join("over.ccob");
    std::fs::write(&f, overlapping_ccob()).unwrap();
    let o = bounded(&["inspect", "--json", s(&f)]);
    assert!(o.status.success(), "inspect: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["notes"].to_string().contains("overlap"), "{}", v["notes"]);
    assert_eq!(
        v["bundles"][0]["code_objects"].as_array().unwrap().len(),
        400
    );
    // unbundle refuses: it would write ~400 MiB from a ~4 KiB file.
    let out = tmp.path().join("un");
    let o = bounded(&["unbundle", s(&f), "--output-dir", s(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("overlap"), "{}", stderr(&o));
    assert!(!out.exists());
    let left = dir_names(tmp.path());
    assert_eq!(left.len(), 1, "{left:?}");
}

/// A `none` archive whose second blob is moved onto the first: both
/// kernels would read the same stored bytes.
#[test]
fn overlapping_kpack_blobs_are_refused() {
    let tmp = tempdir();
    let a = vec![7u8; 1000];
    let b = vec![9u8; 1000];
    let mut w = rocpack_kpack::KpackWriter::new(rocpack_kpack::Compression::None);
    w.group_name("g")
        .arch_family("gfx110X")
        .arches(["gfx1100".to_string()]);
    w.add("lib/x.so#0", "gfx1100", &a[..]).unwrap();
    w.add("lib/y.so#0", "gfx1100", &b[..]).unwrap();
    let p = tmp.path().join("x.kpack");
    w.write_to_path(&p).unwrap();
    let r = rocpack_kpack::KpackReader::open(&p).unwrap();
    let first = r.blob_location(0).unwrap().offset;
    let second = r.blob_location(1).unwrap().offset;
    let toc = r.toc_offset() as usize;
    drop(r);
    let mut bytes = std::fs::read(&p).unwrap();
    // msgpack: offsets below 2^32 as uint32 (0xce) or uint16 (0xcd).
    let enc = |v: u64| -> Vec<u8> {
        if v <= u64::from(u16::MAX) {
            let mut e = vec![0xcd];
            e.extend_from_slice(&(v as u16).to_be_bytes());
            e
        } else {
            let mut e = vec![0xce];
            e.extend_from_slice(&(v as u32).to_be_bytes());
            e
        }
    };
    let (from, to) = (enc(second), enc(first));
    assert_eq!(from.len(), to.len());
    let pos = bytes[toc..]
        .windows(from.len())
        .position(|w| w == from.as_slice())
        .expect("second blob offset in the TOC")
        + toc;
    bytes[pos..pos + to.len()].copy_from_slice(&to);
    std::fs::write(&p, &bytes).unwrap();
    let o = bounded(&["inspect", s(&p)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("overlaps"), "{}", stderr(&o));
    let out = tmp.path().join("un");
    let o = bounded(&["unbundle", s(&p), "--output-dir", s(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!out.exists());
}

/// `kpack split` of the large fat binary under the same ceiling: split
/// decompresses each CCOB once, streaming, and compresses each code object
/// as soon as it is out (at most one per worker in memory; the frames go
/// to a spill file), so the 256 MiB payload is never held in memory.
#[test]
fn split_of_a_large_ccob_stays_under_the_ceiling() {
    let tmp = tempdir();
    let (fat, want) = large_fat(tmp.path());
    let art = tmp.path().join("big_lib");
    std::fs::create_dir_all(art.join("lib")).unwrap();
    std::fs::rename(&fat, art.join("lib/big.o")).unwrap();
    std::fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
    let out = tmp.path().join("out");
    let o = bounded(&[&split_args(&art, "big_lib", &out)[..], &["--jobs", "2"]].concat());
    assert!(o.status.success(), "split: {}", stderr(&o));
    let archs = dir_names(&out).len();
    assert_eq!(archs, want.len() + 1);

    // Every code object is packed once, byte for byte (sha256 against the
    // in-memory parser of this process), in the archive of its target.
    let by_target: BTreeMap<&str, (&String, u64)> = want
        .values()
        .map(|(h, size, t)| (t.as_str(), (h, *size)))
        .collect();
    assert_eq!(by_target.len(), want.len());
    let kpacks = kpacks_below(&out);
    assert_eq!(kpacks.len(), want.len(), "{kpacks:?}");
    let mut seen = BTreeMap::new();
    for kp in &kpacks {
        let r = rocpack_kpack::KpackReader::open(kp).unwrap();
        assert_eq!(r.gfx_arches().len(), 1, "{}", kp.display());
        let arch = r.gfx_arches()[0].clone();
        assert!(
            s(kp).contains(&format!("big_lib_{arch}/")),
            "{} is not in the artifact of {arch}",
            kp.display()
        );
        let kernels: Vec<(String, String)> = r
            .kernels()
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .collect();
        assert_eq!(kernels.len(), 1, "{}: {kernels:?}", kp.display());
        for (key, target) in kernels {
            assert_eq!(key, "lib/big.o#0");
            let (h, size) = by_target[target.as_str()];
            let co = r.get(&key, &target).unwrap();
            assert_eq!(co.len() as u64, size, "{target}");
            assert_eq!(&sha256_hex(&co), h, "{target}");
            *seen.entry(target).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), want.len());
    assert!(seen.values().all(|&n| n == 1), "{seen:?}");
    // The host-only rewrite carries no device code.
    let host = std::fs::read(out.join("big_lib_generic/lib/big.o")).unwrap();
    let info = rocpack_elf::analyze(&host).unwrap();
    assert!(info.bundles.is_empty(), "host rewrite still holds bundles");
    // The spill directory is gone.
    let stray: Vec<_> = dir_names(&out)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

/// Every `.kpack` file below `dir`, sorted.
fn kpacks_below(dir: &Path) -> Vec<PathBuf> {
    list_files(dir)
        .iter()
        .filter(|p| p.ends_with(".kpack"))
        .map(|p| dir.join(p))
        .collect()
}

/// Split compresses a CCOB's code objects while the payload decompresses
/// (and spills those larger than 32 MiB raw instead): outputs do not depend
/// on `--jobs`, and every archived frame is exactly the zstd level-3
/// compression of its code object as the in-memory parser of this process
/// extracts it (what the write stage makes from a code object it reads).
#[test]
fn split_of_ccobs_is_deterministic_and_frames_are_the_plain_compression() {
    let tmp = tempdir();
    let base = std::fs::read(fatbins().join("libfx_static.a")).unwrap();
    let art = tmp.path().join("two_lib");
    std::fs::create_dir_all(art.join("lib")).unwrap();
    std::fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
    // 36 MiB code objects (spilled raw) and 1 MiB ones (compressed during
    // the walk).
    let mut want: BTreeMap<(String, String), Vec<u8>> = BTreeMap::new();
    for (name, mib, targets) in [("big.o", 72, 2), ("small.o", 24, 24)] {
        let (fat, _) = mkfat::make(&base, mib, targets).unwrap();
        let info = rocpack_elf::analyze(&fat).unwrap();
        let bytes = rocpack_elf::bundle_bytes(&fat, &info, 0).unwrap();
        let parsed = rocpack_bundle::parse_bundle(bytes).unwrap();
        for e in parsed.entries.iter().filter(|e| !e.id.is_host()) {
            want.insert(
                (format!("lib/{name}#0"), e.id.target_id().to_string()),
                e.data.to_vec(),
            );
        }
        std::fs::write(art.join("lib").join(name), &fat).unwrap();
    }
    let mut trees = Vec::new();
    for jobs in ["1", "3"] {
        let out = tmp.path().join(format!("out{jobs}"));
        assert_ok(&split(&art, "two_lib", &out, &["--jobs", jobs]));
        trees.push(snapshot(&out));
        if jobs != "1" {
            continue;
        }
        let kpacks = kpacks_below(&out);
        let mut seen = 0;
        for kp in &kpacks {
            let file = std::fs::read(kp).unwrap();
            let r = rocpack_kpack::KpackReader::open(kp).unwrap();
            for e in r.entries() {
                let co = &want[&(e.key.clone(), e.target.clone())];
                let at = r.blob_location(e.ordinal).unwrap();
                let frame = &file[at.offset as usize..(at.offset + at.size) as usize];
                let plain = rocpack_kpack::compress_frame(co, 3).unwrap();
                assert!(frame == &plain[..], "{} {}", e.key, e.target);
                seen += 1;
            }
        }
        assert_eq!(seen, want.len());
    }
    assert_eq!(trees[0].len(), trees[1].len());
    for ((pa, a), (pb, b)) in trees[0].iter().zip(&trees[1]) {
        assert_eq!(pa, pb);
        assert!(a == b, "{pa} differs between --jobs 1 and 3");
    }
    // Code objects of dropped targets are skipped during the walk: what is
    // kept is byte for byte what the full split wrote.
    let out = tmp.path().join("sel");
    assert_ok(&split(
        &art,
        "two_lib",
        &out,
        &["--gpu-targets", "gfx906", "--exclude-arch", "gfx900"],
    ));
    let sel = snapshot(&out);
    let arch_files: Vec<&String> = sel
        .keys()
        .filter(|p| p.starts_with("two_lib_gfx") && sel[*p] != Node::Dir)
        .collect();
    assert!(!arch_files.is_empty());
    for p in arch_files {
        assert!(p.starts_with("two_lib_gfx906/"), "{p}");
        assert!(sel[p] == trees[0][p], "{p} differs from the full split");
    }
}
