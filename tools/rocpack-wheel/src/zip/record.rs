//! RECORD: the input's checked file by file as each file is inflated
//! ([`verify`], [`check_record`]), each file's SHA-256 kept on disk for
//! the output RECORDs ([`Digests`]), and the output rows.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::central::{flag, Table};
use super::read::{InputWheel, Src};
use super::{ioerr, join, set_mode, EXTRACTED, HEAD_LEN, MAX_RECORD};
use crate::meta::{FileHasher, HashAlgo};
use crate::WheelError;

/// [`Table`] flag: listed in RECORD (seen while verifying).
const LISTED: u16 = flag::USER1;

/// SHA-256 of each input file, by table index, in a temporary file (32
/// bytes per entry on disk, none in memory).
pub struct Digests {
    file: File,
    path: PathBuf,
}

impl Digests {
    /// An empty spill file in `tmp`.
    pub fn new(tmp: &Path) -> Result<Digests, WheelError> {
        let file =
            tempfile::tempfile_in(tmp).map_err(|e| ioerr(tmp, "create temporary file", e))?;
        Ok(Digests {
            file,
            path: tmp.to_path_buf(),
        })
    }

    pub(super) fn put(&self, i: usize, d: &[u8; 32]) -> Result<(), WheelError> {
        self.file
            .write_all_at(d, i as u64 * 32)
            .map_err(|e| ioerr(&self.path, "write digest", e))
    }

    pub(super) fn get(&self, i: usize) -> Result<[u8; 32], WheelError> {
        let mut d = [0u8; 32];
        self.file
            .read_exact_at(&mut d, i as u64 * 32)
            .map_err(|e| ioerr(&self.path, "read digest", e))?;
        Ok(d)
    }
}

/// Checks every file of `table` against the RECORD at `record_path`
/// (streamed from `text`): each row names a file of the table once, each
/// file but RECORD and its signatures is listed; `check(table, i, row)`
/// checks the bytes of file `i` against its row. `what` names the input in
/// messages.
pub fn check_record<R: BufRead>(
    table: &mut Table,
    text: R,
    record_path: &str,
    what: &Path,
    mut check: impl FnMut(&mut Table, usize, &crate::meta::InputRow<'_>) -> Result<(), WheelError>,
) -> Result<(), WheelError> {
    let usage = |m: String| WheelError::Usage(format!("{}: {m}", what.display()));
    let mut failed: Option<WheelError> = None;
    let r = crate::meta::input_record_rows(text, record_path, |row| {
        let Some(i) = table.find(row.path) else {
            if crate::meta::is_record_file(row.path, record_path) {
                return Ok(());
            }
            return Err(format!(
                "{record_path} line {} lists `{}`, which is not in the wheel: the RECORD does not match the files",
                row.line, row.path
            ));
        };
        if table.rec(i).bits & LISTED != 0 {
            return Err(format!(
                "{record_path} line {}: `{}` is listed twice",
                row.line, row.path
            ));
        }
        table.rec_mut(i).bits |= LISTED;
        if crate::meta::is_record_file(row.path, record_path) {
            return Ok(());
        }
        check(table, i, row).map_err(|e| {
            failed = Some(e);
            String::new()
        })
    });
    if let Some(e) = failed {
        return Err(e);
    }
    r.map_err(usage)?;
    for i in 0..table.len() {
        let name = table.name(i);
        if table.rec(i).bits & LISTED == 0 && !crate::meta::is_record_file(name, record_path) {
            return Err(usage(format!(
                "`{name}` is not listed in {record_path}: the RECORD does not match the files"
            )));
        }
    }
    Ok(())
}

/// Checks every file of `w` against its RECORD (see [`check_record`]) as
/// it is inflated, keeps each file's SHA-256 in `digests`, and extracts
/// below `root` (permission bits kept) the files `extract(name, head)`
/// chooses from their first [`HEAD_LEN`] bytes; those get [`EXTRACTED`].
/// Nothing else is written to disk.
pub fn verify(
    w: &mut InputWheel,
    record_path: &str,
    root: &Path,
    tmp: &Path,
    digests: &Digests,
    extract: &dyn Fn(&str, &[u8]) -> bool,
) -> Result<(), WheelError> {
    let ri = w.table.find(record_path).ok_or_else(|| {
        WheelError::Usage(format!(
            "{}: no {record_path} (every wheel lists its files there)",
            w.path.display()
        ))
    })?;
    // RECORD itself, spilled to a temporary file and streamed from there.
    let mut rec = tempfile::tempfile_in(tmp).map_err(|e| ioerr(tmp, "create temporary file", e))?;
    {
        let (e, _) = w.raw(ri)?;
        if e.size > MAX_RECORD {
            return Err(WheelError::Usage(format!(
                "{}: entry `{record_path}` is {} bytes; at most {MAX_RECORD} are read",
                w.path.display(),
                e.size
            )));
        }
        let mut bw = BufWriter::new(&mut rec);
        w.inflate(ri, |c| bw.write_all(c).map_err(|e| ioerr(tmp, "write", e)))?;
        bw.flush().map_err(|e| ioerr(tmp, "write", e))?;
    }
    rec.seek(SeekFrom::Start(0))
        .map_err(|e| ioerr(tmp, "seek", e))?;
    let InputWheel {
        path,
        file,
        dir,
        table,
        ..
    } = w;
    let path: &Path = path;
    let src = Src {
        file: &*file,
        dir: &*dir,
        path,
    };
    let mut dirs = std::collections::HashSet::new();
    check_record(
        table,
        BufReader::with_capacity(1 << 16, rec),
        record_path,
        path,
        |table, i, row| {
            let name = table.name(i).to_string();
            let mode = table.rec(i).mode();
            let algo = row.hash.map(|h| h.0).unwrap_or(HashAlgo::Sha256);
            let mut hasher = FileHasher::new(algo);
            let mut sha = (algo != HashAlgo::Sha256).then(Sha256::new);
            let mut head: Vec<u8> = Vec::with_capacity(HEAD_LEN);
            let mut out: Option<BufWriter<File>> = None;
            let mut decided = false;
            let dst = join(root, &name);
            let mut open =
                |head: &[u8], out: &mut Option<BufWriter<File>>| -> Result<(), WheelError> {
                    if !extract(&name, head) {
                        return Ok(());
                    }
                    if let Some(p) = dst.parent() {
                        if !dirs.contains(p) {
                            fs::create_dir_all(p).map_err(|er| ioerr(p, "create directory", er))?;
                            dirs.insert(p.to_path_buf());
                        }
                    }
                    let mut f = BufWriter::with_capacity(
                        1 << 16,
                        File::create(&dst).map_err(|er| ioerr(&dst, "create", er))?,
                    );
                    f.write_all(head).map_err(|er| ioerr(&dst, "write", er))?;
                    *out = Some(f);
                    Ok(())
                };
            let n = src.inflate(table.rec(i).cd, &name, |c| {
                hasher.update(c);
                if let Some(s) = sha.as_mut() {
                    s.update(c);
                }
                let mut c = c;
                if !decided {
                    let k = (HEAD_LEN - head.len()).min(c.len());
                    head.extend_from_slice(&c[..k]);
                    c = &c[k..];
                    if head.len() < HEAD_LEN {
                        return Ok(());
                    }
                    decided = true;
                    open(&head, &mut out)?;
                }
                if let Some(o) = out.as_mut() {
                    o.write_all(c).map_err(|er| ioerr(&dst, "write", er))?;
                }
                Ok(())
            })?;
            if !decided {
                open(&head, &mut out)?;
            }
            if let Some(o) = out {
                o.into_inner()
                    .map_err(|er| ioerr(&dst, "write", er.into_error()))?;
                set_mode(&dst, mode)?;
                table.rec_mut(i).bits |= EXTRACTED;
            }
            let raw = hasher.finish();
            row.check(record_path, &crate::meta::b64url(&raw), n)
                .map_err(|m| WheelError::Usage(format!("{}: {m}", path.display())))?;
            let mut d = [0u8; 32];
            match sha {
                Some(s) => d.copy_from_slice(&s.finalize()),
                None => d.copy_from_slice(&raw),
            }
            digests.put(i, &d)
        },
    )
}

/// Writes the output RECORD row of a file (`tmp`: the spill file's
/// directory, for messages).
pub(super) fn writeln_record(
    w: &mut impl Write,
    name: &str,
    sha256: &[u8; 32],
    size: u64,
    tmp: &Path,
) -> Result<(), WheelError> {
    w.write_all(crate::meta::record_row(name, sha256, size).as_bytes())
        .map_err(|e| ioerr(tmp, "write", e))
}
