//! Wheel archives without the zip crate, in memory that does not grow with
//! the number of entries beyond a few bytes each:
//!
//! - input: [`InputWheel`] reads the central-directory table of
//!   [`crate::central::scan`] (16 bytes per entry plus its name) and
//!   inflates entries with positioned reads; [`verify`] streams the input
//!   RECORD row by row and checks each file as it is inflated, keeping one
//!   bit per entry ("listed") and spilling each file's SHA-256 to a
//!   temporary file ([`Digests`]) for the output RECORDs;
//! - output: [`WheelWriter`] streams local headers and data to the wheel
//!   and spills central-directory records and RECORD rows to temporary
//!   files, appended at the end (ZIP64 where sizes, offsets or the entry
//!   count need it). Entries are compressed in parallel in chunks and
//!   written in the order given, so the result does not depend on the
//!   thread count; fixed timestamps and modes.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

use rayon::prelude::*;
use rocpack_bundle::FileIdent;
use sha2::{Digest, Sha256};

use crate::central::{self, flag, CdEntry, Directory, FileRange, Table};
use crate::meta::{FileHasher, HashAlgo};
use crate::WheelError;

/// Most entries an input wheel may have (the largest ROCm wheels hold a
/// few ten thousand files).
pub const MAX_ENTRIES: u64 = 1 << 17;
/// Most bytes one entry of an input wheel may expand to.
pub const MAX_ENTRY_EXPANDED: u64 = 16 << 30;
/// Most bytes an input wheel may expand to (sum of declared sizes).
pub const MAX_EXPANDED: u64 = 128 << 30;
/// The caps above, for [`crate::central::scan`].
pub const LIMITS: crate::central::Limits = crate::central::Limits {
    max_entries: MAX_ENTRIES,
    max_entry_bytes: MAX_ENTRY_EXPANDED,
    max_total_bytes: MAX_EXPANDED,
};
/// Largest RECORD read.
pub const MAX_RECORD: u64 = 64 << 20;
/// Entries larger than this are compressed into a temporary file instead of memory.
const IN_MEMORY_LIMIT: u64 = 8 << 20;
/// Entries (or bytes) prepared in parallel before they are appended.
const CHUNK_ENTRIES: usize = 256;
const CHUNK_BYTES: u64 = 128 << 20;
/// Bytes of an entry's start handed to the extraction choice of [`verify`].
pub const HEAD_LEN: usize = rocpack_image::HEAD_LEN;
/// [`Table`] flag: listed in RECORD (seen while verifying).
const LISTED: u16 = flag::USER1;
/// [`Table`] flag: extracted below the work root.
pub const EXTRACTED: u16 = flag::USER2;

fn ioerr(path: &Path, what: &'static str, e: io::Error) -> WheelError {
    WheelError::Io {
        path: path.to_path_buf(),
        what,
        error: e,
    }
}

fn zipmsg(path: &Path, m: impl std::fmt::Display) -> WheelError {
    WheelError::Zip(format!("{}: {m}", path.display()))
}

/// Whether `name` is a plain relative path: no empty, `.` or `..`
/// component, no backslash, not absolute.
pub fn is_plain_rel(name: &str) -> bool {
    !name.is_empty()
        && !name.contains('\\')
        && !name.contains('\0')
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// An opened input wheel: its files (directory entries left out) sorted by
/// name in a compact [`Table`].
pub struct InputWheel {
    path: PathBuf,
    file: File,
    dir: Directory,
    ident: FileIdent,
    /// Its files, sorted by name.
    pub table: Table,
    /// Sum of the declared sizes of its entries.
    pub expanded: u64,
}

impl InputWheel {
    /// Opens and checks `path`: a regular file, a zip whose central
    /// directory passes [`crate::central::scan`] (every name once, no
    /// overlapping entries, possible sizes, caps), every entry a plain
    /// relative path, no symlinks.
    pub fn open(path: &Path) -> Result<InputWheel, WheelError> {
        let file = File::open(path).map_err(|e| ioerr(path, "open", e))?;
        let meta = file.metadata().map_err(|e| ioerr(path, "stat", e))?;
        if !meta.is_file() {
            return Err(WheelError::Usage(format!(
                "{}: not a regular file",
                path.display()
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
    fn raw(&self, i: usize) -> Result<(CdEntry, u64), WheelError> {
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
struct Src<'a> {
    file: &'a File,
    dir: &'a Directory,
    path: &'a Path,
}

fn raw_at(
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
    fn inflate(
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

    fn put(&self, i: usize, d: &[u8; 32]) -> Result<(), WheelError> {
        self.file
            .write_all_at(d, i as u64 * 32)
            .map_err(|e| ioerr(&self.path, "write digest", e))
    }

    fn get(&self, i: usize) -> Result<[u8; 32], WheelError> {
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

/// Joins a validated `/`-separated relative path onto `base`.
pub fn join(base: &Path, rel: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in rel.split('/') {
        p.push(c);
    }
    p
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), WheelError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o777))
        .map_err(|e| ioerr(path, "set permissions", e))
}

/// An MS-DOS timestamp (the zip entry time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DosTime {
    /// Date: year-1980 << 9 | month << 5 | day.
    pub date: u16,
    /// Time: hour << 11 | minute << 5 | second / 2.
    pub time: u16,
}

impl Default for DosTime {
    /// 1980-01-01 00:00:00.
    fn default() -> Self {
        DosTime {
            date: (1 << 5) | 1,
            time: 0,
        }
    }
}

impl DosTime {
    fn new(y: u16, mo: u16, d: u16, h: u16, mi: u16, s: u16) -> DosTime {
        DosTime {
            date: ((y - 1980) << 9) | (mo << 5) | d,
            time: (h << 11) | (mi << 5) | (s / 2),
        }
    }
    /// Year.
    pub fn year(&self) -> u16 {
        1980 + (self.date >> 9)
    }
    /// Month (1–12).
    pub fn month(&self) -> u16 {
        (self.date >> 5) & 15
    }
    /// Day (1–31).
    pub fn day(&self) -> u16 {
        self.date & 31
    }
    /// Hour.
    pub fn hour(&self) -> u16 {
        self.time >> 11
    }
    /// Minute.
    pub fn minute(&self) -> u16 {
        (self.time >> 5) & 63
    }
    /// Second (even).
    pub fn second(&self) -> u16 {
        (self.time & 31) * 2
    }
}

/// The DOS timestamp for `SOURCE_DATE_EPOCH` seconds (UTC), clamped to the
/// zip range 1980-01-01 … 2107-12-31; `None` gives 1980-01-01 00:00:00.
pub fn zip_time(epoch: Option<u64>) -> DosTime {
    let fallback = DosTime::default();
    let Some(secs) = epoch else {
        return fallback;
    };
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    if y < 1980 {
        return fallback;
    }
    if y > 2107 {
        return DosTime::new(2107, 12, 31, 23, 59, 58);
    }
    DosTime::new(
        y as u16,
        m as u16,
        d as u16,
        (rem / 3600) as u16,
        ((rem % 3600) / 60) as u16,
        (rem % 60) as u16,
    )
}

/// Where an output entry's bytes come from.
#[derive(Debug, Clone)]
pub enum Content {
    /// A file on disk.
    Disk(PathBuf),
    /// Bytes in memory (small generated files).
    Bytes(Vec<u8>),
    /// File `i` of the input wheel's table: copied compressed as it is
    /// (only time and mode rewritten), not compressed again.
    Input(usize),
}

/// One file of an output wheel.
#[derive(Debug, Clone)]
pub struct OutEntry {
    /// Path inside the wheel.
    pub name: String,
    /// Its bytes.
    pub content: Content,
    /// Permission bits.
    pub mode: u32,
    /// Store instead of deflate (already-compressed data).
    pub store: bool,
}

/// How wheels are written.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// Timestamp of every entry.
    pub time: DosTime,
    /// Deflate level (0–9).
    pub level: i64,
}

/// What a writer wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// Size of the file (or of every file of the directory) in bytes.
    pub bytes: u64,
    /// Files, RECORD included.
    pub files: usize,
}

/// The input an output reads [`Content::Input`] entries from.
#[derive(Clone, Copy)]
pub struct InputRef<'a> {
    /// The wheel.
    pub wheel: &'a InputWheel,
    /// Its files' SHA-256 (from [`verify`]).
    pub digests: &'a Digests,
}

/// Something entries are added to in order: a wheel file or a directory.
pub trait Sink {
    /// Adds one entry (never RECORD: it is generated by `finish`).
    fn add(&mut self, e: OutEntry) -> Result<(), WheelError>;
    /// Writes RECORD and closes.
    fn finish(self: Box<Self>) -> Result<Written, WheelError>;
}

/// Orders entries as wheels are written: by name, those of the
/// `.dist-info` directory (`dist_info/`) last.
pub fn sort_entries(entries: &mut [OutEntry], dist_info: &str) {
    let di = format!("{dist_info}/");
    entries.sort_by(|a, b| {
        (a.name.starts_with(&di), &a.name).cmp(&(b.name.starts_with(&di), &b.name))
    });
}

/// Opens a writer of the given format at `out`.
pub fn sink<'a>(
    directory: bool,
    out: &Path,
    dist_info: &str,
    input: Option<InputRef<'a>>,
    opts: WriteOptions,
    tmp: &Path,
) -> Result<Box<dyn Sink + 'a>, WheelError> {
    Ok(if directory {
        Box::new(TreeWriter::new(out, dist_info, input)?)
    } else {
        Box::new(WheelWriter::new(out, dist_info, input, opts, tmp)?)
    })
}

/// Writes `entries` (sorted here) as one wheel or directory.
pub fn write_all(
    mut s: Box<dyn Sink + '_>,
    mut entries: Vec<OutEntry>,
    dist_info: &str,
) -> Result<Written, WheelError> {
    sort_entries(&mut entries, dist_info);
    for e in entries {
        s.add(e)?;
    }
    s.finish()
}

const U32_MAX: u64 = 0xFFFF_FFFF;
const LFH_SIG: u32 = 0x0403_4b50;
const CDH_SIG: u32 = 0x0201_4b50;

/// Compressed bytes of one entry, ready to append.
enum Data {
    Mem(Vec<u8>),
    Temp(File),
    /// `compressed` bytes at this offset of the input wheel.
    Input(u64),
}

struct Ready {
    name: String,
    mode: u32,
    method: u16,
    crc: u32,
    compressed: u64,
    size: u64,
    sha256: [u8; 32],
    data: Data,
}

/// Counts, hashes (SHA-256, CRC-32) and forwards bytes.
struct Tee<W: Write> {
    inner: W,
    sha: Sha256,
    crc: flate2::Crc,
    n: u64,
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(b)?;
        self.sha.update(&b[..k]);
        self.crc.update(&b[..k]);
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn content_size(c: &Content) -> Result<u64, WheelError> {
    Ok(match c {
        Content::Bytes(b) => b.len() as u64,
        Content::Disk(p) => fs::metadata(p).map_err(|e| ioerr(p, "stat", e))?.len(),
        Content::Input(_) => 0,
    })
}

/// Streams disk or memory content into `w`.
fn pump(c: &Content, w: &mut dyn Write) -> Result<(), WheelError> {
    match c {
        Content::Bytes(b) => w
            .write_all(b)
            .map_err(|e| WheelError::Zip(format!("compress: {e}"))),
        Content::Disk(p) => {
            let mut f = File::open(p).map_err(|e| ioerr(p, "open", e))?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let k = f.read(&mut buf).map_err(|e| ioerr(p, "read", e))?;
                if k == 0 {
                    return Ok(());
                }
                w.write_all(&buf[..k])
                    .map_err(|e| WheelError::Zip(format!("{}: compress: {e}", p.display())))?;
            }
        }
        Content::Input(_) => Err(WheelError::Usage("internal: pump of an input entry".into())),
    }
}

/// Compresses (or stores) `c` into `out`: (method, crc, size, sha256).
fn encode<W: Write>(
    c: &Content,
    out: W,
    store: bool,
    level: i64,
) -> Result<(W, u16, u32, u64, [u8; 32]), WheelError> {
    let zfail = |e: io::Error| WheelError::Zip(format!("compress: {e}"));
    if store || level == 0 {
        let mut t = Tee {
            inner: out,
            sha: Sha256::new(),
            crc: flate2::Crc::new(),
            n: 0,
        };
        pump(c, &mut t)?;
        t.flush().map_err(zfail)?;
        Ok((t.inner, 0, t.crc.sum(), t.n, t.sha.finalize().into()))
    } else {
        let enc = flate2::write::DeflateEncoder::new(out, flate2::Compression::new(level as u32));
        let mut t = Tee {
            inner: enc,
            sha: Sha256::new(),
            crc: flate2::Crc::new(),
            n: 0,
        };
        pump(c, &mut t)?;
        let out = t.inner.finish().map_err(zfail)?;
        Ok((out, 8, t.crc.sum(), t.n, t.sha.finalize().into()))
    }
}

/// Compresses (or looks up) one entry; `spill` compresses into a
/// temporary file whatever the size (RECORD, whose size grows with the
/// entry count).
fn prepare(
    e: OutEntry,
    input: Option<InputRef<'_>>,
    opts: WriteOptions,
    tmp: &Path,
    spill: bool,
) -> Result<Ready, WheelError> {
    if let Content::Input(i) = e.content {
        let inp = input.ok_or_else(|| {
            WheelError::Usage(format!("{}: raw copy without an input wheel", e.name))
        })?;
        let (cd, off) = inp.wheel.raw(i)?;
        return Ok(Ready {
            name: e.name,
            mode: e.mode,
            method: cd.method,
            crc: cd.crc,
            compressed: cd.compressed,
            size: cd.size,
            sha256: inp.digests.get(i)?,
            data: Data::Input(off),
        });
    }
    let size = content_size(&e.content)?;
    let (data, method, crc, n, sha) = if size <= IN_MEMORY_LIMIT && !spill {
        let (v, m, c, n, h) = encode(&e.content, Vec::new(), e.store, opts.level)?;
        (Data::Mem(v), m, c, n, h)
    } else {
        let f = tempfile::tempfile_in(tmp).map_err(|er| ioerr(tmp, "create temporary file", er))?;
        let (w, m, c, n, h) = encode(&e.content, BufWriter::new(f), e.store, opts.level)?;
        let f = w
            .into_inner()
            .map_err(|er| ioerr(tmp, "write", er.into_error()))?;
        (Data::Temp(f), m, c, n, h)
    };
    if n != size {
        return Err(WheelError::Usage(format!(
            "{}: changed while being written",
            e.name
        )));
    }
    let compressed = match &data {
        Data::Mem(v) => v.len() as u64,
        Data::Temp(f) => f.metadata().map_err(|er| ioerr(tmp, "stat", er))?.len(),
        Data::Input(_) => 0,
    };
    Ok(Ready {
        name: e.name,
        mode: e.mode,
        method,
        crc,
        compressed,
        size: n,
        sha256: sha,
        data,
    })
}

/// A wheel written entry by entry: local headers and data go straight to
/// the file, central-directory records and RECORD rows to temporary files
/// appended by [`Sink::finish`]. Memory does not depend on the number of
/// entries.
pub struct WheelWriter<'a> {
    out: PathBuf,
    w: BufWriter<File>,
    pos: u64,
    cd: BufWriter<File>,
    count: u64,
    record: BufWriter<tempfile::NamedTempFile>,
    record_path: String,
    input: Option<InputRef<'a>>,
    opts: WriteOptions,
    tmp: PathBuf,
    pending: Vec<OutEntry>,
    pending_bytes: u64,
}

impl<'a> WheelWriter<'a> {
    /// Creates `out`.
    pub fn new(
        out: &Path,
        dist_info: &str,
        input: Option<InputRef<'a>>,
        opts: WriteOptions,
        tmp: &Path,
    ) -> Result<WheelWriter<'a>, WheelError> {
        let file = File::create(out).map_err(|e| ioerr(out, "create", e))?;
        let cd = tempfile::tempfile_in(tmp).map_err(|e| ioerr(tmp, "create temporary file", e))?;
        let record = tempfile::NamedTempFile::new_in(tmp)
            .map_err(|e| ioerr(tmp, "create temporary file", e))?;
        Ok(WheelWriter {
            out: out.to_path_buf(),
            w: BufWriter::with_capacity(1 << 20, file),
            pos: 0,
            cd: BufWriter::with_capacity(1 << 16, cd),
            count: 0,
            record: BufWriter::with_capacity(1 << 16, record),
            record_path: format!("{dist_info}/RECORD"),
            input,
            opts,
            tmp: tmp.to_path_buf(),
            pending: Vec::new(),
            pending_bytes: 0,
        })
    }

    fn flush_pending(&mut self) -> Result<(), WheelError> {
        let jobs = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let (input, opts, tmp) = (self.input, self.opts, self.tmp.clone());
        let ready: Vec<Result<Ready, WheelError>> = jobs
            .into_par_iter()
            .map(|e| prepare(e, input, opts, &tmp, false))
            .collect();
        for r in ready {
            let r = r?;
            writeln_record(&mut self.record, &r, &self.tmp)?;
            self.append(r)?;
        }
        Ok(())
    }

    fn append(&mut self, r: Ready) -> Result<(), WheelError> {
        let out = self.out.clone();
        let werr = |e: io::Error| ioerr(&out, "write", e);
        let name = r.name.as_bytes();
        let flags: u16 = if r.name.is_ascii() { 0 } else { 0x800 };
        let zip64 = r.size >= U32_MAX || r.compressed >= U32_MAX;
        let version: u16 = if zip64 || self.pos >= U32_MAX {
            45
        } else if r.method == 8 {
            20
        } else {
            10
        };
        let t = self.opts.time;
        // Local header.
        let mut h = Vec::with_capacity(30 + name.len() + 20);
        h.extend_from_slice(&LFH_SIG.to_le_bytes());
        h.extend_from_slice(&version.to_le_bytes());
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&r.method.to_le_bytes());
        h.extend_from_slice(&t.time.to_le_bytes());
        h.extend_from_slice(&t.date.to_le_bytes());
        h.extend_from_slice(&r.crc.to_le_bytes());
        let sat = |v: u64| if zip64 { u32::MAX } else { v as u32 };
        h.extend_from_slice(&sat(r.compressed).to_le_bytes());
        h.extend_from_slice(&sat(r.size).to_le_bytes());
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&(if zip64 { 20u16 } else { 0 }).to_le_bytes());
        h.extend_from_slice(name);
        if zip64 {
            h.extend_from_slice(&1u16.to_le_bytes());
            h.extend_from_slice(&16u16.to_le_bytes());
            h.extend_from_slice(&r.size.to_le_bytes());
            h.extend_from_slice(&r.compressed.to_le_bytes());
        }
        let header = self.pos;
        self.w.write_all(&h).map_err(werr)?;
        self.pos += h.len() as u64;
        // Data.
        match r.data {
            Data::Mem(v) => self.w.write_all(&v).map_err(werr)?,
            Data::Temp(mut f) => {
                f.seek(SeekFrom::Start(0)).map_err(werr)?;
                let n = io::copy(&mut f.take(r.compressed), &mut self.w).map_err(werr)?;
                if n != r.compressed {
                    return Err(WheelError::Zip(format!(
                        "{}: temporary file shrank",
                        r.name
                    )));
                }
            }
            Data::Input(off) => {
                let inp = self.input.ok_or_else(|| {
                    WheelError::Usage(format!("{}: raw copy without an input wheel", r.name))
                })?;
                let mut src = FileRange {
                    f: &inp.wheel.file,
                    pos: off,
                    end: off + r.compressed,
                };
                let n = io::copy(&mut src, &mut self.w).map_err(werr)?;
                if n != r.compressed {
                    return Err(WheelError::Usage(format!(
                        "{}: entry `{}` is shorter than its central directory says (the wheel changed while it was read)",
                        inp.wheel.path.display(),
                        r.name
                    )));
                }
            }
        }
        self.pos += r.compressed;
        // Central directory record, spilled.
        let mut x = Vec::new();
        for v in [r.size, r.compressed, header] {
            if v >= U32_MAX {
                x.extend_from_slice(&v.to_le_bytes());
            }
        }
        let mut c = Vec::with_capacity(46 + name.len() + 28);
        let cd_version = if x.is_empty() { version } else { 45 };
        c.extend_from_slice(&CDH_SIG.to_le_bytes());
        c.extend_from_slice(&(0x0300 | cd_version).to_le_bytes());
        c.extend_from_slice(&cd_version.to_le_bytes());
        c.extend_from_slice(&flags.to_le_bytes());
        c.extend_from_slice(&r.method.to_le_bytes());
        c.extend_from_slice(&t.time.to_le_bytes());
        c.extend_from_slice(&t.date.to_le_bytes());
        c.extend_from_slice(&r.crc.to_le_bytes());
        let sat = |v: u64| v.min(U32_MAX) as u32;
        c.extend_from_slice(&sat(r.compressed).to_le_bytes());
        c.extend_from_slice(&sat(r.size).to_le_bytes());
        c.extend_from_slice(&(name.len() as u16).to_le_bytes());
        let xlen = if x.is_empty() { 0 } else { 4 + x.len() };
        c.extend_from_slice(&(xlen as u16).to_le_bytes());
        c.extend_from_slice(&0u16.to_le_bytes()); // comment
        c.extend_from_slice(&0u16.to_le_bytes()); // disk
        c.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        c.extend_from_slice(&((0o100_000 | (r.mode & 0o777)) << 16).to_le_bytes());
        c.extend_from_slice(&sat(header).to_le_bytes());
        c.extend_from_slice(name);
        if !x.is_empty() {
            c.extend_from_slice(&1u16.to_le_bytes());
            c.extend_from_slice(&(x.len() as u16).to_le_bytes());
            c.extend_from_slice(&x);
        }
        self.cd
            .write_all(&c)
            .map_err(|e| ioerr(&self.tmp, "write", e))?;
        self.count += 1;
        Ok(())
    }
}

fn writeln_record(w: &mut impl Write, r: &Ready, tmp: &Path) -> Result<(), WheelError> {
    w.write_all(crate::meta::record_row(&r.name, &r.sha256, r.size).as_bytes())
        .map_err(|e| ioerr(tmp, "write", e))
}

impl Sink for WheelWriter<'_> {
    fn add(&mut self, e: OutEntry) -> Result<(), WheelError> {
        if let Content::Disk(p) = &e.content {
            self.pending_bytes += fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        }
        self.pending.push(e);
        if self.pending.len() >= CHUNK_ENTRIES || self.pending_bytes >= CHUNK_BYTES {
            self.flush_pending()?;
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Written, WheelError> {
        let mut this = *self;
        this.flush_pending()?;
        let tmp = this.tmp.clone();
        let werr = |e: io::Error| ioerr(&tmp, "write", e);
        let mut record = std::mem::replace(
            &mut this.record,
            BufWriter::new(
                tempfile::NamedTempFile::new_in(&tmp)
                    .map_err(|e| ioerr(&tmp, "create temporary file", e))?,
            ),
        );
        record
            .write_all(format!("{},,\n", crate::meta::csv_field(&this.record_path)).as_bytes())
            .map_err(werr)?;
        let record = record.into_inner().map_err(|e| werr(e.into_error()))?;
        let r = prepare(
            OutEntry {
                name: this.record_path.clone(),
                content: Content::Disk(record.path().to_path_buf()),
                mode: 0o644,
                store: false,
            },
            None,
            this.opts,
            &tmp,
            true,
        )?;
        this.append(r)?;
        // Central directory, then the end records.
        let cd_start = this.pos;
        let mut cd = this.cd.into_inner().map_err(|e| werr(e.into_error()))?;
        let cd_len = cd.stream_position().map_err(werr)?;
        cd.seek(SeekFrom::Start(0)).map_err(werr)?;
        let out = this.out.clone();
        let oerr = |e: io::Error| ioerr(&out, "write", e);
        let n = io::copy(&mut cd, &mut this.w).map_err(oerr)?;
        if n != cd_len {
            return Err(WheelError::Zip(format!(
                "{}: central directory spill shrank",
                out.display()
            )));
        }
        this.pos += cd_len;
        let count = this.count;
        let mut e = Vec::new();
        if count >= 0xFFFF || cd_len >= U32_MAX || cd_start >= U32_MAX {
            let eocd64 = this.pos;
            e.extend_from_slice(&0x0606_4b50u32.to_le_bytes());
            e.extend_from_slice(&44u64.to_le_bytes());
            e.extend_from_slice(&(0x0300u16 | 45).to_le_bytes());
            e.extend_from_slice(&45u16.to_le_bytes());
            e.extend_from_slice(&0u32.to_le_bytes());
            e.extend_from_slice(&0u32.to_le_bytes());
            e.extend_from_slice(&count.to_le_bytes());
            e.extend_from_slice(&count.to_le_bytes());
            e.extend_from_slice(&cd_len.to_le_bytes());
            e.extend_from_slice(&cd_start.to_le_bytes());
            e.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
            e.extend_from_slice(&0u32.to_le_bytes());
            e.extend_from_slice(&eocd64.to_le_bytes());
            e.extend_from_slice(&1u32.to_le_bytes());
        }
        let c16 = count.min(0xFFFF) as u16;
        e.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
        e.extend_from_slice(&0u16.to_le_bytes());
        e.extend_from_slice(&0u16.to_le_bytes());
        e.extend_from_slice(&c16.to_le_bytes());
        e.extend_from_slice(&c16.to_le_bytes());
        e.extend_from_slice(&(cd_len.min(U32_MAX) as u32).to_le_bytes());
        e.extend_from_slice(&(cd_start.min(U32_MAX) as u32).to_le_bytes());
        e.extend_from_slice(&0u16.to_le_bytes());
        this.w.write_all(&e).map_err(oerr)?;
        this.pos += e.len() as u64;
        this.w.into_inner().map_err(|e| oerr(e.into_error()))?;
        Ok(Written {
            bytes: this.pos,
            files: count as usize,
        })
    }
}

/// The same files as an installed-layout directory (the
/// `--output-format directory` form), RECORD streamed as files are written.
pub struct TreeWriter<'a> {
    out: PathBuf,
    input: Option<InputRef<'a>>,
    record: BufWriter<File>,
    record_path: String,
    record_dst: PathBuf,
    total: u64,
    files: usize,
    last_dir: Option<PathBuf>,
}

impl<'a> TreeWriter<'a> {
    /// Creates the directory `out`.
    pub fn new(
        out: &Path,
        dist_info: &str,
        input: Option<InputRef<'a>>,
    ) -> Result<TreeWriter<'a>, WheelError> {
        let record_path = format!("{dist_info}/RECORD");
        let record_dst = join(out, &record_path);
        if let Some(p) = record_dst.parent() {
            fs::create_dir_all(p).map_err(|e| ioerr(p, "create directory", e))?;
        }
        let f = File::create(&record_dst).map_err(|e| ioerr(&record_dst, "create", e))?;
        Ok(TreeWriter {
            out: out.to_path_buf(),
            input,
            record: BufWriter::new(f),
            record_path,
            record_dst,
            total: 0,
            files: 0,
            last_dir: None,
        })
    }
}

impl Sink for TreeWriter<'_> {
    fn add(&mut self, e: OutEntry) -> Result<(), WheelError> {
        let dst = join(&self.out, &e.name);
        if let Some(p) = dst.parent() {
            if self.last_dir.as_deref() != Some(p) {
                fs::create_dir_all(p).map_err(|er| ioerr(p, "create directory", er))?;
                self.last_dir = Some(p.to_path_buf());
            }
        }
        let f = File::create(&dst).map_err(|er| ioerr(&dst, "create", er))?;
        let mut t = Tee {
            inner: BufWriter::with_capacity(1 << 16, f),
            sha: Sha256::new(),
            crc: flate2::Crc::new(),
            n: 0,
        };
        match &e.content {
            Content::Input(i) => {
                let inp = self.input.ok_or_else(|| {
                    WheelError::Usage(format!("{}: raw copy without an input wheel", e.name))
                })?;
                inp.wheel.inflate(*i, |c| {
                    t.write_all(c).map_err(|er| ioerr(&dst, "write", er))
                })?;
            }
            c => pump(c, &mut t)?,
        }
        t.flush().map_err(|er| ioerr(&dst, "write", er))?;
        let Tee { inner, sha, n, .. } = t;
        drop(inner);
        let sha: [u8; 32] = sha.finalize().into();
        set_mode(&dst, e.mode)?;
        self.total += n;
        self.files += 1;
        self.record
            .write_all(crate::meta::record_row(&e.name, &sha, n).as_bytes())
            .map_err(|er| ioerr(&self.record_dst, "write", er))?;
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Written, WheelError> {
        let mut this = *self;
        let row = format!("{},,\n", crate::meta::csv_field(&this.record_path));
        this.record
            .write_all(row.as_bytes())
            .map_err(|er| ioerr(&this.record_dst, "write", er))?;
        let f = this
            .record
            .into_inner()
            .map_err(|er| ioerr(&this.record_dst, "write", er.into_error()))?;
        let len = f
            .metadata()
            .map_err(|er| ioerr(&this.record_dst, "stat", er))?
            .len();
        drop(f);
        set_mode(&this.record_dst, 0o644)?;
        Ok(Written {
            bytes: this.total + len,
            files: this.files + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths() {
        assert!(is_plain_rel("a/b.py"));
        assert!(!is_plain_rel("/a"));
        assert!(!is_plain_rel("a/../b"));
        assert!(!is_plain_rel("a//b"));
        assert!(!is_plain_rel("./a"));
        assert!(!is_plain_rel("a\\b"));
        assert!(!is_plain_rel(""));
    }

    #[test]
    fn epoch_to_dos_time() {
        let t = zip_time(Some(1_700_000_000)); // 2023-11-14 22:13:20 UTC
        assert_eq!((t.year(), t.month(), t.day()), (2023, 11, 14));
        assert_eq!((t.hour(), t.minute(), t.second()), (22, 13, 20));
        let t = zip_time(Some(0));
        assert_eq!(t.year(), 1980);
        let t = zip_time(None);
        assert_eq!((t.year(), t.month(), t.day()), (1980, 1, 1));
        let t = zip_time(Some(951_782_400)); // 2000-02-29
        assert_eq!((t.year(), t.month(), t.day()), (2000, 2, 29));
        let t = zip_time(Some(u64::MAX / 4));
        assert_eq!((t.year(), t.month(), t.day()), (2107, 12, 31));
    }
}
