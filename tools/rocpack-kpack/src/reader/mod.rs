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
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind, Result};
use crate::format::{BlobLocation, Compression, KernelEntry, Scheme, BLOB_ALIGNMENT};
use crate::writer::KpackWriter;

mod toc;
mod zstd;

use self::toc::{parse, read_u64, Parsed};
pub(crate) use self::zstd::decompress;
use self::zstd::{check_frame, zstd_frame, zstd_locate};

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
        let (file, meta) = rocpack_bundle::fsutil::open_regular(path)
            .map_err(|e| Error::from(e).with_path(path))?;
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
        let (file, meta) = rocpack_bundle::fsutil::open_regular(path)
            .map_err(|e| Error::from(e).with_path(path))?;
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
    /// every kernel (in parallel) and check its length. The error is the
    /// first entry's (in TOC order) that fails, whatever the thread count.
    pub fn validate_kernels(&self) -> Result<()> {
        self.check_frames()?;
        crate::ordered::try_map_ordered(&self.p.entries, |e| self.get_entry(e).map(|_| ()))
            .map(|_| ())
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
            let mut dec = ::zstd::stream::read::Decoder::with_buffer(stored)
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
