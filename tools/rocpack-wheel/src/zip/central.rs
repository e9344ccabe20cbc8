//! The central directory of an input wheel, read on our own (no zip crate:
//! it keys entries by name, so a second entry of the same name silently
//! replaces the first, trusts every offset and size, and keeps about 200
//! bytes per entry). These checks are made here, before anything is
//! extracted:
//!
//! - every name appears once (after decoding: UTF-8 when flagged, CP437
//!   otherwise, as Python's `zipfile` and so pip read them);
//! - the local header of each entry names the same file as its central
//!   directory record (as Python's `zipfile`, and so pip, requires);
//! - no two entries share bytes: the overlapping-entry zip bomb (many names
//!   whose data all ends in one huge deflate stream) is refused here;
//! - declared sizes are possible for the bytes present (a stored entry holds
//!   what it declares; deflate expands at most [`DEFLATE_MAX_RATIO`]:1), so
//!   the whole wheel cannot declare more than that ratio times its size;
//! - entry count and expansion stay under the caps ([`Limits`]).
//!
//! Reads are bounded by the file size: the end record is searched in the
//! last 64 KiB, the central directory is streamed (its size is checked
//! against the file first) and each local header is one positioned read.
//!
//! Memory: the result ([`Table`]) keeps 16 bytes per entry plus its name,
//! in one arena; everything else about an entry is read again from its
//! central directory record when it is needed ([`record_at`]).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

/// Largest expansion of deflate: a stream of maximal-length matches
/// decodes 258 bytes from about two bits, 1032:1 at best.
pub const DEFLATE_MAX_RATIO: u64 = 1032;
/// Slack added to the ratio bound for tiny streams (block headers).
const DEFLATE_SLACK: u64 = 1024;
/// Longest entry name accepted (Linux `PATH_MAX`: a longer path cannot be
/// installed).
pub const MAX_NAME: usize = 4096;

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD64_LOCATOR_SIG: u32 = 0x0706_4b50;
const EOCD64_SIG: u32 = 0x0606_4b50;
const CDH_SIG: u32 = 0x0201_4b50;
const LFH_SIG: u32 = 0x0403_4b50;
const EOCD_LEN: u64 = 22;
const LOCATOR_LEN: u64 = 20;
const EOCD64_LEN: u64 = 56;
const CDH_LEN: usize = 46;
const LFH_LEN: usize = 30;

/// Caps of a wheel's central directory.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most entries (directories included).
    pub max_entries: u64,
    /// Most bytes one entry may expand to.
    pub max_entry_bytes: u64,
    /// Most bytes all entries together may expand to.
    pub max_total_bytes: u64,
}

/// One record of the central directory (name as stored, in bytes).
#[derive(Debug, Clone, Default)]
pub struct CdEntry {
    /// The name as stored (bytes).
    pub name: Vec<u8>,
    /// Version made by (high byte: host system, 3 = Unix).
    pub made_by: u16,
    /// General purpose flags.
    pub flags: u16,
    /// Compression method.
    pub method: u16,
    /// CRC-32 of the uncompressed bytes.
    pub crc: u32,
    /// Compressed size.
    pub compressed: u64,
    /// Uncompressed (declared) size.
    pub size: u64,
    /// External attributes (Unix mode in the high 16 bits).
    pub external: u32,
    /// Offset of the local header (archive offset applied).
    pub header: u64,
    /// The extra field (buffer reused from record to record).
    extra: Vec<u8>,
}

impl CdEntry {
    /// The name for messages (lossy UTF-8).
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    fn is_dir(&self) -> bool {
        self.name.ends_with(b"/")
    }

    /// The Unix mode, when the entry was made on Unix and has one.
    pub fn unix_mode(&self) -> Option<u32> {
        let m = self.external >> 16;
        (self.made_by >> 8 == 3 && m != 0).then_some(m)
    }
}

/// What [`scan`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Entries in the central directory.
    pub entries: u64,
    /// Sum of declared sizes.
    pub expanded: u64,
}

/// Flag bits kept with each [`Rec`] (above the permission bits).
pub mod flag {
    /// A directory entry (name ends with `/`).
    pub const DIR: u16 = 1 << 15;
    /// A symbolic link (Unix mode `S_IFLNK`).
    pub const LINK: u16 = 1 << 14;
    /// Free for the table's user.
    pub const USER1: u16 = 1 << 13;
    /// Free for the table's user.
    pub const USER2: u16 = 1 << 12;
}

/// One entry of a [`Table`]: 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rec {
    /// Offset of its central directory record in the file (`u64::MAX`
    /// when the table was not built from a zip).
    pub cd: u64,
    name: u32,
    len: u16,
    /// Permission bits (`0o777`) and [`flag`]s.
    pub bits: u16,
}

impl Rec {
    /// The permission bits.
    pub fn mode(&self) -> u32 {
        u32::from(self.bits & 0o777)
    }
}

/// File names and where their records are, sorted by name: the names in
/// one arena, 16 bytes per entry besides.
#[derive(Debug, Default)]
pub struct Table {
    names: Vec<u8>,
    recs: Vec<Rec>,
}

impl Table {
    /// An empty table.
    pub fn new() -> Table {
        Table::default()
    }

    /// Appends an entry (the table is unsorted until [`Table::sort`]).
    pub fn push(&mut self, name: &str, cd: u64, bits: u16) -> Result<(), String> {
        if name.len() > MAX_NAME {
            return Err(format!(
                "entry `{}…`: its name is {} bytes long; at most {MAX_NAME} are accepted",
                name.chars().take(64).collect::<String>(),
                name.len()
            ));
        }
        let at = u32::try_from(self.names.len())
            .map_err(|_| "entry names add up to more than 4 GiB".to_string())?;
        self.names.extend_from_slice(name.as_bytes());
        self.recs.push(Rec {
            cd,
            name: at,
            len: name.len() as u16,
            bits,
        });
        Ok(())
    }

    /// Sorts by name and refuses a name that appears twice.
    pub fn sort(&mut self) -> Result<(), String> {
        let names = &self.names;
        let key = |r: &Rec| &names[r.name as usize..r.name as usize + usize::from(r.len)];
        self.recs.sort_unstable_by(|a, b| key(a).cmp(key(b)));
        let mut i = 0;
        while i < self.recs.len() {
            let n = key(&self.recs[i]);
            let same = self.recs[i..].iter().take_while(|r| key(r) == n).count();
            if same > 1 {
                return Err(format!(
                    "entry `{}` appears {same} times in the central directory (zip readers keep one copy or another: which bytes would be installed is undefined)",
                    String::from_utf8_lossy(n)
                ));
            }
            i += same;
        }
        Ok(())
    }

    /// Keeps the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&Rec) -> bool) {
        self.recs.retain(|r| keep(r));
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// Entry `i`.
    pub fn rec(&self, i: usize) -> &Rec {
        &self.recs[i]
    }

    /// Entry `i`, to change its flags.
    pub fn rec_mut(&mut self, i: usize) -> &mut Rec {
        &mut self.recs[i]
    }

    /// The name of entry `i`.
    pub fn name(&self, i: usize) -> &str {
        let r = &self.recs[i];
        let b = &self.names[r.name as usize..r.name as usize + usize::from(r.len)];
        // Names are pushed as `&str`.
        std::str::from_utf8(b).unwrap_or_default()
    }

    /// Index of `name` (after [`Table::sort`]).
    pub fn find(&self, name: &str) -> Option<usize> {
        self.recs
            .binary_search_by(|r| {
                self.names[r.name as usize..r.name as usize + usize::from(r.len)]
                    .cmp(name.as_bytes())
            })
            .ok()
    }

    /// Indices of the names starting with `prefix` (after [`Table::sort`]).
    pub fn range_with_prefix(&self, prefix: &str) -> std::ops::Range<usize> {
        let start = self
            .recs
            .partition_point(|r| self.key(r) < prefix.as_bytes());
        let end = start
            + self.recs[start..]
                .iter()
                .take_while(|r| self.key(r).starts_with(prefix.as_bytes()))
                .count();
        start..end
    }

    fn key(&self, r: &Rec) -> &[u8] {
        &self.names[r.name as usize..r.name as usize + usize::from(r.len)]
    }
}

/// CP437 (the zip default when the UTF-8 flag is clear), bytes 0x80–0xFF.
const CP437_HIGH: &str = "ÇüéâäàåçêëèïîìÄÅÉæÆôöòûùÿÖÜ¢£¥₧ƒáíóúñÑªº¿⌐¬½¼¡«»░▒▓│┤╡╢╖╕╣║╗╝╜╛┐└┴┬├─┼╞╟╚╔╩╦╠═╬╧╨╤╥╙╘╒╓╫╪┘┌█▄▌▐▀αßΓπΣσµτΦΘΩδ∞φε∩≡±≥≤⌠⌡÷≈°∙·√ⁿ²■\u{a0}";

/// The name as a zip reader decodes it: UTF-8 when flag bit 11 is set,
/// CP437 otherwise.
pub fn decode_name(raw: &[u8], flags: u16) -> Result<String, String> {
    if flags & 0x800 != 0 || raw.is_ascii() {
        return String::from_utf8(raw.to_vec()).map_err(|_| {
            format!(
                "entry `{}`: its name is flagged UTF-8 but is not",
                String::from_utf8_lossy(raw)
            )
        });
    }
    let high: Vec<char> = CP437_HIGH.chars().collect();
    Ok(raw
        .iter()
        .map(|&b| {
            if b < 0x80 {
                char::from(b)
            } else {
                high[usize::from(b - 0x80)]
            }
        })
        .collect())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_le_bytes(a)
    })
}

fn read_at(f: &File, at: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, at)
        .map_err(|e| format!("read {len} bytes at offset {at}: {e}"))?;
    Ok(b)
}

/// Where the central directory is: (start, size, declared entry count,
/// whether a ZIP64 end record declared it, bytes prepended to the archive).
fn locate(f: &File, len: u64) -> Result<(u64, u64, u64, bool, u64), String> {
    if len < EOCD_LEN {
        return Err(format!("{len} bytes: too short to be a zip archive"));
    }
    let tail_len = len.min(EOCD_LEN + u64::from(u16::MAX));
    let tail = read_at(f, len - tail_len, tail_len as usize)?;
    // The last end record whose comment fits in the file.
    let pos = (0..=tail.len() - EOCD_LEN as usize)
        .rev()
        .find(|&i| {
            u32_at(&tail, i) == EOCD_SIG
                && i + EOCD_LEN as usize + usize::from(u16_at(&tail, i + 20)) <= tail.len()
        })
        .ok_or("no end of central directory record: not a zip archive")?;
    let eocd = len - tail_len + pos as u64;
    let e = &tail[pos..];
    if u16_at(e, 4) != 0 || u16_at(e, 6) != 0 {
        return Err("a multi-volume archive (wheels are one file)".into());
    }
    let (mut count, mut size, mut offset) = (
        u64::from(u16_at(e, 10)),
        u64::from(u32_at(e, 12)),
        u64::from(u32_at(e, 16)),
    );
    let mut record = eocd;
    let mut zip64 = false;
    if eocd >= LOCATOR_LEN && u32_at(&read_at(f, eocd - LOCATOR_LEN, 4)?, 0) == EOCD64_LOCATOR_SIG {
        // ZIP64: the standard 56-byte record right before the locator.
        let at = eocd
            .checked_sub(LOCATOR_LEN + EOCD64_LEN)
            .ok_or("ZIP64 end record locator without a record")?;
        let z = read_at(f, at, EOCD64_LEN as usize)?;
        if u32_at(&z, 0) != EOCD64_SIG {
            return Err("ZIP64 end record missing where its locator says".into());
        }
        if u32_at(&z, 16) != 0 || u32_at(&z, 20) != 0 {
            return Err("a multi-volume archive (wheels are one file)".into());
        }
        count = u64_at(&z, 32);
        size = u64_at(&z, 40);
        offset = u64_at(&z, 48);
        record = at;
        zip64 = true;
    }
    // Bytes prepended to the archive shift every offset (as Python's zipfile).
    let start = record
        .checked_sub(size)
        .filter(|&s| s >= offset)
        .ok_or_else(|| {
            format!(
                "central directory of {size} bytes at offset {offset} does not fit before its end record at {record}"
            )
        })?;
    Ok((start, size, count, zip64, start - offset))
}

/// Parses one record from `r` into `e` (its buffers reused); `i` and the
/// archive prefix are for messages and offsets.
fn read_record(r: &mut impl Read, e: &mut CdEntry, i: u64, prefix: u64) -> Result<(), String> {
    let mut fixed = [0u8; CDH_LEN];
    r.read_exact(&mut fixed)
        .map_err(|_| format!("central directory record {i} is truncated"))?;
    if u32_at(&fixed, 0) != CDH_SIG {
        return Err(format!("central directory record {i} has a bad signature"));
    }
    e.made_by = u16_at(&fixed, 4);
    e.flags = u16_at(&fixed, 8);
    e.method = u16_at(&fixed, 10);
    e.crc = u32_at(&fixed, 16);
    let mut compressed = u64::from(u32_at(&fixed, 20));
    let mut size = u64::from(u32_at(&fixed, 24));
    let (nlen, xlen, clen) = (
        usize::from(u16_at(&fixed, 28)),
        usize::from(u16_at(&fixed, 30)),
        u64::from(u16_at(&fixed, 32)),
    );
    let disk = u16_at(&fixed, 34);
    e.external = u32_at(&fixed, 38);
    let mut header = u64::from(u32_at(&fixed, 42));
    e.name.resize(nlen, 0);
    r.read_exact(&mut e.name)
        .map_err(|_| format!("central directory record {i} is truncated"))?;
    let mut extra = std::mem::take(&mut e.extra);
    extra.resize(xlen, 0);
    r.read_exact(&mut extra)
        .map_err(|_| format!("central directory record {i} is truncated"))?;
    std::io::copy(&mut r.by_ref().take(clen), &mut std::io::sink())
        .map_err(|e| format!("read: {e}"))?;
    // ZIP64 extended information: only the fields whose 32-bit value is saturated, in order.
    let mut x: &[u8] = &extra;
    while x.len() >= 4 {
        let (id, dlen) = (u16_at(x, 0), usize::from(u16_at(x, 2)));
        let data = x.get(4..4 + dlen).unwrap_or_default();
        if id == 1 {
            let mut at = 0;
            let mut take = |v: &mut u64| {
                if *v == u64::from(u32::MAX) && at + 8 <= data.len() {
                    *v = u64_at(data, at);
                    at += 8;
                }
            };
            take(&mut size);
            take(&mut compressed);
            take(&mut header);
        }
        x = x.get(4 + dlen..).unwrap_or_default();
    }
    if disk != 0 && disk != u16::MAX {
        return Err("a multi-volume archive (wheels are one file)".into());
    }
    e.extra = extra;
    e.compressed = compressed;
    e.size = size;
    e.header = header.saturating_add(prefix);
    Ok(())
}

/// Where the central directory of `f` is, for [`record_at`].
#[derive(Debug, Clone, Copy)]
pub struct Directory {
    /// Offset of the first record.
    pub start: u64,
    /// Its size.
    pub size: u64,
    /// Bytes prepended to the archive.
    pub prefix: u64,
}

/// Reads the record at file offset `cd` again (for an entry of a [`Table`]
/// built by [`scan`]).
pub fn record_at(f: &File, dir: &Directory, cd: u64) -> Result<CdEntry, String> {
    let end = dir.start + dir.size;
    if cd < dir.start || cd >= end {
        return Err(format!("no central directory record at offset {cd}"));
    }
    let mut r = BufReader::with_capacity(4096, FileRange { f, pos: cd, end });
    let mut e = CdEntry::default();
    read_record(&mut r, &mut e, 0, dir.prefix)?;
    Ok(e)
}

/// Offset of the data of entry `e` (after its local header), checking the
/// header names the entry.
pub fn data_offset(f: &File, e: &CdEntry) -> Result<u64, String> {
    let want = LFH_LEN + e.name.len();
    let h = read_at(f, e.header, want)?;
    if u32_at(&h, 0) != LFH_SIG {
        return Err(format!(
            "entry `{}`: no local header at offset {}",
            e.display(),
            e.header
        ));
    }
    let (nlen, xlen) = (usize::from(u16_at(&h, 26)), u64::from(u16_at(&h, 28)));
    if nlen != e.name.len() || h.get(LFH_LEN..) != Some(&e.name[..]) {
        let local = read_at(f, e.header + LFH_LEN as u64, nlen.min(4096))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        return Err(format!(
            "entry `{}`: its local header names `{local}` (the central directory and the local header disagree)",
            e.display()
        ));
    }
    Ok(e.header + want as u64 + xlen)
}

/// `Read` over bytes `pos..end` of a file, by positioned reads (no shared
/// file position).
pub struct FileRange<'a> {
    /// The file.
    pub f: &'a File,
    /// Next byte.
    pub pos: u64,
    /// End (exclusive).
    pub end: u64,
}

impl Read for FileRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        let k = self.f.read_at(&mut buf[..n], self.pos)?;
        self.pos += k as u64;
        Ok(k)
    }
}

/// Reads the central directory of `f` (`len` bytes), checks it (see the
/// module documentation) and returns its entries, sorted by name, with
/// where the directory is. Errors are messages without the file name.
pub fn scan(f: &File, len: u64, limits: &Limits) -> Result<(Table, Directory, Summary), String> {
    let (start, size, declared, zip64, prefix) = locate(f, len)?;
    // Records are read until the directory's size is used up, as Python's
    // `zipfile` (and so pip) reads them: the declared count is checked
    // afterwards, not trusted to stop early.
    let cap = (size / CDH_LEN as u64).min(limits.max_entries.saturating_add(1));
    let dir = Directory {
        start,
        size,
        prefix,
    };
    let mut file = f.try_clone().map_err(|e| format!("reopen: {e}"))?;
    file.seek(SeekFrom::Start(start))
        .map_err(|e| format!("seek: {e}"))?;
    let mut r = BufReader::with_capacity(1 << 16, file.take(size));
    let mut table = Table::new();
    table.recs.reserve_exact(declared.min(cap) as usize);
    // Names (with extra fields and comments) fill the directory beyond its
    // fixed-size parts: one allocation, not copied while it grows (up to
    // 64 MiB reserved; a larger table grows as usual).
    table.names.reserve_exact(
        size.saturating_sub(declared.min(cap) * CDH_LEN as u64)
            .min(64 << 20) as usize,
    );
    let mut e = CdEntry::default();
    let mut total = 0u64;
    // Data spans in directory order: when local headers come in file order
    // (every zip writer's order), no entry may start before the previous
    // one ends; otherwise they are sorted below.
    let (mut prev_end, mut ordered) = (0u64, true);
    let mut at = start;
    let mut count = 0u64;
    while at < start + size {
        if count == limits.max_entries {
            return Err(format!(
                "the central directory holds more than the {count} entries accepted"
            ));
        }
        read_record(&mut r, &mut e, count, prefix)?;
        count += 1;
        let cd = at;
        at = start + (size - r.get_ref().limit() - r.buffer().len() as u64);
        total = total.saturating_add(check_sizes(&e, limits)?);
        let (h_start, h_end) = span(f, &e, start, len)?;
        if h_start < prev_end {
            ordered = false;
        } else {
            prev_end = h_end;
        }
        let name = decode_name(&e.name, e.flags)?;
        let mut bits = match e.unix_mode() {
            Some(m) => (m & 0o777) as u16,
            None => 0,
        };
        if e.is_dir() {
            bits |= flag::DIR;
        }
        if e.unix_mode().is_some_and(|m| m & 0o170_000 == 0o120_000) {
            bits |= flag::LINK;
        }
        table.push(&name, cd, bits)?;
    }
    drop(r);
    check_count(count, declared, zip64)?;
    if total > limits.max_total_bytes {
        return Err(format!(
            "expands to {total} bytes; at most {} are accepted",
            limits.max_total_bytes
        ));
    }
    if !ordered {
        check_overlaps(f, &table, &dir, len)?;
    }
    table.sort()?;
    Ok((
        table,
        dir,
        Summary {
            entries: count,
            expanded: total,
        },
    ))
}

/// The entry count of the end record(s) must be the number of records the
/// directory holds: a reader that trusts the count (many do) would see
/// other files than pip. The one disagreement accepted is a classic end
/// record (no ZIP64 record) of more than 65,535 entries, whose 16-bit
/// count holds the low bits or is saturated, as zip writers leave it.
fn check_count(found: u64, declared: u64, zip64: bool) -> Result<(), String> {
    let wrapped = !zip64 && found > 0xffff && (declared == found & 0xffff || declared == 0xffff);
    if found == declared || wrapped {
        return Ok(());
    }
    Err(format!(
        "the end record declares {declared} entries but the central directory holds {found} records (readers disagree on such a wheel)"
    ))
}

/// Size possible for the bytes present and under the cap; returns it.
fn check_sizes(e: &CdEntry, limits: &Limits) -> Result<u64, String> {
    let n = e.display();
    if e.flags & 1 != 0 {
        return Err(format!("entry `{n}` is encrypted"));
    }
    match e.method {
        0 if e.size != e.compressed => {
            return Err(format!(
                "entry `{n}` is stored uncompressed in {} bytes but declares {} bytes",
                e.compressed, e.size
            ))
        }
        0 => {}
        8 => {
            let most = e
                .compressed
                .saturating_mul(DEFLATE_MAX_RATIO)
                .saturating_add(DEFLATE_SLACK);
            if e.size > most {
                return Err(format!(
                    "entry `{n}` declares {} bytes from {} compressed bytes; deflate cannot expand more than {DEFLATE_MAX_RATIO}:1",
                    e.size, e.compressed
                ));
            }
        }
        _ if e.is_dir() && e.size == 0 && e.compressed == 0 => {}
        m => {
            return Err(format!(
                "entry `{n}` uses compression method {m}; wheels use stored (0) or deflate (8)"
            ))
        }
    }
    if e.size > limits.max_entry_bytes {
        return Err(format!(
            "entry `{n}` expands to {} bytes; at most {} per entry are accepted",
            e.size, limits.max_entry_bytes
        ));
    }
    Ok(e.size)
}

/// The bytes of entry `e`: (local header start, data end), checking the
/// local header names it and everything lies before the directory.
fn span(f: &File, e: &CdEntry, cd_start: u64, len: u64) -> Result<(u64, u64), String> {
    let want = LFH_LEN + e.name.len();
    if e.header.saturating_add(want as u64) > cd_start {
        return Err(format!(
            "entry `{}`: local header at offset {} is not before the central directory",
            e.display(),
            e.header
        ));
    }
    let data = data_offset(f, e)?;
    let end = data.saturating_add(e.compressed);
    if end > cd_start || end > len {
        return Err(format!(
            "entry `{}`: its {} compressed bytes at offset {data} run past the central directory at {cd_start}",
            e.display(),
            e.compressed
        ));
    }
    Ok((e.header, end))
}

/// No two entries share a byte (for directories whose local headers are
/// not in file order: every span is kept and sorted, 24 bytes per entry
/// for the time of the check).
fn check_overlaps(f: &File, t: &Table, dir: &Directory, len: u64) -> Result<(), String> {
    let mut spans: Vec<(u64, u64, u32)> = Vec::with_capacity(t.len());
    for i in 0..t.len() {
        let e = record_at(f, dir, t.rec(i).cd)?;
        let (s, end) = span(f, &e, dir.start, len)?;
        spans.push((s, end, i as u32));
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((_, a_end, a), (b_start, _, b)) = (w[0], w[1]);
        if a_end > b_start {
            let (a, b) = (t.name(a as usize), t.name(b as usize));
            return Err(format!(
                "entries `{a}` and `{b}` overlap (the bytes of `{a}` run to offset {a_end}, past the local header of `{b}` at {b_start}): an overlapping-entry zip bomb or a corrupt wheel"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::zip::write::SimpleFileOptions;
    use std::io::Write;

    const WIDE: Limits = Limits {
        max_entries: 1000,
        max_entry_bytes: 1 << 30,
        max_total_bytes: 1 << 30,
    };

    /// A zip of `files` (deflated), with `prefix` bytes before it.
    fn zip_file(prefix: &[u8], files: &[(&str, Vec<u8>)]) -> tempfile::NamedTempFile {
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut z = ::zip::ZipWriter::new(&mut buf);
        for (n, b) in files {
            z.start_file(*n, SimpleFileOptions::default()).unwrap();
            z.write_all(b).unwrap();
        }
        z.finish().unwrap();
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(prefix).unwrap();
        t.write_all(buf.get_ref()).unwrap();
        t
    }

    fn scan_file(
        t: &tempfile::NamedTempFile,
        l: &Limits,
    ) -> Result<(Vec<CdEntry>, Summary), String> {
        let f = File::open(t.path()).unwrap();
        let len = f.metadata().unwrap().len();
        let (table, dir, s) = scan(&f, len, l)?;
        // The records, in name order, read again from the file.
        let recs = (0..table.len())
            .map(|i| record_at(&f, &dir, table.rec(i).cd).unwrap())
            .collect();
        Ok((recs, s))
    }

    #[test]
    fn reads_a_plain_zip_and_a_prefixed_one() {
        let files = [
            ("a.txt", b"hello".to_vec()),
            ("d/b.bin", vec![0u8; 100_000]),
        ];
        for prefix in [&b""[..], b"#!/bin/sh\nexit 0\n"] {
            let t = zip_file(prefix, &files);
            let (e, s) = scan_file(&t, &WIDE).unwrap();
            assert_eq!(
                s,
                Summary {
                    entries: 2,
                    expanded: 100_005
                }
            );
            assert_eq!(&*e[1].name, b"d/b.bin");
            assert_eq!(e[0].header, prefix.len() as u64);
            assert_eq!(e[1].size, 100_000);
        }
    }

    /// Writes the 16-bit entry counts of the classic end record of `t`.
    fn set_eocd_count(t: &tempfile::NamedTempFile, n: u16) {
        let mut b = std::fs::read(t.path()).unwrap();
        let at = b.len() - EOCD_LEN as usize;
        assert_eq!(u32_at(&b, at), EOCD_SIG);
        b[at + 8..at + 10].copy_from_slice(&n.to_le_bytes());
        b[at + 10..at + 12].copy_from_slice(&n.to_le_bytes());
        std::fs::write(t.path(), b).unwrap();
    }

    /// Python's `zipfile` (so pip) reads records until the directory's size
    /// is used up, whatever the count says; a count that disagrees would
    /// make a reader that trusts it see other files: refused.
    #[test]
    fn an_end_record_count_that_disagrees_is_refused() {
        let t = zip_file(b"", &[("a", vec![1u8; 5]), ("b", vec![2u8; 6])]);
        for n in [0u16, 1, 3, 0xffff] {
            set_eocd_count(&t, n);
            let e = scan_file(&t, &WIDE).unwrap_err();
            assert!(
                e.contains(&format!(
                    "declares {n} entries but the central directory holds 2 records"
                )),
                "{e}"
            );
        }
        set_eocd_count(&t, 2);
        assert_eq!(scan_file(&t, &WIDE).unwrap().0.len(), 2);
    }

    /// A stored, empty-file zip of `names` with a classic end record only
    /// (no ZIP64 record), its count `names.len()` truncated to 16 bits as
    /// zip writers without ZIP64 support leave it.
    fn classic_zip(names: &[String]) -> tempfile::NamedTempFile {
        let mut b = Vec::new();
        let mut cd = Vec::new();
        for n in names {
            let off = b.len() as u32;
            let nl = n.len() as u16;
            b.extend_from_slice(&LFH_SIG.to_le_bytes());
            b.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0x21, 0]);
            b.extend_from_slice(&[0; 12]);
            b.extend_from_slice(&nl.to_le_bytes());
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(n.as_bytes());
            cd.extend_from_slice(&CDH_SIG.to_le_bytes());
            cd.extend_from_slice(&[20, 3, 20, 0, 0, 0, 0, 0, 0, 0, 0x21, 0]);
            cd.extend_from_slice(&[0; 12]);
            cd.extend_from_slice(&nl.to_le_bytes());
            cd.extend_from_slice(&[0; 8]);
            cd.extend_from_slice(&(0o100_644u32 << 16).to_le_bytes());
            cd.extend_from_slice(&off.to_le_bytes());
            cd.extend_from_slice(n.as_bytes());
        }
        let (cd_off, cd_len) = (b.len() as u32, cd.len() as u32);
        b.extend_from_slice(&cd);
        let count = (names.len() & 0xffff) as u16;
        b.extend_from_slice(&EOCD_SIG.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&cd_len.to_le_bytes());
        b.extend_from_slice(&cd_off.to_le_bytes());
        b.extend_from_slice(&[0, 0]);
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(&b).unwrap();
        t
    }

    /// More than 65,535 entries behind a classic end record (its count
    /// holds the low 16 bits, or 0xffff): every record is read, as pip
    /// reads them, the `.dist-info` sorting last included.
    #[test]
    fn more_than_65535_entries_without_zip64_are_all_read() {
        let mut names: Vec<String> = (0..65_537).map(|i| format!("p/f{i:05}")).collect();
        names.push("p-1.0.dist-info/RECORD".into());
        let t = classic_zip(&names);
        let many = Limits {
            max_entries: 100_000,
            ..WIDE
        };
        let f = File::open(t.path()).unwrap();
        let len = f.metadata().unwrap().len();
        let (table, _, s) = scan(&f, len, &many).unwrap();
        assert_eq!(s.entries, 65_538);
        assert!(table.find("p-1.0.dist-info/RECORD").is_some());
        set_eocd_count(&t, 0xffff);
        assert_eq!(scan(&f, len, &many).unwrap().2.entries, 65_538);
        // A count that is not what 16 bits make of 65,538 is refused.
        set_eocd_count(&t, 1);
        let e = scan(&f, len, &many).unwrap_err();
        assert!(e.contains("declares 1 entries"), "{e}");
        // The cap counts records, not the declared count.
        let few = Limits {
            max_entries: 65_537,
            ..WIDE
        };
        set_eocd_count(&t, 2);
        let e = scan(&f, len, &few).unwrap_err();
        assert!(e.contains("more than the 65537 entries accepted"), "{e}");
    }

    #[test]
    fn caps_are_enforced() {
        let t = zip_file(b"", &[("a", vec![1u8; 50]), ("b", vec![2u8; 60])]);
        let l = |e, p, t| Limits {
            max_entries: e,
            max_entry_bytes: p,
            max_total_bytes: t,
        };
        let e = scan_file(&t, &l(1, 1000, 1000)).unwrap_err();
        assert!(e.contains("more than the 1 entries accepted"), "{e}");
        let e = scan_file(&t, &l(10, 55, 1000)).unwrap_err();
        assert!(
            e.contains("entry `b` expands to 60 bytes; at most 55"),
            "{e}"
        );
        let e = scan_file(&t, &l(10, 1000, 100)).unwrap_err();
        assert!(e.contains("expands to 110 bytes; at most 100"), "{e}");
    }

    #[test]
    fn garbage_and_truncation_are_errors_not_panics() {
        let t = zip_file(b"", &[("a", b"abc".to_vec()), ("b", b"defg".to_vec())]);
        let whole = std::fs::read(t.path()).unwrap();
        for cut in 0..whole.len() {
            let mut u = tempfile::NamedTempFile::new().unwrap();
            u.write_all(&whole[..cut]).unwrap();
            let _ = scan_file(&u, &WIDE);
        }
        // Every single-byte change is either accepted or an error.
        for i in 0..whole.len() {
            let mut b = whole.clone();
            b[i] ^= 0xff;
            let mut u = tempfile::NamedTempFile::new().unwrap();
            u.write_all(&b).unwrap();
            let _ = scan_file(&u, &WIDE);
        }
        let mut u = tempfile::NamedTempFile::new().unwrap();
        u.write_all(b"not a zip at all").unwrap();
        assert!(scan_file(&u, &WIDE).unwrap_err().contains("too short"));
    }

    #[test]
    fn names_decode_as_zip_readers_do() {
        assert_eq!(decode_name(b"a/b.py", 0).unwrap(), "a/b.py");
        // CP437 without the UTF-8 flag, UTF-8 with it.
        assert_eq!(decode_name(b"caf\x82", 0).unwrap(), "caf\u{e9}");
        assert_eq!(decode_name(b"\xff\xe1", 0).unwrap(), "\u{a0}\u{df}");
        assert_eq!(
            decode_name("caf\u{e9}".as_bytes(), 0x800).unwrap(),
            "caf\u{e9}"
        );
        assert!(decode_name(b"caf\x82", 0x800).is_err());
    }

    #[test]
    fn table_sorts_finds_and_refuses_duplicates() {
        let mut t = Table::new();
        for (i, n) in ["b/x", "a", "b/y", "c"].iter().enumerate() {
            t.push(n, i as u64, 0o644).unwrap();
        }
        t.sort().unwrap();
        assert_eq!(
            (0..4).map(|i| t.name(i)).collect::<Vec<_>>(),
            ["a", "b/x", "b/y", "c"]
        );
        assert_eq!(t.find("b/y"), Some(2));
        assert_eq!(t.find("b"), None);
        assert_eq!(t.range_with_prefix("b/"), 1..3);
        assert_eq!(t.rec(2).cd, 2);
        t.push("a", 9, 0).unwrap();
        assert!(t.sort().unwrap_err().contains("entry `a` appears 2 times"));
        assert!(t.push(&"x".repeat(MAX_NAME + 1), 0, 0).is_err());
    }

    #[test]
    fn unordered_local_headers_are_still_checked_for_overlap() {
        // Central directory in reverse file order: the slow path sorts spans.
        let t = zip_file(b"", &[("aa", b"x".to_vec()), ("bb", b"y".to_vec())]);
        let b = std::fs::read(t.path()).unwrap();
        let f = File::open(t.path()).unwrap();
        let (_, dir, _) = scan(&f, b.len() as u64, &WIDE).unwrap();
        let cd = &b[dir.start as usize..(dir.start + dir.size) as usize];
        let first = 46 + 2 + u16_at(cd, 30) as usize;
        let mut swapped = b[..dir.start as usize].to_vec();
        swapped.extend_from_slice(&cd[first..]);
        swapped.extend_from_slice(&cd[..first]);
        swapped.extend_from_slice(&b[(dir.start + dir.size) as usize..]);
        let mut u = tempfile::NamedTempFile::new().unwrap();
        u.write_all(&swapped).unwrap();
        let (e, _) = scan_file(&u, &WIDE).unwrap();
        assert_eq!(e.len(), 2);
        // Make the second entry's data run into the first one's header... by
        // pointing both records at the same local header.
        let mut same = swapped.clone();
        let at = dir.start as usize + 42; // first record (now `bb`): local header offset
        same[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        let mut u = tempfile::NamedTempFile::new().unwrap();
        u.write_all(&same).unwrap();
        let e = scan_file(&u, &WIDE).unwrap_err();
        assert!(e.contains("local header names `aa`"), "{e}");
    }

    #[test]
    fn a_local_header_that_disagrees_is_refused() {
        let t = zip_file(b"", &[("aa", b"x".to_vec()), ("bb", b"y".to_vec())]);
        let mut b = std::fs::read(t.path()).unwrap();
        // The first local header's name (right after its 30 fixed bytes).
        b[30] = b'z';
        std::fs::write(t.path(), &b).unwrap();
        let e = scan_file(&t, &WIDE).unwrap_err();
        assert!(e.contains("entry `aa`: its local header names `za`"), "{e}");
    }
}
