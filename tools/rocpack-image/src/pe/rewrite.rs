//! Host-only rewrite of PE32+ images and its exact inverse. Layout:
//! `docs/formats/split-pe.md`.

use std::fs::File;

use object::pe;

use crate::{Bundles, Fit, Out, State, HIPF_MAGIC, HIPK_MAGIC};
use rocpack_bundle::ReadAt;

use super::analyze::{
    analyze, get, u32_at, ImageHeaders, PeInfo, PeKind, PePointer, PeSection,
    MARKER_CHARACTERISTICS, MARKER_SECTION, WRAPPER_SECTIONS,
};
use crate::error::{Error, Result};

/// Alignment of bundles inside the bundle section (clang's `.hip_fatbin`
/// contributions are 4096-aligned).
const BUNDLE_ALIGN: u64 = 4096;
const DEBUG_ENTRY: u64 = 28;
const SECTION_HEADER: u64 = 40;
/// Read buffer of [`pe_checksum_in`] (even: words never straddle reads).
const CHUNK: u64 = 1 << 20;
/// No auxiliary source (the split copies only the input).
const NO_AUX: &[u8] = &[];

fn round_up(v: u64, a: u64) -> u64 {
    if a <= 1 {
        v
    } else {
        v.div_ceil(a) * a
    }
}

fn put_u16(out: &mut Out, at: u64, v: u16) -> Result<()> {
    out.put(at, &v.to_le_bytes())
}
fn put_u32(out: &mut Out, at: u64, v: u32) -> Result<()> {
    out.put(at, &v.to_le_bytes())
}
fn put_u64(out: &mut Out, at: u64, v: u64) -> Result<()> {
    out.put(at, &v.to_le_bytes())
}

fn to_u32(v: u64, at: u64, what: &str) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| Error::layout(at, format!("{what} {v:#x} does not fit in 32 bits")))
}

/// The PE checksum (`CheckSum` of the optional header): 16-bit one's
/// complement style sum of the file with the field itself taken as zero,
/// plus the file length.
pub fn pe_checksum(data: &[u8], field: u64) -> u32 {
    pe_checksum_in(&data, field).expect("a slice reads whole")
}

/// [`pe_checksum`] of a source (a written file), read through one buffer.
pub fn pe_checksum_in(src: &dyn ReadAt, field: u64) -> std::io::Result<u32> {
    let len = src.size();
    let mut sum: u64 = 0;
    let mut buf = vec![0u8; usize::try_from(CHUNK.min(len)).unwrap_or(0)];
    let mut at = 0u64;
    while at < len {
        // An even chunk size keeps every 16-bit word inside one chunk.
        let n = (len - at).min(CHUNK) as usize;
        let mut got = 0;
        while got < n {
            let k = src.read_at(at + got as u64, &mut buf[got..n])?;
            if k == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "image ended while its checksum was computed",
                ));
            }
            got += k;
        }
        for (i, w) in buf[..n].chunks(2).enumerate() {
            let pos = at + 2 * i as u64;
            if pos == field || pos == field + 2 {
                continue;
            }
            sum += u64::from(w[0]) | (u64::from(*w.get(1).unwrap_or(&0)) << 8);
            sum = (sum & 0xffff) + (sum >> 16);
        }
        at += n as u64;
    }
    sum = (sum & 0xffff) + (sum >> 16);
    Ok((sum as u32).wrapping_add(len as u32))
}

/// File offsets of the debug directory entries' `PointerToRawData` fields
/// (in the input).
fn debug_pointer_fields(data: &[u8], info: &PeInfo, h: &ImageHeaders) -> Result<Vec<u64>> {
    let Some(&(rva, size)) = h.data_directories.get(pe::IMAGE_DIRECTORY_ENTRY_DEBUG) else {
        return Ok(Vec::new());
    };
    if rva == 0 || size == 0 {
        return Ok(Vec::new());
    }
    let at = rva_to_offset(info, rva).ok_or_else(|| {
        Error::pe_malformed(
            h.data_directories_offset + 8 * pe::IMAGE_DIRECTORY_ENTRY_DEBUG as u64,
            format!("debug directory RVA {rva:#x} is not in any section's file data"),
        )
    })?;
    get(data, at, u64::from(size), "debug directory")?;
    Ok((0..u64::from(size) / DEBUG_ENTRY)
        .map(|i| at + i * DEBUG_ENTRY + 24)
        .collect())
}

fn rva_to_offset(info: &PeInfo, rva: u32) -> Option<u64> {
    info.sections.iter().find_map(|s| {
        let n = s.file_len(false);
        (rva >= s.virtual_address && rva - s.virtual_address < n)
            .then(|| u64::from(s.raw_offset) + u64::from(rva - s.virtual_address))
    })
}

/// Every file offset stored in the headers or the debug directory, as
/// `(where the field is in the input, its width, value)`.
fn file_offset_fields(data: &[u8], info: &PeInfo, h: &ImageHeaders) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    // COFF header PointerToSymbolTable.
    let symptr = h.nt_offset + 4 + 8;
    out.push((
        symptr,
        u64::from(u32_at(data, symptr, "PointerToSymbolTable")?),
    ));
    for s in &info.sections {
        // PointerToRelocations (+24), PointerToLinenumbers (+28).
        for f in [24u64, 28] {
            let at = s.header_offset + f;
            out.push((at, u64::from(u32_at(data, at, "section header")?)));
        }
    }
    for at in debug_pointer_fields(data, info, h)? {
        out.push((at, u64::from(u32_at(data, at, "debug directory entry")?)));
    }
    Ok(out)
}

/// `FileAlignment`: a power of two of at most 64 KiB (the PE format's
/// bound; 512 is the format's minimum, but images with `SectionAlignment`
/// below the page size may use less). Anything else is refused before it
/// sizes an allocation.
fn file_alignment(h: &ImageHeaders) -> Result<u64> {
    let fa = h.file_alignment;
    if !fa.is_power_of_two() || fa > 0x1_0000 {
        return Err(Error::pe_unsupported(
            h.optional_offset + 36,
            format!("FileAlignment {fa:#x} is not a power of two of at most 64 KiB"),
        ));
    }
    Ok(u64::from(fa))
}

fn header(info: &PeInfo) -> Result<&ImageHeaders> {
    info.headers.as_ref().ok_or_else(|| {
        Error::pe_unsupported(
            0,
            "COFF objects are not split: split the image (DLL, EXE, .pyd) they are linked into",
        )
    })
}

/// Host-only rewrite of a PE32+ image: see the module docs. Host-only
/// input comes back byte-identical.
pub fn split_host(data: &[u8], marker: &[u8]) -> Result<Vec<u8>> {
    let info = analyze(data)?;
    split_analyzed(data, &info, marker)
}

/// [`split_host`] with the analysis already done.
pub fn split_analyzed(data: &[u8], info: &PeInfo, marker: &[u8]) -> Result<Vec<u8>> {
    let Some(plan) = split_plan(data, info, marker)? else {
        return Ok(data.to_vec());
    };
    let out = plan.to_vec(&data, &NO_AUX)?;
    check_split(&analyze(&out), info)?;
    Ok(out)
}

/// [`split_analyzed`] written to `dst` (opened for reading and writing):
/// the image copied range by range from `src` (a source of the same bytes
/// as `data`, which only the headers are read from) through one buffer,
/// the checksum computed from the written file, the result checked by
/// analysing the file. Memory does not grow with the image. Returns the
/// bytes written.
pub fn split_to(
    data: &[u8],
    src: &dyn ReadAt,
    info: &PeInfo,
    marker: &[u8],
    dst: &File,
) -> Result<u64> {
    let Some(plan) = split_plan(data, info, marker)? else {
        let mut o = Out::default();
        o.push_src(0, data.len() as u64);
        return Plan {
            out: o,
            checksum: None,
        }
        .write(src, &NO_AUX, dst);
    };
    let n = plan.write(src, &NO_AUX, dst)?;
    let f = crate::ImageFile::of(
        dst.try_clone()
            .map_err(io("reopening the host-only image"))?,
    )
    .map_err(io("reading the host-only image back"))?;
    check_split(
        &f.analyze()
            .map_err(io("reading the host-only image back"))?
            .and_then(|a| match a {
                crate::Analysis::Pe(i) => Ok(i),
                crate::Analysis::Elf(_) => Err(Error::layout(0, "not a PE image")),
            }),
        info,
    )?;
    Ok(n)
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

/// A rewritten image: its pieces, and the `CheckSum` field to compute once
/// the bytes are known (when the input had one).
struct Plan {
    out: Out,
    checksum: Option<u64>,
}

impl Plan {
    fn to_vec(&self, src: &dyn ReadAt, aux: &dyn ReadAt) -> Result<Vec<u8>> {
        let mut v = self.out.to_vec(src, aux)?;
        if let Some(f) = self.checksum {
            let c = pe_checksum(&v, f);
            v[f as usize..f as usize + 4].copy_from_slice(&c.to_le_bytes());
        }
        Ok(v)
    }

    /// The image written into `dst` (empty), its zeros left as holes
    /// ([`Out::write_file`]), then its checksum.
    fn write(&self, src: &dyn ReadAt, aux: &dyn ReadAt, dst: &File) -> Result<u64> {
        let n = self
            .out
            .write_file(src, aux, dst)
            .map_err(io("writing the image"))?;
        if let Some(f) = self.checksum {
            let c = pe_checksum_in(&rocpack_bundle::FileRange::new(dst, 0, n), f)
                .map_err(io("reading the image back"))?;
            std::os::unix::fs::FileExt::write_all_at(dst, &c.to_le_bytes(), f)
                .map_err(io("writing the image"))?;
        }
        Ok(n)
    }
}

/// The split of `data` as pieces; `None`: host-only, unchanged.
fn split_plan(data: &[u8], info: &PeInfo, marker: &[u8]) -> Result<Option<Plan>> {
    let h = header(info)?;
    let Some(fsec) = splittable(info, h, marker)? else {
        return Ok(None);
    };
    let l = SplitLayout::new(data, info, h, fsec, marker.len() as u64)?;

    // Assemble.
    let mut out = Out::default();
    out.push_src(0, l.first_raw);
    out.resize(l.first_raw + l.g);
    out.push_src(l.first_raw, l.ps - l.first_raw);
    out.push_src(l.ps + l.rs, l.e - (l.ps + l.rs));
    out.extend_from_slice(marker);
    out.resize(l.marker_at + l.mr);
    out.push_src(l.e, data.len() as u64 - l.e);

    write_split_headers(&mut out, data, info, h, fsec, &l, marker.len() as u64)?;

    // Wrappers.
    let ptr = h.image_base.wrapping_add(l.marker_rva);
    for w in &info.wrappers {
        let at = l.shift(w.file_offset);
        let co = w.bundle.expect("checked by splittable") as u32;
        put_u32(&mut out, at, HIPK_MAGIC)?;
        put_u64(&mut out, at + 8, ptr)?;
        put_u32(&mut out, at + 16, co)?;
    }
    let checksum = (h.check_sum != 0).then_some(h.optional_offset + 64);
    Ok(Some(Plan { out, checksum }))
}

/// The bundle section of a fat image that can be split, `None` for a
/// host-only one; an error names why any other image cannot.
fn splittable<'i>(
    info: &'i PeInfo,
    h: &ImageHeaders,
    marker: &[u8],
) -> Result<Option<&'i PeSection>> {
    match info.state {
        State::HostOnly => return Ok(None),
        State::Split => {
            return Err(Error::pe_unsupported(
                0,
                "already split (HIPK wrappers pointing at .kpackrf)",
            ))
        }
        State::Fat => {}
    }
    if info.signed {
        return Err(Error::pe_unsupported(
            h.data_directories_offset + 8 * pe::IMAGE_DIRECTORY_ENTRY_SECURITY as u64,
            "Authenticode-signed image: removing its device code would invalidate the signature; \
             remove the signature (e.g. `osslsigncode remove-signature`), split, and re-sign the \
             host-only image",
        ));
    }
    if marker.is_empty() {
        return Err(Error::layout(0, "empty marker payload"));
    }
    if info.marker.is_some() {
        return Err(Error::pe_unsupported(
            0,
            "a .kpackrf section already exists",
        ));
    }
    let fb = info
        .fatbin
        .ok_or_else(|| Error::pe_malformed(0, "wrappers but no bundle section"))?;
    let fsec = &info.sections[fb.index];
    if info.wrappers.is_empty() {
        // Nothing registers this device code: the split image would have no
        // HIPK wrapper, so nothing would find the marker and it would read
        // as host-only, not split.
        return Err(Error::pe_unsupported(
            fsec.header_offset,
            format!(
                "the bundle section `{}` holds {} bundle(s) but the image has no wrapper \
                 section ({} or {}) registering them; not rewritten",
                fsec.name,
                info.bundles.len(),
                WRAPPER_SECTIONS[0],
                WRAPPER_SECTIONS[1]
            ),
        ));
    }
    for w in &info.wrappers {
        if w.bundle.is_none() {
            return Err(Error::wrapper(
                w.index,
                w.file_offset,
                "does not point at a bundle",
            ));
        }
        if w.pointer == PePointer::Unrelocated {
            return Err(Error::wrapper(
                w.index,
                w.file_offset + 8,
                "the image has base relocations but none for this pointer; \
                       it would be wrong after a rebase",
            ));
        }
    }
    Ok(Some(fsec))
}

/// Where the split image puts everything: the bundle section's data
/// (`ps`, `rs` bytes) leaves the file, the header area grows by `g` bytes
/// when the section table needs another slot, and the marker section
/// (`mr` bytes on disk) follows the last section's data (`e`).
struct SplitLayout {
    fa: u64,
    sa: u64,
    ps: u64,
    rs: u64,
    e: u64,
    first_raw: u64,
    g: u64,
    mr: u64,
    /// File offset of the marker's 40-byte section header.
    slot: u64,
    marker_rva: u64,
    marker_at: u64,
    /// Header fields holding file offsets: (where, value).
    field_map: Vec<(u64, u64)>,
}

impl SplitLayout {
    /// The layout, once nothing else in the image is found to refer into
    /// the bundle section's data.
    fn new(
        data: &[u8],
        info: &PeInfo,
        h: &ImageHeaders,
        fsec: &PeSection,
        marker_len: u64,
    ) -> Result<Self> {
        let fa = file_alignment(h)?;
        let sa = exact_layout(info, h, fsec, fa)?;
        let (ps, rs) = (u64::from(fsec.raw_offset), u64::from(fsec.raw_size));
        let fb_va = u64::from(fsec.virtual_address);
        let fb_vend = fb_va + u64::from(fsec.virtual_size.max(fsec.raw_size));
        // Nothing else may refer into the bundle section.
        for (i, &(rva, size)) in h.data_directories.iter().enumerate() {
            let (a, n) = (u64::from(rva), u64::from(size));
            if i != pe::IMAGE_DIRECTORY_ENTRY_SECURITY && n > 0 && a < fb_vend && a + n > fb_va {
                return Err(Error::pe_unsupported(
                    h.data_directories_offset + 8 * i as u64,
                    format!(
                        "data directory {i} overlaps the bundle section `{}`",
                        fsec.name
                    ),
                ));
            }
        }
        for s in &info.sections {
            if s.index != fsec.index
                && s.raw_size > 0
                && u64::from(s.raw_offset) < ps + rs
                && u64::from(s.raw_offset) + u64::from(s.raw_size) > ps
            {
                return Err(Error::pe_unsupported(
                    s.header_offset,
                    format!(
                        "section `{}` overlaps the bundle section in the file",
                        s.name
                    ),
                ));
            }
        }
        let e = info.sections_end;
        if !e.is_multiple_of(fa) || !ps.is_multiple_of(fa) || !rs.is_multiple_of(fa) {
            return Err(Error::layout(
                e,
                format!("section data not aligned to FileAlignment {fa:#x}"),
            ));
        }
        // A free 40-byte slot behind the section table; the header area grows
        // by `g` bytes when the table fills it.
        let table = info.sections.first().map_or(
            h.data_directories_offset + 8 * h.data_directories.len() as u64,
            |s| s.header_offset,
        );
        let slot = table + SECTION_HEADER * info.sections.len() as u64;
        let first_raw = info
            .sections
            .iter()
            .filter(|s| s.raw_size > 0)
            .map(|s| u64::from(s.raw_offset))
            .min()
            .unwrap_or(u64::from(h.size_of_headers));
        let g = header_growth(data, info, h, slot, first_raw)?;
        let field_map = file_offset_fields(data, info, h)?;
        for &(at, v) in &field_map {
            if v >= ps && v < ps + rs {
                return Err(Error::pe_unsupported(
                    at,
                    format!("a file offset ({v:#x}) points into the bundle section's data"),
                ));
            }
        }
        let max_end = info
            .sections
            .iter()
            .map(|s| u64::from(s.virtual_address) + u64::from(s.virtual_size.max(s.raw_size)))
            .max()
            .unwrap_or(sa);
        Ok(SplitLayout {
            fa,
            sa,
            ps,
            rs,
            e,
            first_raw,
            g,
            mr: round_up(marker_len, fa),
            slot,
            marker_rva: round_up(max_end, sa),
            marker_at: e - rs + g,
            field_map,
        })
    }

    /// Where the byte at `off` in the fat image lands in the split one.
    fn shift(&self, off: u64) -> u64 {
        if off < self.first_raw {
            off
        } else if off < self.ps {
            off + self.g
        } else if off < self.e {
            off - self.rs + self.g
        } else {
            off - self.rs + self.mr + self.g
        }
    }
}

/// The split image's headers: sections moved, the bundle section emptied,
/// file offsets shifted, the marker's section header, and the sizes.
fn write_split_headers(
    out: &mut Out,
    data: &[u8],
    info: &PeInfo,
    h: &ImageHeaders,
    fsec: &PeSection,
    l: &SplitLayout,
    marker_len: u64,
) -> Result<()> {
    for s in &info.sections {
        if s.raw_size > 0 && s.index != fsec.index {
            put_u32(
                out,
                s.header_offset + 20,
                to_u32(
                    l.shift(u64::from(s.raw_offset)),
                    s.header_offset,
                    "PointerToRawData",
                )?,
            )?;
        }
    }
    put_u32(out, fsec.header_offset + 16, 0)?; // SizeOfRawData
    put_u32(
        out,
        fsec.header_offset + 20,
        to_u32(l.ps + l.g, fsec.header_offset, "PointerToRawData")?,
    )?;
    for &(at, v) in &l.field_map {
        if v != 0 {
            put_u32(out, l.shift(at), to_u32(l.shift(v), at, "file offset")?)?;
        }
    }
    let slot = l.slot;
    let mut hdr = [0u8; 40];
    hdr[..8].copy_from_slice(MARKER_SECTION.as_bytes());
    hdr[8..12].copy_from_slice(&(marker_len as u32).to_le_bytes());
    hdr[12..16].copy_from_slice(&to_u32(l.marker_rva, slot, "marker RVA")?.to_le_bytes());
    hdr[16..20].copy_from_slice(&to_u32(l.mr, slot, "marker size")?.to_le_bytes());
    hdr[20..24].copy_from_slice(&to_u32(l.marker_at, slot, "marker offset")?.to_le_bytes());
    // NumberOfLinenumbers (0 in images): the header growth in FileAlignment
    // blocks, for reassembly.
    let blocks = u16::try_from(l.g / l.fa).map_err(|_| Error::layout(slot, "header growth"))?;
    hdr[34..36].copy_from_slice(&blocks.to_le_bytes());
    hdr[36..40].copy_from_slice(&MARKER_CHARACTERISTICS.to_le_bytes());
    out.put(slot, &hdr)?;
    if l.g > 0 {
        put_u32(
            out,
            h.optional_offset + 60,
            to_u32(u64::from(h.size_of_headers) + l.g, 0, "SizeOfHeaders")?,
        )?;
    }
    put_u16(out, h.nt_offset + 6, (info.sections.len() + 1) as u16)?;
    let size_of_image = round_up(l.marker_rva + marker_len, l.sa);
    put_u32(
        out,
        h.optional_offset + 56,
        to_u32(size_of_image, h.optional_offset, "SizeOfImage")?,
    )?;
    adjust_initialized_data(out, data, h, fsec, l.rs, l.mr, true)
}

/// What reassembly recomputes must be what the image has, or the split is
/// refused (reassembly would give back another image, or refuse its own
/// input): `SectionAlignment` a power of two not below `FileAlignment`
/// (the PE rule; 0 would make `SizeOfImage` come back unaligned),
/// `SizeOfImage` = the end of the last section rounded up to it, and a
/// bundle section whose `VirtualSize` holds its bundles laid out 4096-aligned
/// and ends less than one such block after them (a `VirtualSize` of 0, which
/// the loader reads as `SizeOfRawData`, cannot be told from the split's).
/// Returns `SectionAlignment`.
fn exact_layout(info: &PeInfo, h: &ImageHeaders, fsec: &PeSection, fa: u64) -> Result<u64> {
    let sa = u64::from(h.section_alignment);
    if !sa.is_power_of_two() || sa < fa {
        return Err(Error::pe_unsupported(
            h.optional_offset + 32,
            format!(
                "SectionAlignment {sa:#x} is not a power of two of at least FileAlignment {fa:#x}"
            ),
        ));
    }
    let lens: Vec<u64> = info.bundles.iter().map(|b| b.len).collect();
    let end = bundles_layout(&lens).0;
    let vsize = u64::from(fsec.virtual_size);
    if end > vsize || vsize > round_up(end, BUNDLE_ALIGN) {
        return Err(Error::pe_unsupported(
            fsec.header_offset + 8,
            format!(
                "the bundle section `{}` has VirtualSize {vsize:#x}; its bundles laid out {BUNDLE_ALIGN}-aligned end at {end:#x}: reassembly could not give it back",
                fsec.name
            ),
        ));
    }
    let max_end = info
        .sections
        .iter()
        .map(|s| u64::from(s.virtual_address) + u64::from(s.virtual_size.max(s.raw_size)))
        .max()
        .unwrap_or(0);
    let want = round_up(max_end, sa);
    if u64::from(h.size_of_image) != want {
        return Err(Error::pe_unsupported(
            h.optional_offset + 56,
            format!(
                "SizeOfImage {:#x} is not the end of the last section rounded up to SectionAlignment ({want:#x}): reassembly could not give it back",
                h.size_of_image
            ),
        ));
    }
    Ok(sa)
}

/// Offsets of bundles of sizes `lens` laid out [`BUNDLE_ALIGN`]-aligned
/// from 0 (clang's layout) and where the last one ends.
fn bundles_layout(lens: &[u64]) -> (u64, Vec<u64>) {
    let mut offsets = Vec::with_capacity(lens.len());
    let mut end = 0u64;
    for &n in lens {
        let at = round_up(end, BUNDLE_ALIGN);
        offsets.push(at);
        end = at + n;
    }
    (end, offsets)
}

/// How many bytes (a multiple of `FileAlignment`) the header area must grow
/// for a 40-byte section header at `slot`, the end of the section table:
/// 0 when it fits before `SizeOfHeaders` and the first section's data. The
/// bytes it takes must be free (zero); the grown area must stay below the
/// first section's RVA.
fn header_growth(
    data: &[u8],
    info: &PeInfo,
    h: &ImageHeaders,
    slot: u64,
    first_raw: u64,
) -> Result<u64> {
    let soh = u64::from(h.size_of_headers);
    let fa = file_alignment(h)?;
    let refuse = |why: String| {
        Err(Error::layout(
            slot,
            format!(
                "no free section header slot for {MARKER_SECTION} (the section table ends at \
                 {slot:#x}, SizeOfHeaders is {soh:#x}, the first section's data is at \
                 {first_raw:#x}) and {why}; not rewritten"
            ),
        ))
    };
    let present = (slot + SECTION_HEADER).min(first_raw).max(slot);
    if get(data, slot, present - slot, "section table")?
        .iter()
        .any(|&b| b != 0)
    {
        return refuse(format!(
            "the bytes after it are in use (e.g. a bound import directory) up to {present:#x}"
        ));
    }
    if slot + SECTION_HEADER <= soh.min(first_raw) {
        return Ok(0);
    }
    if soh > first_raw || !soh.is_multiple_of(fa) || !first_raw.is_multiple_of(fa) {
        return refuse(format!(
            "the header area cannot grow: SizeOfHeaders is not a multiple of FileAlignment \
             {fa:#x} at or before the first section's data"
        ));
    }
    let new_soh = round_up(slot + SECTION_HEADER, fa);
    let first_rva = info
        .sections
        .iter()
        .map(|s| u64::from(s.virtual_address))
        .min()
        .unwrap_or(0);
    if new_soh > first_rva {
        return refuse(format!(
            "the header area cannot grow to {new_soh:#x}: the first section is mapped at RVA \
             {first_rva:#x}"
        ));
    }
    Ok(new_soh - soh)
}

/// The rewritten image, once it analyses as split with every wrapper on
/// the marker: a layout this module got wrong is an error, never a
/// silently broken image.
fn check_split(check: &Result<PeInfo>, info: &PeInfo) -> Result<()> {
    let bad = |what: String| Error::layout(0, format!("internal: the rewritten image {what}"));
    let check = check
        .as_ref()
        .map_err(|e| bad(format!("does not analyse: {e}")))?;
    if check.state != State::Split
        || check.wrappers.len() != info.wrappers.len()
        || !check.wrappers.iter().all(|w| w.points_to_marker)
    {
        return Err(bad(
            "does not analyse as split with every wrapper on .kpackrf".into(),
        ));
    }
    Ok(())
}

/// `SizeOfInitializedData` follows the raw data removed and added.
fn adjust_initialized_data(
    out: &mut Out,
    data: &[u8],
    h: &ImageHeaders,
    fsec: &PeSection,
    rs: u64,
    mr: u64,
    split: bool,
) -> Result<()> {
    let at = h.optional_offset + 8;
    let v = i64::from(u32_at(data, at, "SizeOfInitializedData")?);
    let init = fsec.characteristics & pe::IMAGE_SCN_CNT_INITIALIZED_DATA != 0;
    let fat = if init { rs as i64 } else { 0 };
    let n = if split {
        v - fat + mr as i64
    } else {
        v + fat - mr as i64
    };
    put_u32(out, at, u32::try_from(n.max(0)).unwrap_or(u32::MAX))
}

/// Inverse of [`split_host`]: `bundles[i]` is the bundle (uncompressed or
/// CCOB bytes) for `co_index` *i*. The bundles are placed 4096-aligned from
/// the start of the bundle section, as clang lays out one bundle per
/// translation unit; the output is byte-identical to the fat image when
/// the bundles are.
/// The output is held in memory: a bundle section larger than one
/// 4096-byte block after the bundles given (clang's layout) is refused
/// before anything is allocated.
pub fn reassemble(host: &[u8], bundles: &[Vec<u8>]) -> Result<Vec<u8>> {
    let info = analyze(host)?;
    let b = Bundles::Owned(bundles);
    if let Some(fsec) = info.fatbin.and_then(|fb| info.sections.get(fb.index)) {
        let vsize = u64::from(fsec.virtual_size);
        let (end, _) = bundles_layout(&b.lens());
        if vsize > round_up(end, BUNDLE_ALIGN) {
            return Err(Error::unsupported(
                fsec.header_offset,
                format!(
                    "the bundle section `{}` has VirtualSize {vsize:#x}, more than one \
                     {BUNDLE_ALIGN}-byte block after the end of the bundles given ({end:#x}); \
                     not reassembled in memory",
                    fsec.name
                ),
            ));
        }
    }
    reassemble_plan(host, &info, &b)?.to_vec(&host, b.aux())
}

/// [`reassemble`] written to `dst` (opened for reading and writing): the
/// host image copied from `host_src` (a source of the same bytes as `host`,
/// which only headers are read from), the bundles from theirs
/// ([`Bundles::In`]: ranges of a spill file), range by range through one
/// buffer; the checksum computed from the written file. Memory does not
/// grow with the image or the bundles. Returns the bytes written.
pub fn reassemble_to(
    host: &[u8],
    host_src: &dyn ReadAt,
    bundles: &Bundles<'_>,
    dst: &File,
) -> Result<u64> {
    let info = super::analyze_in(host, host_src)?;
    reassemble_plan(host, &info, bundles)?.write(host_src, bundles.aux(), dst)
}

/// [`reassemble_to`] of an image analysed already (`info`: its
/// [`super::analyze_in`]).
pub fn reassemble_analyzed_to(
    host: &[u8],
    host_src: &dyn ReadAt,
    info: &PeInfo,
    bundles: &Bundles<'_>,
    dst: &File,
) -> Result<u64> {
    reassemble_plan(host, info, bundles)?.write(host_src, bundles.aux(), dst)
}

/// Whether bundles of sizes `lens` (by `co_index`) fit the bundle section
/// of a split image analysed already (`info`): [`Fit::DoesNotFit`] where
/// [`reassemble_to`] would fail with [`Error::DoesNotFit`], without
/// building anything; every other fault is an error.
pub fn reassembly_fits(host: &[u8], info: &PeInfo, lens: &[u64]) -> Result<Fit> {
    match reassemble_plan(host, info, &Bundles::Sizes(lens)) {
        Ok(_) => Ok(Fit::Fits),
        Err(Error::DoesNotFit { .. }) => Ok(Fit::DoesNotFit),
        Err(e) => Err(e),
    }
}

fn reassemble_plan(host: &[u8], info: &PeInfo, bundles: &Bundles<'_>) -> Result<Plan> {
    let h = header(info)?;
    let (fsec, msec) = split_sections(info)?;
    let lens = bundles.lens();
    let (end, offsets) = bundles_layout(&lens);
    // clang lays the bundles out 4096-aligned and the section ends with the
    // last one; bundles smaller than the original's (one target's archive,
    // bundles compressed harder) leave zeros up to VirtualSize, written as
    // holes ([`Out::write_file`]).
    let vsize = u64::from(fsec.virtual_size);
    if end > vsize {
        return Err(Error::does_not_fit(
            fsec.header_offset,
            format!(
                "bundles need {end} bytes, the bundle section `{}` has {vsize}",
                fsec.name
            ),
        ));
    }
    let geo = Geometry::of(host, info, h, fsec, msec)?;
    let mut out = Out::default();
    out.push_src(0, geo.cut);
    out.push_src(geo.first_raw, geo.ps - geo.first_raw);
    let base = out.len();
    for (i, &at) in offsets.iter().enumerate() {
        out.resize(base + at);
        bundles.push(i, &mut out);
    }
    out.resize(base + geo.rs);
    out.push_src(geo.ps, geo.em - geo.ps);
    out.push_src(geo.em + geo.mr, host.len() as u64 - (geo.em + geo.mr));
    restore_file_offsets(&mut out, host, info, h, &geo, fsec, msec)?;
    restore_optional_header(&mut out, host, info, h, &geo, fsec, msec)?;
    for w in &info.wrappers {
        let co = w.co_index() as usize;
        let off = offsets.get(co).ok_or_else(|| {
            Error::wrapper(
                w.index,
                w.file_offset,
                format!("co_index {co} but only {} bundles given", lens.len()),
            )
        })?;
        let at = geo.unshift(w.file_offset);
        put_u32(&mut out, at, HIPF_MAGIC)?;
        put_u64(
            &mut out,
            at + 8,
            h.image_base
                .wrapping_add(u64::from(fsec.virtual_address) + off),
        )?;
        put_u64(&mut out, at + 16, 0)?;
    }
    let checksum = (h.check_sum != 0).then_some(h.optional_offset + 64);
    Ok(Plan { out, checksum })
}

/// The bundle section (emptied by the split) and `.kpackrf` (the last
/// section header) of a split image; anything else is refused.
fn split_sections(info: &PeInfo) -> Result<(&PeSection, &PeSection)> {
    if info.kind == PeKind::Object || info.state != State::Split {
        return Err(Error::pe_unsupported(0, "not a split image"));
    }
    let m = info
        .marker
        .as_ref()
        .ok_or_else(|| Error::pe_malformed(0, "HIPK wrappers but no .kpackrf section"))?;
    let msec = &info.sections[m.section.index];
    if msec.index + 1 != info.sections.len() {
        return Err(Error::pe_unsupported(
            msec.header_offset,
            ".kpackrf is not the last section header (not written by rocpack)",
        ));
    }
    let fb = info
        .fatbin
        .ok_or_else(|| Error::pe_malformed(0, "split image without its bundle section"))?;
    let fsec = &info.sections[fb.index];
    if fsec.raw_size != 0 {
        return Err(Error::pe_unsupported(
            fsec.header_offset,
            "bundle section still has data in the file (not split by rocpack)",
        ));
    }
    Ok((fsec, msec))
}

/// Where a split image's parts move when it is reassembled.
struct Geometry {
    /// The bundle section's place in the split file (its data went) and
    /// its raw size once reassembled (VirtualSize rounded up to `fa`).
    ps: u64,
    rs: u64,
    /// `.kpackrf`'s data: offset and raw size (it goes).
    em: u64,
    mr: u64,
    /// Header growth of the split (`g` zero bytes inserted before the
    /// first section's data at `first_raw`, removed again): the host is
    /// copied up to `cut`, then from `first_raw`.
    g: u64,
    first_raw: u64,
    cut: u64,
}

impl Geometry {
    fn of(
        host: &[u8],
        info: &PeInfo,
        h: &ImageHeaders,
        fsec: &PeSection,
        msec: &PeSection,
    ) -> Result<Geometry> {
        let fa = file_alignment(h)?;
        let rs = round_up(u64::from(fsec.virtual_size), fa);
        let ps = u64::from(fsec.raw_offset);
        let em = u64::from(msec.raw_offset);
        let mr = u64::from(msec.raw_size);
        if ps > em || em + mr > host.len() as u64 {
            return Err(Error::pe_malformed(
                msec.header_offset,
                "marker data out of place",
            ));
        }
        // The growth is recorded in NumberOfLinenumbers of `.kpackrf`, in
        // FileAlignment blocks.
        let slot = msec.header_offset;
        let g = u64::from(u16::from_le_bytes(
            get(host, slot + 34, 2, ".kpackrf header")?
                .try_into()
                .expect("2 bytes"),
        )) * fa;
        let first_raw = info
            .sections
            .iter()
            .filter(|s| s.raw_size > 0)
            .map(|s| u64::from(s.raw_offset))
            .fold(ps, u64::min);
        let cut = first_raw
            .checked_sub(g)
            .filter(|&c| c >= slot && u64::from(h.size_of_headers) >= g)
            .ok_or_else(|| {
                Error::pe_malformed(slot + 34, "header growth larger than the header area")
            })?;
        let grown_from = (slot + SECTION_HEADER).clamp(cut, first_raw);
        if get(host, grown_from, first_raw - grown_from, "header growth")?
            .iter()
            .any(|&b| b != 0)
        {
            return Err(Error::pe_unsupported(
                grown_from,
                "the header area the split grew is not empty (not written by rocpack)",
            ));
        }
        Ok(Geometry {
            ps,
            rs,
            em,
            mr,
            g,
            first_raw,
            cut,
        })
    }

    /// Where split-file offset `off` is in the reassembled file.
    fn unshift(&self, off: u64) -> u64 {
        let back = if off < self.first_raw { 0 } else { self.g };
        if off < self.ps {
            off - back
        } else if off < self.em {
            off + self.rs - back
        } else {
            off - self.mr + self.rs - back
        }
    }
}

/// Every section's PointerToRawData and every other file offset the
/// headers hold, moved back; the bundle section's raw size and place.
fn restore_file_offsets(
    out: &mut Out,
    host: &[u8],
    info: &PeInfo,
    h: &ImageHeaders,
    geo: &Geometry,
    fsec: &PeSection,
    msec: &PeSection,
) -> Result<()> {
    for s in &info.sections {
        if s.raw_size > 0 && s.index != msec.index {
            put_u32(
                out,
                s.header_offset + 20,
                to_u32(
                    geo.unshift(u64::from(s.raw_offset)),
                    s.header_offset,
                    "PointerToRawData",
                )?,
            )?;
        }
    }
    put_u32(
        out,
        fsec.header_offset + 16,
        to_u32(geo.rs, fsec.header_offset, "SizeOfRawData")?,
    )?;
    put_u32(
        out,
        fsec.header_offset + 20,
        to_u32(geo.ps - geo.g, fsec.header_offset, "PointerToRawData")?,
    )?;
    for &(at, v) in &file_offset_fields(host, info, h)? {
        if v != 0 && at != msec.header_offset + 24 && at != msec.header_offset + 28 {
            put_u32(
                out,
                geo.unshift(at),
                to_u32(geo.unshift(v), at, "file offset")?,
            )?;
        }
    }
    Ok(())
}

/// `.kpackrf`'s header cleared, and the headers that count sections and
/// sizes as before the split: SizeOfHeaders, NumberOfSections,
/// SizeOfImage, SizeOfInitializedData.
fn restore_optional_header(
    out: &mut Out,
    host: &[u8],
    info: &PeInfo,
    h: &ImageHeaders,
    geo: &Geometry,
    fsec: &PeSection,
    msec: &PeSection,
) -> Result<()> {
    let slot = msec.header_offset;
    out.fill_zero(slot, (slot + SECTION_HEADER).min(geo.cut))?;
    if geo.g > 0 {
        put_u32(
            out,
            h.optional_offset + 60,
            to_u32(u64::from(h.size_of_headers) - geo.g, 0, "SizeOfHeaders")?,
        )?;
    }
    put_u16(out, h.nt_offset + 6, (info.sections.len() - 1) as u16)?;
    let sa = u64::from(h.section_alignment.max(1));
    let max_end = info
        .sections
        .iter()
        .filter(|s| s.index != msec.index)
        .map(|s| u64::from(s.virtual_address) + u64::from(s.virtual_size.max(s.raw_size)))
        .max()
        .unwrap_or(sa);
    put_u32(
        out,
        h.optional_offset + 56,
        to_u32(round_up(max_end, sa), 0, "SizeOfImage")?,
    )?;
    adjust_initialized_data(out, host, h, fsec, geo.rs, geo.mr, false)
}
