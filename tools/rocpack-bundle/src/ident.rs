//! [`FileIdent`]: what identifies a file and the version of its content, to
//! notice a file rewritten or replaced while it is read (wheels, snapshot
//! inputs, analysed images). One definition for every reader.

/// Device, inode, size, mtime and ctime of a file: a file that was replaced
/// (device, inode), resized or written to (size, mtime, ctime) while it was
/// read no longer has the same identity.
///
/// Timestamps have the file system's granularity: a write in place that
/// keeps the size and lands in the same clock tick as the first `fstat`
/// cannot be seen; every other change can.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileIdent {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, i64),
    /// Status change time (seconds, nanoseconds).
    pub ctime: (i64, i64),
}

impl FileIdent {
    /// The identity `m` (of `stat` or `fstat`) describes.
    pub fn of(m: &std::fs::Metadata) -> FileIdent {
        use std::os::unix::fs::MetadataExt;
        FileIdent {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether `other` is the same file (device and inode), whatever its
    /// content.
    pub fn same_file(&self, other: &FileIdent) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }

    /// Whether `other` has the same size and times (content not written).
    pub fn same_content(&self, other: &FileIdent) -> bool {
        (self.size, self.mtime, self.ctime) == (other.size, other.mtime, other.ctime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_write_a_replacement_and_a_resize_change_the_identity() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"abc").unwrap();
        let a = FileIdent::of(&std::fs::metadata(&p).unwrap());
        assert_eq!(a, FileIdent::of(&std::fs::metadata(&p).unwrap()));
        // Appended: size and times.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"d")
            .unwrap();
        let b = FileIdent::of(&std::fs::metadata(&p).unwrap());
        assert!(a.same_file(&b) && !a.same_content(&b));
        // Replaced by a rename: another inode.
        let q = dir.path().join("g");
        std::fs::write(&q, b"abcd").unwrap();
        std::fs::rename(&q, &p).unwrap();
        let c = FileIdent::of(&std::fs::metadata(&p).unwrap());
        assert!(!b.same_file(&c));
    }
}
