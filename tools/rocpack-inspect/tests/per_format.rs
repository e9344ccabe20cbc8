//! The library on one input of each format it describes (ELF file, `ar`
//! archive, PE image, COFF object, `.kpack`): kinds, states and every
//! device code object's sha256 as clang-offload-bundler extracted it
//! (the fixtures' expected-unbundle tables), and the text form.

use std::collections::BTreeMap;
use std::path::Path;

use rocpack_inspect::{inspect, write_text, Desc, Input};
use rocpack_testsupport as ts;
use serde_json::Value;

fn describe(path: &Path) -> Desc {
    let input = Input::open(path).unwrap();
    inspect(&input, &path.display().to_string()).unwrap()
}

/// `(bundle index, target) -> sha256` of the device code objects of `d`.
fn device_objects(d: &Desc) -> BTreeMap<(u64, String), String> {
    let v = serde_json::to_value(d).unwrap();
    let mut got = BTreeMap::new();
    for b in v["bundles"].as_array().unwrap() {
        for c in b["code_objects"].as_array().unwrap() {
            if !c["is_host"].as_bool().unwrap() {
                got.insert(
                    (
                        b["index"].as_u64().unwrap(),
                        c["target"].as_str().unwrap().to_string(),
                    ),
                    c["sha256"].as_str().unwrap().to_string(),
                );
            }
        }
    }
    got
}

/// Rows of a TSV whose column `file` is `name`: `(bundle, target) -> sha256`.
fn expected(
    tsv: &Path,
    name: &str,
    cols: (usize, usize, usize),
) -> BTreeMap<(u64, String), String> {
    let text = std::fs::read_to_string(tsv).unwrap();
    let (bundle, target, sha) = cols;
    text.lines()
        .skip(1)
        .map(|l| l.split('\t').collect::<Vec<_>>())
        .filter(|c| c[0] == name && !c[target].starts_with("host-"))
        .map(|c| {
            (
                (c[bundle].parse().unwrap(), c[target].to_string()),
                c[sha].to_string(),
            )
        })
        .collect()
}

fn linux_expected(name: &str) -> BTreeMap<(u64, String), String> {
    let tsv = ts::fixtures().join("expected-unbundle.tsv");
    expected(&tsv, &format!("fatbins/{name}"), (1, 7, 8))
}

#[test]
fn elf_files_give_the_bundlers_code_objects() {
    if !ts::have_fixtures() {
        return;
    }
    for name in ["libfx_multi.so", "libfx_multi_compressed.so", "fx_app"] {
        let d = describe(&ts::fatbins().join(name));
        assert_eq!(d.kind, "elf", "{name}");
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["elf"]["state"], "fat", "{name}");
        let want = linux_expected(name);
        assert!(!want.is_empty(), "{name}");
        assert_eq!(device_objects(&d), want, "{name}");
    }
}

#[test]
fn archive_members_are_described_one_by_one() {
    if !ts::have_fixtures() {
        return;
    }
    let path = ts::fatbins().join("libfx_static.a");
    let d = describe(&path);
    assert_eq!(d.kind, "archive");
    let len = std::fs::metadata(&path).unwrap().len();
    let mut seen = 0;
    for m in &d.members {
        let member = m.file.rsplit_once('(').unwrap().1.trim_end_matches(')');
        assert_eq!(m.kind, "elf", "{member}");
        assert!(
            m.file_offset > 0 && m.file_offset + m.size <= len,
            "{member}"
        );
        let want = linux_expected(&format!("libfx_static.a({member})"));
        if !want.is_empty() {
            assert_eq!(device_objects(m), want, "{member}");
            seen += 1;
        }
    }
    assert_eq!(seen, 2, "kern_a.o and kern_b.o");
}

#[test]
fn pe_images_and_coff_objects_give_the_bundlers_code_objects() {
    let tsv = ts::win_fixtures().join("expected-unbundle-win.tsv");
    for (name, kind) in [
        ("fx_win_lld.dll", "pe"),
        ("fx_win_ccob.dll", "pe"),
        ("fx_win_kern.obj", "coff"),
    ] {
        let d = describe(&ts::win_fatbin(name));
        assert_eq!(d.kind, kind, "{name}");
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["pe"]["state"], "fat", "{name}");
        let want = expected(&tsv, &format!("fatbins-win/{name}"), (2, 4, 5));
        assert!(!want.is_empty(), "{name}");
        assert_eq!(device_objects(&d), want, "{name}");
    }
}

#[test]
fn kpack_archives_list_their_kernels() {
    if !ts::have_fixtures() {
        return;
    }
    let d = describe(&ts::golden("test_zstd.kpack"));
    assert_eq!(d.kind, "kpack");
    let k = serde_json::to_value(d.kpack.as_ref().unwrap()).unwrap();
    assert!(!k["kernels"].as_array().unwrap().is_empty(), "{k}");
}

#[test]
fn text_form_names_the_file_its_state_and_each_code_object() {
    if !ts::have_fixtures() {
        return;
    }
    let path = ts::fatbins().join("libfx_multi.so");
    let d = describe(&path);
    let mut out = Vec::new();
    write_text(&mut out, &d).unwrap();
    let text = String::from_utf8(out).unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(first, format!("{}: elf ({} bytes)", path.display(), d.size));
    assert!(text.contains(" state fat"), "{text}");
    for (_, sha) in linux_expected("libfx_multi.so") {
        assert!(text.contains(&sha), "{sha} not in\n{text}");
    }
    let json: Value = serde_json::to_value(&d).unwrap();
    assert_eq!(json["file"], path.display().to_string());
}
