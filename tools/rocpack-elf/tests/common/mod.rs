//! Shared helpers for the fixture tests.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};

pub use rocpack_testsupport::{contains, fixtures, have_fixtures, have_tool};

/// Every linked fat ELF: fatbins/* (not archives, not host-only) and the fat
/// host ELFs listed in artifacts-inventory.tsv.
pub fn fat_elfs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let dir = fixtures().join("fatbins");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in names {
        let d = std::fs::read(&p).unwrap();
        if d.starts_with(b"\x7fELF") {
            let info = rocpack_elf::analyze(&d).unwrap();
            if info.has_device_code() {
                out.push(p);
            }
        }
    }
    let inv = std::fs::read_to_string(fixtures().join("artifacts-inventory.tsv")).unwrap();
    for line in inv.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.get(1) == Some(&"host-elf-with-hip_fatbin") {
            out.push(fixtures().join(cols[0]));
        }
    }
    out
}

/// Host-only ELF fixtures (must pass through unchanged).
pub fn host_only_elfs() -> Vec<PathBuf> {
    let mut out = vec![fixtures().join("fatbins/libfx_hostonly.so")];
    let inv = std::fs::read_to_string(fixtures().join("artifacts-inventory.tsv")).unwrap();
    for line in inv.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols.get(1) == Some(&"host-elf-no-device-code") {
            out.push(fixtures().join(cols[0]));
        }
    }
    out
}

/// Path relative to the fixtures dir, as the TSVs spell it.
pub fn rel(p: &Path) -> String {
    p.strip_prefix(fixtures())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A recognisable marker payload per file (opaque to the crate).
pub fn marker_for(p: &Path) -> Vec<u8> {
    format!("rocpack-test-marker:{}", rel(p)).into_bytes()
}

/// (target id, code object bytes) of every device entry of every bundle.
pub fn code_objects(data: &[u8]) -> Vec<Vec<(String, Vec<u8>)>> {
    let info = rocpack_elf::analyze(data).unwrap();
    (0..info.bundles.len())
        .map(|i| {
            let bytes = rocpack_elf::bundle_bytes(data, &info, i).unwrap();
            let b = rocpack_bundle::parse_bundle(bytes).unwrap();
            let mut v: Vec<(String, Vec<u8>)> = b
                .device_entries()
                .map(|e| (e.id.as_str().to_string(), e.data.to_vec()))
                .collect();
            v.sort();
            v
        })
        .collect()
}

pub fn bundles_of(data: &[u8]) -> Vec<Vec<u8>> {
    let info = rocpack_elf::analyze(data).unwrap();
    (0..info.bundles.len())
        .map(|i| rocpack_elf::bundle_bytes(data, &info, i).unwrap().to_vec())
        .collect()
}
