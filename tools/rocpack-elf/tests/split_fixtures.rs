//! Split / reassemble every fixture fat binary and check the results.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use common::*;
use rocpack_elf::{analyze, reassemble, split_host, State, HIPK_MAGIC};
use rocpack_testsupport::sha256_hex;

#[test]
fn analysis_matches_wrappers_tsv_and_expected_unbundle() {
    if !have_fixtures() {
        return;
    }
    // wrappers.tsv: file -> (wrapper index, bundle file offset).
    let tsv = std::fs::read_to_string(fixtures().join("wrappers.tsv")).unwrap();
    let mut rows = 0;
    for line in tsv.lines().skip(1) {
        let c: Vec<&str> = line.split('\t').collect();
        let data = std::fs::read(fixtures().join(c[0])).unwrap();
        let info = analyze(&data).unwrap();
        let wi: usize = c[2].parse().unwrap();
        let w = &info.wrappers[wi];
        assert_eq!(w.file_offset, c[3].parse::<u64>().unwrap(), "{line}");
        let b = &info.bundles[w.bundle.unwrap()];
        assert_eq!(b.file_offset, c[10].parse::<u64>().unwrap(), "{line}");
        assert_eq!(format!("{:#x}", w.value_in_file), c[7], "{line}");
        rows += 1;
    }
    assert_eq!(rows, 28);
    // expected-unbundle.tsv: the sha256 of every device code object.
    let exp = std::fs::read_to_string(fixtures().join("expected-unbundle.tsv")).unwrap();
    let mut want: HashMap<String, BTreeSet<String>> = HashMap::new();
    for line in exp.lines().skip(1) {
        let c: Vec<&str> = line.split('\t').collect();
        if c[0].contains('(') || c[7].starts_with("host") || c[4] == "elf-sections" {
            continue;
        }
        want.entry(c[0].to_string())
            .or_default()
            .insert(format!("{}:{}:{}", c[1], c[7], c[8]));
    }
    for p in fat_elfs() {
        let data = std::fs::read(&p).unwrap();
        let got: BTreeSet<String> = code_objects(&data)
            .iter()
            .enumerate()
            .flat_map(|(i, v)| {
                v.iter()
                    .map(move |(id, d)| format!("{i}:{id}:{}", sha256_hex(d)))
            })
            .collect();
        assert_eq!(Some(&got), want.get(&rel(&p)), "{}", rel(&p));
    }
}

#[test]
fn split_removes_device_code_and_points_wrappers_at_marker() {
    if !have_fixtures() {
        return;
    }
    let list = fat_elfs();
    assert!(
        list.len() >= 20,
        "expected all fixture fat binaries, got {}",
        list.len()
    );
    for p in list {
        let data = std::fs::read(&p).unwrap();
        let orig = analyze(&data).unwrap();
        let marker = marker_for(&p);
        let out = split_host(&data, &marker).unwrap();
        let name = rel(&p);
        assert!(
            out.len() < data.len(),
            "{name}: {} >= {}",
            out.len(),
            data.len()
        );
        for bundle in code_objects(&data) {
            for (id, co) in bundle {
                assert!(
                    !contains(&out, &co),
                    "{name}: code object {id} still present"
                );
            }
        }
        let info = analyze(&out).unwrap();
        assert_eq!(info.state, State::Split, "{name}");
        assert!(info.fatbin.unwrap().nobits, "{name}");
        assert_eq!(info.marker.as_ref().unwrap().bytes, marker, "{name}");
        assert_eq!(info.wrappers.len(), orig.wrappers.len(), "{name}");
        for (w, o) in info.wrappers.iter().zip(&orig.wrappers) {
            assert_eq!(w.magic, HIPK_MAGIC, "{name}");
            assert_eq!(w.version, 1, "{name}");
            assert!(w.points_to_marker, "{name}");
            assert_eq!(
                w.pointer,
                {
                    // Same relocation model (addends/values differ).
                    let mut m = o.pointer.clone();
                    if let rocpack_elf::PointerModel::RelaSymbol { entry_offset, .. } = &mut m {
                        if let rocpack_elf::PointerModel::RelaSymbol {
                            entry_offset: e2, ..
                        } = &w.pointer
                        {
                            *entry_offset = *e2;
                        }
                    }
                    if let rocpack_elf::PointerModel::RelaRelative { entry_offset } = &mut m {
                        if let rocpack_elf::PointerModel::RelaRelative { entry_offset: e2 } =
                            &w.pointer
                        {
                            *entry_offset = *e2;
                        }
                    }
                    if let rocpack_elf::PointerModel::RelaSymbol { symbol_value, .. } = &mut m {
                        if let rocpack_elf::PointerModel::RelaSymbol {
                            symbol_value: v2, ..
                        } = &w.pointer
                        {
                            *symbol_value = *v2;
                        }
                    }
                    m
                },
                "{name}: relocation model changed"
            );
            assert_eq!(w.co_index() as usize, o.bundle.unwrap(), "{name}");
            assert_ne!(w.target, 0, "{name}: pointer zeroed");
        }
        // Deterministic.
        assert_eq!(
            split_host(&data, &marker).unwrap(),
            out,
            "{name}: not deterministic"
        );
    }
}

#[test]
fn host_only_passes_through_unchanged() {
    if !have_fixtures() {
        return;
    }
    for p in host_only_elfs() {
        let data = std::fs::read(&p).unwrap();
        assert_eq!(analyze(&data).unwrap().state, State::HostOnly);
        assert_eq!(split_host(&data, b"m").unwrap(), data, "{}", rel(&p));
    }
}

#[test]
fn round_trip_restores_code_objects() {
    if !have_fixtures() {
        return;
    }
    let mut identical = 0;
    let mut total = 0;
    for p in fat_elfs() {
        let data = std::fs::read(&p).unwrap();
        let split = split_host(&data, &marker_for(&p)).unwrap();
        let back = reassemble(&split, &bundles_of(&data)).unwrap();
        let name = rel(&p);
        assert_eq!(code_objects(&back), code_objects(&data), "{name}");
        let a = analyze(&back).unwrap();
        let o = analyze(&data).unwrap();
        assert_eq!(a.state, State::Fat, "{name}");
        for (w, ow) in a.wrappers.iter().zip(&o.wrappers) {
            assert_eq!(w.bundle, ow.bundle, "{name}");
            assert_eq!(w.target, ow.target, "{name}");
            assert_eq!(w.value_in_file, ow.value_in_file, "{name}");
        }
        total += 1;
        if back == data {
            identical += 1;
        } else {
            eprintln!("{name}: not byte-identical after reassembly");
        }
    }
    // Every one, `libfx_clang15.so` included (its `.hip_fatbin` ends one
    // zero byte after its bundle).
    assert_eq!(identical, total, "round trips byte-identical");
}

#[test]
fn readelf_and_elflint_accept_split_output() {
    if !have_fixtures() || !have_tool("readelf") || !have_tool("eu-elflint") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for p in fat_elfs() {
        let data = std::fs::read(&p).unwrap();
        let out = split_host(&data, &marker_for(&p)).unwrap();
        let f = tmp.path().join(p.file_name().unwrap());
        std::fs::write(&f, &out).unwrap();
        let o = Command::new("readelf")
            .arg("-lSW")
            .arg(&f)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && err.trim().is_empty(),
            "{}: readelf: {err}",
            rel(&p)
        );
        // elflint: nothing beyond what it already says about the input
        // (lld outputs carry a few pre-existing complaints).
        rocpack_testsupport::assert_no_new_elflint_messages(&p, &f);
    }
}

/// Issue 22: the bounded-memory forms write exactly the bytes of the
/// in-memory ones: `split_host_to` (host part copied from a file through
/// positioned reads) and `reassemble_to` with the bundles as ranges of a
/// spill file, for every fixture (host-only ones come back unchanged).
#[test]
fn streamed_split_and_reassembly_write_the_in_memory_bytes() {
    if !have_fixtures() {
        return;
    }
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let mut paths = fat_elfs();
    paths.extend(host_only_elfs());
    for p in paths {
        let name = rel(&p);
        let data = std::fs::read(&p).unwrap();
        let input = std::fs::File::open(&p).unwrap();
        let src = rocpack_bundle::FileRange::new(&input, 0, data.len() as u64);
        let marker = marker_for(&p);
        let want = split_host(&data, &marker).unwrap();
        let out_path = tmp.path().join("host");
        let out = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&out_path)
            .unwrap();
        let n = rocpack_elf::split_host_to(&data, &src, &marker, &out).unwrap();
        let got = std::fs::read(&out_path).unwrap();
        assert_eq!(n, got.len() as u64, "{name}");
        assert!(got == want, "{name}: split_host_to differs from split_host");

        // Bundles in a spill file, one after another with a gap between.
        let bundles = bundles_of(&data);
        let mut spill = tempfile::tempfile().unwrap();
        let mut ranges = Vec::new();
        let mut pos = 0u64;
        for b in &bundles {
            spill.write_all(&[0xa5; 3]).unwrap();
            pos += 3;
            spill.write_all(b).unwrap();
            ranges.push((pos, b.len() as u64));
            pos += b.len() as u64;
        }
        let bsrc = rocpack_bundle::FileRange::new(&spill, 0, pos);
        let split_src: &[u8] = &got;
        let mut back = Vec::new();
        let n = rocpack_elf::reassemble_to(
            &got,
            &split_src,
            &rocpack_elf::Bundles::In {
                src: &bsrc,
                ranges: &ranges,
            },
            &mut back,
        )
        .unwrap();
        assert_eq!(n, back.len() as u64, "{name}");
        let want_back = reassemble(&got, &bundles).unwrap();
        assert!(
            back == want_back,
            "{name}: reassemble_to differs from reassemble"
        );
    }
}
