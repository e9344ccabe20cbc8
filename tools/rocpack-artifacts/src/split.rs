//! Split ("map" phase): one TheRock artifact directory in, one generic
//! artifact (host code, markers, generic files) plus one artifact per GPU
//! architecture (`.kpack` archives and arch database files) out.
//!
//! Layout written under the output directory, for artifact prefix `NAME`:
//!
//! ```text
//! NAME_generic/artifact_manifest.txt          every processed prefix
//! NAME_generic/<prefix>/…                     host-only binaries, generic files, symlinks
//! NAME_<arch>/artifact_manifest.txt           prefixes with content for <arch>
//! NAME_<arch>/<prefix>/.kpack/NAME_<arch>.kpack
//! NAME_<arch>/<prefix>/<db file relpath>      database files of <arch>
//! ```
//!
//! Each prefix gets its **own** `.kpack` holding the code objects of the
//! binaries below that prefix, so the marker search path
//! `../…/.kpack/NAME_@GFXARCH@.kpack` (relative to the binary) resolves in
//! every layout where the prefix stays intact. rocm-kpack writes one archive
//! under the first prefix only, so binaries of the other prefixes point at a
//! file that does not exist.
//!
//! TOC keys are `<prefix>/<relpath>#<i>` where `i` is the index of the
//! bundle in `.hip_fatbin` (the `co_index` the host-only rewrite stores in
//! each wrapper; several wrappers of an `-fgpu-rdc` binary share one).
//! Static archive members use `<prefix>/<relpath>(<member>)` as kernel name.
//!
//! Everything is built in a staging directory beside the output and moved
//! into place only when the whole split succeeded; walks are sorted, TOCs are
//! written in sorted key order, so the result is byte-identical whatever the
//! thread count or the directories involved.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use rocpack_bundle::EntryData;
use rocpack_kpack::{Compression, KpackStreamWriter, Marker};
use serde::Serialize;

use crate::databases::{self, DatabaseKind};
use crate::fsutil::{self, FsError, IoContext};
use crate::manifest::{ArtifactManifest, ManifestError};
use crate::walk::{self, EntryKind, WalkError};
use rocpack_kpack::commit::StagingDir;

/// Input bytes compressed per parallel batch within one archive.
const BATCH_BYTES: u64 = 16 << 20;
/// Kernels per parallel batch within one archive.
const BATCH_KERNELS: usize = 32;

/// What to split and how.
#[derive(Debug, Clone)]
pub struct SplitOptions {
    /// The artifact directory (holds `artifact_manifest.txt`).
    pub artifact_dir: PathBuf,
    /// Artifact prefix `NAME` (e.g. `blas_lib`): outputs are `NAME_generic`, `NAME_<arch>`.
    pub artifact_prefix: String,
    /// Output directory (created; may exist, but not hold the outputs already).
    pub output_dir: PathBuf,
    /// Database handlers, in priority order.
    pub databases: Vec<DatabaseKind>,
    /// Compression of the `.kpack` archives.
    pub compression: Compression,
    /// Architectures to drop: `gfx906` drops `gfx906` and every
    /// `gfx906:<features>`; `gfx906:xnack-` drops only that exact target.
    pub exclude_arch: Vec<String>,
    /// Keep only these targets, matched by base arch in any spelling
    /// (`gfx90a` keeps `gfx90a:xnack-` and `…_gfx90a-xnack-.hsaco`;
    /// `gfx1250-strict` is not `gfx1250`). Everything else is dropped, from
    /// the generic artifact too. Empty: keep every target.
    pub gpu_targets: Vec<String>,
    /// Worker threads (`None`: one per CPU). Output does not depend on it.
    pub jobs: Option<usize>,
    /// Directories a build system staged the inputs from: symlinks into
    /// them stand for the inputs they mirror ([`walk::walk_staged`]).
    pub staging_roots: Vec<PathBuf>,
}

/// Progress callbacks (the CLI draws a bar on a TTY).
pub trait Progress: Sync {
    /// A phase with `total` units starts.
    fn begin(&self, _phase: &str, _total: u64) {}
    /// `n` units done.
    fn advance(&self, _n: u64) {}
    /// Everything is done.
    fn finish(&self) {}
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// Why a split failed. Every variant names the file (and, where there is
/// one, the byte offset).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SplitError {
    /// Bad arguments (names, overlapping directories, existing outputs).
    #[error("{0}")]
    Usage(String),
    /// The artifact manifest is missing or invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The input tree has something a split must not copy.
    #[error(transparent)]
    Walk(#[from] WalkError),
    /// A file-system operation failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// A fat binary could not be analysed or rewritten.
    #[error("{path}: byte offset {offset}: {error}")]
    Elf {
        /// The input file.
        path: PathBuf,
        /// Byte offset the error is about.
        offset: u64,
        /// The error (part of the message).
        error: rocpack_elf::Error,
    },
    /// A bundle could not be parsed.
    #[error("{path}: byte offset {offset}: {error}")]
    Bundle {
        /// The input file.
        path: PathBuf,
        /// Byte offset of the bundle.
        offset: u64,
        /// The error (part of the message).
        error: rocpack_bundle::Error,
    },
    /// A `.kpack` archive could not be written.
    #[error("{path}: {error}")]
    Kpack {
        /// The archive being written.
        path: PathBuf,
        /// The error (part of the message).
        error: rocpack_kpack::Error,
    },
    /// Several artifacts of a batch failed.
    #[error("{} artifact(s) failed:\n{}", .0.len(), .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Batch(Vec<SplitError>),
}

/// One code object written to a `.kpack`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KpackSummary {
    /// Path relative to the output directory.
    pub path: String,
    /// Number of code objects.
    pub kernels: u64,
    /// Total uncompressed code-object bytes.
    pub code_bytes: u64,
    /// Archive size in bytes.
    pub file_bytes: u64,
}

/// One output artifact for an architecture.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ArchArtifact {
    /// The architecture (target ID, features kept).
    pub arch: String,
    /// Directory name (`NAME_<arch>`).
    pub name: String,
    /// Prefixes in its manifest.
    pub prefixes: Vec<String>,
    /// `.kpack` archives written.
    pub kpacks: Vec<KpackSummary>,
    /// Database files, relative to the artifact directory.
    pub database_files: Vec<String>,
}

/// One fat binary that was split.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FatBinarySummary {
    /// `<prefix>/<relpath>` (also the marker's kernel name for ELF files).
    pub path: String,
    /// Bundles found (all archive members together).
    pub bundles: u64,
    /// Device code objects found (before exclusion).
    pub code_objects: u64,
    /// Architectures found in it, sorted.
    pub architectures: Vec<String>,
    /// Input size in bytes.
    pub input_bytes: u64,
    /// Host-only output size in bytes.
    pub output_bytes: u64,
}

/// Result of splitting one artifact directory.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SplitReport {
    /// `NAME`.
    pub artifact_prefix: String,
    /// Prefixes processed (manifest order).
    pub prefixes: Vec<String>,
    /// Manifest prefixes that do not exist in the input (skipped).
    pub missing_prefixes: Vec<String>,
    /// Architectures discovered in the input, sorted (before exclusion).
    pub discovered_architectures: Vec<String>,
    /// Architectures dropped by `--exclude-arch`.
    pub excluded_architectures: Vec<String>,
    /// Architectures written, sorted.
    pub architectures: Vec<String>,
    /// The generic artifact's directory name.
    pub generic: String,
    /// Regular files copied to the generic artifact (fat binaries excluded).
    pub generic_files: u64,
    /// Symlinks recreated in the generic artifact.
    pub symlinks: u64,
    /// Fat binaries rewritten host-only.
    pub fat_binaries: Vec<FatBinarySummary>,
    /// Per-architecture artifacts.
    pub arch_artifacts: Vec<ArchArtifact>,
    /// Compression scheme of the archives.
    pub compression: String,
}

/// Is `arch` dropped by one of `excludes`?
pub fn is_excluded(arch: &str, excludes: &[String]) -> bool {
    excludes.iter().any(|e| {
        if e.contains(':') {
            e == arch
        } else {
            arch == e || arch.split(':').next() == Some(e.as_str())
        }
    })
}

fn check_name(kind: &str, name: &str) -> Result<(), SplitError> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.starts_with('.')
        || name.contains('/')
        || name.contains('\\')
        || name.contains('\0');
    if bad {
        Err(SplitError::Usage(format!(
            "invalid {kind} `{name}`: must be a plain, non-hidden file name"
        )))
    } else {
        Ok(())
    }
}

/// What every file of a scan shares.
struct ScanCx<'a> {
    opts: &'a SplitOptions,
    spill: &'a Spill,
}

/// Decompressed CCOB payloads, written once per bundle so that code objects
/// are read back as plain file ranges: each compressed bundle is
/// decompressed exactly once, and memory does not grow with the number of
/// code objects, architectures or workers.
struct Spill {
    dir: tempfile::TempDir,
    next: AtomicU64,
}

impl Spill {
    fn new(stage: &Path) -> Result<Spill, SplitError> {
        let dir = tempfile::Builder::new()
            .prefix(".spill-")
            .tempdir_in(stage)
            .ctx(stage, "create spill directory")?;
        Ok(Spill {
            dir,
            next: AtomicU64::new(0),
        })
    }

    /// Write one decompressed payload; returns its file.
    fn write(&self, bytes: &[u8]) -> Result<PathBuf, SplitError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let p = self.dir.path().join(format!("{n}.bundle"));
        fs::write(&p, bytes).ctx(&p, "write decompressed bundle")?;
        Ok(p)
    }
}

/// Per prefix index: database files (relative paths) and code objects.
type PerPrefix = BTreeMap<usize, (Vec<String>, Vec<KernelRef>)>;

#[derive(Debug, Clone)]
struct KernelRef {
    key: String,
    arch: String,
    bundle_id: String,
    /// The file holding the code object: the input itself, or the spill
    /// file of its decompressed CCOB.
    file: PathBuf,
    size: u64,
    /// Byte offset of the code object in `file`.
    offset: u64,
    /// The artifact prefix of the binary it comes from.
    prefix: String,
    /// Its place in the original bundle (`metadata.bundle`), when the
    /// bundle can be rebuilt exactly.
    place: Option<rocpack_kpack::rmpv::Value>,
}

/// Classification of one regular file.
enum Class {
    Generic,
    Database(String),
    Fat(FatOutcome),
}

struct FatOutcome {
    kernels: Vec<KernelRef>,
    summary: FatBinarySummary,
}

struct PrefixScan {
    prefix: String,
    entries: Vec<walk::Entry>,
    classes: Vec<Option<Class>>,
}

fn elf_err(path: &Path, e: rocpack_elf::Error) -> SplitError {
    SplitError::Elf {
        path: path.to_path_buf(),
        offset: e.offset().unwrap_or(0),
        error: e,
    }
}

/// Memory-maps a file read-only.
#[allow(unsafe_code)]
fn map_file(path: &Path) -> Result<(File, memmap2::Mmap), SplitError> {
    let file = File::open(path).ctx(path, "open")?;
    // SAFETY: the mapping is read-only and private to this process; inputs
    // are artifact trees nobody modifies while a split runs (the same
    // assumption every build action makes about its inputs). A concurrent
    // truncation could raise SIGBUS, never memory unsafety in safe code
    // beyond that documented mmap caveat.
    let map = unsafe { memmap2::Mmap::map(&file) }.ctx(path, "mmap")?;
    Ok((file, map))
}

/// Offset of `part` inside `whole`, if it is a sub-slice of it.
fn offset_in(whole: &[u8], part: &[u8]) -> Option<u64> {
    let base = whole.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    let off = p.checked_sub(base)?;
    (off.checked_add(part.len())? <= whole.len()).then_some(off as u64)
}

/// Collects the code objects of one analysed ELF image (`image` is a
/// sub-slice of `whole`, the mapped file).
#[allow(clippy::too_many_arguments)]
fn collect_kernels(
    whole: &[u8],
    image: &[u8],
    info: &rocpack_elf::FatBinaryInfo,
    kernel_name: &str,
    path: &Path,
    out: &mut Vec<KernelRef>,
    archs: &mut BTreeSet<String>,
    counts: &mut (u64, u64),
    spill: &Spill,
) -> Result<(), SplitError> {
    for b in &info.bundles {
        let bytes =
            rocpack_elf::bundle_bytes(image, info, b.index).map_err(|e| elf_err(path, e))?;
        let bundle_off = offset_in(whole, bytes).unwrap_or(b.file_offset);
        let parsed = rocpack_bundle::parse_bundle(bytes).map_err(|e| SplitError::Bundle {
            path: path.to_path_buf(),
            offset: bundle_off + e.offset().unwrap_or(0),
            error: e,
        })?;
        counts.0 += 1;
        let spilled = match &parsed.decompressed {
            Some(payload) => Some(spill.write(payload)?),
            None => None,
        };
        let key = rocpack_kpack::toc_key(kernel_name, b.index as u64);
        let layout = rocpack_bundle::BundleLayout::of(
            &parsed,
            parsed.decompressed.as_deref().unwrap_or(bytes),
        );
        for (position, entry) in parsed.entries.iter().enumerate() {
            if entry.id.is_host() {
                continue;
            }
            let place = layout.as_ref().and_then(|l| {
                rocpack_kpack::bundle_meta::encode(l, position, |i| {
                    parsed.entries.get(i).is_some_and(|e| !e.id.is_host())
                })
            });
            let arch = entry.id.target_id().to_string();
            if check_name("architecture", &arch).is_err() {
                return Err(SplitError::Usage(format!(
                    "{}: byte offset {bundle_off}: bundle entry `{}` names no usable architecture",
                    path.display(),
                    entry.id
                )));
            }
            counts.1 += 1;
            archs.insert(arch.clone());
            let (file, offset) = match (&entry.data, &spilled) {
                (EntryData::Payload { start, .. }, Some(f)) => (f.clone(), *start as u64),
                (EntryData::Borrowed(d), _) => match offset_in(whole, d) {
                    Some(o) => (path.to_path_buf(), o),
                    None => return Err(changed_err(path, bundle_off)),
                },
                _ => return Err(changed_err(path, bundle_off)),
            };
            out.push(KernelRef {
                key: key.clone(),
                arch,
                bundle_id: entry.id.to_string(),
                file,
                size: entry.size,
                offset,
                prefix: String::new(),
                place,
            });
        }
    }
    Ok(())
}

/// Analyses one regular file; `Fat` when it carries device code.
fn classify_file(
    cx: &ScanCx<'_>,
    prefix: &str,
    rel: &str,
    path: &Path,
    size: u64,
    host_dst: &Path,
    mode: u32,
) -> Result<Class, SplitError> {
    let mut magic = [0u8; 8];
    let n = if size == 0 {
        0
    } else {
        let mut f = File::open(path).ctx(path, "open")?;
        read_up_to(&mut f, &mut magic).ctx(path, "read")?
    };
    let magic = &magic[..n];
    let is_elf64le =
        magic.len() >= 6 && magic.starts_with(b"\x7fELF") && magic[4] == 2 && magic[5] == 1;
    let is_ar = magic == b"!<arch>\n";
    if is_elf64le || is_ar {
        if let Some(fat) = split_fat(cx, prefix, rel, path, host_dst, mode)? {
            return Ok(Class::Fat(fat));
        }
    }
    if let Some((_, arch)) = databases::classify(&cx.opts.databases, rel) {
        return Ok(Class::Database(arch));
    }
    Ok(Class::Generic)
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Analyses and rewrites one ELF file or archive; `None` if it has no device code.
fn split_fat(
    cx: &ScanCx<'_>,
    prefix: &str,
    rel: &str,
    path: &Path,
    host_dst: &Path,
    mode: u32,
) -> Result<Option<FatOutcome>, SplitError> {
    let (opts, spill) = (cx.opts, cx.spill);
    let (_file, map) = map_file(path)?;
    let data: &[u8] = &map;
    let kernel_name = format!("{prefix}/{rel}");
    let depth = rel.split('/').count().saturating_sub(1);
    let mut kernels = Vec::new();
    let mut archs = BTreeSet::new();
    let mut counts = (0u64, 0u64);
    let host = if rocpack_elf::is_archive(data) {
        let members = rocpack_elf::archive_members(data).map_err(|e| elf_err(path, e))?;
        let mut member_seen = MemberNames::default();
        let mut any = false;
        for m in &members {
            let info = match rocpack_elf::analyze(m.data) {
                Ok(i) => i,
                // Members that are not ELF64 objects (e.g. other archives'
                // payloads) carry no HIP device code we can split.
                Err(rocpack_elf::Error::NotElf) => continue,
                Err(e @ rocpack_elf::Error::Unsupported { .. }) => {
                    if carries_device_code(m.data) {
                        return Err(elf_err(
                            path,
                            rocpack_elf::Error::Member {
                                name: m.name.clone(),
                                offset: m.header_offset,
                                source: Box::new(e),
                            },
                        ));
                    }
                    continue;
                }
                Err(e) => {
                    return Err(elf_err(
                        path,
                        rocpack_elf::Error::Member {
                            name: m.name.clone(),
                            offset: m.header_offset,
                            source: Box::new(e),
                        },
                    ))
                }
            };
            if !info.has_device_code() {
                continue;
            }
            any = true;
            let member_name = format!("{kernel_name}({})", member_seen.label(&m.name));
            collect_kernels(
                data,
                m.data,
                &info,
                &member_name,
                path,
                &mut kernels,
                &mut archs,
                &mut counts,
                spill,
            )?;
        }
        if !any {
            return Ok(None);
        }
        let mut marker_seen = MemberNames::default();
        let mut marker_for = |name: &str, _info: &rocpack_elf::FatBinaryInfo| {
            let name = marker_seen.label(name);
            Ok(Marker::for_split(
                &opts.artifact_prefix,
                depth,
                format!("{kernel_name}({name})"),
            )
            .encode())
        };
        rocpack_elf::split_archive(data, &mut marker_for).map_err(|e| elf_err(path, e))?
    } else {
        let info = match rocpack_elf::analyze(data) {
            Ok(i) => i,
            // An ELF we cannot read (32-bit, big-endian, PN_XNUM, odd
            // e_type) is copied as it is only when it has no device code;
            // keeping device code in the generic package silently would
            // ship a fat binary that verify cannot see.
            Err(e @ rocpack_elf::Error::Unsupported { .. }) => {
                if carries_device_code(data) {
                    return Err(elf_err(path, e));
                }
                return Ok(None);
            }
            Err(e) => return Err(elf_err(path, e)),
        };
        if !info.has_device_code() {
            return Ok(None);
        }
        // Rewrite first: every layout problem is reported before a single
        // bundle is decompressed.
        let marker = Marker::for_split(&opts.artifact_prefix, depth, kernel_name.clone()).encode();
        let host = rocpack_elf::split_host(data, &marker).map_err(|e| elf_err(path, e))?;
        collect_kernels(
            data,
            data,
            &info,
            &kernel_name,
            path,
            &mut kernels,
            &mut archs,
            &mut counts,
            spill,
        )?;
        host
    };
    write_file_mode(host_dst, &host, mode)?;
    let summary = FatBinarySummary {
        path: kernel_name,
        bundles: counts.0,
        code_objects: counts.1,
        architectures: archs.into_iter().collect(),
        input_bytes: data.len() as u64,
        output_bytes: host.len() as u64,
    };
    Ok(Some(FatOutcome { kernels, summary }))
}

/// Kernel-name labels of archive members: an `ar` archive may hold several
/// members of one name (`ar q`); the n-th fat member of a name is labelled
/// `name;n` from the second on, so each gets its own TOC keys. Both the
/// kernel collection and the marker writer see fat members in archive
/// order, so they agree.
#[derive(Default)]
struct MemberNames(BTreeMap<String, usize>);

impl MemberNames {
    fn label(&mut self, name: &str) -> String {
        let n = self.0.entry(name.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            name.to_string()
        } else {
            format!("{name};{n}")
        }
    }
}

/// Whether bytes an ELF reader could not handle still hold HIP device code
/// (a `.hip_fatbin` section name or an offload bundle magic).
fn carries_device_code(data: &[u8]) -> bool {
    const NEEDLES: [&[u8]; 2] = [b".hip_fatbin", b"__CLANG_OFFLOAD_BUNDLE__"];
    NEEDLES
        .iter()
        .any(|n| data.windows(n.len()).any(|w| w == *n))
}

/// Reads one code object's bytes.
fn read_kernel(k: &KernelRef) -> Result<Vec<u8>, SplitError> {
    use std::os::unix::fs::FileExt;
    let f = File::open(&k.file).ctx(&k.file, "open")?;
    let len = usize::try_from(k.size)
        .map_err(|_| SplitError::Usage(format!("{}: code object too large", k.file.display())))?;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, k.offset)
        .ctx(&k.file, "read code object")?;
    Ok(buf)
}

fn changed_err(path: &Path, offset: u64) -> SplitError {
    SplitError::Usage(format!(
        "{}: byte offset {offset}: file changed while splitting",
        path.display()
    ))
}

fn kpack_err(path: &Path, e: rocpack_kpack::Error) -> SplitError {
    SplitError::Kpack {
        path: path.to_path_buf(),
        error: e,
    }
}

/// The source a [`CopyWriter`] may copy from kernel-side: the address
/// range of a read-only mapping of `file`.
struct MappedSource {
    base: usize,
    len: usize,
    file: File,
}

/// Output of an uncompressed archive. Small writes (header, TOC) are
/// buffered; a write whose buffer lies inside the current [`MappedSource`]
/// mapping is performed with `copy_file_range` from the source file (via
/// `std::io::copy`), so code-object bytes go from page cache to page cache
/// without passing through (or faulting in) this process's memory. Only
/// addresses are compared; the mapping is never read here.
struct CopyWriter {
    out: File,
    buf: Vec<u8>,
    src: Rc<RefCell<Option<MappedSource>>>,
}

impl CopyWriter {
    fn flush_buf(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// File offset of `data` in the current source mapping, if it lies there.
    fn source_offset(&self, data: &[u8]) -> Option<u64> {
        let src = self.src.borrow();
        let m = src.as_ref()?;
        let p = data.as_ptr() as usize;
        let off = p.checked_sub(m.base)?;
        (data.len() >= 4096 && off.checked_add(data.len())? <= m.len).then_some(off as u64)
    }
}

impl Write for CopyWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if let Some(off) = self.source_offset(data) {
            self.flush_buf()?;
            let src = self.src.borrow();
            let m = src
                .as_ref()
                .ok_or_else(|| std::io::Error::other("copy source vanished"))?;
            let mut f = &m.file;
            f.seek(SeekFrom::Start(off))?;
            let want = data.len() as u64;
            let n = std::io::copy(&mut Read::take(f, want), &mut self.out)?;
            if n != want {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("source file shrank: copied {n} of {want} bytes"),
                ));
            }
            return Ok(data.len());
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 1 << 20 {
            self.flush_buf()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_buf()?;
        self.out.flush()
    }
}

impl Seek for CopyWriter {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.flush_buf()?;
        self.out.seek(pos)
    }
}

/// An entry's free-form `metadata`: its full bundle entry ID, its prefix
/// and, when known, its place in the original bundle (bundle_meta).
fn entry_metadata(k: &KernelRef) -> Option<rocpack_kpack::rmpv::Value> {
    use rocpack_kpack::rmpv::Value;
    let mut m = vec![
        (Value::from("target"), Value::from(k.bundle_id.as_str())),
        (Value::from("source_prefix"), Value::from(k.prefix.as_str())),
    ];
    if let Some(place) = &k.place {
        m.push((Value::from("bundle"), place.clone()));
    }
    Some(Value::Map(m))
}

/// Writes an uncompressed archive: code objects of uncompressed bundles are
/// copied file-to-file by the kernel (CCOB entries from their spill file).
fn write_archive_none(
    path: &Path,
    group: &str,
    arch: &str,
    kernels: &[KernelRef],
    progress: &dyn Progress,
) -> Result<KpackSummary, SplitError> {
    let out = File::create(path).ctx(path, "create")?;
    let src = Rc::new(RefCell::new(None::<MappedSource>));
    let cw = CopyWriter {
        out,
        buf: Vec::with_capacity(1 << 16),
        src: src.clone(),
    };
    let mut w = KpackStreamWriter::new(cw, Compression::None).map_err(|e| kpack_err(path, e))?;
    w.group_name(group).arch_family(arch).arches([arch]);
    let mut code_bytes = 0u64;
    // The mapping of the file the current kernels come from (sorted keys
    // keep one binary's kernels together).
    let mut current: Option<(PathBuf, memmap2::Mmap)> = None;
    for k in kernels {
        let meta = entry_metadata(k);
        let offset = k.offset;
        if current.as_ref().is_none_or(|(p, _)| p != &k.file) {
            let (file, map) = map_file(&k.file)?;
            *src.borrow_mut() = Some(MappedSource {
                base: map.as_ptr() as usize,
                len: map.len(),
                file,
            });
            current = Some((k.file.clone(), map));
        }
        let changed = || changed_err(&k.file, offset);
        let (_, map) = current.as_ref().ok_or_else(changed)?;
        let start = usize::try_from(offset).map_err(|_| changed())?;
        let end = usize::try_from(offset.saturating_add(k.size)).map_err(|_| changed())?;
        let data = map.get(start..end).ok_or_else(changed)?;
        w.add_with_metadata(&k.key, &k.arch, data, meta)
            .map_err(|e| kpack_err(path, e))?;
        code_bytes += k.size;
        progress.advance(1);
    }
    let (mut cw, summary) = w.finish().map_err(|e| kpack_err(path, e))?;
    cw.flush().ctx(path, "write")?;
    Ok(KpackSummary {
        path: String::new(),
        kernels: kernels.len() as u64,
        code_bytes,
        file_bytes: summary.total_size,
    })
}

/// Writes one archive from `kernels` (sorted by key), streaming, with
/// parallel compression in bounded batches.
fn write_archive(
    path: &Path,
    group: &str,
    arch: &str,
    compression: Compression,
    kernels: &[KernelRef],
    progress: &dyn Progress,
) -> Result<KpackSummary, SplitError> {
    let file = File::create(path).ctx(path, "create")?;
    let mut w = KpackStreamWriter::new(BufWriter::with_capacity(1 << 20, file), compression)
        .map_err(|e| kpack_err(path, e))?;
    w.group_name(group).arch_family(arch).arches([arch]);
    let meta = entry_metadata;
    let mut code_bytes = 0u64;
    let mut i = 0;
    while i < kernels.len() {
        // Batch: up to BATCH_KERNELS kernels or BATCH_BYTES input bytes.
        let mut j = i;
        let mut bytes = 0u64;
        while j < kernels.len()
            && j - i < BATCH_KERNELS
            && (j == i || bytes + kernels[j].size <= BATCH_BYTES)
        {
            bytes += kernels[j].size;
            j += 1;
        }
        let batch = &kernels[i..j];
        match compression {
            Compression::None => {
                for k in batch {
                    let data = read_kernel(k)?;
                    code_bytes += data.len() as u64;
                    w.add_with_metadata(&k.key, &k.arch, &data, meta(k))
                        .map_err(|e| kpack_err(path, e))?;
                    progress.advance(1);
                }
            }
            Compression::Zstd { level } => {
                let frames: Vec<Result<(u64, Vec<u8>), SplitError>> = batch
                    .par_iter()
                    .map(|k| {
                        let data = read_kernel(k)?;
                        let frame = rocpack_kpack::compress_frame(&data, level)
                            .map_err(|e| kpack_err(path, e))?;
                        Ok((data.len() as u64, frame))
                    })
                    .collect();
                for (k, r) in batch.iter().zip(frames) {
                    let (orig, frame) = r?;
                    code_bytes += orig;
                    w.add_frame(&k.key, &k.arch, orig, &frame, meta(k))
                        .map_err(|e| kpack_err(path, e))?;
                    progress.advance(1);
                }
            }
        }
        i = j;
    }
    let (bw, summary) = w.finish().map_err(|e| kpack_err(path, e))?;
    // Flush; no fsync: split outputs are build products, staged and renamed.
    bw.into_inner()
        .map_err(|e| FsError::new(path, "write", e.into_error()))?;
    Ok(KpackSummary {
        path: String::new(),
        kernels: kernels.len() as u64,
        code_bytes,
        file_bytes: summary.total_size,
    })
}

fn mkdir_p(p: &Path) -> Result<(), SplitError> {
    fs::create_dir_all(p).ctx(p, "create directory")?;
    Ok(())
}

fn write_file_mode(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SplitError> {
    fs::write(path, bytes).ctx(path, "write")?;
    fsutil::set_mode(path, mode)?;
    Ok(())
}

/// Rejects an output directory inside the input (the walk would see it).
fn check_dirs(artifact_dir: &Path, output_dir: &Path) -> Result<(), SplitError> {
    let a = fsutil::absolute_lexical(artifact_dir).ctx(artifact_dir, "resolve")?;
    let o = fsutil::absolute_lexical(output_dir).ctx(output_dir, "resolve")?;
    let a_real = fs::canonicalize(&a).unwrap_or(a.clone());
    // Through every symlink on the way, even where the output does not
    // exist yet: a symlinked parent must not hide that it is inside.
    let o_parent_real = rocpack_kpack::weakly_canonical(&o);
    if o.starts_with(&a) || o_parent_real.starts_with(&a_real) {
        return Err(SplitError::Usage(format!(
            "output directory {} is inside the artifact directory {}",
            output_dir.display(),
            artifact_dir.display()
        )));
    }
    Ok(())
}

/// Splits one artifact directory into `stage` (a directory that will be
/// moved into the output as a whole). Returns the report.
fn split_into(
    opts: &SplitOptions,
    stage: &Path,
    progress: &dyn Progress,
) -> Result<SplitReport, SplitError> {
    check_name("artifact prefix", &opts.artifact_prefix)?;
    let name = &opts.artifact_prefix;
    let manifest = ArtifactManifest::read_dir(&opts.artifact_dir)?;

    // 1. Walk every prefix (sorted, symlink-safe).
    let mut scans = Vec::new();
    let mut missing = Vec::new();
    for prefix in manifest.prefixes() {
        let root = match fsutil::real_dir_below(&opts.artifact_dir, prefix) {
            Ok(Some(root)) => root,
            Ok(None) => {
                missing.push(prefix.clone());
                continue;
            }
            Err(msg) => return Err(SplitError::Usage(msg)),
        };
        let entries = walk::walk_staged(&root, &opts.staging_roots)?;
        scans.push(PrefixScan {
            prefix: prefix.clone(),
            classes: Vec::new(),
            entries,
        });
    }

    // 2. Generic directory skeleton (so host-only binaries can be written
    //    as soon as they are rewritten).
    let generic_name = format!("{name}_generic");
    let generic_root = stage.join(&generic_name);
    mkdir_p(&generic_root)?;
    for scan in &scans {
        let groot = fsutil::join_rel(&generic_root, &scan.prefix);
        mkdir_p(&groot)?;
        for e in &scan.entries {
            if e.kind == EntryKind::Dir {
                mkdir_p(&fsutil::join_rel(&groot, &e.rel))?;
            }
        }
    }

    // 3. Classify every regular file, in parallel; fat binaries are analysed
    //    and their host-only rewrite written here; compressed bundles are
    //    decompressed once, into the spill directory.
    let spill = Spill::new(stage)?;
    let cx = ScanCx {
        opts,
        spill: &spill,
    };
    let total_files: u64 = scans
        .iter()
        .map(|s| {
            s.entries
                .iter()
                .filter(|e| matches!(e.kind, EntryKind::File { .. }))
                .count() as u64
        })
        .sum();
    progress.begin("scanning", total_files);
    for scan in &mut scans {
        let prefix = scan.prefix.clone();
        let groot = fsutil::join_rel(&generic_root, &scan.prefix);
        let classes: Result<Vec<Option<Class>>, SplitError> = scan
            .entries
            .par_iter()
            .map(|e| match e.kind {
                EntryKind::File { size, mode } => {
                    let dst = fsutil::join_rel(&groot, &e.rel);
                    let c = classify_file(&cx, &prefix, &e.rel, &e.path, size, &dst, mode);
                    progress.advance(1);
                    c.map(Some)
                }
                _ => Ok(None),
            })
            .collect();
        scan.classes = classes?;
    }

    // 4. Architectures.
    let mut discovered = BTreeSet::new();
    for scan in &scans {
        for c in scan.classes.iter().flatten() {
            match c {
                Class::Database(a) => {
                    discovered.insert(a.clone());
                }
                Class::Fat(f) => discovered.extend(f.summary.architectures.iter().cloned()),
                Class::Generic => {}
            }
        }
    }
    for a in &discovered {
        check_name("architecture", a)?;
    }
    let wanted: Option<BTreeSet<String>> = (!opts.gpu_targets.is_empty()).then(|| {
        opts.gpu_targets
            .iter()
            .filter_map(|t| rocpack_bundle::base_arch(t))
            .collect()
    });
    let dropped = |a: &str| {
        is_excluded(a, &opts.exclude_arch)
            || wanted
                .as_ref()
                .is_some_and(|w| !rocpack_bundle::base_arch(a).is_some_and(|b| w.contains(&b)))
    };
    let excluded: Vec<String> = discovered.iter().filter(|a| dropped(a)).cloned().collect();
    let kept: BTreeSet<String> = discovered.iter().filter(|a| !dropped(a)).cloned().collect();
    if let Some(w) = &wanted {
        let any_code = scans.iter().any(|s| {
            s.classes.iter().flatten().any(|c| match c {
                Class::Fat(f) => f.kernels.iter().any(|k| kept.contains(&k.arch)),
                _ => false,
            })
        });
        let any_fat = scans.iter().any(|s| {
            s.classes
                .iter()
                .flatten()
                .any(|c| matches!(c, Class::Fat(_)))
        });
        if any_fat && !any_code {
            return Err(SplitError::Usage(format!(
                "--gpu-targets {} leaves no code object: the artifact has code for {}",
                w.iter().cloned().collect::<Vec<_>>().join(" "),
                discovered.iter().cloned().collect::<Vec<_>>().join(" ")
            )));
        }
    }

    // 5. Generic files and symlinks; collect database files and kernels.
    let mut generic_files = 0u64;
    let mut symlinks = 0u64;
    let mut fat_summaries = Vec::new();
    // (arch) -> prefix -> (db files, kernels)
    let mut per_arch: BTreeMap<String, PerPrefix> = BTreeMap::new();
    let mut processed = ArtifactManifest::new();
    for (pi, scan) in scans.iter_mut().enumerate() {
        processed.push(&scan.prefix)?;
        let groot = fsutil::join_rel(&generic_root, &scan.prefix);
        for (e, class) in scan.entries.iter().zip(scan.classes.iter_mut()) {
            let dst = fsutil::join_rel(&groot, &e.rel);
            match (&e.kind, class.take()) {
                (EntryKind::Dir, _) => {}
                (EntryKind::Symlink { target }, _) => {
                    fsutil::copy_symlink(target, &dst)?;
                    symlinks += 1;
                }
                (EntryKind::File { .. }, Some(Class::Generic) | None) => {
                    fsutil::copy_file(&e.path, &dst)?;
                    generic_files += 1;
                }
                (EntryKind::File { .. }, Some(Class::Database(arch))) => {
                    if kept.contains(&arch) {
                        per_arch
                            .entry(arch)
                            .or_default()
                            .entry(pi)
                            .or_default()
                            .0
                            .push(e.rel.clone());
                    }
                }
                (EntryKind::File { .. }, Some(Class::Fat(fat))) => {
                    for mut k in fat.kernels {
                        k.prefix.clone_from(&scan.prefix);
                        if kept.contains(&k.arch) {
                            per_arch
                                .entry(k.arch.clone())
                                .or_default()
                                .entry(pi)
                                .or_default()
                                .1
                                .push(k);
                        }
                    }
                    fat_summaries.push(fat.summary);
                }
            }
        }
    }
    processed.write_dir(&generic_root)?;
    // Directories whose every file moved to arch artifacts (database trees
    // such as `lib/aotriton/kernels/gfx1100/…`) are not left behind empty;
    // directories that were empty in the input stay.
    for scan in &scans {
        let groot = fsutil::join_rel(&generic_root, &scan.prefix);
        let had_content: BTreeSet<&str> = scan
            .entries
            .iter()
            .flat_map(|e| {
                let mut parents = Vec::new();
                let mut r = e.rel.as_str();
                while let Some((parent, _)) = r.rsplit_once('/') {
                    parents.push(parent);
                    r = parent;
                }
                parents
            })
            .collect();
        // Deepest first, so a parent is looked at after its children.
        for e in scan.entries.iter().rev() {
            if e.kind == EntryKind::Dir && had_content.contains(e.rel.as_str()) {
                let d = fsutil::join_rel(&groot, &e.rel);
                if fs::read_dir(&d).ctx(&d, "read directory")?.next().is_none() {
                    fs::remove_dir(&d).ctx(&d, "remove empty directory")?;
                }
            }
        }
    }

    // 6. Per-arch artifacts: database files, then archives (in parallel).
    //    One archive per arch holds the kernels of every prefix (TOC keys
    //    start with the prefix, so they never collide) and is written
    //    identically into the `.kpack/` of each prefix that has binaries:
    //    installed overlaid (prefixes kept) or flattened (every prefix into
    //    one root, where the copies meet at one path) every marker resolves.
    struct ArchiveJob {
        arch: String,
        path: PathBuf,
        rel: String,
        /// Further prefixes' copies: (path, report path).
        copies: Vec<(PathBuf, String)>,
        kernels: Vec<KernelRef>,
    }
    let mut jobs = Vec::new();
    let mut arch_artifacts = Vec::new();
    for (arch, prefixes) in &mut per_arch {
        let aname = format!("{name}_{arch}");
        let aroot = stage.join(&aname);
        mkdir_p(&aroot)?;
        let mut m = ArtifactManifest::new();
        let mut dbs = Vec::new();
        let file = rocpack_kpack::kpack_file_name(name, arch);
        let mut homes: Vec<(PathBuf, String)> = Vec::new();
        let mut all_kernels = Vec::new();
        for (pi, (db_files, kernels)) in prefixes.iter_mut() {
            let scan = &scans[*pi];
            m.push(&scan.prefix)?;
            let proot = fsutil::join_rel(&aroot, &scan.prefix);
            mkdir_p(&proot)?;
            for rel in db_files.iter() {
                let dst = fsutil::join_rel(&proot, rel);
                if let Some(parent) = dst.parent() {
                    mkdir_p(parent)?;
                }
                let src =
                    fsutil::join_rel(&fsutil::join_rel(&opts.artifact_dir, &scan.prefix), rel);
                fsutil::copy_file(&src, &dst)?;
                dbs.push(format!("{}/{rel}", scan.prefix));
            }
            if !kernels.is_empty() {
                let kdir = proot.join(rocpack_kpack::KPACK_DIR);
                mkdir_p(&kdir)?;
                homes.push((
                    kdir.join(&file),
                    format!(
                        "{aname}/{}/{}/{file}",
                        scan.prefix,
                        rocpack_kpack::KPACK_DIR
                    ),
                ));
                all_kernels.append(kernels);
            }
        }
        if let Some((path, rel)) = homes.first().cloned() {
            all_kernels.sort_by(|a, b| a.key.cmp(&b.key));
            jobs.push(ArchiveJob {
                arch: arch.clone(),
                path,
                rel,
                copies: homes.split_off(1),
                kernels: all_kernels,
            });
        }
        m.write_dir(&aroot)?;
        arch_artifacts.push(ArchArtifact {
            arch: arch.clone(),
            name: aname,
            prefixes: m.prefixes().to_vec(),
            kpacks: Vec::new(),
            database_files: dbs,
        });
    }
    let total_kernels: u64 = jobs.iter().map(|j| j.kernels.len() as u64).sum();
    progress.begin("packing", total_kernels);
    let write_one = |j: &ArchiveJob| -> Result<Vec<(String, KpackSummary)>, SplitError> {
        let mut s = match opts.compression {
            Compression::None => write_archive_none(&j.path, name, &j.arch, &j.kernels, progress)?,
            c => write_archive(&j.path, name, &j.arch, c, &j.kernels, progress)?,
        };
        fsutil::set_mode(&j.path, 0o644)?;
        s.path = j.rel.clone();
        let mut out = vec![(j.arch.clone(), s.clone())];
        for (path, rel) in &j.copies {
            fsutil::copy_file(&j.path, path)?;
            fsutil::set_mode(path, 0o644)?;
            out.push((
                j.arch.clone(),
                KpackSummary {
                    path: rel.clone(),
                    ..s.clone()
                },
            ));
        }
        Ok(out)
    };
    // Memory stays bounded: uncompressed archives are written in parallel,
    // one code object in flight per archive; zstd archives one after the
    // other, each compressing a bounded batch of code objects in parallel.
    let written: Result<Vec<Vec<(String, KpackSummary)>>, SplitError> = match opts.compression {
        Compression::None => jobs.par_iter().map(write_one).collect(),
        Compression::Zstd { .. } => jobs.iter().map(write_one).collect(),
    };
    for (arch, s) in written?.into_iter().flatten() {
        if let Some(a) = arch_artifacts.iter_mut().find(|a| a.arch == arch) {
            a.kpacks.push(s);
        }
    }
    progress.finish();

    Ok(SplitReport {
        artifact_prefix: name.clone(),
        prefixes: processed.prefixes().to_vec(),
        missing_prefixes: missing,
        discovered_architectures: discovered.into_iter().collect(),
        excluded_architectures: excluded,
        architectures: arch_artifacts.iter().map(|a| a.arch.clone()).collect(),
        generic: generic_name,
        generic_files,
        symlinks,
        fat_binaries: fat_summaries,
        arch_artifacts,
        compression: opts.compression.scheme().as_str().to_string(),
    })
}

/// Output directory names a report produced.
fn output_names(r: &SplitReport) -> Vec<OsString> {
    let mut v = vec![OsString::from(&r.generic)];
    v.extend(r.arch_artifacts.iter().map(|a| OsString::from(&a.name)));
    v
}

/// Runs `f` on a thread pool of `jobs` threads (`None`: rayon's default).
fn with_pool<T: Send>(jobs: Option<usize>, f: impl FnOnce() -> T + Send) -> Result<T, SplitError> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = jobs {
        b = b.num_threads(n.max(1));
    }
    let pool = b
        .build()
        .map_err(|e| SplitError::Usage(format!("cannot start {jobs:?} worker threads: {e}")))?;
    Ok(pool.install(f))
}

/// Splits one artifact directory. Nothing appears in the output directory
/// unless the whole split succeeds.
pub fn split_artifact(
    opts: &SplitOptions,
    progress: &dyn Progress,
) -> Result<SplitReport, SplitError> {
    with_pool(opts.jobs, || split_artifact_inner(opts, progress))?
}

fn split_artifact_inner(
    opts: &SplitOptions,
    progress: &dyn Progress,
) -> Result<SplitReport, SplitError> {
    check_name("artifact prefix", &opts.artifact_prefix)?;
    check_dirs(&opts.artifact_dir, &opts.output_dir)?;
    let staging = StagingDir::new(&opts.output_dir).map_err(FsError::from)?;
    let generic = OsString::from(format!("{}_generic", opts.artifact_prefix));
    if let Some(c) = staging.conflicts(&[generic]).into_iter().next() {
        return Err(SplitError::Usage(format!(
            "{}: already exists",
            c.display()
        )));
    }
    let report = split_into(opts, staging.path(), progress)?;
    if let Some(c) = staging.conflicts(&output_names(&report)).into_iter().next() {
        return Err(SplitError::Usage(format!(
            "{}: already exists",
            c.display()
        )));
    }
    staging.commit().map_err(FsError::from)?;
    Ok(report)
}

/// One artifact directory found by [`batch_artifacts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchItem {
    /// The artifact directory.
    pub dir: PathBuf,
    /// Its artifact prefix (directory name without the last `_<family>`).
    pub artifact_prefix: String,
}

/// Artifact directories under `parent` (sorted): subdirectories holding an
/// `artifact_manifest.txt` whose name has a `_<family>` suffix that is not
/// `generic`, as rocm-kpack's batch mode selects them.
pub fn batch_artifacts(parent: &Path) -> Result<Vec<BatchItem>, SplitError> {
    let mut out = Vec::new();
    for n in fsutil::sorted_names(parent).ctx(parent, "read directory")? {
        let dir = parent.join(&n);
        let Some(n) = n.to_str() else { continue };
        let is_dir = fs::symlink_metadata(&dir)
            .map(|m| m.is_dir())
            .unwrap_or(false);
        if !is_dir || !dir.join(crate::manifest::MANIFEST_FILE).is_file() {
            continue;
        }
        let Some((prefix, family)) = n.rsplit_once('_') else {
            continue;
        };
        if family == "generic" || prefix.is_empty() {
            continue;
        }
        out.push(BatchItem {
            dir,
            artifact_prefix: prefix.to_string(),
        });
    }
    Ok(out)
}

/// Splits every artifact directory under `parent` into one output
/// directory. All or nothing: when any artifact fails, every failure is
/// reported and nothing is written.
pub fn split_batch(
    parent: &Path,
    template: &SplitOptions,
    progress: &dyn Progress,
) -> Result<Vec<SplitReport>, SplitError> {
    with_pool(template.jobs, || {
        split_batch_inner(parent, template, progress)
    })?
}

fn split_batch_inner(
    parent: &Path,
    template: &SplitOptions,
    progress: &dyn Progress,
) -> Result<Vec<SplitReport>, SplitError> {
    check_dirs(parent, &template.output_dir)?;
    let items = batch_artifacts(parent)?;
    let staging = StagingDir::new(&template.output_dir).map_err(FsError::from)?;
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    let mut names: Vec<OsString> = Vec::new();
    for item in &items {
        let opts = SplitOptions {
            artifact_dir: item.dir.clone(),
            artifact_prefix: item.artifact_prefix.clone(),
            ..template.clone()
        };
        // Two artifact dirs with one prefix (e.g. `x_gfx110X` and `x_gfx120X`
        // in one parent) would write the same outputs.
        let sub = staging
            .path()
            .join(format!(".{}", reports.len() + errors.len()));
        let r = fs::create_dir(&sub)
            .ctx(&sub, "create directory")
            .map_err(SplitError::from)
            .and_then(|_| split_into(&opts, &sub, progress));
        match r {
            Ok(r) => {
                for n in output_names(&r) {
                    let from = sub.join(&n);
                    let to = staging.path().join(&n);
                    if to.exists() || names.contains(&n) {
                        errors.push(SplitError::Usage(format!(
                            "{}: output {} is produced by two artifact directories",
                            item.dir.display(),
                            n.to_string_lossy()
                        )));
                        continue;
                    }
                    fs::rename(&from, &to).ctx(&to, "rename")?;
                    names.push(n);
                }
                fs::remove_dir_all(&sub).ctx(&sub, "remove")?;
                reports.push(r);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(if errors.len() == 1 {
            errors.remove(0)
        } else {
            SplitError::Batch(errors)
        });
    }
    if let Some(c) = staging.conflicts(&names).into_iter().next() {
        return Err(SplitError::Usage(format!(
            "{}: already exists",
            c.display()
        )));
    }
    staging.commit().map_err(FsError::from)?;
    Ok(reports)
}

/// A [`Progress`] counting units, for tests and `--json` summaries.
#[derive(Debug, Default)]
pub struct CountingProgress {
    /// Units advanced.
    pub done: AtomicU64,
}

impl Progress for CountingProgress {
    fn advance(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusion_rules() {
        let ex = vec!["gfx906".to_string(), "gfx90a:xnack-".to_string()];
        assert!(is_excluded("gfx906", &ex));
        assert!(is_excluded("gfx906:xnack-", &ex));
        assert!(!is_excluded("gfx9060", &ex));
        assert!(is_excluded("gfx90a:xnack-", &ex));
        assert!(!is_excluded("gfx90a:xnack+", &ex));
        assert!(!is_excluded("gfx90a", &ex));
    }

    #[test]
    fn names_checked() {
        assert!(check_name("p", "blas_lib").is_ok());
        for bad in ["", ".", "..", ".x", "a/b", "a\\b"] {
            assert!(check_name("p", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sub_slice_offsets() {
        let v = vec![0u8; 10];
        assert_eq!(offset_in(&v, &v[3..5]), Some(3));
        let w = vec![0u8; 2];
        assert_eq!(offset_in(&v, &w), None);
    }
}
