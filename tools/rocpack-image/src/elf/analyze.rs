//! Analysis of fat and split binaries: `.hip_fatbin`, its bundles, every
//! `__CudaFatBinaryWrapper` and the bundle (or marker) it really points at.

use std::collections::HashMap;

use object::elf;

use crate::elf::headers::{get, within, Elf, Shdr, SHT_RELR};
use crate::{
    wrapper_table, BundleInfo, MarkerInfo, SectionRange, State, HIPF_MAGIC, HIPK_MAGIC,
    WRAPPER_SIZE,
};
use crate::{Error, Result};

/// Section holding the offload bundles.
pub const FATBIN_SECTION: &str = ".hip_fatbin";
/// Section holding the 24-byte wrappers.
pub const WRAPPER_SECTION: &str = ".hipFatBinSegment";
/// Section holding the marker payload of a split binary.
pub const MARKER_SECTION: &str = ".rocm_kpack_ref";
/// Name prefix of the sections an `-fgpu-rdc` object keeps its bundle
/// entries in (`__CLANG_OFFLOAD_BUNDLE__<entry id>`).
pub const OFFLOAD_SECTION_PREFIX: &str = "__CLANG_OFFLOAD_BUNDLE__";

pub(crate) const R_X86_64_64: u32 = 1;
pub(crate) const R_X86_64_RELATIVE: u32 = 8;
pub(crate) const R_AARCH64_ABS64: u32 = 257;
pub(crate) const R_AARCH64_RELATIVE: u32 = 1027;

/// ELF file type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElfKind {
    /// `ET_EXEC` (non-PIE executable).
    Executable,
    /// `ET_DYN` (shared library or PIE executable).
    Shared,
    /// `ET_REL` (object file, e.g. a static-archive member).
    Relocatable,
}

/// How a wrapper's `binary` pointer gets its run-time value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointerModel {
    /// No relocation: the value in the file is the address (`ET_EXEC`).
    Absolute,
    /// RELA `R_*_RELATIVE`: the addend is the link-time address.
    RelaRelative {
        /// File offset of the RELA entry.
        entry_offset: u64,
    },
    /// RELA `R_X86_64_64` / `R_AARCH64_ABS64` against a symbol.
    RelaSymbol {
        entry_offset: u64,
        symbol: String,
        symbol_value: u64,
    },
    /// SHT_REL: the addend is the value in place.
    Rel { entry_offset: u64, r_type: u32 },
    /// Listed in `.relr.dyn`; the addend is the value in place.
    Relr {
        /// Encoded in a bitmap word (else an address word).
        bitmap: bool,
    },
    /// Relocatable object: relocation in `.rela.hipFatBinSegment`.
    Object {
        entry_offset: u64,
        /// Symbol table index of the referenced symbol.
        symbol_index: u32,
        symbol: String,
        /// Section the symbol is defined in.
        target_section: usize,
    },
}

/// One `__CudaFatBinaryWrapper` of an ELF file.
pub type WrapperInfo = crate::model::Wrapper<PointerModel>;

impl WrapperInfo {
    /// Marker payload this wrapper points at (from its target to the end of
    /// `.rocm_kpack_ref`; msgpack readers stop at the end of the first object).
    pub fn marker_bytes<'a>(&self, info: &'a FatBinaryInfo) -> Option<&'a [u8]> {
        let m = info.marker.as_ref()?;
        if !self.points_to_marker {
            return None;
        }
        let off = match self.pointer {
            PointerModel::Object { .. } => self.target,
            _ => self.target.checked_sub(m.section.addr)?,
        };
        m.bytes.get(usize::try_from(off).ok()?..)
    }
}

/// Everything [`analyze`] finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FatBinaryInfo {
    pub kind: ElfKind,
    pub machine: u16,
    pub state: State,
    pub fatbin: Option<SectionRange>,
    pub wrapper_section: Option<SectionRange>,
    pub bundles: Vec<BundleInfo>,
    pub wrappers: Vec<WrapperInfo>,
    pub marker: Option<MarkerInfo>,
    /// Names of `__CLANG_OFFLOAD_BUNDLE__*` sections (`-fgpu-rdc` objects
    /// carry device bitcode this way; such files are left untouched).
    pub offload_bundle_sections: Vec<String>,
}

impl FatBinaryInfo {
    /// Whether splitting would remove device code.
    pub fn has_device_code(&self) -> bool {
        self.state == State::Fat && !self.bundles.is_empty()
    }
}

fn range(index: usize, s: &Shdr) -> SectionRange {
    SectionRange {
        index,
        file_offset: s.sh_offset,
        addr: s.sh_addr,
        size: s.sh_size,
        nobits: s.sh_type == elf::SHT_NOBITS,
    }
}

/// Analyse an ELF64 little-endian file (executable, shared object or
/// relocatable object). Host-only files yield `State::HostOnly`.
pub fn analyze(data: &[u8]) -> Result<FatBinaryInfo> {
    analyze_in(data, &data)
}

/// [`analyze`], finding the bundles of `.hip_fatbin` through `src`, a
/// source of the same bytes as `data` (for a mapped file: positioned reads
/// of the file, so the device code is never faulted into the mapping).
///
/// `data` is a slice of the whole file, or a [`crate::elf::SparseView`] of the
/// parts [`crate::elf::Sparse::load_elf`] loaded.
pub fn analyze_in<'a, D: object::ReadRef<'a>>(
    data: D,
    src: &dyn rocpack_bundle::ReadAt,
) -> Result<FatBinaryInfo> {
    let elf = Elf::parse(data)?;
    analyze_elf(&elf, src)
}

pub(crate) fn analyze_elf<'a, D: object::ReadRef<'a>>(
    elf: &Elf<'a, D>,
    src: &dyn rocpack_bundle::ReadAt,
) -> Result<FatBinaryInfo> {
    let data = elf.data;
    let kind = match elf.ehdr.e_type {
        elf::ET_EXEC => ElfKind::Executable,
        elf::ET_DYN => ElfKind::Shared,
        elf::ET_REL => ElfKind::Relocatable,
        t => {
            return Err(Error::unsupported(
                16,
                format!("e_type {t} (not EXEC, DYN or REL)"),
            ))
        }
    };
    let offload_bundle_sections = elf
        .shdrs
        .iter()
        .filter(|s| s.name.starts_with(OFFLOAD_SECTION_PREFIX.as_bytes()))
        .map(Shdr::name_str)
        .collect();
    let fatbin = elf
        .section_by_name(FATBIN_SECTION)
        .map(|(i, s)| range(i, s));
    let wrapper_section = elf
        .section_by_name(WRAPPER_SECTION)
        .map(|(i, s)| range(i, s));
    let marker = match elf.section_by_name(MARKER_SECTION) {
        Some((i, s)) => Some(MarkerInfo {
            section: range(i, s),
            bytes: s.data(data)?.to_vec(),
        }),
        None => None,
    };

    let mut bundles = match fatbin.filter(|fb| !fb.nobits) {
        Some(fb) => find_bundles(data, src, kind, fb)?,
        None => Vec::new(),
    };
    // A separated debug file (`objcopy --only-keep-debug`, `*_dbg`
    // artifacts) keeps every allocated section only as NOBITS: no device
    // code and no wrappers to read, nothing to split.
    let debug_only = fatbin.as_ref().is_none_or(|f| f.nobits);
    let mut wrappers = match wrapper_section.filter(|w| !(w.nobits && debug_only)) {
        Some(ws) => read_wrappers(elf, kind, ws)?,
        None => Vec::new(),
    };
    let state = classify(kind, &bundles, &wrappers)?;
    link_wrappers(&mut wrappers, &mut bundles, fatbin, marker.as_ref())?;

    Ok(FatBinaryInfo {
        kind,
        machine: elf.ehdr.e_machine,
        state,
        fatbin,
        wrapper_section,
        bundles,
        wrappers,
        marker,
        offload_bundle_sections,
    })
}

/// The bundles of the (PROGBITS) `.hip_fatbin` section `fb`, found through
/// `src`.
fn find_bundles<'a, D: object::ReadRef<'a>>(
    data: D,
    src: &dyn rocpack_bundle::ReadAt,
    kind: ElfKind,
    fb: SectionRange,
) -> Result<Vec<BundleInfo>> {
    within(data, fb.file_offset, fb.size, ".hip_fatbin")?;
    let section = rocpack_bundle::Window::new(src, fb.file_offset, fb.size);
    let spans = rocpack_bundle::find_bundles_in(&section).map_err(|e| {
        let off = fb.file_offset + e.offset().unwrap_or(0);
        Error::Bundle {
            offset: off,
            source: e,
        }
    })?;
    Ok(spans
        .iter()
        .enumerate()
        .map(|(i, sp)| BundleInfo {
            index: i,
            section_offset: sp.offset,
            file_offset: fb.file_offset + sp.offset,
            addr: if kind == ElfKind::Relocatable {
                sp.offset
            } else {
                fb.addr + sp.offset
            },
            len: sp.len,
            format: sp.format,
            wrappers: Vec::new(),
        })
        .collect())
}

/// The wrappers of the `.hipFatBinSegment` section `ws`, each with the
/// pointer model and target its relocations (or file value) give.
fn read_wrappers<'a, D: object::ReadRef<'a>>(
    elf: &Elf<'a, D>,
    kind: ElfKind,
    ws: SectionRange,
) -> Result<Vec<WrapperInfo>> {
    if ws.nobits {
        return Err(Error::malformed(
            elf.shdr_offset(ws.index),
            ".hipFatBinSegment is NOBITS",
        ));
    }
    if !ws.size.is_multiple_of(WRAPPER_SIZE) {
        return Err(Error::malformed(
            ws.file_offset,
            format!(".hipFatBinSegment size {} is not a multiple of 24", ws.size),
        ));
    }
    let table = get(elf.data, ws.file_offset, ws.size, ".hipFatBinSegment")?;
    let fields = if kind == ElfKind::Relocatable {
        0..ws.size
    } else {
        ws.addr..ws.addr.saturating_add(ws.size)
    };
    let resolver = Resolver::new(elf, ws.index, fields)?;
    let mut wrappers = Vec::new();
    for raw in wrapper_table(table, ws.file_offset) {
        let w = raw?;
        // Pointer field address: section offset in relocatable objects.
        let field_in_section = w.file_offset - ws.file_offset + 8;
        let field_addr = if kind == ElfKind::Relocatable {
            field_in_section
        } else {
            ws.addr + field_in_section
        };
        let (model, target) =
            resolver
                .resolve(elf, field_addr, w.value_in_file)
                .map_err(|what| Error::Wrapper {
                    index: w.index,
                    offset: w.file_offset + 8,
                    what,
                })?;
        wrappers.push(WrapperInfo {
            index: w.index,
            file_offset: w.file_offset,
            magic: w.magic,
            version: w.version,
            reserved1: w.reserved1,
            field: field_addr,
            value_in_file: w.value_in_file,
            pointer: model,
            target,
            bundle: None,
            points_to_marker: false,
        });
    }
    Ok(wrappers)
}

/// Fat, split or host-only, from the bundles and the wrappers' magics; a
/// mix of HIPF and HIPK wrappers is malformed.
fn classify(kind: ElfKind, bundles: &[BundleInfo], wrappers: &[WrapperInfo]) -> Result<State> {
    let any_hipk = wrappers.iter().any(|w| w.magic == HIPK_MAGIC);
    let any_hipf = wrappers.iter().any(|w| w.magic == HIPF_MAGIC);
    if any_hipk && any_hipf {
        let w = wrappers
            .iter()
            .find(|w| w.magic == HIPK_MAGIC)
            .map_or(0, |w| w.file_offset);
        return Err(Error::malformed(w, "mix of HIPF and HIPK wrappers"));
    }
    Ok(if any_hipk {
        State::Split
    } else if !bundles.is_empty() || (any_hipf && kind != ElfKind::Relocatable) {
        State::Fat
    } else {
        State::HostOnly
    })
}

/// Follows every wrapper pointer: a HIPK wrapper must point into the
/// marker section, a HIPF wrapper at the start of a bundle (linked both
/// ways: `WrapperInfo::bundle`, `BundleInfo::wrappers`).
fn link_wrappers(
    wrappers: &mut [WrapperInfo],
    bundles: &mut [BundleInfo],
    fatbin: Option<SectionRange>,
    marker: Option<&MarkerInfo>,
) -> Result<()> {
    for w in wrappers {
        let target_section = match &w.pointer {
            PointerModel::Object { target_section, .. } => Some(*target_section),
            _ => None,
        };
        let in_section = |r: &SectionRange| -> Option<u64> {
            match target_section {
                Some(ts) => (ts == r.index && w.target <= r.size).then_some(w.target),
                None => {
                    (w.target >= r.addr && w.target - r.addr <= r.size).then(|| w.target - r.addr)
                }
            }
        };
        if w.magic == HIPK_MAGIC {
            let m = marker.ok_or_else(|| Error::Wrapper {
                index: w.index,
                offset: w.file_offset,
                what: "HIPK wrapper but no .rocm_kpack_ref section".into(),
            })?;
            // Linked split objects concatenate their markers: any offset
            // inside the section is a marker start.
            w.points_to_marker = in_section(&m.section).is_some_and(|o| o < m.section.size);
            if !w.points_to_marker {
                return Err(Error::Wrapper {
                    index: w.index,
                    offset: w.file_offset + 8,
                    what: format!(
                        "HIPK wrapper points at {:#x}, not at .rocm_kpack_ref ({:#x})",
                        w.target, m.section.addr
                    ),
                });
            }
            continue;
        }
        if target_section.is_some() && fatbin.is_none() {
            // -fgpu-rdc object: the wrapper points at `__hip_fatbin_<cuid>`,
            // defined only by the device link; no bundle here.
            continue;
        }
        let fb = fatbin.ok_or_else(|| Error::Wrapper {
            index: w.index,
            offset: w.file_offset,
            what: "HIPF wrapper but no .hip_fatbin section".into(),
        })?;
        let off = in_section(&fb)
            .filter(|&o| o < fb.size)
            .ok_or_else(|| Error::Wrapper {
                index: w.index,
                offset: w.file_offset + 8,
                what: format!(
                    "pointer {:#x} is outside .hip_fatbin [{:#x}, {:#x})",
                    w.target,
                    fb.addr,
                    fb.addr.saturating_add(fb.size)
                ),
            })?;
        let b = bundles
            .iter_mut()
            .find(|b| b.section_offset == off)
            .ok_or_else(|| Error::Wrapper {
                index: w.index,
                offset: w.file_offset + 8,
                what: format!(
                    "pointer {:#x} (.hip_fatbin + {off:#x}) is not the start of a bundle",
                    w.target
                ),
            })?;
        b.wrappers.push(w.index);
        w.bundle = Some(b.index);
    }
    Ok(())
}

/// Index of the relocations that may cover a wrapper pointer: those
/// inside the wrapper table (a shared library's other dynamic relocations,
/// hundreds of thousands of them, are not kept).
struct Resolver {
    /// Linked files: dynamic relocations by r_offset (section, reloc).
    by_offset: HashMap<u64, (usize, crate::elf::headers::Reloc)>,
    relr: HashMap<u64, bool>,
    /// Relocatable objects: symbol table of the wrapper relocations.
    object: bool,
}

impl Resolver {
    /// `fields`: the range of `r_offset`s (addresses; section offsets in
    /// relocatable objects) the wrapper table covers.
    fn new<'a, D: object::ReadRef<'a>>(
        elf: &Elf<'a, D>,
        wrapper_index: usize,
        fields: std::ops::Range<u64>,
    ) -> Result<Self> {
        let object = elf.ehdr.e_type == elf::ET_REL;
        let mut by_offset = HashMap::new();
        let mut relr = HashMap::new();
        for (i, s) in elf.shdrs.iter().enumerate() {
            let is_rel = s.sh_type == elf::SHT_RELA || s.sh_type == elf::SHT_REL;
            if object {
                if is_rel && s.sh_info as usize == wrapper_index {
                    for r in elf.relocations(i)?.filter(|r| fields.contains(&r.r_offset)) {
                        by_offset.entry(r.r_offset).or_insert((i, r));
                    }
                }
            } else if is_rel && s.is_alloc() {
                for r in elf.relocations(i)?.filter(|r| fields.contains(&r.r_offset)) {
                    by_offset.entry(r.r_offset).or_insert((i, r));
                }
            } else if s.sh_type == SHT_RELR && s.is_alloc() {
                for (a, bitmap) in elf.relr_addresses(i)? {
                    if fields.contains(&a) {
                        relr.insert(a, bitmap);
                    }
                }
            }
        }
        Ok(Resolver {
            by_offset,
            relr,
            object,
        })
    }

    fn resolve<'a, D: object::ReadRef<'a>>(
        &self,
        elf: &Elf<'a, D>,
        field_addr: u64,
        value: u64,
    ) -> std::result::Result<(PointerModel, u64), String> {
        let machine = elf.ehdr.e_machine;
        let relative = |t: u32| {
            (machine == elf::EM_X86_64 && t == R_X86_64_RELATIVE)
                || (machine == elf::EM_AARCH64 && t == R_AARCH64_RELATIVE)
        };
        let abs64 = |t: u32| {
            (machine == elf::EM_X86_64 && t == R_X86_64_64)
                || (machine == elf::EM_AARCH64 && t == R_AARCH64_ABS64)
        };
        if let Some((sec, r)) = self.by_offset.get(&field_addr) {
            let addend = r.r_addend.unwrap_or(value as i64);
            let symtab = elf.shdrs[*sec].sh_link as usize;
            if self.object {
                if !abs64(r.r_type) {
                    return Err(format!(
                        "relocation type {} for the pointer is not a 64-bit absolute one",
                        r.r_type
                    ));
                }
                let syms = elf.symbols(symtab).map_err(|e| e.to_string())?;
                let sym = syms
                    .get(r.r_sym as usize)
                    .ok_or_else(|| format!("relocation symbol {} out of range", r.r_sym))?;
                let target = sym.st_value.wrapping_add(addend as u64);
                let name = if sym.st_info & 0xf == elf::STT_SECTION {
                    elf.shdrs
                        .get(usize::from(sym.st_shndx))
                        .map(Shdr::name_str)
                        .unwrap_or_default()
                } else {
                    elf.symbol_name(symtab, sym)
                };
                return Ok((
                    PointerModel::Object {
                        entry_offset: r.entry_offset,
                        symbol_index: r.r_sym,
                        symbol: name,
                        target_section: usize::from(sym.st_shndx),
                    },
                    target,
                ));
            }
            if r.r_addend.is_none() {
                if !relative(r.r_type) && !abs64(r.r_type) {
                    return Err(format!("unsupported REL relocation type {}", r.r_type));
                }
                let mut target = value;
                if abs64(r.r_type) {
                    let syms = elf.symbols(symtab).map_err(|e| e.to_string())?;
                    let sym = syms
                        .get(r.r_sym as usize)
                        .ok_or_else(|| format!("relocation symbol {} out of range", r.r_sym))?;
                    target = sym.st_value.wrapping_add(value);
                }
                return Ok((
                    PointerModel::Rel {
                        entry_offset: r.entry_offset,
                        r_type: r.r_type,
                    },
                    target,
                ));
            }
            if relative(r.r_type) {
                return Ok((
                    PointerModel::RelaRelative {
                        entry_offset: r.entry_offset,
                    },
                    addend as u64,
                ));
            }
            if abs64(r.r_type) {
                let syms = elf.symbols(symtab).map_err(|e| e.to_string())?;
                let sym = syms
                    .get(r.r_sym as usize)
                    .ok_or_else(|| format!("relocation symbol {} out of range", r.r_sym))?;
                if sym.st_shndx == elf::SHN_UNDEF {
                    return Err(format!(
                        "pointer relocated against undefined symbol `{}`",
                        elf.symbol_name(symtab, sym)
                    ));
                }
                return Ok((
                    PointerModel::RelaSymbol {
                        entry_offset: r.entry_offset,
                        symbol: elf.symbol_name(symtab, sym),
                        symbol_value: sym.st_value,
                    },
                    sym.st_value.wrapping_add(addend as u64),
                ));
            }
            return Err(format!(
                "unsupported relocation type {} for the pointer",
                r.r_type
            ));
        }
        if self.object {
            return Err("no relocation for the pointer in the object file".into());
        }
        if let Some(bitmap) = self.relr.get(&field_addr) {
            return Ok((PointerModel::Relr { bitmap: *bitmap }, value));
        }
        Ok((PointerModel::Absolute, value))
    }
}
