//! Writing uncompressed bundles and CCOB (v1/v2/v3, zlib or zstd) in the
//! layout clang-offload-bundler produces and accepts.

use std::io::Write;

use crate::bundle::{ccob_hash, Compression, Method, BUNDLE_MAGIC, CCOB_MAGIC};
use crate::error::{Error, Result};

/// Alignment of code objects in bundles made by the HIP driver
/// (`-bundle-align=4096`).
pub const DEFAULT_ALIGN: u64 = 4096;
/// zstd level for bundles written here: LLVM 18's default for offload
/// bundles (LLVM 19's clang-offload-bundler uses 3 with long-distance
/// matching; its bytes depend on the libzstd it links, see
/// docs/formats/split-elf.md).
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
/// at [`DEFAULT_ZSTD_LEVEL`] or [`DEFAULT_ZLIB_LEVEL`].
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
    let header_len = ccob_header_len(version)?;
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
    let mut out = ccob_header(
        version,
        compression,
        header_len + compressed.len() as u64,
        bundle.len() as u64,
        ccob_hash(bundle),
    )?;
    out.extend_from_slice(&compressed);
    Ok(out)
}

/// Bytes of a CCOB header of `version`.
pub fn ccob_header_len(version: u16) -> Result<u64> {
    match version {
        1 => Ok(20),
        2 => Ok(24),
        3 => Ok(32),
        v => Err(Error::Write(format!("CCOB version {v} (known: 1, 2, 3)"))),
    }
}

/// The CCOB header of `version` for a CCOB of `total` bytes (header
/// included) holding a bundle of `usize_` bytes whose truncated MD5 is
/// `hash`.
fn ccob_header(
    version: u16,
    compression: Compression,
    total: u64,
    usize_: u64,
    hash: u64,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(ccob_header_len(version)? as usize);
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
    out.extend_from_slice(&hash.to_le_bytes());
    Ok(out)
}

/// How a [`CcobEncoder`] compresses. zlib takes `level` (clamped to 0..=9)
/// and ignores the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcobParams {
    /// Compression level.
    pub level: i32,
    /// zstd long-distance matching.
    pub long: bool,
    /// Largest zstd window (log2); the window is the smallest power of two
    /// covering the bundle, at most this. It bounds the encoder's memory
    /// (about the window plus the level's tables) whatever the bundle size.
    pub max_window_log: u32,
}

enum Enc<W: Write> {
    Zstd(zstd::stream::write::Encoder<'static, Counting<W>>),
    Zlib(flate2::write::ZlibEncoder<Counting<W>>),
}

/// A writer counting what passes through it.
struct Counting<W: Write> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A CCOB written in one pass with bounded memory: the uncompressed bundle
/// (exactly `payload_len` bytes) goes in through [`Write`], the compressed
/// stream goes out to `out` as it is produced, and [`finish`](Self::finish)
/// returns the header, which belongs in the
/// [`ccob_header_len`] bytes *before* that stream (its total size and hash
/// are known only at the end). The hash is the MD5 of the bytes written,
/// unless the caller knows it ([`CcobEncoder::new`]'s `hash`: the stored
/// hash of a bundle being rebuilt byte for byte, which spares the MD5).
/// The output depends only on the bytes, the version, method and
/// parameters (no threads).
pub struct CcobEncoder<W: Write> {
    version: u16,
    method: Method,
    payload_len: u64,
    fed: u64,
    hash: Option<u64>,
    md5: Option<md5::Md5>,
    enc: Enc<W>,
}

impl<W: Write> CcobEncoder<W> {
    pub fn new(
        out: W,
        version: u16,
        method: Method,
        payload_len: u64,
        params: CcobParams,
        hash: Option<u64>,
    ) -> Result<Self> {
        use md5::Digest;
        ccob_header_len(version)?;
        let zerr = |e: std::io::Error| Error::Write(format!("zstd: {e}"));
        let out = Counting { inner: out, n: 0 };
        let enc = match method {
            Method::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(out, params.level).map_err(zerr)?;
                let need = payload_len.max(1).next_power_of_two().trailing_zeros();
                let window = need.clamp(10, params.max_window_log.clamp(10, 27));
                e.set_pledged_src_size(Some(payload_len)).map_err(zerr)?;
                e.include_checksum(false).map_err(zerr)?;
                e.include_contentsize(true).map_err(zerr)?;
                // The window is set whatever `long` says: a plain level's
                // default window (2^21 at level 4) misses the repeats one
                // code object apart that make a bundle compress.
                e.window_log(window).map_err(zerr)?;
                if params.long {
                    e.long_distance_matching(true).map_err(zerr)?;
                }
                Enc::Zstd(e)
            }
            Method::Zlib => Enc::Zlib(flate2::write::ZlibEncoder::new(
                out,
                flate2::Compression::new(params.level.clamp(0, 9) as u32),
            )),
        };
        Ok(CcobEncoder {
            version,
            method,
            payload_len,
            fed: 0,
            hash,
            md5: hash.is_none().then(md5::Md5::new),
            enc,
        })
    }

    /// Feed `n` zero bytes.
    pub fn write_zeros(&mut self, mut n: u64) -> std::io::Result<()> {
        const Z: [u8; 1 << 14] = [0; 1 << 14];
        while n > 0 {
            let k = n.min(Z.len() as u64) as usize;
            self.write_all(&Z[..k])?;
            n -= k as u64;
        }
        Ok(())
    }

    /// Bytes fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// End the stream: `(out, header, compressed bytes written to out)`.
    /// Errors when other than `payload_len` bytes were fed.
    pub fn finish(self) -> Result<(W, Vec<u8>, u64)> {
        use md5::Digest;
        if self.fed != self.payload_len {
            return Err(Error::Write(format!(
                "CCOB payload of {} bytes announced, {} written",
                self.payload_len, self.fed
            )));
        }
        let out = match self.enc {
            Enc::Zstd(e) => e.finish().map_err(|e| Error::Write(format!("zstd: {e}")))?,
            Enc::Zlib(e) => e.finish().map_err(|e| Error::Write(format!("zlib: {e}")))?,
        };
        let hash = match (self.hash, self.md5) {
            (Some(h), _) => h,
            (None, Some(m)) => {
                let d = m.finalize();
                let mut low = [0u8; 8];
                low.copy_from_slice(&d[..8]);
                u64::from_le_bytes(low)
            }
            (None, None) => unreachable!("an MD5 whenever no hash is given"),
        };
        let total = ccob_header_len(self.version)? + out.n;
        let header = ccob_header(self.version, self.method, total, self.payload_len, hash)?;
        Ok((out.inner, header, out.n))
    }
}

impl<W: Write> Write for CcobEncoder<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.fed.saturating_add(buf.len() as u64) > self.payload_len {
            return Err(std::io::Error::other(format!(
                "more than the {} bytes announced for the CCOB payload",
                self.payload_len
            )));
        }
        let k = match &mut self.enc {
            Enc::Zstd(e) => e.write(buf)?,
            Enc::Zlib(e) => e.write(buf)?,
        };
        if let Some(m) = &mut self.md5 {
            md5::Digest::update(m, &buf[..k]);
        }
        self.fed += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`CcobEncoder`] into memory: the whole CCOB.
pub fn write_ccob_params(
    bundle: &[u8],
    version: u16,
    method: Method,
    params: CcobParams,
) -> Result<Vec<u8>> {
    let mut e = CcobEncoder::new(
        Vec::new(),
        version,
        method,
        bundle.len() as u64,
        params,
        None,
    )?;
    e.write_all(bundle)
        .map_err(|x| Error::Write(format!("{}: {x}", method.name())))?;
    let (body, mut out, _) = e.finish()?;
    out.extend_from_slice(&body);
    Ok(out)
}
