//! `kpack reassemble --host FILE --kpack-dir DIR -o OUT`: rebuild the fat
//! binary (ELF, static archive or PE32+ image) from a split host binary and its `.kpack`
//! files. For every wrapper `co_index` *i* the code objects stored under
//! `<kernel_name>#<i>` (kernel name from the marker) in all `.kpack` files
//! under DIR become one bundle. When the split recorded the bundle's layout
//! (`metadata.bundle`, docs/formats/split-elf.md) and every entry is found,
//! the bundle is rebuilt exactly: same container format and version (CCOB
//! v1/v2/v3, same method), same entry IDs, order and offsets, so its
//! uncompressed bytes equal the input's. Otherwise (older splits, a subset
//! of the archives) it is rebuilt as clang writes one: host entry first,
//! device entries sorted by ID, 4096-aligned, as CCOB v2 (zstd) if the
//! uncompressed bundles do not fit where `.hip_fatbin` was.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use rocpack_bundle::{BundleLayout, Format};
use rocpack_image::Analysis;
use rocpack_kpack::bundle_meta::{self, EntryPlace};
use rocpack_kpack::{KpackReader, Marker};

#[derive(Debug, clap::Args)]
pub struct ReassembleArgs {
    /// The split (host-only) ELF file, static archive or PE32+ image.
    #[arg(long, value_name = "FILE")]
    pub host: PathBuf,
    /// Directory searched (recursively) for `.kpack` files.
    #[arg(long, value_name = "DIR")]
    pub kpack_dir: PathBuf,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
}

/// Host entry ID clang-19 writes.
const HOST_ID: &str = "host-x86_64-unknown-linux--";
const DEVICE_PREFIX: &str = "hipv4-amdgcn-amd-amdhsa--";

fn find_kpacks(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("failed to read `{}`", dir.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("failed to read `{}`", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let ft = e.file_type()?;
        if ft.is_dir() {
            find_kpacks(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "kpack") {
            out.push(p);
        }
    }
    Ok(())
}

/// One code object found in the archives (not read yet).
struct Found<'r> {
    path: &'r Path,
    reader: &'r KpackReader,
    entry: &'r rocpack_kpack::KernelEntry,
    /// Its place in the original bundle (`metadata.bundle`), if recorded.
    place: Option<EntryPlace>,
}

impl Found<'_> {
    fn len(&self) -> u64 {
        self.entry.original_size
    }

    /// Hand the code object to `sink` in pieces of at most 256 KiB.
    fn stream(&self, sink: &mut dyn FnMut(&[u8]) -> anyhow::Result<()>) -> anyhow::Result<()> {
        self.reader
            .stream_entry::<anyhow::Error>(self.entry, sink)
            .with_context(|| format!("failed to read `{}`", self.path.display()))
    }

    fn read(&self) -> anyhow::Result<Vec<u8>> {
        let mut v = Vec::with_capacity(usize::try_from(self.len()).unwrap_or(0));
        self.stream(&mut |b| {
            v.extend_from_slice(b);
            Ok(())
        })?;
        Ok(v)
    }

    fn digest(&self) -> anyhow::Result<[u8; 32]> {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        self.stream(&mut |b| {
            h.update(b);
            Ok(())
        })?;
        Ok(h.finalize().into())
    }
}

/// The marker of a split file (from its first wrapper) and its bundle count.
fn marker_of(info: &Analysis, what: &str) -> rocpack_image::Result<(Marker, usize)> {
    let err = |msg: String| rocpack_image::Error::Layout {
        offset: 0,
        what: msg,
    };
    let wrappers = info.wrapper_markers();
    let w0 = wrappers
        .first()
        .ok_or_else(|| err(format!("{what}: split binary without wrappers")))?;
    let bytes =
        w0.2.ok_or_else(|| err(format!("{what}: wrapper 0 does not point at a marker")))?;
    let marker = Marker::decode(bytes).map_err(|e| err(format!("{what}: bad marker: {e}")))?;
    let count = wrappers.iter().map(|w| w.1 as usize + 1).max().unwrap_or(0);
    Ok((marker, count))
}

/// The bundles (by co_index) of one split file, from the archives, in
/// memory (archives and PE images; ELF files stream, see [`run`]).
fn bundles_for(
    info: &Analysis,
    readers: &[(PathBuf, KpackReader)],
    what: &str,
    effort: u8,
    canonical: &mut (usize, Option<String>),
) -> rocpack_image::Result<Vec<Vec<u8>>> {
    let (marker, count) = marker_of(info, what)?;
    let mut bundles = Vec::with_capacity(count);
    for co in 0..count {
        let b = bundle_for(&marker, co, readers, what, effort, false).map_err(|e| {
            rocpack_image::Error::Layout {
                offset: 0,
                what: format!("{e:#}"),
            }
        })?;
        match b {
            Built::Bytes(b, why) => {
                note_canonical(canonical, co, why);
                bundles.push(b);
            }
            Built::Stream(..) => unreachable!("not asked to stream"),
        }
    }
    Ok(bundles)
}

fn note_canonical(canonical: &mut (usize, Option<String>), co: usize, why: Option<String>) {
    if let Some(why) = why {
        canonical.0 += 1;
        canonical.1.get_or_insert(format!("bundle {co}: {why}"));
    }
}

/// The code objects of bundle `co` in the archives, by full entry ID (the
/// metadata's `target`, else ours); a code object in several archives must
/// be the same in each.
fn find_code_objects<'r>(
    marker: &Marker,
    co: usize,
    readers: &'r [(PathBuf, KpackReader)],
    what: &str,
) -> anyhow::Result<BTreeMap<String, Found<'r>>> {
    let key = marker.lookup_key(co as u64);
    let mut found: BTreeMap<String, Found<'r>> = BTreeMap::new();
    for (path, r) in readers {
        for e in r.entries().iter().filter(|e| e.key == key) {
            let place = e.metadata.as_ref().and_then(bundle_meta::decode);
            let id = place
                .as_ref()
                .map(|p| p.id.clone())
                .unwrap_or_else(|| format!("{DEVICE_PREFIX}{}", e.target));
            let f = Found {
                path,
                reader: r,
                entry: e,
                place,
            };
            if let Some(prev) = found.get(&id) {
                if prev.len() != f.len() || prev.digest()? != f.digest()? {
                    bail!("{what}: `{key}` for {} differs between archives", e.target);
                }
                continue;
            }
            found.insert(id, f);
        }
    }
    if found.is_empty() {
        bail!("{what}: no code objects for `{key}` in any .kpack file");
    }
    Ok(found)
}

/// A rebuilt bundle.
enum Built<'r> {
    /// In memory (compressed, or in clang's canonical form with the reason).
    Bytes(Vec<u8>, Option<String>),
    /// A bundle in its original layout (uncompressed or CCOB), streamed
    /// from the archives when written ([`write_exact`]): its header, then
    /// each code object at its offset (entry index, code object), zeros
    /// between, through the compressor for a CCOB.
    Stream(BundleLayout, Vec<(usize, Found<'r>)>),
}

/// Bundle `co` of a split file, rebuilt from the archives: exactly when
/// the split recorded its layout (format, version, entry IDs, order,
/// offsets), else in clang's canonical form (with the reason). At most this
/// bundle's code objects are held, and none for a bundle in its original
/// layout when `stream` (it is then written by [`write_exact`]). `effort`
/// (0 to [`MAX_EFFORT`]) is how hard compressed bundles are squeezed: the
/// decompressed bytes are the same at every effort, only their compressed
/// size differs, and a rebuilt `.hip_fatbin` must fit where the original
/// was.
fn bundle_for<'r>(
    marker: &Marker,
    co: usize,
    readers: &'r [(PathBuf, KpackReader)],
    what: &str,
    effort: u8,
    stream: bool,
) -> anyhow::Result<Built<'r>> {
    let found = find_code_objects(marker, co, readers, what)?;
    match exact_layout(&found) {
        Ok(layout) => {
            let mut parts: Vec<(usize, Found<'r>)> = found
                .into_values()
                .filter_map(|f| {
                    let i = f.place.as_ref().map(|p| p.index as usize)?;
                    Some((i, f))
                })
                .collect();
            parts.sort_by_key(|p| p.0);
            if stream {
                return Ok(Built::Stream(layout, parts));
            }
            let head = head_len(&layout)? as usize;
            let mut raw = Vec::new();
            let (header, _) = write_fitting(
                &layout,
                &parts,
                effort,
                &mut || vec![0u8; head],
                &mut |v| {
                    raw = v;
                    Ok(())
                },
                what,
            )?;
            raw[..head].copy_from_slice(&header);
            Ok(Built::Bytes(raw, None))
        }
        Err(why) => {
            let data = found
                .iter()
                .map(|(id, f)| Ok((id.as_str(), f.read()?)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let mut entries: Vec<(&str, &[u8])> = vec![(HOST_ID, &[][..])];
            entries.extend(data.iter().map(|(id, d)| (*id, d.as_slice())));
            let bundle = rocpack_bundle::write_uncompressed(&entries);
            drop(entries);
            drop(data);
            if effort > 0 {
                let c = rocpack_bundle::write_ccob_params(
                    &bundle,
                    2,
                    rocpack_bundle::Method::Zstd,
                    params(rocpack_bundle::Method::Zstd, MAX_EFFORT),
                )
                .map_err(|x| anyhow::anyhow!("{what}: {x}"))?;
                Ok(Built::Bytes(c, Some(why)))
            } else {
                Ok(Built::Bytes(bundle, Some(why)))
            }
        }
    }
}

/// Highest `effort` of [`bundle_for`].
const MAX_EFFORT: u8 = 3;

/// How a CCOB is compressed at `effort`. zstd: level 4, then level 6,
/// both without long-distance matching over a window of at most 2^24
/// (16 MiB: the encoder then holds about 25 MiB whatever the bundle's
/// size); then level 9 and level 19 with long matching over a window
/// covering the bundle (at most 2^27, what every zstd decoder accepts; the
/// encoder then holds about the bundle). zlib: LLVM's default level 6,
/// then 9. A bundle whose split recorded its original size is squeezed
/// harder on its own until it is no larger ([`write_fitting`]); without
/// the record, all bundles again at the next effort while they do not fit.
///
/// Why a 16 MiB window without long matching first: a bundle holding one
/// code object per target is mostly repeats one code object apart (~5-9 MB
/// in ROCm's XLA plugin), which a 2^24 window covers, and long matching
/// there costs time and bytes. Measured on the XLA plugin (41 CCOB v3, 1.2
/// GB of code objects, a `.hip_fatbin` without slack; libzstd 1.5, one
/// core, all 41 bundles): level 4 with the 2^24 window 0.85x the original
/// bytes, 40 of 41 bundles fit, 0.60 s of CPU; level 6 the same way 0.77x,
/// all fit, 2.0 s; level 6 with long matching (the previous first try)
/// 0.99x, 34 fit, 3.2 s; level 3 with a 2^21 window 1.1x.
fn params(method: rocpack_bundle::Method, effort: u8) -> rocpack_bundle::CcobParams {
    use rocpack_bundle::{CcobParams, Method};
    let level = match (method, effort) {
        (Method::Zstd, 0) => 4,
        (Method::Zstd, 1) => 6,
        (Method::Zstd, 2) => 9,
        (Method::Zstd, _) => 19,
        (Method::Zlib, 0 | 1) => rocpack_bundle::DEFAULT_ZLIB_LEVEL as i32,
        (Method::Zlib, _) => 9,
    };
    CcobParams {
        level,
        long: effort >= 2,
        max_window_log: if effort < 2 { 24 } else { 27 },
    }
}

/// [`write_exact`] at `effort`, then at higher efforts while the result is
/// larger than the original CCOB the split recorded (`layout.packed`):
/// `out()` gives a fresh writer each time (the same place). Returns the
/// header and the bytes written by the last attempt.
fn write_fitting<W: std::io::Write>(
    layout: &BundleLayout,
    parts: &[(usize, Found<'_>)],
    effort: u8,
    out: &mut dyn FnMut() -> W,
    finish: &mut dyn FnMut(W) -> std::io::Result<()>,
    what: &str,
) -> anyhow::Result<(Vec<u8>, u64)> {
    let mut e = effort;
    loop {
        let mut w = out();
        let (header, n) = write_exact(layout, parts, e, &mut w, what)?;
        finish(w).with_context(|| format!("{what}: failed to write a bundle"))?;
        let len = header.len() as u64 + n;
        if e < MAX_EFFORT && layout.packed.is_some_and(|p| len > p) {
            e += 1;
            continue;
        }
        return Ok((header, n));
    }
}

/// Bytes in front of what [`write_exact`] writes: the CCOB header, whose
/// size and hash are known only at the end.
fn head_len(layout: &BundleLayout) -> anyhow::Result<u64> {
    match layout.format {
        Format::Uncompressed => Ok(0),
        Format::Ccob { version, .. } => {
            rocpack_bundle::ccob_header_len(version).map_err(|e| anyhow::anyhow!("{e}"))
        }
    }
}

/// The bundle of `layout` (code objects `parts`: entry index, code object)
/// written to `out` in its container format, in one pass: the header, each
/// code object streamed from its archive at its offset, zeros between; a
/// CCOB is compressed as it goes (at `effort`, [`params`]) and its header
/// ([`head_len`] bytes, to go in front of what was written) returned. The
/// CCOB's hash is the one the split recorded when there is one (the
/// payload is then the original's byte for byte: the layout reproduces it
/// and every code object has its recorded size), else the MD5 of the
/// payload. Returns the header and the bytes written to `out`.
fn write_exact(
    layout: &BundleLayout,
    parts: &[(usize, Found<'_>)],
    effort: u8,
    out: &mut dyn std::io::Write,
    what: &str,
) -> anyhow::Result<(Vec<u8>, u64)> {
    let err = |e: rocpack_bundle::Error| anyhow::anyhow!("{what}: {e}");
    match layout.format {
        Format::Uncompressed => {
            write_payload(layout, parts, out, what)?;
            Ok((Vec::new(), layout.size))
        }
        Format::Ccob { version, method } => {
            let mut enc = rocpack_bundle::CcobEncoder::new(
                out,
                version,
                method,
                layout.size,
                params(method, effort),
                layout.hash,
            )
            .map_err(err)?;
            write_payload(layout, parts, &mut enc, what)?;
            let (_, header, n) = enc.finish().map_err(err)?;
            Ok((header, n))
        }
    }
}

/// The uncompressed bundle of `layout` into `out`: header, code objects at
/// their offsets, zeros elsewhere.
fn write_payload(
    layout: &BundleLayout,
    parts: &[(usize, Found<'_>)],
    out: &mut dyn std::io::Write,
    what: &str,
) -> anyhow::Result<()> {
    const ZEROS: [u8; 1 << 14] = [0; 1 << 14];
    let zeros = |out: &mut dyn std::io::Write, mut n: u64| -> std::io::Result<()> {
        while n > 0 {
            let k = n.min(ZEROS.len() as u64) as usize;
            out.write_all(&ZEROS[..k])?;
            n -= k as u64;
        }
        Ok(())
    };
    let header = layout.header();
    out.write_all(&header)?;
    let mut pos = header.len() as u64;
    let mut order: Vec<&(usize, Found<'_>)> = parts.iter().filter(|p| p.1.len() > 0).collect();
    order.sort_by_key(|p| layout.entries.get(p.0).map_or(u64::MAX, |e| e.offset));
    for (i, f) in order {
        let off = layout.entries.get(*i).map_or(u64::MAX, |e| e.offset);
        if off < pos || off.saturating_add(f.len()) > layout.size {
            bail!("{what}: code objects overlap or lie outside the bundle");
        }
        zeros(out, off - pos)?;
        let mut n = 0u64;
        f.stream(&mut |b| {
            n += b.len() as u64;
            out.write_all(b)?;
            Ok(())
        })?;
        if n != f.len() {
            bail!(
                "{what}: `{}` gave {n} bytes, {} recorded",
                f.path.display(),
                f.len()
            );
        }
        pos = off + n;
    }
    zeros(out, layout.size - pos)?;
    Ok(())
}

/// The bundle's original layout (its code objects' sizes checked against
/// it), or why it cannot be restored.
fn exact_layout(found: &BTreeMap<String, Found<'_>>) -> Result<BundleLayout, String> {
    let mut parts = Vec::with_capacity(found.len());
    for f in found.values() {
        let place = f
            .place
            .as_ref()
            .ok_or("the split did not record its layout")?;
        parts.push((place, f.len()));
    }
    let layout = bundle_meta::restore(&parts)?;
    // Every entry with bytes has its code object, of its size, inside the
    // bundle after the header.
    let header = layout.header().len() as u64;
    for (i, e) in layout.entries.iter().enumerate() {
        let f = found
            .values()
            .find(|f| f.place.as_ref().is_some_and(|p| p.index == i as u64));
        match f {
            Some(f) if f.len() == e.size => {}
            None if e.size == 0 => continue,
            _ => return Err(format!("no code object of its size for `{}`", e.id)),
        }
        if e.size > 0
            && (e.offset < header || e.offset.checked_add(e.size).is_none_or(|x| x > layout.size))
        {
            return Err(format!("`{}` lies outside the bundle", e.id));
        }
    }
    Ok(layout)
}

/// Largest host file `reassemble` takes (real fat libraries stay well below).
const MAX_HOST_FILE: u64 = 64 << 30;

/// Whether bundles of these sizes fit the host being reassembled.
type FitsFn<'a> = dyn Fn(&[u64]) -> anyhow::Result<bool> + Sync + 'a;

/// A spill file and how much of it is written.
type Spill = std::sync::Mutex<(std::fs::File, u64)>;

/// One attempt at building every bundle of a split image into per-worker
/// spill files (created in `dir`), shared by the ELF and PE reassembly.
struct Round<'a> {
    marker: &'a Marker,
    count: usize,
    readers: &'a [(PathBuf, KpackReader)],
    what: &'a str,
    dir: &'a Path,
    weights: &'a [u64],
}

/// Spill files with their lengths, and where each bundle went in them
/// (spill index, offset, length).
type Spilled = (Vec<(std::fs::File, u64)>, Vec<(usize, u64, u64)>);

impl Round<'_> {
    /// [`spill_bundles`] at `effort` into fresh spill files, one per
    /// worker; `None` when the projection says the bundles cannot fit.
    fn spill(
        &self,
        effort: u8,
        canonical: &mut (usize, Option<String>),
        fits: Option<&FitsFn<'_>>,
    ) -> anyhow::Result<Option<Spilled>> {
        let spills = (0..rayon::current_num_threads().max(1))
            .map(|_| {
                let f = tempfile::tempfile_in(self.dir).with_context(|| {
                    format!("failed to create a spill file in `{}`", self.dir.display())
                })?;
                Ok(std::sync::Mutex::new((f, 0u64)))
            })
            .collect::<anyhow::Result<Vec<Spill>>>()?;
        let Some(places) = spill_bundles(
            self.marker,
            self.count,
            self.readers,
            self.what,
            effort,
            canonical,
            &spills,
            self.weights,
            fits,
        )?
        else {
            return Ok(None);
        };
        let files = spills
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect();
        Ok(Some((files, places)))
    }

    /// Builds the bundles at rising effort until `write` places them.
    /// `write` gets the bundles and whether this is the last effort, and
    /// returns `None` when they do not fit (layout errors come before the
    /// first byte is written; at the last effort it reports the error).
    /// `fits` (projected total lengths) lets an effort that cannot fit be
    /// given up early.
    fn reassemble(
        &self,
        canonical: &mut (usize, Option<String>),
        fits: Option<&FitsFn<'_>>,
        write: &mut dyn FnMut(&rocpack_elf::Bundles<'_>, bool) -> anyhow::Result<Option<u64>>,
    ) -> anyhow::Result<u64> {
        let mut effort = 0;
        loop {
            *canonical = (0, None);
            let project = fits.filter(|_| effort < MAX_EFFORT);
            let Some((files, places)) = self.spill(effort, canonical, project)? else {
                effort += 1;
                continue;
            };
            let (src, ranges) = Round::ranges(&files, &places);
            let bundles = rocpack_elf::Bundles::In {
                src: &src,
                ranges: &ranges,
            };
            match write(&bundles, effort >= MAX_EFFORT)? {
                Some(n) => return Ok(n),
                None => effort += 1,
            }
        }
    }

    /// The spill files as one source, and each bundle's range in it.
    fn ranges<'f>(
        files: &'f [(std::fs::File, u64)],
        places: &[(usize, u64, u64)],
    ) -> (Cat<'f>, Vec<(u64, u64)>) {
        let (src, bases) = Cat::new(files);
        let ranges = places
            .iter()
            .map(|&(t, at, len)| (bases[t] + at, len))
            .collect();
        (src, ranges)
    }
}

/// `Write` at a position of a file (positioned writes).
struct At<'f> {
    file: &'f std::fs::File,
    pos: u64,
}

impl std::io::Write for At<'_> {
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
struct Cat<'a> {
    /// (start in the source, range of a file), by start.
    parts: Vec<(u64, rocpack_bundle::FileRange<'a>)>,
    size: u64,
}

impl<'a> Cat<'a> {
    fn new(files: &'a [(std::fs::File, u64)]) -> (Cat<'a>, Vec<u64>) {
        let mut parts = Vec::with_capacity(files.len());
        let mut bases = Vec::with_capacity(files.len());
        let mut size = 0u64;
        for (f, len) in files {
            bases.push(size);
            if *len > 0 {
                parts.push((size, rocpack_bundle::FileRange::new(f, 0, *len)));
            }
            size += len;
        }
        (Cat { parts, size }, bases)
    }
}

impl rocpack_bundle::ReadAt for Cat<'_> {
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

/// Bundles `0..count` of one split file built at `effort`, each written
/// into the spill file of the worker thread that built it (`spills`, one
/// per thread): `(spill, offset, len)` of each. Bundles are built largest
/// first (by `weights`, the code-object bytes of each bundle), every worker
/// busy until the last, each holding only its bundle's encoder and read
/// buffers: code objects stream from the archives through the compressor
/// into the spill file.
///
/// With `fits` (which says whether bundles of given sizes fit the host),
/// the sizes of the bundles not built yet are projected from those built
/// once, when an eighth of the weight is done: when even 10 % less than
/// the projection would not fit, `None` is returned as soon as the bundles
/// being built are done, instead of compressing the rest at an effort that
/// cannot fit.
#[allow(clippy::too_many_arguments)]
fn spill_bundles(
    marker: &Marker,
    count: usize,
    readers: &[(PathBuf, KpackReader)],
    what: &str,
    effort: u8,
    canonical: &mut (usize, Option<String>),
    spills: &[Spill],
    weights: &[u64],
    fits: Option<&FitsFn<'_>>,
) -> anyhow::Result<Option<Vec<(usize, u64, u64)>>> {
    use rayon::prelude::*;
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    struct State {
        places: Vec<Option<(usize, u64, u64)>>,
        done: u64,
        built: u64,
        projected: bool,
        canonical: (usize, Option<String>),
    }
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|&co| (std::cmp::Reverse(weights[co]), co));
    let total: u64 = weights.iter().sum();
    let abandon = AtomicBool::new(false);
    let state = std::sync::Mutex::new(State {
        places: vec![None; count],
        done: 0,
        built: 0,
        projected: false,
        canonical: (0, None),
    });
    order.par_iter().try_for_each(|&co| -> anyhow::Result<()> {
        if abandon.load(Ordering::Relaxed) {
            return Ok(());
        }
        let t = rayon::current_thread_index().unwrap_or(0) % spills.len().max(1);
        // Only this thread uses spill `t`: the lock is never contended.
        let mut g = spills[t].lock().unwrap_or_else(|p| p.into_inner());
        let (file, pos) = &mut *g;
        let at = *pos;
        let wctx = "failed to write the bundle spill file";
        let (len, why) = match bundle_for(marker, co, readers, what, effort, true)? {
            Built::Bytes(b, why) => {
                file.write_all_at(&b, at).context(wctx)?;
                (b.len() as u64, why)
            }
            Built::Stream(layout, parts) => {
                let head = head_len(&layout)?;
                let f: &std::fs::File = file;
                let (header, n) = write_fitting(
                    &layout,
                    &parts,
                    effort,
                    &mut || {
                        std::io::BufWriter::with_capacity(
                            1 << 18,
                            At {
                                file: f,
                                pos: at + head,
                            },
                        )
                    },
                    &mut |mut w| w.flush(),
                    what,
                )?;
                file.write_all_at(&header, at).context(wctx)?;
                (head + n, None)
            }
        };
        *pos = at + len;
        drop(g);
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        st.places[co] = Some((t, at, len));
        note_canonical(&mut st.canonical, co, why);
        st.done += weights[co];
        st.built += len;
        if let Some(fits) = fits {
            let done = st.done;
            // Once, when an eighth is done (a projection plans the whole
            // host file: not free).
            if done > 0 && done >= total / 8 && done < total && !st.projected {
                st.projected = true;
                let ratio = st.built as f64 / done as f64 * 0.9;
                let lens: Vec<u64> = (0..count)
                    .map(|i| match st.places[i] {
                        Some(p) => p.2,
                        None => (weights[i] as f64 * ratio) as u64,
                    })
                    .collect();
                if !fits(&lens)? {
                    abandon.store(true, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    })?;
    let st = state.into_inner().unwrap_or_else(|p| p.into_inner());
    if abandon.load(Ordering::Relaxed) {
        return Ok(None);
    }
    *canonical = st.canonical;
    Ok(Some(
        st.places
            .into_iter()
            .map(|p| p.expect("every bundle built"))
            .collect(),
    ))
}

/// Code-object bytes of each bundle `0..count` (the projection weights of
/// [`spill_bundles`]).
fn bundle_weights(marker: &Marker, count: usize, readers: &[(PathBuf, KpackReader)]) -> Vec<u64> {
    let mut w = vec![0u64; count];
    let keys: BTreeMap<String, usize> = (0..count)
        .map(|co| (marker.lookup_key(co as u64), co))
        .collect();
    for (_, r) in readers {
        for e in r.entries() {
            if let Some(&co) = keys.get(&e.key) {
                w[co] = w[co].saturating_add(e.original_size);
            }
        }
    }
    w
}

/// Reassemble an ELF file into `out` (empty, at offset 0) with bounded
/// memory: bundles are rebuilt one at a time into a spill file beside the
/// output, then the host part (copied from `host_src`, positioned reads)
/// and the bundles are written range by range. Squeezes harder only while
/// the bundles do not fit. Returns the bytes written.
fn stream_elf(
    host: &[u8],
    host_src: &dyn rocpack_bundle::ReadAt,
    readers: &[(PathBuf, KpackReader)],
    name: &str,
    dir: &Path,
    out: &std::fs::File,
    canonical: &mut (usize, Option<String>),
) -> anyhow::Result<u64> {
    let fail = |e: rocpack_elf::Error| {
        anyhow::Error::new(rocpack_image::Error::from(e))
            .context(format!("failed to reassemble `{name}`"))
    };
    let info = rocpack_elf::analyze_in(host, host_src).map_err(fail)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, out);
    if info.state != rocpack_elf::State::Split {
        let n =
            rocpack_elf::reassemble_to(host, host_src, &rocpack_elf::Bundles::Owned(&[]), &mut w)
                .map_err(fail)?;
        w.flush()?;
        return Ok(n);
    }
    let analysis = Analysis::Elf(info);
    let (marker, count) = marker_of(&analysis, name)
        .map_err(|e| anyhow::Error::new(e).context(format!("failed to reassemble `{name}`")))?;
    if let Some(n) = place_plain(host, host_src, &marker, count, readers, name, out)? {
        return Ok(n);
    }
    let weights = bundle_weights(&marker, count, readers);
    let fits = |lens: &[u64]| -> anyhow::Result<bool> {
        rocpack_elf::reassembly_fits(host, lens).map_err(fail)
    };
    let round = Round {
        marker: &marker,
        count,
        readers,
        what: name,
        dir,
        weights: &weights,
    };
    round.reassemble(
        canonical,
        Some(&fits),
        &mut |bundles, last| match rocpack_elf::reassemble_to(host, host_src, bundles, &mut w) {
            Ok(n) => {
                w.flush()?;
                Ok(Some(n))
            }
            Err(rocpack_elf::Error::Layout { .. }) if !last => Ok(None),
            Err(e) => Err(fail(e)),
        },
    )
}

/// Reassemble a split PE32+ image into `out` (empty, opened for reading
/// and writing) with bounded memory, as [`stream_elf`] does: bundles
/// rebuilt one at a time into a spill file, then the image written range by
/// range (`rocpack_image::pe::reassemble_to`). Returns the bytes written.
fn stream_pe(
    host: &[u8],
    host_src: &dyn rocpack_bundle::ReadAt,
    readers: &[(PathBuf, KpackReader)],
    name: &str,
    dir: &Path,
    out: &std::fs::File,
    canonical: &mut (usize, Option<String>),
) -> anyhow::Result<u64> {
    let fail = |e: rocpack_image::Error| {
        anyhow::Error::new(e).context(format!("failed to reassemble `{name}`"))
    };
    let info = rocpack_image::pe::analyze_in(host, host_src).map_err(fail)?;
    let (marker, count) = marker_of(&Analysis::Pe(info), name).map_err(fail)?;
    let weights = bundle_weights(&marker, count, readers);
    let round = Round {
        marker: &marker,
        count,
        readers,
        what: name,
        dir,
        weights: &weights,
    };
    round.reassemble(
        canonical,
        None,
        &mut |bundles, last| match rocpack_image::pe::reassemble_to(host, host_src, bundles, out) {
            Ok(n) => Ok(Some(n)),
            Err(
                rocpack_image::Error::Layout { .. }
                | rocpack_image::Error::Elf(rocpack_elf::Error::Layout { .. }),
            ) if !last => Ok(None),
            Err(e) => Err(fail(e)),
        },
    )
}

/// Reassemble an `ar` archive into `out` (empty) with memory bounded by
/// its largest member: members are read and rebuilt one at a time, rebuilt
/// ones go through a spill file beside the output, the archive is written
/// range by range. Members are relocatable objects, whose `.hip_fatbin` is
/// rebuilt at the end of the file: the bundles always fit (no squeezing).
fn stream_archive(
    host: &[u8],
    host_src: &dyn rocpack_bundle::ReadAt,
    readers: &[(PathBuf, KpackReader)],
    name: &str,
    dir: &Path,
    out: &std::fs::File,
    canonical: &mut (usize, Option<String>),
) -> anyhow::Result<u64> {
    let spill = tempfile::tempfile_in(dir)
        .with_context(|| format!("failed to create a spill file in `{}`", dir.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, out);
    *canonical = (0, None);
    let n = rocpack_elf::reassemble_archive_to(
        host,
        host_src,
        &mut |member, info| {
            let what = format!("{name}({member})");
            bundles_for(&Analysis::Elf(info.clone()), readers, &what, 0, canonical).map_err(|e| {
                match e {
                    rocpack_image::Error::Elf(e) => e,
                    other => rocpack_elf::Error::Layout {
                        offset: other.offset().unwrap_or(0),
                        what: other.to_string(),
                    },
                }
            })
        },
        &spill,
        &mut w,
    )
    .map_err(|e| {
        anyhow::Error::new(rocpack_image::Error::from(e))
            .context(format!("failed to reassemble `{name}`"))
    })?;
    w.flush()?;
    Ok(n)
}

/// When every bundle comes back uncompressed in its original layout (its
/// size known before a byte is read), the reassembled file is written
/// without a spill file: the host part first (positioned writes, the
/// bundles' places left open), then every bundle straight to its offset,
/// streamed from the archives, as many at a time as there are workers,
/// largest first. `None` (nothing written) otherwise.
fn place_plain(
    host: &[u8],
    host_src: &dyn rocpack_bundle::ReadAt,
    marker: &Marker,
    count: usize,
    readers: &[(PathBuf, KpackReader)],
    name: &str,
    out: &std::fs::File,
) -> anyhow::Result<Option<u64>> {
    use rayon::prelude::*;
    let mut plain = Vec::with_capacity(count);
    for co in 0..count {
        match bundle_for(marker, co, readers, name, 0, true)? {
            Built::Stream(layout, parts) if layout.format == Format::Uncompressed => {
                plain.push((layout, parts))
            }
            _ => return Ok(None),
        }
    }
    let lens: Vec<u64> = plain.iter().map(|(l, _)| l.size).collect();
    let placed = rocpack_elf::reassemble_placed(host, host_src, &lens, out).map_err(|e| {
        anyhow::Error::new(rocpack_image::Error::from(e))
            .context(format!("failed to reassemble `{name}`"))
    })?;
    let Some((n, offsets)) = placed else {
        return Ok(None);
    };
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|&co| (std::cmp::Reverse(lens[co]), co));
    order.par_iter().try_for_each(|&co| -> anyhow::Result<()> {
        let (layout, parts) = &plain[co];
        let mut w = std::io::BufWriter::with_capacity(
            1 << 18,
            At {
                file: out,
                pos: offsets[co],
            },
        );
        write_exact(layout, parts, 0, &mut w, name)?;
        w.flush()
            .with_context(|| format!("failed to write bundle {co} of `{name}`"))?;
        Ok(())
    })?;
    Ok(Some(n))
}

pub fn run(args: ReassembleArgs) -> anyhow::Result<ExitCode> {
    // Regular files only (a FIFO must not hang, a link to /dev/zero must
    // not be read forever), mapped for their headers; the host part is
    // copied through positioned reads.
    let mapped = rocpack_artifacts::fsutil::Mapped::open(&args.host)
        .with_context(|| format!("failed to read `{}`", args.host.display()))?;
    let host = mapped.bytes();
    if host.len() as u64 > MAX_HOST_FILE {
        bail!(
            "`{}` is larger than {MAX_HOST_FILE} bytes",
            args.host.display()
        );
    }
    let mut paths = Vec::new();
    find_kpacks(&args.kpack_dir, &mut paths)?;
    if paths.is_empty() {
        bail!("no .kpack files under `{}`", args.kpack_dir.display());
    }
    // Positioned reads, never mapped: code objects are read one bundle at
    // a time and leave nothing resident behind.
    let mut readers = Vec::with_capacity(paths.len());
    for p in paths {
        let r = KpackReader::open_file(&p)
            .with_context(|| format!("failed to open `{}`", p.display()))?;
        readers.push((p, r));
    }
    let name = args.host.display().to_string();
    let mut canonical = (0usize, None::<String>);
    // Write atomically next to the output, with the host file's mode.
    let dir = args
        .output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = args
        .output
        .file_name()
        .with_context(|| format!("bad output path `{}`", args.output.display()))?;
    let tmp = dir.join(format!(
        ".{}.kpack-reassemble.tmp",
        file_name.to_string_lossy()
    ));
    let stream = matches!(
        rocpack_image::detect(host),
        rocpack_image::FileType::Elf { .. }
    ) && !rocpack_elf::is_archive(host);
    // A split PE image streams too (anything else PE goes the in-memory way,
    // which copies it or reports why it cannot).
    let pe = matches!(
        rocpack_image::detect(host),
        rocpack_image::FileType::Pe { .. }
    ) && rocpack_image::pe::analyze_in(host, &mapped.source())
        .is_ok_and(|i| i.state == rocpack_elf::State::Split);
    let written = (|| -> anyhow::Result<u64> {
        // Readable too: a PE image's checksum is computed from what was written.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .with_context(|| format!("failed to write `{}`", args.output.display()))?;
        let n = if pe {
            stream_pe(
                host,
                &mapped.source(),
                &readers,
                &name,
                dir,
                &f,
                &mut canonical,
            )?
        } else if rocpack_elf::is_archive(host) {
            stream_archive(
                host,
                &mapped.source(),
                &readers,
                &name,
                dir,
                &f,
                &mut canonical,
            )?
        } else if stream {
            stream_elf(
                host,
                &mapped.source(),
                &readers,
                &name,
                dir,
                &f,
                &mut canonical,
            )?
        } else {
            let out = in_memory(host, &readers, &name, &mut canonical)?;
            (&f).write_all(&out)?;
            out.len() as u64
        };
        let ctx = || format!("failed to write `{}`", args.output.display());
        f.sync_all().with_context(ctx)?;
        let perm = std::fs::metadata(&args.host)
            .with_context(ctx)?
            .permissions();
        std::fs::set_permissions(&tmp, perm).with_context(ctx)?;
        std::fs::rename(&tmp, &args.output).with_context(ctx)?;
        Ok(n)
    })();
    let n = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let (n, Some(why)) = &canonical {
        eprintln!(
            "kpack: note: {n} bundle(s) rebuilt in clang's canonical form, not the original layout (first: {why})"
        );
    }
    eprintln!("kpack: reassembled `{}` ({n} bytes)", args.output.display());
    Ok(ExitCode::SUCCESS)
}

/// What is neither ELF, a split PE image nor an archive: rebuilt in memory.
fn in_memory(
    host: &[u8],
    readers: &[(PathBuf, KpackReader)],
    name: &str,
    canonical: &mut (usize, Option<String>),
) -> anyhow::Result<Vec<u8>> {
    let mut build = |effort: u8| {
        *canonical = (0, None);
        rocpack_image::reassemble_file(host, &mut |member, info| {
            let what = if member.is_empty() {
                name.to_string()
            } else {
                format!("{name}({member})")
            };
            bundles_for(info, readers, &what, effort, canonical)
        })
    };
    // Squeeze harder only while the bundles do not fit.
    let mut effort = 0;
    loop {
        match build(effort) {
            Ok(o) => return Ok(o),
            Err(
                rocpack_image::Error::Layout { .. }
                | rocpack_image::Error::Elf(rocpack_elf::Error::Layout { .. }),
            ) if effort < MAX_EFFORT => effort += 1,
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("failed to reassemble `{name}`")))
            }
        }
    }
}
