//! The central directory of an input wheel, read on its own before the
//! `zip` crate opens the archive. The crate keys entries by name (a second
//! entry of the same name silently replaces the first) and trusts every
//! offset and size, so these checks are made here, before anything is
//! extracted:
//!
//! - every name appears once;
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

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

/// Largest expansion of deflate: a stream of maximal-length matches
/// decodes 258 bytes from about two bits, 1032:1 at best.
pub const DEFLATE_MAX_RATIO: u64 = 1032;
/// Slack added to the ratio bound for tiny streams (block headers).
const DEFLATE_SLACK: u64 = 1024;

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

/// One record of the central directory.
#[derive(Debug, Clone)]
pub struct CdEntry {
    /// The name as stored (bytes).
    pub name: Box<[u8]>,
    /// General purpose flags.
    pub flags: u16,
    /// Compression method.
    pub method: u16,
    /// Compressed size.
    pub compressed: u64,
    /// Uncompressed (declared) size.
    pub size: u64,
    /// Offset of the local header (archive offset applied).
    pub header: u64,
}

impl CdEntry {
    /// The name for messages (lossy UTF-8).
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    fn is_dir(&self) -> bool {
        self.name.ends_with(b"/")
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

/// Where the central directory is: (start, size, entry count, bytes
/// prepended to the archive).
fn locate(f: &File, len: u64) -> Result<(u64, u64, u64, u64), String> {
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
    Ok((start, size, count, start - offset))
}

/// Reads the central directory of `f` (`len` bytes), checks it (see the
/// module documentation) and returns its entries in directory order.
/// Errors are messages without the file name.
pub fn scan(f: &File, len: u64, limits: &Limits) -> Result<(Vec<CdEntry>, Summary), String> {
    let (start, size, count, prefix) = locate(f, len)?;
    if count > limits.max_entries {
        return Err(format!(
            "{count} entries; at most {} are accepted",
            limits.max_entries
        ));
    }
    if count.saturating_mul(CDH_LEN as u64) > size {
        return Err(format!(
            "the end record declares {count} entries, the central directory ({size} bytes) cannot hold them"
        ));
    }
    let mut file = f.try_clone().map_err(|e| format!("reopen: {e}"))?;
    file.seek(SeekFrom::Start(start))
        .map_err(|e| format!("seek: {e}"))?;
    let mut r = BufReader::with_capacity(1 << 16, file.take(size));
    let mut entries = Vec::with_capacity(count as usize);
    let mut fixed = [0u8; CDH_LEN];
    for i in 0..count {
        r.read_exact(&mut fixed)
            .map_err(|_| format!("central directory record {i} is truncated"))?;
        if u32_at(&fixed, 0) != CDH_SIG {
            return Err(format!("central directory record {i} has a bad signature"));
        }
        let flags = u16_at(&fixed, 8);
        let method = u16_at(&fixed, 10);
        let mut compressed = u64::from(u32_at(&fixed, 20));
        let mut usize_ = u64::from(u32_at(&fixed, 24));
        let (nlen, xlen, clen) = (
            usize::from(u16_at(&fixed, 28)),
            usize::from(u16_at(&fixed, 30)),
            u64::from(u16_at(&fixed, 32)),
        );
        let disk = u16_at(&fixed, 34);
        let mut header = u64::from(u32_at(&fixed, 42));
        let mut var = vec![0u8; nlen + xlen];
        r.read_exact(&mut var)
            .map_err(|_| format!("central directory record {i} is truncated"))?;
        std::io::copy(&mut r.by_ref().take(clen), &mut std::io::sink())
            .map_err(|e| format!("read: {e}"))?;
        let (name, extra) = var.split_at(nlen);
        // ZIP64 extended information: only the fields whose 32-bit value is saturated, in order.
        let mut x = extra;
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
                take(&mut usize_);
                take(&mut compressed);
                take(&mut header);
            }
            x = x.get(4 + dlen..).unwrap_or_default();
        }
        if disk != 0 && disk != u16::MAX {
            return Err("a multi-volume archive (wheels are one file)".into());
        }
        entries.push(CdEntry {
            name: name.into(),
            flags,
            method,
            compressed,
            size: usize_,
            header: header.saturating_add(prefix),
        });
    }
    drop(r);
    check_names(&entries)?;
    let expanded = check_sizes(&entries, limits)?;
    check_layout(f, &entries, start, len)?;
    Ok((
        entries,
        Summary {
            entries: count,
            expanded,
        },
    ))
}

/// Every name once.
fn check_names(entries: &[CdEntry]) -> Result<(), String> {
    let mut idx: Vec<usize> = (0..entries.len()).collect();
    idx.sort_unstable_by(|&a, &b| entries[a].name.cmp(&entries[b].name));
    let mut i = 0;
    while i < idx.len() {
        let n = &entries[idx[i]].name;
        let same = idx[i..]
            .iter()
            .take_while(|&&j| entries[j].name == *n)
            .count();
        if same > 1 {
            return Err(format!(
                "entry `{}` appears {same} times in the central directory (zip readers keep one copy or another: which bytes would be installed is undefined)",
                entries[idx[i]].display()
            ));
        }
        i += same;
    }
    Ok(())
}

/// Sizes possible for the bytes present and under the caps; returns the
/// sum of declared sizes.
fn check_sizes(entries: &[CdEntry], limits: &Limits) -> Result<u64, String> {
    let mut total = 0u64;
    for e in entries {
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
        total = total.saturating_add(e.size);
    }
    if total > limits.max_total_bytes {
        return Err(format!(
            "expands to {total} bytes; at most {} are accepted",
            limits.max_total_bytes
        ));
    }
    Ok(total)
}

/// Local headers match the directory and no two entries share a byte.
fn check_layout(f: &File, entries: &[CdEntry], cd_start: u64, len: u64) -> Result<(), String> {
    // (header start, data end, index)
    let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let n = e.display();
        let want = LFH_LEN + e.name.len();
        if e.header.saturating_add(want as u64) > cd_start {
            return Err(format!(
                "entry `{n}`: local header at offset {} is not before the central directory",
                e.header
            ));
        }
        let h = read_at(f, e.header, want)?;
        if u32_at(&h, 0) != LFH_SIG {
            return Err(format!(
                "entry `{n}`: no local header at offset {}",
                e.header
            ));
        }
        let (nlen, xlen) = (usize::from(u16_at(&h, 26)), u64::from(u16_at(&h, 28)));
        if nlen != e.name.len() || h.get(LFH_LEN..) != Some(&e.name[..]) {
            let local = read_at(f, e.header + LFH_LEN as u64, nlen.min(4096))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return Err(format!(
                "entry `{n}`: its local header names `{local}` (the central directory and the local header disagree)"
            ));
        }
        let data = e.header + want as u64 + xlen;
        let end = data.saturating_add(e.compressed);
        if end > cd_start || end > len {
            return Err(format!(
                "entry `{n}`: its {} compressed bytes at offset {data} run past the central directory at {cd_start}",
                e.compressed
            ));
        }
        spans.push((e.header, end, i));
    }
    spans.sort_unstable();
    for w in spans.windows(2) {
        let ((_, a_end, a), (b_start, _, b)) = (w[0], w[1]);
        if a_end > b_start {
            return Err(format!(
                "entries `{}` and `{}` overlap (the bytes of `{}` run to offset {a_end}, past the local header of `{}` at {b_start}): an overlapping-entry zip bomb or a corrupt wheel",
                entries[a].display(),
                entries[b].display(),
                entries[a].display(),
                entries[b].display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use zip::write::SimpleFileOptions;

    const WIDE: Limits = Limits {
        max_entries: 1000,
        max_entry_bytes: 1 << 30,
        max_total_bytes: 1 << 30,
    };

    /// A zip of `files` (deflated), with `prefix` bytes before it.
    fn zip_file(prefix: &[u8], files: &[(&str, Vec<u8>)]) -> tempfile::NamedTempFile {
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut z = zip::ZipWriter::new(&mut buf);
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
        scan(&f, len, l)
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
        }
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
        assert!(e.contains("2 entries; at most 1"), "{e}");
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
