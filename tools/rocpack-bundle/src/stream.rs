//! Bounded-memory access to bundles: the entry table without the code
//! objects ([`index_bundle`]), and one streaming pass over a bundle's
//! uncompressed bytes that hands every code object to a sink in chunks of
//! at most [`CHUNK`] bytes ([`walk_bundle`]).
//!
//! A CCOB is decompressed once per walk, through a fixed buffer: memory is
//! the decoder's state plus one chunk, whatever the payload size, the entry
//! count or how entries overlap. [`index_bundle`] decodes only the prefix
//! that holds the entry table.

use std::io::Read;

use md5::{Digest, Md5};

use crate::bundle::{
    check_claim, parse_ccob_header_within, CcobHeader, Format, ParseOptions, BUNDLE_MAGIC,
    CCOB_MAGIC,
};
use crate::error::{show_bytes, Error, Result};
use crate::source::{read_vec, ReadAt, SourceReader};
use crate::target::TargetId;

/// CCOB payloads at least this large have their MD5 computed on a second
/// thread.
const PARALLEL_MD5_MIN: u64 = 8 << 20;

/// Receives `(entry, offset_in_entry, chunk)` during a walk.
pub type EntrySink<'a, E> = dyn FnMut(usize, u64, &[u8]) -> std::result::Result<(), E> + 'a;

/// Largest piece of a code object handed to a sink at once.
pub const CHUNK: usize = 256 << 10;

/// Fixed part of an uncompressed bundle header (magic + count).
const FIXED: u64 = 32;
/// One entry record without its ID bytes.
const ENTRY_FIXED: u64 = 24;

/// One entry of a [`BundleIndex`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub id: TargetId,
    /// Offset of the code object in the uncompressed bundle.
    pub offset: u64,
    pub size: u64,
}

impl IndexEntry {
    /// End (exclusive) of the code object in the uncompressed bundle.
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }
}

/// A bundle's structure without its code objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleIndex {
    pub format: Format,
    /// Bytes of the input the bundle occupies.
    pub len: u64,
    /// CCOB header, for compressed bundles.
    pub ccob: Option<CcobHeader>,
    /// Size of the uncompressed bundle (for a CCOB: the decompressed
    /// payload, as its header states; checked by a walk).
    pub payload_len: u64,
    /// The uncompressed header bytes (magic, count, entry records).
    pub header: Vec<u8>,
    /// End of the last code object or of the header, whichever is later:
    /// a CCOB payload must be zero beyond it.
    pub end: u64,
    /// Entries in header order.
    pub entries: Vec<IndexEntry>,
}

impl BundleIndex {
    /// Indices of entries whose code objects overlap another's (non-empty
    /// ranges sharing a byte), as pairs `(a, b)` with `a` starting first.
    /// Empty for every bundle clang writes.
    pub fn overlaps(&self) -> Vec<(usize, usize)> {
        let mut spans: Vec<(u64, u64, usize)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.size > 0)
            .map(|(i, e)| (e.offset, e.end(), i))
            .collect();
        spans.sort_unstable();
        let mut out = Vec::new();
        let mut reach: Option<(u64, usize)> = None;
        for &(start, end, i) in &spans {
            if let Some((r, j)) = reach {
                if start < r {
                    out.push((j, i));
                }
            }
            if reach.is_none_or(|(r, _)| end > r) {
                reach = Some((end, i));
            }
        }
        out
    }
}

/// What a walk learned about the bytes outside the code objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkSummary {
    /// Whether the stored CCOB hash matches the payload (`None` when the
    /// bundle is not compressed).
    pub hash_matches: Option<bool>,
    /// The computed truncated MD5 of a CCOB payload.
    pub computed_hash: Option<u64>,
    /// Whether every byte after the header that no code object covers is
    /// zero (the condition for an exact [`crate::BundleLayout`]).
    pub gaps_zero: bool,
}

/// A streaming decoder over a CCOB's compressed payload, bounded to the
/// size its header claims (plus one byte, to detect longer output).
struct Ccob<'a> {
    header: CcobHeader,
    /// Offset of the compressed payload and its end in the input.
    start: u64,
    end: u64,
    reader: Box<dyn Read + 'a>,
}

/// Decoder contexts kept for reuse: a CCOB's decoder keeps a window as
/// large as its payload (tens of MiB), and a fresh one is page-faulted and
/// zeroed again for every bundle. At most [`DCTX_KEEP`] are kept, each
/// declared to the [`memory`](crate::memory) ledger while it is kept (a
/// context the budget has no room for is freed instead).
static DCTX_POOL: std::sync::Mutex<Vec<(zstd::zstd_safe::DCtx<'static>, crate::memory::Held)>> =
    std::sync::Mutex::new(Vec::new());

/// Decoder contexts [`DCTX_POOL`] keeps at most.
const DCTX_KEEP: usize = 2;

/// A decoder context taken from [`DCTX_POOL`] (or new), given back on drop.
/// While it is taken, its memory is the taker's to declare (a walk declares
/// its payload's window).
struct Dctx(Option<zstd::zstd_safe::DCtx<'static>>);

impl Dctx {
    fn take() -> Dctx {
        let pooled = DCTX_POOL.lock().ok().and_then(|mut p| p.pop());
        Dctx(Some(
            pooled.map_or_else(zstd::zstd_safe::DCtx::create, |(d, _)| d),
        ))
    }

    fn get(&mut self) -> &mut zstd::zstd_safe::DCtx<'static> {
        self.0.get_or_insert_with(zstd::zstd_safe::DCtx::create)
    }

    /// Makes sure the context holds no more than a payload of `len` bytes
    /// needs: zstd reuses a window up to three times too large, which a
    /// walk declaring only its own payload would not account for.
    fn fit(&mut self, len: u64) {
        let need = len.min(DECODER_WINDOW_MAX).saturating_add(DCTX_SLACK);
        if self.0.as_ref().is_some_and(|d| d.sizeof() as u64 > need) {
            self.0 = None;
        }
    }
}

/// Largest window a zstd decoder accepts by default (2^27 bytes): the
/// most a CCOB decoder holds.
pub const DECODER_WINDOW_MAX: u64 = 1 << 27;

/// What a decoder context holds beside its window (block buffers, tables).
const DCTX_SLACK: u64 = 1 << 20;

impl Drop for Dctx {
    fn drop(&mut self) {
        if let (Some(d), Ok(mut p)) = (self.0.take(), DCTX_POOL.lock()) {
            if p.len() < DCTX_KEEP {
                if let Some(held) = crate::memory::try_hold(d.sizeof() as u64) {
                    p.push((d, held));
                }
            }
        }
    }
}

/// Frees the decoder contexts kept for reuse (their windows), e.g. when a
/// phase that walked bundles is over.
pub fn release_decoders() {
    if let Ok(mut p) = DCTX_POOL.lock() {
        p.clear();
    }
}

fn open_ccob<'a>(
    src: &'a (dyn ReadAt + 'a),
    opts: &ParseOptions,
    dctx: &'a mut Dctx,
) -> Result<Ccob<'a>> {
    let h = parse_ccob_header_within(&read_vec(src, 0, 32)?, src.size())?;
    let start = h.header_len;
    let end = match h.total_size {
        Some(t) => t,
        None => {
            start
                + crate::source::v1_payload_len_in(src, start, h.method)
                    .map_err(|e| e.shifted(start))?
        }
    };
    if end > src.size() {
        return Err(Error::Truncated {
            offset: 0,
            expected: "compressed payload",
            needed: end,
            available: src.size(),
        });
    }
    let payload_len = end.saturating_sub(start);
    let claim = h.uncompressed_size;
    check_claim(claim, payload_len, opts)?;
    // A slice is decoded in place; any other source through a buffer.
    let payload: Box<dyn std::io::BufRead + 'a> = match src.as_slice() {
        Some(s) => Box::new(s.get(start as usize..end as usize).unwrap_or_default()),
        None => Box::new(std::io::BufReader::with_capacity(
            CHUNK,
            SourceReader::new(src, start, end),
        )),
    };
    if h.method == crate::Method::Zstd {
        dctx.fit(claim);
    }
    let reader: Box<dyn Read + 'a> = match h.method {
        crate::Method::Zstd => Box::new(
            zstd::stream::read::Decoder::with_context(payload, dctx.get())
                .take(claim.saturating_add(1)),
        ),
        crate::Method::Zlib => {
            Box::new(flate2::bufread::ZlibDecoder::new(payload).take(claim.saturating_add(1)))
        }
    };
    Ok(Ccob {
        header: h,
        start,
        end,
        reader,
    })
}

impl Ccob<'_> {
    fn decompress_err(&self, e: std::io::Error) -> Error {
        Error::Decompress {
            offset: self.start,
            reason: e.to_string(),
        }
    }

    /// Read up to `buf.len()` bytes (short only at the end of the stream).
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match self.reader.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.decompress_err(e)),
            }
        }
        Ok(n)
    }
}

/// Parse an uncompressed header from `next(len)`, which yields the next
/// `len` bytes of the uncompressed bundle (or fewer at its end). `limit` is
/// the size of the uncompressed bundle; every code object must lie in it.
fn parse_header(
    limit: u64,
    next: &mut dyn FnMut(usize) -> Result<Vec<u8>>,
) -> Result<(Vec<u8>, Vec<IndexEntry>, u64)> {
    let mut header = Vec::new();
    let mut take = |len: u64, what: &'static str, header: &mut Vec<u8>| -> Result<usize> {
        let at = header.len() as u64;
        let available = limit.saturating_sub(at);
        if len > available {
            return Err(Error::Truncated {
                offset: at,
                expected: what,
                needed: len,
                available,
            });
        }
        let got = next(len as usize)?;
        // Kept even when short: the magic check looks at what there is.
        header.extend_from_slice(&got);
        if (got.len() as u64) < len {
            return Err(Error::Truncated {
                offset: at,
                expected: what,
                needed: len,
                available: got.len() as u64,
            });
        }
        Ok(at as usize)
    };
    // Read what there is of the fixed header first, so that a short input
    // that is no bundle at all is named as such, not as a truncated one.
    let fixed = take(FIXED.min(limit), "bundle header", &mut header);
    if !header.starts_with(BUNDLE_MAGIC) {
        return Err(Error::BadMagic {
            offset: 0,
            found: show_bytes(&header),
        });
    }
    fixed?;
    if (header.len() as u64) < FIXED {
        return Err(Error::Truncated {
            offset: 0,
            expected: "bundle header",
            needed: FIXED,
            available: header.len() as u64,
        });
    }
    let u64_at = |h: &[u8], p: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&h[p..p + 8]);
        u64::from_le_bytes(a)
    };
    let count = u64_at(&header, 24);
    let room = limit.saturating_sub(FIXED) / ENTRY_FIXED;
    if count > room {
        return Err(Error::Malformed {
            offset: 24,
            what: format!(
                "entry count {count} cannot fit: {} bytes after the header hold at most {room} entries",
                limit.saturating_sub(FIXED)
            ),
        });
    }
    // `count` is bounded by `limit`, which for a CCOB is the size its
    // header declares, not bytes anyone has seen: reserve for what is
    // plausible, grow as entry records actually parse.
    let mut entries = Vec::with_capacity(count.min(1024) as usize);
    let mut end = 0u64;
    for i in 0..count {
        let rec = take(ENTRY_FIXED, "entry record", &mut header)?;
        let offset = u64_at(&header, rec);
        let size = u64_at(&header, rec + 8);
        let id_len = u64_at(&header, rec + 16);
        let at = take(id_len, "entry ID bytes", &mut header)?;
        let id_str = std::str::from_utf8(&header[at..]).map_err(|_| Error::Malformed {
            offset: at as u64,
            what: format!("entry {i} ID is not UTF-8"),
        })?;
        let id = TargetId::parse(id_str).map_err(|e| Error::Malformed {
            offset: at as u64,
            what: format!("entry {i}: {e}"),
        })?;
        let Some(co_end) = offset.checked_add(size).filter(|&e| e <= limit) else {
            return Err(Error::Malformed {
                offset: rec as u64,
                what: format!(
                    "entry {i} ({id}) code object [{offset}, +{size}) runs past the end of the input ({limit} bytes)"
                ),
            });
        };
        end = end.max(co_end);
        entries.push(IndexEntry { id, offset, size });
    }
    let end = end.max(header.len() as u64);
    Ok((header, entries, end))
}

/// [`parse_header`] of the uncompressed bundle at the start of `src`
/// (its size is the limit for every code object).
pub(crate) fn parse_header_in(src: &dyn ReadAt) -> Result<(Vec<u8>, Vec<IndexEntry>, u64)> {
    let mut pos = 0u64;
    parse_header(src.size(), &mut |n| {
        let got = read_vec(src, pos, n)?;
        pos += got.len() as u64;
        Ok(got)
    })
}

/// A payload (at file offset `start`) that decoded to `pos` bytes where
/// its header claims `claim`.
fn length_mismatch(start: u64, pos: u64, claim: u64) -> Error {
    Error::Decompress {
        offset: start,
        reason: format!("payload decompresses to {pos} bytes, header says {claim}"),
    }
}

/// Non-zero bytes at payload offset `at`, after the bundle's end.
fn trailing_data(at: u64, h: &CcobHeader) -> Error {
    in_payload(
        Error::Malformed {
            offset: at,
            what: "non-zero data after the end of the bundle".into(),
        },
        h,
    )
}

/// An error from parsing a CCOB's decompressed payload, reported as a
/// malformed CCOB (the payload offset goes into the message).
pub(crate) fn in_payload(e: Error, h: &CcobHeader) -> Error {
    match e {
        Error::Malformed { offset, what } => Error::Malformed {
            offset: 0,
            what: format!(
                "in the decompressed CCOB payload at payload offset {offset}: {what} (header {} bytes)",
                h.header_len
            ),
        },
        Error::Truncated {
            offset,
            expected,
            needed,
            available,
        } => Error::Malformed {
            offset: 0,
            what: format!(
                "decompressed CCOB payload truncated at payload offset {offset}: expected {expected} ({needed} bytes), {available} left"
            ),
        },
        Error::BadMagic { found, .. } => Error::Malformed {
            offset: 0,
            what: format!("decompressed CCOB payload is not an uncompressed bundle ({found})"),
        },
        other => other,
    }
}

/// The structure of the bundle at the start of `bytes`: format, entry table
/// and extent. For a CCOB only the payload prefix holding the table is
/// decompressed; [`walk_bundle`] checks the rest.
pub fn index_bundle(bytes: &[u8], opts: &ParseOptions) -> Result<BundleIndex> {
    index_bundle_in(&bytes, opts)
}

/// [`index_bundle`] of the bundle at the start of any source: only the
/// header and entry table are read (for a CCOB, the payload prefix that
/// holds them is decoded), so a file source is never read further.
pub fn index_bundle_in(src: &dyn ReadAt, opts: &ParseOptions) -> Result<BundleIndex> {
    let head = read_vec(src, 0, 32)?;
    if head.starts_with(BUNDLE_MAGIC) {
        let (header, entries, end) = parse_header_in(src)?;
        Ok(BundleIndex {
            format: Format::Uncompressed,
            len: end,
            ccob: None,
            payload_len: end,
            header,
            end,
            entries,
        })
    } else if head.starts_with(CCOB_MAGIC) {
        let mut dctx = Dctx::take();
        let mut c = open_ccob(src, opts, &mut dctx)?;
        let h = c.header;
        let (header, entries, end) = parse_header(h.uncompressed_size, &mut |n| {
            let mut v = vec![0u8; n];
            let got = c.fill(&mut v)?;
            v.truncate(got);
            Ok(v)
        })
        .map_err(|e| in_payload(e, &h))?;
        Ok(BundleIndex {
            format: Format::Ccob {
                version: h.version,
                method: h.method,
            },
            len: c.end,
            ccob: Some(h),
            payload_len: h.uncompressed_size,
            header,
            end,
            entries,
        })
    } else {
        Err(Error::BadMagic {
            offset: 0,
            found: show_bytes(&head),
        })
    }
}

/// Hands code-object bytes to a sink as the uncompressed bundle streams by.
struct Dispatch<'i> {
    /// Entries by start offset (non-empty ones only).
    order: Vec<usize>,
    next: usize,
    active: Vec<usize>,
    entries: &'i [IndexEntry],
    /// Union of the code-object ranges, sorted.
    covered: Vec<(u64, u64)>,
    cov: usize,
    header_len: u64,
    end: u64,
    gaps_zero: bool,
    /// First non-zero byte after `end` (an error for a CCOB).
    trailing: Option<u64>,
}

impl<'i> Dispatch<'i> {
    fn new(index: &'i BundleIndex) -> Self {
        let mut order: Vec<usize> = (0..index.entries.len())
            .filter(|&i| index.entries[i].size > 0)
            .collect();
        order.sort_by_key(|&i| (index.entries[i].offset, i));
        let mut covered: Vec<(u64, u64)> = Vec::new();
        for &i in &order {
            let e = &index.entries[i];
            match covered.last_mut() {
                Some(last) if e.offset <= last.1 => last.1 = last.1.max(e.end()),
                _ => covered.push((e.offset, e.end())),
            }
        }
        Dispatch {
            order,
            next: 0,
            active: Vec::new(),
            entries: &index.entries,
            covered,
            cov: 0,
            header_len: index.header.len() as u64,
            end: index.end,
            gaps_zero: true,
            trailing: None,
        }
    }

    /// `chunk` holds uncompressed bytes `[pos, pos + chunk.len())`.
    fn feed<E>(
        &mut self,
        pos: u64,
        chunk: &[u8],
        sink: &mut EntrySink<'_, E>,
    ) -> std::result::Result<(), E> {
        let stop = pos + chunk.len() as u64;
        while let Some(&i) = self.order.get(self.next) {
            if self.entries[i].offset >= stop {
                break;
            }
            self.active.push(i);
            self.next += 1;
        }
        for &i in &self.active {
            let e = &self.entries[i];
            let a = e.offset.max(pos);
            let b = e.end().min(stop);
            if a < b {
                sink(
                    i,
                    a - e.offset,
                    &chunk[(a - pos) as usize..(b - pos) as usize],
                )?;
            }
        }
        let entries = self.entries;
        self.active.retain(|&i| entries[i].end() > stop);
        // Gaps: bytes after the header that no code object covers.
        let mut p = pos.max(self.header_len);
        while p < stop {
            while self.cov < self.covered.len() && self.covered[self.cov].1 <= p {
                self.cov += 1;
            }
            match self.covered.get(self.cov) {
                Some(&(s, e)) if s <= p => p = e.min(stop),
                other => {
                    let gap_end = other.map_or(stop, |&(s, _)| s.min(stop));
                    self.check_gap(pos, chunk, p, gap_end);
                    p = gap_end;
                }
            }
        }
        Ok(())
    }
}

impl Dispatch<'_> {
    /// Bytes `[a, b)` (inside `chunk`, which starts at `pos`) are a gap.
    fn check_gap(&mut self, pos: u64, chunk: &[u8], a: u64, b: u64) {
        let at = |x: u64| (x - pos) as usize;
        if self.gaps_zero && chunk[at(a)..at(b)].iter().any(|&x| x != 0) {
            self.gaps_zero = false;
        }
        if self.trailing.is_none() {
            let t0 = a.max(self.end);
            if t0 < b {
                if let Some(k) = chunk[at(t0)..at(b)].iter().position(|&x| x != 0) {
                    self.trailing = Some(t0 + k as u64);
                }
            }
        }
    }
}

/// One pass over the bundle at the start of `bytes` (described by `index`,
/// from [`index_bundle`] on the same bytes): `raw(chunk)` receives the whole
/// uncompressed bundle in order (for a CCOB: the decompressed payload), and
/// `sink(entry, offset_in_entry, chunk)` every code object's bytes in order,
/// in chunks of at most [`CHUNK`] bytes (overlapping entries each receive
/// the shared bytes). A CCOB is decompressed exactly once; its size, the
/// zero tail after the last code object and (with
/// [`ParseOptions::verify_hash`]) its hash are checked; its MD5 is
/// computed unless [`ParseOptions::walk_hash`] is off.
pub fn walk_bundle<E: From<Error>>(
    bytes: &[u8],
    index: &BundleIndex,
    opts: &ParseOptions,
    raw: &mut dyn FnMut(&[u8]) -> std::result::Result<(), E>,
    sink: &mut EntrySink<'_, E>,
) -> std::result::Result<WalkSummary, E> {
    walk(&bytes, index, opts, opts.walk_hash, raw, sink)
}

/// [`walk_bundle`]; `want_hash` false skips the MD5 of a CCOB payload
/// (unless `opts.verify_hash`), leaving `hash_matches` `None`.
fn walk<E: From<Error>>(
    src: &dyn ReadAt,
    index: &BundleIndex,
    opts: &ParseOptions,
    want_hash: bool,
    raw: &mut dyn FnMut(&[u8]) -> std::result::Result<(), E>,
    sink: &mut EntrySink<'_, E>,
) -> std::result::Result<WalkSummary, E> {
    let want_hash = want_hash || opts.verify_hash;
    let mut d = Dispatch::new(index);
    match index.ccob {
        None => {
            if src.size() < index.payload_len {
                return Err(Error::Truncated {
                    offset: 0,
                    expected: "uncompressed bundle",
                    needed: index.payload_len,
                    available: src.size(),
                }
                .into());
            }
            let mut buf = Vec::new();
            let mut pos = 0u64;
            while pos < index.payload_len {
                let n = (index.payload_len - pos).min(CHUNK as u64) as usize;
                let piece = match src.as_slice() {
                    Some(s) => &s[pos as usize..pos as usize + n],
                    None => {
                        buf.resize(n, 0);
                        let got = src
                            .read_at(pos, &mut buf)
                            .map_err(|e| crate::source::io_err(pos, "bundle bytes", e))?;
                        if got < n {
                            return Err(Error::Truncated {
                                offset: pos,
                                expected: "uncompressed bundle",
                                needed: n as u64,
                                available: got as u64,
                            }
                            .into());
                        }
                        &buf[..]
                    }
                };
                raw(piece)?;
                d.feed(pos, piece, sink)?;
                pos += n as u64;
            }
            Ok(WalkSummary {
                hash_matches: None,
                computed_hash: None,
                gaps_zero: d.gaps_zero,
            })
        }
        Some(h) => {
            let mut dctx = Dctx::take();
            let mut c = open_ccob(src, opts, &mut dctx)?;
            // A large payload's MD5 runs on a second thread, fed through a
            // bounded queue of chunk buffers that come back for reuse, so it
            // overlaps decompression and the sinks without a copy.
            let (pos, digest) = std::thread::scope(|sc| {
                let parallel = want_hash && h.uncompressed_size >= PARALLEL_MD5_MIN;
                let (tx, rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(8);
                let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<u8>>();
                let hasher = parallel.then(|| {
                    sc.spawn(move || {
                        let mut m = Md5::new();
                        for (b, n) in rx {
                            m.update(&b[..n]);
                            // The walk may be over: then the buffer goes.
                            let _ = back_tx.send(b);
                        }
                        m.finalize()
                    })
                });
                let mut md5 = Md5::new();
                let mut buf = vec![0u8; CHUNK];
                let mut pos = 0u64;
                loop {
                    let n = c.fill(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    if pos + n as u64 > h.uncompressed_size {
                        return Err(Error::Decompress {
                            offset: c.start,
                            reason: format!(
                                "payload decompresses to {}+ bytes, header says {}",
                                pos + n as u64,
                                h.uncompressed_size
                            ),
                        }
                        .into());
                    }
                    let chunk = &buf[..n];
                    if want_hash && !parallel {
                        md5.update(chunk);
                    }
                    raw(chunk)?;
                    d.feed(pos, chunk, sink)?;
                    pos += n as u64;
                    if parallel {
                        let next = back_rx.try_recv().unwrap_or_else(|_| vec![0u8; CHUNK]);
                        // The hasher only stops when this sender is dropped.
                        let _ = tx.send((std::mem::replace(&mut buf, next), n));
                    }
                }
                drop(tx);
                let digest = match hasher {
                    Some(t) => t.join().unwrap_or_default(),
                    None => md5.finalize(),
                };
                Ok::<_, E>((pos, digest))
            })?;
            if pos != h.uncompressed_size {
                return Err(length_mismatch(c.start, pos, h.uncompressed_size).into());
            }
            if let Some(at) = d.trailing {
                return Err(trailing_data(at, &h).into());
            }
            Ok(summary(
                want_hash.then_some(&digest[..]),
                h.hash,
                opts,
                d.gaps_zero,
            )?)
        }
    }
}

/// Where [`walk_entries`] puts the bytes of one code object.
pub enum EntryDest {
    /// Not needed: a CCOB decodes them and drops them, an uncompressed
    /// bundle does not even read them.
    Skip,
    /// Decoded straight into this buffer, which must be exactly the entry's
    /// size; handed back through [`EntryTarget::filled`].
    Buffer(Vec<u8>),
    /// Handed over in chunks of at most [`CHUNK`] bytes
    /// ([`EntryTarget::chunk`]).
    Chunks,
}

/// Receives the code objects of a [`walk_entries`] pass.
pub trait EntryTarget<E> {
    /// Where the code object of entry `i` goes (asked once per non-empty
    /// entry, in payload order).
    fn dest(&mut self, i: usize) -> std::result::Result<EntryDest, E>;
    /// Entry `i`'s code object, decoded whole into the buffer
    /// [`EntryTarget::dest`] gave.
    fn filled(&mut self, i: usize, buf: Vec<u8>) -> std::result::Result<(), E>;
    /// `chunk` holds bytes `[offset, offset + chunk.len())` of entry `i`
    /// (for [`EntryDest::Chunks`]).
    fn chunk(&mut self, i: usize, offset: u64, chunk: &[u8]) -> std::result::Result<(), E>;
}

/// The uncompressed bundle as a sequence of bytes, read front to back: a
/// CCOB's decoder, or positioned reads of an uncompressed bundle (which can
/// skip ranges without reading them).
enum Payload<'a> {
    Ccob(Ccob<'a>),
    Plain {
        src: &'a (dyn ReadAt + 'a),
        pos: u64,
        len: u64,
    },
}

impl Payload<'_> {
    /// Reads up to `buf.len()` bytes (short only at the end).
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        match self {
            Payload::Ccob(c) => c.fill(buf),
            Payload::Plain { src, pos, len } => {
                let want = buf
                    .len()
                    .min(usize::try_from(len.saturating_sub(*pos)).unwrap_or(usize::MAX));
                let n = src
                    .read_at(*pos, &mut buf[..want])
                    .map_err(|e| crate::source::io_err(*pos, "bundle bytes", e))?;
                *pos += n as u64;
                Ok(n)
            }
        }
    }

    /// Passes over up to `n` bytes; returns how many there were.
    fn skip(&mut self, n: u64, scratch: &mut [u8]) -> Result<u64> {
        match self {
            Payload::Ccob(c) => {
                let mut done = 0;
                while done < n {
                    let want = (n - done).min(scratch.len() as u64) as usize;
                    let k = c.fill(&mut scratch[..want])?;
                    if k == 0 {
                        break;
                    }
                    done += k as u64;
                }
                Ok(done)
            }
            Payload::Plain { pos, len, .. } => {
                let k = n.min(len.saturating_sub(*pos));
                *pos += k;
                Ok(k)
            }
        }
    }
}

/// One pass over the bundle at the start of `src` (described by `index`),
/// that puts each code object where `target` says ([`EntryDest`]): with
/// [`EntryDest::Buffer`] a CCOB is decoded straight into the caller's
/// buffer, with no copy in between. Checks and summary are those of
/// [`walk_bundle`] (size, zero tail, gaps, hash with
/// [`ParseOptions::verify_hash`] or [`ParseOptions::walk_hash`], computed on
/// this thread). Only the bytes outside the code objects and those asked
/// for are read; code objects of an uncompressed bundle that are skipped
/// are not read at all. Entries whose code objects overlap each other or
/// the header are walked by [`walk_bundle`] (buffers filled from its
/// chunks).
pub fn walk_entries<E: From<Error>>(
    src: &dyn ReadAt,
    index: &BundleIndex,
    opts: &ParseOptions,
    target: &mut dyn EntryTarget<E>,
) -> std::result::Result<WalkSummary, E> {
    let header_len = index.header.len() as u64;
    let mut order: Vec<usize> = (0..index.entries.len())
        .filter(|&i| index.entries[i].size > 0)
        .collect();
    order.sort_by_key(|&i| (index.entries[i].offset, i));
    let disjoint = order.iter().try_fold(header_len, |reach, &i| {
        let e = &index.entries[i];
        (e.offset >= reach).then_some(e.end())
    });
    if disjoint.is_none() {
        return walk_entries_overlapping(src, index, opts, target);
    }
    let hashing = (opts.walk_hash || opts.verify_hash) && index.ccob.is_some();
    let mut dctx = Dctx::take();
    let mut w = EntryWalk::open(src, index, opts, &mut dctx, hashing)?;
    for &i in &order {
        let e = &index.entries[i];
        if !w.gap(Some(e.offset))? || !w.entry(i, e.size, target)? {
            return w.finish(index, opts);
        }
    }
    w.gap(None)?;
    w.finish(index, opts)
}

/// The state of one [`walk_entries`] pass over a payload whose code
/// objects are disjoint: where it is, the running MD5 (CCOBs when asked),
/// and what the bytes outside every code object held.
struct EntryWalk<'a> {
    p: Payload<'a>,
    /// Payload bytes read so far.
    pos: u64,
    /// The payload length the header claims.
    claim: u64,
    /// File offset of the payload (for errors).
    start: u64,
    header_len: u64,
    /// Where the bundle's last code object ends.
    end: u64,
    hashing: bool,
    md5: Md5,
    scratch: Vec<u8>,
    /// Every byte after the header and outside the code objects is zero.
    gaps_zero: bool,
    /// The first non-zero byte after the bundle's end, if any.
    trailing: Option<u64>,
}

impl<'a> EntryWalk<'a> {
    /// Opens the payload of `index` in `src` (a CCOB through `dctx`).
    fn open(
        src: &'a dyn ReadAt,
        index: &BundleIndex,
        opts: &ParseOptions,
        dctx: &'a mut Dctx,
        hashing: bool,
    ) -> Result<EntryWalk<'a>> {
        let (p, claim, start) = match index.ccob {
            Some(h) => {
                let c = open_ccob(src, opts, dctx)?;
                let start = c.start;
                (Payload::Ccob(c), h.uncompressed_size, start)
            }
            None => {
                if src.size() < index.payload_len {
                    return Err(Error::Truncated {
                        offset: 0,
                        expected: "uncompressed bundle",
                        needed: index.payload_len,
                        available: src.size(),
                    });
                }
                let p = Payload::Plain {
                    src,
                    pos: 0,
                    len: index.payload_len,
                };
                (p, index.payload_len, 0)
            }
        };
        Ok(EntryWalk {
            p,
            pos: 0,
            claim,
            start,
            header_len: index.header.len() as u64,
            end: index.end,
            hashing,
            md5: Md5::new(),
            scratch: vec![0u8; CHUNK],
            gaps_zero: true,
            trailing: None,
        })
    }

    /// Reads `[pos, to)` (or to the end of the payload when `to` is None)
    /// as bytes outside every code object; false at the end of the payload.
    fn gap(&mut self, to: Option<u64>) -> Result<bool> {
        loop {
            let want = match to {
                Some(t) if self.pos >= t => return Ok(true),
                Some(t) => (t - self.pos).min(CHUNK as u64) as usize,
                None => CHUNK,
            };
            let n = self.p.fill(&mut self.scratch[..want])?;
            if n == 0 {
                return Ok(false);
            }
            let b = self.pos + n as u64;
            if b > self.claim {
                return Err(Error::Decompress {
                    offset: self.start,
                    reason: format!(
                        "payload decompresses to {b}+ bytes, header says {}",
                        self.claim
                    ),
                });
            }
            let chunk = &self.scratch[..n];
            if self.hashing {
                self.md5.update(chunk);
            }
            // Gaps: bytes after the header; beyond `end` they must be zero.
            let a = self.pos.max(self.header_len);
            if a < b {
                let g = &chunk[(a - self.pos) as usize..];
                if self.gaps_zero && g.iter().any(|&x| x != 0) {
                    self.gaps_zero = false;
                }
                let t0 = a.max(self.end);
                if self.trailing.is_none() && t0 < b {
                    let after = &chunk[(t0 - self.pos) as usize..];
                    if let Some(k) = after.iter().position(|&x| x != 0) {
                        self.trailing = Some(t0 + k as u64);
                    }
                }
            }
            self.pos = b;
        }
    }

    /// Entry `i` (`size` bytes, at the current position) to where `target`
    /// wants it; false when the payload ended inside it.
    fn entry<E: From<Error>>(
        &mut self,
        i: usize,
        size: u64,
        target: &mut dyn EntryTarget<E>,
    ) -> std::result::Result<bool, E> {
        match target.dest(i)? {
            EntryDest::Skip if !self.hashing => {
                let k = self.p.skip(size, &mut self.scratch)?;
                self.pos += k;
                Ok(k == size)
            }
            d @ (EntryDest::Skip | EntryDest::Chunks) => {
                let mut off = 0u64;
                while off < size {
                    let want = (size - off).min(CHUNK as u64) as usize;
                    let n = self.p.fill(&mut self.scratch[..want])?;
                    if n == 0 {
                        break;
                    }
                    if self.hashing {
                        self.md5.update(&self.scratch[..n]);
                    }
                    if matches!(d, EntryDest::Chunks) {
                        target.chunk(i, off, &self.scratch[..n])?;
                    }
                    off += n as u64;
                }
                self.pos += off;
                Ok(off == size)
            }
            EntryDest::Buffer(mut buf) => {
                let want = usize::try_from(size).unwrap_or(usize::MAX);
                buf.resize(want, 0);
                let n = self.p.fill(&mut buf)?;
                if self.hashing {
                    self.md5.update(&buf[..n]);
                }
                self.pos += n as u64;
                if n < want {
                    return Ok(false);
                }
                target.filled(i, buf)?;
                Ok(true)
            }
        }
    }

    /// Checks the length decoded against the header's claim and the bytes
    /// after the bundle's end; the summary, with the stored hash checked
    /// as `opts` asks.
    fn finish<E: From<Error>>(
        self,
        index: &BundleIndex,
        opts: &ParseOptions,
    ) -> std::result::Result<WalkSummary, E> {
        if self.pos != self.claim {
            return Err(length_mismatch(self.start, self.pos, self.claim).into());
        }
        let Some(h) = index.ccob else {
            return Ok(WalkSummary {
                hash_matches: None,
                computed_hash: None,
                gaps_zero: self.gaps_zero,
            });
        };
        if let Some(at) = self.trailing {
            return Err(trailing_data(at, &h).into());
        }
        let digest = self.hashing.then(|| self.md5.finalize());
        Ok(summary(digest.as_deref(), h.hash, opts, self.gaps_zero)?)
    }
}

/// [`walk_entries`] of a bundle whose code objects overlap each other or
/// the header: through [`walk`], buffers filled from its chunks.
fn walk_entries_overlapping<E: From<Error>>(
    src: &dyn ReadAt,
    index: &BundleIndex,
    opts: &ParseOptions,
    target: &mut dyn EntryTarget<E>,
) -> std::result::Result<WalkSummary, E> {
    let mut dests: Vec<Option<EntryDest>> = (0..index.entries.len()).map(|_| None).collect();
    walk(
        src,
        index,
        opts,
        opts.walk_hash,
        &mut |_| Ok(()),
        &mut |i, off, chunk| {
            if off == 0 {
                dests[i] = Some(target.dest(i)?);
            }
            match &mut dests[i] {
                Some(EntryDest::Chunks) => target.chunk(i, off, chunk)?,
                Some(EntryDest::Buffer(buf)) => {
                    let size = index.entries[i].size as usize;
                    if off == 0 {
                        buf.resize(size, 0);
                    }
                    let at = off as usize;
                    buf[at..at + chunk.len()].copy_from_slice(chunk);
                    if at + chunk.len() == size {
                        if let Some(EntryDest::Buffer(b)) = dests[i].take() {
                            target.filled(i, b)?;
                        }
                    }
                }
                Some(EntryDest::Skip) | None => {}
            }
            Ok(())
        },
    )
}

/// Write the uncompressed bundle (a CCOB's decompressed payload) to `w`
/// in one streaming pass; the result also tells whether the bundle has an
/// exact layout ([`crate::BundleLayout::of_index`]). The payload's MD5 is
/// computed only with [`ParseOptions::verify_hash`].
pub fn copy_payload(
    bytes: &[u8],
    index: &BundleIndex,
    opts: &ParseOptions,
    w: &mut dyn std::io::Write,
) -> std::result::Result<WalkSummary, CopyError> {
    walk(
        &bytes,
        index,
        opts,
        false,
        &mut |c: &[u8]| w.write_all(c).map_err(CopyError::Io),
        &mut |_, _, _| Ok(()),
    )
}

/// Error of [`copy_payload`]: the bundle, or the writer.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(transparent)]
    Bundle(#[from] Error),
    #[error("{0}")]
    Io(std::io::Error),
}

/// What a walk of a CCOB found: without a `digest` (MD5 of the payload,
/// not computed) no hash verdict; with one, the stored `hash` checked
/// against its first 8 bytes (little-endian, LLVM's `MD5Result::low()`),
/// a mismatch an error when `opts.verify_hash`.
fn summary(
    digest: Option<&[u8]>,
    stored: u64,
    opts: &ParseOptions,
    gaps_zero: bool,
) -> Result<WalkSummary> {
    let Some(digest) = digest else {
        return Ok(WalkSummary {
            hash_matches: None,
            computed_hash: None,
            gaps_zero,
        });
    };
    let mut low = [0u8; 8];
    low.copy_from_slice(&digest[..8]);
    let computed = u64::from_le_bytes(low);
    if opts.verify_hash && computed != stored {
        return Err(Error::HashMismatch {
            offset: 0,
            stored,
            computed,
        });
    }
    Ok(WalkSummary {
        hash_matches: Some(computed == stored),
        computed_hash: Some(computed),
        gaps_zero,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_bundle, write_ccob, write_uncompressed, Method};

    /// `parse_bundle` and `index_bundle` share one table parser: on every
    /// prefix of a bundle, and of a CCOB payload, they fail alike.
    #[test]
    fn parse_and_index_fail_alike() {
        let raw = write_uncompressed(&[
            ("host-x86_64-unknown-linux-gnu-", &b""[..]),
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", &b"abcdef"[..]),
        ]);
        let opts = ParseOptions::default();
        for n in 0..raw.len() {
            for input in [
                raw[..n].to_vec(),
                write_ccob(&raw[..n], 3, Method::Zstd).unwrap(),
            ] {
                let p = parse_bundle(&input).map(|b| (b.len, b.entries.len()));
                let i = index_bundle(&input, &opts).map(|x| (x.len, x.entries.len()));
                assert_eq!(p, i, "prefix {n}");
            }
        }
        let short = write_ccob(b"not a bundle", 3, Method::Zlib).unwrap();
        let e = parse_bundle(&short).unwrap_err().to_string();
        assert!(e.contains("not an uncompressed bundle"), "{e}");
        let mut head = BUNDLE_MAGIC.to_vec();
        head.extend_from_slice(&[0; 4]);
        assert!(matches!(
            parse_bundle(&head),
            Err(Error::Truncated {
                offset: 0,
                needed: FIXED,
                available: 28,
                ..
            })
        ));
    }
}
