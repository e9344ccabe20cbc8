//! Scan: walk every prefix of the artifact, classify each regular file
//! (generic, database file of one arch, fat binary) and, for fat binaries,
//! write the host-only rewrite and record where every code object lives
//! (the input itself, the spill file of its decompressed CCOB, or, with
//! zstd archives, its frame, compressed while the CCOB decompressed).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use rayon::prelude::*;
use rocpack_kpack::{Compression, Marker};

use super::filter::ArchFilter;
use super::{FatBinarySummary, Progress, SplitError, SplitOptions};
use crate::databases;
use crate::fsutil::{self, FsError, IoContext};
use crate::manifest::ArtifactManifest;
use crate::walk::{self, EntryKind};

/// What every file of a scan shares.
struct ScanCx<'a> {
    opts: &'a SplitOptions,
    spill: &'a Spill,
}

/// Spill files of CCOBs: each compressed bundle is decompressed exactly
/// once, and memory does not grow with the payload, the number of code
/// objects, architectures or workers. With zstd archives, code objects are
/// compressed as the payload streams by and only their frames are spilled
/// ([`Spill::compress_payload`]); otherwise the decompressed payload is,
/// and code objects are read back as plain file ranges.
pub(super) struct Spill {
    dir: tempfile::TempDir,
    next: AtomicU64,
    /// Code objects queued for compression, over every bundle being
    /// walked (the bound on their buffers).
    in_flight: AtomicUsize,
}

impl Spill {
    pub(super) fn new(stage: &Path) -> Result<Spill, SplitError> {
        let dir = tempfile::Builder::new()
            .prefix(".spill-")
            .tempdir_in(stage)
            .ctx(stage, "create spill directory")?;
        Ok(Spill {
            dir,
            next: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Decompresses the CCOB at the start of `bytes` (described by
    /// `index`) into a new spill file, streaming: memory is one bounded
    /// chunk, not the payload. Returns the file and what the single pass
    /// found (for the exact layout).
    fn write_payload(
        &self,
        bytes: &[u8],
        index: &rocpack_bundle::BundleIndex,
        bundle_err: &dyn Fn(rocpack_bundle::Error) -> SplitError,
    ) -> Result<(PathBuf, rocpack_bundle::WalkSummary), SplitError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let p = self.dir.path().join(format!("{n}.bundle"));
        let f = File::create(&p).ctx(&p, "create decompressed bundle")?;
        let mut w = BufWriter::with_capacity(1 << 20, f);
        let walk = match rocpack_bundle::copy_payload(bytes, index, &Default::default(), &mut w) {
            Ok(walk) => walk,
            Err(rocpack_bundle::CopyError::Bundle(e)) => return Err(bundle_err(e)),
            Err(rocpack_bundle::CopyError::Io(e)) => {
                return Err(FsError::new(&p, "write decompressed bundle", e).into())
            }
        };
        w.into_inner()
            .map_err(|e| e.into_error())
            .ctx(&p, "write decompressed bundle")?;
        Ok((p, walk))
    }

    /// Decompresses the CCOB at the start of `bytes` (described by
    /// `index`, whose entries must not overlap) once, streaming, and
    /// compresses each code object into a zstd frame (`level`, exactly as
    /// the write stage would) as soon as its last byte is out, on the pool
    /// while decompression goes on. Frames go to a spill file; code
    /// objects larger than [`INMEM_MAX`] are spilled raw instead (the write
    /// stage compresses them). Memory: code objects queued for the other
    /// workers (fewer than `--jobs`, over all walks), the one each walk
    /// fills and their reusable buffers: O(jobs) buffers of at most
    /// [`INMEM_MAX`] bytes.
    /// Frames are the bytes the write stage would make
    /// ([`rocpack_kpack::compress_frame`]), so outputs do not change.
    /// Returns the raw spill file, what the pass found and, per entry, its
    /// frame.
    fn compress_payload(
        &self,
        input: &Path,
        bytes: &[u8],
        index: &rocpack_bundle::BundleIndex,
        level: i32,
        keep: &ArchFilter<'_>,
        bundle_err: &dyn Fn(rocpack_bundle::Error) -> SplitError,
    ) -> Result<Precompressed, SplitError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let raw_path = self.dir.path().join(format!("{n}.bundle"));
        let frames_path = self.dir.path().join(format!("{n}.frames"));
        let frames_file = File::create(&frames_path).ctx(&frames_path, "create spill file")?;
        // Code objects of dropped targets are neither compressed nor
        // spilled (the plan never reads them).
        let kept: Vec<bool> = index
            .entries
            .iter()
            .map(|e| !e.id.is_host() && !keep.drops(e.id.target_id()))
            .collect();
        let inmem = |e: &rocpack_bundle::IndexEntry| e.size <= INMEM_MAX;
        let raw_file = if index
            .entries
            .iter()
            .zip(&kept)
            .any(|(e, &k)| k && !inmem(e))
        {
            Some(File::create(&raw_path).ctx(&raw_path, "create decompressed bundle")?)
        } else {
            None
        };
        let shared = FrameSink {
            out: std::sync::Mutex::new((frames_file, 0, vec![None; index.entries.len()])),
            pool: std::sync::Mutex::new(Vec::new()),
            in_flight: &self.in_flight,
            failed: std::sync::Mutex::new(None),
            level,
        };
        // Code objects queued for the other workers (across every bundle
        // being walked); this thread keeps decompressing, or compresses
        // itself when the queue is full.
        let workers = rayon::current_num_threads().saturating_sub(1).max(1);
        let walked = rayon::scope(|s| {
            let shared = &shared;
            let mut cur: Vec<u8> = Vec::new();
            rocpack_bundle::walk_bundle::<rocpack_bundle::CopyError>(
                bytes,
                index,
                &rocpack_bundle::ParseOptions {
                    walk_hash: false,
                    ..Default::default()
                },
                &mut |_| Ok(()),
                &mut |i, off, chunk| {
                    let e = &index.entries[i];
                    if !kept[i] {
                        return Ok(());
                    }
                    if !inmem(e) {
                        use std::os::unix::fs::FileExt;
                        return match &raw_file {
                            Some(f) => f
                                .write_all_at(chunk, e.offset + off)
                                .map_err(rocpack_bundle::CopyError::Io),
                            None => Ok(()),
                        };
                    }
                    if off == 0 {
                        cur = shared.buffer();
                        cur.reserve_exact(e.size as usize);
                    }
                    cur.extend_from_slice(chunk);
                    if cur.len() as u64 == e.size && !shared.stopped() {
                        let buf = std::mem::take(&mut cur);
                        // A worker compresses it while this thread goes on
                        // decompressing; when every worker is busy, this
                        // thread does it (never waits, so never deadlocks).
                        if shared.in_flight.fetch_add(1, Ordering::AcqRel) < workers {
                            s.spawn(move |_| {
                                shared.compress(i, buf);
                                shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                            });
                        } else {
                            shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                            shared.compress(i, buf);
                        }
                    }
                    Ok(())
                },
            )
        });
        let walk = match walked {
            Ok(w) => w,
            Err(rocpack_bundle::CopyError::Bundle(e)) => return Err(bundle_err(e)),
            Err(rocpack_bundle::CopyError::Io(e)) => {
                return Err(FsError::new(&raw_path, "write decompressed bundle", e).into())
            }
        };
        let FrameSink { out, failed, .. } = shared;
        if let Some(e) = failed.into_inner().ok().flatten() {
            return Err(match e {
                FrameError::Zstd(error) => SplitError::Kpack {
                    path: input.to_path_buf(),
                    error,
                },
                FrameError::Io(e) => FsError::new(&frames_path, "write spill file", e).into(),
            });
        }
        let (_, _, offsets) = out
            .into_inner()
            .map_err(|_| SplitError::Usage("internal: frame table poisoned".into()))?;
        // Empty code objects have no frame: the write stage compresses
        // the zero bytes it reads.
        let frames = offsets
            .into_iter()
            .map(|at| {
                at.map(|(offset, len)| Frame {
                    file: frames_path.clone(),
                    offset,
                    len,
                })
            })
            .collect();
        Ok(Precompressed {
            raw: if raw_file.is_some() {
                raw_path
            } else {
                frames_path
            },
            walk,
            frames,
        })
    }
}

/// Largest code object [`Spill::compress_payload`] holds in memory to
/// compress during the scan.
const INMEM_MAX: u64 = 32 << 20;

/// What [`Spill::compress_payload`] made of one CCOB.
struct Precompressed {
    /// File holding the code objects spilled raw (any existing spill file
    /// when there are none: empty code objects are read from it).
    raw: PathBuf,
    walk: rocpack_bundle::WalkSummary,
    /// Per bundle entry, its compressed frame.
    frames: Vec<Option<Frame>>,
}

/// A code object already compressed (one zstd frame) in a spill file.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    pub file: PathBuf,
    pub offset: u64,
    pub len: u64,
}

enum FrameError {
    Zstd(rocpack_kpack::Error),
    Io(std::io::Error),
}

/// Shared by the decompressing thread and the workers compressing the code
/// objects of one CCOB.
struct FrameSink<'a> {
    /// The frames file, its length and each entry's frame (offset, length).
    #[allow(clippy::type_complexity)]
    out: std::sync::Mutex<(File, u64, Vec<Option<(u64, u64)>>)>,
    /// Buffers of compressed code objects, for reuse.
    pool: std::sync::Mutex<Vec<Vec<u8>>>,
    in_flight: &'a AtomicUsize,
    failed: std::sync::Mutex<Option<FrameError>>,
    level: i32,
}

impl FrameSink<'_> {
    fn buffer(&self) -> Vec<u8> {
        let mut b = self
            .pool
            .lock()
            .ok()
            .and_then(|mut p| p.pop())
            .unwrap_or_default();
        b.clear();
        b
    }

    fn stopped(&self) -> bool {
        self.failed.lock().map_or(true, |f| f.is_some())
    }

    fn fail(&self, e: FrameError) {
        if let Ok(mut f) = self.failed.lock() {
            f.get_or_insert(e);
        }
    }

    /// Compresses entry `i`'s code object `data` and appends the frame.
    fn compress(&self, i: usize, data: Vec<u8>) {
        if !self.stopped() {
            match rocpack_kpack::compress_frame(&data, self.level) {
                Ok(frame) => self.append(i, &frame),
                Err(e) => self.fail(FrameError::Zstd(e)),
            }
        }
        if let Ok(mut p) = self.pool.lock() {
            p.push(data);
        }
    }

    fn append(&self, i: usize, frame: &[u8]) {
        use std::io::Write;
        let Ok(mut out) = self.out.lock() else {
            return;
        };
        let (f, len, table) = &mut *out;
        match f.write_all(frame) {
            Ok(()) => {
                table[i] = Some((*len, frame.len() as u64));
                *len += frame.len() as u64;
            }
            Err(e) => self.fail(FrameError::Io(e)),
        }
    }
}

/// One code object found by the scan.
#[derive(Debug, Clone)]
pub(super) struct KernelRef {
    /// Its TOC key (`<prefix>/<relpath>#<bundle index>`).
    pub key: String,
    /// Its target ID.
    pub arch: String,
    /// Its full bundle entry ID.
    pub bundle_id: String,
    /// The file holding the code object: the input itself, or the spill
    /// file of its decompressed CCOB.
    pub file: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Byte offset of the code object in `file`.
    pub offset: u64,
    /// The artifact prefix of the binary it comes from.
    pub prefix: String,
    /// Its place in the original bundle (`metadata.bundle`), when the
    /// bundle can be rebuilt exactly.
    pub place: Option<rocpack_kpack::rmpv::Value>,
    /// Targets of every device code object of its bundle
    /// (`metadata.bundle_targets`).
    pub bundle_targets: Arc<[String]>,
    /// Its zstd frame, when the scan compressed it already (then `file`
    /// and `offset` are not read).
    pub frame: Option<Frame>,
}

/// Classification of one regular file.
pub(super) enum Class {
    /// Copied to the generic artifact as it is.
    Generic,
    /// A database file of this architecture, claimed by this handler.
    Database(databases::DatabaseKind, String),
    /// A fat binary (its host-only rewrite is already written).
    Fat(FatOutcome),
    /// A COFF object (`.obj`) with device code: copied to the generic
    /// artifact as it is (COFF objects are not split; the image they are
    /// linked into is), with a warning; `kpack verify` reports it too.
    FatObject {
        /// Bundles in its `.hip_fatbin`.
        bundles: usize,
    },
}

/// What a fat binary holds.
pub(super) struct FatOutcome {
    /// Its code objects (`prefix` not yet filled in).
    pub kernels: Vec<KernelRef>,
    /// Its report line.
    pub summary: FatBinarySummary,
}

/// One prefix of the input, walked and classified.
pub(super) struct PrefixScan {
    /// The manifest prefix.
    pub prefix: String,
    /// Its entries, sorted (directories before what they hold).
    pub entries: Vec<walk::Entry>,
    /// The class of each entry (`None` for directories and symlinks).
    pub classes: Vec<Option<Class>>,
}

/// The scanned input.
pub(super) struct Scan {
    /// Prefixes present in the input, manifest order.
    pub prefixes: Vec<PrefixScan>,
    /// Manifest prefixes absent from the input.
    pub missing: Vec<String>,
}

/// Walks every manifest prefix (sorted, symlink-safe), creates the generic
/// artifact's directory skeleton under `generic_root` (so host-only
/// rewrites can be written as soon as they are made) and classifies every
/// regular file in parallel. Compressed bundles are decompressed once, into
/// `spill`; every layout problem of a binary is reported before any of its
/// bundles is decompressed.
pub(super) fn scan(
    opts: &SplitOptions,
    manifest: &ArtifactManifest,
    generic_root: &Path,
    spill: &Spill,
    progress: &dyn Progress,
) -> Result<Scan, SplitError> {
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

    super::mkdir_p(generic_root)?;
    for scan in &scans {
        let groot = fsutil::join_rel(generic_root, &scan.prefix);
        super::mkdir_p(&groot)?;
        for e in &scan.entries {
            if e.kind == EntryKind::Dir {
                super::mkdir_p(&fsutil::join_rel(&groot, &e.rel))?;
            }
        }
    }

    let cx = ScanCx { opts, spill };
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
        let groot = fsutil::join_rel(generic_root, &scan.prefix);
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
    Ok(Scan {
        prefixes: scans,
        missing,
    })
}

fn image_err(path: &Path, e: rocpack_image::Error) -> SplitError {
    SplitError::Image {
        path: path.to_path_buf(),
        offset: e.offset().unwrap_or(0),
        error: e,
    }
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
pub(super) fn offset_in(whole: &[u8], part: &[u8]) -> Option<u64> {
    let base = whole.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    let off = p.checked_sub(base)?;
    (off.checked_add(part.len())? <= whole.len()).then_some(off as u64)
}

/// What the code objects of one input file (an ELF file, or every member
/// of an archive) add up to.
struct Collector<'a> {
    /// The input file and its mapping.
    path: &'a Path,
    map: &'a memmap2::Mmap,
    spill: &'a Spill,
    /// The split's options (with zstd archives, code objects of CCOBs are
    /// compressed as they are decompressed).
    opts: &'a SplitOptions,
    kernels: Vec<KernelRef>,
    archs: BTreeSet<String>,
    /// (bundles, device code objects).
    counts: (u64, u64),
}

impl Collector<'_> {
    /// Collects the code objects of the bundles of one analysed ELF or PE
    /// image (`image` is a sub-slice of the mapped file).
    fn collect(
        &mut self,
        image: &[u8],
        bundles: &[rocpack_elf::BundleInfo],
        kernel_name: &str,
    ) -> Result<(), SplitError> {
        let (path, spill, map) = (self.path, self.spill, self.map);
        let whole: &[u8] = map;
        let keep = ArchFilter::new(self.opts);
        for b in bundles {
            let bytes = usize::try_from(b.file_offset)
                .ok()
                .zip(usize::try_from(b.len).ok())
                .and_then(|(a, n)| image.get(a..a.checked_add(n)?))
                .ok_or_else(|| {
                    SplitError::Usage(format!(
                        "{}: internal: bundle {} outside the file",
                        path.display(),
                        b.index
                    ))
                })?;
            let bundle_off = offset_in(whole, bytes).unwrap_or(b.file_offset);
            let bundle_err = |e: rocpack_bundle::Error| SplitError::Bundle {
                path: path.to_path_buf(),
                offset: bundle_off + e.offset().unwrap_or(0),
                error: e,
            };
            // The entry table alone (for a CCOB: the payload's prefix); a
            // CCOB is then decompressed once, streaming, into its spill
            // file, and an uncompressed bundle is walked in place (size and
            // zero-gap checks for the exact layout).
            let index =
                rocpack_bundle::index_bundle(bytes, &Default::default()).map_err(bundle_err)?;
            self.counts.0 += 1;
            // Every entry but the host's must name an AMDGPU target, by the
            // one rule verify and recombine use: device code under an ID
            // nobody can load is refused, never dropped (it would be stored
            // nowhere).
            for (position, e) in index.entries.iter().enumerate() {
                if e.id.kind() == Some("host") {
                    continue;
                }
                if let Err(expected) = e.id.check_amdgpu() {
                    return Err(SplitError::Usage(format!(
                        "{}: byte offset {bundle_off}: bundle {} entry {position} `{}` ({} bytes of code) does not name an AMDGPU target (expected {expected}); refusing to split: its code object would be stored nowhere",
                        path.display(),
                        b.index,
                        e.id,
                        e.size
                    )));
                }
            }
            // The bundle's device targets (recorded in every entry's
            // metadata, so verify can tell an arch the binary never had
            // from one whose archive was lost). All of them, whatever
            // `--exclude-arch` / `--gpu-targets` keep: a kept archive is
            // byte for byte the one an unfiltered split writes.
            let stored: Arc<[String]> = index
                .entries
                .iter()
                .filter(|e| !e.id.is_host())
                .map(|e| e.id.target_id().to_string())
                .collect();
            let mut frames = Vec::new();
            let (spilled, walk) = if index.ccob.is_some() {
                match self.opts.compression {
                    // Decompression and compression overlap; only frames
                    // are spilled.
                    Compression::Zstd { level } if index.overlaps().is_empty() => {
                        let p = spill.compress_payload(
                            path,
                            bytes,
                            &index,
                            level,
                            &keep,
                            &bundle_err,
                        )?;
                        frames = p.frames;
                        (Some(p.raw), p.walk)
                    }
                    _ => {
                        let (file, walk) = spill.write_payload(bytes, &index, &bundle_err)?;
                        (Some(file), walk)
                    }
                }
            } else {
                let walk = rocpack_bundle::walk_bundle::<rocpack_bundle::Error>(
                    bytes,
                    &index,
                    &Default::default(),
                    &mut |_| Ok(()),
                    &mut |_, _, _| Ok(()),
                )
                .map_err(bundle_err)?;
                (None, walk)
            };
            let key = rocpack_kpack::toc_key(kernel_name, b.index as u64);
            let layout = rocpack_bundle::BundleLayout::of_index(&index, &walk);
            for (position, entry) in index.entries.iter().enumerate() {
                if entry.id.is_host() {
                    continue;
                }
                let place = layout.as_ref().and_then(|l| {
                    rocpack_kpack::bundle_meta::encode(l, position, |i| {
                        index.entries.get(i).is_some_and(|e| !e.id.is_host())
                    })
                });
                let arch = entry.id.target_id().to_string();
                self.counts.1 += 1;
                self.archs.insert(arch.clone());
                // Offsets are relative to the (decompressed) bundle; the
                // index checked every entry lies inside it.
                let (file, offset) = match &spilled {
                    Some(f) => (f.clone(), entry.offset),
                    None => (path.to_path_buf(), bundle_off + entry.offset),
                };
                self.kernels.push(KernelRef {
                    key: key.clone(),
                    arch,
                    bundle_id: entry.id.to_string(),
                    file,
                    size: entry.size,
                    offset,
                    prefix: String::new(),
                    place,
                    bundle_targets: stored.clone(),
                    frame: frames.get(position).cloned().flatten(),
                });
            }
            // Code objects are read back from their file range, not from here.
            release(map, offset_in(whole, bytes).map(|o| (o, bytes.len())));
        }
        Ok(())
    }
}

/// Unmaps the pages of `map` this process has touched, in `range` (byte
/// offset, length) or everywhere. A page fault on a file mapping maps the
/// pages around the byte read (fault-around; on current kernels the whole
/// page-cache folio, up to 2 MiB), so walking the bundles of a 1.3 GB
/// library would otherwise keep hundreds of MiB resident until the file is
/// done. Bundle headers are read with positioned reads instead (see
/// `FileRange`); this covers the host rewrite and the bundle walks.
/// The pages stay in the page cache; a later read faults them in again.
#[allow(unsafe_code)]
fn release(map: &memmap2::Mmap, range: Option<(u64, usize)>) {
    use memmap2::UncheckedAdvice::DontNeed;
    // SAFETY: `map` is a read-only private file mapping: MADV_DONTNEED only
    // drops this process's page-table entries for it, and the next access
    // reads the same file bytes again (no private copy exists to lose).
    // Slices into the mapping stay valid. Failure only costs memory.
    let _ = match range {
        Some((off, len)) => match usize::try_from(off) {
            Ok(off) if len > 0 => unsafe { map.unchecked_advise_range(DontNeed, off, len) },
            _ => Ok(()),
        },
        None => unsafe { map.unchecked_advise(DontNeed) },
    };
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
    use rocpack_image::FileType;
    let mut head = vec![0u8; rocpack_image::HEAD_LEN.min(size as usize)];
    let n = if size == 0 {
        0
    } else {
        let mut f = File::open(path).ctx(path, "open")?;
        read_up_to(&mut f, &mut head).ctx(path, "read")?
    };
    let magic = &head[..n];
    let kind = rocpack_image::detect(magic);
    if matches!(
        kind,
        FileType::Elf { elf64_le: true } | FileType::Archive | FileType::Pe { pe32_plus: true }
    ) {
        if let Some(fat) = split_fat(cx, prefix, rel, path, host_dst, mode)? {
            return Ok(Class::Fat(fat));
        }
    } else if matches!(
        kind,
        FileType::Elf { elf64_le: false } | FileType::Pe { pe32_plus: false }
    ) {
        // ELFCLASS32, big-endian or PE32: HIP binaries are neither, so one
        // with device code cannot be split; copying it as a generic file
        // would ship a fat binary nobody checks.
        let (_file, map) = map_file(path)?;
        if crate::inspect::carries_device_code(&map) {
            let flavour = if kind == (FileType::Pe { pe32_plus: false }) {
                "PE32 (32-bit)".to_string()
            } else {
                format!("{} ELF", elf_flavour(magic))
            };
            return Err(SplitError::Usage(format!(
                "{}: a {flavour} file carrying HIP device code (`.hip_fatbin` or an offload bundle): only 64-bit little-endian fat binaries can be split; refusing to copy it into the generic artifact",
                path.display(),
            )));
        }
    }
    if let FileType::Coff { .. } = kind {
        let (_file, map) = map_file(path)?;
        if let Ok(info) = rocpack_image::pe::analyze(&map) {
            if info.has_device_code() {
                return Ok(Class::FatObject {
                    bundles: info.bundles.len(),
                });
            }
        }
    }
    if let Some((kind, arch)) = databases::classify(&cx.opts.databases, rel) {
        return Ok(Class::Database(kind, arch));
    }
    Ok(Class::Generic)
}

/// `ELFCLASS32 little-endian`, `ELFCLASS64 big-endian`, … from `e_ident`.
fn elf_flavour(magic: &[u8]) -> String {
    let class = match magic.get(4) {
        Some(1) => "ELFCLASS32".to_string(),
        Some(2) => "ELFCLASS64".to_string(),
        c => format!("ELF class {c:?}"),
    };
    let data = match magic.get(5) {
        Some(1) => "little-endian",
        Some(2) => "big-endian",
        _ => "unknown byte order",
    };
    format!("{class} {data}")
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

/// Analyses and rewrites one ELF file, archive or PE32+ image; `None` if it
/// has no device code.
fn split_fat(
    cx: &ScanCx<'_>,
    prefix: &str,
    rel: &str,
    path: &Path,
    host_dst: &Path,
    mode: u32,
) -> Result<Option<FatOutcome>, SplitError> {
    let (opts, spill) = (cx.opts, cx.spill);
    let (file, map) = map_file(path)?;
    let data: &[u8] = &map;
    // Bundle headers are read through positioned reads of the file, not
    // the mapping: only the host part of a large input is ever faulted in.
    let src = rocpack_bundle::FileRange::new(&file, 0, data.len() as u64);
    let kernel_name = format!("{prefix}/{rel}");
    let depth = rel.split('/').count().saturating_sub(1);
    let mut collector = Collector {
        path,
        map: &map,
        spill,
        opts,
        kernels: Vec::new(),
        archs: BTreeSet::new(),
        counts: (0, 0),
    };
    let host_len = if rocpack_elf::is_archive(data) {
        let members = rocpack_elf::archive_members(data).map_err(|e| elf_err(path, e))?;
        let mut member_seen = MemberNames::default();
        let mut any = false;
        for m in &members {
            let member_err = |e: rocpack_elf::Error| {
                elf_err(
                    path,
                    rocpack_elf::Error::Member {
                        name: m.name.clone(),
                        offset: m.header_offset,
                        source: Box::new(e),
                    },
                )
            };
            // Bundle headers through positioned reads, as for ELF files.
            let at = offset_in(data, m.data).ok_or_else(|| {
                SplitError::Usage(format!(
                    "{}: internal: archive member `{}` is not inside the file",
                    path.display(),
                    m.name
                ))
            })?;
            let member_src = rocpack_bundle::Window::new(&src, at, m.data.len() as u64);
            let info = match rocpack_elf::analyze_in(m.data, &member_src) {
                Ok(i) => i,
                // Members that are not ELF (text, other archives) are kept
                // as they are, unless they hide device code (a nested
                // archive of fat objects, a raw bundle): that would be
                // copied into the generic artifact unsplit.
                Err(rocpack_elf::Error::NotElf) => {
                    if crate::inspect::carries_device_code(m.data) {
                        return Err(SplitError::Usage(format!(
                            "{}: archive member `{}` (header at byte offset {}) is not an ELF object but carries HIP device code ({}); nested archives and raw bundles inside archives cannot be split; refusing to copy it into the generic artifact",
                            path.display(),
                            m.name,
                            m.header_offset,
                            if rocpack_elf::is_archive(m.data) { "a nested `ar` archive" } else { "`.hip_fatbin` or an offload bundle" }
                        )));
                    }
                    continue;
                }
                Err(e @ rocpack_elf::Error::Unsupported { .. }) => {
                    if crate::inspect::carries_device_code(m.data) {
                        return Err(member_err(e));
                    }
                    continue;
                }
                Err(e) => return Err(member_err(e)),
            };
            if !info.has_device_code() {
                continue;
            }
            any = true;
            let member_name = format!("{kernel_name}({})", member_seen.label(&m.name));
            collector.collect(m.data, &info.bundles, &member_name)?;
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
        // Members are read and split one at a time (split ones through a
        // spill file beside the output), the archive written range by range.
        release(&map, None);
        let dir = host_dst.parent().unwrap_or(Path::new("."));
        let spill = tempfile::tempfile_in(dir).ctx(dir, "create a spill file")?;
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(host_dst)
            .ctx(host_dst, "create")?;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, &out);
        let len = rocpack_elf::split_archive_to(data, &src, &mut marker_for, &spill, &mut w)
            .map_err(|e| elf_err(path, e))?;
        std::io::Write::flush(&mut w).ctx(host_dst, "write")?;
        drop(w);
        drop(out);
        fsutil::set_mode(host_dst, mode)?;
        release(&map, None);
        len as usize
    } else if matches!(
        rocpack_image::detect(data),
        rocpack_image::FileType::Pe { .. }
    ) {
        let info = rocpack_image::pe::analyze_in(data, &src).map_err(|e| image_err(path, e))?;
        if !info.has_device_code() {
            return Ok(None);
        }
        let marker = Marker::for_split(&opts.artifact_prefix, depth, kernel_name.clone()).encode();
        release(&map, None);
        // Written range by range from positioned reads, as for ELF files.
        let out = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(host_dst)
            .ctx(host_dst, "create")?;
        let len = rocpack_image::pe::split_to(data, &src, &info, &marker, &out)
            .map_err(|e| image_err(path, e))?;
        drop(out);
        fsutil::set_mode(host_dst, mode)?;
        release(&map, None);
        collector.collect(data, &info.bundles, &kernel_name)?;
        len as usize
    } else {
        let info = match rocpack_elf::analyze_in(data, &src) {
            Ok(i) => i,
            // An ELF we cannot read (32-bit, big-endian, PN_XNUM, odd
            // e_type) is copied as it is only when it has no device code;
            // keeping device code in the generic package silently would
            // ship a fat binary that verify cannot see.
            Err(e @ rocpack_elf::Error::Unsupported { .. }) => {
                if crate::inspect::carries_device_code(data) {
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
        release(&map, None);
        // Written (into the staging directory) range by range, copied from
        // the file through positioned reads: neither the host part nor the
        // output is held in memory, and it is done before the device code
        // is walked.
        let out = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(host_dst)
            .ctx(host_dst, "create")?;
        let len =
            rocpack_elf::split_host_to(data, &src, &marker, &out).map_err(|e| elf_err(path, e))?;
        drop(out);
        fsutil::set_mode(host_dst, mode)?;
        release(&map, None);
        collector.collect(data, &info.bundles, &kernel_name)?;
        len as usize
    };
    let Collector {
        kernels,
        archs,
        counts,
        ..
    } = collector;
    let summary = FatBinarySummary {
        path: kernel_name,
        bundles: counts.0,
        code_objects: counts.1,
        architectures: archs.into_iter().collect(),
        input_bytes: data.len() as u64,
        output_bytes: host_len as u64,
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
