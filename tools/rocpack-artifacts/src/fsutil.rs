//! File-system helpers shared by split and recombine: hard-link-or-copy,
//! lexical symlink containment checks and deterministic directory walks.
//!
//! Nothing here follows symlinks: walks report them as symlinks, and a link
//! is only ever recreated with its original target text.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

pub use rocpack_bundle::fsutil::{absolute_lexical, open_regular, read_bounded};

/// An I/O error with the path it happened on.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}: {error}")]
pub struct FsError {
    /// The path involved.
    pub path: PathBuf,
    /// What was being done ("create directory", "rename", …).
    pub what: &'static str,
    /// The underlying error (part of the message, so not a `source()`).
    pub error: io::Error,
}

impl FsError {
    /// Wraps `source` with `path` and a short description of the operation.
    pub fn new(path: impl Into<PathBuf>, what: &'static str, error: io::Error) -> Self {
        Self {
            path: path.into(),
            what,
            error,
        }
    }
}

impl FsError {
    /// Whether this error came after a commit started moving outputs into
    /// place (see [`rocpack_kpack::commit::COMMIT_INTERRUPTED`]): the
    /// destination may hold some of them, so "nothing was written" is false.
    pub fn wrote_something(&self) -> bool {
        self.what == rocpack_kpack::commit::COMMIT_INTERRUPTED
            || self.what == rocpack_kpack::commit::COMMITTED_UNSYNCED
    }
}

impl From<rocpack_kpack::commit::CommitError> for FsError {
    fn from(e: rocpack_kpack::commit::CommitError) -> Self {
        Self {
            path: e.path,
            what: e.what,
            error: e.error,
        }
    }
}

/// Shorthand: map an `io::Result` to an [`FsError`] naming `path`.
pub trait IoContext<T> {
    /// Attach the path and operation to an I/O error.
    fn ctx(self, path: &Path, what: &'static str) -> Result<T, FsError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, path: &Path, what: &'static str) -> Result<T, FsError> {
        self.map_err(|e| FsError::new(path, what, e))
    }
}

/// Builds a set of outputs in a staging directory beside `dest` and moves
/// them into place all or nothing (see [`rocpack_kpack::commit::StagingDir`]).
///
/// `write` fills the staging directory it is given and returns its result
/// with the names of the outputs it made there. The first of `reserved`
/// (checked before `write` runs) or of those names that already exists in
/// `dest` is passed to `exists`, which makes the error; nothing is committed
/// then.
pub(crate) fn commit_outputs<T, E: From<FsError>>(
    dest: &Path,
    reserved: &[OsString],
    write: impl FnOnce(&Path) -> Result<(T, Vec<OsString>), E>,
    exists: impl Fn(&Path) -> E,
) -> Result<T, E> {
    // Outputs are moved into place by rename: through a symlinked output
    // directory that would replace the link (a new destination) or write
    // somewhere the caller did not name. Refused up front, saying why.
    if let Ok(m) = fs::symlink_metadata(dest) {
        if m.file_type().is_symlink() {
            let to = fs::read_link(dest)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".to_string());
            return Err(E::from(FsError::new(
                dest,
                "use as output directory",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("is a symlink (to `{to}`); outputs are committed by rename, so pass the directory it points to"),
                ),
            )));
        }
    }
    let staging = rocpack_kpack::commit::StagingDir::new(dest).map_err(FsError::from)?;
    if let Some(c) = staging.conflicts(reserved).into_iter().next() {
        return Err(exists(&c));
    }
    let (out, names) = write(staging.path())?;
    if let Some(c) = staging.conflicts(&names).into_iter().next() {
        return Err(exists(&c));
    }
    staging.commit().map_err(FsError::from)?;
    Ok(out)
}

/// Names in `dir`, sorted bytewise (deterministic walk order).
pub fn sorted_names(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

/// Hard-links `src` to `dst`, falling back to a copy (which uses
/// `copy_file_range` on Linux) when linking is not possible, e.g. across
/// file systems. `src` must be a regular file. The parent of `dst` must exist.
pub fn link_or_copy(src: &Path, dst: &Path) -> Result<(), FsError> {
    if fs::hard_link(src, dst).is_ok() {
        return Ok(());
    }
    fs::copy(src, dst).ctx(dst, "copy file")?;
    Ok(())
}

/// Copies `src` to `dst` (`copy_file_range` on Linux, so file systems that
/// support it share extents), never hard-linking: outputs must not share an
/// inode with inputs, or a later `chmod` or write to the output (Bazel makes
/// outputs read-only) would change the input too.
pub fn copy_file(src: &Path, dst: &Path) -> Result<(), FsError> {
    fs::copy(src, dst).ctx(dst, "copy file")?;
    Ok(())
}

/// Copies the permission bits of `src_mode` (masked to `0o777`) onto `path`.
pub fn set_mode(path: &Path, src_mode: u32) -> Result<(), FsError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(src_mode & 0o777))
        .ctx(path, "set permissions")
}

/// Recreates a symlink at `dst` with exactly the target text `target`.
pub fn copy_symlink(target: &Path, dst: &Path) -> Result<(), FsError> {
    std::os::unix::fs::symlink(target, dst).ctx(dst, "create symlink")
}

/// Whether a symlink at `link_rel` (a path relative to a tree root, using
/// only normal components) whose target text is `target` resolves, lexically,
/// to a location inside the tree. Absolute targets never stay inside (the
/// tree must be relocatable).
pub fn symlink_stays_inside(link_rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    // Depth of the directory holding the link, below the root.
    let mut depth: usize = link_rel
        .parent()
        .map(|p| {
            p.components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .count()
        })
        .unwrap_or(0);
    for c in target.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::Normal(_) => depth += 1,
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Whether the symlink at `link` (below `root`), with target text
/// `target`, resolves on disk to a place inside `root`, following every
/// symlink on the way (a dangling tail is resolved lexically from the last
/// existing directory, as `weakly_canonical` does).
pub fn symlink_resolves_inside(root: &Path, link: &Path, target: &Path) -> bool {
    let Ok(root) = fs::canonicalize(root) else {
        return false;
    };
    let Some(dir) = link.parent() else {
        return false;
    };
    let resolved = rocpack_kpack::weakly_canonical(&dir.join(target));
    resolved.starts_with(&root)
}

/// Resolves `rel` (a `/`-separated path below `base`) one component at a
/// time, refusing any component that is a symlink or not a directory: a
/// manifest prefix must name real directories all the way down (a symlink
/// in the middle would let the split copy `/etc/ssl`).
pub fn real_dir_below(base: &Path, rel: &str) -> Result<Option<PathBuf>, String> {
    let mut p = base.to_path_buf();
    for c in rel.split('/').filter(|c| !c.is_empty()) {
        p.push(c);
        match fs::symlink_metadata(&p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", p.display())),
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "{}: a symlink inside prefix `{rel}` (prefixes must be real directories)",
                    p.display()
                ))
            }
            Ok(m) if !m.is_dir() => {
                return Err(format!("{}: not a directory (prefix `{rel}`)", p.display()))
            }
            Ok(_) => {}
        }
    }
    Ok(Some(p))
}

/// A regular file mapped read-only (an empty file has no mapping), with
/// the open file for positioned reads ([`Mapped::source`]).
pub struct Mapped {
    file: fs::File,
    map: Option<memmap2::Mmap>,
}

impl Mapped {
    /// Maps `path`; refuses what is not a regular file (a FIFO is never
    /// waited on).
    #[allow(unsafe_code)]
    pub fn open(path: &Path) -> io::Result<Mapped> {
        let (file, meta) = open_regular(path)?;
        let map = if meta.len() == 0 {
            None
        } else {
            // SAFETY: a read-only private mapping of an input nobody
            // modifies while the tool runs (every build action's premise);
            // a concurrent truncation could raise SIGBUS, never memory
            // unsafety beyond that documented mmap caveat.
            Some(unsafe { memmap2::Mmap::map(&file) }?)
        };
        Ok(Mapped { file, map })
    }

    /// The file's bytes (through the mapping: touch only headers).
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// The same bytes through positioned reads (what parsers of bundle
    /// headers should read, so device code is never mapped in).
    pub fn source(&self) -> rocpack_bundle::FileRange<'_> {
        rocpack_bundle::FileRange::new(&self.file, 0, self.bytes().len() as u64)
    }

    /// The open file.
    pub fn file(&self) -> &fs::File {
        &self.file
    }
}

/// Whether two files hold the same bytes, compared in 256 KiB pieces.
pub fn files_equal(a: &Path, b: &Path) -> io::Result<bool> {
    use std::io::Read;
    let (mut fa, ma) = open_regular(a)?;
    let (mut fb, mb) = open_regular(b)?;
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let fill = |f: &mut fs::File, buf: &mut [u8]| -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match f.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    };
    let mut ba = vec![0u8; 256 * 1024];
    let mut bb = vec![0u8; 256 * 1024];
    loop {
        let n = fill(&mut fa, &mut ba)?;
        let m = fill(&mut fb, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Joins a `/`-separated relative path (already validated) onto `base`.
pub fn join_rel(base: &Path, rel: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in rel.split('/').filter(|c| !c.is_empty()) {
        p.push(c);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_containment() {
        let l = Path::new("lib/libx.so");
        assert!(symlink_stays_inside(l, Path::new("libx.so.1")));
        assert!(symlink_stays_inside(l, Path::new("../bin/x")));
        assert!(symlink_stays_inside(l, Path::new("./a/../b")));
        assert!(!symlink_stays_inside(l, Path::new("../../x")));
        assert!(!symlink_stays_inside(l, Path::new("/etc/passwd")));
        assert!(!symlink_stays_inside(Path::new("x"), Path::new("../x")));
        // Going below then above the root is caught at the moment it leaves.
        assert!(!symlink_stays_inside(l, Path::new("../../lib/libx.so")));
    }
}
