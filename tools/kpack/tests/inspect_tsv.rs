//! `kpack inspect --json` against every row of the fixtures'
//! expected-unbundle.tsv: same target, size and sha256 for every code
//! object (generic-target rows use the TSV's correct raw-entry hashes, not
//! what clang-offload-bundler returned).

use std::collections::BTreeMap;

use serde_json::Value;

mod common;
use common::{inspect_json, shared};

/// The description of `file` or of its archive member `file(member)`.
fn find_desc<'a>(top: &'a Value, member: Option<&str>) -> &'a Value {
    match member {
        None => top,
        Some(m) => top["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["file"].as_str().unwrap().ends_with(&format!("({m})")))
            .unwrap_or_else(|| panic!("member {m} not reported")),
    }
}

#[test]
fn every_expected_unbundle_row_is_reported() {
    let fixtures = shared().join("fixtures");
    let tsv = std::fs::read_to_string(fixtures.join("expected-unbundle.tsv"))
        .expect("fixtures/expected-unbundle.tsv (set ROCPACK_SHARED)");
    let mut lines = tsv.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    assert_eq!(header[0], "file");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert!(rows.len() >= 160, "TSV has {} rows", rows.len());

    let mut cache: BTreeMap<String, Value> = BTreeMap::new();
    let (mut exact, mut derived) = (0, 0);
    for r in &rows {
        let (file, bidx, boff, bsize, bfmt, target, sha, size, note) =
            (r[0], r[1], r[2], r[3], r[4], r[7], r[8], r[9], r[11]);
        let (path, member) = match file.split_once('(') {
            Some((p, m)) => (p, Some(m.trim_end_matches(')'))),
            None => (file, None),
        };
        let top = cache
            .entry(path.to_string())
            .or_insert_with(|| inspect_json(&fixtures.join(path), &["--check-hash"]));
        let d = find_desc(top, member);

        if bfmt == "hetero-archive" {
            // clang-offload-bundler --type=a builds a new `ar` (with an
            // LLVM-bitcode symbol table) from the members' device entries;
            // that archive is not stored in the input. Check its parts: each
            // listed member's entry for this target is reported.
            let members: Vec<&str> = note
                .trim_start_matches("device archive members: ")
                .split(' ')
                .collect();
            assert!(!members.is_empty());
            for m in members {
                let obj = format!(
                    "{}.o",
                    m.rsplit_once(target)
                        .map(|(_, s)| s.trim_end_matches(".bc"))
                        .unwrap()
                );
                let md = find_desc(top, Some(&obj));
                let found = md["bundles"].as_array().unwrap().iter().any(|b| {
                    b["code_objects"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|c| c["target"] == target)
                });
                assert!(found, "{file}: member {obj} has no {target}");
            }
            derived += 1;
            continue;
        }

        let bundles = d["bundles"].as_array().unwrap();
        let b = bundles
            .iter()
            .find(|b| b["index"].as_u64().unwrap().to_string() == bidx)
            .unwrap_or_else(|| panic!("{file}: no bundle {bidx}"));
        if let Ok(off) = boff.parse::<u64>() {
            assert_eq!(
                b["file_offset"].as_u64(),
                Some(off),
                "{file} bundle {bidx} offset"
            );
            assert_eq!(
                b["size"].as_u64().unwrap().to_string(),
                bsize,
                "{file} bundle {bidx} size"
            );
        }
        match bfmt {
            "uncompressed" => assert_eq!(b["format"], "uncompressed"),
            "elf-sections" => assert_eq!(b["format"], "elf-sections"),
            f => {
                // CCOBv2-zstd
                let (v, m) = f.trim_start_matches("CCOBv").split_once('-').unwrap();
                assert_eq!(b["format"], "ccob", "{file}");
                assert_eq!(b["version"].as_u64().unwrap().to_string(), v, "{file}");
                assert_eq!(b["compression"], m, "{file}");
                assert_eq!(b["hash_matches"], true, "{file}");
            }
        }
        let c = b["code_objects"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["target"] == target)
            .unwrap_or_else(|| panic!("{file} bundle {bidx}: no code object {target}"));

        if bfmt == "elf-sections" && target.starts_with("host-") {
            // For an -fgpu-rdc object's host entry the bundler emits the
            // host object itself (the input with its offload sections
            // removed by objcopy), not bytes stored in the file. We report
            // the section as stored: a placeholder.
            assert_eq!(c["is_host"], true);
            assert_ne!(
                c["sha256"], sha,
                "{file}: the host placeholder unexpectedly matches"
            );
            derived += 1;
            continue;
        }
        assert_eq!(
            c["size"].as_u64().unwrap().to_string(),
            size,
            "{file} {target} size"
        );
        assert_eq!(c["sha256"], sha, "{file} {target} sha256 ({note})");
        if let Some(fo) = c["file_offset"].as_u64() {
            // uncompressed: offset in the file = bundle + entry offset
            if let (Ok(bo), Ok(eo)) = (boff.parse::<u64>(), r[6].parse::<u64>()) {
                assert_eq!(fo, bo + eo, "{file} {target} file offset");
            }
        }
        exact += 1;
    }
    eprintln!("{exact} rows matched exactly, {derived} derived rows checked by their parts");
    assert_eq!(exact + derived, rows.len());
    assert!(derived <= 4, "{derived} rows were not byte-checked");
}

#[test]
fn bundler_generic_target_bug_is_not_reproduced() {
    // clang-offload-bundler 19 returns the gfx11-generic object for
    // gfx9-generic, gfx10-3-generic and gfx12-generic; we must not.
    let v = inspect_json(
        &shared().join("fixtures/fatbins/libfx_generic.so"),
        &["--check-hash"],
    );
    let cos = v["bundles"][0]["code_objects"].as_array().unwrap();
    let mut shas: Vec<&str> = cos
        .iter()
        .filter(|c| c["is_host"] == false)
        .map(|c| c["sha256"].as_str().unwrap())
        .collect();
    assert_eq!(shas.len(), 4);
    shas.sort();
    shas.dedup();
    assert_eq!(
        shas.len(),
        4,
        "generic targets must have distinct code objects"
    );
    let g9 = cos
        .iter()
        .find(|c| c["target_id"] == "gfx9-generic")
        .unwrap();
    assert_eq!(g9["file_offset"], 12288 + 28672);
    assert_eq!(g9["size"], 7632);
}
