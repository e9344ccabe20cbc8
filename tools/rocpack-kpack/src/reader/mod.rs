//! Strict, total KPAK v1 reader.
//!
//! `open` memory-maps the file and validates the header and the whole TOC
//! (every field and type, every `none` blob range, that ordinals form a
//! permutation of the blob list, and that sizes agree) but reads no kernel
//! bytes: the zstd frame index is built lazily. A zstd frame's size prefix,
//! bounds, frame and block headers, content size and expansion ratio are
//! checked, just as strictly, the first time its kernel is looked up
//! ([`KpackReader::blob_location`], [`KpackReader::get_entry`]); a damaged
//! frame is an error of that lookup, and a checked frame is remembered
//! (per-frame `OnceLock`, so readers are shared across threads without a
//! lock). `from_bytes`, `from_vec` and `from_shared_map` check every frame
//! up front. Kernels of scheme `none` are
//! returned as slices of the mapping (no copy); zstd frames are decoded
//! straight from the mapping, one decoder per call (no lock, no whole-blob
//! copy), with allocations bounded by the real decoded size.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    BlobLocation, Compression, KernelEntry, Scheme, BLOB_ALIGNMENT, HEADER_SIZE, MAGIC,
    SCHEME_NONE, SCHEME_ZSTD, VERSION, ZSTD_MAX_RATIO,
};
use crate::msgpack::{q, Cursor};
use crate::writer::KpackWriter;

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
    /// A range of a mapping shared with the caller (no copy).
    Shared(std::sync::Arc<memmap2::Mmap>, std::ops::Range<usize>),
    /// An open file read with `pread`, never mapped
    /// ([`KpackReader::open_file`]): a file truncated under the reader is a
    /// read error, never `SIGBUS`.
    File(FileSrc),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
            Backing::Shared(m, r) => &m[r.clone()],
            Backing::File(_) => &[],
        }
    }

    fn src(&self) -> Src<'_> {
        match self {
            Backing::File(f) => Src::File(f),
            _ => Src::Mem(self.bytes()),
        }
    }
}

/// Random access to an archive's bytes: a slice (mapping or memory) or an
/// open file read with `pread`.
#[derive(Clone, Copy)]
enum Src<'a> {
    Mem(&'a [u8]),
    File(&'a FileSrc),
}

impl<'a> Src<'a> {
    /// Total length.
    fn len(self) -> u64 {
        match self {
            Src::Mem(m) => m.len() as u64,
            Src::File(f) => f.stamp.len,
        }
    }

    /// `len` bytes at `off`; a range past the end is `Truncated`, a file
    /// that became shorter under the reader an I/O error.
    fn read_at(self, off: u64, len: u64, what: &'static str) -> Result<Cow<'a, [u8]>> {
        match self {
            Src::Mem(m) => usize::try_from(off)
                .ok()
                .zip(usize::try_from(len).ok())
                .and_then(|(a, n)| m.get(a..a.checked_add(n)?))
                .map(Cow::Borrowed)
                .ok_or_else(|| past_end(off, len, self.len(), what)),
            Src::File(f) => {
                let total = f.stamp.len;
                let n = usize::try_from(len).map_err(|_| past_end(off, len, total, what))?;
                if off.checked_add(len).is_none_or(|end| end > total) {
                    return Err(past_end(off, len, total, what));
                }
                let mut v = vec![0u8; n];
                f.read_into(off, &mut v)?;
                Ok(Cow::Owned(v))
            }
        }
    }
}

fn past_end(off: u64, len: u64, total: u64, what: &'static str) -> Error {
    Error::at(
        off,
        ErrorKind::Truncated {
            what,
            needed: len,
            available: total.saturating_sub(off),
        },
    )
}

/// What identifies the contents of an open file: a change of any of these
/// after the archive was opened means it was written to (truncated or
/// rewritten in place). Not the change time: unlinking or renaming over
/// the file changes it, and the reader keeps serving a replaced file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

impl FileStamp {
    fn of(meta: &fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// An archive file read with `pread` (see [`Backing::File`]).
struct FileSrc {
    file: fs::File,
    stamp: FileStamp,
}

impl FileSrc {
    fn read_into(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let len = buf.len() as u64;
        if off.checked_add(len).is_none_or(|end| end > self.stamp.len) {
            return Err(past_end(off, len, self.stamp.len, "archive bytes"));
        }
        self.file.read_exact_at(buf, off).map_err(|e| {
            let e = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the archive became shorter after it was opened",
                )
            } else {
                e
            };
            Error::at(off, ErrorKind::Io(e))
        })
    }
}

/// The parsed, validated TOC of an archive.
#[derive(Clone, Debug)]
struct Parsed {
    toc_offset: u64,
    format_version: u64,
    group_name: String,
    gfx_arch_family: String,
    gfx_arches: Vec<String>,
    scheme: Scheme,
    entries: Vec<KernelEntry>,
    /// Stored bytes per ordinal of a `none` archive (empty for zstd).
    blobs: Vec<BlobLocation>,
    zstd_region: Option<BlobLocation>,
    /// The lazily checked frame index of a zstd archive.
    zstd: Option<ZstdIndex>,
    index: HashMap<String, HashMap<String, usize>>,
}

/// Frames of the zstd blob (u32 count, then u32 size + frame per ordinal),
/// located and checked on first use.
#[derive(Clone, Debug)]
struct ZstdIndex {
    /// Offset of the frame count (the zstd blob start).
    zoff: u64,
    /// End of the zstd blob.
    zend: u64,
    /// Per ordinal: the frame's location once its size prefix was read and
    /// bounds-checked (needs every earlier prefix; walked forward from the
    /// nearest located predecessor).
    located: Vec<OnceLock<BlobLocation>>,
    /// Per ordinal: the location once the frame itself was checked against
    /// its TOC entry.
    checked: Vec<OnceLock<BlobLocation>>,
    /// Per ordinal: index of its entry and offset of its `ordinal` field.
    entry_of: Vec<(usize, u64)>,
}

/// A read-only `.kpack` archive.
pub struct KpackReader {
    backing: Backing,
    path: Option<PathBuf>,
    p: Parsed,
}

impl std::fmt::Debug for KpackReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KpackReader")
            .field("path", &self.path)
            .field("scheme", &self.p.scheme)
            .field("group_name", &self.p.group_name)
            .field("gfx_arches", &self.p.gfx_arches)
            .field("kernels", &self.p.entries.len())
            .finish()
    }
}

impl KpackReader {
    /// Memory-map and validate the archive at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (file, meta) = open_regular(path)?;
        let len = meta.len();
        let backing = if len < BLOB_ALIGNMENT {
            // Too small to be valid; read it so the parser reports why.
            let mut v = Vec::new();
            (&file)
                .take(BLOB_ALIGNMENT)
                .read_to_end(&mut v)
                .map_err(|e| Error::from(e).with_path(path))?;
            Backing::Owned(v)
        } else {
            #[allow(unsafe_code)]
            // SAFETY: the mapping is read-only and private to this reader. The
            // only hazard is another process truncating or rewriting the file
            // while it is mapped; archives are immutable build outputs (our
            // writers replace files by rename, never in place), which is the
            // usual contract for memory-mapped readers.
            let map =
                unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::from(e).with_path(path))?;
            Backing::Mmap(map)
        };
        if let Backing::Mmap(m) = &backing {
            // Parsing reads the header and the TOC only: no read-around of
            // kernel bytes for the header fault, the TOC read ahead as one
            // request. Advice only; errors are irrelevant.
            let _ = m.advise(memmap2::Advice::Random);
            if let Ok(toc) = read_u64(m, 8, "toc_offset") {
                if let Some(n) = (m.len() as u64).checked_sub(toc) {
                    let _ = m.advise_range(memmap2::Advice::WillNeed, toc as usize, n as usize);
                }
            }
        }
        let p = parse(Src::Mem(backing.bytes())).map_err(|e| e.with_path(path))?;
        if let Backing::Mmap(m) = &backing {
            let _ = m.advise(memmap2::Advice::Normal);
            if let Some(z) = p.zstd_region {
                // Locating a frame reads the 4-byte size prefixes before
                // it; with read-around, each would fault in a window of
                // the neighbouring frames. A frame is prefetched whole
                // (`WillNeed`) when its kernel is looked up.
                let (a, n) = (z.offset as usize, z.size as usize);
                let _ = m.advise_range(memmap2::Advice::Random, a, n);
            }
        }
        Ok(KpackReader {
            backing,
            path: Some(path.to_path_buf()),
            p,
        })
    }

    /// Open and validate the archive at `path` without mapping it: the
    /// header and the TOC are read with `pread` into memory, kernels and
    /// zstd size prefixes with `pread` when looked up. The reader keeps the
    /// file open, so it serves the file it opened whatever later happens
    /// to the path (replaced by rename, deleted); a file truncated under it
    /// makes reads fail (an error, never `SIGBUS`), and
    /// [`KpackReader::check_unchanged`] tells whether it was rewritten in
    /// place. [`KpackReader::bytes`] is empty for such a reader. This is
    /// how the runtime library and the [`crate::Loader`] open archives.
    pub fn open_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (file, meta) = open_regular(path)?;
        let src = FileSrc {
            file,
            stamp: FileStamp::of(&meta),
        };
        let p = parse(Src::File(&src)).map_err(|e| e.with_path(path))?;
        Ok(KpackReader {
            backing: Backing::File(src),
            path: Some(path.to_path_buf()),
            p,
        })
    }

    /// For a reader from [`KpackReader::open_file`]: an error when the
    /// file it holds open is no longer the file it opened (its size or
    /// modification time differ: rewritten or truncated in place), so bytes read from it may mix two versions. One `fstat`.
    /// Other readers: always `Ok`.
    pub fn check_unchanged(&self) -> Result<()> {
        let Backing::File(f) = &self.backing else {
            return Ok(());
        };
        let now = f
            .file
            .metadata()
            .map_err(|e| Error::from(e).with_path_opt(self.path.as_deref()))?;
        if FileStamp::of(&now) == f.stamp {
            return Ok(());
        }
        Err(Error::from(std::io::Error::other(
            "the archive was modified in place after it was opened",
        ))
        .with_path_opt(self.path.as_deref()))
    }

    /// Copy `buf.len()` stored bytes at absolute offset `off` into `buf`
    /// (`pread` for a reader from [`KpackReader::open_file`], a copy from
    /// memory otherwise); bounded by the file size seen at open.
    pub fn read_exact_at(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        match &self.backing {
            Backing::File(f) => f.read_into(off, buf),
            b => {
                let src = Src::Mem(b.bytes()).read_at(off, buf.len() as u64, "archive bytes")?;
                buf.copy_from_slice(&src);
                Ok(())
            }
        }
        .map_err(|e| e.with_path_opt(self.path.as_deref()))
    }

    /// The stored zstd frame of `ordinal` read into `buf` (replacing its
    /// contents), located and checked as [`KpackReader::checked_location`]
    /// does but reading the frame once: the runtime's lookup path.
    pub fn read_frame_into(&self, ordinal: u32, buf: &mut Vec<u8>) -> Result<BlobLocation> {
        let i = ordinal as usize;
        let r = (|| -> Result<BlobLocation> {
            let z = self
                .p
                .zstd
                .as_ref()
                .filter(|z| i < z.checked.len())
                .ok_or_else(|| {
                    Error::new(ErrorKind::Invalid {
                        field: "ordinal".into(),
                        message: format!("{ordinal} is not a zstd frame of this archive"),
                    })
                })?;
            let src = self.backing.src();
            let loc = zstd_locate(src, z, i)?;
            let n = usize::try_from(loc.size)
                .map_err(|_| past_end(loc.offset, loc.size, 0, "zstd frame"))?;
            buf.clear();
            buf.resize(n, 0);
            match &self.backing {
                Backing::File(f) => f.read_into(loc.offset, buf)?,
                b => buf.copy_from_slice(&Src::Mem(b.bytes()).read_at(
                    loc.offset,
                    loc.size,
                    "zstd frame",
                )?),
            }
            if z.checked.get(i).and_then(OnceLock::get).is_none() {
                check_frame(buf, &self.p, z, i, loc)?;
            }
            Ok(loc)
        })();
        r.map_err(|e: Error| e.with_path_opt(self.path.as_deref()))
    }

    /// Validate the archive at `range` of a mapping the caller shares (an
    /// archive member, a file already mapped): nothing is copied.
    pub fn from_shared_map(
        map: std::sync::Arc<memmap2::Mmap>,
        range: std::ops::Range<usize>,
    ) -> Result<Self> {
        if map.get(range.clone()).is_none() {
            return Err(Error::at(
                range.start as u64,
                ErrorKind::Truncated {
                    what: "archive range of the mapping",
                    needed: range.len() as u64,
                    available: map.len().saturating_sub(range.start) as u64,
                },
            ));
        }
        let p = parse(Src::Mem(&map[range.clone()]))?;
        let r = KpackReader {
            backing: Backing::Shared(map, range),
            path: None,
            p,
        };
        r.check_frames()?;
        Ok(r)
    }

    /// Validate an archive held in memory (the bytes are copied).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::from_vec(bytes.to_vec())
    }

    /// Validate an archive held in memory, taking ownership.
    pub fn from_vec(bytes: Vec<u8>) -> Result<Self> {
        let p = parse(Src::Mem(&bytes))?;
        let r = KpackReader {
            backing: Backing::Owned(bytes),
            path: None,
            p,
        };
        r.check_frames()?;
        Ok(r)
    }

    /// The file this archive was opened from.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The whole archive.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// `format_version` from the TOC (always 1).
    pub fn format_version(&self) -> u64 {
        self.p.format_version
    }

    /// `group_name` (the splitter writes the artifact prefix).
    pub fn group_name(&self) -> &str {
        &self.p.group_name
    }

    /// `gfx_arch_family` (a family like `gfx110X` or a single arch).
    pub fn gfx_arch_family(&self) -> &str {
        &self.p.gfx_arch_family
    }

    /// `gfx_arches`: what the runtime's loader believes this archive holds.
    pub fn gfx_arches(&self) -> &[String] {
        &self.p.gfx_arches
    }

    /// The arch of a single-arch archive (split output), else `None`.
    pub fn arch(&self) -> Option<&str> {
        match self.p.gfx_arches.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }

    /// The compression scheme.
    pub fn scheme(&self) -> Scheme {
        self.p.scheme
    }

    /// Absolute offset of the TOC.
    pub fn toc_offset(&self) -> u64 {
        self.p.toc_offset
    }

    /// `(zstd_offset, zstd_size)` for zstd archives.
    pub fn zstd_region(&self) -> Option<BlobLocation> {
        self.p.zstd_region
    }

    /// All entries in TOC order (binaries in file order, arches per binary).
    pub fn entries(&self) -> &[KernelEntry] {
        &self.p.entries
    }

    /// `(binary key, arch)` of every kernel, in TOC order.
    pub fn kernels(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.p
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.target.as_str()))
    }

    /// Binary keys in TOC order.
    pub fn binary_keys(&self) -> impl Iterator<Item = &str> + '_ {
        let mut last: Option<&str> = None;
        self.p.entries.iter().filter_map(move |e| {
            if last == Some(e.key.as_str()) {
                None
            } else {
                last = Some(e.key.as_str());
                Some(e.key.as_str())
            }
        })
    }

    /// Number of kernels.
    pub fn len(&self) -> usize {
        self.p.entries.len()
    }

    /// True for an archive without kernels.
    pub fn is_empty(&self) -> bool {
        self.p.entries.is_empty()
    }

    /// The entry for `(key, target)`.
    pub fn entry(&self, key: &str, target: &str) -> Option<&KernelEntry> {
        let i = *self.p.index.get(key)?.get(target)?;
        self.p.entries.get(i)
    }

    /// Entries sorted by ordinal (the order the reference writer added them;
    /// re-adding in this order reproduces the archive).
    pub fn entries_by_ordinal(&self) -> Vec<&KernelEntry> {
        let mut v: Vec<&KernelEntry> = self.p.entries.iter().collect();
        v.sort_by_key(|e| e.ordinal);
        v
    }

    /// Where the stored bytes of `ordinal` are (raw kernel or zstd frame);
    /// `None` for an unknown ordinal or a damaged zstd frame (see
    /// [`KpackReader::checked_location`] for the error).
    pub fn blob_location(&self, ordinal: u32) -> Option<BlobLocation> {
        self.checked_location(ordinal).ok()
    }

    /// Where the stored bytes of `ordinal` are. A zstd frame is located and
    /// checked (size prefix, bounds, frame length, content size and ratio
    /// against its TOC entry) on the first call; the error names what is
    /// damaged and where.
    pub fn checked_location(&self, ordinal: u32) -> Result<BlobLocation> {
        let i = ordinal as usize;
        let unknown = || {
            Error::new(ErrorKind::Invalid {
                field: "ordinal".into(),
                message: format!("{ordinal} is not an ordinal of this archive"),
            })
        };
        let r = match &self.p.zstd {
            None => self.p.blobs.get(i).copied().ok_or_else(unknown),
            Some(z) if i < z.checked.len() => {
                let loc = zstd_locate(self.backing.src(), z, i);
                if let (Backing::Mmap(m), Ok(l)) = (&self.backing, &loc) {
                    // Read the frame ahead as one request (the zstd blob is
                    // advised `Random`); advice only, errors are irrelevant.
                    let _ = m.advise_range(
                        memmap2::Advice::WillNeed,
                        l.offset as usize,
                        l.size as usize,
                    );
                }
                loc.and_then(|_| zstd_frame(self.backing.src(), &self.p, z, i))
            }
            Some(_) => Err(unknown()),
        };
        r.map_err(|e| e.with_path_opt(self.path.as_deref()))
    }

    /// Check every zstd frame now (what `open` leaves to the lookups):
    /// size prefixes, bounds, frame lengths, content sizes and ratios, and
    /// that the frames fill the zstd blob exactly. Does not decode.
    pub fn check_frames(&self) -> Result<()> {
        let n = self.p.zstd.as_ref().map_or(0, |z| z.checked.len());
        for i in 0..n {
            self.checked_location(u32::try_from(i).unwrap_or(u32::MAX))?;
        }
        Ok(())
    }

    /// The stored bytes of `ordinal` (raw kernel or zstd frame), zero-copy;
    /// `None` for a reader from [`KpackReader::open_file`] (nothing is
    /// mapped: use [`KpackReader::get`] or [`KpackReader::read_exact_at`]).
    pub fn stored_bytes(&self, ordinal: u32) -> Option<&[u8]> {
        let b = self.blob_location(ordinal)?;
        let start = usize::try_from(b.offset).ok()?;
        let end = start.checked_add(usize::try_from(b.size).ok()?)?;
        self.bytes().get(start..end)
    }

    /// The code object for `(key, target)`: a slice of the mapping for
    /// scheme `none`, a freshly decoded buffer for zstd.
    pub fn get(&self, key: &str, target: &str) -> Result<Cow<'_, [u8]>> {
        let e = self
            .entry(key, target)
            .ok_or_else(|| self.err_not_found(key, target))?;
        self.get_entry(e)
    }

    /// The code object of an entry of this archive.
    pub fn get_entry(&self, e: &KernelEntry) -> Result<Cow<'_, [u8]>> {
        let loc = self.checked_location(e.ordinal)?;
        let stored = self
            .backing
            .src()
            .read_at(loc.offset, loc.size, "stored kernel")
            .map_err(|x| x.with_path_opt(self.path.as_deref()))?;
        match self.p.scheme {
            Scheme::None => Ok(stored),
            Scheme::ZstdPerKernel => decompress(&stored, e.original_size)
                .map(Cow::Owned)
                .map_err(|e| e.shifted(loc.offset).with_path_opt(self.path.as_deref())),
        }
    }

    /// Hand the code object of an entry to `sink` in order, in pieces of
    /// at most 256 KiB, without holding it whole: scheme `none` passes
    /// slices of the stored bytes, zstd frames are decoded through a fixed
    /// buffer. The decoded length is checked against `original_size`.
    pub fn stream_entry<E: From<Error>>(
        &self,
        e: &KernelEntry,
        sink: &mut dyn FnMut(&[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let loc = self.checked_location(e.ordinal).map_err(E::from)?;
        let done = if let Backing::File(f) = &self.backing {
            // Positioned reads through a fixed buffer: the stored bytes
            // (a raw kernel or a zstd frame) are never held whole.
            if loc
                .offset
                .checked_add(loc.size)
                .is_none_or(|end| end > f.stamp.len)
            {
                return Err(E::from(
                    past_end(loc.offset, loc.size, f.stamp.len, "stored kernel")
                        .with_path_opt(self.path.as_deref()),
                ));
            }
            let r = crate::io::FileRange {
                file: &f.file,
                offset: loc.offset,
                left: loc.size,
            };
            let r = std::io::BufReader::with_capacity(STREAM_CHUNK, r);
            stream_kernel(r, &self.p, loc, e, sink)
        } else {
            let stored = self
                .backing
                .src()
                .read_at(loc.offset, loc.size, "stored kernel")
                .map_err(|x| E::from(x.with_path_opt(self.path.as_deref())))?;
            stream_kernel(&*stored, &self.p, loc, e, sink)
        };
        done.map_err(|err| err.map_error(|x| x.with_path_opt(self.path.as_deref())))
    }

    /// Check every zstd frame ([`KpackReader::check_frames`]), then decode
    /// every kernel (in parallel) and check its length.
    pub fn validate_kernels(&self) -> Result<()> {
        use rayon::prelude::*;
        self.check_frames()?;
        self.p
            .entries
            .par_iter()
            .try_for_each(|e| self.get_entry(e).map(|_| ()))
    }

    fn err_not_found(&self, key: &str, target: &str) -> Error {
        Error::new(ErrorKind::NotFound {
            key: key.to_owned(),
            target: target.to_owned(),
        })
        .with_path_opt(self.path.as_deref())
    }

    /// Whether this archive's zstd frames carry content checksums (judged
    /// by its first frame's header; `true` for other archives, the
    /// writers' default).
    pub fn zstd_checksums(&self) -> bool {
        let Some(z) = &self.p.zstd else {
            return true;
        };
        if z.located.is_empty() {
            return true;
        }
        // Frame header descriptor: the byte after the 4-byte magic; bit 2
        // is the Content_Checksum_flag.
        zstd_locate(self.backing.src(), z, 0)
            .and_then(|l| {
                self.backing
                    .src()
                    .read_at(l.offset + 4, 1, "zstd frame header")
            })
            .map_or(true, |b| b.first().is_some_and(|d| d & 0x04 != 0))
    }

    /// A writer holding this archive's kernels (borrowed for `none`, decoded
    /// for zstd) in ordinal order, with the same group, family and arches.
    /// Writing it with the archive's compression (zstd at the level used to
    /// create it) reproduces the file byte for byte.
    pub fn to_writer(&self, compression: Compression) -> Result<KpackWriter<'_>> {
        let mut w = KpackWriter::new(compression);
        w.normalize_keys(false);
        w.content_checksum(self.zstd_checksums());
        w.group_name(self.group_name())
            .arch_family(self.gfx_arch_family())
            .arches(self.gfx_arches().iter().cloned());
        for e in self.entries_by_ordinal() {
            let data = self.get_entry(e)?;
            w.add_with_metadata(&e.key, &e.target, data, e.metadata.clone())?;
        }
        Ok(w)
    }
}

/// Open `path` for reading, refusing anything but a regular file:
/// non-blocking open and a check of the open descriptor, so a FIFO does not
/// hang and a directory or device is refused saying what it is.
fn open_regular(path: &Path) -> Result<(fs::File, fs::Metadata)> {
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::from(e).with_path(path))?
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::from(e).with_path(path))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "a FIFO, socket or device"
        };
        return Err(Error::from(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file ({what})"),
        ))
        .with_path(path));
    }
    Ok((file, meta))
}

trait WithPathOpt {
    fn with_path_opt(self, p: Option<&Path>) -> Self;
}

impl WithPathOpt for Error {
    fn with_path_opt(self, p: Option<&Path>) -> Self {
        match p {
            Some(p) => self.with_path(p),
            None => self,
        }
    }
}

/// Error of a streaming read: the archive's, or the sink's.
enum StreamErr<E> {
    Archive(Error),
    Sink(E),
}

impl<E: From<Error>> StreamErr<E> {
    fn map_error(self, f: impl FnOnce(Error) -> Error) -> E {
        match self {
            StreamErr::Archive(e) => E::from(f(e)),
            StreamErr::Sink(e) => e,
        }
    }
}

/// Largest piece [`KpackReader::stream_entry`] hands to its sink.
pub const STREAM_CHUNK: usize = 256 << 10;

fn stream_kernel<E, R: std::io::BufRead>(
    mut stored: R,
    p: &Parsed,
    loc: BlobLocation,
    e: &KernelEntry,
    sink: &mut dyn FnMut(&[u8]) -> std::result::Result<(), E>,
) -> std::result::Result<(), StreamErr<E>> {
    match p.scheme {
        Scheme::None => {
            let mut total = 0u64;
            loop {
                let piece = stored.fill_buf().map_err(|x| {
                    StreamErr::Archive(Error::at(loc.offset + total, ErrorKind::Io(x)))
                })?;
                if piece.is_empty() {
                    break;
                }
                let n = piece.len().min(STREAM_CHUNK);
                sink(&piece[..n]).map_err(StreamErr::Sink)?;
                stored.consume(n);
                total += n as u64;
            }
            if total != loc.size {
                return Err(StreamErr::Archive(past_end(
                    loc.offset,
                    loc.size,
                    loc.offset + total,
                    "stored kernel",
                )));
            }
            Ok(())
        }
        Scheme::ZstdPerKernel => {
            let zerr = |x: std::io::Error| {
                StreamErr::Archive(Error::at(loc.offset, ErrorKind::Zstd(x.to_string())))
            };
            let mut dec = zstd::stream::read::Decoder::with_buffer(stored)
                .map_err(zerr)?
                .single_frame()
                .take(e.original_size.saturating_add(1));
            let mut buf = vec![0u8; STREAM_CHUNK.min(e.original_size as usize + 1).max(1)];
            let mut total = 0u64;
            loop {
                let n = match dec.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(x) if x.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(x) => return Err(zerr(x)),
                };
                total += n as u64;
                if total > e.original_size {
                    break;
                }
                sink(&buf[..n]).map_err(StreamErr::Sink)?;
            }
            if total != e.original_size {
                return Err(StreamErr::Archive(Error::at(
                    loc.offset,
                    ErrorKind::Mismatch {
                        field: "original_size (decoded zstd frame length)".into(),
                        expected: e.original_size,
                        found: total,
                    },
                )));
            }
            Ok(())
        }
    }
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

fn read_u32(data: &[u8], at: usize, what: &'static str) -> Result<u32> {
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

fn read_u64(data: &[u8], at: usize, what: &'static str) -> Result<u64> {
    let lo = read_u32(data, at, what)?;
    let hi = read_u32(data, at + 4, what)?;
    Ok(u64::from(lo) | (u64::from(hi) << 32))
}

fn check_range(
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

/// Parse and validate a whole archive (reads the header, the TOC and the
/// zstd frame count from `src`, nothing else).
fn parse(src: Src<'_>) -> Result<Parsed> {
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
    let toc = src.read_at(toc_offset, len - toc_offset, "TOC")?;
    let mut c = Cursor::new(&toc, 0, toc_offset);
    let top = || "TOC".to_string();
    let n = c.read_map_len(&top)?;

    let mut format_version = None;
    let mut group_name = None;
    let mut family = None;
    let mut arches: Option<Vec<String>> = None;
    let mut raw_toc: Option<Vec<(String, String, RawEntry)>> = None;
    let mut scheme_s: Option<(u64, String)> = None;
    let mut blobs_raw: Option<Vec<(u64, u64, u64)>> = None;
    let mut zstd_offset: Option<(u64, u64)> = None;
    let mut zstd_size: Option<(u64, u64)> = None;

    for _ in 0..n {
        let key_at = c.offset();
        let key = c.read_str(&|| "TOC key".into())?;
        match key {
            "format_version" if format_version.is_none() => {
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
                format_version = Some(v);
            }
            "group_name" if group_name.is_none() => {
                group_name = Some(c.read_str(&|| "group_name".into())?.to_owned());
            }
            "gfx_arch_family" if family.is_none() => {
                family = Some(c.read_str(&|| "gfx_arch_family".into())?.to_owned());
            }
            "gfx_arches" if arches.is_none() => {
                let m = c.read_array_len(&|| "gfx_arches".into())?;
                let mut v = Vec::with_capacity(m);
                for i in 0..m {
                    v.push(c.read_str(&|| format!("gfx_arches[{i}]"))?.to_owned());
                }
                arches = Some(v);
            }
            "toc" if raw_toc.is_none() => raw_toc = Some(parse_toc_map(&mut c)?),
            "compression_scheme" if scheme_s.is_none() => {
                let at = c.offset();
                scheme_s = Some((at, c.read_str(&|| "compression_scheme".into())?.to_owned()));
            }
            "blobs" if blobs_raw.is_none() => {
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
                blobs_raw = Some(v);
            }
            "zstd_offset" if zstd_offset.is_none() => {
                let at = c.offset();
                zstd_offset = Some((at, c.read_uint(&|| "zstd_offset".into())?));
            }
            "zstd_size" if zstd_size.is_none() => {
                let at = c.offset();
                zstd_size = Some((at, c.read_uint(&|| "zstd_size".into())?));
            }
            other => return Err(dup(key_at, format!("TOC.{other}"))),
        }
    }
    if c.remaining() != 0 {
        return Err(Error::at(
            c.offset(),
            ErrorKind::TrailingData {
                what: "the TOC (it must end the file)",
                count: c.remaining() as u64,
            },
        ));
    }
    let top_at = toc_offset;
    let format_version = format_version.ok_or_else(|| missing(top_at, "format_version".into()))?;
    let group_name = group_name.ok_or_else(|| missing(top_at, "group_name".into()))?;
    let gfx_arch_family = family.ok_or_else(|| missing(top_at, "gfx_arch_family".into()))?;
    let gfx_arches = arches.ok_or_else(|| missing(top_at, "gfx_arches".into()))?;
    let raw_toc = raw_toc.ok_or_else(|| missing(top_at, "toc".into()))?;
    let (scheme_at, scheme_s) =
        scheme_s.ok_or_else(|| missing(top_at, "compression_scheme".into()))?;
    let scheme = match scheme_s.as_str() {
        SCHEME_NONE => Scheme::None,
        SCHEME_ZSTD => Scheme::ZstdPerKernel,
        _ => return Err(Error::at(scheme_at, ErrorKind::UnknownScheme(scheme_s))),
    };

    // Blob locations per ordinal.
    let mut zstd_region = None;
    let mut zstd_count = 0usize;
    let blobs: Vec<(u64, BlobLocation)> = match scheme {
        Scheme::None => {
            if let Some((at, _)) = zstd_offset.or(zstd_size) {
                return Err(dup(at, "zstd_offset/zstd_size (scheme is \"none\")".into()));
            }
            let raw = blobs_raw.ok_or_else(|| missing(top_at, "blobs".into()))?;
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
            v
        }
        Scheme::ZstdPerKernel => {
            if let Some(raw) = &blobs_raw {
                let at = raw.first().map_or(top_at, |b| b.0);
                return Err(dup(at, "blobs (scheme is \"zstd-per-kernel\")".into()));
            }
            let (oat, zoff) = zstd_offset.ok_or_else(|| missing(top_at, "zstd_offset".into()))?;
            let (sat, zsize) = zstd_size.ok_or_else(|| missing(top_at, "zstd_size".into()))?;
            check_range(
                &|| "zstd_offset".into(),
                oat,
                zoff,
                zsize,
                BLOB_ALIGNMENT,
                toc_offset,
            )?;
            let _ = sat;
            zstd_region = Some(BlobLocation {
                offset: zoff,
                size: zsize,
            });
            zstd_count = zstd_frame_count(src, zoff, zsize)?;
            Vec::new()
        }
    };
    let n_blobs = match scheme {
        Scheme::None => blobs.len(),
        Scheme::ZstdPerKernel => zstd_count,
    };

    // Entries: ordinals must be a permutation of the blob list.
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
    Ok(Parsed {
        toc_offset,
        format_version,
        group_name,
        gfx_arch_family,
        gfx_arches,
        scheme,
        entries,
        blobs: blobs.into_iter().map(|(_, l)| l).collect(),
        zstd: zstd_region.map(|z| ZstdIndex {
            zoff: z.offset,
            zend: z.offset + z.size,
            located: (0..n_blobs).map(|_| OnceLock::new()).collect(),
            checked: (0..n_blobs).map(|_| OnceLock::new()).collect(),
            entry_of,
        }),
        zstd_region,
        index,
    })
}

/// The frame count at the start of the zstd blob (u32 count, then
/// (u32 size, frame) per kernel); only the count is read here.
fn zstd_frame_count(src: Src<'_>, zoff: u64, zsize: u64) -> Result<usize> {
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
fn zstd_locate(src: Src<'_>, z: &ZstdIndex, i: usize) -> Result<BlobLocation> {
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
fn zstd_frame(src: Src<'_>, p: &Parsed, z: &ZstdIndex, i: usize) -> Result<BlobLocation> {
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
fn check_frame(
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
