//! Write: the generic artifact's files, symlinks and manifest, then the
//! per-architecture artifacts (database files and `.kpack` archives,
//! written by `rocpack-kpack`'s [`KpackStreamWriter`]), as the plan says.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use rocpack_kpack::{Compression, KpackStreamWriter, StoredFrame};

use super::plan::Plan;
use super::scan::{entry_place, DeferredCcob, KernelRef, Spill};
use super::{mkdir_p, ArchArtifact, KpackSummary, Progress, SplitError, SplitOptions};
use crate::fsutil::{self, FsError, IoContext};
use crate::manifest::ArtifactManifest;
use crate::walk::EntryKind;

/// Code-object bytes the zstd pipeline holds at once (read, being
/// compressed, or compressed and waiting for their turn to be written); a
/// larger code object is admitted alone.
const PIPELINE_BYTES: u64 = 64 << 20;
/// What a code object compressed streaming costs the pipeline (zstd's
/// window and tables, read and write buffers), whatever its size.
const STREAM_COST: u64 = 8 << 20;

/// What the generic artifact received.
pub(super) struct GenericSummary {
    /// Its manifest (every processed prefix).
    pub manifest: ArtifactManifest,
    /// Regular files copied.
    pub files: u64,
    /// Symlinks recreated.
    pub symlinks: u64,
}

/// Copies the generic files and symlinks into `generic_root` (whose
/// directory skeleton and host-only rewrites the scan made), writes its
/// manifest and removes the directories whose every file moved to arch
/// artifacts (database trees such as `lib/aotriton/kernels/gfx1100/…`);
/// directories that were empty in the input stay.
pub(super) fn write_generic(
    plan: &Plan,
    generic_root: &Path,
) -> Result<GenericSummary, SplitError> {
    let mut manifest = ArtifactManifest::new();
    let (mut files, mut symlinks) = (0u64, 0u64);
    for p in &plan.prefixes {
        manifest.push(&p.prefix)?;
        let groot = fsutil::join_rel(generic_root, &p.prefix);
        for (e, _) in p.entries.iter().zip(&p.to_generic).filter(|(_, g)| **g) {
            let dst = fsutil::join_rel(&groot, &e.rel);
            match &e.kind {
                EntryKind::Symlink { target } => {
                    fsutil::copy_symlink(target, &dst)?;
                    symlinks += 1;
                }
                EntryKind::File { .. } => {
                    fsutil::copy_file(&e.path, &dst)?;
                    files += 1;
                }
                EntryKind::Dir => {}
            }
        }
    }
    manifest.write_dir(generic_root)?;
    for p in &plan.prefixes {
        let groot = fsutil::join_rel(generic_root, &p.prefix);
        let had_content: BTreeSet<&str> = p
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
        for e in p.entries.iter().rev() {
            if e.kind == EntryKind::Dir && had_content.contains(e.rel.as_str()) {
                let d = fsutil::join_rel(&groot, &e.rel);
                if fs::read_dir(&d).ctx(&d, "read directory")?.next().is_none() {
                    fs::remove_dir(&d).ctx(&d, "remove empty directory")?;
                }
            }
        }
    }
    Ok(GenericSummary {
        manifest,
        files,
        symlinks,
    })
}

/// One archive to write, and where its identical copies go.
struct ArchiveJob {
    arch: String,
    path: PathBuf,
    rel: String,
    /// Further prefixes' copies: (path, report path).
    copies: Vec<(PathBuf, String)>,
    kernels: Vec<KernelRef>,
}

/// Writes the per-architecture artifacts under `stage`: database files,
/// then the archives (in parallel for `none`). One archive per arch holds
/// the kernels of every prefix (TOC keys start with the prefix, so they
/// never collide) and is written identically into the `.kpack/` of each
/// prefix that has binaries: installed overlaid (prefixes kept) or
/// flattened (every prefix into one root, where the copies meet at one
/// path), every marker resolves.
pub(super) fn write_arch_artifacts(
    opts: &SplitOptions,
    stage: &Path,
    plan: &mut Plan,
    spill: &Spill,
    progress: &dyn Progress,
) -> Result<Vec<ArchArtifact>, SplitError> {
    let name = &opts.artifact_prefix;
    let mut jobs = Vec::new();
    let mut arch_artifacts = Vec::new();
    for (arch, prefixes) in &mut plan.per_arch {
        let aname = format!("{name}_{arch}");
        let aroot = stage.join(&aname);
        mkdir_p(&aroot)?;
        let mut m = ArtifactManifest::new();
        let mut dbs = Vec::new();
        let file = rocpack_kpack::kpack_file_name(name, arch);
        let mut homes: Vec<(PathBuf, String)> = Vec::new();
        let mut all_kernels = Vec::new();
        for (pi, (db_files, kernels)) in prefixes.iter_mut() {
            let prefix = &plan.prefixes[*pi].prefix;
            m.push(prefix)?;
            let proot = fsutil::join_rel(&aroot, prefix);
            mkdir_p(&proot)?;
            for rel in db_files.iter() {
                let dst = fsutil::join_rel(&proot, rel);
                if let Some(parent) = dst.parent() {
                    mkdir_p(parent)?;
                }
                let src = fsutil::join_rel(&fsutil::join_rel(&opts.artifact_dir, prefix), rel);
                fsutil::copy_file(&src, &dst)?;
                dbs.push(format!("{prefix}/{rel}"));
            }
            if !kernels.is_empty() {
                let kdir = proot.join(rocpack_kpack::KPACK_DIR);
                mkdir_p(&kdir)?;
                homes.push((
                    kdir.join(&file),
                    format!("{aname}/{prefix}/{}/{file}", rocpack_kpack::KPACK_DIR),
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
    // An archive written to its first home: set its mode, copy it to the
    // other prefixes, and say where each copy is.
    let place =
        |j: &ArchiveJob, mut s: KpackSummary| -> Result<Vec<(String, KpackSummary)>, SplitError> {
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
    // their code objects copied file to file; zstd archives go through one
    // pipeline (every worker compressing, one writer, bounded bytes in
    // flight), archive after archive without a pause between them.
    let written: Result<Vec<Vec<(String, KpackSummary)>>, SplitError> = match opts.compression {
        Compression::None => {
            write_plain_archives(&jobs, name, spill, progress).and_then(|summaries| {
                jobs.iter()
                    .zip(summaries)
                    .map(|(j, s)| place(j, s))
                    .collect()
            })
        }
        Compression::Zstd { level } => {
            write_zstd_archives(&jobs, name, level, progress).and_then(|summaries| {
                jobs.iter()
                    .zip(summaries)
                    .map(|(j, s)| place(j, s))
                    .collect()
            })
        }
    };
    for (arch, s) in written?.into_iter().flatten() {
        if let Some(a) = arch_artifacts.iter_mut().find(|a| a.arch == arch) {
            a.kpacks.push(s);
        }
    }
    progress.finish();
    Ok(arch_artifacts)
}

fn kpack_err(path: &Path, e: rocpack_kpack::Error) -> SplitError {
    SplitError::Kpack {
        path: path.to_path_buf(),
        error: e,
    }
}

/// An entry's free-form `metadata`: its full bundle entry ID, its prefix,
/// when known its place in the original bundle (bundle_meta), and the
/// targets of every device code object of its bundle (`bundle_targets`,
/// read by verify).
fn entry_metadata(k: &KernelRef) -> Option<rocpack_kpack::rmpv::Value> {
    use rocpack_kpack::rmpv::Value;
    let mut m = vec![
        (Value::from("target"), Value::from(k.bundle_id.as_str())),
        (Value::from("source_prefix"), Value::from(k.prefix.as_str())),
    ];
    if let Some(place) = &k.place {
        m.push((Value::from("bundle"), place.clone()));
    }
    m.push((
        Value::from(crate::verify::BUNDLE_TARGETS),
        Value::Array(
            k.bundle_targets
                .iter()
                .map(|t| Value::from(t.as_str()))
                .collect(),
        ),
    ));
    Some(Value::Map(m))
}

/// The source files of code objects, kept open while consecutive code
/// objects come from the same one (sorted keys keep one binary together).
#[derive(Default)]
struct Sources(Option<(PathBuf, File)>);

impl Sources {
    fn get(&mut self, path: &Path) -> Result<&File, SplitError> {
        if self.0.as_ref().is_none_or(|(p, _)| p != path) {
            let f = File::open(path).ctx(path, "open")?;
            self.0 = Some((path.to_path_buf(), f));
        }
        match &self.0 {
            Some((_, f)) => Ok(f),
            None => Err(SplitError::Usage(format!("{}: not open", path.display()))),
        }
    }
}

/// An uncompressed archive whose header and copied code objects are
/// written, its CCOB code objects placed but not yet decoded, and its TOC
/// not yet written.
struct OpenArchive {
    w: KpackStreamWriter<BufWriter<File>>,
    /// A second handle for the positioned writes of decoded code objects.
    fill: File,
    code_bytes: u64,
}

/// One code object of a CCOB, placed in an archive: (job, kernel in the
/// job, ordinal in the archive, absolute offset).
type Placed = (usize, usize, u32, u64);

/// Writes every uncompressed archive of `jobs` (kernels sorted by key) so
/// each code object is written once, in three passes:
/// 1. per archive, in parallel: the header; code objects of uncompressed
///    bundles copied file to file (`copy_file_range`,
///    [`KpackStreamWriter::add_file_range`]); the place of every CCOB code
///    object reserved ([`KpackStreamWriter::add_placed`]);
/// 2. every CCOB with a kept code object decompressed once, in parallel
///    (bundle by bundle, memory admitted as the scan's walks), its code
///    objects written straight into their places
///    ([`Spill::walk_ccob_into`]);
/// 3. each archive's TOC, with what the walks learned of each bundle
///    (`metadata.bundle`).
///
/// The archives are byte for byte what writing the code objects one after
/// another would give (the layout depends only on the sorted kernels).
fn write_plain_archives(
    jobs: &[ArchiveJob],
    group: &str,
    spill: &Spill,
    progress: &dyn Progress,
) -> Result<Vec<KpackSummary>, SplitError> {
    // Pass 1.
    let opened: Vec<(OpenArchive, Vec<Placed>)> = jobs
        .par_iter()
        .enumerate()
        .map(|(ji, j)| -> Result<_, SplitError> {
            let path = &j.path;
            let file = File::create(path).ctx(path, "create")?;
            let fill = file.try_clone().ctx(path, "reopen")?;
            let mut w =
                KpackStreamWriter::new(BufWriter::with_capacity(1 << 20, file), Compression::None)
                    .map_err(|e| kpack_err(path, e))?;
            w.group_name(group).arch_family(&j.arch).arches([&j.arch]);
            let mut sources = Sources::default();
            let mut placed = Vec::new();
            let mut code_bytes = 0u64;
            for (ki, k) in j.kernels.iter().enumerate() {
                if k.ccob.is_some() {
                    // Its metadata is known once its bundle is walked.
                    let (ordinal, at) = w
                        .add_placed(&k.key, &k.arch, k.size, None)
                        .map_err(|e| kpack_err(path, e))?;
                    placed.push((ji, ki, ordinal, at));
                } else {
                    let src = sources.get(&k.file)?;
                    w.add_file_range(&k.key, &k.arch, src, k.offset, k.size, entry_metadata(k))
                        .map_err(|e| kpack_err(path, e))?;
                    progress.advance(1);
                }
                code_bytes += k.size;
            }
            Ok((
                OpenArchive {
                    w,
                    fill,
                    code_bytes,
                },
                placed,
            ))
        })
        .collect::<Result<_, _>>()?;
    // Pass 2: the placed code objects grouped by bundle, bundles in the
    // order their first code object appears.
    let mut bundles: Vec<(&DeferredCcob, Vec<(usize, Placed)>)> = Vec::new();
    let mut seen: std::collections::HashMap<*const DeferredCcob, usize> = Default::default();
    for &(ji, ki, ordinal, at) in opened.iter().flat_map(|(_, p)| p) {
        if let Some((d, position)) = &jobs[ji].kernels[ki].ccob {
            let b = *seen.entry(Arc::as_ptr(d)).or_insert_with(|| {
                bundles.push((d, Vec::new()));
                bundles.len() - 1
            });
            bundles[b].1.push((*position, (ji, ki, ordinal, at)));
        }
    }
    let metadata: Vec<Vec<(usize, u32, Option<rocpack_kpack::rmpv::Value>)>> = bundles
        .par_iter()
        .map(|(d, placed)| -> Result<_, SplitError> {
            let mut places: Vec<Option<(&File, u64)>> = vec![None; d.index.entries.len()];
            for &(position, (ji, _, _, at)) in placed {
                match places.get_mut(position) {
                    Some(slot @ None) => *slot = Some((&opened[ji].0.fill, at)),
                    _ => {
                        return Err(SplitError::Usage(format!(
                            "{}: internal: bundle entry {position} placed twice",
                            d.file.display()
                        )))
                    }
                }
            }
            let walk = spill.walk_ccob_into(d, &places)?;
            let layout = rocpack_bundle::BundleLayout::of_index(&d.index, &walk);
            Ok(placed
                .iter()
                .map(|&(position, (ji, ki, ordinal, _))| {
                    let mut k = jobs[ji].kernels[ki].clone();
                    k.place = entry_place(layout.as_ref(), &d.index, position);
                    progress.advance(1);
                    (ji, ordinal, entry_metadata(&k))
                })
                .collect())
        })
        .collect::<Result<_, _>>()?;
    // The walks' decoders hold windows as large as the largest payloads.
    rocpack_bundle::release_decoders();
    // Pass 3.
    let mut opened: Vec<OpenArchive> = opened.into_iter().map(|(a, _)| a).collect();
    for (ji, ordinal, m) in metadata.into_iter().flatten() {
        opened[ji]
            .w
            .set_metadata(ordinal, m)
            .map_err(|e| kpack_err(&jobs[ji].path, e))?;
    }
    opened
        .into_par_iter()
        .zip(jobs)
        .map(|(a, j)| {
            let path = &j.path;
            let (bw, summary) = a.w.finish().map_err(|e| kpack_err(path, e))?;
            // Flush; no fsync: split outputs are build products, staged and
            // renamed.
            bw.into_inner()
                .map_err(|e| FsError::new(path, "write", e.into_error()))?;
            Ok(KpackSummary {
                path: String::new(),
                kernels: j.kernels.len() as u64,
                code_bytes: a.code_bytes,
                file_bytes: summary.total_size,
            })
        })
        .collect()
}

/// The zstd frame of one code object: its place in the scan's spill file
/// when the scan compressed it, else made from its file range
/// ([`rocpack_kpack::frame_of_file_range`]: compressed whole up to
/// [`rocpack_kpack::STREAM_THRESHOLD`] bytes, streamed into an unnamed
/// temporary file in `spill_dir` above it, so a code object of any size
/// costs a few MiB).
fn frame_of(k: &KernelRef, level: i32, spill_dir: &Path) -> Result<StoredFrame, SplitError> {
    if let Some(f) = &k.frame {
        // Copied from the spill file into the archive, never read here.
        let file = File::open(&f.file).ctx(&f.file, "open")?;
        return Ok(StoredFrame::Spilled {
            file,
            offset: f.offset,
            len: f.len,
        });
    }
    let src = File::open(&k.file).ctx(&k.file, "open")?;
    rocpack_kpack::frame_of_file_range(&src, k.offset, k.size, level, true, spill_dir)
        .map_err(|e| kpack_err(&k.file, e))
}

/// Admission of code objects into the pipeline, strictly in write order,
/// so the one the writer waits for is never kept out by later ones.
struct Admission {
    next: usize,
    in_flight: u64,
    stop: bool,
}

/// Writes every zstd archive of `jobs` (kernels sorted by key), in order:
/// all pool threads read and compress code objects (one zstd frame each,
/// [`frame_of`], so the bytes do not depend on the thread count) while
/// this thread writes the frames in key order, archive after archive. At
/// most [`PIPELINE_BYTES`] of code objects (or one larger one) are in
/// flight; a code object above [`rocpack_kpack::STREAM_THRESHOLD`] counts
/// [`STREAM_COST`] (it is streamed, never held), a frame the scan made its
/// length (it is copied file to file, never held, but the bound keeps
/// open files few). Wall time is the compression's, not compression +
/// write with a barrier per batch and per archive (the earlier scheme).
fn write_zstd_archives(
    jobs: &[ArchiveJob],
    group: &str,
    level: i32,
    progress: &dyn Progress,
) -> Result<Vec<KpackSummary>, SplitError> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Condvar, Mutex};

    let items: Vec<(usize, &KernelRef)> = jobs
        .iter()
        .enumerate()
        .flat_map(|(j, job)| job.kernels.iter().map(move |k| (j, k)))
        .collect();
    // What a code object holds while in flight: the code object and its
    // frame, or (streamed) a few MiB of zstd state and buffers.
    let cost = |k: &KernelRef| match &k.frame {
        Some(f) => f.len.max(1),
        None if k.size > rocpack_kpack::STREAM_THRESHOLD => STREAM_COST,
        None => k.size.max(1),
    };
    let next = AtomicUsize::new(0);
    let gate = (
        Mutex::new(Admission {
            next: 0,
            in_flight: 0,
            stop: false,
        }),
        Condvar::new(),
    );
    let lock = || {
        gate.0
            .lock()
            .map_err(|_| SplitError::Usage("internal: pipeline lock poisoned".into()))
    };
    let workers = rayon::current_num_threads().max(1);
    std::thread::scope(|scope| -> Result<Vec<KpackSummary>, SplitError> {
        let (tx, rx) = mpsc::channel::<(usize, Result<StoredFrame, SplitError>)>();
        for _ in 0..workers {
            let tx = tx.clone();
            let (items, next, gate) = (&items, &next, &gate);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&(j, k)) = items.get(i) else { break };
                let c = cost(k);
                {
                    let Ok(mut st) = gate.0.lock() else { break };
                    while !st.stop
                        && !(st.next == i
                            && (st.in_flight == 0 || st.in_flight + c <= PIPELINE_BYTES))
                    {
                        st = match gate.1.wait(st) {
                            Ok(g) => g,
                            Err(_) => return,
                        };
                    }
                    if st.stop {
                        break;
                    }
                    st.next += 1;
                    st.in_flight += c;
                    gate.1.notify_all();
                }
                let spill_dir = jobs[j].path.parent().unwrap_or(Path::new("."));
                if tx.send((i, frame_of(k, level, spill_dir))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let result = (|| {
            let mut summaries = Vec::with_capacity(jobs.len());
            let mut pending = std::collections::BTreeMap::new();
            let mut want = 0usize;
            let mut open: Option<(KpackStreamWriter<BufWriter<File>>, u64)> = None;
            for (i, r) in &rx {
                pending.insert(i, r);
                while let Some(r) = pending.remove(&want) {
                    let (j, k) = items[want];
                    let job = &jobs[j];
                    let frame = r?;
                    let orig = k.size;
                    if open.is_none() {
                        let file = File::create(&job.path).ctx(&job.path, "create")?;
                        let mut w = KpackStreamWriter::new(
                            BufWriter::with_capacity(1 << 20, file),
                            Compression::Zstd { level },
                        )
                        .map_err(|e| kpack_err(&job.path, e))?;
                        w.group_name(group)
                            .arch_family(&job.arch)
                            .arches([&job.arch]);
                        open = Some((w, 0));
                    }
                    if let Some((w, code_bytes)) = open.as_mut() {
                        w.add_stored_frame(&k.key, &k.arch, orig, &frame, entry_metadata(k))
                            .map_err(|e| kpack_err(&job.path, e))?;
                        *code_bytes += orig;
                    }
                    drop(frame);
                    {
                        let mut st = lock()?;
                        st.in_flight -= cost(k);
                        gate.1.notify_all();
                    }
                    progress.advance(1);
                    want += 1;
                    let last_of_job = items.get(want).is_none_or(|&(nj, _)| nj != j);
                    if last_of_job {
                        if let Some((w, code_bytes)) = open.take() {
                            let (bw, summary) = w.finish().map_err(|e| kpack_err(&job.path, e))?;
                            // Flush; no fsync: split outputs are build
                            // products, staged and renamed.
                            bw.into_inner()
                                .map_err(|e| FsError::new(&job.path, "write", e.into_error()))?;
                            summaries.push(KpackSummary {
                                path: String::new(),
                                kernels: job.kernels.len() as u64,
                                code_bytes,
                                file_bytes: summary.total_size,
                            });
                        }
                    }
                }
            }
            if want != items.len() {
                return Err(SplitError::Usage(
                    "internal: a compression worker stopped early".into(),
                ));
            }
            Ok(summaries)
        })();
        if result.is_err() {
            if let Ok(mut st) = lock() {
                st.stop = true;
                gate.1.notify_all();
            }
            // Unblock workers waiting to send: the receiver goes away.
            drop(rx);
        }
        result
    })
}
