//! Positioned reads of a byte source ([`ReadAt`]): a slice, or a range of a
//! file read with `pread` ([`FileRange`]), so a caller that only needs the
//! bundle headers of a large file never maps its device code. A page fault
//! on a file mapping maps a whole page-cache folio (up to 2 MiB on current
//! kernels), and each counts as resident memory; positioned reads only copy
//! the few bytes asked for. [`find_bundles_in`] and
//! [`crate::index_bundle_in`] work on any source.

use std::fs::File;
use std::io::{BufRead, Read};
use std::os::unix::fs::FileExt;

use crate::bundle::{
    parse_ccob_header_within, BundleSpan, Format, Method, BUNDLE_MAGIC, CCOB_MAGIC, MAX_CCOB_RATIO,
};
use crate::error::{show_bytes, Error, Result};

/// Bytes read at once while scanning padding or reading a header.
const WINDOW: usize = 64 << 10;

/// Random access to a fixed-size byte source.
pub trait ReadAt {
    /// Size of the source in bytes.
    fn size(&self) -> u64;
    /// Reads up to `buf.len()` bytes at `offset` (fewer only at the end of
    /// the source); returns how many were read.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize>;
    /// The whole source as a slice, when it is one (lets parsers take
    /// their in-memory fast paths).
    fn as_slice(&self) -> Option<&[u8]> {
        None
    }
    /// The file this source is a range of, and the file offset of the
    /// source's byte 0, when it is one (lets a writer copy from it in the
    /// kernel, `copy_file_range`). Reads stay bounded by [`ReadAt::size`].
    fn file_range(&self) -> Option<(&File, u64)> {
        None
    }
}

impl ReadAt for &[u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(*self)
    }
}

/// `len` bytes of a file from `offset`, read with positioned reads.
#[derive(Debug, Clone, Copy)]
pub struct FileRange<'a> {
    file: &'a File,
    offset: u64,
    len: u64,
}

impl<'a> FileRange<'a> {
    /// The range `[offset, offset + len)` of `file`. Reads past the end of
    /// the file come back short, as for any source.
    pub fn new(file: &'a File, offset: u64, len: u64) -> Self {
        FileRange { file, offset, len }
    }
}

impl ReadAt for FileRange<'_> {
    fn size(&self) -> u64 {
        self.len
    }
    fn file_range(&self) -> Option<(&File, u64)> {
        Some((self.file, self.offset))
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self.len.saturating_sub(offset);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let mut n = 0;
        while n < want {
            let at = self.offset.saturating_add(offset).saturating_add(n as u64);
            match self.file.read_at(&mut buf[n..want], at) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
}

/// The part `[offset, offset + len)` of another source (clamped to it).
pub struct Window<'a, S: ReadAt + ?Sized> {
    inner: &'a S,
    offset: u64,
    len: u64,
}

impl<'a, S: ReadAt + ?Sized> Window<'a, S> {
    pub fn new(inner: &'a S, offset: u64, len: u64) -> Self {
        let offset = offset.min(inner.size());
        let len = len.min(inner.size() - offset);
        Window { inner, offset, len }
    }
}

impl<S: ReadAt + ?Sized> ReadAt for Window<'_, S> {
    fn size(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self.len.saturating_sub(offset);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.inner
            .read_at(self.offset.saturating_add(offset), &mut buf[..want])
    }
    fn as_slice(&self) -> Option<&[u8]> {
        let s = self.inner.as_slice()?;
        s.get(self.offset as usize..(self.offset + self.len) as usize)
    }
    fn file_range(&self) -> Option<(&File, u64)> {
        let (f, at) = self.inner.file_range()?;
        Some((f, at.checked_add(self.offset)?))
    }
}

/// A sequential [`Read`] over `[pos, end)` of a source.
pub(crate) struct SourceReader<'a> {
    src: &'a (dyn ReadAt + 'a),
    pos: u64,
    end: u64,
}

impl<'a> SourceReader<'a> {
    pub(crate) fn new(src: &'a (dyn ReadAt + 'a), pos: u64, end: u64) -> Self {
        SourceReader {
            src,
            pos,
            end: end.min(src.size()),
        }
    }
}

impl Read for SourceReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.src.read_at(self.pos, &mut buf[..want])?;
        self.pos += n as u64;
        Ok(n)
    }
}

pub(crate) fn io_err(offset: u64, what: &str, e: std::io::Error) -> Error {
    Error::Decompress {
        offset,
        reason: format!("reading {what}: {e}"),
    }
}

/// Reads up to `n` bytes at `offset` (fewer at the end of the source).
pub(crate) fn read_vec(src: &dyn ReadAt, offset: u64, n: usize) -> Result<Vec<u8>> {
    let n = n.min(usize::try_from(src.size().saturating_sub(offset)).unwrap_or(usize::MAX));
    let mut v = vec![0u8; n];
    let got = src
        .read_at(offset, &mut v)
        .map_err(|e| io_err(offset, "bundle bytes", e))?;
    v.truncate(got);
    Ok(v)
}

/// Length of a v1 CCOB's compressed payload starting at `start` (the
/// header does not store it): the extent of the first zstd frame or zlib
/// stream, found by decoding it through a fixed buffer.
pub(crate) fn v1_payload_len_in(src: &dyn ReadAt, start: u64, method: Method) -> Result<u64> {
    if let Some(s) = src.as_slice() {
        let p = s.get(start as usize..).unwrap_or_default();
        return crate::bundle::v1_payload_len(p, method).map(|n| n as u64);
    }
    let limit = src
        .size()
        .saturating_sub(start)
        .saturating_mul(MAX_CCOB_RATIO);
    let reader = std::io::BufReader::with_capacity(WINDOW, SourceReader::new(src, start, u64::MAX));
    let fail = |e: std::io::Error| Error::Decompress {
        offset: 0,
        reason: format!("cannot find the end of the compressed payload: {e}"),
    };
    match method {
        Method::Zlib => {
            let mut d = flate2::bufread::ZlibDecoder::new(reader);
            std::io::copy(&mut (&mut d).take(limit), &mut std::io::sink()).map_err(fail)?;
            Ok(d.total_in())
        }
        Method::Zstd => {
            // One frame: the decoder stops at its end; what it consumed is
            // the frame's size.
            let mut counted = Counted {
                inner: reader,
                n: 0,
            };
            let mut d = zstd::stream::read::Decoder::with_buffer(&mut counted)
                .map_err(fail)?
                .single_frame();
            std::io::copy(&mut (&mut d).take(limit), &mut std::io::sink()).map_err(fail)?;
            drop(d);
            Ok(counted.n)
        }
    }
}

/// A [`BufRead`] that counts the bytes its user consumed.
struct Counted<R> {
    inner: R,
    n: u64,
}

impl<R: BufRead> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n += k as u64;
        Ok(k)
    }
}

impl<R: BufRead> BufRead for Counted<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.n += amt as u64;
        self.inner.consume(amt);
    }
}

/// Format and length of the bundle at `offset` of `src`, reading only its
/// header (and entry table), without decompressing (except a v1 CCOB,
/// whose end is only known by decoding its one frame or stream).
pub fn bundle_extent_in(src: &dyn ReadAt, offset: u64) -> Result<(Format, u64)> {
    let src = Window::new(src, offset, u64::MAX);
    let head = read_vec(&src, 0, 32)?;
    if head.starts_with(BUNDLE_MAGIC) {
        let (_, _, end) = crate::stream::parse_header_in(&src)?;
        Ok((Format::Uncompressed, end))
    } else if head.starts_with(CCOB_MAGIC) {
        let h = parse_ccob_header_within(&head, src.size())?;
        let len = match h.total_size {
            Some(t) => t,
            None => {
                h.header_len
                    + v1_payload_len_in(&src, h.header_len, h.method)
                        .map_err(|e| e.shifted(h.header_len))?
            }
        };
        Ok((
            Format::Ccob {
                version: h.version,
                method: h.method,
            },
            len,
        ))
    } else {
        Err(Error::BadMagic {
            offset: 0,
            found: show_bytes(&head),
        })
    }
}

/// [`crate::find_bundles`] over any source: bundles back to back with zero
/// padding between them. Only the padding and each bundle's header are
/// read, in windows of 64 KiB.
pub fn find_bundles_in(section: &dyn ReadAt) -> Result<Vec<BundleSpan>> {
    let size = section.size();
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut buf = vec![0u8; WINDOW];
    'scan: while pos < size {
        // Skip zero padding.
        loop {
            let n = section
                .read_at(pos, &mut buf)
                .map_err(|e| io_err(pos, ".hip_fatbin", e))?;
            if n == 0 {
                break 'scan;
            }
            match buf[..n].iter().position(|&b| b != 0) {
                Some(k) => {
                    pos += k as u64;
                    break;
                }
                None => pos += n as u64,
            }
        }
        let (format, len) = bundle_extent_in(section, pos).map_err(|e| e.shifted(pos))?;
        out.push(BundleSpan {
            offset: pos,
            len,
            format,
        });
        // len >= 20 (smallest header), so this always advances.
        pos = pos.saturating_add(len).min(size);
    }
    Ok(out)
}
