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
use crate::elf::error::{Error, Result};
use crate::elf::headers::{
    align_down, align_up, get, put_u16, put_u64, u64_at, Elf, Phdr, Shdr, Sink, PHDR_SIZE,
    SHT_RELR, SYM_SIZE,
};
use crate::elf::out::Out;
use crate::elf::sections::{
    end_loaded, fatbin_layout, marker_shdr, push_trail, restore_trail, shstrtab_bytes,
    shstrtab_without_marker, split_sections, write_hipf, write_hipk, OrigPlaces,
};
use crate::{Fit, State};

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

/// Rewrite a fat ELF file as host-only: device bytes removed, `.hip_fatbin`
/// NOBITS, `.rocm_kpack_ref` holding `marker_payload` in a loadable segment,
/// every wrapper HIPK pointing at it. Host-only input is returned unchanged.
pub fn split_host(data: &[u8], marker_payload: &[u8]) -> Result<Vec<u8>> {
    split_host_in(data, &data, marker_payload)
}

/// [`split_host`], reading bundle headers through `src`, a source of the
/// same bytes as `data` (see [`crate::elf::analyze_in`]): only the host part of
/// a mapped input is touched.
pub fn split_host_in(
    data: &[u8],
    src: &dyn rocpack_bundle::ReadAt,
    marker_payload: &[u8],
) -> Result<Vec<u8>> {
    let (plan, wrappers) = split_plan(data, src, marker_payload)?;
    match plan {
        Rewritten::Unchanged => Ok(data.to_vec()),
        Rewritten::Bytes(v) => Ok(v),
        Rewritten::Pieces(out) => {
            let v = out.to_vec(src, &NO_AUX)?;
            check_split(&v, wrappers)?;
            Ok(v)
        }
    }
}

/// [`split_host_in`] written to `dst` (an empty file opened for reading
/// and writing) range by range: the host part is copied from `src` through
/// a fixed buffer, never held in memory, and the written file is checked
/// through a mapping. Returns the number of bytes written.
#[allow(unsafe_code)]
pub fn split_host_to(
    data: &[u8],
    src: &dyn rocpack_bundle::ReadAt,
    marker_payload: &[u8],
    dst: &std::fs::File,
) -> Result<u64> {
    let (plan, wrappers) = split_plan(data, src, marker_payload)?;
    let io = |e: std::io::Error| Error::Io {
        what: "writing the host-only file",
        source: e,
    };
    let mut w = std::io::BufWriter::with_capacity(1 << 16, dst);
    let n = match &plan {
        Rewritten::Unchanged => {
            let mut o = Out::default();
            o.push_src(0, data.len() as u64);
            o.write_to(src, &NO_AUX, &mut w).map_err(io)?
        }
        Rewritten::Bytes(v) => {
            std::io::Write::write_all(&mut w, v).map_err(io)?;
            v.len() as u64
        }
        Rewritten::Pieces(out) => out.write_to(src, &NO_AUX, &mut w).map_err(io)?,
    };
    std::io::Write::flush(&mut w).map_err(io)?;
    drop(w);
    if matches!(plan, Rewritten::Pieces(_)) {
        // SAFETY: the file is ours (just written, in the caller's staging
        // place); a concurrent truncation would fault, as for any mapping
        // the CLI reads through.
        let map = unsafe { memmap2::Mmap::map(dst) }.map_err(io)?;
        if map.len() as u64 != n {
            return Err(Error::layout(n, "written file changed size under us"));
        }
        check_split(&map, wrappers)?;
    }
    Ok(n)
}

/// No auxiliary source (split, in-memory bundles).
const NO_AUX: &[u8] = &[];

/// What a rewrite produced.
pub(crate) enum Rewritten {
    /// The input, unchanged.
    Unchanged,
    /// A whole new file (relocatable objects, small).
    Bytes(Vec<u8>),
    /// Pieces of the input and new bytes.
    Pieces(Out),
}

/// The split of `data` and the number of wrappers the result must show.
fn split_plan(
    data: &[u8],
    src: &dyn rocpack_bundle::ReadAt,
    marker_payload: &[u8],
) -> Result<(Rewritten, usize)> {
    let elf = Elf::parse(data)?;
    let info = analyze_elf(&elf, src)?;
    let n = info.wrappers.len();
    match info.state {
        State::HostOnly => return Ok((Rewritten::Unchanged, n)),
        State::Split => {
            let off = info.wrappers.first().map_or(0, |w| w.file_offset);
            return Err(Error::unsupported(off, "already split (HIPK wrappers)"));
        }
        State::Fat => {}
    }
    if marker_payload.is_empty() {
        return Err(Error::layout(0, "empty marker payload"));
    }
    if info.kind == crate::elf::ElfKind::Relocatable {
        validate_bundles(src, &info)?;
        return Ok((
            Rewritten::Bytes(crate::elf::object_file::split_object(
                &elf,
                &info,
                marker_payload,
            )?),
            n,
        ));
    }
    // The segments first: a layout the rewrite cannot take is reported
    // before a single bundle header is decompressed.
    validate_layout(&elf, page_size(&elf)?)?;
    validate_bundles(src, &info)?;
    Ok((
        Rewritten::Pieces(split_linked(&elf, &info, marker_payload)?),
        n,
    ))
}

/// Inverse of [`split_host`]: `bundles[i]` is the bundle for `co_index` `i`.
/// Files that are not split are returned unchanged.
pub fn reassemble(host: &[u8], bundles: &[Vec<u8>]) -> Result<Vec<u8>> {
    let b = Bundles::Owned(bundles);
    match reassemble_plan(host, &b)? {
        Rewritten::Unchanged => Ok(host.to_vec()),
        Rewritten::Bytes(v) => Ok(v),
        Rewritten::Pieces(out) => out.to_vec(&host, &NO_AUX),
    }
}

/// The bundles given to a reassembly: element *i* is the bundle for
/// `co_index` *i*.
#[derive(Clone, Copy)]
pub enum Bundles<'a> {
    /// In memory.
    Owned(&'a [Vec<u8>]),
    /// `(offset, len)` ranges of a source (a spill file): the bundles are
    /// copied from it range by range, never held in memory (but for
    /// relocatable objects and split-in-place binaries, whose rebuilt
    /// `.hip_fatbin` must fit the few bytes the split left).
    In {
        src: &'a dyn rocpack_bundle::ReadAt,
        ranges: &'a [(u64, u64)],
    },
    /// Sizes only, for planning ([`reassembly_fits`]): written as zeros.
    Sizes(&'a [u64]),
    /// `(offset, len)` ranges of bundles the caller writes into the output
    /// itself ([`reassemble_placed`]); never read.
    Later(&'a [(u64, u64)]),
}

/// Whether bundles of sizes `lens` (by `co_index`) fit where the split of
/// `host` left room for them: [`Fit::DoesNotFit`] where [`reassemble`]
/// would fail with [`Error::DoesNotFit`], without building anything; every
/// other fault of the host is an error. Relocatable objects always fit
/// (their `.hip_fatbin` is rebuilt at the end of the file).
pub fn reassembly_fits(host: &[u8], lens: &[u64]) -> Result<Fit> {
    match reassemble_plan(host, &Bundles::Sizes(lens)) {
        Ok(_) => Ok(Fit::Fits),
        Err(Error::DoesNotFit { .. }) => Ok(Fit::DoesNotFit),
        Err(e) => Err(e),
    }
}

impl Bundles<'_> {
    /// How many bundles.
    pub fn count(&self) -> usize {
        match self {
            Bundles::Owned(b) => b.len(),
            Bundles::In { ranges, .. } | Bundles::Later(ranges) => ranges.len(),
            Bundles::Sizes(l) => l.len(),
        }
    }

    /// Their sizes.
    pub fn lens(&self) -> Vec<u64> {
        match self {
            Bundles::Owned(b) => b.iter().map(|b| b.len() as u64).collect(),
            Bundles::In { ranges, .. } | Bundles::Later(ranges) => {
                ranges.iter().map(|r| r.1).collect()
            }
            Bundles::Sizes(l) => l.to_vec(),
        }
    }

    /// The source [`Out::write_to`] reads them from.
    pub fn aux(&self) -> &dyn rocpack_bundle::ReadAt {
        match self {
            Bundles::Owned(_) | Bundles::Sizes(_) | Bundles::Later(_) => &NO_AUX,
            Bundles::In { src, .. } => *src,
        }
    }

    /// Append bundle `i` to `out`.
    pub fn push(&self, i: usize, out: &mut Out) {
        match self {
            Bundles::Owned(b) => out.extend_from_slice(&b[i]),
            Bundles::In { ranges, .. } | Bundles::Later(ranges) => {
                out.push_aux(ranges[i].0, ranges[i].1)
            }
            Bundles::Sizes(l) => out.resize(out.len().saturating_add(l[i])),
        }
    }

    /// Every bundle in memory (only where the caller bounded their size).
    fn read_all(&self) -> Result<Vec<Vec<u8>>> {
        match self {
            Bundles::Owned(b) => Ok(b.to_vec()),
            Bundles::In { src, ranges } => ranges
                .iter()
                .map(|&(off, len)| {
                    let mut o = Out::default();
                    o.push_aux(off, len);
                    o.to_vec(&NO_AUX, *src)
                })
                .collect(),
            Bundles::Sizes(l) => Ok(l
                .iter()
                .map(|&n| vec![0; usize::try_from(n).unwrap_or(0)])
                .collect()),
            Bundles::Later(_) => Err(Error::layout(
                0,
                "internal: bundles placed by the caller are not readable",
            )),
        }
    }
}

/// [`reassemble_to`] for a split linked ELF file whose `.hip_fatbin` is
/// rebuilt where the split removed it, with the bundles (`lens` bytes
/// each, by `co_index`) written by the caller: the host part goes into
/// `dst` (empty) with positioned writes and the bundles' places are left
/// for the caller, so bundles can be written straight to their final
/// offsets, in parallel, without a spill file. Returns the file size and
/// each bundle's offset; `Ok(None)` (nothing written) for relocatable
/// objects and split-in-place files, which take [`reassemble_to`].
pub fn reassemble_placed(
    host: &[u8],
    host_src: &dyn rocpack_bundle::ReadAt,
    lens: &[u64],
    dst: &std::fs::File,
) -> Result<Option<(u64, Vec<u64>)>> {
    {
        let elf = Elf::parse(host)?;
        let info = analyze_elf(&elf, &host)?;
        if info.state != State::Split || info.kind == crate::elf::ElfKind::Relocatable {
            return Ok(None);
        }
        let (fb, _) = split_sections(&info, "binary")?;
        if !fb.nobits {
            return Ok(None);
        }
    }
    let mut ranges = Vec::with_capacity(lens.len());
    let mut at = 0u64;
    for &l in lens {
        ranges.push((at, l));
        at = at.saturating_add(l);
    }
    let Rewritten::Pieces(out) = reassemble_plan(host, &Bundles::Later(&ranges))? else {
        return Ok(None);
    };
    let placed = out.write_placed(host_src, dst).map_err(|e| Error::Io {
        what: "writing the reassembled file",
        source: e,
    })?;
    // Non-empty bundles have distinct offsets in `ranges`; empty ones
    // need no place.
    let mut offsets: Vec<Option<u64>> = lens.iter().map(|&l| (l == 0).then_some(0)).collect();
    for (virt, real) in placed {
        let i = ranges.partition_point(|r| r.0 < virt);
        if let Some(j) = (i..ranges.len()).find(|&j| ranges[j].0 == virt && ranges[j].1 > 0) {
            offsets[j] = Some(real);
        }
    }
    match offsets.into_iter().collect::<Option<Vec<u64>>>() {
        Some(o) => Ok(Some((out.len(), o))),
        None => Err(Error::layout(0, "internal: a bundle without a place")),
    }
}

/// [`reassemble`] written to `dst`: the host part copied from `host_src`
/// (a source of the same bytes as `host`), the bundles from theirs, range by
/// range through a fixed buffer. Returns the number of bytes written.
pub fn reassemble_to(
    host: &[u8],
    host_src: &dyn rocpack_bundle::ReadAt,
    bundles: &Bundles<'_>,
    dst: &mut dyn std::io::Write,
) -> Result<u64> {
    let io = |e: std::io::Error| Error::Io {
        what: "writing the reassembled file",
        source: e,
    };
    match reassemble_plan(host, bundles)? {
        Rewritten::Unchanged => {
            let mut o = Out::default();
            o.push_src(0, host.len() as u64);
            o.write_to(host_src, &NO_AUX, dst).map_err(io)
        }
        Rewritten::Bytes(v) => {
            dst.write_all(&v).map_err(io)?;
            Ok(v.len() as u64)
        }
        Rewritten::Pieces(out) => out.write_to(host_src, bundles.aux(), dst).map_err(io),
    }
}

fn reassemble_plan(host: &[u8], bundles: &Bundles<'_>) -> Result<Rewritten> {
    let elf = Elf::parse(host)?;
    let info = analyze_elf(&elf, &host)?;
    if info.state != State::Split {
        return Ok(Rewritten::Unchanged);
    }
    for w in &info.wrappers {
        if w.co_index() as usize >= bundles.count() {
            return Err(Error::Wrapper {
                index: w.index,
                offset: w.file_offset + 16,
                what: format!(
                    "co_index {} but only {} bundles were given",
                    w.co_index(),
                    bundles.count()
                ),
            });
        }
    }
    if info.kind == crate::elf::ElfKind::Relocatable {
        if let Bundles::Sizes(_) = bundles {
            return Ok(Rewritten::Unchanged);
        }
        let owned = bundles.read_all()?;
        return Ok(Rewritten::Bytes(
            crate::elf::object_file::reassemble_object(&elf, &info, &owned)?,
        ));
    }
    Ok(Rewritten::Pieces(reassemble_linked(&elf, &info, bundles)?))
}

/// Every bundle must parse and its code objects must not overlap: device
/// code is only removed once it is known to be extractable.
/// Only each bundle's entry table is read (a CCOB's payload prefix), so
/// the check costs no decompression of device code and no memory beyond
/// the table; the code objects themselves are read (and fully checked)
/// when they are extracted.
pub(crate) fn validate_bundles(
    src: &dyn rocpack_bundle::ReadAt,
    info: &FatBinaryInfo,
) -> Result<()> {
    for b in &info.bundles {
        if b.file_offset
            .checked_add(b.len)
            .is_none_or(|end| end > src.size())
        {
            return Err(Error::malformed(
                b.file_offset,
                format!("bundle {} runs past the end of the file", b.index),
            ));
        }
        let bytes = rocpack_bundle::Window::new(src, b.file_offset, b.len);
        let index = rocpack_bundle::index_bundle_in(&bytes, &Default::default()).map_err(|e| {
            Error::Bundle {
                offset: b.file_offset + e.offset().unwrap_or(0),
                source: e,
            }
        })?;
        if let Some(&(x, y)) = index.overlaps().first() {
            return Err(Error::malformed(
                b.file_offset,
                format!(
                    "bundle {}: entries {x} and {y} overlap at bundle offset {:#x}",
                    b.index,
                    index.entries[y].offset.max(index.entries[x].offset)
                ),
            ));
        }
    }
    Ok(())
}

/// Parse every bundle of an analysed fat binary: element *i* is bundle *i*
/// (`co_index` *i*; `info.bundles[i].wrappers` point at it). Errors name the
/// file offset; bundles whose code objects overlap are refused.
pub fn parse_bundles<'a>(
    data: &'a [u8],
    info: &FatBinaryInfo,
) -> Result<Vec<rocpack_bundle::Bundle<'a>>> {
    let mut out = Vec::with_capacity(info.bundles.len());
    for b in &info.bundles {
        let bytes = get(data, b.file_offset, b.len, "bundle")?;
        let parsed = rocpack_bundle::parse_bundle(bytes).map_err(|e| Error::Bundle {
            offset: b.file_offset + e.offset().unwrap_or(0),
            source: e,
        })?;
        let mut spans: Vec<(u64, u64, usize)> = parsed
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.size > 0)
            .map(|(i, e)| (e.offset, e.offset.saturating_add(e.size), i))
            .collect();
        spans.sort_unstable();
        for pair in spans.windows(2) {
            if pair[1].0 < pair[0].1 {
                return Err(Error::malformed(
                    b.file_offset,
                    format!(
                        "bundle {}: entries {} and {} overlap at bundle offset {:#x}",
                        b.index, pair[0].2, pair[1].2, pair[1].0
                    ),
                ));
            }
        }
        out.push(parsed);
    }
    Ok(out)
}

fn movable(s: &Shdr) -> bool {
    matches!(
        s.sh_type,
        elf::SHT_NOTE
            | elf::SHT_GNU_HASH
            | elf::SHT_HASH
            | elf::SHT_DYNSYM
            | elf::SHT_GNU_VERSYM
            | elf::SHT_GNU_VERDEF
            | elf::SHT_GNU_VERNEED
            | elf::SHT_RELA
            | elf::SHT_REL
            | SHT_RELR
            | elf::SHT_STRTAB
    ) || (s.sh_type == elf::SHT_PROGBITS && s.name == b".interp")
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

/// Refuse inputs where something other than the wrappers refers to the
/// fatbin bytes being removed (it would dangle).
fn check_no_other_refs(elf: &Elf<'_>, info: &FatBinaryInfo, lo: u64, hi: u64) -> Result<()> {
    let wrapper_fields: HashSet<u64> = info.wrappers.iter().map(|w| w.field_addr).collect();
    let machine = elf.ehdr.e_machine;
    for (i, s) in elf.shdrs.iter().enumerate() {
        if !s.is_alloc() {
            continue;
        }
        if s.sh_type == elf::SHT_RELA || s.sh_type == elf::SHT_REL {
            for r in elf.relocations(i)? {
                if r.r_offset >= lo && r.r_offset < hi {
                    return Err(Error::unsupported(
                        r.entry_offset,
                        format!("relocation at {:#x} inside .hip_fatbin", r.r_offset),
                    ));
                }
                let relative = (machine == elf::EM_X86_64 && r.r_type == R_X86_64_RELATIVE)
                    || (machine == elf::EM_AARCH64 && r.r_type == R_AARCH64_RELATIVE);
                if let (true, Some(a)) = (relative, r.r_addend) {
                    let a = a as u64;
                    if a >= lo && a < hi && !wrapper_fields.contains(&r.r_offset) {
                        return Err(Error::unsupported(
                            r.entry_offset,
                            format!(
                                "relocation at {:#x} points into .hip_fatbin ({a:#x}) but is not a wrapper pointer",
                                r.r_offset
                            ),
                        ));
                    }
                }
            }
        } else if s.sh_type == SHT_RELR {
            for (a, _) in elf.relr_addresses(i)? {
                if a >= lo && a < hi {
                    return Err(Error::unsupported(
                        s.sh_offset,
                        format!("RELR entry {a:#x} inside .hip_fatbin"),
                    ));
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

fn split_linked(elf: &Elf<'_>, info: &FatBinaryInfo, marker: &[u8]) -> Result<Out> {
    let data = elf.data;
    let fb = info
        .fatbin
        .ok_or_else(|| Error::malformed(0, "fat binary without .hip_fatbin"))?;
    let (v, s) = (fb.addr, fb.size);
    let r = v
        .checked_add(s)
        .ok_or_else(|| Error::malformed(fb.file_offset, ".hip_fatbin range overflows"))?;
    let li = elf
        .phdrs
        .iter()
        .position(|p| {
            p.p_type == elf::PT_LOAD && v >= p.p_vaddr && r <= p.p_vaddr.saturating_add(p.p_filesz)
        })
        .ok_or_else(|| {
            Error::unsupported(
                fb.file_offset,
                ".hip_fatbin is not file-backed in one PT_LOAD",
            )
        })?;
    let l = elf.phdrs[li];
    if fb.file_offset != l.p_offset + (v - l.p_vaddr) {
        return Err(Error::malformed(
            fb.file_offset,
            ".hip_fatbin file offset does not match its address in its PT_LOAD",
        ));
    }
    let l_off = |a: u64| l.p_offset + (a - l.p_vaddr);
    let page = page_size(elf)?;
    validate_layout(elf, page)?;
    check_no_other_refs(elf, info, v, r)?;
    for (i, sh) in elf.shdrs.iter().enumerate() {
        if i != fb.index
            && sh.is_alloc()
            && sh.sh_size > 0
            && sh.sh_addr < r
            && sh.sh_addr + sh.sh_size > v
        {
            return Err(Error::unsupported(
                elf.shdr_offset(i),
                format!("section {} overlaps .hip_fatbin", sh.name_str()),
            ));
        }
    }

    // --- The block of metadata sections behind the program headers. ---
    let n = elf.phdrs.len() as u64;
    let new_n = n + 1;
    let ph_old_end = elf.ehdr.e_phoff + n * PHDR_SIZE;
    let ph_new_end = elf.ehdr.e_phoff + new_n * PHDR_SIZE;
    let l0i = header_load(elf)?;
    let l0 = elf.phdrs[l0i];
    let l0_addr = |off: u64| l0.p_vaddr + (off - l0.p_offset);
    let mut after: Vec<usize> = (1..elf.shdrs.len())
        .filter(|&i| {
            let sh = &elf.shdrs[i];
            sh.is_alloc()
                && sh.sh_type != elf::SHT_NOBITS
                && sh.sh_offset >= ph_old_end
                && sh.sh_offset < l0.p_offset + l0.p_filesz
        })
        .collect();
    after.sort_by_key(|&i| (elf.shdrs[i].sh_offset, elf.shdrs[i].sh_size));
    let mut block: Vec<usize> = Vec::new();
    let mut b1_off = ph_new_end;
    for &i in &after {
        let sh = &elf.shdrs[i];
        if sh.sh_offset >= b1_off && sh.sh_size > 0 {
            break;
        }
        block.push(i);
        b1_off = b1_off.max(sh.sh_offset + sh.sh_size);
    }
    // Keep every non-LOAD segment in the block whole.
    loop {
        let mut grew = false;
        if let Some(&first) = block.first() {
            let b0 = elf.shdrs[first].sh_offset;
            for p in &elf.phdrs {
                if p.p_type == elf::PT_LOAD || p.p_type == elf::PT_PHDR || p.p_filesz == 0 {
                    continue;
                }
                let pe = p.p_offset + p.p_filesz;
                if p.p_offset < b1_off && pe > b0 && pe > b1_off {
                    b1_off = pe;
                    grew = true;
                }
            }
            for &i in &after {
                let sh = &elf.shdrs[i];
                if !block.contains(&i) && sh.sh_offset < b1_off {
                    block.push(i);
                    b1_off = b1_off.max(sh.sh_offset + sh.sh_size);
                    grew = true;
                }
            }
        }
        if !grew {
            break;
        }
    }
    let next = after
        .iter()
        .filter(|i| !block.contains(i))
        .map(|&i| elf.shdrs[i].sh_offset)
        .min();
    let (mut b0_off, mut b1_off) = match block.first() {
        None => (ph_new_end, ph_new_end),
        // The block ends where the next remaining section starts.
        Some(&first) => (
            elf.shdrs[first].sh_offset,
            next.unwrap_or(b1_off).max(b1_off),
        ),
    };
    // Bytes between the table and the first section are normally zero
    // padding, which reassembly writes back. patchelf leaves the old
    // places of the sections it moved there (not zero): then they are
    // moved too, from the end of the table on, so reassembly gives them
    // back (the block still ends at the next remaining section).
    let gap_end = if block.is_empty() { next } else { Some(b0_off) };
    if let Some(g) = gap_end.filter(|&g| g > ph_old_end) {
        if get(
            data,
            ph_old_end,
            g - ph_old_end,
            "bytes behind the program headers",
        )?
        .iter()
        .any(|&b| b != 0)
        {
            b0_off = ph_old_end;
            if block.is_empty() {
                b1_off = g;
            }
        }
    }
    for &i in &block {
        let sh = &elf.shdrs[i];
        if !movable(sh) {
            return Err(Error::unsupported(
                elf.shdr_offset(i),
                format!(
                    "section {} follows the program headers and cannot be moved to make room for one more",
                    sh.name_str()
                ),
            ));
        }
    }
    for p in &elf.phdrs {
        let inside = p.p_offset >= b0_off && p.p_offset + p.p_filesz <= b1_off && p.p_filesz > 0;
        if inside
            && !matches!(
                p.p_type,
                elf::PT_NOTE | elf::PT_INTERP | elf::PT_GNU_PROPERTY
            )
        {
            return Err(Error::unsupported(
                p.p_offset,
                format!("segment type {:#x} inside the moved metadata", p.p_type),
            ));
        }
    }
    let blocklen = b1_off - b0_off;
    let b0 = l0_addr(b0_off);
    let amax = block
        .iter()
        .map(|&i| elf.shdrs[i].sh_addralign)
        .chain(std::iter::once(16))
        .max()
        .unwrap_or(16)
        .min(page);
    if !amax.is_power_of_two() {
        return Err(Error::unsupported(
            b0_off,
            "section alignment is not a power of two",
        ));
    }

    // --- Region B = [W, R): block then marker. ---
    let mlen = marker.len() as u64;
    let room_start = r
        .checked_sub(mlen)
        .and_then(|x| x.checked_sub(blocklen))
        .and_then(|x| x.checked_sub(b0));
    let w = room_start.map(|x| b0 + align_down(x, amax));
    let Some(w) = w.filter(|&w| w >= v) else {
        // Too small to give bytes back: the marker takes the fatbin's place.
        return split_in_place(elf, info, marker, blocklen);
    };
    let m = w + blocklen;
    let delta = w - b0;

    // End of file data in L before the fatbin.
    let mut d_addr = l.p_vaddr;
    for (i, sh) in elf.shdrs.iter().enumerate() {
        if i != fb.index
            && !block.contains(&i)
            && sh.is_alloc()
            && sh.has_file_data()
            && sh.sh_addr >= l.p_vaddr
            && sh.sh_addr < v
        {
            d_addr = d_addr.max(sh.sh_addr + sh.sh_size);
        }
    }
    if li == l0i {
        d_addr = d_addr.max(l0_addr(ph_new_end));
    }
    let d_off = l_off(d_addr);
    let o2 = d_off + (w - d_addr) % page;
    let o_w = l_off(w);
    let o_r = l_off(r);
    let shift = o_w - o2;
    let end = end_loaded(elf);
    if end < o_r {
        return Err(Error::layout(o_r, "loaded content ends inside .hip_fatbin"));
    }

    // --- Build the output. ---
    let mut map = OffMap::default();
    map.add(b0_off, blocklen, o2);
    map.add(0, d_off, 0);
    map.add(o_r, end - o_r, o_r - shift);
    // Pieces of the input and new bytes: nothing of the input is copied
    // until the result is written.
    let mut out = Out::default();
    get(data, 0, d_off, "file prefix")?;
    out.push_src(0, d_off);
    out.resize(o2);
    // Region [W, R): the moved block, the marker right after it, zeros.
    get(data, b0_off, blocklen, "moved headers")?;
    out.push_src(b0_off, blocklen);
    out.resize(o2 + (m - w));
    out.extend_from_slice(marker);
    out.resize(o2 + (r - w));
    get(data, o_r, end - o_r, "loaded content")?;
    out.push_src(o_r, end - o_r);
    // Vacate the block's old place (the phdr table grows into it).
    out.fill_zero(b0_off, b1_off)?;

    // Sections.
    let moved: HashSet<usize> = block.iter().copied().collect();
    let mut shdrs = elf.shdrs.clone();
    for (i, sh) in shdrs.iter_mut().enumerate() {
        if i == 0 {
            continue;
        }
        if i == fb.index {
            sh.sh_type = elf::SHT_NOBITS;
            sh.sh_size = w - v;
            // NOBITS: offset congruent to the address in L1's image.
            sh.sh_offset = fb.file_offset;
        } else if moved.contains(&i) {
            sh.sh_addr += delta;
            sh.sh_offset = o2 + (sh.sh_addr - w);
        } else if sh.is_alloc() || sh.sh_offset < end {
            if sh.sh_offset >= o_r {
                sh.sh_offset -= shift;
            } else if sh.sh_offset >= d_off && sh.sh_type != elf::SHT_NOBITS && sh.sh_size > 0 {
                return Err(Error::layout(
                    elf.shdr_offset(i),
                    format!("section {} lies in the removed range", sh.name_str()),
                ));
            } else if sh.sh_offset > d_off {
                sh.sh_offset = d_off;
            }
        }
    }
    let shstrtab = add_marker_section(elf, info, &mut shdrs, m, o2 + (m - w), mlen)?;

    // Program headers.
    let mut phdrs: Vec<Phdr> = Vec::with_capacity(new_n as usize);
    for (i, p) in elf.phdrs.iter().enumerate() {
        let mut p = *p;
        if i == li {
            let l1 = Phdr {
                p_filesz: d_addr - l.p_vaddr,
                p_memsz: w - l.p_vaddr,
                ..l
            };
            let l2 = Phdr {
                p_offset: o2,
                p_vaddr: w,
                p_paddr: l.p_paddr.wrapping_add(w - l.p_vaddr),
                p_filesz: l.p_vaddr + l.p_filesz - w,
                p_memsz: l.p_vaddr + l.p_memsz - w,
                p_flags: l2_flags(elf, &l, fb.index, v, r, w),
                ..l
            };
            phdrs.push(l1);
            phdrs.push(l2);
            continue;
        }
        if p.p_type == elf::PT_PHDR {
            p.p_filesz = new_n * PHDR_SIZE;
            p.p_memsz = new_n * PHDR_SIZE;
        } else if p.p_filesz > 0 && p.p_offset >= b0_off && p.p_offset + p.p_filesz <= b1_off {
            if p.p_vaddr != l0_addr(p.p_offset) {
                return Err(Error::malformed(
                    elf.ehdr.e_phoff + i as u64 * PHDR_SIZE,
                    "segment address does not match its offset",
                ));
            }
            p.p_vaddr = p.p_vaddr.wrapping_add(delta);
            p.p_paddr = p.p_paddr.wrapping_add(delta);
            p.p_offset = o2 + (p.p_offset - b0_off);
        } else if p.p_offset >= o_r {
            p.p_offset -= shift;
        } else if p.p_filesz > 0 && p.p_offset + p.p_filesz > d_off && p.p_offset < o_r {
            return Err(Error::layout(
                elf.ehdr.e_phoff + i as u64 * PHDR_SIZE,
                format!("segment type {:#x} overlaps the removed range", p.p_type),
            ));
        }
        phdrs.push(p);
    }
    if ph_new_end > out.len() {
        return Err(Error::layout(
            ph_new_end,
            "program header table does not fit",
        ));
    }
    write_phdrs(elf, &mut out, &phdrs)?;

    let limit = data.len() as u64 + shstrtab.len() as u64 + 2 * page;
    layout_tail(
        elf, end, &mut shdrs, &shstrtab, None, &mut map, &mut out, limit,
    )?;
    // References into the moved block.
    relocate_block_refs(elf, &mut out, &map, b0, l0_addr(b1_off), delta, &moved)?;

    // Wrappers.
    for wr in &info.wrappers {
        write_hipk(&mut out, wr, |o| map.map_or_err(o, "wrapper"))?;
        write_pointer(&mut out, &map, wr, m)?;
    }

    let shoff = write_shdrs(&shdrs, &mut out, None)?;
    write_ehdr(&mut out, new_n, shoff, shdrs.len() as u64)?;
    push_trail(elf, &mut out);

    // The caller checks the result: it must analyse as split, every
    // wrapper on the marker.
    Ok(out)
}

/// Flags of the new `L2` = `[W, L.end)`: the least permission its sections
/// need. It holds the moved metadata block and the marker (read-only) and
/// whatever followed `.hip_fatbin` in `L` (`[R, L.end)`), so read-only data
/// split from a writable `L` (`.hip_fatbin` after `.bss`) is not left
/// writable. Permissions are only dropped when no page of `L1`'s content
/// (`[L.vaddr, end of the last section before V)`) shares a page with
/// `L2`: the loader maps whole pages, and `L2`'s mapping would otherwise take
/// `W`/`X` from `L1`'s last page. The page is the largest the machine's
/// loader may use for `L`: 4 KiB on x86-64 (its only base page); elsewhere
/// (aarch64, ppc64le kernels may run 64 KiB pages) `L`'s `p_align`, since a
/// system whose pages are larger than that cannot load `L` at all.
/// Otherwise `L`'s flags are kept.
fn l2_flags(elf: &Elf<'_>, l: &Phdr, fb_index: usize, v: u64, r: u64, w: u64) -> u32 {
    let page = if elf.ehdr.e_machine == elf::EM_X86_64 {
        machine_page(elf.ehdr.e_machine)
    } else {
        l.p_align.max(machine_page(elf.ehdr.e_machine))
    };
    let rwx = elf::PF_W | elf::PF_X;
    let mut need = 0u32;
    let mut l1_end = l.p_vaddr;
    let l_end = l.p_vaddr.saturating_add(l.p_memsz);
    for (i, sh) in elf.shdrs.iter().enumerate() {
        if i == fb_index || !sh.is_alloc() || sh.sh_size == 0 {
            continue;
        }
        let end = sh.sh_addr.saturating_add(sh.sh_size);
        if sh.sh_addr >= r && sh.sh_addr < l_end {
            if sh.sh_flags & u64::from(elf::SHF_WRITE) != 0 {
                need |= elf::PF_W;
            }
            if sh.sh_flags & u64::from(elf::SHF_EXECINSTR) != 0 {
                need |= elf::PF_X;
            }
        } else if sh.sh_addr >= l.p_vaddr && sh.sh_addr < v {
            l1_end = l1_end.max(end);
        }
    }
    let flags = (l.p_flags & !rwx) | (l.p_flags & need);
    let separate = align_up(l1_end, page).is_some_and(|e| e <= align_down(w, page));
    if flags != l.p_flags && separate {
        flags
    } else {
        l.p_flags
    }
}

/// Split a binary whose `.hip_fatbin` is too small to hold the marker and
/// the headers that would make room for one more program header (small
/// compressed bundles, e.g. a 4.5 KB CCOB): nothing is removed from the
/// file and no segment changes. The marker is written where the bundles
/// were, the rest of their bytes are zeroed, `.hip_fatbin` keeps its
/// address with size 0 and `.rocm_kpack_ref` is added at that address
/// (docs/formats/split-elf.md, "in place").
fn split_in_place(
    elf: &Elf<'_>,
    info: &FatBinaryInfo,
    marker: &[u8],
    blocklen: u64,
) -> Result<Out> {
    let data = elf.data;
    let fb = info
        .fatbin
        .ok_or_else(|| Error::malformed(0, "fat binary without .hip_fatbin"))?;
    let (v, s) = (fb.addr, fb.size);
    let mlen = marker.len() as u64;
    if mlen > s {
        return Err(Error::layout(
            fb.file_offset,
            format!(
                ".hip_fatbin ({s} bytes) is too small for the marker ({mlen} bytes) and the moved headers ({blocklen} bytes)"
            ),
        ));
    }
    let end = end_loaded(elf);
    let page = page_size(elf)?;
    let limit = data.len() as u64 + mlen + 2 * page + 4096;
    get(data, 0, end, "loaded content")?;
    let mut out = Out::default();
    out.push_src(0, end);
    let (start, stop) = (fb.file_offset, fb.file_offset.saturating_add(s));
    if stop > end {
        return Err(Error::malformed(
            fb.file_offset,
            ".hip_fatbin outside the file",
        ));
    }
    out.fill_zero(start, stop)?;
    out.put(start, marker)?;
    let mut map = OffMap::default();
    map.add(0, end, 0);

    let mut shdrs = elf.shdrs.clone();
    if let Some(sh) = shdrs.get_mut(fb.index) {
        sh.sh_size = 0;
    }
    let shstrtab = add_marker_section(elf, info, &mut shdrs, v, fb.file_offset, mlen)?;
    layout_tail(
        elf, end, &mut shdrs, &shstrtab, None, &mut map, &mut out, limit,
    )?;
    for wr in &info.wrappers {
        write_hipk(&mut out, wr, |o| map.map_or_err(o, "wrapper"))?;
        write_pointer(&mut out, &map, wr, v)?;
    }
    let shoff = write_shdrs(&shdrs, &mut out, None)?;
    write_ehdr(&mut out, elf.phdrs.len() as u64, shoff, shdrs.len() as u64)?;
    push_trail(elf, &mut out);
    Ok(out)
}

/// Undo [`split_in_place`]: the bundles go back where the marker is, if
/// they fit before the next allocated section.
fn reassemble_in_place(elf: &Elf<'_>, info: &FatBinaryInfo, bundles: &Bundles<'_>) -> Result<Out> {
    let data = elf.data;
    let (fb, mk) = split_sections(info, "binary")?;
    let v = fb.addr;
    if mk.section.addr != v || fb.size != 0 {
        return Err(Error::unsupported(
            fb.file_offset,
            ".hip_fatbin of a split binary is neither NOBITS nor empty at the marker",
        ));
    }
    let l = elf
        .phdrs
        .iter()
        .find(|p| {
            p.p_type == elf::PT_LOAD && v >= p.p_vaddr && v < p.p_vaddr.saturating_add(p.p_filesz)
        })
        .ok_or_else(|| {
            Error::unsupported(fb.file_offset, "marker is not file-backed in a PT_LOAD")
        })?;
    let free_end = elf
        .shdrs
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            *i != mk.section.index
                && *i != fb.index
                && s.is_alloc()
                && s.sh_size > 0
                && s.sh_addr > v
        })
        .map(|(_, s)| s.sh_addr)
        .min()
        .unwrap_or(u64::MAX)
        .min(l.p_vaddr + l.p_filesz);
    let (fat_len, offsets) = fatbin_layout(&bundles.lens());
    let bundle_addr: Vec<u64> = offsets.iter().map(|&o| v + o).collect();
    let cap = free_end - v;
    if fat_len > cap {
        return Err(Error::does_not_fit(
            fb.file_offset,
            format!("rebuilt .hip_fatbin needs {fat_len} bytes but only {cap} are free at {v:#x}"),
        ));
    }
    let end = end_loaded(elf);
    get(data, 0, end, "loaded content")?;
    let mut out = Out::default();
    out.push_src(0, end);
    let off = mk.section.file_offset;
    out.fill_zero(off, off.saturating_add(cap))?;
    // Fits the few bytes the split left: small enough to hold.
    for (b, o) in bundles.read_all()?.iter().zip(&offsets) {
        out.put(off + o, b)?;
    }
    let mut map = OffMap::default();
    map.add(0, end, 0);
    let (shstrtab, places) = shstrtab_without_marker(elf, mk)?;
    let mut shdrs = elf.shdrs.clone();
    shdrs[fb.index].sh_size = fatbin_size(fat_len, places, cap);
    if elf.ehdr.e_shnum == 0 {
        if let Some(s0) = shdrs.first_mut() {
            s0.sh_size = s0.sh_size.saturating_sub(1);
        }
    }
    let places = places.checked(
        elf,
        &shdrs,
        mk.section.index,
        out.len(),
        shstrtab.len() as u64,
    );
    let page = page_size(elf)?;
    let limit = (data.len() as u64).saturating_add(fat_len + 4 * page);
    layout_tail(
        elf,
        end,
        &mut shdrs,
        &shstrtab,
        places.shstrtab,
        &mut map,
        &mut out,
        limit,
    )?;
    for wr in &info.wrappers {
        let co = wr.co_index() as usize;
        let addr = *bundle_addr
            .get(co)
            .ok_or_else(|| Error::layout(wr.file_offset, "wrapper co_index has no bundle"))?;
        write_hipf(&mut out, map.map_or_err(wr.file_offset, "wrapper")?)?;
        write_pointer(&mut out, &map, wr, addr)?;
    }
    remove_section(elf, &mut out, &map, &mut shdrs, mk.section.index, fb.index)?;
    let shoff = write_shdrs(&shdrs, &mut out, places.shoff)?;
    write_ehdr(&mut out, elf.phdrs.len() as u64, shoff, shdrs.len() as u64)?;
    restore_trail(elf, places, &mut out);
    Ok(out)
}

/// Size of the rebuilt `.hip_fatbin` of `fat_len` bytes: with the zero
/// bytes the original had after its last bundle (`places.fatpad`) when they
/// fit in the `cap` bytes free there (they are zero in the output).
fn fatbin_size(fat_len: u64, places: OrigPlaces, cap: u64) -> u64 {
    Some(fat_len + places.fatpad)
        .filter(|&n| n <= cap)
        .unwrap_or(fat_len)
}

/// Append the marker section (`size` bytes at `addr`, file offset
/// `offset`) to `shdrs`; returns `.shstrtab` with its name appended.
fn add_marker_section(
    elf: &Elf<'_>,
    info: &FatBinaryInfo,
    shdrs: &mut Vec<Shdr>,
    addr: u64,
    offset: u64,
    size: u64,
) -> Result<Vec<u8>> {
    let name_off = elf.shdrs.get(elf.shstrndx).map_or(0, |s| s.sh_size);
    let mut shstrtab = shstrtab_bytes(elf)?;
    shstrtab.extend_from_slice(MARKER_SECTION.as_bytes());
    shstrtab.push(0);
    if let Some(rec) = OrigPlaces::of(elf, info, end_loaded(elf)).encode() {
        shstrtab.extend_from_slice(&rec);
    }
    let name = u32::try_from(name_off).map_err(|_| Error::layout(0, ".shstrtab too large"))?;
    shdrs.push(marker_shdr(name, addr, offset, size));
    if elf.ehdr.e_shnum == 0 {
        if let Some(s0) = shdrs.first_mut() {
            s0.sh_size += 1;
        }
    }
    Ok(shstrtab)
}

/// Write the program header table at `e_phoff`.
fn write_phdrs<S: Sink + ?Sized>(elf: &Elf<'_>, out: &mut S, phdrs: &[Phdr]) -> Result<()> {
    for (k, p) in phdrs.iter().enumerate() {
        out.put(elf.ehdr.e_phoff + k as u64 * PHDR_SIZE, &p.encode())?;
    }
    Ok(())
}

/// The rewritten file must analyse as split with every wrapper (`wrappers`
/// of the input).
fn check_split(out: &[u8], wrappers: usize) -> Result<()> {
    let check = crate::elf::analyze::analyze(out)?;
    if check.state != State::Split || check.wrappers.len() != wrappers {
        return Err(Error::layout(
            0,
            "internal: rewritten file does not analyse as split",
        ));
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
    match &wr.model {
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

fn reassemble_linked(elf: &Elf<'_>, info: &FatBinaryInfo, bundles: &Bundles<'_>) -> Result<Out> {
    let data = elf.data;
    let (fb, mk) = split_sections(info, "binary")?;
    if !fb.nobits {
        return reassemble_in_place(elf, info, bundles);
    }
    let v = fb.addr;
    let w = v + fb.size;
    let m = mk.section.addr;
    let mlen = mk.section.size;
    let l1i = elf
        .phdrs
        .iter()
        .position(|p| {
            p.p_type == elf::PT_LOAD && p.p_vaddr.saturating_add(p.p_memsz) == w && p.p_vaddr <= v
        })
        .ok_or_else(|| {
            Error::unsupported(fb.file_offset, "no PT_LOAD ends at the end of .hip_fatbin")
        })?;
    let l1 = elf.phdrs[l1i];
    let l2 = *elf
        .phdrs
        .get(l1i + 1)
        .filter(|p| p.p_type == elf::PT_LOAD && p.p_vaddr == w && m >= w)
        .ok_or_else(|| {
            Error::unsupported(fb.file_offset, "no PT_LOAD follows .hip_fatbin at its end")
        })?;
    let page = page_size(elf)?;
    validate_layout(elf, page)?;
    let n = elf.phdrs.len() as u64;
    let new_n = n - 1;
    let ph_new_end = elf.ehdr.e_phoff + new_n * PHDR_SIZE;
    let ph_cur_end = elf.ehdr.e_phoff + n * PHDR_SIZE;
    let l0i = header_load(elf)?;
    let l0 = elf.phdrs[l0i];

    // The moved block is [W, M); its original place ends where the first
    // section after the program headers starts.
    let blocklen = m - w;
    let moved: HashSet<usize> = (1..elf.shdrs.len())
        .filter(|&i| {
            let s = &elf.shdrs[i];
            s.is_alloc()
                && s.sh_addr >= w
                && s.sh_addr < m
                && s.sh_size > 0
                && i != mk.section.index
        })
        .collect();
    let (b0_off, b0) = if blocklen == 0 {
        (ph_new_end, l0.p_vaddr + (ph_new_end - l0.p_offset))
    } else {
        let b1_off = (1..elf.shdrs.len())
            .filter(|&i| {
                let s = &elf.shdrs[i];
                s.is_alloc()
                    && s.sh_type != elf::SHT_NOBITS
                    && !moved.contains(&i)
                    && s.sh_offset >= ph_cur_end
                    && s.sh_offset < l0.p_offset + l0.p_filesz
            })
            .map(|i| elf.shdrs[i].sh_offset)
            .min()
            .ok_or_else(|| {
                Error::unsupported(ph_cur_end, "cannot find where the moved headers came from")
            })?;
        let b0_off = b1_off
            .checked_sub(blocklen)
            .filter(|&x| x >= ph_new_end)
            .ok_or_else(|| Error::malformed(b1_off, "moved headers do not fit back"))?;
        (b0_off, l0.p_vaddr + (b0_off - l0.p_offset))
    };
    let delta = b0.wrapping_sub(w); // applied with wrapping_add

    // Rebuilt .hip_fatbin.
    let (fat_len, offsets) = fatbin_layout(&bundles.lens());
    let bundle_addr: Vec<u64> = offsets.iter().map(|&o| v + o).collect();
    // Free range: up to the first section after the marker (or L2's end).
    let r_end = elf
        .shdrs
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            *i != mk.section.index
                && s.is_alloc()
                && s.sh_addr >= m + mlen
                && s.sh_addr < l2.p_vaddr + l2.p_memsz
        })
        .map(|(_, s)| s.sh_addr)
        .min()
        .unwrap_or(l2.p_vaddr + l2.p_memsz);
    let cap = r_end - v;
    if fat_len > cap {
        return Err(Error::does_not_fit(
            fb.file_offset,
            format!(
                "rebuilt .hip_fatbin needs {fat_len} bytes but only {cap} are free at {v:#x} (compress the bundles)"
            ),
        ));
    }
    if l2.p_offset.checked_add(r_end - w).is_none() {
        return Err(Error::malformed(l2.p_offset, "segment offset overflow"));
    }
    let lo = |a: u64| l1.p_offset + (a - l1.p_vaddr);
    let split_r_off = l2.p_offset + (r_end - w);
    let new_r_off = lo(r_end);
    let growth = new_r_off
        .checked_sub(split_r_off)
        .ok_or_else(|| Error::malformed(l2.p_offset, "L2 offset is not below its merged place"))?;
    if growth % page != 0 {
        return Err(Error::malformed(
            l2.p_offset,
            "segment offsets are not congruent",
        ));
    }
    let end = end_loaded(elf);
    let d_off = l1.p_offset + l1.p_filesz;

    let mut map = OffMap::default();
    map.add(l2.p_offset, blocklen, b0_off);
    map.add(0, d_off, 0);
    map.add(split_r_off, end.saturating_sub(split_r_off), new_r_off);
    let mut out = Out::default();
    get(data, 0, d_off, "file prefix")?;
    out.push_src(0, d_off);
    let limit = (data.len() as u64)
        .saturating_add(fat_len)
        .saturating_add(4 * page);
    out.grow(lo(v), limit)?;
    for (i, &o) in offsets.iter().enumerate() {
        out.resize(lo(v) + o);
        bundles.push(i, &mut out);
    }
    out.grow(new_r_off, limit)?;
    get(data, split_r_off, end - split_r_off, "loaded content")?;
    out.push_src(split_r_off, end - split_r_off);
    // Headers area: program headers shrink by one; the block goes back.
    out.fill_zero(ph_new_end, b0_off + blocklen)?;
    out.put(b0_off, get(data, l2.p_offset, blocklen, "moved headers")?)?;

    let (shstrtab, places) = shstrtab_without_marker(elf, mk)?;
    let mut shdrs = elf.shdrs.clone();
    // The marker section is removed at the end (after the tail layout, which
    // indexes sections by their input index).
    for (i, sh) in shdrs.iter_mut().enumerate() {
        if i == 0 {
            continue;
        }
        if i == fb.index {
            sh.sh_type = elf::SHT_PROGBITS;
            sh.sh_size = fatbin_size(fat_len, places, cap);
            sh.sh_offset = lo(v);
        } else if moved.contains(&i) {
            sh.sh_addr = sh.sh_addr.wrapping_add(delta);
            sh.sh_offset = l0.p_offset + (sh.sh_addr - l0.p_vaddr);
        } else if sh.is_alloc() || sh.sh_offset < end {
            if sh.sh_offset >= split_r_off {
                sh.sh_offset += growth;
            } else if sh.sh_offset >= d_off && sh.sh_type == elf::SHT_NOBITS {
                sh.sh_offset = sh.sh_offset.max(d_off);
            }
        }
    }
    if elf.ehdr.e_shnum == 0 {
        if let Some(s0) = shdrs.first_mut() {
            s0.sh_size = s0.sh_size.saturating_sub(1);
        }
    }
    let places = places.checked(
        elf,
        &shdrs,
        mk.section.index,
        out.len(),
        shstrtab.len() as u64,
    );

    let mut phdrs: Vec<Phdr> = Vec::with_capacity(new_n as usize);
    for (i, p) in elf.phdrs.iter().enumerate() {
        let mut p = *p;
        if i == l1i + 1 {
            continue;
        }
        if i == l1i {
            p.p_filesz = l2.p_vaddr + l2.p_filesz - l1.p_vaddr;
            p.p_memsz = l2.p_vaddr + l2.p_memsz - l1.p_vaddr;
        } else if p.p_type == elf::PT_PHDR {
            p.p_filesz = new_n * PHDR_SIZE;
            p.p_memsz = new_n * PHDR_SIZE;
        } else if p.p_filesz > 0 && p.p_vaddr >= w && p.p_vaddr + p.p_filesz <= m {
            p.p_vaddr = p.p_vaddr.wrapping_add(delta);
            p.p_paddr = p.p_paddr.wrapping_add(delta);
            p.p_offset = l0.p_offset + (p.p_vaddr - l0.p_vaddr);
        } else if p.p_offset >= split_r_off {
            p.p_offset += growth;
        }
        phdrs.push(p);
    }
    write_phdrs(elf, &mut out, &phdrs)?;
    layout_tail(
        elf,
        end,
        &mut shdrs,
        &shstrtab,
        places.shstrtab,
        &mut map,
        &mut out,
        limit,
    )?;
    relocate_block_refs(elf, &mut out, &map, w, m, delta, &moved)?;

    for wr in &info.wrappers {
        let co = wr.co_index() as usize;
        write_hipf(&mut out, map.map_or_err(wr.file_offset, "wrapper")?)?;
        write_pointer(&mut out, &map, wr, bundle_addr[co])?;
    }
    remove_section(elf, &mut out, &map, &mut shdrs, mk.section.index, fb.index)?;
    let shoff = write_shdrs(&shdrs, &mut out, places.shoff)?;
    write_ehdr(&mut out, new_n, shoff, shdrs.len() as u64)?;
    restore_trail(elf, places, &mut out);
    Ok(out)
}

/// Drop section header `k` and renumber every reference to later sections
/// (`sh_link`, `sh_info` of relocation / INFO_LINK sections, symbol
/// `st_shndx`, `e_shstrndx`). Symbols defined in `k` move to `fallback`.
/// GNU strip does not keep the marker last, so it can be anywhere.
fn remove_section<S: Sink + ?Sized>(
    elf: &Elf<'_>,
    out: &mut S,
    map: &OffMap,
    shdrs: &mut Vec<Shdr>,
    k: usize,
    fallback: usize,
) -> Result<()> {
    if k == 0 || k >= shdrs.len() {
        return Err(Error::layout(0, "internal: bad section index to remove"));
    }
    shdrs.remove(k);
    for sh in shdrs.iter_mut() {
        if sh.sh_link as usize > k {
            sh.sh_link -= 1;
        }
        let info_link = sh.sh_type == elf::SHT_REL
            || sh.sh_type == elf::SHT_RELA
            || sh.sh_flags & u64::from(elf::SHF_INFO_LINK) != 0;
        if info_link && sh.sh_info as usize > k {
            sh.sh_info -= 1;
        }
    }
    let fallback = u16::try_from(if fallback > k { fallback - 1 } else { fallback })
        .map_err(|_| Error::unsupported(0, "section index needs SHN_XINDEX"))?;
    for (i, s) in elf.shdrs.iter().enumerate() {
        if s.sh_type != elf::SHT_SYMTAB && s.sh_type != elf::SHT_DYNSYM {
            continue;
        }
        for (n, sym) in elf.symbols(i)?.iter().enumerate() {
            let idx = usize::from(sym.st_shndx);
            let new = if idx == k {
                fallback
            } else if idx > k && sym.st_shndx < elf::SHN_LORESERVE {
                sym.st_shndx - 1
            } else {
                continue;
            };
            let at = map.map_or_err(s.sh_offset + n as u64 * SYM_SIZE + 6, "symbol")?;
            put_u16(out, at, new)?;
        }
    }
    if elf.ehdr.e_shstrndx != elf::SHN_XINDEX && usize::from(elf.ehdr.e_shstrndx) > k {
        put_u16(out, 62, elf.ehdr.e_shstrndx - 1)?;
    }
    Ok(())
}
