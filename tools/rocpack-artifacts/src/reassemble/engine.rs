//! The bounded-memory engine: every bundle of a split image rebuilt at one
//! effort into per-worker spill files ([`SpillPass`]), largest first, then
//! the image written from the host and the spill files range by range; or,
//! when every bundle comes back uncompressed, each bundle streamed straight
//! to its place in the output ([`place_uncompressed`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Spill files with their lengths, and where each bundle went in them.
struct Spilled {
    files: Vec<(File, u64)>,
    places: Vec<SpillPlace>,
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
    /// Bundles of the projection prefix not built yet.
    prefix_left: usize,
    notes: Notes,
}

impl SpillPass<'_> {
    /// Builds the bundles at rising effort until they fit the host, then
    /// writes the image into `dst` (empty). Returns the bytes written and
    /// the effort the bundles were built at.
    pub fn reassemble(&self, dst: &File, notes: &mut Notes) -> Result<(u64, u8), ReassembleError> {
        let mut effort = 0;
        loop {
            let last = effort >= MAX_EFFORT;
            let Some(spilled) = self.spill(effort, notes, !last)? else {
                effort += 1;
                continue;
            };
            let (src, bases) = ConcatSource::new(&spilled.files);
            let ranges: Vec<(u64, u64)> = spilled
                .places
                .iter()
                .map(|&(t, at, len)| (bases[t] + at, len))
                .collect();
            let lens: Vec<u64> = ranges.iter().map(|r| r.1).collect();
            // At the last effort the write itself says why they do not fit.
            if !last && self.fits(&lens)? == Fit::DoesNotFit {
                effort += 1;
                continue;
            }
            let bundles = Bundles::In {
                src: &src,
                ranges: &ranges,
            };
            let n = self.host.write(&bundles, dst).map_err(|e| self.failed(e))?;
            return Ok((n, effort));
        }
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
            .collect::<Result<Vec<_>, ReassembleError>>()?;
        let Some((places, pass_notes)) = self.spill_bundles(effort, &spills, project)? else {
            return Ok(None);
        };
        *notes = pass_notes;
        let files = spills
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect();
        Ok(Some(Spilled { files, places }))
    }

    /// Bundles `0..count` built at `effort`, each written into the spill
    /// file of the worker thread that built it (`spills`, one per thread).
    /// Bundles are built largest first (by weight), every worker busy
    /// until the last, each holding only its bundle's encoder and read
    /// buffers: code objects stream from the archives through the
    /// compressor into the spill file.
    ///
    /// With `project`, the sizes of the bundles not built yet are
    /// projected from the first bundles of that order holding an eighth
    /// of the weight ([`projection_prefix`]), once they are built: when
    /// even 10 % less than the projection would not fit, `None` is
    /// returned as soon as the bundles being built are done, instead of
    /// compressing the rest at an effort that cannot fit. The decision
    /// depends on the prefix alone, never on which other bundles happen
    /// to be done: the output is the same for any number of workers and
    /// any order they finish in.
    fn spill_bundles(
        &self,
        effort: u8,
        spills: &[Mutex<(File, u64)>],
        project: bool,
    ) -> Result<Option<(Vec<SpillPlace>, Notes)>, ReassembleError> {
        let mut order: Vec<usize> = (0..self.count).collect();
        order.sort_by_key(|&co| (std::cmp::Reverse(self.weights[co]), co));
        let prefix = if project {
            &order[..projection_prefix(&order, self.weights)]
        } else {
            &[]
        };
        let mut in_prefix = vec![false; self.count];
        for &co in prefix {
            in_prefix[co] = true;
        }
        let abandon = AtomicBool::new(false);
        let state = Mutex::new(Progress {
            places: vec![None; self.count],
            prefix_left: prefix.len(),
            notes: Notes::default(),
        });
        order.par_iter().try_for_each(|&co| {
            if abandon.load(Ordering::Relaxed) {
                return Ok(());
            }
            let t = rayon::current_thread_index().unwrap_or(0) % spills.len().max(1);
            // Only this thread uses spill `t`: the lock is never contended.
            let mut g = spills[t].lock().unwrap_or_else(|p| p.into_inner());
            let (file, pos) = &mut *g;
            let at = *pos;
            let (len, canonical, recompressed) = self.spill_one(co, effort, file, at)?;
            *pos = at + len;
            drop(g);
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            st.places[co] = Some((t, at, len));
            st.notes
                .note((0, co), format!("bundle {co}"), canonical, recompressed);
            if in_prefix[co] {
                st.prefix_left -= 1;
                if st.prefix_left == 0 && self.projected_misfit(&st.places, prefix)? {
                    abandon.store(true, Ordering::Relaxed);
                }
            }
            Ok::<(), ReassembleError>(())
        })?;
        let st = state.into_inner().unwrap_or_else(|p| p.into_inner());
        if abandon.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let places = st
            .places
            .into_iter()
            .map(|p| p.expect("every bundle built"))
            .collect();
        Ok(Some((places, st.notes)))
    }

    /// Bundle `co` at `effort` into `file` at `at`: its length, why it is
    /// in canonical form (if it is) and whether it was recompressed.
    fn spill_one(
        &self,
        co: usize,
        effort: u8,
        file: &File,
        at: u64,
    ) -> Result<(u64, Option<String>, bool), ReassembleError> {
        use std::os::unix::fs::FileExt;
        let wctx = |e| ReassembleError::io("failed to write the bundle spill file".into(), e);
        match bundle_for(self.marker, co, self.archives, self.what, effort, true)? {
            RebuiltBundle::InMemory {
                bytes,
                canonical,
                recompressed,
            } => {
                file.write_all_at(&bytes, at).map_err(wctx)?;
                Ok((bytes.len() as u64, canonical, recompressed))
            }
            RebuiltBundle::Streamed(layout, parts) => {
                let head = head_len(&layout)?;
                let (header, n) = write_fitting(
                    &layout,
                    &parts,
                    effort,
                    &mut || {
                        std::io::BufWriter::with_capacity(
                            1 << 18,
                            PositionedWriter::new(file, at + head),
                        )
                    },
                    &mut |mut w| w.flush(),
                    self.what,
                )?;
                file.write_all_at(&header, at).map_err(wctx)?;
                Ok((head + n, None, is_compressed(&layout)))
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
    use super::projection_prefix;

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
