//! `kpack_discover_binary_path`: which file is mapped at an address.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

/// Longest `/proc/self/maps` line considered (a path is at most PATH_MAX).
const MAX_LINE: usize = 8192;

/// Parse one `/proc/self/maps` line: `start-end perms offset dev inode path`.
fn parse_line(line: &str) -> Option<(usize, usize, usize, &str)> {
    parse_line_perms(line).map(|(s, e, o, _, p)| (s, e, o, p))
}

/// [`parse_line`] with the permission string.
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

/// The file mapped at `addr` and the address's offset in that file.
pub fn mapped_file(addr: usize) -> Option<(PathBuf, usize)> {
    let f = std::fs::File::open("/proc/self/maps").ok()?;
    let mut r = BufReader::new(f);
    let mut line = String::new();
    loop {
        line.clear();
        let n = (&mut r).take(MAX_LINE as u64).read_line(&mut line).ok()?;
        if n == 0 {
            return None;
        }
        let Some((start, end, offset, path)) = parse_line(line.trim_end_matches('\n')) else {
            continue;
        };
        if addr < start || addr >= end {
            continue;
        }
        // Anonymous and pseudo mappings (`[heap]`, `[stack]`) name no file.
        if !path.starts_with('/') {
            return None;
        }
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        return Some((PathBuf::from(path), addr - start + offset));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let l = "7f00a000-7f00b000 r-xp 00002000 08:01 1234   /usr/lib/libx.so";
        assert_eq!(
            parse_line(l),
            Some((0x7f00a000, 0x7f00b000, 0x2000, "/usr/lib/libx.so"))
        );
        assert!(parse_line("garbage").is_none());
    }

    #[test]
    fn finds_this_function() {
        let (p, _) =
            mapped_file(finds_this_function as *const () as usize).expect("text is file-backed");
        assert_eq!(p, std::env::current_exe().unwrap().canonicalize().unwrap());
    }
}
