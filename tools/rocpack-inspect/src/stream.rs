//! Streaming every code object of a description to a sink (hashing, extraction), memory flat in the payload.

use super::*;

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
pub(super) enum Src<'d> {
    /// Bytes of the input file.
    File { at: u64, len: u64 },
    /// Entry `entry` of a bundle that must be walked.
    Bundle,
    /// Kernel of a `.kpack` archive of the input.
    Kernel { kpack: &'d KpackDesc, idx: usize },
}

/// A unit of streaming work: a file range, one bundle walk (all its
/// entries), or one kernel.
pub(super) enum Job<'d> {
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
pub(super) fn plan_jobs<'d>(
    d: &'d Desc,
    jobs: &mut Vec<Job<'d>>,
    n: &mut usize,
    walks: &mut usize,
) {
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
    // The first failing job in description order is the one reported,
    // whatever the thread count.
    let results: Vec<(usize, Option<bool>)> = rocpack_kpack::ordered::try_map_ordered(
        &jobs,
        |job| -> Result<Option<(usize, Option<bool>)>> {
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
        },
    )?
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
pub(super) const PIPELINE_MIN: u64 = 8 << 20;

/// One walk of an indexed bundle, feeding `states` through `sink`; a large
/// payload is decompressed on this thread while another runs the sink,
/// with a bounded queue of chunks between them (16 x 256 KiB).
#[allow(clippy::type_complexity)]
pub(super) fn walk_into<S: CoSink>(
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
pub(super) struct Hasher(std::sync::Mutex<BTreeMap<usize, String>>);

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
pub(super) fn for_each_slot(d: &mut Desc, f: &mut dyn FnMut(&mut String)) {
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
pub(super) fn for_each_walk(d: &mut Desc, f: &mut dyn FnMut(&mut BundleDesc)) {
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
