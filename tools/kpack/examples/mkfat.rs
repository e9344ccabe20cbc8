//! Build a compressed fat binary with a large CCOB from fixture code
//! objects, with this repository's own bundle writer (for bench/ccob-large.sh
//! and the memory tests).
//!
//! `mkfat BASE OUT PAYLOAD_MIB TARGETS [PAYLOAD_ZST]`: BASE is a fat ELF
//! file or a static archive (then its first fat member, a relocatable
//! object whose `.hip_fatbin` can take a bundle of any size). The device
//! code objects of BASE's first bundle are repeated (each 4 KiB page
//! stamped with its entry and page number, so no two pages are equal) into
//! TARGETS entries for distinct GPU targets, `PAYLOAD_MIB` MiB in all, with
//! a host entry first; the bundle is compressed as a CCOB v3 (zstd, level
//! 3) and put in place of BASE's first bundle (split + reassemble). With
//! PAYLOAD_ZST, the CCOB's compressed payload (one zstd frame) is written
//! there too, for `zstd -d` in the same run.

use std::process::ExitCode;

/// Real GPU targets, then feature variants, for distinct entry IDs.
fn targets(n: usize) -> Vec<String> {
    let base = [
        "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c", "gfx940",
        "gfx941", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030",
        "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036", "gfx1100", "gfx1101",
        "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201",
    ];
    let feats = ["", ":xnack-", ":xnack+", ":sramecc-", ":sramecc+"];
    let mut out = Vec::new();
    for f in feats {
        for b in base {
            out.push(format!("hipv4-amdgcn-amd-amdhsa--{b}{f}"));
        }
    }
    out.truncate(n);
    out
}

pub fn make(base: &[u8], payload_mib: usize, n: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
    // An archive stands for its first member with device code (a
    // relocatable object: its .hip_fatbin can grow to any size).
    let member;
    let base = if rocpack_elf::is_archive(base) {
        member = rocpack_elf::archive_members(base)
            .map_err(|e| e.to_string())?
            .into_iter()
            .find(|m| rocpack_elf::analyze(m.data).is_ok_and(|i| i.has_device_code()))
            .ok_or("no member with device code")?
            .data
            .to_vec();
        &member[..]
    } else {
        base
    };
    let info = rocpack_elf::analyze(base).map_err(|e| e.to_string())?;
    if info.bundles.is_empty() {
        return Err("base has no bundle".into());
    }
    let mut bundles: Vec<Vec<u8>> = Vec::new();
    for b in &info.bundles {
        bundles.push(
            rocpack_elf::bundle_bytes(base, &info, b.index)
                .map_err(|e| e.to_string())?
                .to_vec(),
        );
    }
    let first = rocpack_bundle::parse_bundle(&bundles[0]).map_err(|e| e.to_string())?;
    let seed: Vec<u8> = first
        .device_entries()
        .flat_map(|e| e.data.iter().copied())
        .collect();
    if seed.is_empty() {
        return Err("base's first bundle has no device code".into());
    }
    drop(first);
    let ids = targets(n);
    if ids.len() < n {
        return Err(format!("at most {} targets", ids.len()));
    }
    let per = (payload_mib << 20) / n;
    let mut objects: Vec<Vec<u8>> = Vec::with_capacity(n);
    for k in 0..n {
        let mut v = Vec::with_capacity(per);
        while v.len() < per {
            let take = (per - v.len()).min(seed.len());
            v.extend_from_slice(&seed[..take]);
        }
        for (page, chunk) in v.chunks_mut(4096).enumerate() {
            if chunk.len() >= 16 {
                chunk[..8].copy_from_slice(&(k as u64).to_le_bytes());
                chunk[8..16].copy_from_slice(&(page as u64).to_le_bytes());
            }
        }
        objects.push(v);
    }
    let mut entries: Vec<(String, &[u8])> =
        vec![("host-x86_64-unknown-linux-gnu-".to_string(), &[][..])];
    for (id, o) in ids.iter().zip(&objects) {
        entries.push((id.clone(), o));
    }
    let raw = rocpack_bundle::write_uncompressed(&entries);
    drop(objects);
    let ccob = rocpack_bundle::write_ccob_level(&raw, 3, rocpack_bundle::Compression::Zstd, 3)
        .map_err(|e| e.to_string())?;
    drop(raw);
    let frame = ccob[32..].to_vec();
    bundles[0] = ccob;
    let host = rocpack_elf::split_host(base, b"mkfat").map_err(|e| e.to_string())?;
    let fat = rocpack_elf::reassemble(&host, &bundles).map_err(|e| e.to_string())?;
    Ok((fat, frame))
}

fn main() -> ExitCode {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 5 {
        eprintln!("usage: mkfat BASE OUT PAYLOAD_MIB TARGETS [PAYLOAD_ZST]");
        return ExitCode::from(2);
    }
    let run = || -> Result<(), String> {
        let base = std::fs::read(&a[1]).map_err(|e| format!("{}: {e}", a[1]))?;
        let mib: usize = a[3].parse().map_err(|_| "PAYLOAD_MIB".to_string())?;
        let n: usize = a[4].parse().map_err(|_| "TARGETS".to_string())?;
        let (fat, frame) = make(&base, mib, n)?;
        std::fs::write(&a[2], fat).map_err(|e| format!("{}: {e}", a[2]))?;
        if let Some(z) = a.get(5) {
            std::fs::write(z, frame).map_err(|e| format!("{z}: {e}"))?;
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mkfat: {e}");
            ExitCode::FAILURE
        }
    }
}
