//! Wheel archives without the zip crate, in memory that does not grow with
//! the number of entries beyond a few bytes each:
//!
//! - [`central`]: the central directory of an input wheel, checked;
//! - [`read`]: [`InputWheel`] reads the central-directory table of
//!   [`central::scan`] (16 bytes per entry plus its name) and inflates
//!   entries with positioned reads;
//! - [`record`]: RECORD: [`verify`] streams the input RECORD row by row and
//!   checks each file as it is inflated, keeping one bit per entry
//!   ("listed") and spilling each file's SHA-256 to a temporary file
//!   ([`Digests`]) for the output RECORDs, which the writers write;
//! - [`write`]: [`WheelWriter`] streams local headers and data to the wheel
//!   and spills central-directory records and RECORD rows to temporary
//!   files, appended at the end (ZIP64 where sizes, offsets or the entry
//!   count need it). Entries are compressed in parallel in chunks and
//!   written in the order given, so the result does not depend on the
//!   thread count; fixed timestamps and modes. [`TreeWriter`] lays the
//!   same entries out as an installed directory.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use crate::WheelError;

pub mod central;
pub mod read;
pub mod record;
pub mod write;

use central::flag;
pub use read::InputWheel;
pub use record::{check_record, verify, Digests};
pub use write::{
    sink, sort_entries, write_all, zip_time, Content, DosTime, InputRef, OutEntry, Sink,
    TreeWriter, WheelWriter, WriteOptions, Written,
};

/// Most entries an input wheel may have (the largest ROCm wheels hold a
/// few ten thousand files).
pub const MAX_ENTRIES: u64 = 1 << 17;
/// Most bytes one entry of an input wheel may expand to.
pub const MAX_ENTRY_EXPANDED: u64 = 16 << 30;
/// Most bytes an input wheel may expand to (sum of declared sizes).
pub const MAX_EXPANDED: u64 = 128 << 30;
/// The caps above, for [`central::scan`].
pub const LIMITS: central::Limits = central::Limits {
    max_entries: MAX_ENTRIES,
    max_entry_bytes: MAX_ENTRY_EXPANDED,
    max_total_bytes: MAX_EXPANDED,
};
/// Largest RECORD read.
pub const MAX_RECORD: u64 = 64 << 20;
/// Bytes of an entry's start handed to the extraction choice of [`verify`].
pub const HEAD_LEN: usize = rocpack_image::HEAD_LEN;
/// [`central::Table`] flag: extracted below the work root.
pub const EXTRACTED: u16 = flag::USER2;

pub(crate) fn ioerr(path: &Path, what: &'static str, e: io::Error) -> WheelError {
    WheelError::Io {
        path: path.to_path_buf(),
        what,
        error: e,
    }
}

pub(crate) fn zipmsg(path: &Path, m: impl std::fmt::Display) -> WheelError {
    WheelError::Zip(format!("{}: {m}", path.display()))
}

/// Whether `name` is a plain relative path: no empty, `.` or `..`
/// component, no backslash, not absolute.
pub fn is_plain_rel(name: &str) -> bool {
    !name.is_empty()
        && !name.contains('\\')
        && !name.contains('\0')
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Joins a validated `/`-separated relative path onto `base`.
pub fn join(base: &Path, rel: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in rel.split('/') {
        p.push(c);
    }
    p
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), WheelError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o777))
        .map_err(|e| ioerr(path, "set permissions", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths() {
        assert!(is_plain_rel("a/b.py"));
        assert!(!is_plain_rel("/a"));
        assert!(!is_plain_rel("a/../b"));
        assert!(!is_plain_rel("a//b"));
        assert!(!is_plain_rel("./a"));
        assert!(!is_plain_rel("a\\b"));
        assert!(!is_plain_rel(""));
    }
}
