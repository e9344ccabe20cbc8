//! Bad input: errors naming an offset, never a panic.

mod common;

use common::*;
use rocpack_elf::{analyze, reassemble, split_host, Error};

#[test]
fn truncated_elf_is_an_error_not_a_panic() {
    if !have_fixtures() {
        return;
    }
    let data = std::fs::read(fixtures().join("fatbins/libfx_two_tu.so")).unwrap();
    let split = split_host(&data, b"marker").unwrap();
    for src in [&data, &split] {
        let mut step = 1;
        let mut len = 0;
        while len < src.len() {
            let cut = &src[..len];
            let a = analyze(cut);
            let s = split_host(cut, b"marker");
            let r = reassemble(cut, &[vec![1, 2, 3]]);
            if len < 64 {
                assert!(a.is_err());
            }
            for e in [a.err(), s.err(), r.err()].into_iter().flatten() {
                assert!(e.offset().is_some(), "{e}");
                assert!(!e.to_string().is_empty());
            }
            len += step;
            step = (step * 2).min(97);
        }
    }
    let e = analyze(&data[..100]).unwrap_err();
    assert!(matches!(e, Error::Truncated { .. }), "{e}");
}

#[test]
fn wrapper_pointing_outside_fatbin_names_its_offset() {
    if !have_fixtures() {
        return;
    }
    let mut data = std::fs::read(fixtures().join("fatbins/libfx_multi.so")).unwrap();
    let info = analyze(&data).unwrap();
    let w = &info.wrappers[0];
    let rocpack_elf::PointerModel::RelaRelative { entry_offset } = w.pointer else {
        panic!("expected RELA RELATIVE");
    };
    // Point the addend (and the in-place value) past the end of .hip_fatbin.
    let fb = info.fatbin.unwrap();
    let bad = fb.addr + fb.size + 0x100;
    data[entry_offset as usize + 16..entry_offset as usize + 24]
        .copy_from_slice(&bad.to_le_bytes());
    let e = analyze(&data).unwrap_err();
    match &e {
        Error::Wrapper {
            index,
            offset,
            what,
        } => {
            assert_eq!(*index, 0);
            assert_eq!(*offset, w.file_offset + 8);
            assert!(what.contains("outside .hip_fatbin"), "{what}");
        }
        other => panic!("unexpected {other}"),
    }
    assert!(split_host(&data, b"m").is_err());
    // Inside the section but not at a bundle start.
    let mid = fb.addr + 8;
    data[entry_offset as usize + 16..entry_offset as usize + 24]
        .copy_from_slice(&mid.to_le_bytes());
    let e = analyze(&data).unwrap_err();
    assert!(e.to_string().contains("not the start of a bundle"), "{e}");
}

#[test]
fn overlapping_bundle_entries_are_refused_with_offset() {
    if !have_fixtures() {
        return;
    }
    let mut data = std::fs::read(fixtures().join("fatbins/libfx_multi.so")).unwrap();
    let info = analyze(&data).unwrap();
    let b = &info.bundles[0];
    let base = b.file_offset as usize;
    // Entry table: magic(24) count(8), then {offset, size, idlen, id}.
    let mut pos = base + 32;
    let mut offsets = Vec::new();
    for _ in 0..3 {
        let off = u64::from_le_bytes(data[pos..pos + 8].try_into().unwrap());
        let idlen = u64::from_le_bytes(data[pos + 16..pos + 24].try_into().unwrap()) as usize;
        offsets.push(pos);
        pos += 24 + idlen;
        let _ = off;
    }
    // Make device entry 2 start inside device entry 1.
    let e1 = u64::from_le_bytes(data[offsets[1]..offsets[1] + 8].try_into().unwrap());
    data[offsets[2]..offsets[2] + 8].copy_from_slice(&(e1 + 16).to_le_bytes());
    let err = split_host(&data, b"marker").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("overlap") || msg.contains("bundle"), "{msg}");
    assert!(err.offset().is_some_and(|o| o >= b.file_offset), "{msg}");
}

#[test]
fn garbage_and_non_elf_inputs() {
    for d in [
        &b""[..],
        b"\x7fELF",
        b"!<arch>\n",
        b"!<arch>\nshort",
        b"hello world",
    ] {
        let _ = analyze(d);
        let _ = split_host(d, b"m");
        let _ = rocpack_elf::split_file(d, &mut |_, _| Ok(b"m".to_vec()));
        let _ = rocpack_elf::archive_members(d);
    }
    assert!(matches!(analyze(b"hello world"), Err(Error::NotElf)));
}

/// Fuzz find (`elf` target, 40 KiB input): a `.symtab` whose `sh_offset`
/// put it over the ELF header was accepted; reassembly renumbers each
/// symbol's `st_shndx` after removing the marker section, so it decremented
/// `e_phentsize` (56 -> 55) and wrote an output that no longer parses. A
/// section over the ELF header or the program header table is refused.
#[test]
fn a_section_over_the_elf_or_program_headers_is_refused() {
    if !have_fixtures() {
        return;
    }
    let data = std::fs::read(fixtures().join("fatbins/libfx_relr.so")).unwrap();
    let u64_at = |d: &[u8], at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
    let shoff = u64_at(&data, 40) as usize;
    let shnum = usize::from(u16::from_le_bytes([data[60], data[61]]));
    let symtab = (0..shnum)
        .map(|i| shoff + 64 * i)
        .find(|&h| data[h + 4] == 2) // SHT_SYMTAB
        .expect("a .symtab");
    // At 0 the third symbol's st_shndx is e_phentsize (as in the fuzz input),
    // and one inside the program header table (e_phoff 64).
    for (at, what) in [(0u64, "ELF header"), (64 + 56, "program header table")] {
        let mut bad = data.clone();
        bad[symtab + 24..symtab + 32].copy_from_slice(&at.to_le_bytes());
        let err = analyze(&bad).unwrap_err().to_string();
        assert!(err.contains(".symtab") && err.contains(what), "{err}");
        assert!(split_host(&bad, b"marker").is_err());
    }
    // Untouched, the same file splits and reassembles to an ELF that parses.
    let info = analyze(&data).unwrap();
    let bundles: Vec<Vec<u8>> = (0..info.bundles.len())
        .map(|i| rocpack_elf::bundle_bytes(&data, &info, i).unwrap().to_vec())
        .collect();
    let back = reassemble(&split_host(&data, b"marker").unwrap(), &bundles).unwrap();
    analyze(&back).unwrap();
}
