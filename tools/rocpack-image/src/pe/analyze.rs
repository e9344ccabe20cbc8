//! Analysis of PE32+ images and COFF objects with HIP device code: the
//! bundle section (`.hip_fat` in images linked with 8-character section
//! names, `.hip_fatbin` in objects and in images that keep long names
//! through the COFF string table), its bundles, every 24-byte wrapper in
//! `.hipFatB`/`.hipFatBinSegment` and what its pointer really points at.
//! Headers are read with the `object` crate; nothing is trusted before it is
//! bounded by the file.

use std::collections::BTreeMap;

use object::pe;
use object::read::coff::{CoffHeader, ImageSymbol, SymbolTable};
use object::read::pe::{ImageNtHeaders, ImageOptionalHeader};
use object::{LittleEndian as LE, ReadRef};

use crate::{BundleInfo, MarkerInfo, SectionRange, State, HIPF_MAGIC, HIPK_MAGIC};

use crate::error::{Error, Result};

/// Names of the bundle section (image with truncated names, long name).
pub const FATBIN_SECTIONS: [&str; 2] = [".hip_fat", ".hip_fatbin"];
/// Names of the wrapper section.
pub const WRAPPER_SECTIONS: [&str; 2] = [".hipFatB", ".hipFatBinSegment"];
/// Section holding the marker payload of a split image.
pub const MARKER_SECTION: &str = ".kpackrf";
/// Characteristics of the marker section: `MEM_READ | CNT_INITIALIZED_DATA`.
pub const MARKER_CHARACTERISTICS: u32 = pe::IMAGE_SCN_MEM_READ | pe::IMAGE_SCN_CNT_INITIALIZED_DATA;
/// Size of one `__CudaFatBinaryWrapper` (the same on both sides of the seam).
pub use crate::WRAPPER_SIZE;

/// What kind of PE/COFF file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeKind {
    /// Image with `IMAGE_FILE_DLL` (DLLs, Python `.pyd`).
    Dll,
    /// Executable image.
    Exe,
    /// COFF relocatable object (`.obj`).
    Object,
}

impl PeKind {
    /// `DLL`, `EXE` or `OBJ`.
    pub fn name(self) -> &'static str {
        match self {
            PeKind::Dll => "DLL",
            PeKind::Exe => "EXE",
            PeKind::Object => "OBJ",
        }
    }
}

/// One section header, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeSection {
    /// 0-based position in the section table.
    pub index: usize,
    /// Name (long names resolved through the COFF string table).
    pub name: String,
    /// File offset of the 40-byte header.
    pub header_offset: u64,
    pub virtual_address: u32,
    pub virtual_size: u32,
    pub raw_offset: u32,
    pub raw_size: u32,
    pub characteristics: u32,
}

impl PeSection {
    /// Bytes of the section stored in the file: `SizeOfRawData`, capped by
    /// `VirtualSize` in images (the rest of the raw data is file alignment
    /// padding; a larger `VirtualSize` is zero-filled by the loader).
    pub fn file_len(&self, object: bool) -> u32 {
        if object || self.virtual_size == 0 {
            self.raw_size
        } else {
            self.raw_size.min(self.virtual_size)
        }
    }

    fn range(&self, object: bool) -> SectionRange {
        SectionRange {
            index: self.index,
            file_offset: u64::from(self.raw_offset),
            addr: u64::from(self.virtual_address),
            size: if object {
                u64::from(self.raw_size)
            } else {
                u64::from(self.virtual_size)
            },
            nobits: self.raw_size == 0,
        }
    }
}

/// Headers of a PE image needed to rewrite it (absent for objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageHeaders {
    /// Offset of `PE\0\0`.
    pub nt_offset: u64,
    /// Offset of the optional header.
    pub optional_offset: u64,
    pub image_base: u64,
    pub section_alignment: u32,
    pub file_alignment: u32,
    pub size_of_headers: u32,
    pub size_of_image: u32,
    pub check_sum: u32,
    pub characteristics: u16,
    /// Data directories `(VirtualAddress, Size)` in order.
    pub data_directories: Vec<(u32, u32)>,
    /// File offset of the first data directory entry.
    pub data_directories_offset: u64,
}

/// How a wrapper's pointer gets its run-time value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PePointer {
    /// An `IMAGE_REL_BASED_DIR64` base relocation: the image base delta is
    /// added to the absolute address in place when the loader rebases.
    BaseRelocDir64,
    /// The image has no base relocations (`IMAGE_FILE_RELOCS_STRIPPED`):
    /// it only loads at its preferred base, the value in place is final.
    Fixed,
    /// The image has base relocations but none for this pointer: it would
    /// be wrong after a rebase.
    Unrelocated,
    /// COFF object: a relocation of `reloc_type` against `symbol`.
    Object {
        reloc_type: u16,
        symbol_index: u32,
        symbol: String,
    },
}

impl PePointer {
    /// Text form for `kpack inspect` (`basereloc:DIR64`, `object:ADDR64:sym`, …).
    pub fn describe(&self) -> String {
        match self {
            PePointer::BaseRelocDir64 => "basereloc:DIR64".into(),
            PePointer::Fixed => "none (relocations stripped)".into(),
            PePointer::Unrelocated => "none (no base relocation)".into(),
            PePointer::Object {
                reloc_type, symbol, ..
            } => {
                let t = match reloc_type {
                    1 => "IMAGE_REL_AMD64_ADDR64".to_string(),
                    t => format!("type {t}"),
                };
                format!("object:{t}:{symbol}")
            }
        }
    }
}

/// One `__CudaFatBinaryWrapper` of a PE/COFF file.
pub type PeWrapper = crate::model::Wrapper<PePointer>;

impl PeWrapper {
    /// Marker payload this wrapper points at.
    pub fn marker_bytes<'a>(&self, info: &'a PeInfo) -> Option<&'a [u8]> {
        let m = info.marker.as_ref()?;
        if !self.points_to_marker {
            return None;
        }
        let off = self.target.checked_sub(m.section.addr)?;
        m.bytes.get(usize::try_from(off).ok()?..)
    }
}

/// Everything [`analyze`] finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeInfo {
    pub kind: PeKind,
    /// COFF machine (`0x8664` x86-64).
    pub machine: u16,
    /// Image headers (`None` for objects).
    pub headers: Option<ImageHeaders>,
    pub sections: Vec<PeSection>,
    pub state: State,
    /// Bundle section (its name is `sections[fatbin.index].name`).
    pub fatbin: Option<SectionRange>,
    pub wrapper_section: Option<SectionRange>,
    pub bundles: Vec<BundleInfo>,
    pub wrappers: Vec<PeWrapper>,
    pub marker: Option<MarkerInfo>,
    /// File offset of the COFF symbol table (0: none).
    pub symbol_table: u32,
    /// End of the last section's raw data (images: where data after the
    /// last section, if any, starts).
    pub sections_end: u64,
    /// Bytes after the last section's raw data (COFF symbol table, debug
    /// data, certificate table, installer payloads).
    pub trailing: u64,
    /// Authenticode certificate table (security directory) present.
    pub signed: bool,
}

impl PeInfo {
    /// Whether splitting would remove device code.
    pub fn has_device_code(&self) -> bool {
        self.state == State::Fat && !self.bundles.is_empty()
    }

    /// Name of a section by index.
    pub fn section_name(&self, index: usize) -> &str {
        self.sections.get(index).map_or("", |s| s.name.as_str())
    }

    /// `DLL`, `EXE` or `OBJ`.
    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }
}

/// `[off, off + len)` of `data` (a slice, or a `SparseView` of the loaded
/// parts of a file).
pub(crate) fn get<'a, R: ReadRef<'a>>(data: R, off: u64, len: u64, what: &str) -> Result<&'a [u8]> {
    within(data, off, len, what)?;
    data.read_bytes_at(off, len).map_err(|()| {
        Error::pe_malformed(
            off,
            format!("{what}: {len} bytes at {off:#x} were not loaded from the file"),
        )
    })
}

/// Errors like [`get`] when `[off, off + len)` is outside `data`, without
/// reading it (bytes found through positioned reads).
fn within<'a, R: ReadRef<'a>>(data: R, off: u64, len: u64, what: &str) -> Result<()> {
    let size = data.len().unwrap_or(0);
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::pe_malformed(
            off,
            format!("{what}: {len} bytes at {off:#x} are outside the file ({size} bytes)"),
        )),
    }
}

pub(crate) fn u32_at(data: &[u8], off: u64, what: &str) -> Result<u32> {
    let b = get(data, off, 4, what)?;
    Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
}

fn obj_err(offset: u64) -> impl Fn(object::Error) -> Error {
    move |e| Error::pe_malformed(offset, e.to_string())
}

/// Decode the section table; long names need the string table.
pub(super) fn decode_sections<'d, R: ReadRef<'d>>(
    table: &object::read::coff::SectionTable<'d>,
    table_offset: u64,
    strings: Option<object::read::StringTable<'d, R>>,
) -> Result<Vec<PeSection>> {
    let mut out = Vec::with_capacity(table.len());
    for (i, s) in table.iter().enumerate() {
        let header_offset = table_offset + 40 * i as u64;
        let name = match (s.name_offset(), strings) {
            (Ok(None), _) => s.raw_name().to_vec(),
            (Ok(Some(_)), Some(st)) => s
                .name(st)
                .map_err(|e| Error::pe_malformed(header_offset, format!("section name: {e}")))?
                .to_vec(),
            (Ok(Some(_)), None) | (Err(_), _) => s.raw_name().to_vec(),
        };
        out.push(PeSection {
            index: i,
            name: String::from_utf8_lossy(&name).into_owned(),
            header_offset,
            virtual_address: s.virtual_address.get(LE),
            virtual_size: s.virtual_size.get(LE),
            raw_offset: s.pointer_to_raw_data.get(LE),
            raw_size: s.size_of_raw_data.get(LE),
            characteristics: s.characteristics.get(LE),
        });
    }
    Ok(out)
}

/// Analyse a PE32+ image or a COFF object (regular or `/bigobj`).
pub fn analyze(data: &[u8]) -> Result<PeInfo> {
    analyze_in(data, &data)
}

/// [`analyze`], finding the bundles of the bundle section through `src`, a
/// source of the same bytes as `data` (for a mapped file: positioned reads
/// of the file, so device code is never faulted into the mapping).
pub fn analyze_in(data: &[u8], src: &dyn rocpack_bundle::ReadAt) -> Result<PeInfo> {
    analyze_as(data, src, crate::detect::detect(data))
}

/// [`analyze_in`] of a file of type `kind` ([`crate::detect`] of its
/// head), read through `data`: a slice of the whole file, or a
/// [`crate::SparseView`] of the parts `pe::sparse::load` loaded.
pub(crate) fn analyze_as<'d, R: ReadRef<'d>>(
    data: R,
    src: &dyn rocpack_bundle::ReadAt,
    kind: crate::FileType,
) -> Result<PeInfo> {
    match kind {
        crate::FileType::Pe { pe32_plus: true } => analyze_image(data, src),
        crate::FileType::Pe { pe32_plus: false } => Err(Error::pe_unsupported(
            0,
            "PE32 (32-bit) image: HIP device code is only handled in PE32+ images",
        )),
        crate::FileType::Coff { bigobj: false } => {
            analyze_object::<pe::ImageFileHeader, R>(data, src)
        }
        crate::FileType::Coff { bigobj: true } => {
            analyze_object::<pe::AnonObjectHeaderBigobj, R>(data, src)
        }
        _ => Err(Error::NotAnImage("no PE or COFF header")),
    }
}

fn analyze_image<'d, R: ReadRef<'d>>(data: R, src: &dyn rocpack_bundle::ReadAt) -> Result<PeInfo> {
    let dos = pe::ImageDosHeader::parse(data).map_err(obj_err(0))?;
    let nt_offset = u64::from(dos.nt_headers_offset());
    let mut off = nt_offset;
    let (nt, dirs) = pe::ImageNtHeaders64::parse(data, &mut off).map_err(obj_err(nt_offset))?;
    let fh = nt.file_header();
    let oh = nt.optional_header();
    let optional_offset = nt_offset + 24;
    let table_offset = off;
    let table = nt.sections(data, off).map_err(obj_err(off))?;
    // The string table is only needed for long section names; a stripped
    // image may carry a stale pointer.
    let strings = nt
        .symbols(data)
        .ok()
        .map(|s: SymbolTable<'_, R>| s.strings());
    let sections = decode_sections(&table, table_offset, strings)?;
    if sections.is_empty() {
        // The loader then maps the file as it is (with a small
        // SectionAlignment): device code anywhere in it would be loaded,
        // and there is no bundle section to find it by.
        return Err(Error::pe_unsupported(
            nt_offset + 6,
            "PE image without sections (NumberOfSections 0): its content cannot be told apart",
        ));
    }
    let characteristics = fh.characteristics.get(LE);
    let data_directories: Vec<(u32, u32)> = dirs
        .iter()
        .map(|d| (d.virtual_address.get(LE), d.size.get(LE)))
        .collect();
    let headers = ImageHeaders {
        nt_offset,
        optional_offset,
        image_base: oh.image_base(),
        section_alignment: oh.section_alignment(),
        file_alignment: oh.file_alignment(),
        size_of_headers: oh.size_of_headers(),
        size_of_image: oh.size_of_image(),
        check_sum: oh.check_sum(),
        characteristics,
        // PE32+: 112 bytes of fixed fields, then the directories (the
        // optional header may be longer than they are).
        data_directories_offset: optional_offset + 112,
        data_directories,
    };
    let kind = if characteristics & pe::IMAGE_FILE_DLL != 0 {
        PeKind::Dll
    } else {
        PeKind::Exe
    };
    for s in &sections {
        if s.raw_size > 0 {
            within(
                data,
                u64::from(s.raw_offset),
                u64::from(s.raw_size),
                &format!("raw data of section {}", s.name),
            )?;
        }
    }
    let sections_end = sections
        .iter()
        .filter(|s| s.raw_size > 0)
        .map(|s| u64::from(s.raw_offset) + u64::from(s.raw_size))
        .max()
        .unwrap_or(u64::from(headers.size_of_headers))
        .max(u64::from(headers.size_of_headers))
        .min(data.len().unwrap_or(0));
    let signed = headers
        .data_directories
        .get(pe::IMAGE_DIRECTORY_ENTRY_SECURITY)
        .is_some_and(|&(a, n)| a != 0 && n != 0);

    // Base relocations: RVA -> type.
    let mut relocs: BTreeMap<u32, u16> = BTreeMap::new();
    let mut has_relocs = false;
    if let Ok(Some(mut blocks)) = dirs.relocation_blocks(data, &table) {
        has_relocs = true;
        loop {
            match blocks.next() {
                Ok(Some(block)) => {
                    for r in block {
                        relocs.insert(r.virtual_address, r.typ);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    return Err(Error::pe_malformed(
                        nt_offset,
                        format!("base relocations: {e}"),
                    ))
                }
            }
        }
    }
    let mut info = PeInfo {
        kind,
        machine: fh.machine.get(LE),
        sections,
        state: State::HostOnly,
        fatbin: None,
        wrapper_section: None,
        bundles: Vec::new(),
        wrappers: Vec::new(),
        marker: None,
        symbol_table: fh.pointer_to_symbol_table.get(LE),
        trailing: data.len().unwrap_or(0) - sections_end,
        sections_end,
        signed,
        headers: Some(headers),
    };
    find_sections(data, src, &mut info, false)?;
    let image_base = info.headers.as_ref().map_or(0, |h| h.image_base);
    let relocs_stripped = characteristics & pe::IMAGE_FILE_RELOCS_STRIPPED != 0 || !has_relocs;
    read_wrappers(
        data,
        &mut info,
        false,
        &mut |field_rva, value, index, off| {
            let target = value.checked_sub(image_base).ok_or_else(|| {
                Error::wrapper(
                    index,
                    off,
                    format!("pointer {value:#x} is below the image base {image_base:#x}"),
                )
            })?;
            let pointer = match relocs.get(&(field_rva as u32)) {
                Some(&t) if t == pe::IMAGE_REL_BASED_DIR64 => PePointer::BaseRelocDir64,
                Some(&t) => {
                    return Err(Error::wrapper(
                        index,
                        off,
                        format!("base relocation of type {t} on the pointer (not DIR64)"),
                    ))
                }
                None if relocs_stripped => PePointer::Fixed,
                None => PePointer::Unrelocated,
            };
            Ok((pointer, target, None))
        },
    )?;
    // A base relocation inside the bundle section would patch device bytes.
    if let Some(fb) = info.fatbin {
        let (a, n) = (fb.addr as u32, fb.size as u32);
        if let Some((rva, _)) = relocs.range(a..a.saturating_add(n)).next() {
            return Err(Error::pe_unsupported(
                fb.file_offset,
                format!("a base relocation at RVA {rva:#x} lies inside the bundle section"),
            ));
        }
    }
    finish_state(&mut info)?;
    Ok(info)
}

fn analyze_object<'d, C: CoffHeader, R: ReadRef<'d>>(
    data: R,
    src: &dyn rocpack_bundle::ReadAt,
) -> Result<PeInfo> {
    let mut off = 0u64;
    let header = C::parse(data, &mut off).map_err(obj_err(0))?;
    let table_offset = off;
    let table = header.sections(data, off).map_err(obj_err(off))?;
    let symbols: SymbolTable<'_, R, C> = header
        .symbols(data)
        .map_err(obj_err(u64::from(header.pointer_to_symbol_table())))?;
    let sections = decode_sections(&table, table_offset, Some(symbols.strings()))?;
    let mut info = PeInfo {
        kind: PeKind::Object,
        machine: header.machine(),
        headers: None,
        sections,
        state: State::HostOnly,
        fatbin: None,
        wrapper_section: None,
        bundles: Vec::new(),
        wrappers: Vec::new(),
        marker: None,
        symbol_table: header.pointer_to_symbol_table(),
        sections_end: 0,
        trailing: 0,
        signed: false,
    };
    find_sections(data, src, &mut info, true)?;
    let relocs: Vec<pe::ImageRelocation> = match info.wrapper_section {
        Some(ws) => table
            .section(object::SectionIndex(ws.index + 1))
            .and_then(|s| s.coff_relocations(data))
            .map_err(obj_err(ws.file_offset))?
            .to_vec(),
        None => Vec::new(),
    };
    let names: Vec<String> = info.sections.iter().map(|s| s.name.clone()).collect();
    let fat_index = info.fatbin.map(|f| f.index);
    let marker_index = info.marker.as_ref().map(|m| m.section.index);
    read_wrappers(data, &mut info, true, &mut |field, value, index, off| {
        let r = relocs
            .iter()
            .find(|r| u64::from(r.virtual_address.get(LE)) == field)
            .ok_or_else(|| {
                Error::wrapper(index, off, "no relocation for the pointer in the object")
            })?;
        let sym_index = r.symbol_table_index.get(LE);
        let sym = symbols
            .symbol(object::SymbolIndex(sym_index as usize))
            .map_err(|e| {
                Error::wrapper(index, off, format!("relocation symbol {sym_index}: {e}"))
            })?;
        let name = sym
            .name(symbols.strings())
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let sec = sym.section_number();
        let reloc_type = r.typ.get(LE);
        if reloc_type != pe::IMAGE_REL_AMD64_ADDR64 && reloc_type != pe::IMAGE_REL_ARM64_ADDR64 {
            return Err(Error::wrapper(
                index,
                off,
                format!("relocation type {reloc_type} on the pointer (not ADDR64)"),
            ));
        }
        let sec_idx = usize::try_from(sec - 1).ok();
        if sec_idx != fat_index && sec_idx != marker_index {
            return Err(Error::wrapper(
                index,
                off,
                format!(
                    "pointer relocated against `{name}` in section {}, not the bundle section",
                    sec_idx
                        .and_then(|i| names.get(i))
                        .map_or("(none)", |s| s.as_str())
                ),
            ));
        }
        Ok((
            PePointer::Object {
                reloc_type,
                symbol_index: sym_index,
                symbol: name,
            },
            u64::from(sym.value()).wrapping_add(value),
            sec_idx,
        ))
    })?;
    finish_state(&mut info)?;
    Ok(info)
}

/// Locate the bundle, wrapper and marker sections and the bundles.
fn find_sections<'d, R: ReadRef<'d>>(
    data: R,
    src: &dyn rocpack_bundle::ReadAt,
    info: &mut PeInfo,
    object: bool,
) -> Result<()> {
    let find = |names: &[&str]| {
        let hits: Vec<&PeSection> = info
            .sections
            .iter()
            .filter(|s| names.contains(&s.name.as_str()))
            .collect();
        match hits.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some((*one).clone())),
            [_, two, ..] => Err(Error::pe_unsupported(
                two.header_offset,
                format!("more than one `{}` section", two.name),
            )),
        }
    };
    let fat = find(&FATBIN_SECTIONS)?;
    let wrap = find(&WRAPPER_SECTIONS)?;
    let mark = find(&[MARKER_SECTION])?;
    if let Some(m) = &mark {
        let bytes = get(
            data,
            u64::from(m.raw_offset),
            u64::from(m.file_len(object)),
            MARKER_SECTION,
        )?
        .to_vec();
        info.marker = Some(MarkerInfo {
            section: m.range(object),
            bytes,
        });
    }
    if let Some(f) = &fat {
        let range = f.range(object);
        info.fatbin = Some(range);
        let len = u64::from(f.file_len(object));
        if len > 0 {
            within(data, u64::from(f.raw_offset), len, &f.name)?;
            let section = rocpack_bundle::Window::new(src, u64::from(f.raw_offset), len);
            let spans = rocpack_bundle::find_bundles_in(&section)
                .map_err(|e| Error::bundle(u64::from(f.raw_offset) + e.offset().unwrap_or(0), e))?;
            for (i, sp) in spans.iter().enumerate() {
                info.bundles.push(BundleInfo {
                    index: i,
                    section_offset: sp.offset,
                    file_offset: u64::from(f.raw_offset) + sp.offset,
                    addr: range.addr + sp.offset,
                    len: sp.len,
                    format: sp.format,
                    wrappers: Vec::new(),
                });
            }
        }
    }
    info.wrapper_section = wrap.as_ref().map(|w| w.range(object));
    Ok(())
}

/// `(pointer model, target, section of the target when known)`.
type Resolved = (PePointer, u64, Option<usize>);
type ResolveFn<'a> = dyn FnMut(u64, u64, usize, u64) -> Result<Resolved> + 'a;

/// Read every wrapper; `resolve(field_rva, value, index, file_offset)`
/// gives its pointer model and target.
fn read_wrappers<'d, R: ReadRef<'d>>(
    data: R,
    info: &mut PeInfo,
    object: bool,
    resolve: &mut ResolveFn<'_>,
) -> Result<()> {
    let Some(ws) = info.wrapper_section else {
        return Ok(());
    };
    let sec = &info.sections[ws.index];
    let len = if object {
        u64::from(sec.raw_size)
    } else {
        u64::from(sec.virtual_size)
    };
    if len % WRAPPER_SIZE != 0 {
        return Err(Error::pe_malformed(
            sec.header_offset,
            format!("{} size {len} is not a multiple of 24", sec.name),
        ));
    }
    if len > u64::from(sec.raw_size) {
        return Err(Error::pe_malformed(
            sec.header_offset,
            format!("{}: wrappers are not all stored in the file", sec.name),
        ));
    }
    let table = get(data, ws.file_offset, len, &sec.name)?;
    for raw in crate::wrapper_table(table, ws.file_offset) {
        let w = raw?;
        let field_rva = ws.addr + (w.file_offset - ws.file_offset) + 8;
        let (pointer, target, target_section) =
            resolve(field_rva, w.value_in_file, w.index, w.file_offset + 8)?;
        let target_section = target_section.or_else(|| {
            info.sections.iter().position(|s| {
                let (a, n) = (
                    u64::from(s.virtual_address),
                    u64::from(s.virtual_size.max(s.raw_size)),
                );
                !object && target >= a && target < a + n
            })
        });
        let in_marker = target_section.is_some()
            && target_section == info.marker.as_ref().map(|m| m.section.index);
        let in_fatbin = target_section.is_some() && target_section == info.fatbin.map(|f| f.index);
        let hipf = w.magic == HIPF_MAGIC;
        let bundle = info
            .bundles
            .iter()
            .position(|b| b.addr == target)
            .filter(|_| hipf && in_fatbin);
        if hipf && bundle.is_none() {
            return Err(Error::wrapper(
                w.index,
                w.file_offset + 8,
                format!(
                    "pointer target {target:#x} is not the start of a bundle in the bundle section"
                ),
            ));
        }
        if let Some(b) = bundle {
            info.bundles[b].wrappers.push(w.index);
        }
        info.wrappers.push(PeWrapper {
            index: w.index,
            file_offset: w.file_offset,
            magic: w.magic,
            version: w.version,
            reserved1: w.reserved1,
            field: field_rva,
            value_in_file: w.value_in_file,
            pointer,
            target,
            bundle,
            points_to_marker: w.magic == HIPK_MAGIC && in_marker,
        });
    }
    Ok(())
}

fn finish_state(info: &mut PeInfo) -> Result<()> {
    let hipk = info
        .wrappers
        .iter()
        .filter(|w| w.magic == HIPK_MAGIC)
        .count();
    info.state = if hipk > 0 {
        if hipk != info.wrappers.len() {
            let w = info
                .wrappers
                .iter()
                .find(|w| w.magic == HIPF_MAGIC)
                .expect("a HIPF wrapper");
            return Err(Error::wrapper(
                w.index,
                w.file_offset,
                "HIPF wrapper in an image whose other wrappers are HIPK",
            ));
        }
        State::Split
    } else if !info.wrappers.is_empty() || !info.bundles.is_empty() {
        State::Fat
    } else {
        State::HostOnly
    };
    Ok(())
}

/// Raw bytes of bundle `index`.
pub fn bundle_bytes<'a>(data: &'a [u8], info: &PeInfo, index: usize) -> Result<&'a [u8]> {
    let b = info
        .bundles
        .get(index)
        .ok_or_else(|| Error::pe_malformed(0, format!("no bundle {index}")))?;
    get(data, b.file_offset, b.len, "bundle")
}
