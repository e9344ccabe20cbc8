//! The bounded-memory engine: every bundle of a split image rebuilt at one
//! effort into per-worker spill files ([`SpillPass`]), largest first, then
//! the image written from the host and the spill files range by range; or,
//! when every bundle comes back uncompressed, each bundle streamed straight
//! to its place in the output ([`place_uncompressed`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use rayon::prelude::*;
use rocpack_bundle::{FileRange, Format, ReadAt};
use rocpack_image::{Bundles, Fit, Reassembly};
use rocpack_kpack::Marker;

use super::code_objects::{
    bundle_for, head_len, is_compressed, write_exact, Archives, RebuiltBundle,
};
use super::effort::{write_fitting, MAX_EFFORT};
use super::{Notes, ReassembleError};

/// `Write` at a position of a file (positioned writes).
pub struct PositionedWriter<'f> {
    file: &'f File,
    pos: u64,
}

impl<'f> PositionedWriter<'f> {
    /// Writes into `file` from `pos` on.
    pub fn new(file: &'f File, pos: u64) -> Self {
        PositionedWriter { file, pos }
    }
}

impl Write for PositionedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(buf, self.pos)?;
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Files read as one source, one after another (the non-empty spill files).
pub struct ConcatSource<'a> {
    /// (start in the source, range of a file), by start.
    parts: Vec<(u64, FileRange<'a>)>,
    size: u64,
}

impl<'a> ConcatSource<'a> {
    /// `files` (each with its length) one after another, and where each
    /// starts in the source.
    pub fn new(files: &'a [(File, u64)]) -> (ConcatSource<'a>, Vec<u64>) {
        let mut parts = Vec::with_capacity(files.len());
        let mut bases = Vec::with_capacity(files.len());
        let mut size = 0u64;
        for (f, len) in files {
            bases.push(size);
            if *len > 0 {
                parts.push((size, FileRange::new(f, 0, *len)));
            }
            size += len;
        }
        (ConcatSource { parts, size }, bases)
    }
}

impl ReadAt for ConcatSource<'_> {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let i = self.parts.partition_point(|p| p.0 <= offset);
        match i.checked_sub(1).and_then(|i| self.parts.get(i)) {
            Some((base, r)) => r.read_at(offset - base, buf),
            None => Ok(0),
        }
    }
}

/// Where a bundle went: (spill file index, offset in it, length).
type SpillPlace = (usize, u64, u64);

/// One spill file per worker thread, with its length.
type Spills = Vec<Mutex<(File, u64)>>;

/// Spill files and where each bundle went in them.
struct Spilled {
    spills: Spills,
    places: Vec<SpillPlace>,
    /// Bundles larger than the original the split recorded.
    larger: Vec<bool>,
    /// The effort each bundle was built at.
    efforts: Vec<u8>,
}

impl Spilled {
    fn lens(&self) -> Vec<u64> {
        self.places.iter().map(|p| p.2).collect()
    }
}

/// One bundle built into a spill file.
struct Built {
    place: SpillPlace,
    /// Why it is in canonical form (if it is).
    canonical: Option<String>,
    /// Whether it was recompressed.
    recompressed: bool,
    /// Whether it is larger than the original the split recorded.
    larger: bool,
    /// The original's size, when the split recorded it.
    packed: Option<u64>,
    /// The effort it was built at.
    effort: u8,
}

/// Rebuilding every bundle of one split image into per-worker spill files
/// (created in `dir`), at rising effort until the host takes them.
pub struct SpillPass<'a> {
    pub host: &'a Reassembly<'a>,
    pub marker: &'a Marker,
    pub count: usize,
    pub archives: &'a Archives,
    pub what: &'a str,
    pub dir: &'a Path,
    /// Code-object bytes of each bundle (the projection weights).
    pub weights: &'a [u64],
}

/// What the workers of one effort share.
struct Progress {
    places: Vec<Option<SpillPlace>>,
    larger: Vec<bool>,
    /// The effort each bundle was built at.
    efforts: Vec<u8>,
    /// The size of each bundle's original, when the split recorded it.
    packed: Vec<Option<u64>>,
    notes: Notes,
}

impl SpillPass<'_> {
    /// Builds the bundles at rising effort until they fit the host, then
    /// writes the image into `dst` (empty). Returns the bytes written and
    /// the effort the bundles were built at.
    ///
    /// At each effort every bundle is built once; only when together they
    /// do not fit are the ones larger than their originals squeezed harder
    /// on their own ([`SpillPass::refit`]): the host takes the bundles'
    /// total, so a bundle a little larger than its original costs nothing
    /// while others are smaller.
    pub fn reassemble(&self, dst: &File, notes: &mut Notes) -> Result<(u64, u8), ReassembleError> {
        let mut effort = 0;
        loop {
            let last = effort >= MAX_EFFORT;
            let Some(mut spilled) = self.spill(effort, notes, !last)? else {
                effort += 1;
                continue;
            };
            // At the last effort the write itself says why they do not fit.
            if !last
                && self.fits(&spilled.lens())? == Fit::DoesNotFit
                && (!self.refit(&mut spilled)? || self.fits(&spilled.lens())? == Fit::DoesNotFit)
            {
                effort += 1;
                continue;
            }
            return Ok((self.write(spilled, dst)?, effort));
        }
    }

    /// The image written into `dst` from the host and the spill files.
    fn write(&self, spilled: Spilled, dst: &File) -> Result<u64, ReassembleError> {
        let files: Vec<(File, u64)> = spilled
            .spills
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect();
        let (src, bases) = ConcatSource::new(&files);
        let ranges: Vec<(u64, u64)> = spilled
            .places
            .iter()
            .map(|&(t, at, len)| (bases[t] + at, len))
            .collect();
        let bundles = Bundles::In {
            src: &src,
            ranges: &ranges,
        };
        self.host.write(&bundles, dst).map_err(|e| self.failed(e))
    }

    fn fits(&self, lens: &[u64]) -> Result<Fit, ReassembleError> {
        self.host.fits(lens).map_err(|e| self.failed(e))
    }

    fn failed(&self, source: rocpack_image::Error) -> ReassembleError {
        ReassembleError::Image {
            name: self.what.to_string(),
            source,
        }
    }

    /// Every bundle at `effort` into fresh spill files, one per worker;
    /// `None` when `project` and the projection says they cannot fit.
    fn spill(
        &self,
        effort: u8,
        notes: &mut Notes,
        project: bool,
    ) -> Result<Option<Spilled>, ReassembleError> {
        let spills = (0..rayon::current_num_threads().max(1))
            .map(|_| {
                let f = tempfile::tempfile_in(self.dir).map_err(|e| {
                    ReassembleError::io(
                        format!("failed to create a spill file in `{}`", self.dir.display()),
                        e,
                    )
                })?;
                Ok(Mutex::new((f, 0u64)))
            })
            .collect::<Result<Spills, ReassembleError>>()?;
        let Some(p) = self.spill_bundles(effort, &spills, project)? else {
            return Ok(None);
        };
        *notes = p.notes;
        Ok(Some(Spilled {
            spills,
            places: p
                .places
                .into_iter()
                .map(|p| p.expect("every bundle built"))
                .collect(),
            larger: p.larger,
            efforts: p.efforts,
        }))
    }

    /// Bundles `0..count` built at `effort`, each written into the spill
    /// file of the worker thread that built it (`spills`, one per thread).
    /// Bundles are built largest first (by weight), every worker busy
    /// until the last, each holding only its bundle's encoder and read
    /// buffers: code objects stream from the archives through the
    /// compressor into the spill file.
    ///
    /// The first bundles of that order holding an eighth of the weight
    /// (the prefix, [`projection_prefix`]) are built first and speak for
    /// the rest. With `project`, the sizes of the others are projected
    /// from them: when even 10 % less than the projection would not fit,
    /// `None` is returned instead of compressing the rest at an effort that
    /// cannot fit. When the prefix together is larger than the originals
    /// the split recorded, the rest are built at the next effort at once
    /// (a 27-target XLA plugin: at level 4, 38 of its 45 bundles come out
    /// larger than the originals, at level 6 two) and the prefix's larger
    /// bundles are squeezed on their own. Only the inputs decide, never
    /// which bundle happens to be done first: the output is the same for
    /// any number of workers and any order they finish in.
    fn spill_bundles(
        &self,
        effort: u8,
        spills: &Spills,
        project: bool,
    ) -> Result<Option<Progress>, ReassembleError> {
        let order = self.largest_first((0..self.count).collect());
        let (prefix, rest) = order.split_at(projection_prefix(&order, self.weights));
        let state = Mutex::new(Progress {
            places: vec![None; self.count],
            larger: vec![false; self.count],
            efforts: vec![effort; self.count],
            packed: vec![None; self.count],
            notes: Notes::default(),
        });
        self.build_all(prefix, effort..=effort, spills, &state)?;
        let mut rest_effort = effort;
        if !prefix.is_empty() {
            let st = state.lock().unwrap_or_else(|p| p.into_inner());
            if project && self.projected_misfit(&st.places, prefix)? {
                return Ok(None);
            }
            if effort < MAX_EFFORT && outgrown(prefix, &st) {
                rest_effort = effort + 1;
            }
        }
        if rest_effort > effort {
            let larger: Vec<usize> = {
                let st = state.lock().unwrap_or_else(|p| p.into_inner());
                prefix.iter().copied().filter(|&co| st.larger[co]).collect()
            };
            self.build_all(&larger, rest_effort..=MAX_EFFORT, spills, &state)?;
        }
        self.build_all(rest, rest_effort..=rest_effort, spills, &state)?;
        Ok(Some(state.into_inner().unwrap_or_else(|p| p.into_inner())))
    }

    /// `bundles` built in parallel (in this order) at `efforts` into the
    /// spill files, their places, sizes and notes recorded in `state`.
    fn build_all(
        &self,
        bundles: &[usize],
        efforts: std::ops::RangeInclusive<u8>,
        spills: &Spills,
        state: &Mutex<Progress>,
    ) -> Result<(), ReassembleError> {
        bundles.par_iter().try_for_each(|&co| {
            let b = self.build_into(co, efforts.clone(), spills)?;
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            st.places[co] = Some(b.place);
            st.larger[co] = b.larger;
            st.efforts[co] = b.effort;
            st.packed[co] = b.packed;
            st.notes
                .note((0, co), format!("bundle {co}"), b.canonical, b.recompressed);
            Ok(())
        })
    }

    /// The bundles of `spilled` larger than the originals the split
    /// recorded, each rebuilt on its own at rising effort above the one
    /// it was built at until it is no larger (appended to the spill files,
    /// largest first). Whether there was any to rebuild. Which bundles are
    /// rebuilt, and at which effort each ends, depends on the bundles
    /// alone: the output is the same for any number of workers.
    fn refit(&self, spilled: &mut Spilled) -> Result<bool, ReassembleError> {
        let larger: Vec<usize> = (0..self.count)
            .filter(|&co| spilled.larger[co] && spilled.efforts[co] < MAX_EFFORT)
            .collect();
        if larger.is_empty() {
            return Ok(false);
        }
        let built = self
            .largest_first(larger)
            .par_iter()
            .map(|&co| {
                self.build_into(co, spilled.efforts[co] + 1..=MAX_EFFORT, &spilled.spills)
                    .map(|b| (co, b))
            })
            .collect::<Result<Vec<_>, ReassembleError>>()?;
        for (co, b) in built {
            spilled.places[co] = b.place;
            spilled.larger[co] = b.larger;
            spilled.efforts[co] = b.effort;
        }
        Ok(true)
    }

    /// `bundles` by weight, largest first (ties by index).
    fn largest_first(&self, mut bundles: Vec<usize>) -> Vec<usize> {
        bundles.sort_by_key(|&co| (std::cmp::Reverse(self.weights[co]), co));
        bundles
    }

    /// Bundle `co` built at the first effort of `efforts` (and at the
    /// next ones while it is larger than its original) and appended to the
    /// spill file of the calling worker thread.
    fn build_into(
        &self,
        co: usize,
        efforts: std::ops::RangeInclusive<u8>,
        spills: &Spills,
    ) -> Result<Built, ReassembleError> {
        let t = rayon::current_thread_index().unwrap_or(0) % spills.len().max(1);
        // Only this thread uses spill `t`: the lock is never contended.
        let mut g = spills[t].lock().unwrap_or_else(|p| p.into_inner());
        let (file, pos) = &mut *g;
        let at = *pos;
        let mut b = self.spill_one(co, efforts, file, at)?;
        b.place.0 = t;
        *pos = at + b.place.2;
        Ok(b)
    }

    /// Bundle `co` at `efforts` into `file` at `at` (its place's spill
    /// index left 0 for the caller).
    fn spill_one(
        &self,
        co: usize,
        efforts: std::ops::RangeInclusive<u8>,
        file: &File,
        at: u64,
    ) -> Result<Built, ReassembleError> {
        use std::os::unix::fs::FileExt;
        let wctx = |e| ReassembleError::io("failed to write the bundle spill file".into(), e);
        let first = *efforts.start();
        match bundle_for(self.marker, co, self.archives, self.what, first, true)? {
            RebuiltBundle::InMemory {
                bytes,
                canonical,
                recompressed,
            } => {
                file.write_all_at(&bytes, at).map_err(wctx)?;
                Ok(Built {
                    place: (0, at, bytes.len() as u64),
                    canonical,
                    recompressed,
                    larger: false,
                    packed: None,
                    effort: first,
                })
            }
            RebuiltBundle::Streamed(layout, parts) => {
                let head = head_len(&layout)?;
                let fitted = write_fitting(
                    &layout,
                    &parts,
                    efforts,
                    &mut || {
                        std::io::BufWriter::with_capacity(
                            1 << 18,
                            PositionedWriter::new(file, at + head),
                        )
                    },
                    &mut |mut w| w.flush(),
                    self.what,
                )?;
                file.write_all_at(&fitted.header, at).map_err(wctx)?;
                Ok(Built {
                    place: (0, at, head + fitted.n),
                    canonical: None,
                    recompressed: is_compressed(&layout),
                    larger: fitted.larger,
                    packed: layout.packed,
                    effort: fitted.effort,
                })
            }
        }
    }

    /// Whether bundles even 10 % smaller than projected from the built
    /// bundles of `prefix` (every one of them built; other bundles,
    /// built or not, are projected too) would not fit. A projection plans
    /// the whole host file: it is done once per effort.
    fn projected_misfit(
        &self,
        places: &[Option<SpillPlace>],
        prefix: &[usize],
    ) -> Result<bool, ReassembleError> {
        let mut len = vec![None; self.count];
        let (mut done, mut built) = (0u64, 0u64);
        for &co in prefix {
            let l = places[co].map_or(0, |p| p.2);
            len[co] = Some(l);
            done = done.saturating_add(self.weights[co]);
            built = built.saturating_add(l);
        }
        let ratio = built as f64 / done.max(1) as f64 * 0.9;
        let lens: Vec<u64> = (0..self.count)
            .map(|i| len[i].unwrap_or((self.weights[i] as f64 * ratio) as u64))
            .collect();
        Ok(self.fits(&lens)? == Fit::DoesNotFit)
    }
}

/// Whether `bundles` (built, in `st`) are together larger than the
/// originals the split recorded (a bundle without the record counts as its
/// own size on both sides).
fn outgrown(bundles: &[usize], st: &Progress) -> bool {
    let (mut built, mut original) = (0u64, 0u64);
    for &co in bundles {
        let len = st.places[co].map_or(0, |p| p.2);
        built = built.saturating_add(len);
        original = original.saturating_add(st.packed[co].unwrap_or(len));
    }
    built > original
}

/// How many bundles of `order` (largest first) the projection of
/// [`SpillPass`] waits for: the shortest prefix holding an eighth of the
/// total weight; 0 (no projection) when that is every bundle's weight or
/// there is none. Only the inputs decide, never the order workers finish in.
fn projection_prefix(order: &[usize], weights: &[u64]) -> usize {
    let total = weights.iter().fold(0u64, |a, &w| a.saturating_add(w));
    let mut done = 0u64;
    for (k, &co) in order.iter().enumerate() {
        done = done.saturating_add(weights[co]);
        if done > 0 && done >= total / 8 {
            return if done >= total { 0 } else { k + 1 };
        }
    }
    0
}

/// When every bundle comes back uncompressed in its original layout (its
/// size known before a byte is read) and the host can place them, the
/// reassembled file is written without a spill file: the host part first
/// (positioned writes, the bundles' places left open), then every bundle
/// straight to its offset, streamed from the archives, as many at a time
/// as there are workers, largest first. `None` (nothing written) otherwise.
pub fn place_uncompressed(
    host: &Reassembly<'_>,
    marker: &Marker,
    count: usize,
    archives: &Archives,
    name: &str,
    dst: &File,
) -> Result<Option<u64>, ReassembleError> {
    if !host.may_place() {
        return Ok(None);
    }
    let mut plain = Vec::with_capacity(count);
    for co in 0..count {
        match bundle_for(marker, co, archives, name, 0, true)? {
            RebuiltBundle::Streamed(layout, parts) if layout.format == Format::Uncompressed => {
                plain.push((layout, parts))
            }
            _ => return Ok(None),
        }
    }
    let lens: Vec<u64> = plain.iter().map(|(l, _)| l.size).collect();
    let placed = host
        .place(&lens, dst)
        .map_err(|source| ReassembleError::Image {
            name: name.to_string(),
            source,
        })?;
    let Some((n, offsets)) = placed else {
        return Ok(None);
    };
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|&co| (std::cmp::Reverse(lens[co]), co));
    order.par_iter().try_for_each(|&co| {
        let (layout, parts) = &plain[co];
        let mut w =
            std::io::BufWriter::with_capacity(1 << 18, PositionedWriter::new(dst, offsets[co]));
        write_exact(layout, parts, 0, &mut w, name)?;
        w.flush()
            .map_err(|e| ReassembleError::io(format!("failed to write bundle {co} of `{name}`"), e))
    })?;
    Ok(Some(n))
}

#[cfg(test)]
mod tests {
    use super::{outgrown, projection_prefix, Notes, Progress};

    fn progress(built: &[u64], packed: &[Option<u64>]) -> Progress {
        Progress {
            places: built.iter().map(|&l| Some((0, 0, l))).collect(),
            larger: built
                .iter()
                .zip(packed)
                .map(|(&l, p)| p.is_some_and(|p| l > p))
                .collect(),
            efforts: vec![0; built.len()],
            packed: packed.to_vec(),
            notes: Notes::default(),
        }
    }

    #[test]
    fn a_prefix_outgrows_its_originals_only_in_total() {
        // One bundle 10 bytes over, the other 20 under: together smaller.
        let st = progress(&[110, 80], &[Some(100), Some(100)]);
        assert!(!outgrown(&[0, 1], &st));
        // Alone, the larger one outgrew its original.
        assert!(outgrown(&[0], &st));
        // Exactly the originals' size is not larger.
        assert!(!outgrown(
            &[0, 1],
            &progress(&[100, 100], &[Some(100), Some(100)])
        ));
        // A bundle without a record counts as its own size on both sides.
        assert!(!outgrown(
            &[0, 1],
            &progress(&[5_000, 100], &[None, Some(100)])
        ));
        assert!(outgrown(
            &[0, 1],
            &progress(&[5_000, 101], &[None, Some(100)])
        ));
        // Sizes near u64::MAX do not overflow.
        assert!(!outgrown(
            &[0, 1],
            &progress(&[u64::MAX, 1], &[Some(u64::MAX), Some(1)])
        ));
    }

    #[test]
    fn the_projection_waits_for_the_largest_bundles_holding_an_eighth() {
        // Largest first: 0 alone holds an eighth of 16000.
        assert_eq!(projection_prefix(&[0, 1], &[8064, 7936]), 1);
        // Equal bundles: as many as make an eighth (40 of 320, 20 of 160).
        let w = [40u64; 8];
        assert_eq!(projection_prefix(&[0, 1, 2, 3, 4, 5, 6, 7], &w), 1);
        let w = [10u64; 16];
        let order: Vec<usize> = (0..w.len()).collect();
        assert_eq!(projection_prefix(&order, &w), 2);
        // One bundle (or one holding all the weight): nothing to project.
        assert_eq!(projection_prefix(&[0], &[5]), 0);
        assert_eq!(projection_prefix(&[1, 0], &[0, 9]), 0);
        // No weight at all (no code objects found): no projection.
        assert_eq!(projection_prefix(&[0, 1], &[0, 0]), 0);
        // Sizes from an archive cannot overflow the sum.
        assert_eq!(projection_prefix(&[0, 1], &[u64::MAX, u64::MAX]), 0);
    }
}
