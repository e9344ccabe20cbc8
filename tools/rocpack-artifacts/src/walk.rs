//! Deterministic walk of one prefix tree: every directory, regular file and
//! symlink, sorted bytewise by relative path, symlinks never followed.
//!
//! The walk refuses what a split must never copy: symlinks whose target
//! leaves the prefix (or is absolute), special files (FIFOs, sockets,
//! devices) and names that are not UTF-8 (they become archive keys).

use std::fs;
use std::path::{Path, PathBuf};

use crate::fsutil::{self, FsError, IoContext};

/// What a walked entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File {
        /// Size in bytes.
        size: u64,
        /// `st_mode` permission bits.
        mode: u32,
    },
    /// A symlink (not followed).
    Symlink {
        /// The link's target text.
        target: PathBuf,
    },
}

/// One entry below a prefix root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `/`-separated path relative to the prefix root.
    pub rel: String,
    /// Path on disk.
    pub path: PathBuf,
    /// Its kind.
    pub kind: EntryKind,
}

/// Why a walk failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalkError {
    /// An I/O error.
    #[error(transparent)]
    Io(#[from] FsError),
    /// A symlink points outside the tree.
    #[error("{path}: symlink target `{target}` points outside the tree `{root}`")]
    SymlinkEscapes {
        /// The symlink.
        path: PathBuf,
        /// Its target text.
        target: PathBuf,
        /// The tree root it must stay inside.
        root: PathBuf,
    },
    /// A FIFO, socket or device node.
    #[error("{path}: not a regular file, directory or symlink")]
    SpecialFile {
        /// The entry.
        path: PathBuf,
    },
    /// A file name that is not valid UTF-8.
    #[error("{path}: file name is not valid UTF-8")]
    NonUtf8Name {
        /// The entry.
        path: PathBuf,
    },
}

/// Walks `root` (a directory), returning its entries (not `root` itself)
/// sorted by relative path.
pub fn walk(root: &Path) -> Result<Vec<Entry>, WalkError> {
    let mut out = Vec::new();
    walk_into(root, root, "", &mut out)?;
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

fn walk_into(
    root: &Path,
    dir: &Path,
    rel_dir: &str,
    out: &mut Vec<Entry>,
) -> Result<(), WalkError> {
    use std::os::unix::fs::PermissionsExt;
    for name in fsutil::sorted_names(dir).ctx(dir, "read directory")? {
        let path = dir.join(&name);
        let Some(name) = name.to_str() else {
            return Err(WalkError::NonUtf8Name { path });
        };
        let rel = if rel_dir.is_empty() {
            name.to_string()
        } else {
            format!("{rel_dir}/{name}")
        };
        let meta = fs::symlink_metadata(&path).ctx(&path, "stat")?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = fs::read_link(&path).ctx(&path, "read symlink")?;
            // Both: the text stays inside (relocatable), and the chain it
            // starts, followed on disk, stays inside too (`up -> ..` then
            // `esc -> up/../../x` is lexically inside but physically not).
            if !fsutil::symlink_stays_inside(Path::new(&rel), &target)
                || !fsutil::symlink_resolves_inside(root, &path, &target)
            {
                return Err(WalkError::SymlinkEscapes {
                    path,
                    target,
                    root: root.to_path_buf(),
                });
            }
            out.push(Entry {
                rel,
                path,
                kind: EntryKind::Symlink { target },
            });
        } else if ft.is_dir() {
            out.push(Entry {
                rel: rel.clone(),
                path: path.clone(),
                kind: EntryKind::Dir,
            });
            walk_into(root, &path, &rel, out)?;
        } else if ft.is_file() {
            out.push(Entry {
                rel,
                path,
                kind: EntryKind::File {
                    size: meta.len(),
                    mode: meta.permissions().mode(),
                },
            });
        } else {
            return Err(WalkError::SpecialFile { path });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_sorted_and_rejects_escapes() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        fs::create_dir_all(r.join("lib/sub")).unwrap();
        fs::write(r.join("lib/b"), b"1").unwrap();
        fs::write(r.join("lib/a"), b"22").unwrap();
        std::os::unix::fs::symlink("a", r.join("lib/a.so")).unwrap();
        std::os::unix::fs::symlink("../lib/b", r.join("lib/sub/c")).unwrap();
        let e = walk(r).unwrap();
        let rels: Vec<_> = e.iter().map(|e| e.rel.as_str()).collect();
        assert_eq!(
            rels,
            ["lib", "lib/a", "lib/a.so", "lib/b", "lib/sub", "lib/sub/c"]
        );
        assert!(matches!(e[1].kind, EntryKind::File { size: 2, .. }));

        std::os::unix::fs::symlink("../../x", r.join("lib/bad")).unwrap();
        let err = walk(r).unwrap_err();
        assert!(matches!(err, WalkError::SymlinkEscapes { .. }), "{err}");
        assert!(err.to_string().contains("lib/bad"), "{err}");
    }
}
