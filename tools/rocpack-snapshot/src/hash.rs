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

/// Read-only map of a whole file (`None` for an empty file).
#[allow(unsafe_code)]
fn map(path: &Path) -> Result<Option<memmap2::Mmap>> {
    let f = File::open(path).map_err(io_at(path))?;
    if f.metadata().map_err(io_at(path))?.len() == 0 {
        return Ok(None);
    }
    // SAFETY: the map is only read. The files are the blob store's own temp file and the
    // artifact being published; if another process truncated or rewrote the artifact
    // meanwhile, the byte-for-byte comparison and the size check below report it.
    let m = unsafe { memmap2::Mmap::map(&f) }.map_err(io_at(path))?;
    Ok(Some(m))
}

/// sha256 and sha1 of `path`, in parallel over a memory map. When `same_as` is given,
/// the sha1 thread also checks byte for byte that `path` equals that file
/// (verify-after-write).
pub fn digest_file(path: &Path, same_as: Option<&Path>) -> Result<FileDigest> {
    let a = map(path)?;
    let b = same_as.map(map).transpose()?;
    let da: &[u8] = a.as_deref().unwrap_or_default();
    std::thread::scope(|s| {
        let t256 = s.spawn(|| {
            let mut h = Sha256::new();
            for c in da.chunks(CHUNK) {
                h.update(c);
            }
            hex::encode(h.finalize())
        });
        let mut h1 = Sha1::new();
        let mut mismatch = None;
        if let (Some(other), Some(b)) = (same_as, &b) {
            let db: &[u8] = b.as_deref().unwrap_or_default();
            if da.len() != db.len() {
                mismatch = Some(format!(
                    "written copy has {} bytes, {} has {}",
                    da.len(),
                    other.display(),
                    db.len()
                ));
            }
            for (i, (ca, cb)) in da.chunks(CHUNK).zip(db.chunks(CHUNK)).enumerate() {
                if mismatch.is_none() && ca != cb {
                    let at = ca.iter().zip(cb).position(|(x, y)| x != y).unwrap_or(0);
                    mismatch = Some(format!(
                        "byte offset {}: written copy differs from {}",
                        i.saturating_mul(CHUNK).saturating_add(at),
                        other.display()
                    ));
                }
                h1.update(ca);
            }
        } else {
            for c in da.chunks(CHUNK) {
                h1.update(c);
            }
        }
        let sha256 = t256
            .join()
            .map_err(|_| Error::Usage("sha256 worker thread panicked".into()))?;
        if let Some(m) = mismatch {
            return Err(Error::input(path, None, m));
        }
        Ok(FileDigest {
            sha256,
            sha1: hex::encode(h1.finalize()),
            size: da.len() as u64,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_and_compare() {
        let d = tempfile::tempdir().unwrap();
        let (a, b, e) = (d.path().join("a"), d.path().join("b"), d.path().join("e"));
        std::fs::write(&a, b"abc").unwrap();
        std::fs::write(&b, b"abd").unwrap();
        std::fs::write(&e, b"").unwrap();
        let da = digest_file(&a, Some(&a)).unwrap();
        assert_eq!(
            da.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(da.sha1, "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(da.size, 3);
        let err = digest_file(&a, Some(&b)).unwrap_err().to_string();
        assert!(err.contains("byte offset 2: written copy differs"), "{err}");
        let de = digest_file(&e, None).unwrap();
        assert_eq!(
            de.sha256,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(digest_file(&e, Some(&a))
            .unwrap_err()
            .to_string()
            .contains("written copy has 0 bytes"));
        assert_eq!(sha256_file(&a).unwrap(), (da.sha256.clone(), 3));
    }
}
