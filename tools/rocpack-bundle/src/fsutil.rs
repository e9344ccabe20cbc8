//! Opening inputs safely, once for every crate: input trees, configs and
//! snapshot repositories are repository content, so a symlink to
//! `/dev/zero` must not be read forever and a FIFO must not hang. Files are
//! opened non-blocking and judged with `fstat` on the open descriptor (no
//! race with a rename).

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::path::{Component, Path, PathBuf};

/// Opens `path` read-only without blocking on a FIFO (`O_NONBLOCK`, plus
/// the `extra` open flags, e.g. `libc::O_NOFOLLOW`); any file type.
pub fn open_nonblocking(path: &Path, extra: libc::c_int) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | extra)
        .open(path)
}

/// What kind of non-regular file `meta` describes, for messages.
pub fn file_kind(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// [`open_regular`] with `extra` open flags ([`open_nonblocking`]).
pub fn open_regular_with(path: &Path, extra: libc::c_int) -> io::Result<(File, Metadata)> {
    let f = open_nonblocking(path, extra)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", file_kind(&meta)),
        ));
    }
    Ok((f, meta))
}

/// Opens `path` for reading without blocking on a FIFO and refuses what is
/// not a regular file (an `InvalidInput` error naming what it is).
pub fn open_regular(path: &Path) -> io::Result<(File, Metadata)> {
    open_regular_with(path, 0)
}

/// Reads a whole regular file of at most `limit` bytes ([`open_regular`];
/// an `InvalidData` error when it is or grows larger).
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let (f, meta) = open_regular(path)?;
    if meta.len() > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file is {} bytes; at most {limit} are accepted", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("file grew past {limit} bytes while being read"),
        ));
    }
    Ok(bytes)
}

/// Makes `p` absolute (relative to the current directory) without touching
/// the file system and without resolving symlinks; `.`/`..` are folded.
pub fn absolute_lexical(p: &Path) -> io::Result<PathBuf> {
    let mut out = if p.is_absolute() {
        PathBuf::new()
    } else {
        std::env::current_dir()?
    };
    for c in p.components() {
        match c {
            Component::Prefix(x) => out.push(x.as_os_str()),
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_without_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let e = read_bounded(&fifo, 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let e = read_bounded(Path::new("/dev/zero"), 10).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        assert!(open_regular(tmp.path())
            .unwrap_err()
            .to_string()
            .contains("a directory"));
        let f = tmp.path().join("f");
        std::fs::write(&f, b"0123456789a").unwrap();
        assert_eq!(read_bounded(&f, 11).unwrap().len(), 11);
        assert_eq!(
            read_bounded(&f, 10).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let link = tmp.path().join("l");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(open_regular(&link).is_ok());
        assert!(open_regular_with(&link, libc::O_NOFOLLOW).is_err());
    }

    #[test]
    fn absolute_lexical_folds_dots_without_the_file_system() {
        assert_eq!(
            absolute_lexical(Path::new("/a/./b/../c")).unwrap(),
            Path::new("/a/c")
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(absolute_lexical(Path::new("x/..")).unwrap(), cwd);
    }
}
