//! Positioned reads of a file range, shared by the reader and the writers.

use std::fs;
use std::io::Read;

/// `left` bytes of `file` from `offset`, read with positioned reads (the
/// file's position is neither used nor moved). A file that ends before
/// them is an `UnexpectedEof` error (it became shorter after its size was
/// taken), never a short read.
pub(crate) struct FileRange<'a> {
    pub(crate) file: &'a fs::File,
    pub(crate) offset: u64,
    pub(crate) left: u64,
}

impl Read for FileRange<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let Some(buf) = buf.get_mut(..want).filter(|b| !b.is_empty()) else {
            return Ok(0);
        };
        let n = self.file.read_at(buf, self.offset)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the file became shorter while it was read ({} bytes missing at offset {})",
                    self.left, self.offset
                ),
            ));
        }
        self.offset += n as u64;
        self.left -= n as u64;
        Ok(n)
    }
}
