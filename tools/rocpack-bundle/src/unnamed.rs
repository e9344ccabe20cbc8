//! [`link_unnamed`]: gives a file opened with `O_TMPFILE` (no name, gone
//! if the process dies) a name, the last step of writing an output that
//! appears whole or not at all. One definition for every writer that
//! commits that way (`.kpack` archives, snapshot store blobs).

use std::fs::File;
use std::io;
use std::path::Path;

/// Links the unnamed `file` at `dst`. Fails with
/// [`io::ErrorKind::AlreadyExists`] when `dst` exists (a link never
/// replaces; rename a fresh name over it instead). `std::fs::hard_link`
/// does not follow the `/proc/self/fd` link, hence `linkat` with
/// `AT_SYMLINK_FOLLOW` (`/proc` must be mounted).
#[allow(unsafe_code)]
pub fn link_unnamed(file: &File, dst: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let to = CString::new(dst.as_os_str().as_bytes())?;
    // SAFETY: both arguments are NUL-terminated strings that outlive the
    // call; linkat only reads them.
    let r = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn an_unnamed_file_appears_at_its_name_and_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o644)
            .open(dir.path())
            .unwrap();
        f.write_all(b"whole").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let dst = dir.path().join("out");
        link_unnamed(&f, &dst).unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), b"whole");
        let e = link_unnamed(&f, &dst).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    }
}
