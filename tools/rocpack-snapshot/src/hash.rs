//! Streaming sha256 + sha1 of files, computed in parallel (one thread per digest).

use crate::error::{io_at, Error, Result};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::path::Path;

use rocpack_bundle::FileIdent;

const CHUNK: usize = 1 << 20;

/// Digests and size of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileDigest {
    pub sha256: String,
    pub sha1: String,
    pub size: u64,
}

/// Kept here too: the file readers of this module open their input with it.
pub use crate::fsutil::open_regular;

/// A regular file read once from start to end, whose state is compared
/// before and after: [`StableRead::finish`] fails unless the bytes read are
/// exactly the size it had when it was opened and nothing about it changed
/// meanwhile (a file truncated, appended to, rewritten or replaced while it
/// was copied is refused, never published torn).
///
/// Timestamps have the file system's granularity (see [`FileIdent`]).
struct StableRead<'a> {
    path: &'a Path,
    file: File,
    before: FileIdent,
    read: u64,
}

impl<'a> StableRead<'a> {
    fn open(path: &'a Path) -> Result<StableRead<'a>> {
        let file = open_regular(path)?;
        let before = FileIdent::of(&file.metadata().map_err(io_at(path))?);
        Ok(StableRead {
            path,
            file,
            before,
            read: 0,
        })
    }

    /// Reads the next chunk into `buf` (0 at the end).
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = self.file.read(buf).map_err(io_at(self.path))?;
        self.read = self.read.saturating_add(n as u64);
        Ok(n)
    }

    /// Bytes read, when the file was read whole and did not change.
    fn finish(self) -> Result<u64> {
        let after = FileIdent::of(&self.file.metadata().map_err(io_at(self.path))?);
        // The name may now point at another file (replaced by a rename).
        let now = std::fs::metadata(self.path).ok().map(|m| FileIdent::of(&m));
        let b = self.before;
        let mut what = Vec::new();
        if self.read != b.size {
            what.push(format!(
                "{} bytes read of the {} it had when it was opened",
                self.read, b.size
            ));
        }
        if after.size != b.size {
            what.push(format!("size {} -> {} bytes", b.size, after.size));
        }
        if after.mtime != b.mtime || after.ctime != b.ctime {
            what.push("modified (mtime/ctime changed)".to_string());
        }
        match now {
            None => what.push("removed or renamed".to_string()),
            Some(n) if !n.same_file(&b) => {
                what.push("replaced by another file (inode changed)".to_string())
            }
            Some(_) => {}
        }
        if what.is_empty() {
            return Ok(self.read);
        }
        Err(Error::input(
            self.path,
            None,
            format!(
                "changed while snapctl read it ({}); refusing to publish a torn copy, nothing was published: retry once the file is complete",
                what.join("; ")
            ),
        ))
    }
}

fn read_all_chunks(
    path: &Path,
    limit: Option<u64>,
    mut f: impl FnMut(&[u8]),
) -> Result<std::result::Result<u64, u64>> {
    let mut file = open_regular(path)?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io_at(path))?;
        if n == 0 {
            return Ok(Ok(total));
        }
        total = total.saturating_add(n as u64);
        if limit.is_some_and(|l| total > l) {
            return Ok(Err(total));
        }
        f(buf.get(..n).unwrap_or_default());
    }
}

/// sha256 and size of a regular file that must not change while it is
/// read (see [`StableRead`]): the digest of an input about to be recorded.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut r = StableRead::open(path)?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
    let n = r.finish()?;
    Ok((hex::encode(h.finalize()), n))
}

/// sha256 and size of a regular file expected to hold at most `limit`
/// bytes: `Ok(Err(n))` as soon as more than `limit` bytes were read (`n` is
/// how many), so a file that grows or never ends is not read past it.
pub fn sha256_file_limited(
    path: &Path,
    limit: Option<u64>,
) -> Result<std::result::Result<(String, u64), u64>> {
    let mut h = Sha256::new();
    Ok(read_all_chunks(path, limit, |b| h.update(b))?.map(|n| (hex::encode(h.finalize()), n)))
}

/// Copies `src` to the new file `dst` in one pass, computing sha256 and sha1
/// of the bytes read, fsyncs `dst`, then re-reads it and checks its sha256
/// (verify after write).
///
/// The copy is the one verified local copy that gets published: a `src`
/// that changes meanwhile (grows, shrinks, is rewritten or replaced) is an
/// error, so what is published is always a whole version of the file, and
/// the digests describe `dst`. No memory map, so a source truncated under us cannot raise
/// SIGBUS. `dst` is removed on every error, ENOSPC included.
pub fn copy_hashed(src: &Path, dst: &Path) -> Result<FileDigest> {
    let res = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dst)
        .map_err(io_at(dst))
        .and_then(|mut to| copy_hashed_into(src, &mut to, dst));
    if res.is_err() {
        let _ = std::fs::remove_file(dst);
    }
    res
}

/// [`copy_hashed`] into an open, empty, readable and writable file (e.g. an
/// unnamed `O_TMPFILE`, which a `kill -9` cannot leave behind); `label`
/// names it in messages. The file is left positioned at its start.
pub fn copy_hashed_into(src: &Path, to: &mut File, label: &Path) -> Result<FileDigest> {
    use std::io::{Seek, Write};
    let mut from = StableRead::open(src)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::sync::Arc<[u8]>>(4);
    let (sha256, size, sha1) = std::thread::scope(|s| -> Result<(String, u64, String)> {
        let t1 = s.spawn(move || {
            let mut h1 = Sha1::new();
            for c in rx {
                h1.update(&c);
            }
            hex::encode(h1.finalize())
        });
        let mut h = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut total = 0u64;
        let r = loop {
            let n = match from.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) => break Err(e),
            };
            let chunk = buf.get(..n).unwrap_or_default();
            if let Err(e) = to.write_all(chunk) {
                break Err(Error::io(label, e));
            }
            h.update(chunk);
            total = total.saturating_add(n as u64);
            if tx.send(std::sync::Arc::from(chunk)).is_err() {
                break Err(Error::Usage("sha1 worker stopped".into()));
            }
        };
        drop(tx);
        let sha1 = t1
            .join()
            .map_err(|_| Error::Usage("sha1 worker thread panicked".into()))?;
        r?;
        // The bytes copied are the whole file as it was when opened, and it
        // did not change meanwhile (else the copy may be torn).
        from.finish()?;
        Ok((hex::encode(h.finalize()), total, sha1))
    })?;
    to.sync_all().map_err(io_at(label))?;
    // Verify after write: the bytes the file holds now are the bytes hashed.
    to.rewind().map_err(io_at(label))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut n = 0u64;
    loop {
        let k = to.read(&mut buf).map_err(io_at(label))?;
        if k == 0 {
            break;
        }
        n = n.saturating_add(k as u64);
        h.update(buf.get(..k).unwrap_or_default());
    }
    to.rewind().map_err(io_at(label))?;
    let again = hex::encode(h.finalize());
    if again != sha256 || n != size {
        return Err(Error::Digest {
            what: format!("{} after writing it", label.display()),
            expected: sha256,
            actual: again,
        });
    }
    Ok(FileDigest { sha256, sha1, size })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_and_digests() {
        let d = tempfile::tempdir().unwrap();
        let (a, e) = (d.path().join("a"), d.path().join("e"));
        std::fs::write(&a, b"abc").unwrap();
        std::fs::write(&e, b"").unwrap();
        let da = copy_hashed(&a, &d.path().join("a2")).unwrap();
        assert_eq!(
            da.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(da.sha1, "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(da.size, 3);
        assert_eq!(std::fs::read(d.path().join("a2")).unwrap(), b"abc");
        let de = copy_hashed(&e, &d.path().join("e2")).unwrap();
        assert_eq!(
            de.sha256,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        // A directory is refused and nothing is left behind.
        let err = copy_hashed(d.path(), &d.path().join("x"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("directory"), "{err}");
        assert!(!d.path().join("x").exists());
    }
}
