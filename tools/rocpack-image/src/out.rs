//! The rewritten file as a list of pieces (ranges of the input, ranges of a
//! second source holding rebuilt bundles, new bytes, zeros) plus small
//! patches on top, so a rewrite never holds the host code or the device
//! code in memory: [`Out::write_to`] copies range by range through a fixed
//! buffer. Patches are applied in the order they were made, as writes into
//! a buffer would be.

use std::io::Write;

use rocpack_bundle::ReadAt;

use crate::elf::headers::Sink;
use crate::elf::{Error, Result};

/// Copy buffer of [`Out::write_to`].
const CHUNK: u64 = 1 << 20;

enum Piece {
    /// `len` bytes of the input at `offset`.
    Src { offset: u64, len: u64 },
    /// `len` bytes of the auxiliary source (rebuilt bundles) at `offset`.
    Aux { offset: u64, len: u64 },
    /// New bytes.
    Bytes(Vec<u8>),
    /// Zeros.
    Zero(u64),
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Src { len, .. } | Piece::Aux { len, .. } | Piece::Zero(len) => *len,
            Piece::Bytes(b) => b.len() as u64,
        }
    }
}

/// A patch: `len` bytes at output offset `offset`, from the arena at `at`
/// (`None`: zeros).
struct Patch {
    offset: u64,
    len: u64,
    at: Option<usize>,
}

/// An output file under construction (shared with the PE rewrite in
/// `rocpack-image`).
#[derive(Default)]
pub struct Out {
    /// (output offset, piece), in order, contiguous.
    pieces: Vec<(u64, Piece)>,
    len: u64,
    patches: Vec<Patch>,
    arena: Vec<u8>,
}

impl Out {
    /// Bytes laid out so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Nothing laid out yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Overwrite `bytes` at `offset`, inside what is already laid out.
    pub fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        Sink::put(self, offset, bytes)
    }

    fn push(&mut self, p: Piece) {
        let n = p.len();
        if n == 0 {
            return;
        }
        self.pieces.push((self.len, p));
        self.len += n;
    }

    /// Append `len` input bytes at `offset` (the caller has bounds-checked
    /// them against the input).
    pub fn push_src(&mut self, offset: u64, len: u64) {
        self.push(Piece::Src { offset, len });
    }

    /// Append `len` bytes of the auxiliary source at `offset`.
    pub fn push_aux(&mut self, offset: u64, len: u64) {
        self.push(Piece::Aux { offset, len });
    }

    /// Append new bytes.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        if let Some((_, Piece::Bytes(b))) = self.pieces.last_mut() {
            b.extend_from_slice(bytes);
            self.len += bytes.len() as u64;
        } else {
            self.push(Piece::Bytes(bytes.to_vec()));
        }
    }

    /// Zero-extend to `to` bytes (never shrinks).
    pub fn resize(&mut self, to: u64) {
        if to > self.len {
            self.push(Piece::Zero(to - self.len));
        }
    }

    /// [`crate::elf::headers::grow`] for an `Out`. Growing past `limit` (what the
    /// input, host and bundles, allows) is [`Error::DoesNotFit`]: in a
    /// reassembly, the bundles given do not fit the layout the split left.
    pub fn grow(&mut self, to: u64, limit: u64) -> Result<()> {
        if to > limit {
            return Err(Error::does_not_fit(
                to,
                format!(
                    "output would grow to {to:#x} bytes, more than the input allows ({limit:#x})"
                ),
            ));
        }
        self.resize(to);
        Ok(())
    }

    /// Zero `[from, to)` of what is already there.
    pub fn fill_zero(&mut self, from: u64, to: u64) -> Result<()> {
        if from > to || to > self.len {
            return Err(Error::layout(
                from,
                "internal: write outside the output buffer",
            ));
        }
        if to > from {
            self.patches.push(Patch {
                offset: from,
                len: to - from,
                at: None,
            });
        }
        Ok(())
    }

    /// Write the file: input ranges read from `src`, rebuilt bundles from
    /// `aux`, through one buffer of at most [`CHUNK`] bytes. Returns the
    /// number of bytes written.
    pub fn write_to(
        &self,
        src: &dyn ReadAt,
        aux: &dyn ReadAt,
        w: &mut dyn Write,
    ) -> std::io::Result<u64> {
        self.emit(src, Some(aux), None, &mut |_, b| w.write_all(b))?;
        Ok(self.len)
    }

    /// Write the file into `file` (empty) at its offsets (positioned
    /// writes), all but the auxiliary ranges, which are left for the
    /// caller: returns `(auxiliary offset, output offset)` of each, in
    /// order. The file is given its full length; zeros are left as holes
    /// ([`Out::write_file`]). A patch over an auxiliary range is an error.
    pub fn write_placed(
        &self,
        src: &dyn ReadAt,
        file: &std::fs::File,
    ) -> std::io::Result<Vec<(u64, u64)>> {
        use std::os::unix::fs::FileExt;
        let placed = self.emit(src, None, Some(file), &mut |at, b| file.write_all_at(b, at))?;
        file.set_len(self.len)?;
        Ok(placed)
    }

    /// Write the file into `file` (empty) at its offsets: input ranges
    /// from `src`, rebuilt bundles from `aux`. Runs of zeros the layout
    /// adds (a section restored at its original size, alignment) are not
    /// written: the file is given its full length, so they read as zeros
    /// and take no disk or time, however large a (crafted) header makes
    /// them. Returns the number of bytes of the file.
    pub fn write_file(
        &self,
        src: &dyn ReadAt,
        aux: &dyn ReadAt,
        file: &std::fs::File,
    ) -> std::io::Result<u64> {
        use std::os::unix::fs::FileExt;
        self.emit(src, Some(aux), Some(file), &mut |at, b| {
            file.write_all_at(b, at)
        })?;
        file.set_len(self.len)?;
        Ok(self.len)
    }

    /// The file in order, chunk by chunk, to `sink(output offset, bytes)`;
    /// without `aux`, auxiliary ranges are skipped and their places
    /// returned. With `dst` (the empty file the sink writes into at
    /// offsets), chunks of zeros no patch touches are skipped, and input
    /// ranges no patch touches are copied from file to file in the kernel
    /// when `src` is a file range ([`copy_range`]).
    fn emit(
        &self,
        src: &dyn ReadAt,
        aux: Option<&dyn ReadAt>,
        dst: Option<&std::fs::File>,
        sink: &mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<Vec<(u64, u64)>> {
        let mut order: Vec<usize> = (0..self.patches.len()).collect();
        order.sort_by_key(|&i| self.patches[i].offset);
        let max_patch = self.patches.iter().map(|p| p.len).max().unwrap_or(0);
        let overlapping = |a: u64, b: u64| {
            let lo =
                order.partition_point(|&i| self.patches[i].offset < a.saturating_sub(max_patch));
            order[lo..]
                .iter()
                .copied()
                .take_while(move |&i| self.patches[i].offset < b)
                .filter(move |&i| {
                    let p = &self.patches[i];
                    p.offset + p.len > a
                })
        };
        let mut placed = Vec::new();
        let mut buf = Vec::new();
        let mut hits = Vec::new();
        // Until the kernel says it cannot copy between these files.
        let mut kernel_copy = src.file_range().is_some();
        for (start, piece) in &self.pieces {
            let n = piece.len();
            if let (Piece::Aux { offset, .. }, None) = (piece, aux) {
                if overlapping(*start, start + n).next().is_some() {
                    return Err(std::io::Error::other(
                        "internal: a patch over a bundle placed by the caller",
                    ));
                }
                placed.push((*offset, *start));
                continue;
            }
            let mut done = 0u64;
            while done < n {
                let k = (n - done).min(CHUNK);
                let (a, b) = (start + done, start + done + k);
                if let Some(dst) = dst.filter(|_| overlapping(a, b).next().is_none()) {
                    match piece {
                        Piece::Zero(_) => {
                            done += k;
                            continue;
                        }
                        Piece::Src { offset, .. } if kernel_copy => {
                            if copy_range(src, offset + done, dst, a, k)? {
                                done += k;
                                continue;
                            }
                            kernel_copy = false;
                        }
                        _ => {}
                    }
                }
                buf.clear();
                buf.resize(k as usize, 0);
                match piece {
                    Piece::Src { offset, .. } => read_exact_at(src, offset + done, &mut buf)?,
                    Piece::Aux { offset, .. } => {
                        if let Some(aux) = aux {
                            read_exact_at(aux, offset + done, &mut buf)?
                        }
                    }
                    Piece::Bytes(b) => {
                        buf.copy_from_slice(&b[done as usize..(done + k) as usize]);
                    }
                    Piece::Zero(_) => {}
                }
                // Patches overlapping [a, b), applied in the order made.
                hits.clear();
                hits.extend(overlapping(a, b));
                hits.sort_unstable();
                for &i in &hits {
                    let p = &self.patches[i];
                    let from = p.offset.max(a);
                    let to = (p.offset + p.len).min(b);
                    let dst = &mut buf[(from - a) as usize..(to - a) as usize];
                    match p.at {
                        None => dst.fill(0),
                        Some(at) => {
                            let s = at + (from - p.offset) as usize;
                            dst.copy_from_slice(&self.arena[s..s + dst.len()]);
                        }
                    }
                }
                sink(a, &buf)?;
                done += k;
            }
        }
        Ok(placed)
    }

    /// The whole file in memory (the slice API).
    pub fn to_vec(&self, src: &dyn ReadAt, aux: &dyn ReadAt) -> Result<Vec<u8>> {
        let mut v = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        self.write_to(src, aux, &mut v)
            .map_err(|e| Error::layout(0, format!("internal: {e}")))?;
        Ok(v)
    }
}

impl Sink for Out {
    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let end = offset.checked_add(bytes.len() as u64);
        match end {
            Some(end) if end <= self.len => {
                if !bytes.is_empty() {
                    self.patches.push(Patch {
                        offset,
                        len: bytes.len() as u64,
                        at: Some(self.arena.len()),
                    });
                    self.arena.extend_from_slice(bytes);
                }
                Ok(())
            }
            _ => Err(Error::layout(
                offset,
                "internal: write outside the output buffer",
            )),
        }
    }
}

/// Copies `len` bytes of `src` at `offset` to `dst` at `at` in the kernel
/// (`copy_file_range`: no pass through this process, a reflink or a
/// server-side copy where the file system has them). `Ok(false)` when
/// nothing was copied because the kernel or the file systems cannot (the
/// caller copies through a buffer instead); a source shorter than promised
/// is an error, as for [`read_exact_at`].
fn copy_range(
    src: &dyn ReadAt,
    offset: u64,
    dst: &std::fs::File,
    mut at: u64,
    len: u64,
) -> std::io::Result<bool> {
    use rustix::io::Errno;
    let Some((file, base)) = src.file_range() else {
        return Ok(false);
    };
    if offset.saturating_add(len) > src.size() {
        return Err(short_source(offset, len));
    }
    let mut from = base.saturating_add(offset);
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
        match rustix::fs::copy_file_range(file, Some(&mut from), dst, Some(&mut at), want) {
            Ok(0) => return Err(short_source(offset + (len - left), left)),
            Ok(n) => left -= n as u64,
            Err(Errno::INTR) => {}
            Err(Errno::XDEV | Errno::NOSYS | Errno::OPNOTSUPP | Errno::INVAL) if left == len => {
                return Ok(false)
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

fn short_source(offset: u64, missing: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!(
            "the input became shorter while it was copied ({missing} bytes missing at offset {offset})"
        ),
    )
}

/// Fill `buf` from `src` at `offset`; a source shorter than promised (a
/// file truncated under us) is an error, never short output.
fn read_exact_at(src: &dyn ReadAt, mut offset: u64, mut buf: &mut [u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = src.read_at(offset, buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "input ended at offset {offset:#x} while it was copied (changed under us?)"
                ),
            ));
        }
        offset += n as u64;
        buf = &mut buf[n..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_and_patches_in_order() {
        let src: &[u8] = b"0123456789";
        let aux: &[u8] = b"abcdef";
        let mut o = Out::default();
        o.push_src(2, 5); // 23456
        o.extend_from_slice(b"XY");
        o.resize(9);
        o.push_aux(1, 3); // bcd
        o.put(1, b"zz").unwrap();
        o.put(2, b"Q").unwrap(); // later wins
        o.fill_zero(5, 6).unwrap();
        o.put(7, b"...").unwrap();
        assert!(o.put(11, b"ab").is_err());
        let v = o.to_vec(&src, &aux).unwrap();
        assert_eq!(v, b"2zQ56\0Y...cd");
    }

    /// `write_file` gives the bytes `to_vec` gives, patches inside a run
    /// of zeros included, and leaves the run as a hole: a GiB of zeros a
    /// header asks for takes neither the disk nor the time to write it.
    #[test]
    fn write_file_leaves_runs_of_zeros_as_holes() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        const GIB: u64 = 1 << 30;
        let src: &[u8] = b"0123456789";
        let aux: &[u8] = b"abcdef";
        let mut small = Out::default();
        small.push_src(2, 5);
        small.resize(3 * CHUNK + 7);
        small.push_aux(1, 3);
        small.put(CHUNK + 5, b"patch").unwrap();
        let f = tempfile::tempfile().unwrap();
        assert_eq!(small.write_file(&src, &aux, &f).unwrap(), small.len());
        let mut got = vec![0u8; small.len() as usize];
        f.read_exact_at(&mut got, 0).unwrap();
        assert!(got == small.to_vec(&src, &aux).unwrap());

        let mut big = Out::default();
        big.push_src(0, 10);
        big.resize(GIB);
        big.push_aux(0, 6);
        big.put(GIB / 2, b"mid").unwrap();
        let f = tempfile::tempfile().unwrap();
        assert_eq!(big.write_file(&src, &aux, &f).unwrap(), GIB + 6);
        let m = f.metadata().unwrap();
        assert_eq!(m.len(), GIB + 6);
        assert!(
            m.blocks() * 512 < 1 << 24,
            "{} bytes on disk",
            m.blocks() * 512
        );
        for (at, want) in [
            (0, &b"0123456789"[..]),
            (GIB / 2 - 2, b"\0\0mid\0"),
            (GIB - 3, b"\0\0\0abcdef"),
        ] {
            let mut b = vec![0u8; want.len()];
            f.read_exact_at(&mut b, at).unwrap();
            assert_eq!(b, want, "at {at}");
        }
    }

    /// From a file range, input ranges no patch touches are copied in the
    /// kernel: the bytes are those of the buffered path, patches over an
    /// input range still apply, and a file shorter than its range is an
    /// error, never short output.
    #[test]
    fn write_file_copies_input_ranges_from_a_file() {
        use std::io::Write;
        use std::os::unix::fs::FileExt;
        let bytes: Vec<u8> = (0..3 * CHUNK + 99).map(|i| (i * 7 % 251) as u8).collect();
        let mut input = tempfile::tempfile().unwrap();
        input.write_all(&bytes).unwrap();
        let mut o = Out::default();
        o.push_src(5, 2 * CHUNK + 17);
        o.extend_from_slice(b"new");
        o.push_src(0, CHUNK + 1);
        o.put(CHUNK - 2, b"patched").unwrap();
        let whole = rocpack_bundle::FileRange::new(&input, 0, bytes.len() as u64);
        let f = tempfile::tempfile().unwrap();
        assert_eq!(o.write_file(&whole, &NO_AUX_BYTES, &f).unwrap(), o.len());
        let mut got = vec![0u8; o.len() as usize];
        f.read_exact_at(&mut got, 0).unwrap();
        assert!(got == o.to_vec(&&bytes[..], &NO_AUX_BYTES).unwrap());

        input.set_len(CHUNK).unwrap();
        let f = tempfile::tempfile().unwrap();
        let err = o.write_file(&whole, &NO_AUX_BYTES, &f).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
    }

    const NO_AUX_BYTES: &[u8] = &[];
}
