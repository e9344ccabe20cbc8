//! KPAK v1 writers.
//!
//! [`KpackStreamWriter`] writes kernels to a `Write + Seek` as they are
//! added (it keeps only the TOC in memory) and back-patches `toc_offset`
//! (and, for zstd, the frame count) in `finish`. [`KpackWriter`] collects
//! borrowed or owned kernels, then writes them through a stream writer,
//! compressing zstd frames in parallel batches; the output does not depend
//! on the number of threads. Both produce the bytes rocm-kpack's Python
//! writer produces for the same calls (see `docs/formats/kpack.md`).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use rayon::prelude::*;

use crate::commit::PendingFile;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    normalize_key, Compression, BLOB_ALIGNMENT, HEADER_SIZE, KERNEL_TYPE_HSACO, MAGIC, SCHEME_NONE,
    SCHEME_ZSTD, VERSION, ZSTD_MAX_KERNELS,
};
use crate::msgpack::enc;
use crate::writer_budget;

/// Compress one kernel as rocpack writes it: one single-segment frame with
/// the content size and a content checksum (XXH64, 4 bytes), no
/// dictionary, so a damaged frame is a decoding error rather than wrong
/// code. ROCm's readers (C++ `ZSTD_decompressDCtx`, Python `zstandard`)
/// verify the checksum too.
pub fn compress_frame(data: &[u8], level: i32) -> Result<Vec<u8>> {
    compress_frame_with(data, level, true)
}

/// [`compress_frame`] with or without the content checksum; without, the
/// frame is exactly python-zstandard's `ZstdCompressor(level).compress()`
/// (what rocm-kpack's Python writer produces).
///
/// Memory: the context waits for a [`writer_budget::permit`] first, and
/// ultra levels are capped ([`writer_budget`]). A thread keeps a small
/// context for its next code object ([`KeptContext`]).
pub fn compress_frame_with(data: &[u8], level: i32, checksum: bool) -> Result<Vec<u8>> {
    use zstd::zstd_safe::{CParameter, ResetDirective};
    let zerr = |code: usize| {
        Error::new(ErrorKind::Zstd(
            zstd::zstd_safe::get_error_name(code).into(),
        ))
    };
    let len = data.len() as u64;
    let need = writer_budget::context_bytes(level, len, false);
    let _permit = writer_budget::permit(need);
    let mut cctx = KeptContext::take(need);
    cctx.reset(ResetDirective::SessionAndParameters)
        .map_err(zerr)?;
    cctx.set_parameter(CParameter::CompressionLevel(level))
        .map_err(zerr)?;
    cctx.set_parameter(CParameter::ChecksumFlag(checksum))
        .map_err(zerr)?;
    for p in ultra_caps(level, len) {
        cctx.set_parameter(p).map_err(zerr)?;
    }
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    cctx.compress2(&mut out, data).map_err(zerr)?;
    KeptContext::give_back(cctx);
    Ok(out)
}

/// A thread's compression context, kept between code objects when it is
/// at most [`KEPT_CONTEXT_MAX`] bytes: a fresh one per code object is
/// allocated, page-faulted and zeroed again and, freed, leaves blocks the
/// allocator may keep. Declared to the memory ledger while it is kept (one
/// the budget has no room for is freed). Larger contexts (high levels)
/// are not kept: their compressions take far longer than a fresh context,
/// and kept idle they would take budget running compressions need. Reuse
/// does not change a frame: [`compress_frame_with`] resets the context's
/// session and parameters first.
struct KeptContext;

/// Largest context a thread keeps ([`KeptContext`]).
const KEPT_CONTEXT_MAX: u64 = 16 << 20;

type Kept = (zstd::zstd_safe::CCtx<'static>, writer_budget::Held);

thread_local! {
    static KEPT: std::cell::RefCell<Option<Kept>> = const { std::cell::RefCell::new(None) };
}

impl KeptContext {
    /// This thread's kept context, unless it is more than twice what
    /// `need` bytes take (its memory would go unaccounted), or a new one.
    fn take(need: u64) -> zstd::zstd_safe::CCtx<'static> {
        let kept = KEPT.with(|k| k.borrow_mut().take()).map(|(c, _held)| c);
        match kept {
            Some(c) if c.sizeof() as u64 <= need.saturating_mul(2) + (1 << 20) => c,
            _ => zstd::zstd_safe::CCtx::create(),
        }
    }

    fn give_back(c: zstd::zstd_safe::CCtx<'static>) {
        let size = c.sizeof() as u64;
        if size <= KEPT_CONTEXT_MAX {
            if let Some(held) = writer_budget::try_hold(size) {
                KEPT.with(|k| *k.borrow_mut() = Some((c, held)));
            }
        }
    }
}

/// The parameters that cap an ultra level for an input of `len` bytes
/// ([`writer_budget::ultra_caps`]); none for levels up to 19.
fn ultra_caps(level: i32, len: u64) -> Vec<zstd::stream::raw::CParameter> {
    use zstd::stream::raw::CParameter;
    let [hash, chain, window] = writer_budget::ultra_caps(level, len);
    let mut v = Vec::new();
    v.extend(hash.map(CParameter::HashLog));
    v.extend(chain.map(CParameter::ChainLog));
    v.extend(window.map(CParameter::WindowLog));
    v
}

/// Input bytes read per step of [`compress_stream`] (a multiple of zstd's
/// 128 KiB block).
pub const STREAM_IN_CHUNK: usize = 1 << 20;

/// Code objects larger than this are compressed streaming
/// ([`compress_stream`]) rather than whole ([`compress_frame`]) by the
/// writers' file paths ([`KpackStreamWriter::add_file_range`], `kpack
/// pack`, `kpack split`): memory then stays a few MiB whatever the code
/// object's size. Up to the zstd window (2 MiB at level 3, 8 MiB at 19)
/// the two frames are byte-identical; past it libzstd's streaming
/// compressor (a circular window buffer) finds slightly different matches
/// than the one-shot `ZSTD_compress2` (measured: a 9 MiB code object at
/// level 3 gives a frame 1 byte shorter, at level 19 1 byte longer). So
/// code objects up to this size keep exactly the frames earlier releases
/// wrote, larger ones get the streamed frame, which is as deterministic
/// (independent of thread count and of how the input is read). The split
/// scan's in-memory limit for CCOB payloads is this constant, so a code
/// object gets the same frame whichever path compressed it.
pub const STREAM_THRESHOLD: u64 = 32 << 20;

/// Compress exactly `len` bytes read from `src` into `dst` as one zstd
/// frame, the same frame [`compress_frame_with`] makes of those bytes
/// (content size and, with `checksum`, content checksum in the header),
/// reading and writing in bounded chunks ([`STREAM_IN_CHUNK`] in, zstd's
/// output block out): memory does not depend on `len`. `src` ending before
/// `len` bytes is an error (`UnexpectedEof`); bytes after `len` are not read.
/// Returns the frame's length.
pub fn compress_stream(
    src: &mut dyn Read,
    len: u64,
    dst: &mut dyn Write,
    level: i32,
    checksum: bool,
) -> Result<u64> {
    use zstd::zstd_safe::{self, zstd_sys::ZSTD_EndDirective, CParameter, InBuffer, OutBuffer};
    let zerr = |code: usize| Error::new(ErrorKind::Zstd(zstd_safe::get_error_name(code).into()));
    let _permit = writer_budget::permit(writer_budget::context_bytes(level, len, true));
    let mut cctx = zstd_safe::CCtx::create();
    cctx.set_parameter(CParameter::CompressionLevel(level))
        .map_err(zerr)?;
    cctx.set_parameter(CParameter::ChecksumFlag(checksum))
        .map_err(zerr)?;
    for p in ultra_caps(level, len) {
        cctx.set_parameter(p).map_err(zerr)?;
    }
    cctx.set_pledged_src_size(Some(len)).map_err(zerr)?;
    let mut inbuf = vec![0u8; STREAM_IN_CHUNK.min(usize::try_from(len).unwrap_or(usize::MAX))];
    let mut outbuf = vec![0u8; zstd_safe::CCtx::out_size()];
    let mut left = len;
    let mut written = 0u64;
    let mut emit = |out: &[u8]| -> Result<()> {
        dst.write_all(out)?;
        written += out.len() as u64;
        Ok(())
    };
    // The last piece goes in with `ZSTD_e_end`, so its final block is
    // compressed as the frame's last block, as the one-shot compressor
    // does (ending after a `ZSTD_e_continue` would add an empty last
    // block: a 3-byte longer, different frame).
    loop {
        let want = inbuf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let chunk = inbuf.get_mut(..want).unwrap_or_default();
        let mut got = 0;
        while got < want {
            match src.read(chunk.get_mut(got..).unwrap_or_default()) {
                Ok(0) => {
                    return Err(Error::from(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!(
                            "the input ended after {} of {len} bytes",
                            len - left + got as u64
                        ),
                    )))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::from(e)),
            }
        }
        left -= got as u64;
        let last = left == 0;
        let op = if last {
            ZSTD_EndDirective::ZSTD_e_end
        } else {
            ZSTD_EndDirective::ZSTD_e_continue
        };
        let mut input = InBuffer::around(chunk.get(..got).unwrap_or_default());
        loop {
            let mut out = OutBuffer::around(outbuf.as_mut_slice());
            let remaining = cctx
                .compress_stream2(&mut out, &mut input, op)
                .map_err(zerr)?;
            emit(out.as_slice())?;
            let done = if last {
                remaining == 0
            } else {
                input.pos() == got
            };
            if done {
                break;
            }
        }
        if last {
            break;
        }
    }
    Ok(written)
}

/// The zstd frame of one code object, made by [`frame_of_file_range`]:
/// in memory, or (for a code object above [`STREAM_THRESHOLD`]) in an
/// unnamed temporary file, so a worker thread can compress a code object
/// of any size with bounded memory while the archive is written elsewhere.
#[derive(Debug)]
pub enum StoredFrame {
    /// The frame's bytes.
    Mem(Vec<u8>),
    /// `len` bytes of a file at `offset` (an unlinked temporary file of
    /// [`frame_of_file_range`], or a spill file holding frames made
    /// earlier); copied into the archive file to file.
    Spilled {
        /// The file holding the frame.
        file: fs::File,
        /// Where the frame starts in `file`.
        offset: u64,
        /// The frame's length.
        len: u64,
    },
}

impl StoredFrame {
    /// The frame's length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            StoredFrame::Mem(v) => v.len() as u64,
            StoredFrame::Spilled { len, .. } => *len,
        }
    }

    /// True for an empty frame (never made by this crate).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One code object of [`KpackStreamWriter::add_file_ranges`]: `len` bytes
/// of `file` at `offset`.
#[derive(Debug)]
pub struct FileInput<'a> {
    /// TOC binary key (normalised or not as the writer says).
    pub key: String,
    /// Arch key.
    pub target: String,
    /// The file holding it.
    pub file: &'a fs::File,
    /// Where it starts in `file`.
    pub offset: u64,
    /// Its length.
    pub len: u64,
    /// Entry `metadata`, if any.
    pub metadata: Option<rmpv::Value>,
    /// The file's name, for errors reading or compressing it.
    pub path: Option<&'a Path>,
}

/// The largest code object [`frame_of_file_range`] reads into its
/// worker's buffer (most code objects; larger ones get a buffer of their
/// own, so what a worker keeps between code objects stays small).
pub const REUSED_BUFFER_MAX: u64 = 8 << 20;

thread_local! {
    /// A worker thread's buffer for the code objects [`frame_of_file_range`]
    /// reads whole, up to [`REUSED_BUFFER_MAX`] bytes.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The first `n` bytes of `buf`, grown (zero-filled) only past its length:
/// a fresh zeroed buffer per code object (page faults, then clearing pages
/// about to be overwritten) cost about a tenth of a split's CPU. The bytes
/// are stale; the caller overwrites all of them.
fn reused_prefix(buf: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if buf.len() < n {
        buf.resize(n, 0);
    }
    &mut buf[..n]
}

/// The zstd frame of the `len` bytes of `file` at `offset`: compressed
/// whole ([`compress_frame_with`]) up to [`STREAM_THRESHOLD`] bytes,
/// streamed ([`compress_stream`], positioned reads) into an unnamed
/// temporary file in `spill_dir` above it. Memory stays bounded by the
/// threshold (plus its frame) whatever `len` is.
pub fn frame_of_file_range(
    file: &fs::File,
    offset: u64,
    len: u64,
    level: i32,
    checksum: bool,
    spill_dir: &Path,
) -> Result<StoredFrame> {
    let mut src = crate::io::FileRange {
        file,
        offset,
        left: len,
    };
    if len <= REUSED_BUFFER_MAX {
        return READ_BUFFER.with(|cell| {
            let mut buf = cell.borrow_mut();
            let data = reused_prefix(&mut buf, len as usize);
            src.read_exact(data)?;
            compress_frame_with(data, level, checksum).map(StoredFrame::Mem)
        });
    }
    if len <= STREAM_THRESHOLD {
        let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        src.read_to_end(&mut data)?;
        return compress_frame_with(&data, level, checksum).map(StoredFrame::Mem);
    }
    let tmp = tempfile::tempfile_in(spill_dir).map_err(|e| Error::from(e).with_path(spill_dir))?;
    let mut w = BufWriter::with_capacity(1 << 20, tmp);
    let n = compress_stream(&mut src, len, &mut w, level, checksum)?;
    let file = w.into_inner().map_err(|e| Error::from(e.into_error()))?;
    Ok(StoredFrame::Spilled {
        file,
        offset: 0,
        len: n,
    })
}

#[derive(Clone, Debug)]
struct EntryMeta {
    ordinal: u32,
    original_size: u64,
    metadata: Option<rmpv::Value>,
}

/// The TOC being built: binaries in first-insertion order, arches in
/// insertion order per binary, ordinals in `add` order.
#[derive(Clone, Debug, Default)]
struct TocBuilder {
    binaries: Vec<(String, Vec<(String, EntryMeta)>)>,
    index: HashMap<String, usize>,
    targets_seen: Vec<String>,
    count: u32,
    /// Per ordinal, where its entry is: (binary, arch) positions.
    slots: Vec<(usize, usize)>,
}

impl TocBuilder {
    fn check(&self, key: &str, target: &str) -> Result<()> {
        if let Some(&i) = self.index.get(key) {
            if let Some((_, arches)) = self.binaries.get(i) {
                if arches.iter().any(|(a, _)| a == target) {
                    return Err(Error::new(ErrorKind::Duplicate {
                        key: key.to_owned(),
                        target: target.to_owned(),
                    }));
                }
            }
        }
        if self.count == u32::MAX {
            return Err(Error::new(ErrorKind::Limit(
                "more than 2^32-1 kernels in one archive".into(),
            )));
        }
        Ok(())
    }

    fn push(
        &mut self,
        key: String,
        target: &str,
        original_size: u64,
        metadata: Option<rmpv::Value>,
    ) -> u32 {
        let ordinal = self.count;
        self.count += 1;
        let meta = EntryMeta {
            ordinal,
            original_size,
            metadata,
        };
        if !self.targets_seen.iter().any(|t| t == target) {
            self.targets_seen.push(target.to_owned());
        }
        match self.index.get(&key) {
            Some(&i) => {
                if let Some((_, arches)) = self.binaries.get_mut(i) {
                    self.slots.push((i, arches.len()));
                    arches.push((target.to_owned(), meta));
                }
            }
            None => {
                self.slots.push((self.binaries.len(), 0));
                self.index.insert(key.clone(), self.binaries.len());
                self.binaries.push((key, vec![(target.to_owned(), meta)]));
            }
        }
        ordinal
    }

    fn entry_mut(&mut self, ordinal: u32) -> Option<&mut EntryMeta> {
        let &(b, a) = self.slots.get(ordinal as usize)?;
        Some(&mut self.binaries.get_mut(b)?.1.get_mut(a)?.1)
    }
}

/// Archive-level TOC fields.
#[derive(Clone, Debug, Default)]
struct Header {
    group_name: String,
    gfx_arch_family: Option<String>,
    gfx_arches: Option<Vec<String>>,
}

/// The setters of the [`Header`] fields, for a writer with a `header`
/// field (both writers offer the same ones).
macro_rules! header_setters {
    () => {
        /// Set `group_name` (default: empty).
        pub fn group_name(&mut self, name: impl Into<String>) -> &mut Self {
            self.header.group_name = name.into();
            self
        }

        /// Set `gfx_arch_family` (default: the only arch, or empty).
        pub fn arch_family(&mut self, family: impl Into<String>) -> &mut Self {
            self.header.gfx_arch_family = Some(family.into());
            self
        }

        /// Set `gfx_arches` (default: the targets added, in first-added order).
        pub fn arches<I, S>(&mut self, arches: I) -> &mut Self
        where
            I: IntoIterator<Item = S>,
            S: Into<String>,
        {
            self.header.gfx_arches = Some(arches.into_iter().map(Into::into).collect());
            self
        }

        /// Keys kept verbatim, checksums, group, family and arches as the
        /// archive an unpacked directory came from had them (rebuilding
        /// it: `kpack pack --input-dir`).
        pub fn like_unpacked(&mut self, m: &crate::UnpackManifest) -> &mut Self {
            self.normalize_keys(false);
            self.content_checksum(m.content_checksum());
            self.group_name(m.group_name.clone())
                .arch_family(m.gfx_arch_family.clone())
                .arches(m.gfx_arches.iter().cloned())
        }
    };
}

impl Header {
    fn arches<'s>(&'s self, toc: &'s TocBuilder) -> &'s [String] {
        self.gfx_arches.as_deref().unwrap_or(&toc.targets_seen)
    }

    fn family(&self, toc: &TocBuilder) -> String {
        match &self.gfx_arch_family {
            Some(f) => f.clone(),
            None => match self.arches(toc) {
                [one] => one.clone(),
                _ => String::new(),
            },
        }
    }
}

/// `key` as a writer stores it: with `\` made `/` when `normalize`.
fn stored_key(normalize: bool, key: &str) -> String {
    if normalize {
        normalize_key(key)
    } else {
        key.to_owned()
    }
}

enum SchemeTail {
    None(Vec<(u64, u64)>),
    Zstd { offset: u64, size: u64 },
}

fn encode_toc(header: &Header, toc: &TocBuilder, tail: &SchemeTail) -> Result<Vec<u8>> {
    let mut b = Vec::with_capacity(256 + toc.count as usize * 64);
    enc::map(
        &mut b,
        match tail {
            SchemeTail::None(_) => 7,
            SchemeTail::Zstd { .. } => 8,
        },
    )?;
    enc::str(&mut b, "format_version")?;
    enc::uint(&mut b, u64::from(VERSION))?;
    enc::str(&mut b, "group_name")?;
    enc::str(&mut b, &header.group_name)?;
    enc::str(&mut b, "gfx_arch_family")?;
    enc::str(&mut b, &header.family(toc))?;
    enc::str(&mut b, "gfx_arches")?;
    let arches = header.arches(toc);
    enc::array(&mut b, arches.len())?;
    for a in arches {
        enc::str(&mut b, a)?;
    }
    enc::str(&mut b, "toc")?;
    enc::map(&mut b, toc.binaries.len())?;
    for (key, entries) in &toc.binaries {
        enc::str(&mut b, key)?;
        enc::map(&mut b, entries.len())?;
        for (arch, e) in entries {
            enc::str(&mut b, arch)?;
            enc::map(&mut b, if e.metadata.is_some() { 4 } else { 3 })?;
            enc::str(&mut b, "type")?;
            enc::str(&mut b, KERNEL_TYPE_HSACO)?;
            enc::str(&mut b, "ordinal")?;
            enc::uint(&mut b, u64::from(e.ordinal))?;
            enc::str(&mut b, "original_size")?;
            enc::uint(&mut b, e.original_size)?;
            if let Some(m) = &e.metadata {
                enc::str(&mut b, "metadata")?;
                enc::value(&mut b, m)?;
            }
        }
    }
    enc::str(&mut b, "compression_scheme")?;
    match tail {
        SchemeTail::None(blobs) => {
            enc::str(&mut b, SCHEME_NONE)?;
            enc::str(&mut b, "blobs")?;
            enc::array(&mut b, blobs.len())?;
            for &(offset, size) in blobs {
                enc::map(&mut b, 2)?;
                enc::str(&mut b, "offset")?;
                enc::uint(&mut b, offset)?;
                enc::str(&mut b, "size")?;
                enc::uint(&mut b, size)?;
            }
        }
        SchemeTail::Zstd { offset, size } => {
            enc::str(&mut b, SCHEME_ZSTD)?;
            enc::str(&mut b, "zstd_offset")?;
            enc::uint(&mut b, *offset)?;
            enc::str(&mut b, "zstd_size")?;
            enc::uint(&mut b, *size)?;
        }
    }
    Ok(b)
}

/// What a finished archive looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteSummary {
    /// Number of kernels written.
    pub kernels: u32,
    /// Offset of the TOC (relative to the archive start).
    pub toc_offset: u64,
    /// Total archive length in bytes.
    pub total_size: u64,
}

/// Streaming writer: kernels go to `W` as they are added; only the TOC is
/// kept in memory. The archive starts at the position `W` has when
/// [`KpackStreamWriter::new`] is called.
pub struct KpackStreamWriter<W: Write + Seek> {
    w: W,
    start: u64,
    /// Bytes written so far, relative to `start`.
    pos: u64,
    compression: Compression,
    header: Header,
    toc: TocBuilder,
    blobs: Vec<(u64, u64)>,
    normalize: bool,
    checksum: bool,
}

impl<W: Write + Seek> KpackStreamWriter<W> {
    /// Write the header (with a zero `toc_offset`, patched by `finish`).
    pub fn new(mut w: W, compression: Compression) -> Result<Self> {
        let start = w.stream_position()?;
        let mut head = [0u8; BLOB_ALIGNMENT as usize];
        head[..4].copy_from_slice(&MAGIC);
        head[4..8].copy_from_slice(&VERSION.to_le_bytes());
        w.write_all(&head)?;
        let mut pos = BLOB_ALIGNMENT;
        if let Compression::Zstd { .. } = compression {
            // Frame count, patched in `finish`.
            w.write_all(&0u32.to_le_bytes())?;
            pos += 4;
        }
        Ok(KpackStreamWriter {
            w,
            start,
            pos,
            compression,
            header: Header::default(),
            toc: TocBuilder::default(),
            blobs: Vec::new(),
            normalize: true,
            checksum: true,
        })
    }

    /// Whether zstd frames compressed by `add*` carry a content checksum
    /// (default `true`; `false` reproduces rocm-kpack's Python writer byte
    /// for byte). Frames given to `add_frame` are written as they are.
    pub fn content_checksum(&mut self, on: bool) -> &mut Self {
        self.checksum = on;
        self
    }

    header_setters!();

    /// Whether `add*` replaces `\` with `/` in keys like the reference
    /// writer (default `true`); `false` writes keys verbatim.
    pub fn normalize_keys(&mut self, on: bool) -> &mut Self {
        self.normalize = on;
        self
    }

    fn key(&self, key: &str) -> String {
        stored_key(self.normalize, key)
    }

    /// For a kernel of `len` bytes added with the `none` scheme: its stored
    /// key (checked against the TOC) and where the blob region ends after
    /// it.
    fn next_plain(&self, key: &str, target: &str, len: u64) -> Result<(String, u64)> {
        let key = self.key(key);
        self.toc.check(&key, target)?;
        let end = self
            .pos
            .checked_add(len)
            .ok_or_else(|| Error::new(ErrorKind::Limit("archive larger than 2^64".into())))?;
        Ok((key, end))
    }

    /// Number of kernels added so far.
    pub fn len(&self) -> u32 {
        self.toc.count
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.toc.count == 0
    }

    /// Add one kernel (compressed here when the scheme is zstd). Returns its ordinal.
    pub fn add(&mut self, key: &str, target: &str, data: &[u8]) -> Result<u32> {
        self.add_with_metadata(key, target, data, None)
    }

    /// Add one kernel with an optional `metadata` map.
    pub fn add_with_metadata(
        &mut self,
        key: &str,
        target: &str,
        data: &[u8],
        metadata: Option<rmpv::Value>,
    ) -> Result<u32> {
        match self.compression {
            Compression::None => {
                let (key, end) = self.next_plain(key, target, data.len() as u64)?;
                self.w.write_all(data)?;
                self.blobs.push((self.pos, data.len() as u64));
                self.pos = end;
                Ok(self.toc.push(key, target, data.len() as u64, metadata))
            }
            Compression::Zstd { level } => {
                let frame = compress_frame_with(data, level, self.checksum)?;
                self.add_frame(key, target, data.len() as u64, &frame, metadata)
            }
        }
    }

    /// Add one kernel stored as `len` bytes of `src` at byte `offset`.
    ///
    /// With the `none` scheme the bytes go from file to file through
    /// `std::io::copy`, which uses `copy_file_range` when `W` is a `File`
    /// or a `BufWriter<File>`: code objects move from page cache to page
    /// cache without passing through this process's memory, so writing an
    /// archive of any size keeps a small, constant resident set. With zstd
    /// the bytes are read and compressed here: whole up to
    /// [`STREAM_THRESHOLD`], streaming ([`KpackStreamWriter::add_stream`],
    /// positioned reads) above it. `src`'s file position is not relied on
    /// (it is moved).
    pub fn add_file_range(
        &mut self,
        key: &str,
        target: &str,
        src: &fs::File,
        offset: u64,
        len: u64,
        metadata: Option<rmpv::Value>,
    ) -> Result<u32> {
        /// Below this size a read + write is cheaper than a copy syscall.
        const COPY_MIN: u64 = 4096;
        let read = |src: &fs::File| -> Result<Vec<u8>> {
            use std::os::unix::fs::FileExt;
            let n = usize::try_from(len)
                .map_err(|_| Error::new(ErrorKind::Limit(format!("{len}-byte code object"))))?;
            let mut buf = vec![0u8; n];
            src.read_exact_at(&mut buf, offset)?;
            Ok(buf)
        };
        if let Compression::Zstd { .. } = self.compression {
            if len > STREAM_THRESHOLD {
                let mut r = crate::io::FileRange {
                    file: src,
                    offset,
                    left: len,
                };
                return self.add_stream(key, target, &mut r, len, metadata);
            }
        }
        if !matches!(self.compression, Compression::None) || len < COPY_MIN {
            let data = read(src)?;
            return self.add_with_metadata(key, target, &data, metadata);
        }
        let (key, end) = self.next_plain(key, target, len)?;
        let mut r = src;
        r.seek(SeekFrom::Start(offset))?;
        let copied = std::io::copy(&mut Read::take(r, len), &mut self.w)?;
        if copied != len {
            return Err(Error::from(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("source shrank: copied {copied} of {len} bytes from offset {offset}"),
            )));
        }
        self.blobs.push((self.pos, len));
        self.pos = end;
        Ok(self.toc.push(key, target, len, metadata))
    }

    /// Add one kernel of `len` bytes read from `src`, never held whole:
    /// with zstd it is compressed streaming ([`compress_stream`]) straight
    /// into the archive (a 4-byte size placeholder is written first and
    /// patched once the frame's length is known; a frame of 4 GiB or more
    /// is refused, as by [`KpackStreamWriter::add_frame`]); with `none` the
    /// bytes are copied. `src` ending early is an error. After an error the
    /// archive is incomplete and must be discarded.
    pub fn add_stream(
        &mut self,
        key: &str,
        target: &str,
        src: &mut dyn Read,
        len: u64,
        metadata: Option<rmpv::Value>,
    ) -> Result<u32> {
        let level = match self.compression {
            Compression::None => {
                let (key, end) = self.next_plain(key, target, len)?;
                let copied = std::io::copy(&mut Read::take(src, len), &mut self.w)?;
                if copied != len {
                    return Err(Error::from(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the input ended after {copied} of {len} bytes"),
                    )));
                }
                self.blobs.push((self.pos, len));
                self.pos = end;
                return Ok(self.toc.push(key, target, len, metadata));
            }
            Compression::Zstd { level } => level,
        };
        let key = self.key(key);
        self.toc.check(&key, target)?;
        if u64::from(self.toc.count) >= ZSTD_MAX_KERNELS {
            return Err(Error::new(ErrorKind::Limit(format!(
                "zstd-per-kernel archives hold at most {ZSTD_MAX_KERNELS} kernels (runtime limit)"
            ))));
        }
        let at = self.start + self.pos;
        self.w.write_all(&0u32.to_le_bytes())?;
        let n = compress_stream(src, len, &mut self.w, level, self.checksum)?;
        let size = u32::try_from(n).map_err(|_| {
            Error::new(ErrorKind::Limit(format!(
                "zstd frame of {n} bytes does not fit the u32 size prefix"
            )))
        })?;
        let end = self.w.stream_position()?;
        self.w.seek(SeekFrom::Start(at))?;
        self.w.write_all(&size.to_le_bytes())?;
        self.w.seek(SeekFrom::Start(end))?;
        self.pos = self
            .pos
            .checked_add(4 + n)
            .ok_or_else(|| Error::new(ErrorKind::Limit("archive larger than 2^64".into())))?;
        Ok(self.toc.push(key, target, len, metadata))
    }

    /// Reserve the place of one kernel of `len` bytes (`none` scheme only)
    /// without writing it: the archive's next `len` bytes are left for the
    /// caller to fill, e.g. from several threads at once with positioned
    /// writes while code objects are decoded. Returns the ordinal and the
    /// absolute offset in `W` where the kernel's bytes go. The caller must
    /// write all `len` bytes before the archive is used (the place reads as
    /// zeros until then); the writer moves past it.
    pub fn add_placed(
        &mut self,
        key: &str,
        target: &str,
        len: u64,
        metadata: Option<rmpv::Value>,
    ) -> Result<(u32, u64)> {
        if !matches!(self.compression, Compression::None) {
            return Err(Error::new(ErrorKind::Limit(
                "add_placed needs the uncompressed scheme".into(),
            )));
        }
        let (key, end) = self.next_plain(key, target, len)?;
        let at = self.start + self.pos;
        let step = i64::try_from(len)
            .map_err(|_| Error::new(ErrorKind::Limit(format!("{len}-byte code object"))))?;
        self.w.seek(SeekFrom::Current(step))?;
        self.blobs.push((self.pos, len));
        self.pos = end;
        Ok((self.toc.push(key, target, len, metadata), at))
    }

    /// Replace the `metadata` of the kernel with ordinal `ordinal` (added
    /// earlier), e.g. once the bytes of an [`KpackStreamWriter::add_placed`]
    /// kernel have been decoded and what they say is known.
    pub fn set_metadata(&mut self, ordinal: u32, metadata: Option<rmpv::Value>) -> Result<()> {
        let entry = self.toc.entry_mut(ordinal).ok_or_else(|| {
            Error::new(ErrorKind::Limit(format!(
                "no kernel with ordinal {ordinal}"
            )))
        })?;
        entry.metadata = metadata;
        Ok(())
    }

    /// Add a kernel that is already one zstd frame of `original_size` bytes
    /// (zstd scheme only), e.g. compressed on another thread with
    /// [`compress_frame`].
    pub fn add_frame(
        &mut self,
        key: &str,
        target: &str,
        original_size: u64,
        frame: &[u8],
        metadata: Option<rmpv::Value>,
    ) -> Result<u32> {
        if !matches!(self.compression, Compression::Zstd { .. }) {
            return Err(Error::new(ErrorKind::Limit(
                "add_frame needs the zstd-per-kernel scheme".into(),
            )));
        }
        let key = self.key(key);
        self.toc.check(&key, target)?;
        if u64::from(self.toc.count) >= ZSTD_MAX_KERNELS {
            return Err(Error::new(ErrorKind::Limit(format!(
                "zstd-per-kernel archives hold at most {ZSTD_MAX_KERNELS} kernels (runtime limit)"
            ))));
        }
        let size = u32::try_from(frame.len()).map_err(|_| {
            Error::new(ErrorKind::Limit(format!(
                "zstd frame of {} bytes does not fit the u32 size prefix",
                frame.len()
            )))
        })?;
        self.w.write_all(&size.to_le_bytes())?;
        self.w.write_all(frame)?;
        self.pos = self
            .pos
            .checked_add(4 + frame.len() as u64)
            .ok_or_else(|| Error::new(ErrorKind::Limit("archive larger than 2^64".into())))?;
        Ok(self.toc.push(key, target, original_size, metadata))
    }

    /// Add a kernel whose zstd frame was made by [`frame_of_file_range`]
    /// (zstd scheme only): an in-memory frame as [`KpackStreamWriter::add_frame`]
    /// does, a spilled one copied from its file (never held whole).
    pub fn add_stored_frame(
        &mut self,
        key: &str,
        target: &str,
        original_size: u64,
        frame: &StoredFrame,
        metadata: Option<rmpv::Value>,
    ) -> Result<u32> {
        let (file, offset, len) = match frame {
            StoredFrame::Mem(v) => return self.add_frame(key, target, original_size, v, metadata),
            StoredFrame::Spilled { file, offset, len } => (file, *offset, *len),
        };
        if !matches!(self.compression, Compression::Zstd { .. }) {
            return Err(Error::new(ErrorKind::Limit(
                "add_stored_frame needs the zstd-per-kernel scheme".into(),
            )));
        }
        let key = self.key(key);
        self.toc.check(&key, target)?;
        if u64::from(self.toc.count) >= ZSTD_MAX_KERNELS {
            return Err(Error::new(ErrorKind::Limit(format!(
                "zstd-per-kernel archives hold at most {ZSTD_MAX_KERNELS} kernels (runtime limit)"
            ))));
        }
        let size = u32::try_from(len).map_err(|_| {
            Error::new(ErrorKind::Limit(format!(
                "zstd frame of {len} bytes does not fit the u32 size prefix"
            )))
        })?;
        self.w.write_all(&size.to_le_bytes())?;
        let mut r = crate::io::FileRange {
            file,
            offset,
            left: len,
        };
        let copied = std::io::copy(&mut r, &mut self.w)?;
        if copied != len {
            return Err(Error::from(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("spilled frame: copied {copied} of {len} bytes"),
            )));
        }
        self.pos = self
            .pos
            .checked_add(4 + len)
            .ok_or_else(|| Error::new(ErrorKind::Limit("archive larger than 2^64".into())))?;
        Ok(self.toc.push(key, target, original_size, metadata))
    }

    /// Add code objects stored in files, in order (`inputs`: key, target,
    /// file, offset, length, metadata), with memory bounded whatever their
    /// sizes: `none` copies file to file; zstd compresses up to
    /// [`BATCH_BYTES`] of code objects at a time on the rayon pool (one
    /// frame each, [`frame_of_file_range`]: code objects above
    /// [`STREAM_THRESHOLD`] are streamed into unlinked temporary files in
    /// `spill_dir`, at most one per thread at a time) and writes the frames
    /// in order. The output does not depend on the number of threads.
    pub fn add_file_ranges(&mut self, inputs: Vec<FileInput<'_>>, spill_dir: &Path) -> Result<()> {
        use rayon::prelude::*;
        let Compression::Zstd { level } = self.compression else {
            for it in inputs {
                self.add_file_range(&it.key, &it.target, it.file, it.offset, it.len, it.metadata)?;
            }
            return Ok(());
        };
        let checksum = self.checksum;
        // A streamed code object holds a few MiB (zstd's window and
        // tables, the read and write buffers), not its size.
        let cost = |it: &FileInput<'_>| {
            if it.len > STREAM_THRESHOLD {
                8 << 20
            } else {
                it.len.max(1)
            }
        };
        // At most one streamed code object per thread in a batch: their
        // frames wait on disk until written (temporary space: a few frames).
        let threads = rayon::current_num_threads().max(1);
        let mut i = 0;
        while i < inputs.len() {
            let mut j = i;
            let (mut bytes, mut streamed) = (0u64, 0usize);
            while j < inputs.len() && (j == i || (bytes < BATCH_BYTES as u64 && streamed < threads))
            {
                let len = inputs.get(j).map_or(0, |it| it.len);
                bytes = bytes.saturating_add(inputs.get(j).map_or(0, cost));
                streamed += usize::from(len > STREAM_THRESHOLD);
                j += 1;
            }
            let batch = inputs.get(i..j).unwrap_or(&[]);
            let frames: Vec<Result<StoredFrame>> = batch
                .par_iter()
                .map(|it| {
                    frame_of_file_range(it.file, it.offset, it.len, level, checksum, spill_dir)
                        .map_err(|e| match it.path {
                            Some(p) => e.with_path(p),
                            None => e,
                        })
                })
                .collect();
            for (it, f) in batch.iter().zip(frames) {
                let f = f?;
                self.add_stored_frame(&it.key, &it.target, it.len, &f, it.metadata.clone())?;
            }
            i = j;
        }
        Ok(())
    }

    /// Write the TOC, patch the header, and return the writer (positioned at
    /// the end of the archive) with a summary.
    pub fn finish(mut self) -> Result<(W, WriteSummary)> {
        let toc_offset = self.pos;
        let tail = match self.compression {
            Compression::None => SchemeTail::None(std::mem::take(&mut self.blobs)),
            Compression::Zstd { .. } => SchemeTail::Zstd {
                offset: BLOB_ALIGNMENT,
                size: toc_offset - BLOB_ALIGNMENT,
            },
        };
        let toc = encode_toc(&self.header, &self.toc, &tail)?;
        self.w.write_all(&toc)?;
        let end = toc_offset + toc.len() as u64;
        self.w.seek(SeekFrom::Start(self.start + 8))?;
        self.w.write_all(&toc_offset.to_le_bytes())?;
        if let SchemeTail::Zstd { .. } = tail {
            self.w.seek(SeekFrom::Start(self.start + BLOB_ALIGNMENT))?;
            self.w.write_all(&self.toc.count.to_le_bytes())?;
        }
        self.w.seek(SeekFrom::Start(self.start + end))?;
        self.w.flush()?;
        debug_assert!(toc_offset >= HEADER_SIZE);
        Ok((
            self.w,
            WriteSummary {
                kernels: self.toc.count,
                toc_offset,
                total_size: end,
            },
        ))
    }
}

struct Pending<'a> {
    key: String,
    target: String,
    data: Cow<'a, [u8]>,
    metadata: Option<rmpv::Value>,
}

/// In-memory archive builder: `add` kernels (borrowed or owned), then write.
///
/// ```
/// use rocpack_kpack::{Compression, KpackReader, KpackWriter};
/// let mut w = KpackWriter::new(Compression::None);
/// w.group_name("test").arch_family("gfx900").arches(["gfx900"]);
/// w.add("lib/libx.so#0", "gfx900", b"code".as_slice()).unwrap();
/// let bytes = w.to_vec().unwrap();
/// let r = KpackReader::from_bytes(&bytes).unwrap();
/// assert_eq!(&*r.get("lib/libx.so#0", "gfx900").unwrap(), b"code");
/// ```
pub struct KpackWriter<'a> {
    compression: Compression,
    header: Header,
    seen: HashMap<(String, String), ()>,
    kernels: Vec<Pending<'a>>,
    normalize: bool,
    checksum: bool,
}

/// Input bytes compressed per parallel batch (bounds the frames held at once).
pub const BATCH_BYTES: usize = 64 << 20;

impl<'a> KpackWriter<'a> {
    /// An empty archive using `compression`.
    pub fn new(compression: Compression) -> Self {
        KpackWriter {
            compression,
            header: Header::default(),
            seen: HashMap::new(),
            kernels: Vec::new(),
            normalize: true,
            checksum: true,
        }
    }

    /// Whether zstd frames carry a content checksum (default `true`; see
    /// [`KpackStreamWriter::content_checksum`]).
    pub fn content_checksum(&mut self, on: bool) -> &mut Self {
        self.checksum = on;
        self
    }

    /// Whether `add*` replaces `\` with `/` in keys like the reference
    /// writer (default `true`); `false` keeps keys verbatim (used when
    /// rewriting an existing archive).
    pub fn normalize_keys(&mut self, on: bool) -> &mut Self {
        self.normalize = on;
        self
    }

    /// The compression this writer uses.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    header_setters!();

    /// Number of kernels added.
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// Add a kernel under TOC key `key` (`<kernel_name>#<co_index>`, see
    /// [`crate::toc_key`]) and arch `target`. Returns its ordinal.
    pub fn add(&mut self, key: &str, target: &str, data: impl Into<Cow<'a, [u8]>>) -> Result<u32> {
        self.add_with_metadata(key, target, data, None)
    }

    /// Add a kernel with an optional `metadata` map (written after
    /// `original_size`, as the reference does).
    pub fn add_with_metadata(
        &mut self,
        key: &str,
        target: &str,
        data: impl Into<Cow<'a, [u8]>>,
        metadata: Option<rmpv::Value>,
    ) -> Result<u32> {
        let key = stored_key(self.normalize, key);
        let id = (key, target.to_owned());
        if self.seen.contains_key(&id) {
            return Err(Error::new(ErrorKind::Duplicate {
                key: id.0,
                target: id.1,
            }));
        }
        let ordinal = u32::try_from(self.kernels.len())
            .map_err(|_| Error::new(ErrorKind::Limit("more than 2^32-1 kernels".into())))?;
        self.seen.insert(id.clone(), ());
        self.kernels.push(Pending {
            key: id.0,
            target: id.1,
            data: data.into(),
            metadata,
        });
        Ok(ordinal)
    }

    /// Write the archive to `w` (which may already hold data before it: the
    /// archive starts at `w`'s current position).
    pub fn write_to<W: Write + Seek>(&self, w: W) -> Result<(W, WriteSummary)> {
        let mut s = KpackStreamWriter::new(w, self.compression)?;
        s.header = self.header.clone();
        // Keys were normalised (or not) when added.
        s.normalize = false;
        match self.compression {
            Compression::None => {
                for k in &self.kernels {
                    s.add_with_metadata(&k.key, &k.target, &k.data, k.metadata.clone())?;
                }
            }
            Compression::Zstd { level } => {
                let mut i = 0;
                while i < self.kernels.len() {
                    // Batch by input size so memory stays bounded; compress the
                    // batch in parallel, write it in ordinal order.
                    let mut j = i;
                    let mut bytes = 0usize;
                    while j < self.kernels.len() && (j == i || bytes < BATCH_BYTES) {
                        bytes =
                            bytes.saturating_add(self.kernels.get(j).map_or(0, |k| k.data.len()));
                        j += 1;
                    }
                    let batch = self.kernels.get(i..j).unwrap_or(&[]);
                    let frames: Vec<Result<Vec<u8>>> = batch
                        .par_iter()
                        .map(|k| compress_frame_with(&k.data, level, self.checksum))
                        .collect();
                    for (k, f) in batch.iter().zip(frames) {
                        let f = f?;
                        s.add_frame(
                            &k.key,
                            &k.target,
                            k.data.len() as u64,
                            &f,
                            k.metadata.clone(),
                        )?;
                    }
                    i = j;
                }
            }
        }
        s.finish()
    }

    /// The archive as bytes.
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        let (c, _) = self.write_to(std::io::Cursor::new(Vec::new()))?;
        Ok(c.into_inner())
    }

    /// Write the archive to `path` atomically: a temporary file in the same
    /// directory is written, synced and renamed, so no partial archive is
    /// ever visible at `path`.
    pub fn write_to_path(&self, path: impl AsRef<Path>) -> Result<WriteSummary> {
        let path = path.as_ref();
        write_atomically(path, |f| self.write_to(BufWriter::new(f)).map(|(_, s)| s))
    }
}

/// Create `path` through a [`PendingFile`] in its directory, committed
/// into place when `body` succeeds.
pub(crate) fn write_atomically<T>(
    path: &Path,
    body: impl FnOnce(&mut fs::File) -> Result<T>,
) -> Result<T> {
    let mut tmp = PendingFile::new(path).map_err(|e| Error::from(e).with_path(path))?;
    let out = body(tmp.file_mut()).map_err(|e| e.with_path(path))?;
    tmp.commit(path)
        .map_err(|e| Error::from(e).with_path(path))?;
    Ok(out)
}

/// A [`KpackStreamWriter`] onto a [`PendingFile`] for `path` (on Linux an
/// unnamed `O_TMPFILE`), put at `path` by [`KpackFileWriter::finish`];
/// dropped unfinished, or killed, it leaves nothing behind. Use it to write
/// big archives without holding them.
pub struct KpackFileWriter {
    path: std::path::PathBuf,
    inner: KpackStreamWriter<BufWriter<PendingFile>>,
}

impl KpackFileWriter {
    /// Start writing the archive that will appear at `path`.
    pub fn create(path: impl AsRef<Path>, compression: Compression) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let tmp = PendingFile::new(&path).map_err(|e| Error::from(e).with_path(&path))?;
        let inner = KpackStreamWriter::new(BufWriter::with_capacity(1 << 20, tmp), compression)
            .map_err(|e| e.with_path(&path))?;
        Ok(KpackFileWriter { path, inner })
    }

    /// The underlying stream writer (set group/family/arches, add kernels).
    pub fn writer(&mut self) -> &mut KpackStreamWriter<BufWriter<PendingFile>> {
        &mut self.inner
    }

    /// Write the TOC, sync, and put the archive at its path.
    pub fn finish(self) -> Result<WriteSummary> {
        let path = self.path;
        let (buf, summary) = self.inner.finish().map_err(|e| e.with_path(&path))?;
        let tmp = buf
            .into_inner()
            .map_err(|e| Error::from(e.into_error()).with_path(&path))?;
        tmp.commit(&path)
            .map_err(|e| Error::from(e).with_path(&path))?;
        Ok(summary)
    }
}
