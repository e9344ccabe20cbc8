//! What the rewrite of linked files (`rewrite`) and of relocatable objects
//! (`object_file`) share: `.shstrtab` and marker section headers, the
//! record of where the original had its `.shstrtab` and section header
//! table, wrapper magic/`co_index` writes and the rebuilt `.hip_fatbin`.
//! Both rewrites depend on this module and neither on the other's helpers.

use object::elf;

use crate::elf::analyze::{FatBinaryInfo, MARKER_SECTION};
use crate::elf::headers::{align_up, put_u32, Elf, Shdr, EHDR_SIZE, PHDR_SIZE};
use crate::{Error, Result};
use crate::{MarkerInfo, SectionRange, HIPF_MAGIC, HIPK_MAGIC};

/// Alignment of each bundle in a rebuilt `.hip_fatbin` (clang's).
const BUNDLE_ALIGN: u64 = 4096;

/// End of the file range that loaded content (segments, alloc sections,
/// headers) occupies; everything after it is non-alloc sections and the
/// section header table.
pub(crate) fn end_loaded(elf: &Elf<'_>) -> u64 {
    let mut end = EHDR_SIZE.max(elf.ehdr.e_phoff + elf.phdrs.len() as u64 * PHDR_SIZE);
    for p in &elf.phdrs {
        if p.p_type == elf::PT_LOAD {
            end = end.max(p.p_offset.saturating_add(p.p_filesz));
        }
    }
    for s in &elf.shdrs {
        if s.is_alloc() && s.has_file_data() {
            end = end.max(s.sh_offset.saturating_add(s.sh_size));
        }
    }
    end.min(elf.data.len() as u64)
}

/// End of everything the headers describe: the loaded content, every
/// section's file bytes and the section header table. Bytes after it
/// (patchelf leaves one behind the last segment it appends; other tools
/// append signatures or padding) are described by nothing.
pub(crate) fn end_described(elf: &Elf<'_>) -> u64 {
    let mut end = end_loaded(elf);
    for s in &elf.shdrs {
        if s.has_file_data() {
            end = end.max(s.sh_offset.saturating_add(s.sh_size));
        }
    }
    if elf.ehdr.e_shoff != 0 {
        let table = (elf.shdrs.len() as u64).saturating_mul(64);
        end = end.max(elf.ehdr.e_shoff.saturating_add(table));
    }
    end.min(elf.data.len() as u64)
}

/// Where the original file had its `.shstrtab` and section header table
/// when they lay among the loaded content (patchelf / auditwheel moves
/// segments behind them), and how many bytes it had after everything its
/// headers describe ([`end_described`]). Split cannot keep the first two
/// there (`.shstrtab` gains the marker's name, the table one entry), so it
/// writes both after the tail; it copies the trailing bytes to the end of
/// its output. The record sits in `.shstrtab`, after the marker's name:
/// `rocpack-layout shstrtab=<hex> shoff=<hex>[ trail=<hex>]` + NUL (0 = was
/// in the tail; `trail` only when there are trailing bytes). Reassembly puts
/// the tables back and the trailing bytes after them, so the result is
/// byte-identical (docs/formats/split-elf.md §2.3). `fatpad`: zero bytes
/// `.hip_fatbin` held after the end of its last bundle laid out as clang
/// does (an older clang left one), restored in its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OrigPlaces {
    pub shstrtab: Option<u64>,
    pub shoff: Option<u64>,
    /// Bytes after [`end_described`] of the input of split.
    pub trail: u64,
    /// Zero bytes of `.hip_fatbin` after its last bundle ([`fatbin_pad`]).
    pub fatpad: u64,
}

const PLACES_TAG: &str = "rocpack-layout ";

impl OrigPlaces {
    /// The places of `elf` (the input of split, analysed as `info`) that
    /// lie before `end`.
    pub(crate) fn of(elf: &Elf<'_>, info: &FatBinaryInfo, end: u64) -> Self {
        let shstrtab = elf
            .shdrs
            .get(elf.shstrndx)
            .filter(|s| elf.shstrndx != 0 && s.sh_offset < end)
            .map(|s| s.sh_offset);
        let shoff = Some(elf.ehdr.e_shoff).filter(|&o| o != 0 && o < end);
        let trail = (elf.data.len() as u64).saturating_sub(end_described(elf));
        OrigPlaces {
            shstrtab,
            shoff,
            trail,
            fatpad: fatbin_pad(elf, info),
        }
    }

    pub(crate) fn encode(self) -> Option<Vec<u8>> {
        if self == OrigPlaces::default() {
            return None;
        }
        let mut r = format!(
            "{PLACES_TAG}shstrtab={:x} shoff={:x}",
            self.shstrtab.unwrap_or(0),
            self.shoff.unwrap_or(0)
        )
        .into_bytes();
        if self.trail != 0 {
            r.extend_from_slice(format!(" trail={:x}", self.trail).as_bytes());
        }
        if self.fatpad != 0 {
            r.extend_from_slice(format!(" fatpad={:x}", self.fatpad).as_bytes());
        }
        r.push(0);
        Some(r)
    }

    /// Parse a record (without its NUL); `None` when it is not one.
    pub(crate) fn decode(rec: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(rec).ok()?.strip_prefix(PLACES_TAG)?;
        let mut places = OrigPlaces::default();
        for field in text.split(' ') {
            let (k, v) = field.split_once('=')?;
            let v = u64::from_str_radix(v, 16).ok()?;
            match k {
                "shstrtab" => places.shstrtab = Some(v).filter(|&v| v != 0),
                "shoff" => places.shoff = Some(v).filter(|&v| v != 0),
                "trail" => places.trail = v,
                "fatpad" if v < BUNDLE_ALIGN => places.fatpad = v,
                _ => return None,
            }
        }
        Some(places)
    }

    /// Keep only the places where they fit in the reassembled loaded
    /// content `[0, loaded_end)` of `elf` (the split file) without touching
    /// a section of `shdrs` (their output places) other than `.shstrtab`,
    /// the marker and the tail sections (laid out after `loaded_end`): a
    /// stripped split file may carry a record that no longer fits, and then
    /// the tail layout is used.
    pub(crate) fn checked(
        self,
        elf: &Elf<'_>,
        shdrs: &[Shdr],
        marker: usize,
        loaded_end: u64,
        shstrtab_len: u64,
    ) -> Self {
        let end = end_loaded(elf);
        let skip = |i: usize| {
            i == elf.shstrndx
                || i == marker
                || elf
                    .shdrs
                    .get(i)
                    .is_none_or(|s| !s.is_alloc() && s.sh_offset >= end)
        };
        let table_len = (shdrs.len() as u64).saturating_sub(1) * 64;
        let free = |pos: u64, len: u64| {
            pos.checked_add(len).is_some_and(|e| e <= loaded_end)
                && shdrs.iter().enumerate().all(|(i, s)| {
                    skip(i)
                        || !s.has_file_data()
                        || s.sh_size == 0
                        || s.sh_offset.saturating_add(s.sh_size) <= pos
                        || s.sh_offset >= pos + len
                })
        };
        let shstrtab = self.shstrtab.filter(|&p| free(p, shstrtab_len));
        let shoff = self.shoff.filter(|&p| {
            p % 8 == 0
                && free(p, table_len)
                && shstrtab.is_none_or(|s| s + shstrtab_len <= p || s >= p + table_len)
        });
        OrigPlaces {
            shstrtab,
            shoff,
            ..self
        }
    }

    /// Where the trailing bytes the record counts are in `elf` (the split
    /// file): right after everything its headers describe, and the file
    /// ends with them. `None` when there are none, or when a tool rewrote
    /// the split file (they are gone, or other bytes follow them).
    pub(crate) fn trail_in(self, elf: &Elf<'_>) -> Option<u64> {
        let at = end_described(elf);
        (self.trail != 0 && (elf.data.len() as u64).checked_sub(at) == Some(self.trail))
            .then_some(at)
    }
}

/// Copy the bytes of the input of split after everything its headers
/// describe ([`OrigPlaces::trail`]) to the end of `out`.
pub(crate) fn push_trail(elf: &Elf<'_>, out: &mut crate::Out) {
    let at = end_described(elf);
    let n = (elf.data.len() as u64).saturating_sub(at);
    if n != 0 {
        out.push_src(at, n);
    }
}

/// Put the trailing bytes of the original (see [`OrigPlaces::trail_in`])
/// back at the end of the reassembled `out`.
pub(crate) fn restore_trail(elf: &Elf<'_>, places: OrigPlaces, out: &mut crate::Out) {
    if let Some(at) = places.trail_in(elf) {
        out.push_src(at, places.trail);
    }
}

/// Zero bytes `.hip_fatbin` holds after the end of its last bundle, when its
/// bundles are laid out as [`fatbin_layout`] lays them (the layout
/// reassembly writes) and fewer than [`BUNDLE_ALIGN`] such bytes follow;
/// 0 otherwise.
pub(crate) fn fatbin_pad(elf: &Elf<'_>, info: &FatBinaryInfo) -> u64 {
    let Some(fb) = info.fatbin else { return 0 };
    let lens: Vec<u64> = info.bundles.iter().map(|b| b.len).collect();
    let (end, offsets) = fatbin_layout(&lens);
    let placed = info
        .bundles
        .iter()
        .zip(&offsets)
        .all(|(b, &o)| b.section_offset == o);
    let pad = fb.size.saturating_sub(end);
    if !placed || pad == 0 || pad >= BUNDLE_ALIGN || fb.nobits {
        return 0;
    }
    match crate::elf::headers::get(elf.data, fb.file_offset + end, pad, ".hip_fatbin") {
        Ok(b) if b.iter().all(|&x| x == 0) => pad,
        _ => 0,
    }
}

/// `.hip_fatbin` and the marker of a split `what` (binary, object).
pub(crate) fn split_sections<'i>(
    info: &'i FatBinaryInfo,
    what: &str,
) -> Result<(SectionRange, &'i MarkerInfo)> {
    let fb = info
        .fatbin
        .ok_or_else(|| Error::malformed(0, format!("split {what} without .hip_fatbin")))?;
    let mk = info
        .marker
        .as_ref()
        .ok_or_else(|| Error::malformed(0, format!("split {what} without .rocm_kpack_ref")))?;
    Ok((fb, mk))
}

/// Layout of a rebuilt `.hip_fatbin` of bundles of sizes `lens`, in order,
/// each aligned to [`BUNDLE_ALIGN`]: its size and the offset of each bundle.
pub(crate) fn fatbin_layout(lens: &[u64]) -> (u64, Vec<u64>) {
    let mut end = 0u64;
    let mut offsets = Vec::with_capacity(lens.len());
    for &n in lens {
        let pos = align_up(end, BUNDLE_ALIGN).unwrap_or(u64::MAX);
        offsets.push(pos);
        end = pos.saturating_add(n);
    }
    (end, offsets)
}

/// A rebuilt `.hip_fatbin` in memory (see [`fatbin_layout`]).
pub(crate) fn build_fatbin(bundles: &[Vec<u8>]) -> (Vec<u8>, Vec<u64>) {
    let lens: Vec<u64> = bundles.iter().map(|b| b.len() as u64).collect();
    let (len, offsets) = fatbin_layout(&lens);
    let mut fat = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    for (b, &o) in bundles.iter().zip(&offsets) {
        fat[o as usize..o as usize + b.len()].copy_from_slice(b);
    }
    (fat, offsets)
}

/// The bytes of `.shstrtab` (empty when the file has none).
pub(crate) fn shstrtab_bytes(elf: &Elf<'_>) -> Result<Vec<u8>> {
    Ok(elf
        .shdrs
        .get(elf.shstrndx)
        .map(|s| s.data(elf.data))
        .transpose()?
        .unwrap_or_default()
        .to_vec())
}

/// `.shstrtab` without the marker's name (and the [`OrigPlaces`] record
/// after it), when split appended them last; the record's places.
pub(crate) fn shstrtab_without_marker(
    elf: &Elf<'_>,
    mk: &MarkerInfo,
) -> Result<(Vec<u8>, OrigPlaces)> {
    let mut shstrtab = shstrtab_bytes(elf)?;
    let mname = elf.shdrs[mk.section.index].sh_name as usize;
    let rest = shstrtab.get(mname..).unwrap_or_default();
    let name_len = MARKER_SECTION.len() + 1;
    if rest.len() < name_len
        || &rest[..MARKER_SECTION.len()] != MARKER_SECTION.as_bytes()
        || rest[MARKER_SECTION.len()] != 0
    {
        return Ok((shstrtab, OrigPlaces::default()));
    }
    let places = match &rest[name_len..] {
        [] => OrigPlaces::default(),
        [rec @ .., 0] => match OrigPlaces::decode(rec) {
            Some(p) => p,
            None => return Ok((shstrtab, OrigPlaces::default())),
        },
        _ => return Ok((shstrtab, OrigPlaces::default())),
    };
    shstrtab.truncate(mname);
    Ok((shstrtab, places))
}

/// Header of the `.rocm_kpack_ref` section (ALLOC, PROGBITS, byte
/// aligned), its name at `sh_name` of `.shstrtab`.
pub(crate) fn marker_shdr(sh_name: u32, addr: u64, offset: u64, size: u64) -> Shdr {
    Shdr {
        sh_name,
        sh_type: elf::SHT_PROGBITS,
        sh_flags: u64::from(elf::SHF_ALLOC),
        sh_addr: addr,
        sh_offset: offset,
        sh_size: size,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 1,
        sh_entsize: 0,
        name: MARKER_SECTION.as_bytes().to_vec(),
    }
}

/// Make wrapper `wr` a split one (HIPK, `co_index` = its bundle) where
/// `locate` puts its input offset in the output; returns that offset.
pub(crate) fn write_hipk<S: crate::elf::headers::Sink + ?Sized>(
    out: &mut S,
    wr: &crate::elf::WrapperInfo,
    locate: impl FnOnce(u64) -> Result<u64>,
) -> Result<u64> {
    let co = wr.bundle.ok_or_else(|| Error::Wrapper {
        index: wr.index,
        offset: wr.file_offset,
        what: "wrapper does not point at a bundle".into(),
    })?;
    let woff = locate(wr.file_offset)?;
    put_u32(out, woff, HIPK_MAGIC)?;
    put_u32(
        out,
        woff + 16,
        u32::try_from(co).map_err(|_| Error::layout(woff, "too many bundles"))?,
    )?;
    Ok(woff)
}

/// Make the wrapper at output offset `woff` a fat one again (HIPF,
/// `co_index` 0).
pub(crate) fn write_hipf<S: crate::elf::headers::Sink + ?Sized>(
    out: &mut S,
    woff: u64,
) -> Result<()> {
    put_u32(out, woff, HIPF_MAGIC)?;
    put_u32(out, woff + 16, 0)
}
