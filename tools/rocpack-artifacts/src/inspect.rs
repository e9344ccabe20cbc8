//! What a file is and what it holds: the analysis behind `kpack inspect`
//! and `kpack unbundle`. Fat binaries (ELF files, objects, executables),
//! static archives, raw bundles, CCOBs and `.kpack` archives are described
//! by one model ([`Desc`], serialised as JSON in field order; schema in
//! `docs/cli/inspect-json.md`).
//!
//! Memory stays flat whatever the input: the file is mapped but only
//! headers are read through the mapping; code objects stored uncompressed
//! are hashed and copied with positioned reads; a CCOB is decompressed once
//! per pass, streaming, its code objects hashed or written as the payload
//! goes by ([`rocpack_bundle::walk_bundle`]); `.kpack` kernels are decoded
//! through a fixed buffer. Peak memory is a few chunks per worker, not the
//! payload, the number of code objects or how entries overlap.
//!
//! Offsets in a description are relative to the bytes it describes (an
//! archive member's bundles are relative to the member; the member's
//! `file_offset` locates it in the archive).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use rocpack_bundle::{Format, ParseOptions, BUNDLE_MAGIC};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// An inspection failure, said once (the OS error is part of the text).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InspectError(pub String);

impl From<rocpack_bundle::Error> for InspectError {
    fn from(e: rocpack_bundle::Error) -> Self {
        InspectError(e.to_string())
    }
}

impl From<rocpack_kpack::Error> for InspectError {
    fn from(e: rocpack_kpack::Error) -> Self {
        InspectError(e.to_string())
    }
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, InspectError>;

fn fail(msg: impl Into<String>) -> InspectError {
    InspectError(msg.into())
}

// ---------------------------------------------------------------------------
// Input: memory-mapped file plus a handle for positioned reads.

/// The inspected file: mapped for parsing (only headers are touched), read
/// with positioned reads for hashing and copying so resident memory stays
/// small.
pub struct Input {
    file: File,
    map: Option<Arc<memmap2::Mmap>>,
    /// Whether walks compute each CCOB payload's MD5 (`hash_matches`).
    ccob_hash: bool,
}

impl Input {
    /// Do not compute the MD5 of compressed bundles' payloads: their
    /// `hash_matches` stays `None`. The MD5 is one sequential pass over
    /// the whole payload, the slowest part of reading a large CCOB.
    pub fn without_ccob_hash(mut self) -> Self {
        self.ccob_hash = false;
        self
    }

    /// Open `path` (a regular file; a FIFO, directory or device is refused
    /// at once with what it is).
    pub fn open(path: &Path) -> Result<Self> {
        let (file, meta) = rocpack_bundle::fsutil::open_regular(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidInput {
                fail(format!("{}: {e}", path.display()))
            } else {
                fail(format!("{}: cannot open: {e}", path.display()))
            }
        })?;
        let map = if meta.len() == 0 {
            None
        } else {
            #[allow(unsafe_code)]
            // SAFETY: read-only private mapping of an input file; we never
            // write through it. Another process truncating the file while we
            // run could fault the mapping — the usual contract of mmap-based
            // readers; inputs are build artifacts that are not modified in place.
            let m = unsafe { memmap2::Mmap::map(&file) }
                .map_err(|e| fail(format!("{}: cannot map: {e}", path.display())))?;
            // Only ELF headers are read through the mapping (bundle headers
            // and code objects with positioned reads), so resident memory
            // stays small on huge inputs; no read-ahead for what is read.
            let _ = m.advise(memmap2::Advice::Random);
            Some(Arc::new(m))
        };
        Ok(Input {
            file,
            map,
            ccob_hash: true,
        })
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().map_or(&[], |m| &m[..])
    }

    /// Offset of `sub` in the mapped file, if it is a slice of it.
    fn offset_of(&self, sub: &[u8]) -> Option<u64> {
        let base = self.bytes().as_ptr() as usize;
        let p = sub.as_ptr() as usize;
        let off = p.checked_sub(base)?;
        (off.checked_add(sub.len())? <= self.bytes().len()).then_some(off as u64)
    }

    /// A source of the same bytes as `part` (a slice of the mapped file):
    /// positioned reads of the file, so parsing headers through it never
    /// faults the mapping in (a fault maps a whole page-cache folio, up to
    /// 2 MiB, and a 1 GB library has hundreds of bundle headers).
    fn source<'a>(&'a self, part: &'a [u8]) -> PartSource<'a> {
        match self.offset_of(part) {
            Some(off) => PartSource::File(rocpack_bundle::FileRange::new(
                &self.file,
                off,
                part.len() as u64,
            )),
            None => PartSource::Slice(part),
        }
    }

    /// Bytes `[offset, offset + len)` of the file.
    fn range(&self, offset: u64, len: u64) -> Result<&[u8]> {
        usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(a, n)| self.bytes().get(a..a.checked_add(n)?))
            .ok_or_else(|| fail(format!("range {offset}+{len} is outside the input")))
    }

    /// Hand bytes `[offset, offset + len)` to `sink` in chunks read with
    /// positioned reads (the mapping's pages never become resident).
    fn read_chunks(
        &self,
        offset: u64,
        len: u64,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut buf = vec![0u8; CHUNK.min(len as usize)];
        let mut done = 0u64;
        while done < len {
            let n = buf.len().min((len - done) as usize);
            self.file
                .read_exact_at(&mut buf[..n], offset + done)
                .map_err(|e| fail(format!("reading the input: {e}")))?;
            sink(&buf[..n])?;
            done += n as u64;
        }
        Ok(())
    }
}

/// What [`Input::source`] gives: the file, or a slice that is not of it.
enum PartSource<'a> {
    File(rocpack_bundle::FileRange<'a>),
    Slice(&'a [u8]),
}

impl rocpack_bundle::ReadAt for PartSource<'_> {
    fn size(&self) -> u64 {
        match self {
            PartSource::File(f) => f.size(),
            PartSource::Slice(s) => s.size(),
        }
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            PartSource::File(f) => f.read_at(offset, buf),
            PartSource::Slice(s) => s.read_at(offset, buf),
        }
    }
    fn as_slice(&self) -> Option<&[u8]> {
        match self {
            PartSource::File(_) => None,
            PartSource::Slice(s) => Some(s),
        }
    }
}

const CHUNK: usize = 1 << 20;

// ---------------------------------------------------------------------------
// Description model (serialised as JSON in field order).

/// One described file, archive member or nested input.
#[derive(Debug, Serialize)]
pub struct Desc {
    /// Path as given, or `archive(member)`.
    pub file: String,
    /// Offset of these bytes in the inspected file (non-zero for members).
    pub file_offset: u64,
    pub size: u64,
    /// `elf`, `pe`, `coff`, `archive`, `bundle`, `ccob`, `kpack`,
    /// `amdgpu-code-object`, `unknown` (what `rocpack_image::detect` says).
    pub kind: &'static str,
    pub elf: Option<ElfDesc>,
    /// PE32+ images and COFF objects (absent from other kinds' JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pe: Option<PeDesc>,
    pub bundles: Vec<BundleDesc>,
    pub wrappers: Vec<WrapperDesc>,
    pub marker: Option<MarkerDesc>,
    pub kpack: Option<KpackDesc>,
    pub members: Vec<Desc>,
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct ElfDesc {
    /// `EXEC`, `DYN` or `REL`.
    pub elf_type: &'static str,
    pub machine: u16,
    /// `fat`, `host-only` or `split`.
    pub state: &'static str,
    pub hip_fatbin: Option<SectionDesc>,
    pub hip_fat_bin_segment: Option<SectionDesc>,
    /// `__CLANG_OFFLOAD_BUNDLE__*` sections (`-fgpu-rdc` objects).
    pub offload_bundle_sections: Vec<String>,
}

/// The PE/COFF counterpart of [`ElfDesc`].
#[derive(Debug, Serialize)]
pub struct PeDesc {
    /// `DLL`, `EXE` or `OBJ`.
    pub pe_type: &'static str,
    /// COFF machine (34404 = x86-64).
    pub machine: u16,
    /// `fat`, `host-only` or `split`.
    pub state: &'static str,
    /// Preferred image base (0 for objects).
    pub image_base: u64,
    /// Name of the bundle section (`.hip_fat` or `.hip_fatbin`).
    pub fatbin_section: Option<String>,
    /// `file_offset` = PointerToRawData, `addr` = RVA, `size` = VirtualSize
    /// (SizeOfRawData in objects), `nobits` = no data in the file.
    pub hip_fatbin: Option<SectionDesc>,
    /// Name of the wrapper section (`.hipFatB` or `.hipFatBinSegment`).
    pub wrapper_section: Option<String>,
    pub hip_fat_bin_segment: Option<SectionDesc>,
    /// An Authenticode certificate table is present.
    pub signed: bool,
    /// Bytes after the last section's data (COFF symbol table, overlay).
    pub trailing_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct SectionDesc {
    pub file_offset: u64,
    pub addr: u64,
    pub size: u64,
    pub nobits: bool,
}

#[derive(Debug, Serialize)]
pub struct BundleDesc {
    pub index: usize,
    /// `.hip_fatbin`, `file`, or `section:<name>` (RDC objects).
    pub source: String,
    /// Offset of the bundle in the described bytes (`null` for `elf-sections`).
    pub file_offset: Option<u64>,
    pub size: Option<u64>,
    /// `uncompressed`, `ccob` or `elf-sections`.
    pub format: &'static str,
    /// CCOB header version.
    pub version: Option<u16>,
    /// `zlib` or `zstd` for CCOB.
    pub compression: Option<&'static str>,
    pub uncompressed_size: Option<u64>,
    /// Stored truncated MD5 (16 hex digits) for CCOB.
    pub hash: Option<String>,
    pub hash_matches: Option<bool>,
    /// Indices of the wrappers pointing at this bundle.
    pub wrappers: Vec<usize>,
    pub code_objects: Vec<CodeObjectDesc>,
    /// Where the bundle's bytes are in the input file.
    #[serde(skip)]
    pub(crate) at: Option<(u64, u64)>,
    /// Overlapping entries `(a, b)` (never in a bundle clang writes).
    #[serde(skip)]
    pub overlaps: Vec<(usize, usize)>,
}

#[derive(Debug, Serialize)]
pub struct CodeObjectDesc {
    pub index: usize,
    /// Bundle entry ID, verbatim.
    pub target: String,
    /// Processor and features (`gfx90a:xnack+`); empty for host entries.
    pub target_id: String,
    pub is_host: bool,
    /// Offset within the (decompressed) bundle.
    pub offset: u64,
    /// Offset in the described bytes, when stored uncompressed.
    pub file_offset: Option<u64>,
    pub size: u64,
    pub sha256: String,
    /// Offset in the inspected file, when stored uncompressed there.
    #[serde(skip)]
    pub(crate) stored_at: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct WrapperDesc {
    pub index: usize,
    pub file_offset: u64,
    /// `HIPF` or `HIPK`.
    pub magic: &'static str,
    pub version: u32,
    /// How the bundle pointer is relocated (`none`, `rela:R_X86_64_RELATIVE`, …).
    pub pointer: String,
    /// Link-time pointer value (hex).
    pub target: String,
    pub bundle: Option<usize>,
    pub points_to_marker: bool,
    /// `co_index` of a HIPK wrapper.
    pub co_index: Option<u32>,
}

#[derive(Debug, Serialize)]
pub struct MarkerDesc {
    pub file_offset: u64,
    pub size: u64,
    pub kpack_search_paths: Vec<String>,
    pub kernel_name: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct KpackDesc {
    pub format_version: u64,
    pub group_name: String,
    pub gfx_arch_family: String,
    pub gfx_arches: Vec<String>,
    pub compression_scheme: String,
    pub toc_offset: u64,
    pub kernels: Vec<KernelDesc>,
    /// Where the archive's bytes are in the input file.
    #[serde(skip)]
    pub(crate) at: (u64, u64),
}

#[derive(Debug, Serialize)]
pub struct KernelDesc {
    pub key: String,
    pub target: String,
    pub ordinal: u32,
    pub original_size: u64,
    pub stored_offset: Option<u64>,
    pub stored_size: Option<u64>,
    pub sha256: String,
}

impl Desc {
    fn new(file: String, file_offset: u64, size: u64, kind: &'static str) -> Self {
        Desc {
            file,
            file_offset,
            size,
            kind,
            elf: None,
            pe: None,
            bundles: Vec::new(),
            wrappers: Vec::new(),
            marker: None,
            kpack: None,
            members: Vec::new(),
            notes: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// Analysis.

const MAX_DEPTH: usize = 4;

/// Describe the whole input and hash every code object: the structure
/// first (headers only), then one streaming pass per stored bundle.
pub fn inspect(input: &Input, name: &str) -> Result<Desc> {
    let mut d = describe(input, name)?;
    hash_all(input, &mut d)?;
    Ok(d)
}

/// Describe the structure of the input (no code object is read; `sha256`
/// fields are empty until [`hash_all`]).
pub fn describe(input: &Input, name: &str) -> Result<Desc> {
    describe_bytes(input, input.bytes(), name, 0, 0)
}

fn describe_bytes(
    input: &Input,
    data: &[u8],
    name: &str,
    file_offset: u64,
    depth: usize,
) -> Result<Desc> {
    let size = data.len() as u64;
    let head = &data[..data.len().min(rocpack_image::HEAD_LEN)];
    match rocpack_image::detect(head) {
        rocpack_image::FileType::AmdgpuCodeObject => {
            let mut d = Desc::new(name.to_string(), file_offset, size, "amdgpu-code-object");
            let flags = data
                .get(48..52)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or(0);
            d.notes.push(format!(
                "raw AMDGPU code object (e_machine EM_AMDGPU, e_flags {flags:#x}), not an offload bundle"
            ));
            Ok(d)
        }
        rocpack_image::FileType::Elf { .. } => describe_elf(input, data, name, file_offset)
            .map_err(|e| fail(format!("{name}: ELF: {e}"))),
        rocpack_image::FileType::Pe { pe32_plus: false } => {
            let mut d = Desc::new(name.to_string(), file_offset, size, "pe");
            d.notes
                .push("PE32 (32-bit) image: HIP device code is only read from PE32+ images".into());
            note_stray_magic(&mut d, data);
            Ok(d)
        }
        t @ (rocpack_image::FileType::Pe { .. } | rocpack_image::FileType::Coff { .. }) => {
            describe_pe(input, data, name, file_offset)
                .map_err(|e| fail(format!("{name}: {}: {e}", t.name().to_uppercase())))
        }
        rocpack_image::FileType::Archive => {
            let mut d = Desc::new(name.to_string(), file_offset, size, "archive");
            if depth >= MAX_DEPTH {
                d.notes.push("nested archive not descended into".into());
                return Ok(d);
            }
            let members = rocpack_elf::archive_members(data)
                .map_err(|e| fail(format!("{name}: archive: {e}")))?;
            for m in members {
                let off = input
                    .offset_of(m.data)
                    .unwrap_or(file_offset + m.header_offset + 60);
                let member_name = format!("{name}({})", m.name);
                d.members
                    .push(describe_bytes(input, m.data, &member_name, off, depth + 1)?);
            }
            Ok(d)
        }
        t @ (rocpack_image::FileType::Bundle | rocpack_image::FileType::Ccob) => {
            let kind = t.name();
            let mut d = Desc::new(name.to_string(), file_offset, size, kind);
            d.bundles = describe_section(input, data, "file", 0)
                .map_err(|e| fail(format!("{name}: {kind} file: {e}")))?;
            note_overlaps(&mut d);
            Ok(d)
        }
        rocpack_image::FileType::Kpack => {
            let mut d = Desc::new(name.to_string(), file_offset, size, "kpack");
            d.kpack = Some(
                describe_kpack(input, data).map_err(|e| fail(format!("{name}: .kpack: {e}")))?,
            );
            Ok(d)
        }
        rocpack_image::FileType::Unknown => {
            let mut d = Desc::new(name.to_string(), file_offset, size, "unknown");
            d.notes.push(
                "not an ELF file, PE image, COFF object, archive, offload bundle, CCOB or .kpack"
                    .into(),
            );
            note_stray_magic(&mut d, data);
            Ok(d)
        }
    }
}

/// Note occurrences of the bundle magic outside any bundle section (a
/// string constant in a bundle-parsing library is not a fat binary).
fn note_stray_magic(d: &mut Desc, data: &[u8]) {
    let hits: Vec<usize> = memchr::memmem::find_iter(data, BUNDLE_MAGIC)
        .take(5)
        .collect();
    if let Some(first) = hits.first() {
        d.notes.push(format!(
            "contains the string __CLANG_OFFLOAD_BUNDLE__ outside any bundle section ({}{} occurrence(s), first at byte offset {first}); ignored",
            hits.len(),
            if hits.len() == 5 { "+" } else { "" }
        ));
    }
}

/// A note for every bundle whose code objects overlap.
fn note_overlaps(d: &mut Desc) {
    for b in &d.bundles {
        if let Some(&(x, y)) = b.overlaps.first() {
            d.notes.push(format!(
                "bundle {}: code objects of entries {x} and {y} overlap ({} pair(s)); each is hashed, unbundle refuses it",
                b.index,
                b.overlaps.len()
            ));
        }
    }
}

fn describe_section(
    input: &Input,
    bytes: &[u8],
    source: &str,
    base: u64,
) -> Result<Vec<BundleDesc>> {
    let spans = rocpack_bundle::find_bundles_in(&input.source(bytes)).map_err(|e| {
        fail(format!(
            "{source} at byte offset {base}: {}",
            e.shifted(base)
        ))
    })?;
    let mut out = Vec::with_capacity(spans.len());
    for (i, sp) in spans.iter().enumerate() {
        let start = sp.offset as usize;
        let bytes_here = &bytes[start..start + sp.len as usize];
        let abs = base + sp.offset;
        out.push(describe_bundle(input, i, source, bytes_here, abs)?);
    }
    Ok(out)
}

fn describe_bundle(
    input: &Input,
    index: usize,
    source: &str,
    bytes: &[u8],
    abs: u64,
) -> Result<BundleDesc> {
    let b = rocpack_bundle::index_bundle_in(&input.source(bytes), &ParseOptions::default())
        .map_err(|e| {
            fail(format!(
                "bundle {index} at byte offset {abs}: {}",
                e.shifted(abs)
            ))
        })?;
    let (format, version, compression) = match b.format {
        Format::Uncompressed => ("uncompressed", None, None),
        Format::Ccob { version, method } => ("ccob", Some(version), Some(method.name())),
    };
    let compressed = b.ccob.is_some();
    let in_file = input.offset_of(bytes);
    let overlaps = b.overlaps();
    let code_objects = b
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| CodeObjectDesc {
            index: i,
            target: e.id.to_string(),
            target_id: e.id.target_id().to_string(),
            is_host: e.id.is_host(),
            offset: e.offset,
            file_offset: (!compressed).then_some(abs + e.offset),
            size: e.size,
            sha256: String::new(),
            stored_at: if compressed {
                None
            } else {
                in_file.map(|f| f + e.offset)
            },
        })
        .collect();
    Ok(BundleDesc {
        index,
        source: source.to_string(),
        file_offset: Some(abs),
        size: Some(b.len),
        format,
        version,
        compression,
        uncompressed_size: b.ccob.map(|h| h.uncompressed_size),
        hash: b.ccob.map(|h| format!("{:016x}", h.hash)),
        hash_matches: None,
        wrappers: Vec::new(),
        code_objects,
        at: in_file.map(|f| (f, b.len)),
        overlaps,
    })
}

fn elf_type(k: rocpack_elf::ElfKind) -> &'static str {
    match k {
        rocpack_elf::ElfKind::Executable => "EXEC",
        rocpack_elf::ElfKind::Shared => "DYN",
        rocpack_elf::ElfKind::Relocatable => "REL",
    }
}

fn section(s: &rocpack_elf::SectionRange) -> SectionDesc {
    SectionDesc {
        file_offset: s.file_offset,
        addr: s.addr,
        size: s.size,
        nobits: s.nobits,
    }
}

fn pointer_model(m: &rocpack_elf::PointerModel, machine: u16) -> String {
    use rocpack_elf::PointerModel as P;
    let (rel, abs) = if machine == 183 {
        ("R_AARCH64_RELATIVE", "R_AARCH64_ABS64")
    } else {
        ("R_X86_64_RELATIVE", "R_X86_64_64")
    };
    match m {
        P::Absolute => "none".into(),
        P::RelaRelative { .. } => format!("rela:{rel}"),
        P::RelaSymbol { symbol, .. } => format!("rela:{abs}:{symbol}"),
        P::Rel { r_type, .. } => format!("rel:{r_type}"),
        P::Relr { bitmap } => if *bitmap {
            "relr:bitmap"
        } else {
            "relr:address"
        }
        .into(),
        P::Object { symbol, .. } => format!("object:{symbol}"),
    }
}

fn describe_elf(input: &Input, data: &[u8], name: &str, file_offset: u64) -> Result<Desc> {
    let info =
        rocpack_elf::analyze_in(data, &input.source(data)).map_err(|e| fail(e.to_string()))?;
    let mut d = Desc::new(name.to_string(), file_offset, data.len() as u64, "elf");
    d.elf = Some(ElfDesc {
        elf_type: elf_type(info.kind),
        machine: info.machine,
        state: state_name(info.state),
        hip_fatbin: info.fatbin.as_ref().map(section),
        hip_fat_bin_segment: info.wrapper_section.as_ref().map(section),
        offload_bundle_sections: info.offload_bundle_sections.clone(),
    });
    for b in &info.bundles {
        let bytes = rocpack_elf::bundle_bytes(data, &info, b.index)
            .map_err(|e| fail(format!("bundle {}: {e}", b.index)))?;
        let mut bd = describe_bundle(
            input,
            b.index,
            rocpack_elf::FATBIN_SECTION,
            bytes,
            b.file_offset,
        )?;
        bd.wrappers = b.wrappers.clone();
        d.bundles.push(bd);
    }
    note_overlaps(&mut d);
    for w in &info.wrappers {
        d.wrappers.push(WrapperDesc {
            index: w.index,
            file_offset: w.file_offset,
            magic: magic_name(w.magic),
            version: w.version,
            pointer: pointer_model(&w.model, info.machine),
            target: format!("{:#x}", w.target),
            bundle: w.bundle,
            points_to_marker: w.points_to_marker,
            co_index: (w.magic == rocpack_elf::HIPK_MAGIC).then(|| w.co_index()),
        });
    }
    if let Some(m) = &info.marker {
        d.marker = Some(marker_desc(m));
    }
    if let Some(fb) = &info.fatbin {
        if fb.nobits {
            d.notes
                .push(".hip_fatbin is NOBITS: device code was split out of this binary".into());
        }
    }
    // -fgpu-rdc objects: each __CLANG_OFFLOAD_BUNDLE__<id> section is one entry.
    if !info.offload_bundle_sections.is_empty() {
        d.bundles
            .push(describe_rdc_sections(input, data, d.bundles.len())?);
    }
    if info.fatbin.is_none() && info.offload_bundle_sections.is_empty() {
        note_stray_magic(&mut d, data);
    }
    Ok(d)
}

fn state_name(s: rocpack_elf::State) -> &'static str {
    match s {
        rocpack_elf::State::HostOnly => "host-only",
        rocpack_elf::State::Fat => "fat",
        rocpack_elf::State::Split => "split",
    }
}

/// A PE32+ image or COFF object: the same bundles / wrappers / marker model
/// as ELF, with PE/COFF headers in `pe`.
fn describe_pe(input: &Input, data: &[u8], name: &str, file_offset: u64) -> Result<Desc> {
    use rocpack_image::pe;
    let info = pe::analyze_in(data, &input.source(data)).map_err(|e| fail(e.to_string()))?;
    let kind = if info.kind == pe::PeKind::Object {
        "coff"
    } else {
        "pe"
    };
    let mut d = Desc::new(name.to_string(), file_offset, data.len() as u64, kind);
    let fat_name = info.fatbin.map(|f| info.section_name(f.index).to_string());
    d.pe = Some(PeDesc {
        pe_type: info.kind_name(),
        machine: info.machine,
        state: state_name(info.state),
        image_base: info.headers.as_ref().map_or(0, |h| h.image_base),
        fatbin_section: fat_name.clone(),
        hip_fatbin: info.fatbin.as_ref().map(section),
        wrapper_section: info
            .wrapper_section
            .map(|w| info.section_name(w.index).to_string()),
        hip_fat_bin_segment: info.wrapper_section.as_ref().map(section),
        signed: info.signed,
        trailing_bytes: info.trailing,
    });
    let source = fat_name.clone().unwrap_or_default();
    for b in &info.bundles {
        let bytes = pe::bundle_bytes(data, &info, b.index)
            .map_err(|e| fail(format!("bundle {}: {e}", b.index)))?;
        let mut bd = describe_bundle(input, b.index, &source, bytes, b.file_offset)?;
        bd.wrappers = b.wrappers.clone();
        d.bundles.push(bd);
    }
    note_overlaps(&mut d);
    for w in &info.wrappers {
        d.wrappers.push(WrapperDesc {
            index: w.index,
            file_offset: w.file_offset,
            magic: magic_name(w.magic),
            version: w.version,
            pointer: w.pointer.describe(),
            target: format!("{:#x}", w.target),
            bundle: w.bundle,
            points_to_marker: w.points_to_marker,
            co_index: (w.magic == rocpack_elf::HIPK_MAGIC).then(|| w.co_index()),
        });
    }
    if let Some(m) = &info.marker {
        d.marker = Some(marker_desc(m));
    }
    if let Some(f) = info.fatbin.filter(|f| f.nobits) {
        d.notes.push(format!(
            "{} has no data in the file: device code was split out of this image",
            info.section_name(f.index)
        ));
    }
    if info.signed {
        d.notes
            .push("Authenticode certificate table present (signed image)".into());
    }
    if info.fatbin.is_none() {
        note_stray_magic(&mut d, data);
    }
    Ok(d)
}

fn marker_desc(m: &rocpack_elf::MarkerInfo) -> MarkerDesc {
    let (paths, kernel, error) = match rocpack_kpack::Marker::decode(&m.bytes) {
        Ok(mk) => (mk.kpack_search_paths, Some(mk.kernel_name), None),
        Err(e) => (Vec::new(), None, Some(e.to_string())),
    };
    MarkerDesc {
        file_offset: m.section.file_offset,
        size: m.section.size,
        kpack_search_paths: paths,
        kernel_name: kernel,
        error,
    }
}

fn describe_rdc_sections(input: &Input, data: &[u8], index: usize) -> Result<BundleDesc> {
    use object::{Object, ObjectSection};
    let obj = object::File::parse(data).map_err(|e| fail(format!("parsing ELF sections: {e}")))?;
    let mut code_objects = Vec::new();
    for s in obj.sections() {
        let Ok(name) = s.name() else { continue };
        let Some(id) = name.strip_prefix("__CLANG_OFFLOAD_BUNDLE__") else {
            continue;
        };
        let (off, size) = s.file_range().unwrap_or((0, 0));
        let bytes = s
            .data()
            .map_err(|e| fail(format!("section {name}: data out of bounds: {e}")))?;
        let tid = rocpack_bundle::TargetId::parse(id)
            .map_err(|e| fail(format!("section {name} at byte offset {off}: {e}")))?;
        code_objects.push(CodeObjectDesc {
            index: code_objects.len(),
            target: id.to_string(),
            target_id: tid.target_id().to_string(),
            is_host: tid.is_host(),
            offset: 0,
            file_offset: Some(off),
            size,
            sha256: String::new(),
            stored_at: input.offset_of(bytes),
        });
    }
    Ok(BundleDesc {
        index,
        source: "sections:__CLANG_OFFLOAD_BUNDLE__*".into(),
        file_offset: None,
        size: None,
        format: "elf-sections",
        version: None,
        compression: None,
        uncompressed_size: None,
        hash: None,
        hash_matches: None,
        wrappers: Vec::new(),
        code_objects,
        at: None,
        overlaps: Vec::new(),
    })
}

/// The reader of a `.kpack` that is bytes `data` of the input (no copy).
fn kpack_reader(input: &Input, at: (u64, u64)) -> Result<rocpack_kpack::KpackReader> {
    let map = input
        .map
        .clone()
        .ok_or_else(|| fail("empty input is not a .kpack"))?;
    let (a, n) = (at.0 as usize, at.1 as usize);
    Ok(rocpack_kpack::KpackReader::from_shared_map(map, a..a + n)?)
}

fn describe_kpack(input: &Input, data: &[u8]) -> Result<KpackDesc> {
    let at = (
        input
            .offset_of(data)
            .ok_or_else(|| fail("a .kpack outside the input"))?,
        data.len() as u64,
    );
    let r = kpack_reader(input, at)?;
    let kernels = r
        .entries()
        .iter()
        .map(|e| {
            let loc = r.blob_location(e.ordinal);
            KernelDesc {
                key: e.key.clone(),
                target: e.target.clone(),
                ordinal: e.ordinal,
                original_size: e.original_size,
                stored_offset: loc.map(|l| l.offset),
                stored_size: loc.map(|l| l.size),
                sha256: String::new(),
            }
        })
        .collect();
    Ok(KpackDesc {
        format_version: r.format_version(),
        group_name: r.group_name().to_string(),
        gfx_arch_family: r.gfx_arch_family().to_string(),
        gfx_arches: r.gfx_arches().to_vec(),
        compression_scheme: r.scheme().to_string(),
        toc_offset: r.toc_offset(),
        kernels,
        at,
    })
}

// ---------------------------------------------------------------------------
// Streaming over code objects: hashing and export share one pass per
// stored bundle or archive.

/// Receives code objects as they stream by: `begin(i)` before the first
/// chunk of code object `i` (in [`Desc::code_objects`] order), `chunk` its
/// bytes in order, `end(i)` after the last. Methods of one code object are
/// called from one thread; different code objects may stream in parallel.
pub trait CoSink: Sync {
    /// Per-code-object state.
    type State: Send;
    /// Whether a large bundle's code objects are handed to this sink on a
    /// thread of their own while the walk decompresses (worth a copy of
    /// every chunk when the sink writes files; not for a hash, cheaper
    /// than that copy and the thread it would compete with).
    const PIPELINE: bool = true;
    fn begin(&self, i: usize) -> Result<Self::State>;
    fn chunk(&self, state: &mut Self::State, bytes: &[u8]) -> Result<()>;
    fn end(&self, i: usize, state: Self::State) -> Result<()>;
}

/// Where one code object comes from.
enum Src<'d> {
    /// Bytes of the input file.
    File { at: u64, len: u64 },
    /// Entry `entry` of a bundle that must be walked.
    Bundle,
    /// Kernel of a `.kpack` archive of the input.
    Kernel { kpack: &'d KpackDesc, idx: usize },
}

/// A unit of streaming work: a file range, one bundle walk (all its
/// entries), or one kernel.
enum Job<'d> {
    One(usize, Src<'d>),
    Walk {
        bundle: &'d BundleDesc,
        /// Global code-object numbers of the bundle's entries.
        ids: Vec<usize>,
        /// Index into `hash_matches` slots.
        slot: usize,
    },
}

/// Every code object of `d` in order: (global number, source), grouped
/// into jobs.
fn plan_jobs<'d>(d: &'d Desc, jobs: &mut Vec<Job<'d>>, n: &mut usize, walks: &mut usize) {
    for b in &d.bundles {
        let need_walk = b.code_objects.iter().any(|c| c.stored_at.is_none());
        if need_walk && b.at.is_some() {
            let ids: Vec<usize> = (0..b.code_objects.len()).map(|k| *n + k).collect();
            *n += ids.len();
            jobs.push(Job::Walk {
                bundle: b,
                ids,
                slot: *walks,
            });
            *walks += 1;
        } else {
            for c in &b.code_objects {
                let src = match c.stored_at {
                    Some(at) => Src::File { at, len: c.size },
                    None => Src::Bundle,
                };
                jobs.push(Job::One(*n, src));
                *n += 1;
            }
        }
    }
    if let Some(k) = &d.kpack {
        for idx in 0..k.kernels.len() {
            jobs.push(Job::One(*n, Src::Kernel { kpack: k, idx }));
            *n += 1;
        }
    }
    for m in &d.members {
        plan_jobs(m, jobs, n, walks);
    }
}

/// Stream every code object of `d` (bundles' entries, then `.kpack`
/// kernels, then members, depth first) to `sink`, in parallel across
/// bundles and kernels. Returns, per CCOB walked (in order), whether its
/// stored hash matched.
pub fn stream_all<S: CoSink>(input: &Input, d: &Desc, sink: &S) -> Result<Vec<Option<bool>>> {
    let mut jobs = Vec::new();
    let (mut n, mut walks) = (0usize, 0usize);
    plan_jobs(d, &mut jobs, &mut n, &mut walks);
    let results: Vec<(usize, Option<bool>)> = jobs
        .par_iter()
        .map(|job| -> Result<Option<(usize, Option<bool>)>> {
            match job {
                Job::One(i, src) => {
                    let mut st = sink.begin(*i)?;
                    match src {
                        Src::File { at, len } => {
                            input.read_chunks(*at, *len, &mut |c| sink.chunk(&mut st, c))?
                        }
                        Src::Bundle => return Err(fail("internal: bundle entry without a walk")),
                        Src::Kernel { kpack, idx } => {
                            let r = kpack_reader(input, kpack.at)?;
                            let e = &r.entries()[*idx];
                            let loc = r.blob_location(e.ordinal);
                            match (r.scheme(), loc) {
                                // Stored bytes: positioned reads.
                                (rocpack_kpack::Scheme::None, Some(l)) => {
                                    input.read_chunks(kpack.at.0 + l.offset, l.size, &mut |c| {
                                        sink.chunk(&mut st, c)
                                    })?
                                }
                                _ => r.stream_entry(e, &mut |c| sink.chunk(&mut st, c))?,
                            }
                        }
                    }
                    sink.end(*i, st)?;
                    Ok(None)
                }
                Job::Walk { bundle, ids, slot } => {
                    let (at, len) = bundle.at.expect("planned walks have a place");
                    let bytes = input.range(at, len)?;
                    let index = rocpack_bundle::index_bundle_in(
                        &input.source(bytes),
                        &ParseOptions::default(),
                    )?;
                    let mut states: Vec<Option<S::State>> = Vec::with_capacity(ids.len());
                    for &i in ids {
                        states.push(Some(sink.begin(i)?));
                    }
                    let abs = bundle.file_offset.unwrap_or(0);
                    let (summary, states) = walk_into(bytes, &index, states, sink, input.ccob_hash)
                        .map_err(|e| {
                            fail(format!("bundle {} at byte offset {abs}: {e}", bundle.index))
                        })?;
                    for (k, st) in states.into_iter().enumerate() {
                        if let Some(st) = st {
                            sink.end(ids[k], st)?;
                        }
                    }
                    Ok(Some((*slot, summary.hash_matches)))
                }
            }
        })
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut out = vec![None; walks];
    for (slot, m) in results {
        out[slot] = m;
    }
    Ok(out)
}

/// Payloads at least this large are walked with the sink on a second
/// thread (decompression and hashing overlap).
const PIPELINE_MIN: u64 = 8 << 20;

/// One walk of an indexed bundle, feeding `states` through `sink`; a large
/// payload is decompressed on this thread while another runs the sink,
/// with a bounded queue of chunks between them (16 x 256 KiB).
#[allow(clippy::type_complexity)]
fn walk_into<S: CoSink>(
    bytes: &[u8],
    index: &rocpack_bundle::BundleIndex,
    mut states: Vec<Option<S::State>>,
    sink: &S,
    ccob_hash: bool,
) -> Result<(rocpack_bundle::WalkSummary, Vec<Option<S::State>>)> {
    let opts = ParseOptions {
        walk_hash: ccob_hash,
        ..Default::default()
    };
    // A sink that is cheaper than a copy of every chunk runs on this thread
    // unless the second core is free (no MD5 thread).
    let pipeline = S::PIPELINE || !ccob_hash;
    if !pipeline || index.payload_len < PIPELINE_MIN {
        let summary = rocpack_bundle::walk_bundle::<InspectError>(
            bytes,
            index,
            &opts,
            &mut |_| Ok(()),
            &mut |e, _, c| match states[e].as_mut() {
                Some(st) => sink.chunk(st, c),
                None => Ok(()),
            },
        )?;
        return Ok((summary, states));
    }
    std::thread::scope(|sc| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<u8>)>(16);
        let consumer = sc.spawn(move || -> Result<Vec<Option<S::State>>> {
            for (e, buf) in rx {
                if let Some(st) = states[e].as_mut() {
                    sink.chunk(st, &buf)?;
                }
            }
            Ok(states)
        });
        let walked = rocpack_bundle::walk_bundle::<InspectError>(
            bytes,
            index,
            &opts,
            &mut |_| Ok(()),
            &mut |e, _, c| {
                tx.send((e, c.to_vec()))
                    .map_err(|_| fail("the code-object writer stopped"))
            },
        );
        drop(tx);
        let states = consumer
            .join()
            .map_err(|_| fail("internal: code-object writer panicked"))?;
        // The writer's own error explains a walk it stopped.
        let states = states?;
        Ok((walked?, states))
    })
}

/// Hashes each code object.
struct Hasher(std::sync::Mutex<BTreeMap<usize, String>>);

impl CoSink for Hasher {
    type State = Sha256;
    // A CCOB's MD5 already has the second core; SHA-256 (with SHA-NI)
    // runs beside decompression on the first.
    const PIPELINE: bool = false;
    fn begin(&self, _: usize) -> Result<Sha256> {
        Ok(Sha256::new())
    }
    fn chunk(&self, h: &mut Sha256, bytes: &[u8]) -> Result<()> {
        h.update(bytes);
        Ok(())
    }
    fn end(&self, i: usize, h: Sha256) -> Result<()> {
        let hex = hex::encode(h.finalize());
        self.0
            .lock()
            .map_err(|_| fail("internal: hash table poisoned"))?
            .insert(i, hex);
        Ok(())
    }
}

/// Visit every hash slot of `d` in the order of [`stream_all`].
fn for_each_slot(d: &mut Desc, f: &mut dyn FnMut(&mut String)) {
    for b in &mut d.bundles {
        for c in &mut b.code_objects {
            f(&mut c.sha256);
        }
    }
    if let Some(k) = &mut d.kpack {
        for e in &mut k.kernels {
            f(&mut e.sha256);
        }
    }
    for m in &mut d.members {
        for_each_slot(m, f);
    }
}

/// Visit every walked bundle's `hash_matches` in the order of [`stream_all`].
fn for_each_walk(d: &mut Desc, f: &mut dyn FnMut(&mut BundleDesc)) {
    for b in &mut d.bundles {
        if b.at.is_some() && b.code_objects.iter().any(|c| c.stored_at.is_none()) {
            f(b);
        }
    }
    for m in &mut d.members {
        for_each_walk(m, f);
    }
}

/// Fill in every `sha256` field and every CCOB's `hash_matches`.
pub fn hash_all(input: &Input, d: &mut Desc) -> Result<()> {
    let h = Hasher(Default::default());
    let matches = stream_all(input, d, &h)?;
    let mut hashes =
        h.0.into_inner()
            .map_err(|_| fail("internal: hash table poisoned"))?
            .into_values();
    for_each_slot(d, &mut |slot| *slot = hashes.next().unwrap_or_default());
    let mut m = matches.into_iter();
    for_each_walk(d, &mut |b| b.hash_matches = m.next().flatten());
    Ok(())
}

// ---------------------------------------------------------------------------
// Unbundle: one file per code object.

fn sanitize(s: &str) -> String {
    let t: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match t.as_str() {
        "" | "." | ".." => format!("_{t}"),
        _ => t,
    }
}

/// One file `kpack unbundle` writes.
#[derive(Debug, Clone)]
pub struct Extracted {
    /// Path relative to the output directory.
    pub rel: PathBuf,
    pub target: String,
    pub size: u64,
    pub sha256: String,
}

/// A planned file; bundle entries get their extension from their bytes.
struct Planned {
    out: Extracted,
    add_ext: bool,
}

/// Planned output per code object (global number → file), `None` for
/// skipped ones (empty host entries).
fn plan_files(
    d: &Desc,
    dir: &Path,
    out: &mut Vec<Option<Planned>>,
    used: &mut std::collections::BTreeSet<PathBuf>,
) {
    for b in &d.bundles {
        for c in &b.code_objects {
            if c.is_host && c.size == 0 {
                out.push(None);
                continue;
            }
            // The extension comes from the content; the name is fixed
            // when the first chunk is seen.
            let name = format!("b{}-e{}-{}", b.index, c.index, sanitize(&c.target));
            out.push(Some(Planned {
                out: Extracted {
                    rel: dir.join(name),
                    target: c.target.clone(),
                    size: c.size,
                    sha256: c.sha256.clone(),
                },
                add_ext: true,
            }));
        }
    }
    if let Some(k) = &d.kpack {
        for e in &k.kernels {
            out.push(Some(Planned {
                out: Extracted {
                    rel: dir.join(rocpack_kpack::unpack_file_name(
                        e.ordinal, &e.key, &e.target,
                    )),
                    target: e.target.clone(),
                    size: e.original_size,
                    sha256: e.sha256.clone(),
                },
                add_ext: false,
            }));
        }
    }
    for m in &d.members {
        let member = m
            .file
            .rsplit_once('(')
            .map(|(_, n)| n.trim_end_matches(')'))
            .unwrap_or(&m.file);
        let base = sanitize(member);
        let mut sub = dir.join(&base);
        let mut n = 1;
        while !used.insert(sub.clone()) {
            n += 1;
            sub = dir.join(format!("{base}.{n}"));
        }
        plan_files(m, &sub, out, used);
    }
}

/// `.hsaco` for AMDGPU ELF, `.bc` for LLVM bitcode, `.bin` otherwise.
fn ext(head: &[u8]) -> &'static str {
    if matches!(
        rocpack_image::detect(head),
        rocpack_image::FileType::AmdgpuCodeObject | rocpack_image::FileType::Elf { .. }
    ) {
        "hsaco"
    } else if head.starts_with(b"BC\xc0\xde") || head.starts_with(&[0xde, 0xc0, 0x17, 0x0b]) {
        "bc"
    } else {
        "bin"
    }
}

/// Writes each planned code object into `root` as it streams by.
struct Writer<'p> {
    root: &'p Path,
    plan: &'p [Option<Planned>],
    /// Final names (bundle entries get their extension from their bytes).
    names: std::sync::Mutex<BTreeMap<usize, PathBuf>>,
}

struct Open {
    file: Option<std::io::BufWriter<File>>,
    path: PathBuf,
    head: Vec<u8>,
    rel: PathBuf,
    needs_ext: bool,
}

impl Writer<'_> {
    fn open(&self, o: &mut Open) -> Result<()> {
        if o.file.is_some() {
            return Ok(());
        }
        if o.needs_ext {
            let name = format!(
                "{}.{}",
                o.rel.file_name().unwrap_or_default().to_string_lossy(),
                ext(&o.head)
            );
            o.rel.set_file_name(name);
        }
        o.path = self.root.join(&o.rel);
        if let Some(p) = o.path.parent() {
            std::fs::create_dir_all(p)
                .map_err(|e| fail(format!("{}: cannot create: {e}", p.display())))?;
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&o.path)
            .map_err(|e| fail(format!("{}: cannot create: {e}", o.path.display())))?;
        let mut w = std::io::BufWriter::with_capacity(CHUNK, f);
        w.write_all(&o.head)
            .map_err(|e| fail(format!("{}: cannot write: {e}", o.path.display())))?;
        o.file = Some(w);
        Ok(())
    }
}

impl CoSink for Writer<'_> {
    type State = Option<Open>;
    fn begin(&self, i: usize) -> Result<Option<Open>> {
        Ok(self.plan[i].as_ref().map(|p| Open {
            file: None,
            path: PathBuf::new(),
            head: Vec::new(),
            rel: p.out.rel.clone(),
            needs_ext: p.add_ext,
        }))
    }
    fn chunk(&self, st: &mut Option<Open>, bytes: &[u8]) -> Result<()> {
        let Some(o) = st else { return Ok(()) };
        if o.file.is_none() {
            o.head.extend_from_slice(bytes);
            if o.head.len() < 4 {
                return Ok(());
            }
            return self.open(o);
        }
        let path = &o.path;
        o.file
            .as_mut()
            .expect("opened")
            .write_all(bytes)
            .map_err(|e| fail(format!("{}: cannot write: {e}", path.display())))
    }
    fn end(&self, i: usize, st: Option<Open>) -> Result<()> {
        let Some(mut o) = st else { return Ok(()) };
        self.open(&mut o)?;
        let path = o.path.clone();
        o.file
            .take()
            .expect("opened")
            .into_inner()
            .map_err(|e| fail(format!("{}: cannot write: {}", path.display(), e.error())))?;
        self.names
            .lock()
            .map_err(|_| fail("internal: name table poisoned"))?
            .insert(i, o.rel);
        Ok(())
    }
}

/// Write one file per code object of `d` (hashed already) under `root`,
/// an empty directory. Bundles whose code objects overlap are refused: the
/// output would repeat shared bytes once per entry. Returns the files in
/// description order.
pub fn extract(input: &Input, d: &Desc, root: &Path) -> Result<Vec<Extracted>> {
    refuse_overlaps(d)?;
    let mut plan = Vec::new();
    plan_files(d, Path::new(""), &mut plan, &mut Default::default());
    let w = Writer {
        root,
        plan: &plan,
        names: Default::default(),
    };
    stream_all(input, d, &w)?;
    let names = w
        .names
        .into_inner()
        .map_err(|_| fail("internal: name table poisoned"))?;
    Ok(plan
        .into_iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let mut p = p?.out;
            if let Some(rel) = names.get(&i) {
                p.rel = rel.clone();
            }
            Some(p)
        })
        .collect())
}

/// `kpack unbundle`: write every code object of the input into `outdir`
/// (created; an existing one must be empty), all or nothing: files go to a
/// temporary directory beside it, renamed into place when all succeeded.
pub fn unbundle(input: &Input, d: &Desc, outdir: &Path) -> Result<Vec<Extracted>> {
    refuse_overlaps(d)?;
    match std::fs::symlink_metadata(outdir) {
        Ok(m) if m.is_dir() => {
            let empty = std::fs::read_dir(outdir)
                .map_err(|e| fail(format!("{}: cannot read: {e}", outdir.display())))?
                .next()
                .is_none();
            if !empty {
                return Err(fail(format!(
                    "output directory {} exists and is not empty",
                    outdir.display()
                )));
            }
        }
        Ok(_) => {
            return Err(fail(format!(
                "output directory {} exists and is not a directory",
                outdir.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(format!("{}: cannot stat: {e}", outdir.display()))),
    }
    let parent = match outdir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .map_err(|e| fail(format!("{}: cannot create: {e}", parent.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix(".kpack-unbundle-")
        .tempdir_in(&parent)
        .map_err(|e| {
            fail(format!(
                "{}: cannot create a temporary directory: {e}",
                parent.display()
            ))
        })?;
    // Errors name the user's output path, not the temporary one.
    let files = extract(input, d, tmp.path()).map_err(|e| {
        let tmp_s = tmp.path().display().to_string();
        fail(e.0.replace(&tmp_s, &outdir.display().to_string()))
    })?;
    if outdir.exists() {
        std::fs::remove_dir(outdir)
            .map_err(|e| fail(format!("{}: cannot replace: {e}", outdir.display())))?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, outdir).map_err(|e| {
        let _ = std::fs::remove_dir_all(&kept);
        fail(format!(
            "cannot move the output into {}: {e}",
            outdir.display()
        ))
    })?;
    Ok(files)
}

fn refuse_overlaps(d: &Desc) -> Result<()> {
    for b in &d.bundles {
        if let Some(&(x, y)) = b.overlaps.first() {
            return Err(fail(format!(
                "{}: bundle {} at byte offset {}: code objects of entries {x} and {y} overlap; refusing to write shared bytes once per entry",
                d.file,
                b.index,
                b.file_offset.unwrap_or(0)
            )));
        }
    }
    d.members.iter().try_for_each(refuse_overlaps)
}

/// Whether bytes an ELF reader could not handle still hold HIP device code
/// (a `.hip_fatbin` section name or an offload bundle magic). `split`
/// refuses such a file rather than keep its device code in a generic
/// package, and `verify` reports one found there.
pub fn carries_device_code(data: &[u8]) -> bool {
    DEVICE_CODE_NEEDLES
        .iter()
        .any(|n| memchr::memmem::find(data, n).is_some())
}

/// What [`carries_device_code`] looks for.
const DEVICE_CODE_NEEDLES: [&[u8]; 2] = [b".hip_fatbin", BUNDLE_MAGIC];

/// [`carries_device_code`] of the `len` bytes of `file` at `offset` (fewer
/// when the file ends first), read in 1 MiB pieces that overlap by a
/// needle's length: memory and address space stay at a piece whatever the
/// file's size (nothing is mapped).
pub fn file_carries_device_code(
    file: &std::fs::File,
    offset: u64,
    len: u64,
) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    const PIECE: usize = 1 << 20;
    let keep = DEVICE_CODE_NEEDLES
        .iter()
        .map(|n| n.len())
        .max()
        .unwrap_or(1)
        - 1;
    let mut buf = vec![0u8; PIECE + keep];
    let end = offset.saturating_add(len);
    let (mut pos, mut have) = (offset, 0usize);
    while pos < end {
        let want = usize::try_from(end - pos).map_or(PIECE, |n| n.min(PIECE));
        let n = match file.read_at(&mut buf[have..have + want], pos) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        pos += n as u64;
        have += n;
        if carries_device_code(&buf[..have]) {
            return Ok(true);
        }
        // A needle may straddle two pieces: its start is carried over.
        let tail = have.min(keep);
        buf.copy_within(have - tail..have, 0);
        have = tail;
    }
    Ok(false)
}

/// A wrapper's magic as inspect prints it (analysis accepts only these two).
fn magic_name(magic: u32) -> &'static str {
    if magic == rocpack_elf::HIPK_MAGIC {
        "HIPK"
    } else {
        "HIPF"
    }
}
