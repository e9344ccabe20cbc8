//! What analysing a PE32+ image or COFF object reads, loaded into a
//! [`Sparse`] map of pieces with positioned reads (the counterpart of
//! `Sparse::load_elf`): the headers, the section table, the COFF symbol
//! and string tables, the wrapper and marker sections, the base relocation
//! directory (images) or the wrapper section's relocations (objects).
//! Code, data and the bundle section are never read: the analysis finds
//! the bundles through the file. Malformed headers stop the loading
//! without error (the analysis refuses them the same way).
//!
//! Keep in step with `analyze.rs` (`sparse_analysis_equals_whole` in
//! `tests/pe_fixtures.rs` compares both on every fixture).

use std::io;

use crate::{Sparse, SparseView};
use object::pe;
use object::read::coff::CoffHeader;
use object::read::pe::ImageNtHeaders;
use object::LittleEndian as LE;
use rocpack_bundle::ReadAt;

use super::analyze::decode_sections;
use super::{MARKER_SECTION, WRAPPER_SECTIONS};
use crate::FileType;

/// Loads what analysing the PE image or COFF object (of type `kind`,
/// which [`crate::detect`] gave) in `src` reads.
pub(crate) fn load(sp: &mut Sparse, src: &dyn ReadAt, kind: FileType) -> io::Result<()> {
    match kind {
        FileType::Pe { pe32_plus: true } => load_image(sp, src),
        FileType::Coff { bigobj: false } => load_object::<pe::ImageFileHeader>(sp, src),
        FileType::Coff { bigobj: true } => load_object::<pe::AnonObjectHeaderBigobj>(sp, src),
        _ => Ok(()),
    }
}

fn u16_at(b: SparseView<'_>, at: u64) -> u64 {
    b.get(at, 2)
        .map_or(0, |x| u64::from(u16::from_le_bytes([x[0], x[1]])))
}

fn u32_at(b: SparseView<'_>, at: u64) -> u64 {
    b.get(at, 4).map_or(0, |x| {
        u64::from(u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
    })
}

/// The symbol table (`n` records of `size` bytes at `at`) and the string
/// table behind it.
fn load_symbols(sp: &mut Sparse, src: &dyn ReadAt, at: u64, n: u64, size: u64) -> io::Result<()> {
    if at == 0 {
        return Ok(());
    }
    let strings = at.saturating_add(n.saturating_mul(size));
    sp.load(src, at, n.saturating_mul(size))?;
    sp.load(src, strings, 4)?;
    let len = u32_at(sp.bytes(), strings);
    sp.load(src, strings, len)
}

/// Raw data of the wrapper and marker sections (where they are).
fn wanted(s: &super::PeSection) -> bool {
    WRAPPER_SECTIONS.contains(&s.name.as_str()) || s.name == MARKER_SECTION
}

fn load_image(sp: &mut Sparse, src: &dyn ReadAt) -> io::Result<()> {
    sp.load(src, 0, 64)?;
    let nt = u32_at(sp.bytes(), 0x3c);
    sp.load(src, nt, 24)?;
    let b = sp.bytes();
    let (nsec, sym, nsym, opt) = (
        u16_at(b, nt + 6),
        u32_at(b, nt + 12),
        u32_at(b, nt + 16),
        u16_at(b, nt + 20),
    );
    sp.load(src, nt + 24, opt)?;
    sp.load(src, nt + 24 + opt, nsec * 40)?;
    load_symbols(sp, src, sym, nsym, 18)?;
    let data = sp.bytes();
    let mut off = nt;
    let Ok((h, dirs)) = pe::ImageNtHeaders64::parse(data, &mut off) else {
        return Ok(());
    };
    let Ok(table) = h.sections(data, off) else {
        return Ok(());
    };
    let strings = h.symbols(data).ok().map(|s| s.strings());
    let Ok(sections) = decode_sections(&table, off, strings) else {
        return Ok(());
    };
    let mut ranges: Vec<(u64, u64)> = sections
        .iter()
        .filter(|s| wanted(s))
        .map(|s| (u64::from(s.raw_offset), u64::from(s.raw_size)))
        .collect();
    if let Some(Ok((at, n))) = dirs
        .get(pe::IMAGE_DIRECTORY_ENTRY_BASERELOC)
        .map(|d| d.file_range(&table))
    {
        ranges.push((u64::from(at), u64::from(n)));
    }
    for (at, n) in ranges {
        sp.load(src, at, n)?;
    }
    Ok(())
}

fn load_object<C: CoffHeader>(sp: &mut Sparse, src: &dyn ReadAt) -> io::Result<()> {
    let head = std::mem::size_of::<C>() as u64;
    sp.load(src, 0, head)?;
    let mut off = 0u64;
    let (nsec, sym, nsym) = match C::parse(sp.bytes(), &mut off) {
        Ok(h) => (
            h.number_of_sections() as u64,
            u64::from(h.pointer_to_symbol_table()),
            u64::from(h.number_of_symbols()),
        ),
        Err(_) => return Ok(()),
    };
    sp.load(src, off, nsec * 40)?;
    let record = std::mem::size_of::<C::ImageSymbol>() as u64;
    load_symbols(sp, src, sym, nsym, record)?;
    let data = sp.bytes();
    let Ok(h) = C::parse(data, &mut 0) else {
        return Ok(());
    };
    let Ok(table) = h.sections(data, off) else {
        return Ok(());
    };
    let strings = h.symbols(data).ok().map(|s| s.strings());
    let Ok(sections) = decode_sections(&table, off, strings) else {
        return Ok(());
    };
    let mut ranges = Vec::new();
    let mut relocs = Vec::new();
    for s in sections.iter().filter(|s| wanted(s)) {
        ranges.push((u64::from(s.raw_offset), u64::from(s.raw_size)));
        if let Some(raw) = table.iter().nth(s.index) {
            relocs.push((
                u64::from(raw.pointer_to_relocations.get(LE)),
                u64::from(raw.number_of_relocations.get(LE)),
                raw.characteristics.get(LE) & pe::IMAGE_SCN_LNK_NRELOC_OVFL != 0,
            ));
        }
    }
    for (at, n) in ranges {
        sp.load(src, at, n)?;
    }
    for (at, n, overflow) in relocs {
        // Extended count: the first record's address field holds it.
        let n = if overflow {
            sp.load(src, at, 10)?;
            u32_at(sp.bytes(), at)
        } else {
            n
        };
        sp.load(src, at, n.saturating_mul(10))?;
    }
    Ok(())
}
