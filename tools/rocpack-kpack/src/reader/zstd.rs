//! The zstd blob of a `zstd-per-kernel` archive: its frame index (a u32
//! count, then a u32 size and a frame per ordinal), located and checked
//! lazily, frame by frame, and the decoding of one frame.

use std::io::Read;
use std::sync::OnceLock;

use super::toc::{check_range, read_u32, Parsed};
use super::Src;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{BlobLocation, ZSTD_MAX_RATIO};
use crate::msgpack::q;

/// Frames of the zstd blob (u32 count, then u32 size + frame per ordinal),
/// located and checked on first use.
#[derive(Clone, Debug)]
pub(super) struct ZstdIndex {
    /// Offset of the frame count (the zstd blob start).
    pub(super) zoff: u64,
    /// End of the zstd blob.
    pub(super) zend: u64,
    /// Per ordinal: the frame's location once its size prefix was read and
    /// bounds-checked (needs every earlier prefix; walked forward from the
    /// nearest located predecessor).
    pub(super) located: Vec<OnceLock<BlobLocation>>,
    /// Per ordinal: the location once the frame itself was checked against
    /// its TOC entry.
    pub(super) checked: Vec<OnceLock<BlobLocation>>,
    /// Per ordinal: index of its entry and offset of its `ordinal` field.
    pub(super) entry_of: Vec<(usize, u64)>,
}

/// The frame count at the start of the zstd blob (u32 count, then
/// (u32 size, frame) per kernel); only the count is read here.
pub(super) fn zstd_frame_count(src: Src<'_>, zoff: u64, zsize: u64) -> Result<usize> {
    if zsize < 4 {
        return Err(Error::at(
            zoff,
            ErrorKind::Truncated {
                what: "zstd frame count",
                needed: 4,
                available: zsize,
            },
        ));
    }
    let count = u64::from(read_u32(
        &src.read_at(zoff, 4, "zstd frame count")?,
        0,
        "zstd frame count",
    )?);
    // Each frame needs at least its 4-byte size prefix.
    if count > (zsize - 4) / 4 {
        return Err(Error::at(
            zoff,
            ErrorKind::Invalid {
                field: "zstd blob frame count".into(),
                message: format!("{count} frames cannot fit in {zsize} bytes"),
            },
        ));
    }
    // With frames, the last one's lookup checks that they fill the blob;
    // without, nothing else would.
    if count == 0 && zsize != 4 {
        return Err(Error::at(
            zoff + 4,
            ErrorKind::TrailingData {
                what: "the last zstd frame (zstd_size is larger than the frames)",
                count: zsize - 4,
            },
        ));
    }
    Ok(usize::try_from(count).unwrap_or(usize::MAX))
}

/// Locate frame `i`: read the size prefixes from the nearest located
/// predecessor up to `i`, bounds-checking each (and, for the last frame,
/// that the frames end exactly at the end of the zstd blob). Only the
/// 4-byte prefixes are read, never frame bytes.
pub(super) fn zstd_locate(src: Src<'_>, z: &ZstdIndex, i: usize) -> Result<BlobLocation> {
    if let Some(l) = z.located.get(i).and_then(OnceLock::get) {
        return Ok(*l);
    }
    let mut j = i.min(z.located.len());
    while j > 0 && z.located.get(j - 1).and_then(OnceLock::get).is_none() {
        j -= 1;
    }
    let mut pos = match j.checked_sub(1).and_then(|k| z.located.get(k)?.get()) {
        Some(l) => l.offset + l.size,
        None => z.zoff + 4,
    };
    let (zoff, end) = (z.zoff, z.zend);
    let last = z.located.len().saturating_sub(1);
    let mut found = None;
    for k in j..=i {
        let at = pos;
        if at + 4 > end {
            return Err(Error::at(
                at,
                ErrorKind::OutOfBounds {
                    field: format!("zstd frame {k} size prefix"),
                    start: at,
                    len: 4,
                    lo: zoff,
                    hi: end,
                },
            ));
        }
        let size = u64::from(read_u32(
            &src.read_at(pos, 4, "zstd frame size")?,
            0,
            "zstd frame size",
        )?);
        let fstart = at + 4;
        check_range(&|| format!("zstd frame {k}"), at, fstart, size, zoff, end)?;
        pos = fstart + size;
        if k == last && pos != end {
            return Err(Error::at(
                pos,
                ErrorKind::TrailingData {
                    what: "the last zstd frame (zstd_size is larger than the frames)",
                    count: end - pos,
                },
            ));
        }
        let loc = BlobLocation {
            offset: fstart,
            size,
        };
        if let Some(slot) = z.located.get(k) {
            let _ = slot.set(loc);
        }
        found = Some(loc);
    }
    found.ok_or_else(|| {
        Error::at(
            zoff,
            ErrorKind::Invalid {
                field: "ordinal".into(),
                message: format!("{i} is not below the zstd frame count"),
            },
        )
    })
}

/// Locate and check frame `i` against its TOC entry (once; later calls
/// return the remembered location): it must be exactly one zstd frame of
/// the prefixed length, its content size (when present) must equal the
/// entry's `original_size`, which may not exceed the ratio limit.
pub(super) fn zstd_frame(
    src: Src<'_>,
    p: &Parsed,
    z: &ZstdIndex,
    i: usize,
) -> Result<BlobLocation> {
    if let Some(l) = z.checked.get(i).and_then(OnceLock::get) {
        return Ok(*l);
    }
    let loc = zstd_locate(src, z, i)?;
    if let (Src::File(_), true) = (src, loc.size > WALK_MIN) {
        // A large frame of a file read with `pread` is checked from its
        // headers (frame header, then one 3-byte header per block), never
        // read whole: unpacking a 4 GiB frame holds a few buffers.
        let facts = walk_frame(src, loc)?;
        return check_frame_facts(facts, p, z, i, loc);
    }
    let frame = src.read_at(loc.offset, loc.size, "zstd frame")?;
    check_frame(&frame, p, z, i, loc)
}

/// Frames larger than this, in a file read with `pread`, are checked by
/// [`walk_frame`] instead of being read whole.
const WALK_MIN: u64 = 1 << 20;

/// What checking a frame needs to know: its length as the frame format
/// says (or why it is not one valid frame) and its declared content size.
struct FrameFacts {
    len: std::result::Result<u64, String>,
    content_size: Option<u64>,
}

/// [`FrameFacts`] of the frame at `loc` from its headers alone: the frame
/// header (magic, descriptor, window, dictionary ID, content size), then
/// each block's 3-byte header (skipping its body), then the checksum; the
/// length is what `ZSTD_findFrameCompressedSize` computes for a zstd frame.
/// Anything else (a skippable frame) is read whole and left to libzstd.
fn walk_frame(src: Src<'_>, loc: BlobLocation) -> Result<FrameFacts> {
    let end = loc.offset + loc.size;
    let bad = |why: &str| FrameFacts {
        len: Err(why.to_owned()),
        content_size: None,
    };
    let head_len = loc.size.min(18);
    let head = src.read_at(loc.offset, head_len, "zstd frame header")?;
    if head.get(..4) != Some(&[0x28, 0xb5, 0x2f, 0xfd][..]) {
        let frame = src.read_at(loc.offset, loc.size, "zstd frame")?;
        return Ok(frame_facts(&frame));
    }
    let Some(&d) = head.get(4) else {
        return Ok(bad("Src size is incorrect"));
    };
    if d & 0x08 != 0 {
        return Ok(bad("Unsupported frame parameter"));
    }
    let single = d & 0x20 != 0;
    let fcs_len = match d >> 6 {
        0 => u64::from(single),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let did_len = [0u64, 1, 2, 4][usize::from(d & 3)];
    let header = 5 + u64::from(!single) + did_len + fcs_len;
    if header > head_len {
        return Ok(bad("Src size is incorrect"));
    }
    // libzstd judges the header itself (window size limits, reserved
    // bits): given the header alone, a valid one only lacks its blocks.
    let head = head.get(..header as usize).unwrap_or_default();
    if let Err(code) = zstd::zstd_safe::find_frame_compressed_size(head) {
        let why = zstd::zstd_safe::get_error_name(code);
        if why != "Src size is incorrect" {
            return Ok(bad(why));
        }
    }
    let content_size = zstd::zstd_safe::get_frame_content_size(head).ok().flatten();
    let mut pos = loc.offset + header;
    loop {
        if pos + 3 > end {
            return Ok(bad("Src size is incorrect"));
        }
        let b = src.read_at(pos, 3, "zstd block header")?;
        let h = u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16;
        let body = match (h >> 1) & 3 {
            0 | 2 => u64::from(h >> 3),
            1 => 1,
            _ => return Ok(bad("Data corruption detected")),
        };
        pos += 3 + body;
        if pos > end {
            return Ok(bad("Src size is incorrect"));
        }
        if h & 1 == 1 {
            break;
        }
    }
    if d & 0x04 != 0 {
        pos += 4;
        if pos > end {
            return Ok(bad("Src size is incorrect"));
        }
    }
    Ok(FrameFacts {
        len: Ok(pos - loc.offset),
        content_size,
    })
}

/// [`FrameFacts`] of a frame held whole (libzstd's answers).
fn frame_facts(frame: &[u8]) -> FrameFacts {
    FrameFacts {
        len: zstd::zstd_safe::find_frame_compressed_size(frame)
            .map(|n| n as u64)
            .map_err(|code| zstd::zstd_safe::get_error_name(code).to_owned()),
        content_size: zstd::zstd_safe::get_frame_content_size(frame)
            .ok()
            .flatten(),
    }
}

/// Check frame `i` (its bytes `frame`, at `loc`) against its TOC entry and
/// remember it as checked.
pub(super) fn check_frame(
    frame: &[u8],
    p: &Parsed,
    z: &ZstdIndex,
    i: usize,
    loc: BlobLocation,
) -> Result<BlobLocation> {
    check_frame_facts(frame_facts(frame), p, z, i, loc)
}

/// Check frame `i` at `loc`, described by `facts`, against its TOC entry
/// and remember it as checked.
fn check_frame_facts(
    facts: FrameFacts,
    p: &Parsed,
    z: &ZstdIndex,
    i: usize,
    loc: BlobLocation,
) -> Result<BlobLocation> {
    let fstart = loc.offset;
    match facts.len {
        Ok(n) if n == loc.size => {}
        Ok(n) => {
            return Err(Error::at(
                fstart,
                ErrorKind::Mismatch {
                    field: format!("zstd frame {i} size prefix (vs frame length)"),
                    expected: n,
                    found: loc.size,
                },
            ))
        }
        Err(why) => {
            return Err(Error::at(
                fstart,
                ErrorKind::Zstd(format!("frame {i} is not one valid zstd frame: {why}")),
            ))
        }
    }
    let (ei, oat) = z.entry_of.get(i).copied().unwrap_or((usize::MAX, 0));
    let e = p.entries.get(ei).ok_or_else(|| {
        Error::at(
            z.zoff,
            ErrorKind::Invalid {
                field: format!("blob {i}"),
                message: "not referenced by any TOC entry".into(),
            },
        )
    })?;
    let f = |leaf: &str| format!("toc{}{}.{leaf}", q(&e.key), q(&e.target));
    let original_size = e.original_size;
    if let Some(cs) = facts.content_size {
        if cs != original_size {
            return Err(Error::at(
                loc.offset,
                ErrorKind::Mismatch {
                    field: format!("{} (vs zstd frame content size)", f("original_size")),
                    expected: cs,
                    found: original_size,
                },
            ));
        }
    }
    if original_size > loc.size.saturating_mul(ZSTD_MAX_RATIO) {
        return Err(Error::at(
            oat,
            ErrorKind::Invalid {
                field: f("original_size"),
                message: format!(
                    "{original_size} bytes cannot come from a {}-byte zstd frame",
                    loc.size
                ),
            },
        ));
    }
    if let Some(slot) = z.checked.get(i) {
        let _ = slot.set(loc);
    }
    Ok(loc)
}

/// Decode one zstd frame that must yield exactly `original_size` bytes.
/// Offsets in errors are relative to the frame start.
pub(crate) fn decompress(frame: &[u8], original_size: u64) -> Result<Vec<u8>> {
    let zerr = |e: std::io::Error| Error::at(0, ErrorKind::Zstd(e.to_string()));
    // Start with a capacity the frame can plausibly fill; grow with real output only.
    let hint = (frame.len() as u64).saturating_mul(16).max(64 << 10);
    let cap = usize::try_from(original_size.min(hint)).unwrap_or(0);
    let mut out = Vec::with_capacity(cap);
    let dec = zstd::stream::read::Decoder::with_buffer(frame)
        .map_err(zerr)?
        .single_frame();
    dec.take(original_size.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(zerr)?;
    if out.len() as u64 != original_size {
        return Err(Error::at(
            0,
            ErrorKind::Mismatch {
                field: "original_size (decoded zstd frame length)".into(),
                expected: original_size,
                found: out.len() as u64,
            },
        ));
    }
    Ok(out)
}
