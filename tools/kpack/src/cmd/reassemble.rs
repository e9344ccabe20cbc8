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
    /// An uncompressed bundle in its original layout, streamed from the
    /// archives when written: its header, then each code object at its
    /// offset (entry index, code object), zeros between.
    Stream(BundleLayout, Vec<(usize, Found<'r>)>),
}

/// Bundle `co` of a split file, rebuilt from the archives: exactly when
/// the split recorded its layout (format, version, entry IDs, order,
/// offsets), else in clang's canonical form (with the reason). At most this
/// bundle's code objects are held, and none for an uncompressed bundle
/// when `stream`. `effort` (0 to [`MAX_EFFORT`]) is how hard compressed
/// bundles are squeezed: the decompressed bytes are the same at every
/// effort, only their compressed size differs, and a rebuilt `.hip_fatbin`
/// must fit where the original was.
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
            if stream && layout.format == Format::Uncompressed {
                return Ok(Built::Stream(layout, parts));
            }
            let mut data: Vec<Option<Vec<u8>>> = vec![None; layout.entries.len()];
            for (i, f) in &parts {
                if let Some(slot) = data.get_mut(*i) {
                    *slot = Some(f.read()?);
                }
            }
            let refs: Vec<Option<&[u8]>> = data.iter().map(|d| d.as_deref()).collect();
            let raw = layout
                .build(&refs)
                .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
            // The code objects are in `raw` now: hold one copy while it is
            // compressed.
            drop(refs);
            drop(data);
            let b =
                contain(raw, layout.format, effort).map_err(|x| anyhow::anyhow!("{what}: {x}"))?;
            Ok(Built::Bytes(b, None))
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
                let c =
                    rocpack_bundle::write_ccob_long(&bundle, 2, rocpack_bundle::Method::Zstd, 19)
                        .map_err(|x| anyhow::anyhow!("{what}: {x}"))?;
                Ok(Built::Bytes(c, Some(why)))
            } else {
                Ok(Built::Bytes(bundle, Some(why)))
            }
        }
    }
}

/// Highest `effort` of [`bundles_for`].
const MAX_EFFORT: u8 = 2;

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

/// `raw` in its container format. Compressed at LLVM's default level
/// (effort 0), then with long-distance matching at level 9 (1, what current
/// LLVM writes) and 19 (2).
fn contain(raw: Vec<u8>, format: Format, effort: u8) -> Result<Vec<u8>, String> {
    match format {
        Format::Uncompressed => Ok(raw),
        Format::Ccob { version, method } => match effort {
            0 => rocpack_bundle::write_ccob(&raw, version, method),
            1 => rocpack_bundle::write_ccob_long(&raw, version, method, 9),
            _ => rocpack_bundle::write_ccob_long(&raw, version, method, 19),
        }
        .map_err(|e| e.to_string()),
    }
}

/// Largest host file `reassemble` takes (real fat libraries stay well below).
const MAX_HOST_FILE: u64 = 64 << 30;

/// Whether bundles of these sizes fit the host being reassembled.
type FitsFn<'a> = dyn Fn(&[u64]) -> anyhow::Result<bool> + 'a;

/// Bundles `0..count` of one split file built at `effort` and written one
/// after another into `spill` (from offset 0): `(offset, len)` of each.
/// As many bundles as there are worker threads are built at a time, each
/// holding only its own code objects.
///
/// With `fits` (which says whether bundles of given sizes fit the host),
/// the sizes of the bundles not built yet are projected from those built
/// (by `weights`, the code-object bytes of each bundle) once an eighth of
/// the weight is done: when even 10 % less than the projection would not
/// fit, `None` is returned at once instead of compressing the rest at an
/// effort that cannot fit.
#[allow(clippy::too_many_arguments)]
fn spill_bundles(
    marker: &Marker,
    count: usize,
    readers: &[(PathBuf, KpackReader)],
    what: &str,
    effort: u8,
    canonical: &mut (usize, Option<String>),
    spill: &std::fs::File,
    weights: &[u64],
    fits: Option<&FitsFn<'_>>,
) -> anyhow::Result<Option<Vec<(u64, u64)>>> {
    use rayon::prelude::*;
    use std::os::unix::fs::FileExt;
    let per = rayon::current_num_threads().max(1);
    let mut ranges = Vec::with_capacity(count);
    let mut pos = 0u64;
    let mut first = 0;
    while first < count {
        let last = count.min(first + per);
        let built: Vec<_> = (first..last)
            .into_par_iter()
            .map(|co| bundle_for(marker, co, readers, what, effort, true))
            .collect();
        for (co, b) in (first..last).zip(built) {
            let len = match b? {
                Built::Bytes(b, why) => {
                    note_canonical(canonical, co, why);
                    spill
                        .write_all_at(&b, pos)
                        .context("failed to write the bundle spill file")?;
                    b.len() as u64
                }
                Built::Stream(layout, parts) => {
                    let header = layout.header();
                    spill
                        .write_all_at(&header, pos)
                        .context("failed to write the bundle spill file")?;
                    for (i, f) in &parts {
                        let mut at = pos + layout.entries[*i].offset;
                        f.stream(&mut |b| {
                            spill
                                .write_all_at(b, at)
                                .context("failed to write the bundle spill file")?;
                            at += b.len() as u64;
                            Ok(())
                        })?;
                    }
                    // Zeros up to the end (a hole, if nothing was written there).
                    if spill.metadata()?.len() < pos + layout.size {
                        spill.set_len(pos + layout.size)?;
                    }
                    layout.size
                }
            };
            ranges.push((pos, len));
            pos += len;
        }
        if let Some(fits) = fits {
            let total: u64 = weights.iter().sum();
            let done: u64 = weights[..last].iter().sum();
            if last < count && done > 0 && done >= total / 8 {
                let ratio = pos as f64 / done as f64 * 0.9;
                let mut lens: Vec<u64> = ranges.iter().map(|r| r.1).collect();
                lens.extend(weights[last..].iter().map(|&w| (w as f64 * ratio) as u64));
                if !fits(&lens)? {
                    return Ok(None);
                }
            }
        }
        first = last;
    }
    Ok(Some(ranges))
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
    let spill = tempfile::tempfile_in(dir)
        .with_context(|| format!("failed to create a spill file in `{}`", dir.display()))?;
    let weights = bundle_weights(&marker, count, readers);
    let fits = |lens: &[u64]| -> anyhow::Result<bool> {
        rocpack_elf::reassembly_fits(host, lens).map_err(fail)
    };
    let mut effort = 0;
    loop {
        *canonical = (0, None);
        spill.set_len(0)?;
        let project = (effort < MAX_EFFORT).then_some(&fits as &FitsFn<'_>);
        let Some(ranges) = spill_bundles(
            &marker, count, readers, name, effort, canonical, &spill, &weights, project,
        )?
        else {
            effort += 1;
            continue;
        };
        let total = ranges.last().map_or(0, |r| r.0 + r.1);
        let src = rocpack_bundle::FileRange::new(&spill, 0, total);
        let bundles = rocpack_elf::Bundles::In {
            src: &src,
            ranges: &ranges,
        };
        // Layout errors come before the first byte is written.
        match rocpack_elf::reassemble_to(host, host_src, &bundles, &mut w) {
            Ok(n) => {
                w.flush()?;
                return Ok(n);
            }
            Err(rocpack_elf::Error::Layout { .. }) if effort < MAX_EFFORT => effort += 1,
            Err(e) => return Err(fail(e)),
        }
    }
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
    let spill = tempfile::tempfile_in(dir)
        .with_context(|| format!("failed to create a spill file in `{}`", dir.display()))?;
    let weights = bundle_weights(&marker, count, readers);
    let mut effort = 0;
    loop {
        *canonical = (0, None);
        spill.set_len(0)?;
        let Some(ranges) = spill_bundles(
            &marker, count, readers, name, effort, canonical, &spill, &weights, None,
        )?
        else {
            effort += 1;
            continue;
        };
        let total = ranges.last().map_or(0, |r| r.0 + r.1);
        let src = rocpack_bundle::FileRange::new(&spill, 0, total);
        let bundles = rocpack_elf::Bundles::In {
            src: &src,
            ranges: &ranges,
        };
        // Layout errors come before the first byte is written.
        match rocpack_image::pe::reassemble_to(host, host_src, &bundles, out) {
            Ok(n) => return Ok(n),
            Err(
                rocpack_image::Error::Layout { .. }
                | rocpack_image::Error::Elf(rocpack_elf::Error::Layout { .. }),
            ) if effort < MAX_EFFORT => effort += 1,
            Err(e) => return Err(fail(e)),
        }
    }
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
