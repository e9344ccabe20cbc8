//! The one description of a host image (`describe_in`, what `kpack
//! inspect` prints), format by format, against the fixtures' independent
//! tables: `sections.tsv` and `wrappers.tsv` (readelf: `.hip_fatbin`
//! placement, bundle counts, each wrapper's relocation in words) for ELF
//! files and archive members, `expected-unbundle-win.tsv`
//! (clang-offload-bundler: each bundle's section) for PE images and COFF
//! objects; split files (HIPK wrappers, marker, no-data bundle section);
//! files described without an analysis (raw code objects, PE32); and the
//! JSON shape of the header facts (`docs/cli/inspect-json.md`).

use std::collections::BTreeMap;
use std::path::Path;

use rocpack_image::{describe_in, Description, FileType, Headers};
use rocpack_testsupport as ts;
use serde_json::Value;

const MARKER: &[u8] = b"\x82\xa5hello-marker-payload-for-tests";

fn describe(data: &[u8]) -> Description<'_> {
    describe_in(data, &data).unwrap()
}

fn headers(d: &Description<'_>) -> Value {
    serde_json::to_value(&d.headers).unwrap()
}

/// Rows of a fixture table (header line skipped), split on tabs.
fn rows(tsv: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(tsv)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// `name -> bytes` of every fixture fat binary and archive member
/// (`fatbins/libfx_static.a(kern_a.o)`), as the tables name them.
fn elf_inputs() -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(ts::fatbins()).unwrap() {
        let path = e.unwrap().path();
        let name = format!("fatbins/{}", path.file_name().unwrap().to_string_lossy());
        let data = std::fs::read(&path).unwrap();
        if rocpack_image::detect(&data) == FileType::Archive {
            for u in rocpack_image::units(&data).unwrap() {
                let m = u.member.as_ref().unwrap();
                out.insert(format!("{name}({})", m.name), u.data.to_vec());
            }
        } else {
            out.insert(name, data);
        }
    }
    out
}

#[test]
fn elf_files_and_members_are_described_as_readelf_sees_them() {
    if !ts::have_fixtures() {
        return;
    }
    let inputs = elf_inputs();
    let mut checked = 0;
    for r in rows(&ts::fixtures().join("sections.tsv")) {
        let Some(data) = inputs.get(&r[0]) else {
            continue; // artifact-tree rows
        };
        let d = describe(data);
        let h = headers(&d);
        let what = &r[0];
        assert_eq!(d.kind, "elf", "{what}");
        assert!(h.get("pe").is_none(), "{what}: {h}");
        let bundles: usize = r[6].parse().unwrap();
        if r[7] == "elf-sections" {
            // -fgpu-rdc object: one bundle entry per section, no .hip_fatbin.
            assert_eq!(d.offload_sections.len(), bundles, "{what}");
            for s in &d.offload_sections {
                assert_eq!(s.name, format!("__CLANG_OFFLOAD_BUNDLE__{}", s.id));
                assert_eq!(s.bytes.len() as u64, s.size, "{what}");
            }
            assert!(h["elf"]["hip_fatbin"].is_null(), "{what}");
            assert!(!d.look_for_stray_magic, "{what}");
        } else if r[3] == "-" {
            assert_eq!(h["elf"]["state"], "host-only", "{what}");
            assert!(d.bundles.is_empty() && d.wrappers.is_empty(), "{what}");
            assert!(d.look_for_stray_magic, "{what}");
        } else {
            assert_eq!(h["elf"]["state"], "fat", "{what}");
            assert_eq!(
                h["elf"]["hip_fatbin"]["file_offset"],
                r[3].parse::<u64>().unwrap()
            );
            assert_eq!(h["elf"]["hip_fatbin"]["size"], r[2].parse::<u64>().unwrap());
            assert_eq!(
                h["elf"]["hip_fat_bin_segment"]["size"],
                r[4].parse::<u64>().unwrap()
            );
            assert_eq!(d.bundles.len(), bundles, "{what}");
            for b in &d.bundles {
                assert_eq!(b.section, ".hip_fatbin");
                assert_eq!(b.bytes, &data[b.file_offset as usize..][..b.bytes.len()]);
                assert!(
                    b.bytes.starts_with(b"__CLANG_OFFLOAD_BUNDLE__")
                        || b.bytes.starts_with(b"CCOB"),
                    "{what}: bundle {}",
                    b.index
                );
            }
            assert!(!d.look_for_stray_magic && d.notes.is_empty(), "{what}");
        }
        checked += 1;
    }
    assert!(checked >= 15, "{checked} fixture rows");
}

#[test]
fn wrappers_say_their_relocation_as_readelf_does() {
    if !ts::have_fixtures() {
        return;
    }
    let inputs = elf_inputs();
    let mut checked = 0;
    for r in rows(&ts::fixtures().join("wrappers.tsv")) {
        let Some(data) = inputs.get(&r[0]) else {
            continue;
        };
        let d = describe(data);
        let h = headers(&d);
        let index: usize = r[2].parse().unwrap();
        let w = &d.wrappers[index];
        let what = format!("{} wrapper {index}", r[0]);
        // readelf's `DYN-PIE` is an ET_DYN executable.
        assert!(
            r[1].starts_with(h["elf"]["elf_type"].as_str().unwrap()),
            "{what}"
        );
        assert_eq!(w.file_offset, r[3].parse::<u64>().unwrap(), "{what}");
        assert_eq!(w.pointer, r[5], "{what}");
        assert_eq!((w.magic, w.co_index), ("HIPF", None), "{what}");
        let b = w.bundle.unwrap();
        assert!(d.bundles[b].wrappers.contains(&index), "{what}");
        checked += 1;
    }
    assert!(checked >= 15, "{checked} fixture wrappers");
}

#[test]
fn pe_images_and_coff_objects_name_their_bundle_section() {
    let tsv = ts::win_fixtures().join("expected-unbundle-win.tsv");
    let mut sections = BTreeMap::<String, BTreeMap<usize, String>>::new();
    for r in rows(&tsv) {
        sections
            .entry(r[0].clone())
            .or_default()
            .insert(r[2].parse().unwrap(), r[1].clone());
    }
    assert!(sections.len() >= 8, "{sections:?}");
    for (file, want) in sections {
        let data = std::fs::read(ts::win_fixtures().join(&file)).unwrap();
        let d = describe(&data);
        let h = headers(&d);
        let object = file.ends_with(".obj");
        let (kind, pe_type) = if object {
            ("coff", "OBJ")
        } else if file.ends_with(".exe") {
            ("pe", "EXE")
        } else {
            ("pe", "DLL")
        };
        assert_eq!(d.kind, kind, "{file}");
        assert!(h["elf"].is_null(), "{file}: {h}");
        assert_eq!(h["pe"]["pe_type"], pe_type, "{file}");
        assert_eq!(h["pe"]["state"], "fat", "{file}");
        assert_eq!(h["pe"]["fatbin_section"], want[&0], "{file}");
        let got: BTreeMap<usize, String> = d
            .bundles
            .iter()
            .map(|b| (b.index, b.section.clone()))
            .collect();
        assert_eq!(got, want, "{file}");
        for w in &d.wrappers {
            assert!(w.bundle.is_some(), "{file}: wrapper {}", w.index);
            if object {
                assert!(
                    w.pointer.starts_with("object:IMAGE_REL_AMD64_ADDR64:"),
                    "{file}"
                );
            }
        }
        assert!(!d.wrappers.is_empty() && !d.look_for_stray_magic, "{file}");
        let line = d.headers.summary().unwrap();
        assert!(
            line.starts_with(&format!("PE {pe_type} machine 0x8664 state fat")),
            "{line}"
        );
    }
}

/// A split file: HIPK wrappers pointing at the marker, no bundles left,
/// the bundle section kept without file data (a note says so).
fn check_split(what: &str, fat: &[u8], format: &str) {
    let split = rocpack_image::split_file(fat, &mut |_, _| Ok(MARKER.to_vec())).unwrap();
    let before = describe(fat);
    let d = describe(&split);
    let h = headers(&d);
    assert_eq!(h[format]["state"], "split", "{what}");
    assert!(d.bundles.is_empty(), "{what}");
    assert_eq!(d.wrappers.len(), before.wrappers.len(), "{what}");
    for (w, was) in d.wrappers.iter().zip(&before.wrappers) {
        assert_eq!(w.magic, "HIPK", "{what}");
        assert_eq!(w.co_index, was.bundle.map(|b| b as u32), "{what}");
        assert!(w.points_to_marker && w.bundle.is_none(), "{what}");
    }
    let m = d.marker.as_ref().unwrap();
    assert!(m.bytes.starts_with(MARKER), "{what}");
    assert!(
        d.notes.iter().any(|n| n.contains("split out")),
        "{what}: {:?}",
        d.notes
    );
    assert_eq!(h[format]["hip_fatbin"]["nobits"], true, "{what}");
    assert!(
        d.headers.summary().unwrap().contains("state split"),
        "{what}"
    );
}

#[test]
fn split_files_describe_hipk_wrappers_and_their_marker() {
    if ts::have_fixtures() {
        let p = ts::fatbins().join("libfx_two_tu.so");
        check_split("libfx_two_tu.so", &std::fs::read(p).unwrap(), "elf");
    }
    let p = ts::win_fatbin("fx_win_lld.dll");
    check_split("fx_win_lld.dll", &std::fs::read(p).unwrap(), "pe");
}

#[test]
fn code_objects_and_pe32_images_are_described_not_analysed() {
    let mut co = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\xe0\0".to_vec();
    co.resize(64, 0);
    co[48..52].copy_from_slice(&0x4_0058u32.to_le_bytes());
    assert!(rocpack_image::detect(&co).is_elf());
    let d = describe(&co);
    assert_eq!(d.kind, "amdgpu-code-object");
    assert_eq!(
        d.notes,
        ["raw AMDGPU code object (e_machine EM_AMDGPU, e_flags 0x40058), not an offload bundle"]
    );
    assert!(d.headers.summary().is_none() && !d.look_for_stray_magic);

    let mut pe = vec![0u8; 0x100];
    pe[..2].copy_from_slice(b"MZ");
    pe[0x3c] = 0x80;
    pe[0x80..0x84].copy_from_slice(b"PE\0\0");
    pe[0x98..0x9a].copy_from_slice(&0x10bu16.to_le_bytes());
    assert!(!rocpack_image::detect(&pe).is_elf());
    let d = describe(&pe);
    assert_eq!(d.kind, "pe");
    assert_eq!(headers(&d), serde_json::json!({ "elf": null }));
    assert!(d.notes[0].starts_with("PE32 (32-bit) image"));
    assert!(d.look_for_stray_magic);

    let e = describe_in(b"KPAK\x01", &&b"KPAK\x01"[..]).unwrap_err();
    assert!(e.to_string().contains("(kpack)"), "{e}");
}

#[test]
fn header_facts_keep_the_documented_json_keys() {
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        serde_json::to_string(&Headers::default()).unwrap(),
        r#"{"elf":null}"#
    );
    if ts::have_fixtures() {
        let data = std::fs::read(ts::fatbins().join("libfx_multi.so")).unwrap();
        let d = describe(&data);
        let h = headers(&d);
        assert_eq!(keys(&h), ["elf"]);
        assert_eq!(
            keys(&h["elf"]),
            [
                "elf_type",
                "machine",
                "state",
                "hip_fatbin",
                "hip_fat_bin_segment",
                "offload_bundle_sections"
            ]
        );
        assert_eq!(
            keys(&h["elf"]["hip_fatbin"]),
            ["file_offset", "addr", "size", "nobits"]
        );
        assert_eq!(
            d.headers.summary().unwrap(),
            "ELF DYN machine 62 state fat; .hip_fatbin at 12288 size 94656"
        );
    }
    let data = std::fs::read(ts::win_fatbin("fx_win_kern.obj")).unwrap();
    let h = headers(&describe(&data));
    assert_eq!(keys(&h), ["elf", "pe"]);
    assert_eq!(
        keys(&h["pe"]),
        [
            "pe_type",
            "machine",
            "state",
            "image_base",
            "fatbin_section",
            "hip_fatbin",
            "wrapper_section",
            "hip_fat_bin_segment",
            "signed",
            "trailing_bytes"
        ]
    );
}
