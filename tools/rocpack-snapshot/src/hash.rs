//! Streaming sha256 + sha1 of files, computed in parallel (one thread per digest).

use crate::error::{io_at, Error, Result};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::path::Path;

const CHUNK: usize = 1 << 20;

/// Digests and size of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDigest {
    pub sha256: String,
    pub sha1: String,
    pub size: u64,
}

fn read_all_chunks(path: &Path, mut f: impl FnMut(&[u8])) -> Result<u64> {
    let mut file = File::open(path).map_err(io_at(path))?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io_at(path))?;
        if n == 0 {
            return Ok(total);
        }
        total = total.saturating_add(n as u64);
        f(buf.get(..n).unwrap_or_default());
    }
}

/// sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut h = Sha256::new();
    let n = read_all_chunks(path, |b| h.update(b))?;
    Ok((hex::encode(h.finalize()), n))
}

/// sha256 and sha1 of `path`, in parallel. When `same_as` is given, the sha1 thread
/// also checks byte-for-byte that `path` equals that file (verify-after-write).
pub fn digest_file(path: &Path, same_as: Option<&Path>) -> Result<FileDigest> {
    std::thread::scope(|s| {
        let t256 = s.spawn(|| sha256_file(path));
        let sha1 = sha1_and_compare(path, same_as);
        let (sha256, size) = t256
            .join()
            .map_err(|_| Error::Usage("sha256 worker thread panicked".into()))??;
        let (sha1, size1) = sha1?;
        if size != size1 {
            return Err(Error::input(
                path,
                None,
                "file changed while it was being read",
            ));
        }
        Ok(FileDigest { sha256, sha1, size })
    })
}

fn sha1_and_compare(path: &Path, same_as: Option<&Path>) -> Result<(String, u64)> {
    let mut h = Sha1::new();
    let Some(other) = same_as else {
        let n = read_all_chunks(path, |b| h.update(b))?;
        return Ok((hex::encode(h.finalize()), n));
    };
    let mut a = File::open(path).map_err(io_at(path))?;
    let mut b = File::open(other).map_err(io_at(other))?;
    let mut ba = vec![0u8; CHUNK];
    let mut bb = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        let n = read_full(&mut a, &mut ba).map_err(io_at(path))?;
        let m = read_full(&mut b, &mut bb).map_err(io_at(other))?;
        let (ca, cb) = (
            ba.get(..n).unwrap_or_default(),
            bb.get(..m).unwrap_or_default(),
        );
        if ca != cb {
            let at = ca
                .iter()
                .zip(cb)
                .position(|(x, y)| x != y)
                .unwrap_or(n.min(m));
            return Err(Error::input(
                path,
                None,
                format!(
                    "byte offset {}: written copy differs from {}",
                    offset.saturating_add(at as u64),
                    other.display()
                ),
            ));
        }
        if n == 0 {
            return Ok((hex::encode(h.finalize()), offset));
        }
        h.update(ca);
        offset = offset.saturating_add(n as u64);
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let Some(rest) = buf.get_mut(filled..) else {
            break;
        };
        match f.read(rest) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
