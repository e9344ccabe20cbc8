//! Wheel archives: checked extraction of an input wheel and deterministic
//! writing of output wheels (fixed order, timestamps and modes; entries
//! compressed in parallel into private single-entry archives and then
//! appended in order, so the result does not depend on the thread count).

use std::fs::{self, File};
use std::io::{self, Cursor, Read, Seek, Write};
use std::path::{Component, Path, PathBuf};

use rayon::prelude::*;
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipArchive, ZipWriter};

use crate::meta::{FileHasher, InputRecord, RecordRow};
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
const MAX_RECORD: u64 = 64 << 20;
/// Entries larger than this are compressed into a temporary file instead of memory.
const IN_MEMORY_LIMIT: u64 = 8 << 20;
/// Entries (or bytes) prepared in parallel before they are appended.
const CHUNK_ENTRIES: usize = 256;
const CHUNK_BYTES: u64 = 128 << 20;

fn zerr(path: &Path, what: &str, e: impl std::fmt::Display) -> WheelError {
    WheelError::Zip(format!("{}: {what}: {e}", path.display()))
}

fn ioerr(path: &Path, what: &'static str, e: io::Error) -> WheelError {
    WheelError::Io {
        path: path.to_path_buf(),
        what,
        error: e,
    }
}

/// One file of an input wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InEntry {
    /// Path inside the wheel (`/`-separated, validated).
    pub name: String,
    /// Index in the archive.
    pub index: usize,
    /// Uncompressed size.
    pub size: u64,
    /// Permission bits (`0o644` when the archive stores none).
    pub mode: u32,
}

/// An opened input wheel.
pub struct InputWheel {
    path: PathBuf,
    archive: ZipArchive<File>,
    /// Its files, sorted by name (directory entries left out).
    pub entries: Vec<InEntry>,
    /// Sum of the declared sizes of its entries.
    pub expanded: u64,
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
        let (_, summary) = crate::central::scan(&file, meta.len(), &LIMITS)
            .map_err(|e| WheelError::Usage(format!("{}: {e}", path.display())))?;
        let mut archive =
            ZipArchive::new(file).map_err(|e| zerr(path, "not a readable wheel", e))?;
        if archive.len() as u64 != summary.entries {
            return Err(WheelError::Usage(format!(
                "{}: the zip reader sees {} entries, the central directory holds {}",
                path.display(),
                archive.len(),
                summary.entries
            )));
        }
        let mut entries = Vec::with_capacity(archive.len());
        for i in 0..archive.len() {
            let f = archive
                .by_index_raw(i)
                .map_err(|e| zerr(path, "read entry", e))?;
            let name = f
                .name()
                .map_err(|e| zerr(path, &format!("entry {i}: name is not UTF-8"), e))?
                .to_string();
            if f.is_dir() {
                continue;
            }
            if f.is_symlink() {
                return Err(WheelError::Usage(format!(
                    "{}: entry `{name}` is a symlink (wheels cannot install symlinks)",
                    path.display()
                )));
            }
            if !is_plain_rel(&name) || f.enclosed_name().is_none() {
                return Err(WheelError::Usage(format!(
                    "{}: entry `{name}` is not a plain relative path",
                    path.display()
                )));
            }
            let mode = match f.unix_mode() {
                Some(m) if m & 0o777 != 0 => m & 0o777,
                _ => 0o644,
            };
            entries.push(InEntry {
                name,
                index: i,
                size: f.size(),
                mode,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        // The same name after decoding (e.g. CP437 and UTF-8 spellings).
        if let Some(w) = entries.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(WheelError::Usage(format!(
                "{}: entry `{}` appears more than once",
                path.display(),
                w[0].name
            )));
        }
        Ok(InputWheel {
            path: path.to_path_buf(),
            archive,
            entries,
            expanded: summary.expanded,
        })
    }

    /// The wheel file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of entry `name` (at most `limit`), `None` when absent.
    pub fn read_entry(&mut self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, WheelError> {
        let Some(e) = self.entries.iter().find(|e| e.name == name) else {
            return Ok(None);
        };
        if e.size > limit {
            return Err(WheelError::Usage(format!(
                "{}: entry `{name}` is {} bytes; at most {limit} are read",
                self.path.display(),
                e.size
            )));
        }
        let (index, size) = (e.index, e.size);
        let f = self
            .archive
            .by_index(index)
            .map_err(|er| zerr(&self.path, &format!("entry `{name}`"), er))?;
        let mut b = Vec::with_capacity(size as usize);
        f.take(size + 1)
            .read_to_end(&mut b)
            .map_err(|er| zerr(&self.path, &format!("entry `{name}`"), er))?;
        if b.len() as u64 != size {
            return Err(WheelError::Zip(format!(
                "{}: entry `{name}`: expands to a size other than the declared {size} bytes",
                self.path.display()
            )));
        }
        Ok(Some(b))
    }

    /// Extracts every file below `root` (permission bits kept), checking
    /// each against `record` (see [`InputRecord`]) as it is inflated. An
    /// entry that inflates to more than its declared size is stopped there;
    /// a size or CRC that does not match the central directory is an error.
    pub fn extract(&mut self, root: &Path, record: &mut InputRecord) -> Result<(), WheelError> {
        let mut buf = vec![0u8; 1 << 20];
        let mut dirs = std::collections::HashSet::new();
        for e in &self.entries {
            let algo = record
                .algo(&e.name)
                .map_err(|m| WheelError::Usage(format!("{}: {m}", self.path.display())))?;
            let dst = join(root, &e.name);
            if let Some(p) = dst.parent() {
                if !dirs.contains(p) {
                    fs::create_dir_all(p).map_err(|er| ioerr(p, "create directory", er))?;
                    dirs.insert(p.to_path_buf());
                }
            }
            let mut f = self
                .archive
                .by_index(e.index)
                .map_err(|er| zerr(&self.path, &format!("entry `{}`", e.name), er))?;
            let mut out = File::create(&dst).map_err(|er| ioerr(&dst, "create", er))?;
            let mut hasher = algo.map(FileHasher::new);
            let mut n = 0u64;
            loop {
                let k = f
                    .read(&mut buf)
                    .map_err(|er| zerr(&self.path, &format!("entry `{}`", e.name), er))?;
                if k == 0 {
                    break;
                }
                n += k as u64;
                if n > e.size {
                    break;
                }
                let chunk = &buf[..k];
                if let Some(h) = hasher.as_mut() {
                    h.update(chunk);
                }
                out.write_all(chunk)
                    .map_err(|er| ioerr(&dst, "write", er))?;
            }
            if n > e.size {
                return Err(WheelError::Zip(format!(
                    "{}: entry `{}`: inflates to more than the {} bytes the central directory declares (stopped there)",
                    self.path.display(),
                    e.name,
                    e.size
                )));
            }
            if n != e.size {
                return Err(WheelError::Zip(format!(
                    "{}: entry `{}`: inflates to {n} bytes, the central directory declares {}",
                    self.path.display(),
                    e.name,
                    e.size
                )));
            }
            drop(out);
            if let Some(h) = hasher {
                record
                    .check(&e.name, &h.finish_b64(), n)
                    .map_err(|m| WheelError::Usage(format!("{}: {m}", self.path.display())))?;
            }
            set_mode(&dst, e.mode)?;
        }
        Ok(())
    }
}

/// Reads the RECORD of an input (`record_path`, a wheel path) for
/// [`InputWheel::extract`].
pub fn input_record(w: &mut InputWheel, record_path: &str) -> Result<InputRecord, WheelError> {
    let text = w.read_entry(record_path, MAX_RECORD)?.ok_or_else(|| {
        WheelError::Usage(format!(
            "{}: no {record_path} (every wheel lists its files there)",
            w.path.display()
        ))
    })?;
    let text = String::from_utf8(text).map_err(|_| {
        WheelError::Usage(format!("{}: {record_path} is not UTF-8", w.path.display()))
    })?;
    InputRecord::parse(&text, record_path)
        .map_err(|m| WheelError::Usage(format!("{}: {m}", w.path.display())))
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

/// Where an output entry's bytes come from.
#[derive(Debug, Clone)]
pub enum Content {
    /// A file on disk.
    Disk(PathBuf),
    /// Bytes in memory (small generated files).
    Bytes(Vec<u8>),
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
    /// The same bytes are entry `i` of the input wheel: copied compressed as
    /// they are (only time and mode rewritten), not compressed again.
    pub raw_from_input: Option<usize>,
    /// Store instead of deflate (already-compressed data).
    pub store: bool,
}

/// How wheels are written.
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// Timestamp of every entry.
    pub time: DateTime,
    /// Deflate level (0–9).
    pub level: i64,
}

/// The DOS timestamp for `SOURCE_DATE_EPOCH` seconds (UTC), clamped to the
/// zip range 1980-01-01 … 2107-12-31; `None` gives 1980-01-01 00:00:00.
pub fn zip_time(epoch: Option<u64>) -> DateTime {
    let fallback = DateTime::default();
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
        return DateTime::from_date_and_time(2107, 12, 31, 23, 59, 58).unwrap_or(fallback);
    }
    DateTime::from_date_and_time(
        y as u16,
        m as u8,
        d as u8,
        (rem / 3600) as u8,
        ((rem % 3600) / 60) as u8,
        (rem % 60) as u8,
    )
    .unwrap_or(fallback)
}

enum Prepared {
    Raw(usize),
    Mem(Vec<u8>),
    Temp(tempfile::NamedTempFile),
}

fn file_options(e: &OutEntry, size: u64, opts: WriteOptions) -> SimpleFileOptions {
    let o = SimpleFileOptions::default()
        .last_modified_time(opts.time)
        .unix_permissions(e.mode & 0o777)
        .large_file(size >= 0xFFFF_FFFF);
    if e.store || opts.level == 0 {
        o.compression_method(CompressionMethod::Stored)
    } else {
        o.compression_method(CompressionMethod::Deflated)
            .compression_level(Some(opts.level))
    }
}

fn content_size(c: &Content) -> Result<u64, WheelError> {
    Ok(match c {
        Content::Bytes(b) => b.len() as u64,
        Content::Disk(p) => fs::metadata(p).map_err(|e| ioerr(p, "stat", e))?.len(),
    })
}

/// Streams the content through SHA-256 and, unless `sink` is `None`, into it.
fn pump(c: &Content, mut sink: Option<&mut dyn Write>) -> Result<([u8; 32], u64), WheelError> {
    let mut h = Sha256::new();
    let mut n = 0u64;
    match c {
        Content::Bytes(b) => {
            h.update(b);
            n = b.len() as u64;
            if let Some(s) = sink.as_mut() {
                s.write_all(b)
                    .map_err(|e| WheelError::Zip(format!("compress: {e}")))?;
            }
        }
        Content::Disk(p) => {
            let mut f = File::open(p).map_err(|e| ioerr(p, "open", e))?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let k = f.read(&mut buf).map_err(|e| ioerr(p, "read", e))?;
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
                n += k as u64;
                if let Some(s) = sink.as_mut() {
                    s.write_all(&buf[..k])
                        .map_err(|e| WheelError::Zip(format!("{}: compress: {e}", p.display())))?;
                }
            }
        }
    }
    Ok((h.finalize().into(), n))
}

fn single_entry<W: Write + Seek>(
    w: W,
    e: &OutEntry,
    size: u64,
    opts: WriteOptions,
) -> Result<(W, [u8; 32], u64), WheelError> {
    let mut z = ZipWriter::new(w);
    z.start_file(e.name.as_str(), file_options(e, size, opts))
        .map_err(|er| WheelError::Zip(format!("{}: {er}", e.name)))?;
    let (hash, n) = pump(&e.content, Some(&mut z))?;
    let w = z
        .finish()
        .map_err(|er| WheelError::Zip(format!("{}: {er}", e.name)))?;
    Ok((w, hash, n))
}

fn prepare(
    e: &OutEntry,
    opts: WriteOptions,
    tmp: &Path,
) -> Result<(Prepared, RecordRow), WheelError> {
    let size = content_size(&e.content)?;
    let (prep, hash, n) = match e.raw_from_input {
        Some(i) => {
            let (hash, n) = pump(&e.content, None)?;
            (Prepared::Raw(i), hash, n)
        }
        None if size <= IN_MEMORY_LIMIT => {
            let (c, hash, n) = single_entry(Cursor::new(Vec::new()), e, size, opts)?;
            (Prepared::Mem(c.into_inner()), hash, n)
        }
        None => {
            let t = tempfile::NamedTempFile::new_in(tmp)
                .map_err(|er| ioerr(tmp, "create temporary file", er))?;
            let f = t.reopen().map_err(|er| ioerr(t.path(), "open", er))?;
            let (_, hash, n) = single_entry(f, e, size, opts)?;
            (Prepared::Temp(t), hash, n)
        }
    };
    if n != size {
        return Err(WheelError::Usage(format!(
            "{}: changed while being written",
            e.name
        )));
    }
    Ok((
        prep,
        RecordRow {
            path: e.name.clone(),
            sha256: hash,
            size: n,
        },
    ))
}

/// What [`write_wheel`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// Size of the file (or of every file of the directory) in bytes.
    pub bytes: u64,
    /// Files, RECORD included.
    pub files: usize,
}

/// Writes a wheel at `out` from `entries` plus a generated RECORD at
/// `record_path`. Entries are ordered by name, those of the `.dist-info`
/// directory (`dist_info/`) last and RECORD at the very end. Runs on the
/// current rayon pool.
pub fn write_wheel(
    out: &Path,
    mut entries: Vec<OutEntry>,
    dist_info: &str,
    mut input: Option<&mut InputWheel>,
    opts: WriteOptions,
    tmp: &Path,
) -> Result<Written, WheelError> {
    let di = format!("{dist_info}/");
    entries.sort_by(|a, b| {
        (a.name.starts_with(&di), &a.name).cmp(&(b.name.starts_with(&di), &b.name))
    });
    let record_path = format!("{dist_info}/RECORD");
    let file = File::create(out).map_err(|e| ioerr(out, "create", e))?;
    let mut z = ZipWriter::new(io::BufWriter::with_capacity(1 << 20, file));
    // RECORD is built as the entries are written (no row kept per entry).
    let mut record = String::new();
    let mut files = 0usize;
    let mut i = 0;
    while i < entries.len() {
        let mut j = i;
        let mut bytes = 0u64;
        while j < entries.len() && j - i < CHUNK_ENTRIES && (j == i || bytes < CHUNK_BYTES) {
            if let Content::Disk(p) = &entries[j].content {
                bytes += fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            }
            j += 1;
        }
        let prepared: Vec<Result<(Prepared, RecordRow), WheelError>> = entries[i..j]
            .par_iter()
            .map(|e| prepare(e, opts, tmp))
            .collect();
        for (e, p) in entries[i..j].iter().zip(prepared) {
            let (p, row) = p?;
            let zfail = |er: zip::result::ZipError| zerr(out, &format!("entry `{}`", e.name), er);
            match p {
                Prepared::Raw(idx) => {
                    let inp = input.as_deref_mut().ok_or_else(|| {
                        WheelError::Usage(format!("{}: raw copy without an input wheel", e.name))
                    })?;
                    let path = inp.path.clone();
                    let f = inp
                        .archive
                        .by_index_raw(idx)
                        .map_err(|er| zerr(&path, "read entry", er))?;
                    z.raw_copy_file_touch(f, opts.time, Some(e.mode & 0o777))
                        .map_err(zfail)?;
                }
                Prepared::Mem(bytes) => {
                    let mut a = ZipArchive::new(Cursor::new(bytes)).map_err(zfail)?;
                    z.raw_copy_file(a.by_index_raw(0).map_err(zfail)?)
                        .map_err(zfail)?;
                }
                Prepared::Temp(t) => {
                    let f = t.reopen().map_err(|er| ioerr(t.path(), "open", er))?;
                    let mut a = ZipArchive::new(f).map_err(zfail)?;
                    z.raw_copy_file(a.by_index_raw(0).map_err(zfail)?)
                        .map_err(zfail)?;
                }
            }
            crate::meta::push_record_row(&mut record, &row);
            files += 1;
        }
        i = j;
    }
    crate::meta::push_record_self(&mut record, &record_path);
    let rec = OutEntry {
        name: record_path.clone(),
        content: Content::Bytes(record.into_bytes()),
        mode: 0o644,
        raw_from_input: None,
        store: false,
    };
    z.start_file(record_path.as_str(), file_options(&rec, 0, opts))
        .map_err(|e| zerr(out, "RECORD", e))?;
    pump(&rec.content, Some(&mut z))?;
    let w = z.finish().map_err(|e| zerr(out, "finish", e))?;
    w.into_inner()
        .map_err(|e| ioerr(out, "write", e.into_error()))?;
    let bytes = fs::metadata(out).map_err(|e| ioerr(out, "stat", e))?.len();
    Ok(Written {
        bytes,
        files: files + 1,
    })
}

/// Writes the same files as an installed-layout directory `out` (the
/// `--output-format directory` form), RECORD included.
pub fn write_tree(
    out: &Path,
    mut entries: Vec<OutEntry>,
    dist_info: &str,
) -> Result<Written, WheelError> {
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows = Vec::with_capacity(entries.len());
    let mut total = 0u64;
    for e in &entries {
        let dst = join(out, &e.name);
        if let Some(p) = dst.parent() {
            fs::create_dir_all(p).map_err(|er| ioerr(p, "create directory", er))?;
        }
        let mut f = File::create(&dst).map_err(|er| ioerr(&dst, "create", er))?;
        let (hash, n) = pump(&e.content, Some(&mut f))?;
        drop(f);
        set_mode(&dst, e.mode)?;
        total += n;
        rows.push(RecordRow {
            path: e.name.clone(),
            sha256: hash,
            size: n,
        });
    }
    let record_path = format!("{dist_info}/RECORD");
    let record = crate::meta::record(&rows, &record_path);
    let dst = join(out, &record_path);
    fs::write(&dst, &record).map_err(|er| ioerr(&dst, "write", er))?;
    set_mode(&dst, 0o644)?;
    Ok(Written {
        bytes: total + record.len() as u64,
        files: rows.len() + 1,
    })
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
    }
}
