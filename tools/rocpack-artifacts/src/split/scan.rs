//! Scan: walk every prefix of the artifact, classify each regular file
//! (generic, database file of one arch, fat binary) and, for fat binaries,
//! write the host-only rewrite and record where every code object lives
//! (the input itself, the spill file of its decompressed CCOB, or, with
//! zstd archives, its frame, compressed while the CCOB decompressed). With
//! uncompressed archives a CCOB is not decompressed here: the write stage
//! decompresses it once, straight into the archives ([`DeferredCcob`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rayon::prelude::*;
use rocpack_bundle::FileIdent;
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
/// compressed as the payload streams by and only their frames are spilled;
/// otherwise (and for code objects too large to hold) the decompressed
/// code objects are, at their payload offsets, and read back as plain
/// file ranges ([`Spill::walk_ccob`]).
pub(super) struct Spill {
    dir: tempfile::TempDir,
    next: AtomicU64,
    /// Code objects queued for compression, over every bundle being
    /// walked (the bound on their buffers).
    in_flight: AtomicUsize,
    /// Their bytes; see [`QUEUE_BUDGET`].
    queued: AtomicU64,
    /// Code-object buffers for reuse, over every walk: at most one per
    /// walking thread plus one per queued code object exist, and the kept
    /// ones hold at most [`POOL_KEEP`] bytes.
    pool: Mutex<Vec<Vec<u8>>>,
    /// Fat binaries whose bytes the write stage reads again (code objects
    /// of uncompressed bundles, CCOBs left for it), as the scan found them:
    /// [`Spill::check_inputs`].
    inputs: Mutex<Vec<(PathBuf, FileIdent)>>,
    /// Memory the CCOB walks under way may hold (estimated: decoder window
    /// and largest buffer), over every walk; see [`WALK_BUDGET`].
    walking: (Mutex<u64>, Condvar),
}

/// Memory the CCOB walks under way may hold at once (decoder windows and
/// code-object buffers, as [`Spill::admit`] estimates them): more threads
/// than fit wait for a walk to end, so peak memory does not grow with
/// `--jobs` (a CCOB's decoder keeps a window as large as its payload, up to
/// the decoder's 128 MiB limit). A walk larger than the budget runs alone.
const WALK_BUDGET: u64 = 96 << 20;

/// How long a pool thread waiting for [`Spill::admit`] with nothing to run
/// sleeps before it looks for pool work again.
const ADMIT_POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// Code-object bytes the CCOB walks may queue for the other workers to
/// compress, over every walk; beyond it (unless the queue is empty) the
/// walking thread compresses the code object itself. With the walk budget
/// this keeps peak memory from growing with `--jobs`.
const QUEUE_BUDGET: u64 = 64 << 20;

/// Capacity of the code-object buffers kept for reuse once their code
/// objects are compressed (outside the compressors' memory budget, so
/// small: it saves the page faults of fresh buffers, not memory).
const POOL_KEEP: u64 = 16 << 20;

/// A CCOB walk admitted by [`Spill::admit`]; leaving the budget on drop.
struct Admitted<'a> {
    spill: &'a Spill,
    cost: u64,
    /// The same bytes, declared to the compressors' memory budget: while a
    /// large decoder window is held, fewer level-19/22 contexts run.
    _held: rocpack_bundle::memory::Held,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let (m, cv) = &self.spill.walking;
        let mut w = m.lock().unwrap_or_else(|p| p.into_inner());
        *w = w.saturating_sub(self.cost);
        cv.notify_all();
    }
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
            queued: AtomicU64::new(0),
            inputs: Mutex::new(Vec::new()),
            pool: Mutex::new(Vec::new()),
            walking: (Mutex::new(0), Condvar::new()),
        })
    }

    /// Records what fat binary `path` (open as `file`) is as the scan reads
    /// it.
    fn note_input(&self, path: &Path, file: &File) -> Result<(), SplitError> {
        let stamp = FileIdent::of(&file.metadata().ctx(path, "stat")?);
        if let Ok(mut v) = self.inputs.lock() {
            v.push((path.to_path_buf(), stamp));
        }
        Ok(())
    }

    /// Fails if a fat binary changed (size, modification time, inode) since
    /// the scan read it: its host rewrite and its code objects, copied or
    /// decompressed by the write stage, could come from different bytes.
    /// Called once every output is written, before the outputs are
    /// published.
    pub(super) fn check_inputs(&self) -> Result<(), SplitError> {
        let inputs = self
            .inputs
            .lock()
            .map_err(|_| SplitError::Usage("internal: input list poisoned".into()))?;
        for (path, was) in inputs.iter() {
            let now = std::fs::metadata(path).map(|m| FileIdent::of(&m));
            if now.as_ref().ok() != Some(was) {
                return Err(SplitError::Usage(format!(
                    "{}: changed while it was being split ({}); nothing was written",
                    path.display(),
                    match now {
                        Ok(now) => difference(was, &now),
                        Err(e) => format!("now: {e}"),
                    }
                )));
            }
        }
        Ok(())
    }

    /// Waits until a walk costing `cost` bytes fits [`WALK_BUDGET`] (or no
    /// walk is under way). The caller must not wait for other pool work
    /// while it holds the admission (it could run a walk that waits here).
    ///
    /// A pool thread that waits runs pending pool work meanwhile (the
    /// code objects the admitted walk queued for compression, other
    /// bundles' tasks): when bundles are so large that one walk takes the
    /// whole budget (bundles of 20+ targets), the walking thread
    /// decompresses and every other thread compresses, instead of sitting
    /// idle here while the walker does both.
    fn admit(&self, cost: u64) -> Admitted<'_> {
        let (m, cv) = &self.walking;
        // A poisoned lock (a panic elsewhere) only loses the bound.
        let mut w = m.lock().unwrap_or_else(|p| p.into_inner());
        let in_pool = rayon::current_thread_index().is_some();
        while *w > 0 && *w + cost > WALK_BUDGET {
            if in_pool {
                drop(w);
                // Nothing pending: sleep until a walk ends or queues a
                // code object, or a little while (other pool work comes
                // without a notification).
                let ran = rayon::yield_now() == Some(rayon::Yield::Executed);
                w = m.lock().unwrap_or_else(|p| p.into_inner());
                if !ran && *w > 0 && *w + cost > WALK_BUDGET {
                    w = cv
                        .wait_timeout(w, ADMIT_POLL)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            } else {
                w = cv.wait(w).unwrap_or_else(|p| p.into_inner());
            }
        }
        *w += cost;
        drop(w);
        // Then the compressors' budget: the window waits for running
        // compressions to return what it needs (never with the lock held).
        Admitted {
            spill: self,
            cost,
            _held: rocpack_bundle::memory::hold(cost),
        }
    }

    fn buffer(&self) -> Vec<u8> {
        self.pool
            .lock()
            .ok()
            .and_then(|mut p| p.pop())
            .unwrap_or_default()
    }

    /// Keeps `b` for reuse while the kept buffers' capacity stays within
    /// [`POOL_KEEP`] (it is freed otherwise).
    fn give_back(&self, b: Vec<u8>) {
        if let Ok(mut p) = self.pool.lock() {
            let kept: usize = p.iter().map(Vec::capacity).sum();
            if (kept + b.capacity()) as u64 <= POOL_KEEP {
                p.push(b);
            }
        }
    }

    /// Decompresses the CCOB `src` (described by `index`) once, streaming,
    /// reading it with positioned reads (the compressed payload is never
    /// mapped). With zstd archives and entries that do not overlap, each
    /// code object up to [`INMEM_MAX`] bytes is decoded straight into a
    /// buffer and compressed into a zstd frame (`level`, exactly as the
    /// write stage would: [`rocpack_kpack::compress_frame`], so outputs do
    /// not change) on the pool while decompression goes on; frames go to a
    /// spill file. Every other kept code object is written raw to a spill
    /// file at its payload offset (read back as a file range). Code objects
    /// of dropped targets are decoded and dropped. Memory: the decoder, a
    /// chunk, and O(jobs) code-object buffers of at most [`INMEM_MAX`]
    /// bytes (one per walking thread, one per queued code object).
    /// Returns the raw spill file, what the pass found and, per entry, its
    /// frame.
    fn walk_ccob(
        &self,
        input: &Path,
        src: &rocpack_bundle::FileRange<'_>,
        index: &rocpack_bundle::BundleIndex,
        compression: Compression,
        keep: &ArchFilter<'_>,
        bundle_err: &dyn Fn(rocpack_bundle::Error) -> SplitError,
    ) -> Result<Precompressed, SplitError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let raw_path = self.dir.path().join(format!("{n}.bundle"));
        let frames_path = self.dir.path().join(format!("{n}.frames"));
        let plan = CcobPlan::new(index, compression, keep);
        let raw_file = if plan.any_raw(index) || plan.level.is_none() {
            Some(File::create(&raw_path).ctx(&raw_path, "create decompressed bundle")?)
        } else {
            None
        };
        let frames_file = match plan.level {
            Some(_) => Some(File::create(&frames_path).ctx(&frames_path, "create spill file")?),
            None => None,
        };
        let shared = FrameSink {
            out: Mutex::new((frames_file, 0, vec![None; index.entries.len()])),
            spill: self,
            failed: Mutex::new(None),
            level: plan.level.unwrap_or_default(),
        };
        let (kept, inmem) = (&plan.kept, &plan.inmem);
        // Code objects queued for the other workers (across every bundle
        // being walked); this thread keeps decompressing, or compresses
        // itself when the queue is full.
        let workers = rayon::current_num_threads().saturating_sub(1).max(1);
        let cost = plan.cost(index);
        let walked = rayon::scope(|s| {
            let mut target = CcobTarget {
                index,
                kept,
                inmem,
                raw: raw_file.as_ref(),
                shared: &shared,
                scope: s,
                workers,
            };
            // Released as soon as the decoder is gone, before this scope
            // waits for (and may run) other pool work.
            let _admitted = self.admit(cost);
            rocpack_bundle::walk_entries::<rocpack_bundle::CopyError>(
                src,
                index,
                &rocpack_bundle::ParseOptions {
                    walk_hash: false,
                    ..Default::default()
                },
                &mut target,
            )
        });
        let walk = match walked {
            Ok(w) => w,
            Err(rocpack_bundle::CopyError::Bundle(e)) => return Err(bundle_err(e)),
            Err(rocpack_bundle::CopyError::Io(e)) => {
                return Err(FsError::new(&raw_path, "write decompressed bundle", e).into())
            }
        };
        let frames = shared.into_frames(input, &frames_path)?;
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

impl Spill {
    /// Decompresses the CCOB `d` once, streaming (positioned reads, as
    /// [`Spill::walk_ccob`]), and writes each code object that has a place
    /// in `places` (per bundle entry: a file and the absolute offset where
    /// its bytes go) straight there with positioned writes; the others are
    /// decoded and dropped. Memory: the decoder and a chunk, admitted like
    /// the scan's walks. Returns what the pass found.
    pub(super) fn walk_ccob_into(
        &self,
        d: &DeferredCcob,
        places: &[Option<(&File, u64)>],
    ) -> Result<rocpack_bundle::WalkSummary, SplitError> {
        let input = File::open(&d.file).ctx(&d.file, "open")?;
        let src = rocpack_bundle::FileRange::new(&input, d.offset, d.len);
        let _admitted = self.admit(d.index.payload_len.min(rocpack_bundle::DECODER_WINDOW_MAX));
        // Decoding and writing overlap: this thread decodes, a writer
        // thread puts the chunks in place (in line, the positioned writes
        // added their cost to the decoding, one CPU doing both).
        let (walked, wrote) = std::thread::scope(|ts| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, u64, Vec<u8>)>(WRITE_QUEUE);
            let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<u8>>();
            let writer = ts.spawn(move || -> std::io::Result<()> {
                use std::os::unix::fs::FileExt;
                for (i, off, buf) in rx {
                    if let Some(Some((f, at))) = places.get(i) {
                        f.write_all_at(&buf, at + off)?;
                    }
                    // The walk may be over: then the buffer just goes.
                    let _ = back_tx.send(buf);
                }
                Ok(())
            });
            let mut target = PlaceTarget {
                places,
                tx: Some(tx),
                back: back_rx,
            };
            let walked = rocpack_bundle::walk_entries::<rocpack_bundle::CopyError>(
                &src,
                &d.index,
                &rocpack_bundle::ParseOptions {
                    walk_hash: false,
                    ..Default::default()
                },
                &mut target,
            );
            // The writer ends once the channel is closed and drained.
            target.tx = None;
            let wrote = writer.join().unwrap_or_else(|_| {
                Err(std::io::Error::other(
                    "the code-object writer thread panicked",
                ))
            });
            (walked, wrote)
        });
        let io_err = |e| -> SplitError {
            FsError::new(&d.file, "write a decompressed code object", e).into()
        };
        // A write error first: it is why the walk stopped, if it did.
        wrote.map_err(io_err)?;
        walked.map_err(|e| match e {
            rocpack_bundle::CopyError::Bundle(error) => SplitError::Bundle {
                path: d.file.clone(),
                offset: d.offset + error.offset().unwrap_or(0),
                error,
            },
            rocpack_bundle::CopyError::Io(e) => io_err(e),
        })
    }
}

/// Chunks (of at most [`rocpack_bundle::CHUNK`] bytes) decoded but not yet
/// written, per [`Spill::walk_ccob_into`].
const WRITE_QUEUE: usize = 16;

/// A CCOB whose code objects go to uncompressed archives: the scan reads
/// its entry table only; the write stage, once every archive's layout is
/// known, decompresses it once straight into them
/// ([`Spill::walk_ccob_into`]), so each code object is written once.
#[derive(Debug)]
pub(super) struct DeferredCcob {
    /// The input file.
    pub file: PathBuf,
    /// Byte offset of the bundle in it.
    pub offset: u64,
    /// The bundle's length.
    pub len: u64,
    /// Its entry table.
    pub index: rocpack_bundle::BundleIndex,
}

/// How a fat binary changed since the scan read it, in words.
fn difference(was: &FileIdent, now: &FileIdent) -> String {
    if !was.same_file(now) {
        "replaced by another file".into()
    } else if was.size != now.size {
        format!("{} bytes, now {}", was.size, now.size)
    } else if was.mtime != now.mtime {
        "rewritten in place".into()
    } else {
        // Only ctime moved: a write that put the modification time back
        // (`rsync --inplace -t`) looks the same as a metadata change.
        "its status changed (a write that kept the modification time, or a new \
         hard link, permissions or owner); split it again once nothing touches it"
            .into()
    }
}

/// Where [`Spill::walk_ccob_into`] puts each code object: chunks go to
/// the writer thread (`tx`), which sends the buffers back for reuse.
struct PlaceTarget<'a> {
    places: &'a [Option<(&'a File, u64)>],
    tx: Option<std::sync::mpsc::SyncSender<(usize, u64, Vec<u8>)>>,
    back: std::sync::mpsc::Receiver<Vec<u8>>,
}

impl rocpack_bundle::EntryTarget<rocpack_bundle::CopyError> for PlaceTarget<'_> {
    fn dest(&mut self, i: usize) -> Result<rocpack_bundle::EntryDest, rocpack_bundle::CopyError> {
        Ok(match self.places.get(i) {
            Some(Some(_)) => rocpack_bundle::EntryDest::Chunks,
            _ => rocpack_bundle::EntryDest::Skip,
        })
    }

    fn filled(&mut self, _: usize, _: Vec<u8>) -> Result<(), rocpack_bundle::CopyError> {
        // Never asked for: every kept entry comes in chunks.
        Ok(())
    }

    fn chunk(&mut self, i: usize, off: u64, chunk: &[u8]) -> Result<(), rocpack_bundle::CopyError> {
        if !matches!(self.places.get(i), Some(Some(_))) {
            return Ok(());
        }
        let mut buf = self.back.try_recv().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(chunk);
        let sent = self.tx.as_ref().map(|tx| tx.send((i, off, buf)));
        match sent {
            Some(Ok(())) => Ok(()),
            // The writer stopped on an error (reported by the caller).
            _ => Err(rocpack_bundle::CopyError::Io(std::io::Error::other(
                "the code-object writer stopped",
            ))),
        }
    }
}

/// `metadata.bundle` of entry `position` of a bundle (its place, when the
/// bundle can be rebuilt exactly: `layout`).
pub(super) fn entry_place(
    layout: Option<&rocpack_bundle::BundleLayout>,
    index: &rocpack_bundle::BundleIndex,
    position: usize,
) -> Option<rocpack_kpack::rmpv::Value> {
    layout.and_then(|l| {
        rocpack_kpack::bundle_meta::encode(l, position, |i| {
            index.entries.get(i).is_some_and(|e| !e.id.is_host())
        })
    })
}

/// What [`Spill::walk_ccob`] does with each entry of one CCOB.
struct CcobPlan {
    /// Per entry: a device code object of a target the split keeps.
    kept: Vec<bool>,
    /// Per entry: decoded into a buffer and compressed during the walk
    /// (else, when kept, spilled raw).
    inmem: Vec<bool>,
    /// The archives' zstd level, when code objects are compressed during
    /// the walk (zstd archives and entries that do not overlap).
    level: Option<i32>,
}

impl CcobPlan {
    fn new(
        index: &rocpack_bundle::BundleIndex,
        compression: Compression,
        keep: &ArchFilter<'_>,
    ) -> CcobPlan {
        let kept: Vec<bool> = index
            .entries
            .iter()
            .map(|e| !e.id.is_host() && !keep.drops(e.id.target_id()))
            .collect();
        // Overlapping entries would each need their own buffer at once:
        // they are spilled raw (each byte once, at its payload offset).
        let level = match compression {
            Compression::Zstd { level } if index.overlaps().is_empty() => Some(level),
            _ => None,
        };
        let inmem = index
            .entries
            .iter()
            .zip(&kept)
            .map(|(e, &k)| k && level.is_some() && e.size <= INMEM_MAX)
            .collect();
        CcobPlan { kept, inmem, level }
    }

    /// Some kept, non-empty code object is spilled raw.
    fn any_raw(&self, index: &rocpack_bundle::BundleIndex) -> bool {
        self.kept
            .iter()
            .zip(&self.inmem)
            .zip(&index.entries)
            .any(|((&k, &m), e)| k && !m && e.size > 0)
    }

    /// Memory the walk holds: the decoder's window and the largest code
    /// object decoded into a buffer.
    fn cost(&self, index: &rocpack_bundle::BundleIndex) -> u64 {
        index.payload_len.min(rocpack_bundle::DECODER_WINDOW_MAX)
            + index
                .entries
                .iter()
                .zip(&self.inmem)
                .filter(|(_, &m)| m)
                .map(|(e, _)| e.size)
                .max()
                .unwrap_or(0)
    }
}

/// Where [`Spill::walk_ccob`] puts each code object of one CCOB.
struct CcobTarget<'a, 's, 'scope> {
    index: &'a rocpack_bundle::BundleIndex,
    kept: &'a [bool],
    /// Decoded into a buffer and compressed (else spilled raw).
    inmem: &'a [bool],
    raw: Option<&'a File>,
    shared: &'scope FrameSink<'s>,
    scope: &'a rayon::Scope<'scope>,
    workers: usize,
}

impl rocpack_bundle::EntryTarget<rocpack_bundle::CopyError> for CcobTarget<'_, '_, '_> {
    fn dest(&mut self, i: usize) -> Result<rocpack_bundle::EntryDest, rocpack_bundle::CopyError> {
        use rocpack_bundle::EntryDest;
        Ok(if !self.kept[i] {
            EntryDest::Skip
        } else if self.inmem[i] {
            if self.shared.stopped() {
                EntryDest::Skip
            } else {
                EntryDest::Buffer(self.shared.spill.buffer())
            }
        } else {
            EntryDest::Chunks
        })
    }

    fn filled(&mut self, i: usize, buf: Vec<u8>) -> Result<(), rocpack_bundle::CopyError> {
        let shared = self.shared;
        let (in_flight, queued) = (&shared.spill.in_flight, &shared.spill.queued);
        // A worker compresses it while this thread goes on decompressing;
        // when every worker is busy, the queue holds QUEUE_BUDGET bytes or
        // the compressors' memory budget has no room for the buffer, this
        // thread does it (never waits, so never deadlocks).
        let len = buf.len() as u64;
        let before = queued.fetch_add(len, Ordering::AcqRel);
        let fits = before == 0 || before + len <= QUEUE_BUDGET;
        let held = if fits && in_flight.fetch_add(1, Ordering::AcqRel) < self.workers {
            rocpack_bundle::memory::try_hold(buf.capacity() as u64)
        } else {
            None
        };
        if let Some(held) = held {
            self.scope.spawn(move |_| {
                shared.compress(i, buf);
                drop(held);
                shared.spill.in_flight.fetch_sub(1, Ordering::AcqRel);
                shared.spill.queued.fetch_sub(len, Ordering::AcqRel);
            });
            // Threads waiting for walk memory run it ([`Spill::admit`]).
            shared.spill.walking.1.notify_all();
        } else {
            if fits {
                in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            queued.fetch_sub(len, Ordering::AcqRel);
            shared.compress(i, buf);
        }
        Ok(())
    }

    fn chunk(&mut self, i: usize, off: u64, chunk: &[u8]) -> Result<(), rocpack_bundle::CopyError> {
        use std::os::unix::fs::FileExt;
        match self.raw {
            Some(f) => f
                .write_all_at(chunk, self.index.entries[i].offset + off)
                .map_err(rocpack_bundle::CopyError::Io),
            None => Ok(()),
        }
    }
}

/// Largest code object [`Spill::walk_ccob`] holds in memory to compress
/// during the scan: the writer's own limit for compressing whole (above it
/// frames are streamed), so a code object gets the same frame whichever
/// path compressed it.
const INMEM_MAX: u64 = rocpack_kpack::STREAM_THRESHOLD;

/// What [`Spill::walk_ccob`] made of one CCOB.
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
struct FrameSink<'s> {
    /// The frames file, its length and each entry's frame (offset, length).
    #[allow(clippy::type_complexity)]
    out: Mutex<(Option<File>, u64, Vec<Option<(u64, u64)>>)>,
    /// Buffers for reuse and the queue bound, over every walk.
    spill: &'s Spill,
    failed: Mutex<Option<FrameError>>,
    level: i32,
}

impl FrameSink<'_> {
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
        self.spill.give_back(data);
    }

    /// Per entry, its frame in `frames_path` (none for empty code
    /// objects: the write stage compresses the zero bytes it reads), or
    /// the first error of a compression or a spill write.
    fn into_frames(
        self,
        input: &Path,
        frames_path: &Path,
    ) -> Result<Vec<Option<Frame>>, SplitError> {
        if let Some(e) = self.failed.into_inner().ok().flatten() {
            return Err(match e {
                FrameError::Zstd(error) => SplitError::Kpack {
                    path: input.to_path_buf(),
                    error,
                },
                FrameError::Io(e) => FsError::new(frames_path, "write spill file", e).into(),
            });
        }
        let (_, _, offsets) = self
            .out
            .into_inner()
            .map_err(|_| SplitError::Usage("internal: frame table poisoned".into()))?;
        Ok(offsets
            .into_iter()
            .map(|at| {
                at.map(|(offset, len)| Frame {
                    file: frames_path.to_path_buf(),
                    offset,
                    len,
                })
            })
            .collect())
    }

    fn append(&self, i: usize, frame: &[u8]) {
        use std::io::Write;
        let Ok(mut out) = self.out.lock() else {
            return;
        };
        let (f, len, table) = &mut *out;
        let Some(f) = f else {
            return;
        };
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
    /// With uncompressed archives, the CCOB it comes from and its entry
    /// there: the write stage decompresses it into the archive (then `file`
    /// and `offset` are not read, and `place` is known after that walk).
    pub ccob: Option<(Arc<DeferredCcob>, usize)>,
}

/// Classification of one regular file.
pub(super) enum Class {
    /// Copied to the generic artifact as it is.
    Generic,
    /// A database file of this architecture, claimed by this handler.
    Database(databases::DatabaseKind, String),
    /// A fat binary (its host-only rewrite is already written). Boxed:
    /// one class is kept per file of the tree, most of them generic.
    Fat(Box<FatOutcome>),
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
    /// Where it was walked (entries' paths are relative to it).
    pub root: PathBuf,
    /// Its entries, sorted (directories before what they hold).
    pub entries: Vec<walk::Entry>,
    /// The regular files that are not [`Class::Generic`], by index into
    /// `entries`, ascending, with their classes: nothing is kept for the
    /// many files a split copies as they are.
    pub classes: Vec<(usize, Class)>,
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
            root,
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
        let root = &scan.root;
        let classes: Result<Vec<(usize, Class)>, SplitError> = scan
            .entries
            .par_iter()
            .enumerate()
            .filter_map(|(i, e)| match e.kind {
                EntryKind::File { size, mode } => {
                    let dst = fsutil::join_rel(&groot, &e.rel);
                    let path = e.path(root);
                    let c = classify_file(&cx, &prefix, &e.rel, &path, size, &dst, mode);
                    progress.advance(1);
                    match c {
                        Ok(Class::Generic) => None,
                        c => Some(c.map(|c| (i, c))),
                    }
                }
                _ => None,
            })
            .collect();
        scan.classes = classes?;
    }
    // The decoders kept for the walks hold windows as large as the largest
    // payloads: not needed by the write stage.
    rocpack_bundle::release_decoders();
    Ok(Scan {
        prefixes: scans,
        missing,
    })
}

/// Creates (or truncates) a host rewrite's output, readable too: the
/// rewrites re-read what they wrote (checks, checksums).
fn create_rw(path: &Path) -> Result<File, SplitError> {
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .ctx(path, "create")?)
}

fn image_err(path: &Path, e: rocpack_image::Error) -> SplitError {
    SplitError::Image {
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
    // assumption every build action makes about its inputs; a rewrite is
    // caught by `Spill::check_inputs` before anything is published). A
    // concurrent truncation could raise SIGBUS (the CLI reports it as an
    // error), never memory unsafety in safe code beyond that documented
    // mmap caveat.
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
    file: &'a File,
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

/// One bundle of an image, indexed.
struct Indexed<'b> {
    info: &'b rocpack_image::BundleInfo,
    /// Byte offset of the bundle in the file.
    offset: u64,
    index: rocpack_bundle::BundleIndex,
    /// Targets of its device code objects.
    stored: Arc<[String]>,
}

/// What the walk of one bundle left.
enum Walked {
    /// Walked by the scan: the spill file of a CCOB's code objects, the
    /// walk summary and, per entry, its frame.
    Now(
        Option<PathBuf>,
        rocpack_bundle::WalkSummary,
        Vec<Option<Frame>>,
    ),
    /// A CCOB left for the write stage (uncompressed archives).
    Later(Arc<DeferredCcob>),
}

impl Collector<'_> {
    fn bundle_err(&self, offset: u64) -> impl Fn(rocpack_bundle::Error) -> SplitError + '_ {
        move |e: rocpack_bundle::Error| SplitError::Bundle {
            path: self.path.to_path_buf(),
            offset: offset + e.offset().unwrap_or(0),
            error: e,
        }
    }

    /// Collects the code objects of the bundles of one analysed ELF or PE
    /// image (`image` is a sub-slice of the mapped file). Every entry table
    /// is read and checked first, in bundle order (positioned reads of the
    /// file: nothing is mapped); then the bundles are walked in parallel
    /// (a CCOB decompressed once, its code objects compressed or spilled as
    /// they come out; an uncompressed bundle's gaps checked) and their code
    /// objects recorded in bundle order, so the result does not depend on
    /// the thread count.
    fn collect(
        &mut self,
        image: &[u8],
        bundles: &[rocpack_image::BundleInfo],
        kernel_name: &str,
    ) -> Result<(), SplitError> {
        let (path, spill) = (self.path, self.spill);
        let whole: &[u8] = self.map;
        let keep = ArchFilter::new(self.opts);
        let mut indexed = Vec::with_capacity(bundles.len());
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
            let src = rocpack_bundle::FileRange::new(self.file, bundle_off, b.len);
            // The entry table alone (for a CCOB: the payload's prefix).
            let index = rocpack_bundle::index_bundle_in(&src, &Default::default())
                .map_err(self.bundle_err(bundle_off))?;
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
            indexed.push(Indexed {
                info: b,
                offset: bundle_off,
                index,
                stored,
            });
        }
        // Each bundle is one task; results come back in bundle order and
        // the first failure in that order is the one reported.
        let walked: Vec<Result<Walked, SplitError>> = indexed
            .par_iter()
            .map(|x| {
                let src = rocpack_bundle::FileRange::new(self.file, x.offset, x.info.len);
                let bundle_err = self.bundle_err(x.offset);
                if x.index.ccob.is_some() && self.opts.compression == Compression::None {
                    // Decompressed once by the write stage, straight into
                    // the archives (their layout is not known yet).
                    Ok(Walked::Later(Arc::new(DeferredCcob {
                        file: path.to_path_buf(),
                        offset: x.offset,
                        len: x.info.len,
                        index: x.index.clone(),
                    })))
                } else if x.index.ccob.is_some() {
                    // Decompression and compression overlap; only frames
                    // (and code objects too large to hold) are spilled.
                    let p = spill.walk_ccob(
                        path,
                        &src,
                        &x.index,
                        self.opts.compression,
                        &keep,
                        &bundle_err,
                    )?;
                    Ok(Walked::Now(Some(p.raw), p.walk, p.frames))
                } else {
                    // Gaps and header only: code objects are read from
                    // their file range by the write stage.
                    let walk = rocpack_bundle::walk_entries::<rocpack_bundle::Error>(
                        &src,
                        &x.index,
                        &Default::default(),
                        &mut SkipAll,
                    )
                    .map_err(bundle_err)?;
                    Ok(Walked::Now(None, walk, Vec::new()))
                }
            })
            .collect();
        for (x, w) in indexed.iter().zip(walked) {
            let index = &x.index;
            let (spilled, layout, frames, deferred) = match w? {
                Walked::Now(spilled, walk, frames) => (
                    spilled,
                    rocpack_bundle::BundleLayout::of_index(index, &walk),
                    frames,
                    None,
                ),
                Walked::Later(d) => (None, None, Vec::new(), Some(d)),
            };
            let key = rocpack_kpack::toc_key(kernel_name, x.info.index as u64);
            for (position, entry) in index.entries.iter().enumerate() {
                if entry.id.is_host() {
                    continue;
                }
                let place = entry_place(layout.as_ref(), index, position);
                let arch = entry.id.target_id().to_string();
                self.counts.1 += 1;
                self.archs.insert(arch.clone());
                // Offsets are relative to the (decompressed) bundle; the
                // index checked every entry lies inside it.
                let (file, offset) = match &spilled {
                    Some(f) => (f.clone(), entry.offset),
                    None => (path.to_path_buf(), x.offset + entry.offset),
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
                    bundle_targets: x.stored.clone(),
                    frame: frames.get(position).cloned().flatten(),
                    ccob: deferred.clone().map(|d| (d, position)),
                });
            }
        }
        Ok(())
    }
}

/// Walks a bundle for its checks alone.
struct SkipAll;

impl rocpack_bundle::EntryTarget<rocpack_bundle::Error> for SkipAll {
    fn dest(&mut self, _: usize) -> Result<rocpack_bundle::EntryDest, rocpack_bundle::Error> {
        Ok(rocpack_bundle::EntryDest::Skip)
    }
    fn filled(&mut self, _: usize, _: Vec<u8>) -> Result<(), rocpack_bundle::Error> {
        Ok(())
    }
    fn chunk(&mut self, _: usize, _: u64, _: &[u8]) -> Result<(), rocpack_bundle::Error> {
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
    let mut head = vec![0u8; rocpack_image::HEAD_LEN.min(size as usize)];
    let n = if size == 0 {
        0
    } else {
        let mut f = File::open(path).ctx(path, "open")?;
        read_up_to(&mut f, &mut head).ctx(path, "read")?
    };
    let magic = &head[..n];
    let kind = rocpack_image::detect(magic);
    if kind.is_rewritable() {
        if let Some(fat) = split_fat(cx, prefix, rel, path, host_dst, mode)? {
            return Ok(Class::Fat(Box::new(fat)));
        }
    } else if let Some(flavour) = kind.refused_flavour(magic) {
        // ELFCLASS32, big-endian or PE32: HIP binaries are neither, so one
        // with device code cannot be split; copying it as a generic file
        // would ship a fat binary nobody checks.
        // Read in pieces, never mapped: a file of any size costs a piece.
        let file = File::open(path).ctx(path, "open")?;
        if rocpack_image::file_carries_device_code(&file, 0, size).ctx(path, "read")? {
            return Err(SplitError::Usage(format!(
                "{}: a {flavour} file carrying HIP device code (`.hip_fatbin` or an offload bundle): only 64-bit little-endian fat binaries can be split; refusing to copy it into the generic artifact",
                path.display(),
            )));
        }
    }
    if kind.is_unsplit_object() {
        // Headers and tables only (a 512 MiB object: about 10 MiB, whatever
        // the address-space limit).
        let image = rocpack_image::ImageFile::open(path).ctx(path, "open")?;
        if let Ok(info) = image.analyze().ctx(path, "read")? {
            if info.has_device_code() {
                return Ok(Class::FatObject {
                    bundles: info.bundles().len(),
                });
            }
        }
    }
    if let Some((kind, arch)) = databases::classify(&cx.opts.databases, rel) {
        return Ok(Class::Database(kind, arch));
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
    spill.note_input(path, &file)?;
    let data: &[u8] = &map;
    // Bundle headers are read through positioned reads of the file, not
    // the mapping: only the host part of a large input is ever faulted in.
    let src = rocpack_bundle::FileRange::new(&file, 0, data.len() as u64);
    let kernel_name = format!("{prefix}/{rel}");
    let depth = rel.split('/').count().saturating_sub(1);
    let mut collector = Collector {
        path,
        file: &file,
        map: &map,
        spill,
        opts,
        kernels: Vec::new(),
        archs: BTreeSet::new(),
        counts: (0, 0),
    };
    let host_len = if rocpack_image::detect(data).has_members() {
        let units = rocpack_image::units(data).map_err(|e| image_err(path, e))?;
        let mut member_seen = MemberNames::default();
        let mut any = false;
        for u in &units {
            let Some(m) = &u.member else {
                continue;
            };
            // Bundle headers through positioned reads, as for whole files.
            let info = match u.analyze(&src) {
                Ok(i) => i,
                // Members that are not ELF (text, other archives) are kept
                // as they are, unless they hide device code (a nested
                // archive of fat objects, a raw bundle): that would be
                // copied into the generic artifact unsplit.
                Err(rocpack_image::Error::NotAnImage(_)) => {
                    if rocpack_image::carries_device_code(u.data) {
                        return Err(SplitError::Usage(format!(
                            "{}: archive member `{}` (header at byte offset {}) is not an ELF object but carries HIP device code ({}); only ELF members are split (nested archives, COFF objects and raw bundles are not); refusing to copy it into the generic artifact",
                            path.display(),
                            m.name,
                            m.header_offset,
                            rocpack_image::detect(u.data).unsplit_member(),
                        )));
                    }
                    continue;
                }
                Err(e) if e.is_unsupported() => {
                    if rocpack_image::carries_device_code(u.data) {
                        return Err(image_err(path, u.error(e)));
                    }
                    continue;
                }
                Err(e) => return Err(image_err(path, u.error(e))),
            };
            if !info.has_device_code() {
                continue;
            }
            any = true;
            let member_name = format!("{kernel_name}({})", member_seen.label(&m.name));
            collector.collect(u.data, info.bundles(), &member_name)?;
        }
        if !any {
            return Ok(None);
        }
        let mut marker_seen = MemberNames::default();
        let mut marker_for = |name: &str, _info: &rocpack_image::Analysis| {
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
        let len = rocpack_image::split_archive_to(data, &src, &mut marker_for, &spill, &mut w)
            .map_err(|e| image_err(path, e))?;
        std::io::Write::flush(&mut w).ctx(host_dst, "write")?;
        drop(w);
        drop(out);
        fsutil::set_mode(host_dst, mode)?;
        release(&map, None);
        len as usize
    } else {
        let info = match rocpack_image::analyze_in(data, &src) {
            Ok(i) => i,
            // An image we cannot read (PN_XNUM, an odd e_type, a PE/COFF
            // feature not handled) is copied as it is only when it has no
            // device code; keeping device code in the generic package
            // silently would ship a fat binary that verify cannot see.
            Err(e) if e.is_unsupported() => {
                if rocpack_image::carries_device_code(data) {
                    return Err(image_err(path, e));
                }
                return Ok(None);
            }
            Err(e) => return Err(image_err(path, e)),
        };
        if !info.has_device_code() {
            return Ok(None);
        }
        let marker = Marker::for_split(&opts.artifact_prefix, depth, kernel_name.clone()).encode();
        release(&map, None);
        // The host-only rewrite is written (into the staging directory)
        // range by range, copied from the file through positioned reads:
        // neither the host part nor the output is held in memory. It is
        // done before the bundles are walked (in parallel): every layout
        // problem is reported before any bundle is decompressed, and the
        // two do not add their memory.
        let out = create_rw(host_dst)?;
        let len = rocpack_image::split_to(data, &src, &info, &marker, &out)
            .map_err(|e| image_err(path, e))?;
        drop(out);
        fsutil::set_mode(host_dst, mode)?;
        release(&map, None);
        collector.collect(data, info.bundles(), &kernel_name)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// With one CCOB walk holding the whole memory budget (bundles of 20+
    /// targets), a pool thread that waits for its turn runs the work the
    /// walk queued (the compression of its code objects) meanwhile. Before,
    /// it slept on the budget and the walker decompressed and compressed
    /// alone: one core busy of two.
    #[test]
    fn waiting_for_walk_memory_runs_queued_pool_work() {
        let stage = tempfile::tempdir().unwrap();
        let spill = Spill::new(stage.path()).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let spill = &spill;
        let got = pool.install(|| {
            let held = spill.admit(WALK_BUDGET);
            let (waiting_tx, waiting_rx) = mpsc::channel();
            let (done_tx, done_rx) = mpsc::channel();
            rayon::scope(move |s| {
                // The other thread takes this walk, which waits for memory.
                s.spawn(move |_| {
                    waiting_tx.send(()).unwrap();
                    drop(spill.admit(1));
                });
                waiting_rx
                    .recv_timeout(Duration::from_secs(60))
                    .expect("the other pool thread took the waiting walk");
                // Work queued by the admitted walk: this thread blocks
                // outside the pool, so only the waiting thread can run it.
                s.spawn(move |_| {
                    let _ = done_tx.send(rayon::current_thread_index());
                });
                let got = done_rx.recv_timeout(Duration::from_secs(10));
                drop(held);
                got
            })
        });
        let me_not = got.expect("queued work ran while the other thread waited for walk memory");
        assert!(me_not.is_some(), "ran on a pool thread");
    }

    /// A file whose status alone changed (a new hard link here) is named
    /// as such, not as rewritten: its bytes may be the same.
    #[test]
    fn a_status_change_is_not_called_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lib.so");
        std::fs::write(&p, b"abc").unwrap();
        let was = FileIdent::of(&std::fs::metadata(&p).unwrap());
        // ctime has the file system's clock granularity.
        let mut now = was;
        for _ in 0..200 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let _ = std::fs::remove_file(dir.path().join("link"));
            std::fs::hard_link(&p, dir.path().join("link")).unwrap();
            now = FileIdent::of(&std::fs::metadata(&p).unwrap());
            if now.ctime != was.ctime {
                break;
            }
        }
        assert_ne!(now.ctime, was.ctime, "the link did not change ctime");
        let d = difference(&was, &now);
        assert!(d.contains("hard link") && !d.contains("rewritten"), "{d}");
        std::fs::write(&p, b"abd").unwrap();
        let mut later = FileIdent::of(&std::fs::metadata(&p).unwrap());
        later.mtime.1 = later.mtime.1.wrapping_add(1);
        assert_eq!(difference(&was, &later), "rewritten in place");
    }
}
