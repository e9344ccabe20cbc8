//! `kpack_discover_binary_path`: which file is mapped at an address.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

/// Longest `/proc/self/maps` line considered (a path is at most PATH_MAX).
const MAX_LINE: usize = 8192;

/// Parse one `/proc/self/maps` line: `start-end perms offset dev inode path`.
fn parse_line_perms(line: &str) -> Option<(usize, usize, usize, &str, &str)> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?;
    let offset = usize::from_str_radix(it.next()?, 16).ok()?;
    let _dev = it.next()?;
    let _inode = it.next()?;
    let path = it.next()?.trim_start();
    let (s, e) = range.split_once('-')?;
    let start = usize::from_str_radix(s, 16).ok()?;
    let end = usize::from_str_radix(e, 16).ok()?;
    Some((start, end, offset, perms, path))
}

/// How many bytes from `addr` (at most `want`) lie in readable mappings
/// (`/proc/self/maps`, contiguous readable mappings joined); 0 when `addr`
/// is not in one. The fallback of the marker reader where
/// `process_vm_readv` is not allowed.
pub fn readable_len(addr: usize, want: usize) -> usize {
    let Ok(f) = std::fs::File::open("/proc/self/maps") else {
        return 0;
    };
    let mut r = BufReader::new(f);
    let mut line = String::new();
    let mut end_ok: Option<usize> = None;
    loop {
        line.clear();
        match (&mut r).take(MAX_LINE as u64).read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Some((start, end, _, perms, _)) = parse_line_perms(line.trim_end_matches('\n')) else {
            continue;
        };
        let readable = perms.starts_with('r');
        match end_ok {
            None if addr >= start && addr < end && readable => end_ok = Some(end),
            Some(e) if start == e && readable => end_ok = Some(end),
            Some(_) => break,
            None => {}
        }
    }
    end_ok.map_or(0, |e| (e - addr).min(want))
}

/// The file mapped at `addr` and the address's offset in that file, as
/// ROCm's `kpack_discover_binary_path` reports them: the path is the rest
/// of the `/proc/self/maps` line, byte for byte (not necessarily UTF-8),
/// including the ` (deleted)` the kernel appends to a file deleted since it
/// was mapped. Its directory (all a HIP runtime uses it for, to resolve
/// the marker's relative search paths) is the same either way. Anonymous
/// memory and pseudo mappings (`[heap]`, `[stack]`) name no file.
pub fn mapped_file(addr: usize) -> Option<(PathBuf, usize)> {
    use std::os::unix::ffi::OsStrExt;
    let f = std::fs::File::open("/proc/self/maps").ok()?;
    let mut r = BufReader::new(f);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut r)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .ok()?;
        if n == 0 {
            return None;
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        // The fields before the path are ASCII; the path is taken as bytes.
        let Some((start, end, offset, path)) = parse_line_bytes(text) else {
            continue;
        };
        if addr < start || addr >= end {
            continue;
        }
        if path.is_empty() || path.starts_with(b"[") {
            return None;
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
        return Some((path, addr - start + offset));
    }
}

/// One `/proc/self/maps` line as bytes: `start-end perms offset dev inode
/// path`, the path being the rest of the line (any bytes, spaces kept;
/// empty for anonymous memory).
fn parse_line_bytes(line: &[u8]) -> Option<(usize, usize, usize, &[u8])> {
    let mut fields: [&[u8]; 5] = [&[]; 5];
    let mut rest = line;
    for f in &mut fields {
        let end = rest.iter().position(|&b| b == b' ')?;
        *f = &rest[..end];
        rest = &rest[end..];
        while let [b' ', tail @ ..] = rest {
            rest = tail;
        }
    }
    let hex = |b: &[u8]| usize::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok();
    let (s, e) = std::str::from_utf8(fields[0]).ok()?.split_once('-')?;
    let (start, end) = (hex(s.as_bytes())?, hex(e.as_bytes())?);
    Some((start, end, hex(fields[2])?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let l = "7f00a000-7f00b000 r-xp 00002000 08:01 1234   /usr/lib/libx.so";
        assert_eq!(
            parse_line_bytes(l.as_bytes()),
            Some((0x7f00a000, 0x7f00b000, 0x2000, &b"/usr/lib/libx.so"[..]))
        );
        assert!(parse_line_bytes(b"garbage").is_none());
        let b = b"7f00a000-7f00b000 r-xp 00002000 08:01 1234   /tmp/a\xff b.so (deleted)";
        assert_eq!(
            parse_line_bytes(b),
            Some((
                0x7f00a000,
                0x7f00b000,
                0x2000,
                &b"/tmp/a\xff b.so (deleted)"[..]
            ))
        );
        let anon = b"7f00a000-7f00b000 rw-p 00000000 00:00 0 ";
        assert_eq!(parse_line_bytes(anon).map(|t| t.3), Some(&b""[..]));
    }

    #[test]
    fn finds_this_function() {
        let (p, _) =
            mapped_file(finds_this_function as *const () as usize).expect("text is file-backed");
        assert_eq!(p, std::env::current_exe().unwrap().canonicalize().unwrap());
    }
}
