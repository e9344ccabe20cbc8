//! Writing uncompressed bundles and CCOB (v1/v2/v3, zlib or zstd) in the
//! layout clang-offload-bundler produces and accepts.

use std::io::Write;

use crate::bundle::{ccob_hash, Compression, Method, BUNDLE_MAGIC, CCOB_MAGIC};
use crate::error::{Error, Result};

/// Alignment of code objects in bundles made by the HIP driver
/// (`-bundle-align=4096`).
pub const DEFAULT_ALIGN: u64 = 4096;
/// LLVM's default zstd level for offload bundles.
pub const DEFAULT_ZSTD_LEVEL: i32 = 5;
/// LLVM's default zlib level.
pub const DEFAULT_ZLIB_LEVEL: u32 = 6;

/// Write an uncompressed bundle with code objects at 4096-aligned offsets,
/// entries in the order given (clang puts the host entry first and sorts
/// device entries by ID). IDs are written verbatim.
pub fn write_uncompressed<I: AsRef<str>, D: AsRef<[u8]>>(entries: &[(I, D)]) -> Vec<u8> {
    write_uncompressed_aligned(entries, DEFAULT_ALIGN)
}

/// [`write_uncompressed`] with another alignment (clang-offload-bundler's
/// `-bundle-align`; 0 and 1 mean none). Zero-sized entries get the aligned
/// position too, so a leading host entry shares its offset with the first
/// device entry, as clang writes it.
pub fn write_uncompressed_aligned<I: AsRef<str>, D: AsRef<[u8]>>(
    entries: &[(I, D)],
    align: u64,
) -> Vec<u8> {
    let align = align.max(1);
    let mut header_len = (BUNDLE_MAGIC.len() + 8) as u64;
    for (id, _) in entries {
        header_len += 24 + id.as_ref().len() as u64;
    }
    let mut pos = header_len;
    let mut offsets = Vec::with_capacity(entries.len());
    for (_, data) in entries {
        pos = pos.div_ceil(align) * align;
        offsets.push(pos);
        pos += data.as_ref().len() as u64;
    }
    let mut out = Vec::with_capacity(pos as usize);
    out.extend_from_slice(BUNDLE_MAGIC);
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for ((id, data), off) in entries.iter().zip(&offsets) {
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&(data.as_ref().len() as u64).to_le_bytes());
        out.extend_from_slice(&(id.as_ref().len() as u64).to_le_bytes());
        out.extend_from_slice(id.as_ref().as_bytes());
    }
    for ((_, data), off) in entries.iter().zip(&offsets) {
        out.resize(*off as usize, 0);
        out.extend_from_slice(data.as_ref());
    }
    out
}

/// Compress an uncompressed bundle into a CCOB of `version` (1, 2 or 3)
/// with LLVM's default level for the method.
pub fn write_ccob(bundle: &[u8], version: u16, compression: Compression) -> Result<Vec<u8>> {
    let level = match compression {
        Method::Zstd => DEFAULT_ZSTD_LEVEL,
        Method::Zlib => DEFAULT_ZLIB_LEVEL as i32,
    };
    write_ccob_level(bundle, version, compression, level)
}

/// [`write_ccob`] with an explicit compression level.
pub fn write_ccob_level(
    bundle: &[u8],
    version: u16,
    compression: Compression,
    level: i32,
) -> Result<Vec<u8>> {
    write_ccob_with(bundle, version, compression, level, false)
}

/// [`write_ccob_level`] with zstd's long-distance matching over a window
/// covering the whole bundle (at most 128 MiB, the window every zstd decoder
/// accepts by default), as current LLVM compresses offload bundles: a
/// bundle holding one code object per target is mostly repeats farther
/// apart than the level's own window, and this is what makes such a bundle
/// fit again where the original was (a 55 MB bundle of ROCm's XLA plugin:
/// 1.62 MB at level 3, 1.08 MB at level 9 with long matching, 1.08 MB
/// originally). zlib bundles are written as by [`write_ccob_level`].
pub fn write_ccob_long(
    bundle: &[u8],
    version: u16,
    compression: Compression,
    level: i32,
) -> Result<Vec<u8>> {
    write_ccob_with(bundle, version, compression, level, true)
}

fn zstd_long(bundle: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    use zstd::zstd_safe::CParameter;
    // Smallest window (2^10 .. 2^27) covering the bundle.
    let need = (bundle.len().max(1) as u64)
        .next_power_of_two()
        .trailing_zeros();
    let window = need.clamp(10, 27);
    let mut c = zstd::bulk::Compressor::new(level)?;
    c.set_parameter(CParameter::EnableLongDistanceMatching(true))?;
    c.set_parameter(CParameter::WindowLog(window))?;
    c.compress(bundle)
}

fn write_ccob_with(
    bundle: &[u8],
    version: u16,
    compression: Compression,
    level: i32,
    long: bool,
) -> Result<Vec<u8>> {
    let header_len: u64 = match version {
        1 => 20,
        2 => 24,
        3 => 32,
        v => return Err(Error::Write(format!("CCOB version {v} (known: 1, 2, 3)"))),
    };
    let compressed = match compression {
        Method::Zstd if long => {
            zstd_long(bundle, level).map_err(|e| Error::Write(format!("zstd: {e}")))?
        }
        Method::Zstd => {
            zstd::bulk::compress(bundle, level).map_err(|e| Error::Write(format!("zstd: {e}")))?
        }
        Method::Zlib => {
            let lvl = flate2::Compression::new(level.clamp(0, 9) as u32);
            let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), lvl);
            enc.write_all(bundle)
                .and_then(|_| enc.finish())
                .map_err(|e| Error::Write(format!("zlib: {e}")))?
        }
    };
    let total = header_len + compressed.len() as u64;
    let usize_ = bundle.len() as u64;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(CCOB_MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&compression.code().to_le_bytes());
    match version {
        1 => {
            let u = u32::try_from(usize_).map_err(|_| {
                Error::Write(format!("bundle of {usize_} bytes too large for CCOB v1"))
            })?;
            out.extend_from_slice(&u.to_le_bytes());
        }
        2 => {
            let t = u32::try_from(total).map_err(|_| {
                Error::Write(format!("CCOB of {total} bytes too large for v2 (use v3)"))
            })?;
            let u = u32::try_from(usize_).map_err(|_| {
                Error::Write(format!(
                    "bundle of {usize_} bytes too large for CCOB v2 (use v3)"
                ))
            })?;
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&u.to_le_bytes());
        }
        _ => {
            out.extend_from_slice(&total.to_le_bytes());
            out.extend_from_slice(&usize_.to_le_bytes());
        }
    }
    out.extend_from_slice(&ccob_hash(bundle).to_le_bytes());
    out.extend_from_slice(&compressed);
    Ok(out)
}
