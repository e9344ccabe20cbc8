//! The header and TOC of an archive: read from a [`Src`], every field
//! and type checked, every `none` blob range bounds-checked and disjoint,
//! ordinals a permutation of the blob list, sizes in agreement. Reads no
//! kernel bytes (of a zstd archive only the frame count).

use std::collections::HashMap;
use std::sync::OnceLock;

use super::zstd::{zstd_frame_count, ZstdIndex};
use super::Src;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    BlobLocation, KernelEntry, Scheme, BLOB_ALIGNMENT, HEADER_SIZE, MAGIC, SCHEME_NONE,
    SCHEME_ZSTD, VERSION,
};
use crate::msgpack::{q, Cursor};

/// The parsed, validated TOC of an archive.
#[derive(Clone, Debug)]
pub(super) struct Parsed {
    pub(super) toc_offset: u64,
    pub(super) format_version: u64,
    pub(super) group_name: String,
    pub(super) gfx_arch_family: String,
    pub(super) gfx_arches: Vec<String>,
    pub(super) scheme: Scheme,
    pub(super) entries: Vec<KernelEntry>,
    /// Stored bytes per ordinal of a `none` archive (empty for zstd).
    pub(super) blobs: Vec<BlobLocation>,
    pub(super) zstd_region: Option<BlobLocation>,
    /// The lazily checked frame index of a zstd archive.
    pub(super) zstd: Option<ZstdIndex>,
    pub(super) index: HashMap<String, HashMap<String, usize>>,
}

pub(super) fn read_u32(data: &[u8], at: usize, what: &'static str) -> Result<u32> {
    let b = at
        .checked_add(4)
        .and_then(|end| data.get(at..end))
        .ok_or_else(|| {
            Error::at(
                at as u64,
                ErrorKind::Truncated {
                    what,
                    needed: 4,
                    available: data.len().saturating_sub(at) as u64,
                },
            )
        })?;
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    Ok(u32::from_le_bytes(a))
}

pub(super) fn read_u64(data: &[u8], at: usize, what: &'static str) -> Result<u64> {
    let lo = read_u32(data, at, what)?;
    let hi = read_u32(data, at + 4, what)?;
    Ok(u64::from(lo) | (u64::from(hi) << 32))
}

pub(super) fn check_range(
    field: &dyn Fn() -> String,
    at: u64,
    start: u64,
    len: u64,
    lo: u64,
    hi: u64,
) -> Result<()> {
    let ok = start >= lo && start.checked_add(len).is_some_and(|end| end <= hi);
    if ok {
        Ok(())
    } else {
        Err(Error::at(
            at,
            ErrorKind::OutOfBounds {
                field: field(),
                start,
                len,
                lo,
                hi,
            },
        ))
    }
}

#[derive(Default)]
struct RawEntry {
    at: u64,
    kind: Option<String>,
    ordinal: Option<(u64, u64)>,
    original_size: Option<u64>,
    metadata: Option<rmpv::Value>,
}

fn dup(at: u64, field: String) -> Error {
    Error::at(at, ErrorKind::Unexpected { field })
}

fn missing(at: u64, field: String) -> Error {
    Error::at(at, ErrorKind::Missing { field })
}

/// The top-level TOC fields as read, each with the offset it was read at
/// where a later check names it.
#[derive(Default)]
struct TopFields {
    format_version: Option<u64>,
    group_name: Option<String>,
    family: Option<String>,
    arches: Option<Vec<String>>,
    raw_toc: Option<Vec<(String, String, RawEntry)>>,
    scheme_s: Option<(u64, String)>,
    /// Per blob: offset of its map, `offset`, `size`.
    blobs_raw: Option<Vec<(u64, u64, u64)>>,
    zstd_offset: Option<(u64, u64)>,
    zstd_size: Option<(u64, u64)>,
}

/// The entries checked against the blobs, and their lookup index.
struct Entries {
    entries: Vec<KernelEntry>,
    index: HashMap<String, HashMap<String, usize>>,
    /// Per ordinal: index of its entry and offset of its `ordinal` field.
    entry_of: Vec<(usize, u64)>,
}

/// Parse and validate a whole archive (reads the header, the TOC and the
/// zstd frame count from `src`, nothing else).
pub(super) fn parse(src: Src<'_>) -> Result<Parsed> {
    // 1. Header.
    let toc_offset = read_header(src)?;
    let len = src.len();
    // 2. The TOC map, read whole (it must end the file).
    let toc = src.read_at(toc_offset, len - toc_offset, "TOC")?;
    let mut c = Cursor::new(&toc, 0, toc_offset);
    let top = read_top(&mut c)?;
    if c.remaining() != 0 {
        return Err(Error::at(
            c.offset(),
            ErrorKind::TrailingData {
                what: "the TOC (it must end the file)",
                count: c.remaining() as u64,
            },
        ));
    }
    // 3. Required fields.
    let top_at = toc_offset;
    let format_version = top
        .format_version
        .ok_or_else(|| missing(top_at, "format_version".into()))?;
    let group_name = top
        .group_name
        .ok_or_else(|| missing(top_at, "group_name".into()))?;
    let gfx_arch_family = top
        .family
        .ok_or_else(|| missing(top_at, "gfx_arch_family".into()))?;
    let gfx_arches = top
        .arches
        .ok_or_else(|| missing(top_at, "gfx_arches".into()))?;
    let raw_toc = top.raw_toc.ok_or_else(|| missing(top_at, "toc".into()))?;
    let (scheme_at, scheme_s) = top
        .scheme_s
        .ok_or_else(|| missing(top_at, "compression_scheme".into()))?;
    let scheme = match scheme_s.as_str() {
        SCHEME_NONE => Scheme::None,
        SCHEME_ZSTD => Scheme::ZstdPerKernel,
        _ => return Err(Error::at(scheme_at, ErrorKind::UnknownScheme(scheme_s))),
    };

    // 4. Blob locations per ordinal.
    let mut zstd_region = None;
    let (blobs, n_blobs) = match scheme {
        Scheme::None => {
            if let Some((at, _)) = top.zstd_offset.or(top.zstd_size) {
                return Err(dup(at, "zstd_offset/zstd_size (scheme is \"none\")".into()));
            }
            let raw = top
                .blobs_raw
                .ok_or_else(|| missing(top_at, "blobs".into()))?;
            let blobs = none_blobs(raw, toc_offset)?;
            let n = blobs.len();
            (blobs, n)
        }
        Scheme::ZstdPerKernel => {
            if let Some(raw) = &top.blobs_raw {
                let at = raw.first().map_or(top_at, |b| b.0);
                return Err(dup(at, "blobs (scheme is \"zstd-per-kernel\")".into()));
            }
            let (oat, zoff) = top
                .zstd_offset
                .ok_or_else(|| missing(top_at, "zstd_offset".into()))?;
            let (_, zsize) = top
                .zstd_size
                .ok_or_else(|| missing(top_at, "zstd_size".into()))?;
            check_range(
                &|| "zstd_offset".into(),
                oat,
                zoff,
                zsize,
                BLOB_ALIGNMENT,
                toc_offset,
            )?;
            zstd_region = Some(BlobLocation {
                offset: zoff,
                size: zsize,
            });
            (Vec::new(), zstd_frame_count(src, zoff, zsize)?)
        }
    };

    // 5. Entries: ordinals must be a permutation of the blob list.
    let e = check_entries(raw_toc, &blobs, n_blobs, zstd_region, top_at)?;
    Ok(Parsed {
        toc_offset,
        format_version,
        group_name,
        gfx_arch_family,
        gfx_arches,
        scheme,
        entries: e.entries,
        blobs: blobs.into_iter().map(|(_, l)| l).collect(),
        zstd: zstd_region.map(|z| ZstdIndex {
            zoff: z.offset,
            zend: z.offset + z.size,
            located: (0..n_blobs).map(|_| OnceLock::new()).collect(),
            checked: (0..n_blobs).map(|_| OnceLock::new()).collect(),
            entry_of: e.entry_of,
        }),
        zstd_region,
        index: e.index,
    })
}

/// Checks the fixed header (magic, version, TOC offset) and returns the
/// TOC offset: past the header's alignment, before the end, and a TOC that
/// fits in memory.
fn read_header(src: Src<'_>) -> Result<u64> {
    let len = src.len();
    if len < HEADER_SIZE {
        return Err(Error::at(
            0,
            ErrorKind::Truncated {
                what: "KPAK header",
                needed: HEADER_SIZE,
                available: len,
            },
        ));
    }
    let head = src.read_at(0, HEADER_SIZE, "KPAK header")?;
    let data: &[u8] = &head;
    let mut magic = [0u8; 4];
    magic.copy_from_slice(data.get(0..4).unwrap_or(&[0; 4]));
    if magic != MAGIC {
        return Err(Error::at(0, ErrorKind::BadMagic { found: magic }));
    }
    let version = read_u32(data, 4, "version")?;
    if version != VERSION {
        return Err(Error::at(4, ErrorKind::UnsupportedVersion(version)));
    }
    let toc_offset = read_u64(data, 8, "toc_offset")?;
    check_range(
        &|| "toc_offset".into(),
        8,
        toc_offset,
        1,
        BLOB_ALIGNMENT,
        len,
    )?;
    if usize::try_from(len - toc_offset).is_err() {
        return Err(Error::at(
            8,
            ErrorKind::Invalid {
                field: "toc_offset".into(),
                message: "the TOC does not fit in memory".into(),
            },
        ));
    }
    Ok(toc_offset)
}

/// Reads the top-level TOC map: each known key once, any other key (or a
/// repeated one) refused.
fn read_top(c: &mut Cursor<'_>) -> Result<TopFields> {
    let top = || "TOC".to_string();
    let n = c.read_map_len(&top)?;
    let mut t = TopFields::default();
    for _ in 0..n {
        let key_at = c.offset();
        let key = c.read_str(&|| "TOC key".into())?;
        match key {
            "format_version" if t.format_version.is_none() => {
                let at = c.offset();
                let v = c.read_uint(&|| "format_version".into())?;
                if v != u64::from(VERSION) {
                    return Err(Error::at(
                        at,
                        ErrorKind::Mismatch {
                            field: "format_version".into(),
                            expected: u64::from(VERSION),
                            found: v,
                        },
                    ));
                }
                t.format_version = Some(v);
            }
            "group_name" if t.group_name.is_none() => {
                t.group_name = Some(c.read_str(&|| "group_name".into())?.to_owned());
            }
            "gfx_arch_family" if t.family.is_none() => {
                t.family = Some(c.read_str(&|| "gfx_arch_family".into())?.to_owned());
            }
            "gfx_arches" if t.arches.is_none() => {
                let m = c.read_array_len(&|| "gfx_arches".into())?;
                let mut v = Vec::with_capacity(m);
                for i in 0..m {
                    v.push(c.read_str(&|| format!("gfx_arches[{i}]"))?.to_owned());
                }
                t.arches = Some(v);
            }
            "toc" if t.raw_toc.is_none() => t.raw_toc = Some(parse_toc_map(c)?),
            "compression_scheme" if t.scheme_s.is_none() => {
                let at = c.offset();
                t.scheme_s = Some((at, c.read_str(&|| "compression_scheme".into())?.to_owned()));
            }
            "blobs" if t.blobs_raw.is_none() => t.blobs_raw = Some(read_blobs(c)?),
            "zstd_offset" if t.zstd_offset.is_none() => {
                let at = c.offset();
                t.zstd_offset = Some((at, c.read_uint(&|| "zstd_offset".into())?));
            }
            "zstd_size" if t.zstd_size.is_none() => {
                let at = c.offset();
                t.zstd_size = Some((at, c.read_uint(&|| "zstd_size".into())?));
            }
            other => return Err(dup(key_at, format!("TOC.{other}"))),
        }
    }
    Ok(t)
}

/// Reads the `blobs` array: per blob the offset of its map, its `offset`
/// and its `size`.
fn read_blobs(c: &mut Cursor<'_>) -> Result<Vec<(u64, u64, u64)>> {
    let m = c.read_array_len(&|| "blobs".into())?;
    let mut v = Vec::with_capacity(m);
    for i in 0..m {
        let at = c.offset();
        let k = c.read_map_len(&|| format!("blobs[{i}]"))?;
        let (mut off, mut size) = (None, None);
        for _ in 0..k {
            let kat = c.offset();
            let name = c.read_str(&|| format!("blobs[{i}] key"))?;
            match name {
                "offset" if off.is_none() => {
                    off = Some(c.read_uint(&|| format!("blobs[{i}].offset"))?)
                }
                "size" if size.is_none() => {
                    size = Some(c.read_uint(&|| format!("blobs[{i}].size"))?)
                }
                other => return Err(dup(kat, format!("blobs[{i}].{other}"))),
            }
        }
        let off = off.ok_or_else(|| missing(at, format!("blobs[{i}].offset")))?;
        let size = size.ok_or_else(|| missing(at, format!("blobs[{i}].size")))?;
        v.push((at, off, size));
    }
    Ok(v)
}

/// The blobs of a `none` archive, each between the header and the TOC and
/// no two sharing bytes; with the offset of each one's map.
fn none_blobs(raw: Vec<(u64, u64, u64)>, toc_offset: u64) -> Result<Vec<(u64, BlobLocation)>> {
    let mut v = Vec::with_capacity(raw.len());
    for (i, (at, off, size)) in raw.into_iter().enumerate() {
        check_range(
            &|| format!("blobs[{i}]"),
            at,
            off,
            size,
            BLOB_ALIGNMENT,
            toc_offset,
        )?;
        v.push((at, BlobLocation { offset: off, size }));
    }
    // Blobs must not share bytes: each stored byte belongs to one
    // kernel, so reading every kernel (inspect, unpack) costs at
    // most the file, never a multiple of it.
    let mut spans: Vec<(u64, u64, u64, usize)> = v
        .iter()
        .enumerate()
        .filter(|(_, (_, b))| b.size > 0)
        .map(|(i, (at, b))| (b.offset, b.offset + b.size, *at, i))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(Error::at(
                w[1].2,
                ErrorKind::Invalid {
                    field: format!("blobs[{}]", w[1].3),
                    message: format!(
                        "range [{}, {}) overlaps blobs[{}] [{}, {})",
                        w[1].0, w[1].1, w[0].3, w[0].0, w[0].1
                    ),
                },
            ));
        }
    }
    Ok(v)
}

/// Checks the TOC entries against the `n_blobs` blobs (`blobs` of a `none`
/// archive, empty for zstd): every field present, ordinals a permutation
/// of the blobs, a `none` blob's size equal to its entry's
/// `original_size`, no (key, target) twice.
fn check_entries(
    raw_toc: Vec<(String, String, RawEntry)>,
    blobs: &[(u64, BlobLocation)],
    n_blobs: usize,
    zstd_region: Option<BlobLocation>,
    top_at: u64,
) -> Result<Entries> {
    // The TOC bounds the work: more zstd frames than entries cannot be a
    // permutation (checked before allocating per-frame state).
    // (ROCm walks the frames at open and answers INVALID_FORMAT when the
    // count promises more than the blob holds; the same field name gives
    // the runtime that code.)
    if let (Some(z), true) = (zstd_region, n_blobs > raw_toc.len()) {
        return Err(Error::at(
            z.offset,
            ErrorKind::Invalid {
                field: "zstd blob frame count".into(),
                message: format!(
                    "{n_blobs} frames, but the TOC has {} entries (blob {} is not referenced by any TOC entry)",
                    raw_toc.len(),
                    raw_toc.len()
                ),
            },
        ));
    }
    let mut used = vec![false; n_blobs];
    let mut entry_of = vec![(0usize, 0u64); n_blobs];
    let mut entries = Vec::with_capacity(raw_toc.len());
    let mut index: HashMap<String, HashMap<String, usize>> = HashMap::new();
    for (key, target, r) in raw_toc {
        let f = |leaf: &str| format!("toc{}{}.{leaf}", q(&key), q(&target));
        let kind = r.kind.ok_or_else(|| missing(r.at, f("type")))?;
        let (oat, ordinal) = r.ordinal.ok_or_else(|| missing(r.at, f("ordinal")))?;
        let original_size = r
            .original_size
            .ok_or_else(|| missing(r.at, f("original_size")))?;
        let slot = claim_ordinal(&mut used, ordinal, oat, &f)?;
        if let Some(x) = entry_of.get_mut(slot) {
            *x = (entries.len(), oat);
        }
        // zstd frames are checked against their entry on first lookup.
        if let Some(&(bat, loc)) = blobs.get(slot) {
            if loc.size != original_size {
                return Err(Error::at(
                    bat,
                    ErrorKind::Mismatch {
                        field: format!("blobs[{ordinal}].size (vs {})", f("original_size")),
                        expected: original_size,
                        found: loc.size,
                    },
                ));
            }
        }
        let idx = entries.len();
        let ordinal = u32::try_from(ordinal).unwrap_or(u32::MAX);
        let per = index.entry(key.clone()).or_default();
        if per.insert(target.clone(), idx).is_some() {
            return Err(dup(
                r.at,
                format!("toc{}{} (repeated)", q(&key), q(&target)),
            ));
        }
        entries.push(KernelEntry {
            key,
            target,
            kind,
            ordinal,
            original_size,
            metadata: r.metadata,
        });
    }
    if let Some(i) = used.iter().position(|u| !u) {
        let at = blobs
            .get(i)
            .map_or_else(|| zstd_region.map_or(top_at, |z| z.offset), |b| b.0);
        return Err(Error::at(
            at,
            ErrorKind::Invalid {
                field: format!("blob {i}"),
                message: "not referenced by any TOC entry".into(),
            },
        ));
    }
    Ok(Entries {
        entries,
        index,
        entry_of,
    })
}

/// Marks `ordinal` (read at `oat`) used and returns its slot: it must be
/// below the blob count and not used before.
fn claim_ordinal(
    used: &mut [bool],
    ordinal: u64,
    oat: u64,
    f: &dyn Fn(&str) -> String,
) -> Result<usize> {
    let n_blobs = used.len();
    let slot = usize::try_from(ordinal)
        .ok()
        .filter(|&o| o < n_blobs)
        .ok_or_else(|| {
            Error::at(
                oat,
                ErrorKind::Invalid {
                    field: f("ordinal"),
                    message: format!("{ordinal} is not below the blob count {n_blobs}"),
                },
            )
        })?;
    if used.get(slot).copied().unwrap_or(true) {
        return Err(Error::at(
            oat,
            ErrorKind::Invalid {
                field: f("ordinal"),
                message: format!("ordinal {ordinal} is used by two entries"),
            },
        ));
    }
    if let Some(u) = used.get_mut(slot) {
        *u = true;
    }
    Ok(slot)
}

/// Parse `toc`: map key -> map arch -> entry map.
fn parse_toc_map(c: &mut Cursor<'_>) -> Result<Vec<(String, String, RawEntry)>> {
    let nb = c.read_map_len(&|| "toc".into())?;
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..nb {
        let kat = c.offset();
        let key = c.read_str(&|| "toc key".into())?.to_owned();
        if !seen.insert(key.clone()) {
            return Err(dup(kat, format!("toc{} (repeated binary key)", q(&key))));
        }
        let na = c.read_map_len(&|| format!("toc{}", q(&key)))?;
        for _ in 0..na {
            let target = c
                .read_str(&|| format!("toc{} arch key", q(&key)))?
                .to_owned();
            let f = |leaf: &str| format!("toc{}{}{leaf}", q(&key), q(&target));
            let mut r = RawEntry {
                at: c.offset(),
                ..RawEntry::default()
            };
            let ne = c.read_map_len(&|| f(""))?;
            for _ in 0..ne {
                let kat = c.offset();
                let name = c.read_str(&|| f(" entry key"))?;
                match name {
                    "type" if r.kind.is_none() => {
                        r.kind = Some(c.read_str(&|| f(".type"))?.to_owned())
                    }
                    "ordinal" if r.ordinal.is_none() => {
                        let at = c.offset();
                        r.ordinal = Some((at, c.read_uint(&|| f(".ordinal"))?));
                    }
                    "original_size" if r.original_size.is_none() => {
                        r.original_size = Some(c.read_uint(&|| f(".original_size"))?)
                    }
                    "metadata" if r.metadata.is_none() => {
                        r.metadata = Some(c.read_value(&|| f(".metadata"))?)
                    }
                    other => return Err(dup(kat, f(&format!(".{other}")))),
                }
            }
            out.push((key.clone(), target, r));
        }
    }
    Ok(out)
}
