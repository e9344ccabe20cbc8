//! Reassembly of a split ELF file: the exact inverse of [`super::split`]
//! (`reassemble_linked`, `reassemble_in_place`), in memory, to a file, or
//! with the bundles placed by the caller.

use super::*;
use crate::{MarkerInfo, SectionRange};

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
    reassemble_plan(host, bundles)?
        .into_out(host.len() as u64)
        .write_to(host_src, bundles.aux(), dst)
        .map_err(io)
}

/// [`reassemble_to`] into `dst` (empty) with positioned writes: the runs of
/// zeros the layout adds (a `.hip_fatbin` restored at its recorded size)
/// are left as holes ([`Out::write_file`]). Returns the file's size.
pub fn reassemble_into(
    host: &[u8],
    host_src: &dyn rocpack_bundle::ReadAt,
    bundles: &Bundles<'_>,
    dst: &std::fs::File,
) -> Result<u64> {
    let io = |e: std::io::Error| Error::Io {
        what: "writing the reassembled file",
        source: e,
    };
    reassemble_plan(host, bundles)?
        .into_out(host.len() as u64)
        .write_file(host_src, bundles.aux(), dst)
        .map_err(io)
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
    let limit = output_limit(data, cap, page_size(elf)?);
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

/// How large the output of a reassembly may grow: the host, the room the
/// split left for the bundles (`cap` bytes: where the original's bundles
/// were, up to the next section) and 4 pages for the tail's alignment.
/// The room, not the bundles given: bundles smaller than the original's (a
/// subset of the archives, bundles compressed harder) go where the larger
/// ones were, and the content behind them keeps its place.
fn output_limit(data: &[u8], cap: u64, page: u64) -> u64 {
    (data.len() as u64)
        .saturating_add(cap)
        .saturating_add(page.saturating_mul(4))
}

/// Size of the rebuilt `.hip_fatbin` of `fat_len` bytes: with the zero
/// bytes the original had after its last bundle (`places.fatpad`) when they
/// fit in the `cap` bytes free there (they are zero in the output).
fn fatbin_size(fat_len: u64, places: OrigPlaces, cap: u64) -> u64 {
    Some(fat_len + places.fatpad)
        .filter(|&n| n <= cap)
        .unwrap_or(fat_len)
}

fn reassemble_linked(elf: &Elf<'_>, info: &FatBinaryInfo, bundles: &Bundles<'_>) -> Result<Out> {
    match split_geometry(elf, info)? {
        None => reassemble_in_place(elf, info, bundles),
        Some(g) => write_reassembly(elf, info, bundles, &g),
    }
}

/// Where a split linked file has `L1`, `L2`, the marker and the moved
/// metadata block: phase 1 of [`reassemble_linked`].
struct SplitGeometry<'a> {
    /// `.hip_fatbin` (NOBITS `[v, w)`) and the marker section (`[m, m + mlen)`).
    fb: SectionRange,
    mk: &'a MarkerInfo,
    v: u64,
    w: u64,
    m: u64,
    mlen: u64,
    /// `L1` (index `l1i`) and `L2`, the PT_LOADs the split made of one.
    l1i: usize,
    l1: Phdr,
    l2: Phdr,
    page: u64,
    /// Program header count after the merge, and the table's end.
    new_n: u64,
    ph_new_end: u64,
    /// The PT_LOAD holding the headers.
    l0: Phdr,
    /// The moved block `[w, m)`: its sections, its original place, and how
    /// far it moves back (applied with `wrapping_add`).
    blocklen: u64,
    moved: HashSet<usize>,
    b0_off: u64,
    delta: u64,
}

/// Phase 1 of [`reassemble_linked`]: `None` for a binary split in place
/// (`.hip_fatbin` not NOBITS: `reassemble_in_place`).
fn split_geometry<'a>(elf: &Elf<'_>, info: &'a FatBinaryInfo) -> Result<Option<SplitGeometry<'a>>> {
    let (fb, mk) = split_sections(info, "binary")?;
    if !fb.nobits {
        return Ok(None);
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
    Ok(Some(SplitGeometry {
        fb,
        mk,
        v,
        w,
        m,
        mlen,
        l1i,
        l1,
        l2,
        page,
        new_n,
        ph_new_end,
        l0,
        blocklen,
        moved,
        b0_off,
        delta,
    }))
}

/// Phase 2 of [`reassemble_linked`]: the rebuilt `.hip_fatbin`, the merged
/// PT_LOAD, the block back behind the program headers, the output.
fn write_reassembly(
    elf: &Elf<'_>,
    info: &FatBinaryInfo,
    bundles: &Bundles<'_>,
    g: &SplitGeometry<'_>,
) -> Result<Out> {
    let data = elf.data;
    let SplitGeometry {
        fb,
        mk,
        v,
        w,
        m,
        l1,
        l2,
        page,
        new_n,
        ph_new_end,
        l0,
        blocklen,
        ref moved,
        b0_off,
        delta,
        ..
    } = *g;
    // Rebuilt .hip_fatbin.
    let (fat_len, offsets) = fatbin_layout(&bundles.lens());
    let bundle_addr: Vec<u64> = offsets.iter().map(|&o| v + o).collect();
    let r_end = free_end(elf, g);
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
    let limit = output_limit(data, cap, page);
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
    // The marker section is removed at the end (after the tail layout, which
    // indexes sections by their input index).
    let mut shdrs = fix_shdrs(
        elf,
        moved,
        end,
        ShdrFix {
            fatbin: (fb.index, &|sh| {
                sh.sh_type = elf::SHT_PROGBITS;
                sh.sh_size = fatbin_size(fat_len, places, cap);
                sh.sh_offset = lo(v);
            }),
            moved: &|sh| {
                sh.sh_addr = sh.sh_addr.wrapping_add(delta);
                sh.sh_offset = l0.p_offset + (sh.sh_addr - l0.p_vaddr);
            },
            loaded: &|_, sh| {
                if sh.sh_offset >= split_r_off {
                    sh.sh_offset += growth;
                } else if sh.sh_offset >= d_off && sh.sh_type == elf::SHT_NOBITS {
                    sh.sh_offset = sh.sh_offset.max(d_off);
                }
                Ok(())
            },
        },
    )?;
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

    write_phdrs(elf, &mut out, &merged_phdrs(elf, g, split_r_off, growth))?;
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
    relocate_block_refs(elf, &mut out, &map, w, m, delta, moved)?;

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

/// Where the room for the rebuilt `.hip_fatbin` ends: at the first
/// section after the marker, or at the end of L2.
fn free_end(elf: &Elf<'_>, g: &SplitGeometry<'_>) -> u64 {
    let l2_end = g.l2.p_vaddr + g.l2.p_memsz;
    elf.shdrs
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            *i != g.mk.section.index
                && s.is_alloc()
                && s.sh_addr >= g.m + g.mlen
                && s.sh_addr < l2_end
        })
        .map(|(_, s)| s.sh_addr)
        .min()
        .unwrap_or(l2_end)
}

/// The program headers of the reassembled file: L1 and L2 merged back
/// into one PT_LOAD, PT_PHDR one entry shorter, the segments of the moved
/// block back in place, and those after the free range (from
/// `split_r_off`) `growth` bytes further into the file.
fn merged_phdrs(elf: &Elf<'_>, g: &SplitGeometry<'_>, split_r_off: u64, growth: u64) -> Vec<Phdr> {
    let (l0, l1, l2) = (g.l0, g.l1, g.l2);
    let mut phdrs: Vec<Phdr> = Vec::with_capacity(g.new_n as usize);
    for (i, p) in elf.phdrs.iter().enumerate() {
        let mut p = *p;
        if i == g.l1i + 1 {
            continue;
        }
        if i == g.l1i {
            p.p_filesz = l2.p_vaddr + l2.p_filesz - l1.p_vaddr;
            p.p_memsz = l2.p_vaddr + l2.p_memsz - l1.p_vaddr;
        } else if p.p_type == elf::PT_PHDR {
            p.p_filesz = g.new_n * PHDR_SIZE;
            p.p_memsz = g.new_n * PHDR_SIZE;
        } else if p.p_filesz > 0 && p.p_vaddr >= g.w && p.p_vaddr + p.p_filesz <= g.m {
            p.p_vaddr = p.p_vaddr.wrapping_add(g.delta);
            p.p_paddr = p.p_paddr.wrapping_add(g.delta);
            p.p_offset = l0.p_offset + (p.p_vaddr - l0.p_vaddr);
        } else if p.p_offset >= split_r_off {
            p.p_offset += growth;
        }
        phdrs.push(p);
    }
    phdrs
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
