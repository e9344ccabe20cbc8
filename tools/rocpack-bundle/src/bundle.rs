//! Reading clang offload bundles: uncompressed `__CLANG_OFFLOAD_BUNDLE__`
//! bundles, compressed `CCOB` bundles (v1, v2, v3; zlib or zstd), and the
//! sequence of bundles in a `.hip_fatbin` section.

use std::fmt;
use std::io::Read;
use std::sync::Arc;

use md5::{Digest, Md5};

use crate::error::{read_u16, read_u32, read_u64, show_bytes, Error, Result};
use crate::stream::{in_payload, parse_header_in, IndexEntry};
use crate::target::TargetId;

/// Magic of an uncompressed bundle (24 bytes, no NUL).
pub const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Magic of a compressed bundle.
pub const CCOB_MAGIC: &[u8; 4] = b"CCOB";

/// Largest decompressed/compressed ratio a CCOB may claim. Real bundles
/// compress 10–50×; zlib cannot exceed ~1032×. Bounds allocations by input
/// size for hostile headers.
pub const MAX_CCOB_RATIO: u64 = 8192;

/// CCOB compression method (`llvm::compression::Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// Method 0.
    Zlib,
    /// Method 1.
    Zstd,
}

/// Compression used when writing a CCOB (same values as [`Method`]).
pub type Compression = Method;

impl Method {
    /// Numeric value stored in the header.
    pub fn code(self) -> u16 {
        match self {
            Method::Zlib => 0,
            Method::Zstd => 1,
        }
    }

    /// Method for a header value.
    pub fn from_code(code: u16) -> Option<Method> {
        match code {
            0 => Some(Method::Zlib),
            1 => Some(Method::Zstd),
            _ => None,
        }
    }

    /// `"zlib"` or `"zstd"`.
    pub fn name(self) -> &'static str {
        match self {
            Method::Zlib => "zlib",
            Method::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Container format of one bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `__CLANG_OFFLOAD_BUNDLE__`.
    Uncompressed,
    /// `CCOB` with its header version and compression method.
    Ccob { version: u16, method: Method },
}

impl fmt::Display for Format {
    /// `uncompressed` or `CCOBv2-zstd` (the spelling of the fixtures' TSV).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Format::Uncompressed => f.write_str("uncompressed"),
            Format::Ccob { version, method } => write!(f, "CCOBv{version}-{method}"),
        }
    }
}

/// Where one bundle sits inside a section, as found by [`find_bundles`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BundleSpan {
    /// Offset of the bundle's magic from the start of the section.
    pub offset: u64,
    /// Bytes the bundle occupies (CCOB: its total size; uncompressed: up to
    /// the end of its last code object).
    pub len: u64,
    pub format: Format,
}

/// Decoded CCOB header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CcobHeader {
    pub version: u16,
    pub method: Method,
    /// 20 (v1), 24 (v2) or 32 (v3).
    pub header_len: u64,
    /// Total size including the header (v2/v3); v1 does not store one.
    pub total_size: Option<u64>,
    pub uncompressed_size: u64,
    /// Low 64 bits of the MD5 of the uncompressed bundle (little-endian).
    pub hash: u64,
}

/// One entry (code object) of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    pub id: TargetId,
    /// Offset of the code object from the start of the uncompressed bundle
    /// (for a CCOB: of the decompressed payload).
    pub offset: u64,
    pub size: u64,
    /// The code object: borrowed from the input for uncompressed bundles,
    /// a window of the one decompressed payload for CCOB.
    pub data: EntryData<'a>,
}

/// A code object's bytes. For a CCOB every entry shares the one
/// decompressed payload (no per-entry copy), so entries that overlap or
/// repeat cost nothing: memory is the payload, whatever the entry count.
#[derive(Clone)]
pub enum EntryData<'a> {
    /// A slice of the input (uncompressed bundle).
    Borrowed(&'a [u8]),
    /// `payload[start..end]` of a decompressed CCOB.
    Payload {
        /// The decompressed bundle.
        payload: Arc<[u8]>,
        /// Start of the code object in `payload`.
        start: usize,
        /// End (exclusive).
        end: usize,
    },
}

impl std::ops::Deref for EntryData<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            EntryData::Borrowed(b) => b,
            EntryData::Payload {
                payload,
                start,
                end,
            } => &payload[*start..*end],
        }
    }
}

impl AsRef<[u8]> for EntryData<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl PartialEq for EntryData<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for EntryData<'_> {}

impl fmt::Debug for EntryData<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.len())
    }
}

/// A parsed bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle<'a> {
    pub format: Format,
    /// Bytes of the input the bundle occupies.
    pub len: u64,
    /// CCOB header, for compressed bundles.
    pub ccob: Option<CcobHeader>,
    /// Entries in header order.
    pub entries: Vec<Entry<'a>>,
    /// The decompressed payload (an uncompressed bundle), for CCOB; shared
    /// with the entries.
    pub decompressed: Option<Arc<[u8]>>,
}

impl Bundle<'_> {
    /// Entries that carry device code (not host entries).
    pub fn device_entries(&self) -> impl Iterator<Item = &Entry<'_>> {
        self.entries.iter().filter(|e| !e.id.is_host())
    }
}

/// Knobs for [`parse_bundle_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// Check a CCOB's stored hash against its decompressed payload.
    pub verify_hash: bool,
    /// Refuse CCOBs whose uncompressed size exceeds this many bytes.
    pub max_decompressed_size: u64,
    /// Compute a CCOB payload's MD5 during [`crate::walk_bundle`] and
    /// report it in [`crate::WalkSummary`] (implied by `verify_hash`).
    /// Readers that only need the code objects turn it off: the MD5 is
    /// sequential and costs more than the decompression.
    pub walk_hash: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            verify_hash: false,
            max_decompressed_size: 1 << 36,
            walk_hash: true,
        }
    }
}

/// Truncated MD5 stored in CCOB headers: the first 8 digest bytes read as a
/// little-endian u64 (LLVM's `MD5Result::low()`).
pub fn ccob_hash(data: &[u8]) -> u64 {
    let d = Md5::digest(data);
    let mut low = [0u8; 8];
    low.copy_from_slice(&d[..8]);
    u64::from_le_bytes(low)
}

/// Parse the bundle at the start of `bytes` (trailing bytes are ignored).
pub fn parse_bundle(bytes: &[u8]) -> Result<Bundle<'_>> {
    parse_bundle_with(bytes, &ParseOptions::default())
}

/// [`parse_bundle`] with options (hash verification, size cap).
pub fn parse_bundle_with<'a>(bytes: &'a [u8], opts: &ParseOptions) -> Result<Bundle<'a>> {
    if bytes.starts_with(BUNDLE_MAGIC) {
        let (_, table, len) = parse_header_in(&bytes)?;
        let entries = table
            .into_iter()
            .map(|IndexEntry { id, offset, size }| Entry {
                data: EntryData::Borrowed(&bytes[offset as usize..(offset + size) as usize]),
                id,
                offset,
                size,
            })
            .collect();
        Ok(Bundle {
            format: Format::Uncompressed,
            len,
            ccob: None,
            entries,
            decompressed: None,
        })
    } else if bytes.starts_with(CCOB_MAGIC) {
        let (header, consumed, payload) = decompress_ccob(bytes, opts)?;
        let (_, table, end) =
            parse_header_in(&payload.as_slice()).map_err(|e| in_payload(e, &header))?;
        if let Some(k) = payload[end as usize..].iter().position(|&b| b != 0) {
            return Err(in_payload(
                Error::Malformed {
                    offset: end + k as u64,
                    what: "non-zero data after the end of the bundle".into(),
                },
                &header,
            ));
        }
        let payload: Arc<[u8]> = payload.into();
        let entries = table
            .into_iter()
            .map(|IndexEntry { id, offset, size }| Entry {
                data: EntryData::Payload {
                    payload: Arc::clone(&payload),
                    start: offset as usize,
                    end: (offset + size) as usize,
                },
                id,
                offset,
                size,
            })
            .collect();
        Ok(Bundle {
            format: Format::Ccob {
                version: header.version,
                method: header.method,
            },
            len: consumed,
            ccob: Some(header),
            entries,
            decompressed: Some(payload),
        })
    } else {
        Err(Error::BadMagic {
            offset: 0,
            found: show_bytes(bytes),
        })
    }
}

/// Parse a CCOB header at the start of `b`.
pub fn parse_ccob_header(b: &[u8]) -> Result<CcobHeader> {
    parse_ccob_header_within(b, b.len() as u64)
}

/// [`parse_ccob_header`] of a header read from a source of `available`
/// bytes (`b` may hold the header alone).
pub(crate) fn parse_ccob_header_within(b: &[u8], available: u64) -> Result<CcobHeader> {
    if !b.starts_with(CCOB_MAGIC) {
        return Err(Error::BadMagic {
            offset: 0,
            found: show_bytes(b),
        });
    }
    let version = read_u16(b, 4, "u16 CCOB version")?;
    let method_code = read_u16(b, 6, "u16 CCOB compression method")?;
    let (header_len, total_size, uncompressed_size, hash) = match version {
        1 => (
            20u64,
            None,
            u64::from(read_u32(b, 8, "u32 uncompressed size")?),
            read_u64(b, 12, "u64 hash")?,
        ),
        2 => (
            24,
            Some(u64::from(read_u32(b, 8, "u32 total size")?)),
            u64::from(read_u32(b, 12, "u32 uncompressed size")?),
            read_u64(b, 16, "u64 hash")?,
        ),
        3 => (
            32,
            Some(read_u64(b, 8, "u64 total size")?),
            read_u64(b, 16, "u64 uncompressed size")?,
            read_u64(b, 24, "u64 hash")?,
        ),
        v => {
            return Err(Error::Unsupported {
                offset: 4,
                what: format!("version {v} (known: 1, 2, 3)"),
            })
        }
    };
    let method = Method::from_code(method_code).ok_or_else(|| Error::Unsupported {
        offset: 6,
        what: format!("compression method {method_code} (known: 0 = zlib, 1 = zstd)"),
    })?;
    if let Some(t) = total_size {
        if t < header_len {
            return Err(Error::Malformed {
                offset: 8,
                what: format!("total size {t} is smaller than the {header_len}-byte header"),
            });
        }
        if t > available {
            return Err(Error::Truncated {
                offset: 0,
                expected: "CCOB of the total size its header gives",
                needed: t,
                available,
            });
        }
    }
    Ok(CcobHeader {
        version,
        method,
        header_len,
        total_size,
        uncompressed_size,
        hash,
    })
}

/// Refuse a CCOB whose header claims `claim` uncompressed bytes for
/// `payload_len` compressed ones: more than the caller's limit, or more
/// than [`MAX_CCOB_RATIO`] allows (before anything is allocated).
pub(crate) fn check_claim(claim: u64, payload_len: u64, opts: &ParseOptions) -> Result<()> {
    if claim > opts.max_decompressed_size {
        return Err(Error::Malformed {
            offset: 0,
            what: format!(
                "uncompressed size {claim} exceeds the limit of {} bytes",
                opts.max_decompressed_size
            ),
        });
    }
    let ratio_cap = payload_len
        .saturating_mul(MAX_CCOB_RATIO)
        .saturating_add(1 << 16);
    if claim > ratio_cap {
        return Err(Error::Malformed {
            offset: 0,
            what: format!(
                "uncompressed size {claim} is implausible for {payload_len} compressed bytes (more than {MAX_CCOB_RATIO}x)"
            ),
        });
    }
    Ok(())
}

/// Decompress the CCOB at the start of `b`. Returns the header, the number
/// of input bytes the CCOB occupies and the decompressed payload.
pub fn decompress_ccob(b: &[u8], opts: &ParseOptions) -> Result<(CcobHeader, u64, Vec<u8>)> {
    let h = parse_ccob_header(b)?;
    let start = h.header_len as usize;
    let end = match h.total_size {
        Some(t) => t as usize,
        None => {
            start + v1_payload_len(&b[start..], h.method).map_err(|e| e.shifted(start as u64))?
        }
    };
    let payload = &b[start..end];
    let claim = h.uncompressed_size;
    check_claim(claim, payload.len() as u64, opts)?;
    let cap = claim.min(
        (payload.len() as u64)
            .saturating_mul(64)
            .saturating_add(1 << 20),
    );
    let mut out = Vec::with_capacity(cap as usize);
    let decoded = match h.method {
        Method::Zstd => zstd::stream::read::Decoder::with_buffer(payload)
            .and_then(|d| d.take(claim.saturating_add(1)).read_to_end(&mut out)),
        Method::Zlib => flate2::bufread::ZlibDecoder::new(payload)
            .take(claim.saturating_add(1))
            .read_to_end(&mut out),
    };
    decoded.map_err(|e| Error::Decompress {
        offset: start as u64,
        reason: e.to_string(),
    })?;
    if out.len() as u64 != claim {
        return Err(Error::Decompress {
            offset: start as u64,
            reason: format!(
                "payload decompresses to {}{} bytes, header says {claim}",
                out.len(),
                if out.len() as u64 > claim { "+" } else { "" }
            ),
        });
    }
    if opts.verify_hash {
        let computed = ccob_hash(&out);
        if computed != h.hash {
            return Err(Error::HashMismatch {
                offset: 0,
                stored: h.hash,
                computed,
            });
        }
    }
    Ok((h, end as u64, out))
}

/// Length of a v1 CCOB payload, which the header does not store: the
/// extent of the first zstd frame or zlib stream.
pub(crate) fn v1_payload_len(p: &[u8], method: Method) -> Result<usize> {
    match method {
        Method::Zstd => {
            zstd::zstd_safe::find_frame_compressed_size(p).map_err(|code| Error::Decompress {
                offset: 0,
                reason: format!(
                    "cannot find the end of the zstd frame: {}",
                    zstd::zstd_safe::get_error_name(code)
                ),
            })
        }
        Method::Zlib => {
            let mut d = flate2::bufread::ZlibDecoder::new(p);
            let limit = (p.len() as u64).saturating_mul(MAX_CCOB_RATIO);
            std::io::copy(&mut (&mut d).take(limit), &mut std::io::sink()).map_err(|e| {
                Error::Decompress {
                    offset: 0,
                    reason: e.to_string(),
                }
            })?;
            Ok(d.total_in() as usize)
        }
    }
}

/// Format and length of the bundle at the start of `b`, without
/// decompressing (except a v1 CCOB, whose end is only known by decoding it).
pub fn bundle_extent(b: &[u8]) -> Result<(Format, u64)> {
    crate::source::bundle_extent_in(&b, 0)
}

/// Find every bundle in a `.hip_fatbin` section: bundles back to back with
/// zero padding between them (the linker aligns each object's section).
/// Linear in the section size: bundles are skipped by their length, only
/// padding is scanned. Anything other than zero padding or a bundle is an
/// error naming its offset.
pub fn find_bundles(section: &[u8]) -> Result<Vec<BundleSpan>> {
    crate::source::find_bundles_in(&section)
}
