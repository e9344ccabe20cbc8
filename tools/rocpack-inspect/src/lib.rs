//! rocpack-inspect: what one file is and what it holds, the library behind
//! `kpack inspect` and `kpack unbundle`. It reads single files (never an
//! artifact tree), one module per format: `image` describes host images
//! (ELF, PE, COFF, raw code objects) through `rocpack-image`'s one
//! `describe_in`, `bundle` offload bundles and CCOBs, `kpack` `.kpack`
//! archives; `extract` and `stream` write and hash the code objects found.
//!
//! Fat binaries (ELF files, objects, executables), PE images, COFF
//! objects, static archives, raw bundles, CCOBs and `.kpack` archives are
//! described by one model ([`Desc`], serialised as JSON in field order; schema in
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

use rocpack_bundle::{Format, ParseOptions, BUNDLE_MAGIC};
use serde::Serialize;
use sha2::{Digest, Sha256};

mod bundle;
mod extract;
mod image;
mod kpack;
mod stream;
mod text;

use bundle::*;
use image::*;
use kpack::*;

pub use extract::{extract, unbundle, Extracted};
pub use stream::{hash_all, stream_all, CoSink};
pub use text::write_text;

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

/// Result alias of this crate.
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
    /// The image format's header facts: the `elf` object (`null` for
    /// other kinds) and, for PE images and COFF objects, the `pe` object.
    #[serde(flatten)]
    pub headers: rocpack_image::Headers,
    pub bundles: Vec<BundleDesc>,
    pub wrappers: Vec<WrapperDesc>,
    pub marker: Option<MarkerDesc>,
    pub kpack: Option<KpackDesc>,
    pub members: Vec<Desc>,
    pub notes: Vec<String>,
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
            headers: rocpack_image::Headers::default(),
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
        rocpack_image::FileType::Archive => {
            let mut d = Desc::new(name.to_string(), file_offset, size, "archive");
            if depth >= MAX_DEPTH {
                d.notes.push("nested archive not descended into".into());
                return Ok(d);
            }
            let members =
                rocpack_image::units(data).map_err(|e| fail(format!("{name}: archive: {e}")))?;
            for u in members {
                let Some(m) = &u.member else { continue };
                let off = input.offset_of(u.data).unwrap_or(file_offset + u.offset);
                let member_name = format!("{name}({})", m.name);
                d.members
                    .push(describe_bytes(input, u.data, &member_name, off, depth + 1)?);
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
        // ELF files, PE images, COFF objects and raw code objects: the
        // one description of `rocpack-image`, whatever the format.
        image => describe_image(input, data, name, file_offset)
            .map_err(|e| fail(format!("{name}: {}: {e}", image.name().to_uppercase()))),
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

fn marker_desc(m: &rocpack_image::MarkerInfo) -> MarkerDesc {
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
