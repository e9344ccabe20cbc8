//! Reading an input wheel: [`InputWheel`] opens it (its central directory
//! checked by [`central::scan`]) and inflates entries with positioned
//! reads, checking sizes and CRC-32s.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use rocpack_bundle::{fsutil, FileIdent};

use super::central::{self, flag, CdEntry, Directory, FileRange, Table};
use super::{ioerr, is_plain_rel, zipmsg, LIMITS};
use crate::WheelError;

/// An opened input wheel: its files (directory entries left out) sorted by
/// name in a compact [`Table`].
pub struct InputWheel {
    pub(super) path: PathBuf,
    pub(super) file: File,
    pub(super) dir: Directory,
    ident: FileIdent,
    /// Its files, sorted by name.
    pub table: Table,
    /// Sum of the declared sizes of its entries.
    pub expanded: u64,
}

impl InputWheel {
    /// Opens and checks `path`: a regular file, a zip whose central
    /// directory passes [`central::scan`] (every name once, no
    /// overlapping entries, possible sizes, caps), every entry a plain
    /// relative path, no symlinks.
    pub fn open(path: &Path) -> Result<InputWheel, WheelError> {
        // Non-blocking: a FIFO named like a wheel is refused, not waited on.
        let file = fsutil::open_nonblocking(path, 0).map_err(|e| ioerr(path, "open", e))?;
        let meta = file.metadata().map_err(|e| ioerr(path, "stat", e))?;
        if !meta.is_file() {
            return Err(WheelError::Usage(format!(
                "{}: not a regular file ({})",
                path.display(),
                fsutil::file_kind(&meta)
            )));
        }
        let (mut table, dir, summary) = central::scan(&file, meta.len(), &LIMITS)
            .map_err(|e| WheelError::Usage(format!("{}: {e}", path.display())))?;
        for i in 0..table.len() {
            let (r, name) = (table.rec(i), table.name(i));
            if r.bits & flag::DIR != 0 {
                continue;
            }
            if r.bits & flag::LINK != 0 {
                return Err(WheelError::Usage(format!(
                    "{}: entry `{name}` is a symlink (wheels cannot install symlinks)",
                    path.display()
                )));
            }
            if !is_plain_rel(name) {
                return Err(WheelError::Usage(format!(
                    "{}: entry `{name}` is not a plain relative path",
                    path.display()
                )));
            }
        }
        table.retain(|r| r.bits & flag::DIR == 0);
        // Entries without permission bits install as 0o644.
        for i in 0..table.len() {
            let r = table.rec_mut(i);
            if r.bits & 0o777 == 0 {
                r.bits |= 0o644;
            }
        }
        Ok(InputWheel {
            path: path.to_path_buf(),
            file,
            dir,
            ident: FileIdent::of(&meta),
            table,
            expanded: summary.expanded,
        })
    }

    /// The wheel file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The central directory record of file `i` and where its data starts.
    pub(super) fn raw(&self, i: usize) -> Result<(CdEntry, u64), WheelError> {
        raw_at(&self.file, &self.dir, &self.path, self.table.rec(i).cd)
    }

    /// Inflates file `i`, handing its bytes to `sink` in order. Stops at
    /// the declared size; a size or CRC-32 other than the central
    /// directory's is an error. Returns the size.
    pub fn inflate(
        &self,
        i: usize,
        sink: impl FnMut(&[u8]) -> Result<(), WheelError>,
    ) -> Result<u64, WheelError> {
        let src = Src {
            file: &self.file,
            dir: &self.dir,
            path: &self.path,
        };
        src.inflate(self.table.rec(i).cd, self.table.name(i), sink)
    }

    /// The bytes of entry `name` (at most `limit`), `None` when absent.
    pub fn read_entry(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, WheelError> {
        let Some(i) = self.table.find(name) else {
            return Ok(None);
        };
        let (e, _) = self.raw(i)?;
        if e.size > limit {
            return Err(WheelError::Usage(format!(
                "{}: entry `{name}` is {} bytes; at most {limit} are read",
                self.path.display(),
                e.size
            )));
        }
        let mut b = Vec::with_capacity(e.size as usize);
        self.inflate(i, |c| {
            b.extend_from_slice(c);
            Ok(())
        })?;
        Ok(Some(b))
    }

    /// Fails when the wheel changed since it was opened (a rewrite while
    /// it was read would mix old and new bytes in the outputs).
    pub fn check_unchanged(&self) -> Result<(), WheelError> {
        let now = fs::metadata(&self.path).map_err(|e| ioerr(&self.path, "stat", e))?;
        let fd = self
            .file
            .metadata()
            .map_err(|e| ioerr(&self.path, "stat", e))?;
        if FileIdent::of(&now) != self.ident || FileIdent::of(&fd) != self.ident {
            return Err(WheelError::Usage(format!(
                "{}: changed while it was read (size, time or inode differ): nothing was written",
                self.path.display()
            )));
        }
        Ok(())
    }
}

/// The parts of an [`InputWheel`] entries are read through (so the table
/// can be lent out meanwhile).
#[derive(Clone, Copy)]
pub(super) struct Src<'a> {
    pub(super) file: &'a File,
    pub(super) dir: &'a Directory,
    pub(super) path: &'a Path,
}

pub(super) fn raw_at(
    file: &File,
    dir: &Directory,
    path: &Path,
    cd: u64,
) -> Result<(CdEntry, u64), WheelError> {
    let e = central::record_at(file, dir, cd).map_err(|m| zipmsg(path, m))?;
    let off = central::data_offset(file, &e).map_err(|m| zipmsg(path, m))?;
    Ok((e, off))
}

impl Src<'_> {
    pub(super) fn inflate(
        &self,
        cd: u64,
        name: &str,
        mut sink: impl FnMut(&[u8]) -> Result<(), WheelError>,
    ) -> Result<u64, WheelError> {
        let (e, off) = raw_at(self.file, self.dir, self.path, cd)?;
        let range = FileRange {
            f: self.file,
            pos: off,
            end: off + e.compressed,
        };
        let mut r: Box<dyn Read> = match e.method {
            0 => Box::new(range),
            _ => Box::new(flate2::read::DeflateDecoder::new_with_buf(
                range,
                vec![0u8; 1 << 16],
            )),
        };
        let mut buf = vec![0u8; 1 << 20];
        let mut crc = flate2::Crc::new();
        let mut n = 0u64;
        let fail = |m: String| zipmsg(self.path, format!("entry `{name}`: {m}"));
        loop {
            let k = r.read(&mut buf).map_err(|er| fail(er.to_string()))?;
            if k == 0 {
                break;
            }
            n += k as u64;
            if n > e.size {
                return Err(fail(format!(
                    "inflates to more than the {} bytes the central directory declares (stopped there)",
                    e.size
                )));
            }
            crc.update(&buf[..k]);
            sink(&buf[..k])?;
        }
        if n != e.size {
            return Err(fail(format!(
                "inflates to {n} bytes, the central directory declares {}",
                e.size
            )));
        }
        if crc.sum() != e.crc {
            return Err(fail(format!(
                "its CRC-32 is {:08x}, the central directory says {:08x}",
                crc.sum(),
                e.crc
            )));
        }
        Ok(n)
    }
}
