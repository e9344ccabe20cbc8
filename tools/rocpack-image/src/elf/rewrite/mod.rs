//! Host-only rewrite of linked ELF files (`ET_EXEC`, `ET_DYN`) and its exact
//! inverse. Layout (see `docs/formats/split-elf.md`):
//!
//! * the PT_LOAD `L` holding `.hip_fatbin` `[V, V+S)` becomes `L1` (file
//!   bytes up to the end of the last section before `V`, zero-filled up to
//!   `W`) and `L2` (from `W` to the end of `L`, file offset lowered by whole
//!   pages): the device bytes are gone from the file;
//! * `[W, V+S)` (file-backed, start of `L2`) holds the metadata sections
//!   moved away from behind the program-header table (so the table grows in
//!   place, at `e_phoff`, by the one entry `L2` needs) followed by the
//!   `.rocm_kpack_ref` marker;
//! * `.hip_fatbin` becomes `SHT_NOBITS` `[V, W)`; each wrapper becomes HIPK,
//!   `co_index` = bundle index, pointer = marker address, written the way
//!   its relocation model needs (RELA addend, symbol addend, REL/RELR/absolute
//!   value in place).
//!
//! Nothing is left in a section-less PT_LOAD and the program headers stay
//! right after the ELF header, where GNU `strip`/`objcopy` put them.

use std::collections::HashSet;

use object::elf;

use crate::elf::analyze::{
    analyze_elf, FatBinaryInfo, PointerModel, MARKER_SECTION, R_AARCH64_RELATIVE, R_X86_64_RELATIVE,
};
use crate::elf::headers::{
    align_down, align_up, get, put_u16, put_u64, u64_at, Elf, Phdr, Shdr, Sink, PHDR_SIZE,
    SHT_RELR, SYM_SIZE,
};
use crate::elf::sections::{
    end_loaded, fatbin_layout, marker_shdr, push_trail, restore_trail, shstrtab_bytes,
    shstrtab_without_marker, split_sections, write_hipf, write_hipk, OrigPlaces,
};
use crate::Out;
use crate::{Bundles, Fit, State};
use crate::{Error, Result};

mod reassembly;
mod split;

pub use reassembly::{
    reassemble, reassemble_into, reassemble_placed, reassemble_to, reassembly_fits,
};
pub use split::{parse_bundles, split_host, split_host_in, split_host_to};

/// Dynamic tags whose value is an address.
const ADDR_TAGS: &[u32] = &[
    elf::DT_HASH,
    elf::DT_STRTAB,
    elf::DT_SYMTAB,
    elf::DT_RELA,
    elf::DT_REL,
    elf::DT_JMPREL,
    36, // DT_RELR
    elf::DT_GNU_HASH,
    elf::DT_VERSYM,
    elf::DT_VERDEF,
    elf::DT_VERNEED,
];

/// Maps old file offsets to new ones, range by range.
#[derive(Default)]
struct OffMap(Vec<(u64, u64, u64)>);

impl OffMap {
    fn add(&mut self, old: u64, len: u64, new: u64) {
        self.0.push((old, old.saturating_add(len), new));
    }
    fn map(&self, old: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|(s, e, _)| old >= *s && old < *e)
            .map(|(s, _, n)| n + (old - s))
    }
    fn map_or_err(&self, old: u64, what: &str) -> Result<u64> {
        self.map(old)
            .ok_or_else(|| Error::layout(old, format!("internal: no new place for {what}")))
    }
}

/// No auxiliary source (split, in-memory bundles).
pub(crate) const NO_AUX: &[u8] = &[];

/// What a rewrite produced.
pub(crate) enum Rewritten {
    /// The input, unchanged.
    Unchanged,
    /// A whole new file (relocatable objects, small).
    Bytes(Vec<u8>),
    /// Pieces of the input and new bytes.
    Pieces(Out),
}

impl Rewritten {
    /// The file as pieces, whichever form it took (`input_len`: the input's
    /// size, for [`Rewritten::Unchanged`]).
    pub(crate) fn into_out(self, input_len: u64) -> Out {
        match self {
            Rewritten::Unchanged => {
                let mut o = Out::default();
                o.push_src(0, input_len);
                o
            }
            Rewritten::Bytes(v) => {
                let mut o = Out::default();
                o.extend_from_slice(&v);
                o
            }
            Rewritten::Pieces(o) => o,
        }
    }
}

/// The smallest page the loader of `e_machine` may use: segments must be
/// congruent modulo it. Every machine HIP supports (x86-64, aarch64,
/// ppc64le) has 4 KiB as its smallest page.
fn machine_page(_e_machine: u16) -> u64 {
    4096
}

/// The shift granularity of the rewrite: the largest PT_LOAD alignment, so
/// that moving file content by a multiple of it keeps every segment
/// congruent modulo its own alignment.
fn page_size(elf: &Elf<'_>) -> Result<u64> {
    let mut page = 4096u64;
    for p in elf.phdrs.iter().filter(|p| p.p_type == elf::PT_LOAD) {
        if p.p_align > page {
            page = p.p_align;
        }
    }
    if !page.is_power_of_two() || page > (1 << 24) {
        return Err(Error::unsupported(
            elf.ehdr.e_phoff,
            format!("PT_LOAD alignment {page:#x}"),
        ));
    }
    Ok(page)
}

/// Lay out the non-alloc sections after `end`, in their original order.
/// `shstrtab_at`: where the original file (reassembly) had its `.shstrtab`
/// among the loaded content (see [`OrigPlaces`]); it goes back there instead
/// of into the tail.
#[allow(clippy::too_many_arguments)]
fn layout_tail(
    elf: &Elf<'_>,
    end: u64,
    shdrs: &mut [Shdr],
    shstrtab: &[u8],
    shstrtab_at: Option<u64>,
    map: &mut OffMap,
    out: &mut Out,
    limit: u64,
) -> Result<()> {
    let mut tail: Vec<usize> = (0..elf.shdrs.len())
        .filter(|&i| i != 0 && !elf.shdrs[i].is_alloc() && elf.shdrs[i].sh_offset >= end)
        .collect();
    // patchelf (auditwheel) leaves non-allocated sections between loaded
    // segments; such a .shstrtab is written anew after the tail (its old
    // bytes stay where they are, unreferenced).
    let shstrtab_inside = elf.shstrndx != 0 && !tail.contains(&elf.shstrndx);
    if shstrtab_at.is_some() {
        tail.retain(|&i| i != elf.shstrndx);
    }
    tail.sort_by_key(|&i| (elf.shdrs[i].sh_offset, i));
    for i in tail {
        let s = &elf.shdrs[i];
        let align = s.sh_addralign.max(1);
        let pos = align_up(out.len(), align)
            .ok_or_else(|| Error::layout(s.sh_offset, "alignment overflow"))?;
        out.grow(pos, limit)?;
        if i == elf.shstrndx {
            out.extend_from_slice(shstrtab);
            shdrs[i].sh_size = shstrtab.len() as u64;
        } else if s.has_file_data() {
            let d = s.data(elf.data)?;
            map.add(s.sh_offset, s.sh_size, pos);
            out.push_src(s.sh_offset, d.len() as u64);
        }
        shdrs[i].sh_offset = pos;
    }
    if let Some(pos) = shstrtab_at {
        out.put(pos, shstrtab)?;
        shdrs[elf.shstrndx].sh_offset = pos;
        shdrs[elf.shstrndx].sh_size = shstrtab.len() as u64;
    } else if shstrtab_inside {
        let pos = out.len();
        if pos + shstrtab.len() as u64 > limit {
            return Err(Error::does_not_fit(
                pos,
                "output would grow beyond what the input allows",
            ));
        }
        out.extend_from_slice(shstrtab);
        shdrs[elf.shstrndx].sh_offset = pos;
        shdrs[elf.shstrndx].sh_size = shstrtab.len() as u64;
    }
    Ok(())
}

/// Append the section header table (or write it at `at`, its original
/// place, see [`OrigPlaces`]); returns the new `e_shoff`.
fn write_shdrs(shdrs: &[Shdr], out: &mut Out, at: Option<u64>) -> Result<u64> {
    if let Some(at) = at {
        for (k, s) in shdrs.iter().enumerate() {
            out.put(at + k as u64 * 64, &s.encode())?;
        }
        return Ok(at);
    }
    let shoff = align_up(out.len(), 8).unwrap_or(u64::MAX);
    out.resize(shoff);
    for s in shdrs.iter() {
        out.extend_from_slice(&s.encode());
    }
    Ok(shoff)
}

fn write_ehdr<S: Sink + ?Sized>(out: &mut S, phnum: u64, shoff: u64, shnum: u64) -> Result<()> {
    let phnum16 =
        u16::try_from(phnum).map_err(|_| Error::layout(56, "too many program headers"))?;
    put_u16(out, 56, phnum16)?;
    put_u64(out, 40, shoff)?;
    // Extended numbering is kept if the input used it (count in shdr[0]).
    if let Ok(n) = u16::try_from(shnum) {
        if n < elf::SHN_LORESERVE {
            put_u16(out, 60, n)?;
        }
    }
    Ok(())
}

/// Patch `.dynamic` address tags and symbol values that point into a moved
/// range `[lo, hi)` by `delta` (wrapping add, so a negative delta works).
fn relocate_block_refs<S: Sink + ?Sized>(
    elf: &Elf<'_>,
    out: &mut S,
    map: &OffMap,
    lo: u64,
    hi: u64,
    delta: u64,
    moved: &HashSet<usize>,
) -> Result<()> {
    for (i, s) in elf.shdrs.iter().enumerate() {
        if s.sh_type == elf::SHT_DYNAMIC {
            let n = s.sh_size / 16;
            for k in 0..n {
                let old = s.sh_offset + k * 16;
                let tag = u64_at(elf.data, old, "dynamic entry")?;
                let val = u64_at(elf.data, old + 8, "dynamic entry")?;
                if tag == u64::from(elf::DT_NULL) {
                    break;
                }
                if ADDR_TAGS.iter().any(|&t| u64::from(t) == tag) && val >= lo && val < hi {
                    let new = map.map_or_err(old + 8, ".dynamic")?;
                    put_u64(out, new, val.wrapping_add(delta))?;
                }
            }
        }
        if s.sh_type == elf::SHT_SYMTAB || s.sh_type == elf::SHT_DYNSYM {
            let syms = elf.symbols(i)?;
            for (k, sym) in syms.iter().enumerate() {
                if moved.contains(&usize::from(sym.st_shndx)) {
                    let old = s.sh_offset + k as u64 * SYM_SIZE + 8;
                    let new = map.map_or_err(old, "symbol")?;
                    put_u64(out, new, sym.st_value.wrapping_add(delta))?;
                }
            }
        }
    }
    Ok(())
}

/// Check the invariants the layout arithmetic relies on, so that it can use
/// plain arithmetic afterwards: segments and sections inside the file, no
/// address overflow, file-backed sizes within memory sizes, loaded sections
/// at offsets matching their addresses.
fn validate_layout(elf: &Elf<'_>, page: u64) -> Result<()> {
    let len = elf.data.len() as u64;
    let limit = 1u64 << 56;
    for (i, p) in elf.phdrs.iter().enumerate() {
        let at = elf.ehdr.e_phoff + i as u64 * PHDR_SIZE;
        let bad = |what: &str| Err(Error::malformed(at, format!("program header {i}: {what}")));
        if p.p_offset.checked_add(p.p_filesz).is_none_or(|e| e > len) && p.p_filesz > 0 {
            return bad("file range outside the file");
        }
        if p.p_vaddr >= limit || p.p_memsz >= limit || p.p_offset >= limit {
            return bad("address or size out of range");
        }
        if p.p_type == elf::PT_LOAD {
            if p.p_filesz > p.p_memsz {
                return bad("p_filesz > p_memsz");
            }
            // Each segment is congruent modulo its own alignment and the
            // machine page (what the loader needs), never modulo the largest
            // alignment in the file: lld gives the first PT_LOAD 0x8000
            // and the others 0x1000, which is valid ELF.
            let own = if p.p_align > 1 { p.p_align } else { 1 };
            if !own.is_power_of_two() {
                return bad("p_align is not a power of two");
            }
            let m = machine_page(elf.ehdr.e_machine).min(page);
            if p.p_offset % own != p.p_vaddr % own || p.p_offset % m != p.p_vaddr % m {
                return bad("offset and address not congruent");
            }
        }
    }
    for (i, s) in elf.shdrs.iter().enumerate() {
        let at = elf.shdr_offset(i);
        if s.sh_addr >= limit
            || s.sh_size >= limit
            || s.sh_offset >= limit
            || s.sh_addralign > (1 << 24)
        {
            return Err(Error::malformed(
                at,
                format!("section {i}: value out of range"),
            ));
        }
        if s.has_file_data() && s.sh_offset + s.sh_size > len {
            return Err(Error::malformed(
                at,
                format!("section {} lies outside the file", s.name_str()),
            ));
        }
        if s.is_alloc() && s.has_file_data() && s.sh_size > 0 {
            let inside = elf.phdrs.iter().any(|p| {
                p.p_type == elf::PT_LOAD
                    && s.sh_addr >= p.p_vaddr
                    && s.sh_addr + s.sh_size <= p.p_vaddr + p.p_filesz
                    && s.sh_offset.wrapping_sub(p.p_offset) == s.sh_addr - p.p_vaddr
            });
            if !inside {
                return Err(Error::malformed(
                    at,
                    format!("section {} is not where its PT_LOAD maps it", s.name_str()),
                ));
            }
        }
    }
    if elf.ehdr.e_phoff >= limit {
        return Err(Error::malformed(32, "e_phoff out of range"));
    }
    Ok(())
}

/// Index of the PT_LOAD whose file image holds the ELF and program headers.
fn header_load(elf: &Elf<'_>) -> Result<usize> {
    elf.phdrs
        .iter()
        .position(|p| {
            p.p_type == elf::PT_LOAD
                && p.p_offset <= elf.ehdr.e_phoff
                && elf.ehdr.e_phoff < p.p_offset.saturating_add(p.p_filesz)
        })
        .ok_or_else(|| {
            Error::unsupported(
                elf.ehdr.e_phoff,
                "program header table is not inside a PT_LOAD segment",
            )
        })
}

/// Write the program header table at `e_phoff`.
fn write_phdrs<S: Sink + ?Sized>(elf: &Elf<'_>, out: &mut S, phdrs: &[Phdr]) -> Result<()> {
    for (k, p) in phdrs.iter().enumerate() {
        out.put(elf.ehdr.e_phoff + k as u64 * PHDR_SIZE, &p.encode())?;
    }
    Ok(())
}

/// Write a wrapper's pointer so it evaluates to `target` at run time.
fn write_pointer<S: Sink + ?Sized>(
    out: &mut S,
    map: &OffMap,
    wr: &crate::elf::WrapperInfo,
    target: u64,
) -> Result<()> {
    let field = map.map_or_err(wr.file_offset + 8, "wrapper pointer")?;
    match &wr.pointer {
        PointerModel::Absolute | PointerModel::Relr { .. } => put_u64(out, field, target)?,
        PointerModel::RelaRelative { entry_offset } => {
            let e = map.map_or_err(*entry_offset, "relocation")?;
            put_u64(out, e + 16, target)?;
            if wr.value_in_file != 0 {
                put_u64(out, field, target)?;
            }
        }
        PointerModel::RelaSymbol {
            entry_offset,
            symbol_value,
            ..
        } => {
            let e = map.map_or_err(*entry_offset, "relocation")?;
            put_u64(out, e + 16, target.wrapping_sub(*symbol_value))?;
            if wr.value_in_file != 0 {
                put_u64(out, field, target)?;
            }
        }
        PointerModel::Rel { r_type, .. } => {
            let relative = *r_type == R_X86_64_RELATIVE || *r_type == R_AARCH64_RELATIVE;
            let sym_value = wr.target.wrapping_sub(wr.value_in_file);
            let v = if relative {
                target
            } else {
                target.wrapping_sub(sym_value)
            };
            put_u64(out, field, v)?;
        }
        PointerModel::Object { .. } => {
            return Err(Error::layout(
                field,
                "internal: object pointer in a linked file",
            ))
        }
    }
    Ok(())
}

/// How a rewrite moves each section of the loaded content: the one
/// section-header fix-up of split and reassembly ([`fix_shdrs`]).
struct ShdrFix<'a> {
    /// `.hip_fatbin` (its index) and what becomes of it.
    fatbin: (usize, &'a dyn Fn(&mut Shdr)),
    /// A section of the metadata block moved behind the program headers.
    moved: &'a dyn Fn(&mut Shdr),
    /// Any other allocated section, or one before `end` (its index).
    loaded: &'a dyn Fn(usize, &mut Shdr) -> Result<()>,
}

/// The section headers of `elf` fixed up for a rewrite of its loaded
/// content (`[0, end)`): `.hip_fatbin`, the `moved` block and the other
/// loaded sections as `fix` says; the null header and the non-allocated
/// sections after `end` are left as they are (the tail is laid out by
/// [`layout_tail`]).
fn fix_shdrs(
    elf: &Elf<'_>,
    moved: &HashSet<usize>,
    end: u64,
    fix: ShdrFix<'_>,
) -> Result<Vec<Shdr>> {
    let mut shdrs = elf.shdrs.clone();
    for (i, sh) in shdrs.iter_mut().enumerate() {
        if i == 0 {
            continue;
        }
        if i == fix.fatbin.0 {
            (fix.fatbin.1)(sh);
        } else if moved.contains(&i) {
            (fix.moved)(sh);
        } else if sh.is_alloc() || sh.sh_offset < end {
            (fix.loaded)(i, sh)?;
        }
    }
    Ok(shdrs)
}
