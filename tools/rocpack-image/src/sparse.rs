//! Analysing a file without reading it whole. A [`Sparse`] holds only the
//! ranges of a file loaded into it (a small ordered map of pieces; ranges
//! that touch are merged into one piece), so the memory and the address
//! space it takes follow what is loaded, never the file's size. The
//! loaders of each format (`Sparse::load_elf` and `Sparse::load_archive`
//! in [`crate::elf`], `pe::sparse::load`) fill it, with positioned reads of
//! the file, with exactly the bytes that format's analysis looks at; the
//! bundles are then found through the file. A 1 GiB library is analysed
//! with a few MiB resident and a few MiB of address space, and since the
//! file is never mapped, a file truncated under us is a read error, never
//! `SIGBUS`.
//!
//! The parsers read a [`Sparse`] through [`SparseView`], an
//! `object::ReadRef` over the file's offsets: a read inside one loaded
//! piece gives its bytes, any other read fails (the parser reports it as
//! missing bytes, so a loader that skips a table shows in the tests).

use std::collections::BTreeMap;
use std::io;
use std::ops::Range;

use object::ReadRef;
use rocpack_bundle::ReadAt;

/// The loaded ranges of a file of a known size.
pub struct Sparse {
    /// The file's size.
    pub(crate) len: u64,
    /// Loaded pieces by file offset; no two overlap or touch.
    pieces: BTreeMap<u64, Vec<u8>>,
    /// Bytes read from the file so far.
    loaded: u64,
}

fn oom(n: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!("cannot allocate {n} bytes for the analysed tables"),
    )
}

impl Sparse {
    /// Nothing loaded of a file of `len` bytes (nothing is allocated).
    pub fn new(len: u64) -> io::Result<Sparse> {
        Ok(Sparse {
            len,
            pieces: BTreeMap::new(),
            loaded: 0,
        })
    }

    /// The whole file as the parsers read it (loaded pieces only).
    pub fn bytes(&self) -> SparseView<'_> {
        SparseView {
            sp: self,
            base: 0,
            len: self.len,
        }
    }

    /// Bytes read from the source so far (a range may be read twice).
    pub fn loaded(&self) -> u64 {
        self.loaded
    }

    /// Reads `[offset, offset + len)` of `src` (clamped to the file) into
    /// the map, merged with the pieces it overlaps or touches. A source
    /// shorter than the file (truncated under us) is an error; so is a
    /// piece that cannot be allocated (never an abort).
    pub fn load(&mut self, src: &dyn ReadAt, offset: u64, len: u64) -> io::Result<()> {
        let start = offset.min(self.len);
        let end = offset.saturating_add(len).min(self.len);
        if start >= end {
            return Ok(());
        }
        // Pieces that overlap or touch [start, end).
        let touching: Vec<u64> = self
            .pieces
            .range(..=end)
            .rev()
            .take_while(|(&at, p)| at + p.len() as u64 >= start)
            .map(|(&at, _)| at)
            .collect();
        let lo = touching
            .iter()
            .copied()
            .min()
            .map_or(start, |a| a.min(start));
        let hi = touching
            .iter()
            .map(|a| a + self.pieces[a].len() as u64)
            .max()
            .map_or(end, |e| e.max(end));
        let size = hi - lo;
        let mut buf = Vec::new();
        buf.try_reserve_exact(usize::try_from(size).map_err(|_| oom(size))?)
            .map_err(|_| oom(size))?;
        buf.resize(size as usize, 0);
        for at in touching {
            let p = self.pieces.remove(&at).expect("listed piece");
            let from = (at - lo) as usize;
            buf[from..from + p.len()].copy_from_slice(&p);
        }
        let mut at = start;
        while at < end {
            let dst = &mut buf[(at - lo) as usize..(end - lo) as usize];
            let n = src.read_at(at, dst)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("file ended at offset {at:#x} while it was read (changed under us?)"),
                ));
            }
            at += n as u64;
        }
        self.pieces.insert(lo, buf);
        self.loaded += end - start;
        Ok(())
    }
}

/// `[base, base + len)` of a [`Sparse`] file as the parsers read it: an
/// `object::ReadRef` whose offset 0 is `base`. A read inside one loaded
/// piece gives its bytes; a read of anything not loaded, or past `len`,
/// fails.
#[derive(Clone, Copy)]
pub struct SparseView<'a> {
    sp: &'a Sparse,
    base: u64,
    len: u64,
}

impl<'a> SparseView<'a> {
    /// Size of the viewed range (loaded or not), as `<[u8]>::len` gives it
    /// for a slice (an archive member's `data.len()` is the same whichever
    /// it is).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        usize::try_from(self.len).unwrap_or(usize::MAX)
    }

    /// `[offset, offset + len)` of the view (clamped to it).
    pub fn sub(&self, offset: u64, len: u64) -> SparseView<'a> {
        let offset = offset.min(self.len);
        SparseView {
            sp: self.sp,
            base: self.base + offset,
            len: len.min(self.len - offset),
        }
    }

    /// `[offset, offset + len)` when it lies inside the view and inside one
    /// loaded piece.
    pub fn get(&self, offset: u64, len: u64) -> Option<&'a [u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        if len == 0 {
            return Some(&[]);
        }
        let at = self.base + offset;
        let (&start, piece) = self.sp.pieces.range(..=at).next_back()?;
        let from = usize::try_from(at - start).ok()?;
        piece.get(from..from.checked_add(usize::try_from(len).ok()?)?)
    }

    /// The first `n` bytes (fewer when the view is shorter), if loaded.
    pub fn head(&self, n: u64) -> Option<&'a [u8]> {
        self.get(0, n.min(self.len))
    }

    pub(crate) fn u32_at(&self, at: u64) -> u32 {
        self.get(at, 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64_at(&self, at: u64) -> u64 {
        self.get(at, 8).map_or(0, |b| le64(b, 0))
    }
}

impl std::fmt::Debug for SparseView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseView")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<'a> ReadRef<'a> for SparseView<'a> {
    fn len(self) -> Result<u64, ()> {
        Ok(self.len)
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        self.get(offset, size).ok_or(())
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        if range.start > range.end || range.end > self.len {
            return Err(());
        }
        let at = self.base + range.start;
        let (&start, piece) = self.sp.pieces.range(..=at).next_back().ok_or(())?;
        let from = usize::try_from(at - start).map_err(|_| ())?;
        let n = usize::try_from(range.end - range.start).map_err(|_| ())?;
        let bytes = piece.get(from..).ok_or(())?;
        let bytes = &bytes[..n.min(bytes.len())];
        let end = bytes.iter().position(|&c| c == delimiter).ok_or(())?;
        Ok(&bytes[..end])
    }
}

pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
