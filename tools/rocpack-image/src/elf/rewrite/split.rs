//! The host-only rewrite of an ELF file: linked files (`split_linked`,
//! `split_in_place`) and the checks around them.

use super::*;
use crate::SectionRange;

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
/// and writing) range by range ([`Out::write_file`]): the host part is
/// copied from `src` in the kernel when it is a file range, else through a
/// fixed buffer, never held in memory, and the written file is checked
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
    let pieces = matches!(plan, Rewritten::Pieces(_));
    let n = plan
        .into_out(data.len() as u64)
        .write_file(src, &NO_AUX, dst)
        .map_err(io)?;
    if pieces {
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

/// Refuse inputs where something other than the wrappers refers to the
/// fatbin bytes being removed (it would dangle).
fn check_no_other_refs(elf: &Elf<'_>, info: &FatBinaryInfo, lo: u64, hi: u64) -> Result<()> {
    let wrapper_fields: HashSet<u64> = info.wrappers.iter().map(|w| w.field).collect();
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

fn split_linked(elf: &Elf<'_>, info: &FatBinaryInfo, marker: &[u8]) -> Result<Out> {
    let f = locate_fatbin(elf, info)?;
    let b = metadata_block(elf, f.page)?;
    match region_b(elf, &f, &b, marker.len() as u64)? {
        None => split_in_place(elf, info, marker, b.len()),
        Some(g) => write_split(elf, info, marker, &f, &b, &g),
    }
}

/// Where `.hip_fatbin` `[v, r)` is: phase 1 of [`split_linked`].
#[derive(Clone, Copy)]
struct Fatbin {
    fb: SectionRange,
    v: u64,
    r: u64,
    /// The PT_LOAD `L` holding it, and its index.
    l: Phdr,
    li: usize,
    /// The page size the layout keeps.
    page: u64,
}

impl Fatbin {
    /// File offset of address `a` of `L`.
    fn off(&self, a: u64) -> u64 {
        self.l.p_offset + (a - self.l.p_vaddr)
    }
}

/// Phase 1 of [`split_linked`]: `.hip_fatbin`, its PT_LOAD and the checks
/// that the file can be rewritten at all.
fn locate_fatbin(elf: &Elf<'_>, info: &FatBinaryInfo) -> Result<Fatbin> {
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
    Ok(Fatbin {
        fb,
        v,
        r,
        l,
        li,
        page,
    })
}

/// The block of metadata sections behind the program headers, moved to
/// make room for one more: phase 2 of [`split_linked`].
struct Block {
    /// Its sections.
    sections: Vec<usize>,
    /// Its file range `[b0_off, b1_off)`.
    b0_off: u64,
    b1_off: u64,
    /// Its largest section alignment (at least 16, at most a page).
    amax: u64,
    /// The PT_LOAD holding the headers, and its index.
    l0: Phdr,
    l0i: usize,
    /// The program header count after the split, and the table's end.
    new_n: u64,
    ph_new_end: u64,
}

impl Block {
    /// Address of file offset `off` in the headers' PT_LOAD.
    fn l0_addr(&self, off: u64) -> u64 {
        self.l0.p_vaddr + (off - self.l0.p_offset)
    }

    fn len(&self) -> u64 {
        self.b1_off - self.b0_off
    }
}

/// Phase 2 of [`split_linked`]: the metadata block and its checks.
fn metadata_block(elf: &Elf<'_>, page: u64) -> Result<Block> {
    let data = elf.data;
    let n = elf.phdrs.len() as u64;
    let new_n = n + 1;
    let ph_old_end = elf.ehdr.e_phoff + n * PHDR_SIZE;
    let ph_new_end = elf.ehdr.e_phoff + new_n * PHDR_SIZE;
    let l0i = header_load(elf)?;
    let l0 = elf.phdrs[l0i];
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
    Ok(Block {
        sections: block,
        b0_off,
        b1_off,
        amax,
        l0,
        l0i,
        new_n,
        ph_new_end,
    })
}

/// Region B = `[w, r)` of the new `L2` (the block at `w`, the marker at
/// `m`) and the file offsets around it: phase 3 of [`split_linked`].
#[derive(Clone, Copy)]
struct RegionB {
    w: u64,
    m: u64,
    /// How far the block moves (`w - b0`).
    delta: u64,
    /// End of the file data of `L` before `.hip_fatbin`, address and offset.
    d_addr: u64,
    d_off: u64,
    /// File offset of `w` in the output.
    o2: u64,
    /// File offset of `r` in the input, and how far what follows moves down.
    o_r: u64,
    shift: u64,
    /// End of the loaded content of the input.
    end: u64,
}

/// Phase 3 of [`split_linked`]: `None` when `.hip_fatbin` is too small to
/// give bytes back (the marker then takes its place: `split_in_place`).
fn region_b(elf: &Elf<'_>, f: &Fatbin, b: &Block, mlen: u64) -> Result<Option<RegionB>> {
    let Fatbin {
        fb,
        v,
        r,
        l,
        li,
        page,
        ..
    } = *f;
    let (block, blocklen, b0, amax) = (&b.sections, b.len(), b.l0_addr(b.b0_off), b.amax);
    let (l0i, ph_new_end) = (b.l0i, b.ph_new_end);
    let l0_addr = |off: u64| b.l0_addr(off);
    let l_off = |a: u64| f.off(a);
    let room_start = r
        .checked_sub(mlen)
        .and_then(|x| x.checked_sub(blocklen))
        .and_then(|x| x.checked_sub(b0));
    let w = room_start.map(|x| b0 + align_down(x, amax));
    let Some(w) = w.filter(|&w| w >= v) else {
        // Too small to give bytes back: the marker takes the fatbin's place.
        return Ok(None);
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
    Ok(Some(RegionB {
        w,
        m,
        delta,
        d_addr,
        d_off,
        o2,
        o_r,
        shift,
        end,
    }))
}

/// Phase 4 of [`split_linked`]: the output, as pieces of the input and
/// new bytes (sections, program headers, tail, references, wrappers).
fn write_split(
    elf: &Elf<'_>,
    info: &FatBinaryInfo,
    marker: &[u8],
    f: &Fatbin,
    b: &Block,
    g: &RegionB,
) -> Result<Out> {
    let data = elf.data;
    let Fatbin { fb, v, r, page, .. } = *f;
    let (block, b0_off, b1_off, blocklen) = (&b.sections, b.b0_off, b.b1_off, b.len());
    let (new_n, ph_new_end) = (b.new_n, b.ph_new_end);
    let b0 = b.l0_addr(b0_off);
    let l0_addr = |off: u64| b.l0_addr(off);
    let RegionB {
        w,
        m,
        delta,
        d_off,
        o2,
        o_r,
        shift,
        end,
        ..
    } = *g;
    let mlen = marker.len() as u64;
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
    let mut shdrs = fix_shdrs(
        elf,
        &moved,
        end,
        ShdrFix {
            fatbin: (fb.index, &|sh| {
                sh.sh_type = elf::SHT_NOBITS;
                sh.sh_size = w - v;
                // NOBITS: offset congruent to the address in L1's image.
                sh.sh_offset = fb.file_offset;
            }),
            moved: &|sh| {
                sh.sh_addr += delta;
                sh.sh_offset = o2 + (sh.sh_addr - w);
            },
            loaded: &|i, sh| {
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
                Ok(())
            },
        },
    )?;
    let shstrtab = add_marker_section(elf, info, &mut shdrs, m, o2 + (m - w), mlen)?;

    let phdrs = split_phdrs(elf, f, b, g)?;
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

/// The program headers of the split file: `L` cut into `L1` (up to the
/// bundles, which become NOBITS) and `L2` (the moved block, the marker and
/// what followed the bundles), PT_PHDR one entry longer, the segments of
/// the moved block at their new place, and those after the removed range
/// `shift` bytes earlier in the file.
fn split_phdrs(elf: &Elf<'_>, f: &Fatbin, b: &Block, g: &RegionB) -> Result<Vec<Phdr>> {
    let Fatbin {
        fb, v, r, l, li, ..
    } = *f;
    let (b0_off, b1_off, new_n) = (b.b0_off, b.b1_off, b.new_n);
    let RegionB {
        w,
        delta,
        d_addr,
        d_off,
        o2,
        o_r,
        shift,
        ..
    } = *g;
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
            if p.p_vaddr != b.l0_addr(p.p_offset) {
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
    Ok(phdrs)
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
