//! Static archives: every member with device code is split, the rest kept
//! byte for byte; the split archive links and its objects register HIPK
//! wrappers; reassembly restores the original archive.

mod common;

use std::process::Command;

use common::*;
use rocpack_elf::{analyze, archive_members, reassemble_file, split_file, State};

fn split_archive_bytes(data: &[u8]) -> Vec<u8> {
    split_file(data, &mut |name, _| {
        Ok(format!("marker-of:{name}").into_bytes())
    })
    .unwrap()
}

#[test]
fn static_archive_members_are_split_and_round_trip() {
    if !have_fixtures() {
        return;
    }
    let data = std::fs::read(fixtures().join("fatbins/libfx_static.a")).unwrap();
    let split = split_archive_bytes(&data);
    assert!(split.len() < data.len());
    assert_eq!(split_archive_bytes(&data), split, "deterministic");
    let orig = archive_members(&data).unwrap();
    let new = archive_members(&split).unwrap();
    assert_eq!(orig.len(), new.len());
    for (o, n) in orig.iter().zip(&new) {
        assert_eq!(o.name, n.name);
        let oi = analyze(o.data).unwrap();
        if oi.has_device_code() {
            let ni = analyze(n.data).unwrap();
            assert_eq!(ni.state, State::Split, "{}", n.name);
            for w in &ni.wrappers {
                assert_eq!(
                    w.marker_bytes(&ni).unwrap(),
                    format!("marker-of:{}", n.name).as_bytes()
                );
            }
            for bundle in code_objects(o.data) {
                for (_, co) in bundle {
                    assert!(!contains(n.data, &co), "{}", n.name);
                }
            }
        } else {
            assert_eq!(o.data, n.data, "{} must be unchanged", o.name);
        }
    }
    let back = reassemble_file(&split, &mut |name, _| {
        let m = orig.iter().find(|m| m.name == name).unwrap();
        Ok(bundles_of(m.data))
    })
    .unwrap();
    assert_eq!(back, data, "round trip restores the archive byte for byte");
}

#[test]
fn rdc_archive_passes_through() {
    if !have_fixtures() {
        return;
    }
    let data = std::fs::read(fixtures().join("fatbins/libfx_rdc.a")).unwrap();
    assert_eq!(split_archive_bytes(&data), data);
}

#[test]
fn split_archive_links_and_registers_hipk() {
    if !have_fixtures() || !have_tool("gcc") || !have_tool("ar") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = std::fs::read(fixtures().join("fatbins/libfx_static.a")).unwrap();
    let a = tmp.path().join("libsplit.a");
    std::fs::write(&a, split_archive_bytes(&data)).unwrap();
    let o = Command::new("ar").arg("t").arg(&a).output().unwrap();
    assert!(o.status.success());
    let stub_src = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/elf");
    let stub = tmp.path().join("libamdhip64.so.5");
    assert!(Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&stub)
        .arg(format!("-Wl,--version-script={stub_src}/hip_stub.map"))
        .arg(format!("{stub_src}/hip_stub.c"))
        .status()
        .unwrap()
        .success());
    let so = tmp.path().join("liblinked.so");
    let st = Command::new("gcc")
        .arg("-shared")
        .arg("-o")
        .arg(&so)
        .arg("-Wl,--whole-archive")
        .arg(&a)
        .arg("-Wl,--no-whole-archive")
        .arg(&stub)
        .status()
        .unwrap();
    assert!(st.success(), "linking the split archive failed");
    let linked = std::fs::read(&so).unwrap();
    let info = analyze(&linked).unwrap();
    assert_eq!(info.state, State::Split);
    let mut markers: Vec<String> = info
        .wrappers
        .iter()
        .map(|w| String::from_utf8_lossy(w.marker_bytes(&info).unwrap()).into_owned())
        .collect();
    markers.sort();
    assert!(markers[0].starts_with("marker-of:kern_a.o"), "{markers:?}");
    assert!(markers[1].starts_with("marker-of:kern_b.o"), "{markers:?}");
}

/// The streaming archive rewrite (`split_archive_to`, `reassemble_archive_to`:
/// members read one at a time, split ones through a spill file) writes the
/// bytes the in-memory one returns.
#[test]
fn streamed_archive_rewrite_equals_in_memory() {
    if !have_fixtures() {
        return;
    }
    for name in ["libfx_static.a", "libfx_rdc.a"] {
        let data = std::fs::read(fixtures().join("fatbins").join(name)).unwrap();
        let marker =
            |n: &str, _: &rocpack_elf::FatBinaryInfo| Ok(format!("marker-of:{n}").into_bytes());
        let split = rocpack_elf::split_archive(&data, &mut marker.clone()).unwrap();
        let spill = tempfile::tempfile().unwrap();
        let mut streamed = Vec::new();
        let n = rocpack_elf::split_archive_to(
            &data,
            &data.as_slice(),
            &mut marker.clone(),
            &spill,
            &mut streamed,
        )
        .unwrap();
        assert_eq!(n as usize, streamed.len(), "{name}");
        assert!(streamed == split, "{name}: split");
        let orig = archive_members(&data).unwrap();
        let mut bundles = |n: &str, _: &rocpack_elf::FatBinaryInfo| {
            let m = orig.iter().find(|m| m.name == n).unwrap();
            Ok(bundles_of(m.data))
        };
        let spill = tempfile::tempfile().unwrap();
        let mut back = Vec::new();
        rocpack_elf::reassemble_archive_to(
            &split,
            &split.as_slice(),
            &mut bundles,
            &spill,
            &mut back,
        )
        .unwrap();
        assert!(back == data, "{name}: round trip");
    }
}
