//! Bundles rebuilt from the `.kpack` archives: the code objects of one
//! bundle ([`find_code_objects`]), its original layout when the split
//! recorded it ([`exact_layout`]) and the bundle itself ([`bundle_for`]):
//! exactly (same container format, entry IDs, order and offsets) or in
//! clang's canonical form, with the reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rocpack_bundle::{BundleLayout, Format};
use rocpack_kpack::bundle_meta::{self, EntryPlace};
use rocpack_kpack::{KernelEntry, KpackReader, Marker};

use super::effort::{params, write_fitting, MAX_EFFORT};
use super::ReassembleError;

/// Host entry ID clang-19 writes.
const HOST_ID: &str = "host-x86_64-unknown-linux--";
const DEVICE_PREFIX: &str = "hipv4-amdgcn-amd-amdhsa--";

/// The `.kpack` archives code objects come from: (path, reader).
pub type Archives = [(PathBuf, KpackReader)];

/// One code object found in the archives (not read yet).
pub struct CodeObject<'r> {
    path: &'r Path,
    reader: &'r KpackReader,
    entry: &'r KernelEntry,
    /// Its place in the original bundle (`metadata.bundle`), if recorded.
    place: Option<EntryPlace>,
}

impl CodeObject<'_> {
    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.entry.original_size
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hand the code object to `sink` in pieces of at most 256 KiB.
    pub fn stream(
        &self,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), ReassembleError>,
    ) -> Result<(), ReassembleError> {
        self.reader
            .stream_entry::<ReassembleError>(self.entry, sink)
            .map_err(|e| e.in_archive(self.path))
    }

    fn read(&self) -> Result<Vec<u8>, ReassembleError> {
        let mut v = Vec::with_capacity(usize::try_from(self.len()).unwrap_or(0));
        self.stream(&mut |b| {
            v.extend_from_slice(b);
            Ok(())
        })?;
        Ok(v)
    }

    fn digest(&self) -> Result<[u8; 32], ReassembleError> {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        self.stream(&mut |b| {
            h.update(b);
            Ok(())
        })?;
        Ok(h.finalize().into())
    }
}

/// The code objects of bundle `co` in the archives, by full entry ID (the
/// metadata's `target`, else ours); a code object in several archives must
/// be the same in each.
pub fn find_code_objects<'r>(
    marker: &Marker,
    co: usize,
    archives: &'r Archives,
    what: &str,
) -> Result<BTreeMap<String, CodeObject<'r>>, ReassembleError> {
    let key = marker.lookup_key(co as u64);
    let mut found: BTreeMap<String, CodeObject<'r>> = BTreeMap::new();
    for (path, r) in archives {
        for e in r.entries().iter().filter(|e| e.key == key) {
            let place = e.metadata.as_ref().and_then(bundle_meta::decode);
            let id = place
                .as_ref()
                .map(|p| p.id.clone())
                .unwrap_or_else(|| format!("{DEVICE_PREFIX}{}", e.target));
            let f = CodeObject {
                path,
                reader: r,
                entry: e,
                place,
            };
            if let Some(prev) = found.get(&id) {
                if prev.len() != f.len() || prev.digest()? != f.digest()? {
                    return Err(ReassembleError::Input(format!(
                        "{what}: `{key}` for {} differs between archives",
                        e.target
                    )));
                }
                continue;
            }
            found.insert(id, f);
        }
    }
    if found.is_empty() {
        return Err(ReassembleError::Input(format!(
            "{what}: no code objects for `{key}` in any .kpack file"
        )));
    }
    Ok(found)
}

/// Code objects of a bundle in its original layout: (entry index, code object).
pub type Parts<'r> = Vec<(usize, CodeObject<'r>)>;

/// A rebuilt bundle.
pub enum RebuiltBundle<'r> {
    /// In memory: compressed, or in clang's canonical form (with the
    /// reason), and whether its compressed bytes are kpack's.
    InMemory {
        bytes: Vec<u8>,
        canonical: Option<String>,
        recompressed: bool,
    },
    /// A bundle in its original layout (uncompressed or CCOB), streamed
    /// from the archives when written ([`write_exact`]): its header, then
    /// each code object at its offset, zeros between, through the
    /// compressor for a CCOB.
    Streamed(BundleLayout, Parts<'r>),
}

/// Bundle `co` of a split file, rebuilt from the archives: exactly when
/// the split recorded its layout (format, version, entry IDs, order,
/// offsets), else in clang's canonical form (with the reason). At most this
/// bundle's code objects are held, and none for a bundle in its original
/// layout when `stream` (it is then written by [`write_exact`]). `effort`
/// (0 to [`MAX_EFFORT`]) is how hard compressed bundles are squeezed: the
/// decompressed bytes are the same at every effort, only their compressed
/// size differs.
pub fn bundle_for<'r>(
    marker: &Marker,
    co: usize,
    archives: &'r Archives,
    what: &str,
    effort: u8,
    stream: bool,
) -> Result<RebuiltBundle<'r>, ReassembleError> {
    let found = find_code_objects(marker, co, archives, what)?;
    match exact_layout(&found) {
        Ok(layout) => {
            let mut parts: Parts<'r> = found
                .into_values()
                .filter_map(|f| {
                    let i = f.place.as_ref().map(|p| p.index as usize)?;
                    Some((i, f))
                })
                .collect();
            parts.sort_by_key(|p| p.0);
            if stream {
                return Ok(RebuiltBundle::Streamed(layout, parts));
            }
            let head = head_len(&layout)? as usize;
            let mut raw = Vec::new();
            let header = write_fitting(
                &layout,
                &parts,
                effort..=MAX_EFFORT,
                &mut || vec![0u8; head],
                &mut |v| {
                    raw = v;
                    Ok(())
                },
                what,
            )?
            .header;
            raw[..head].copy_from_slice(&header);
            Ok(RebuiltBundle::InMemory {
                bytes: raw,
                canonical: None,
                recompressed: is_compressed(&layout),
            })
        }
        Err(why) => canonical_bundle(&found, effort, what, why),
    }
}

/// The bundle in clang's canonical form: host entry first, device entries
/// sorted by ID, as CCOB v2 (zstd) at `effort` > 0.
fn canonical_bundle<'r>(
    found: &BTreeMap<String, CodeObject<'_>>,
    effort: u8,
    what: &str,
    why: String,
) -> Result<RebuiltBundle<'r>, ReassembleError> {
    let data = found
        .iter()
        .map(|(id, f)| Ok((id.as_str(), f.read()?)))
        .collect::<Result<Vec<_>, ReassembleError>>()?;
    let mut entries: Vec<(&str, &[u8])> = vec![(HOST_ID, &[][..])];
    entries.extend(data.iter().map(|(id, d)| (*id, d.as_slice())));
    let bundle = rocpack_bundle::write_uncompressed(&entries);
    drop(entries);
    drop(data);
    let bytes = if effort > 0 {
        rocpack_bundle::write_ccob_params(
            &bundle,
            2,
            rocpack_bundle::Method::Zstd,
            params(rocpack_bundle::Method::Zstd, MAX_EFFORT),
        )
        .map_err(|source| ReassembleError::bundle(what, source))?
    } else {
        bundle
    };
    Ok(RebuiltBundle::InMemory {
        bytes,
        canonical: Some(why),
        recompressed: false,
    })
}

/// Whether a bundle of `layout` is compressed (rebuilding it recompresses it).
pub fn is_compressed(layout: &BundleLayout) -> bool {
    matches!(layout.format, Format::Ccob { .. })
}

/// Bytes in front of what [`write_exact`] writes: the CCOB header, whose
/// size and hash are known only at the end.
pub fn head_len(layout: &BundleLayout) -> Result<u64, ReassembleError> {
    match layout.format {
        Format::Uncompressed => Ok(0),
        Format::Ccob { version, .. } => rocpack_bundle::ccob_header_len(version)
            .map_err(|source| ReassembleError::bundle("CCOB header", source)),
    }
}

/// The bundle of `layout` (code objects `parts`) written to `out` in its
/// container format, in one pass: the header, each code object streamed
/// from its archive at its offset, zeros between; a CCOB is compressed as
/// it goes (at `effort`, [`params`]) and its header ([`head_len`] bytes,
/// to go in front of what was written) returned. The CCOB's hash is the
/// one the split recorded when there is one (the payload is then the
/// original's byte for byte: the layout reproduces it and every code
/// object has its recorded size), else the MD5 of the payload. Returns the
/// header and the bytes written to `out`.
pub fn write_exact(
    layout: &BundleLayout,
    parts: &[(usize, CodeObject<'_>)],
    effort: u8,
    out: &mut dyn std::io::Write,
    what: &str,
) -> Result<(Vec<u8>, u64), ReassembleError> {
    let err = |source| ReassembleError::bundle(what, source);
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
    parts: &[(usize, CodeObject<'_>)],
    out: &mut dyn std::io::Write,
    what: &str,
) -> Result<(), ReassembleError> {
    const ZEROS: [u8; 1 << 14] = [0; 1 << 14];
    let wctx = || format!("{what}: failed to write a bundle");
    let zeros = |out: &mut dyn std::io::Write, mut n: u64| -> Result<(), ReassembleError> {
        while n > 0 {
            let k = n.min(ZEROS.len() as u64) as usize;
            out.write_all(&ZEROS[..k])
                .map_err(|e| ReassembleError::io(wctx(), e))?;
            n -= k as u64;
        }
        Ok(())
    };
    let header = layout.header();
    out.write_all(&header)
        .map_err(|e| ReassembleError::io(wctx(), e))?;
    let mut pos = header.len() as u64;
    let mut order: Vec<&(usize, CodeObject<'_>)> =
        parts.iter().filter(|p| !p.1.is_empty()).collect();
    order.sort_by_key(|p| layout.entries.get(p.0).map_or(u64::MAX, |e| e.offset));
    for (i, f) in order {
        let off = layout.entries.get(*i).map_or(u64::MAX, |e| e.offset);
        if off < pos || off.saturating_add(f.len()) > layout.size {
            return Err(ReassembleError::Input(format!(
                "{what}: code objects overlap or lie outside the bundle"
            )));
        }
        zeros(out, off - pos)?;
        let mut n = 0u64;
        f.stream(&mut |b| {
            n += b.len() as u64;
            out.write_all(b).map_err(|e| ReassembleError::io(wctx(), e))
        })?;
        if n != f.len() {
            return Err(ReassembleError::Input(format!(
                "{what}: `{}` gave {n} bytes, {} recorded",
                f.path.display(),
                f.len()
            )));
        }
        pos = off + n;
    }
    zeros(out, layout.size - pos)
}

/// The bundle's original layout (its code objects' sizes checked against
/// it), or why it cannot be restored.
pub fn exact_layout(found: &BTreeMap<String, CodeObject<'_>>) -> Result<BundleLayout, String> {
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

/// Code-object bytes of each bundle `0..count` (how much work each is).
pub fn bundle_weights(marker: &Marker, count: usize, archives: &Archives) -> Vec<u64> {
    let mut w = vec![0u64; count];
    let keys: BTreeMap<String, usize> = (0..count)
        .map(|co| (marker.lookup_key(co as u64), co))
        .collect();
    for (_, r) in archives {
        for e in r.entries() {
            if let Some(&co) = keys.get(&e.key) {
                w[co] = w[co].saturating_add(e.original_size);
            }
        }
    }
    w
}
