//! Host-only rewrite of relocatable objects (static-archive members) and its
//! inverse. Objects have no segments, so the file is simply laid out again:
//! sections in their original order and alignment, `.hip_fatbin` becomes an
//! empty `SHT_NOBITS`, `.rocm_kpack_ref` (ALLOC, the marker) is appended as
//! the last section, and the symbol the wrapper relocation used (normally the
//! `.hip_fatbin` section symbol) is re-pointed at the marker section, so no
//! symbol index changes and every other relocation stays valid.

use std::collections::HashSet;

use object::elf;

use crate::elf::analyze::{FatBinaryInfo, PointerModel, MARKER_SECTION};
use crate::elf::headers::{align_up, grow, put_u16, put_u64, Elf, Shdr, EHDR_SIZE, SYM_SIZE};
use crate::elf::sections::{
    build_fatbin, marker_shdr, shstrtab_bytes, shstrtab_without_marker, split_sections, write_hipf,
    write_hipk,
};
use crate::{Error, Result};

struct Edit {
    /// Section index being replaced.
    index: usize,
    data: Vec<u8>,
}

/// Lay the object out again with `replace` applied and `extra` appended;
/// returns the output and each section's new offset.
fn relayout(elf: &Elf<'_>, shdrs: &mut [Shdr], replace: &[Edit]) -> Result<(Vec<u8>, Vec<u64>)> {
    let data = elf.data;
    let mut out = crate::elf::headers::get(data, 0, EHDR_SIZE, "ELF header")?.to_vec();
    let extra: u64 = replace.iter().map(|e| e.data.len() as u64).sum();
    let limit = (data.len() as u64)
        .saturating_add(extra)
        .saturating_add(1 << 16);
    let mut order: Vec<usize> = (1..shdrs.len()).collect();
    // Sections keep their original order; appended ones (offset 0 in the
    // template) go last.
    order.sort_by_key(|&i| {
        let orig = elf.shdrs.get(i).map_or(u64::MAX, |s| s.sh_offset);
        (orig, i)
    });
    let mut new_off = vec![0u64; shdrs.len()];
    for i in order {
        let content: Option<&[u8]> = match replace.iter().find(|e| e.index == i) {
            Some(e) => Some(&e.data),
            None => match elf.shdrs.get(i) {
                Some(s) if s.has_file_data() && shdrs[i].has_file_data() => Some(s.data(data)?),
                _ => None,
            },
        };
        let sh = &mut shdrs[i];
        let pos = match content {
            Some(c) => {
                let pos = align_up(out.len() as u64, sh.sh_addralign.max(1))
                    .ok_or_else(|| Error::layout(sh.sh_offset, "alignment overflow"))?;
                grow(&mut out, pos, limit)?;
                out.extend_from_slice(c);
                sh.sh_size = c.len() as u64;
                pos
            }
            None => {
                // Like the assemblers: NOBITS sections still align the
                // position (no bytes are written for them).
                let pos = align_up(out.len() as u64, sh.sh_addralign.max(1))
                    .ok_or_else(|| Error::layout(sh.sh_offset, "alignment overflow"))?;
                if sh.sh_type == elf::SHT_NOBITS && sh.sh_size > 0 {
                    grow(&mut out, pos, limit)?;
                    pos
                } else {
                    out.len() as u64
                }
            }
        };
        sh.sh_offset = pos;
        new_off[i] = pos;
    }
    Ok((out, new_off))
}

fn finish(mut out: Vec<u8>, shdrs: &[Shdr], shnum_field: bool) -> Result<Vec<u8>> {
    let shoff = align_up(out.len() as u64, 8).unwrap_or(u64::MAX);
    out.resize(shoff as usize, 0);
    for s in shdrs {
        out.extend_from_slice(&s.encode());
    }
    put_u64(&mut out, 40, shoff)?;
    if shnum_field {
        let n = u16::try_from(shdrs.len()).map_err(|_| Error::layout(60, "too many sections"))?;
        put_u16(&mut out, 60, n)?;
    }
    Ok(out)
}

/// Symbols used by the wrapper relocations; refuse if anything else uses them.
fn wrapper_symbols(elf: &Elf<'_>, info: &FatBinaryInfo) -> Result<(usize, HashSet<u32>)> {
    let mut syms = HashSet::new();
    let mut entries = HashSet::new();
    let mut symtab = None;
    for w in &info.wrappers {
        let PointerModel::Object {
            entry_offset,
            symbol_index,
            ..
        } = &w.pointer
        else {
            return Err(Error::Wrapper {
                index: w.index,
                offset: w.file_offset,
                what: "object wrapper without relocation".into(),
            });
        };
        syms.insert(*symbol_index);
        entries.insert(*entry_offset);
    }
    for (i, s) in elf.shdrs.iter().enumerate() {
        if s.sh_type != elf::SHT_RELA && s.sh_type != elf::SHT_REL {
            continue;
        }
        for r in elf.relocations(i)? {
            if entries.contains(&r.entry_offset) {
                let st = s.sh_link as usize;
                if symtab.is_some_and(|t| t != st) {
                    return Err(Error::unsupported(
                        r.entry_offset,
                        "wrapper relocations use two symbol tables",
                    ));
                }
                symtab = Some(st);
            }
        }
    }
    let symtab = symtab.ok_or_else(|| Error::malformed(0, "no wrapper relocation found"))?;
    for (i, s) in elf.shdrs.iter().enumerate() {
        if (s.sh_type != elf::SHT_RELA && s.sh_type != elf::SHT_REL) || s.sh_link as usize != symtab
        {
            continue;
        }
        for r in elf.relocations(i)? {
            if syms.contains(&r.r_sym) && !entries.contains(&r.entry_offset) {
                return Err(Error::unsupported(
                    r.entry_offset,
                    "the .hip_fatbin symbol is used by a relocation other than a wrapper pointer",
                ));
            }
        }
    }
    Ok((symtab, syms))
}

fn section_index_u16(i: usize) -> Result<u16> {
    u16::try_from(i)
        .ok()
        .filter(|&v| v < elf::SHN_LORESERVE)
        .ok_or_else(|| Error::unsupported(0, "section index needs SHN_XINDEX"))
}

/// Patch symbol `k` of `symtab` (at its new offset) to section `shndx`, value `value`.
fn patch_symbol(
    elf: &Elf<'_>,
    out: &mut [u8],
    new_off: &[u64],
    symtab: usize,
    k: u32,
    shndx: u16,
    value: u64,
) -> Result<()> {
    let base = new_off[symtab] + u64::from(k) * SYM_SIZE;
    if base + SYM_SIZE > out.len() as u64 || u64::from(k) * SYM_SIZE >= elf.shdrs[symtab].sh_size {
        return Err(Error::malformed(
            elf.shdrs[symtab].sh_offset,
            format!("symbol {k} out of range"),
        ));
    }
    put_u16(out, base + 6, shndx)?;
    put_u64(out, base + 8, value)
}

/// Map an input file offset inside section `i` to the output.
fn moved(elf: &Elf<'_>, new_off: &[u64], old: u64) -> Result<u64> {
    for (i, s) in elf.shdrs.iter().enumerate() {
        if s.has_file_data() && old >= s.sh_offset && old < s.sh_offset + s.sh_size {
            return Ok(new_off[i] + (old - s.sh_offset));
        }
    }
    Err(Error::layout(old, "internal: offset outside every section"))
}

pub(crate) fn split_object(elf: &Elf<'_>, info: &FatBinaryInfo, marker: &[u8]) -> Result<Vec<u8>> {
    let fb = info
        .fatbin
        .ok_or_else(|| Error::malformed(0, "object without .hip_fatbin"))?;
    if elf.ehdr.e_phnum != 0 {
        return Err(Error::unsupported(
            56,
            "relocatable object with program headers",
        ));
    }
    let (symtab, syms) = wrapper_symbols(elf, info)?;
    let mut shdrs = elf.shdrs.clone();
    let marker_index = shdrs.len();
    let marker_shndx = section_index_u16(marker_index)?;
    {
        let f = &mut shdrs[fb.index];
        f.sh_type = elf::SHT_NOBITS;
        f.sh_size = 0;
    }
    let mut shstrtab = shstrtab_bytes(elf)?;
    let name_off =
        u32::try_from(shstrtab.len()).map_err(|_| Error::layout(0, ".shstrtab too large"))?;
    shstrtab.extend_from_slice(MARKER_SECTION.as_bytes());
    shstrtab.push(0);
    shdrs.push(marker_shdr(name_off, 0, 0, marker.len() as u64));
    let edits = [
        Edit {
            index: elf.shstrndx,
            data: shstrtab,
        },
        Edit {
            index: marker_index,
            data: marker.to_vec(),
        },
    ];
    let (mut out, new_off) = relayout(elf, &mut shdrs, &edits)?;
    for &k in &syms {
        patch_symbol(elf, &mut out, &new_off, symtab, k, marker_shndx, 0)?;
    }
    for w in &info.wrappers {
        let woff = write_hipk(&mut out, w, |o| moved(elf, &new_off, o))?;
        if let PointerModel::Object { entry_offset, .. } = &w.pointer {
            let e = moved(elf, &new_off, *entry_offset)?;
            if is_rela_entry(elf, *entry_offset) {
                put_u64(&mut out, e + 16, 0)?;
            } else {
                put_u64(&mut out, woff + 8, 0)?;
            }
        }
    }
    let out = finish(out, &shdrs, elf.ehdr.e_shnum != 0)?;
    let check = crate::elf::analyze::analyze(&out)?;
    if check.state != crate::elf::State::Split {
        return Err(Error::layout(
            0,
            "internal: rewritten object does not analyse as split",
        ));
    }
    Ok(out)
}

fn is_rela_entry(elf: &Elf<'_>, entry: u64) -> bool {
    elf.shdrs.iter().any(|s| {
        s.sh_type == elf::SHT_RELA && entry >= s.sh_offset && entry < s.sh_offset + s.sh_size
    })
}

pub(crate) fn reassemble_object(
    elf: &Elf<'_>,
    info: &FatBinaryInfo,
    bundles: &[Vec<u8>],
) -> Result<Vec<u8>> {
    let (fb, mk) = split_sections(info, "object")?;
    if mk.section.index + 1 != elf.shdrs.len() {
        return Err(Error::unsupported(
            elf.shdr_offset(mk.section.index),
            ".rocm_kpack_ref is not the last section (not written by rocpack)",
        ));
    }
    let (symtab, syms) = wrapper_symbols(elf, info)?;
    let fb_shndx = section_index_u16(fb.index)?;
    let (fat, offs) = build_fatbin(bundles);
    let mut shdrs = elf.shdrs.clone();
    shdrs.pop();
    shdrs[fb.index].sh_type = elf::SHT_PROGBITS;
    let (shstrtab, _) = shstrtab_without_marker(elf, mk)?;
    let edits = [
        Edit {
            index: elf.shstrndx,
            data: shstrtab,
        },
        Edit {
            index: fb.index,
            data: fat,
        },
    ];
    let (mut out, new_off) = relayout(elf, &mut shdrs, &edits)?;
    for &k in &syms {
        patch_symbol(elf, &mut out, &new_off, symtab, k, fb_shndx, 0)?;
    }
    for w in &info.wrappers {
        let co = w.co_index() as usize;
        let woff = moved(elf, &new_off, w.file_offset)?;
        write_hipf(&mut out, woff)?;
        if let PointerModel::Object { entry_offset, .. } = &w.pointer {
            let e = moved(elf, &new_off, *entry_offset)?;
            if is_rela_entry(elf, *entry_offset) {
                put_u64(&mut out, e + 16, offs[co])?;
            } else {
                put_u64(&mut out, woff + 8, offs[co])?;
            }
        }
    }
    finish(out, &shdrs, elf.ehdr.e_shnum != 0)
}
