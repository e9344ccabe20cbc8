//! Deterministic walk of one prefix tree: every directory, regular file and
//! symlink, sorted bytewise by relative path, symlinks never followed.
//!
//! The walk refuses what a split must never copy: symlinks whose target
//! leaves the prefix (or is absolute), special files (FIFOs, sockets,
//! devices) and names that are not UTF-8 (they become archive keys).
//!
//! Build systems stage inputs as symlinks (Buck2's `symlinked_dir`, Bazel's
//! sandbox): `lib/x.so -> ../../<repo>/art/lib/x.so`. [`walk_staged`] takes
//! the directories the declared inputs come from (staging roots) and reads
//! such a link as the input it stands for, at the same relative path inside
//! a staging root: a regular file is read through the link, a directory is
//! walked, and a symlink of the original tree is judged as if the original
//! tree were walked (kept when it stays inside, refused when it escapes). One
//! policy whatever the staging: a link is accepted only when the tree it
//! mirrors would be accepted.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
        /// The link's target text (boxed: the kind is kept per entry, and
        /// most entries are files).
        target: Box<Path>,
    },
}

/// One entry below a prefix root. Its path on disk is not stored (a tree
/// of many small files would hold every path twice): it is the walked root
/// joined with `rel` ([`Entry::path`]), except below a build system's
/// staging link, where the directory the entry is read from is kept (once
/// per directory, shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `/`-separated path relative to the prefix root.
    pub rel: String,
    /// The directory on disk holding the entry, when it is not the walked
    /// root joined with `rel`'s parent (staged inputs).
    dir: Option<Arc<Path>>,
    /// Its kind.
    pub kind: EntryKind,
}

impl Entry {
    /// Path on disk of the entry of the tree walked at `root` (the root
    /// the walk was given): `root/rel`, or for a staged input the input
    /// itself.
    pub fn path(&self, root: &Path) -> PathBuf {
        match &self.dir {
            Some(d) => d.join(self.name()),
            None => root.join(&self.rel),
        }
    }

    /// The entry's own name (the last component of `rel`).
    pub fn name(&self) -> &str {
        self.rel.rsplit_once('/').map_or(&self.rel, |(_, n)| n)
    }
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
    walk_staged(root, &[])
}

/// [`walk`] of a tree a build system staged with symlinks into the
/// directories `staging_roots` (see the module documentation). With no
/// staging roots this is [`walk`]. File entries of staged inputs carry the
/// path of the input itself.
pub fn walk_staged(root: &Path, staging_roots: &[PathBuf]) -> Result<Vec<Entry>, WalkError> {
    let roots = staging_roots
        .iter()
        .map(|r| {
            let c = fs::canonicalize(r).ctx(r, "resolve staging root")?;
            if !c.is_dir() {
                return Err(FsError::new(
                    r,
                    "resolve staging root",
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a directory"),
                ));
            }
            Ok(c)
        })
        .collect::<Result<Vec<_>, FsError>>()?;
    let mut out = Vec::new();
    walk_into(root, root, None, "", &roots, &mut out)?;
    out.sort_unstable_by(|a, b| a.rel.cmp(&b.rel));
    // The vector grew by doubling: up to half of it is spare.
    out.shrink_to_fit();
    Ok(out)
}

/// Where a staging link leads: `input` (not followed further) is the
/// declared input at the link's own relative path below `origin`, a
/// directory inside a staging root.
struct Staged {
    input: PathBuf,
    origin: PathBuf,
}

/// The physical location of `p` without following its last component.
fn physical(p: &Path) -> Option<PathBuf> {
    let name = p.file_name()?;
    let parent = p.parent()?;
    Some(rocpack_kpack::weakly_canonical(parent).join(name))
}

/// Follows the symlink `link` (at `rel` below the walked root) one hop at a
/// time until a hop lands inside a staging root; that location must end in
/// `rel`, so the link mirrors the input tree path for path. `None`: the
/// chain never reaches a staging root, reaches it elsewhere, or dangles.
fn resolve_staged(link: &Path, rel: &str, roots: &[PathBuf]) -> Option<Staged> {
    if roots.is_empty() {
        return None;
    }
    let mut cur = link.to_path_buf();
    // As many hops as Linux follows (MAXSYMLINKS).
    for _ in 0..40 {
        let text = fs::read_link(&cur).ok()?;
        let next = physical(&cur.parent()?.join(text))?;
        if let Some(root) = roots.iter().find(|r| next.starts_with(r)) {
            if !next.ends_with(rel) {
                return None;
            }
            let mut origin = next.clone();
            for _ in Path::new(rel).components() {
                origin.pop();
            }
            return origin.starts_with(root).then_some(Staged {
                input: next,
                origin,
            });
        }
        if !fs::symlink_metadata(&next).ok()?.file_type().is_symlink() {
            return None;
        }
        cur = next;
    }
    None
}

/// Walks `dir` (`rel_dir` below the walked root) into `out`. `root` is the
/// tree whose containment rules apply; `at` is `dir` when it is not the
/// walked root joined with `rel_dir` (below a staging link).
fn walk_into(
    root: &Path,
    dir: &Path,
    at: Option<&Arc<Path>>,
    rel_dir: &str,
    staging: &[PathBuf],
    out: &mut Vec<Entry>,
) -> Result<(), WalkError> {
    use std::os::unix::fs::PermissionsExt;
    for name in fsutil::sorted_names(dir).ctx(dir, "read directory")? {
        let path = dir.join(&name);
        let Some(name) = name.to_str() else {
            return Err(WalkError::NonUtf8Name { path });
        };
        // Exactly as long as it must be: one is kept per entry.
        let rel = if rel_dir.is_empty() {
            name.to_string()
        } else {
            let mut r = String::with_capacity(rel_dir.len() + 1 + name.len());
            r.push_str(rel_dir);
            r.push('/');
            r.push_str(name);
            r
        };
        let mut meta = fs::symlink_metadata(&path).ctx(&path, "stat")?;
        // The tree whose containment rules apply (the staged input's own
        // tree once a staging link is followed), and where the entry is.
        let mut origin = root.to_path_buf();
        let mut path = path;
        let mut at = at.cloned();
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).ctx(&path, "read symlink")?;
            // Both: the text stays inside (relocatable), and the chain it
            // starts, followed on disk, stays inside too (`up -> ..` then
            // `esc -> up/../../x` is lexically inside but physically not).
            if fsutil::symlink_stays_inside(Path::new(&rel), &target)
                && fsutil::symlink_resolves_inside(root, &path, &target)
            {
                out.push(Entry {
                    rel,
                    dir: at,
                    kind: EntryKind::Symlink {
                        target: target.into_boxed_path(),
                    },
                });
                continue;
            }
            // A build system's staging link: stands for the declared input
            // at the same relative path, which is judged like the original.
            let Some(staged) = resolve_staged(&path, &rel, staging) else {
                return Err(WalkError::SymlinkEscapes {
                    path,
                    target,
                    root: root.to_path_buf(),
                });
            };
            meta = fs::symlink_metadata(&staged.input).ctx(&staged.input, "stat")?;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&staged.input).ctx(&staged.input, "read symlink")?;
                if !fsutil::symlink_stays_inside(Path::new(&rel), &target)
                    || !fsutil::symlink_resolves_inside(&staged.origin, &staged.input, &target)
                {
                    return Err(WalkError::SymlinkEscapes {
                        path: staged.input,
                        target,
                        root: staged.origin,
                    });
                }
                out.push(Entry {
                    rel,
                    dir: at,
                    kind: EntryKind::Symlink {
                        target: target.into_boxed_path(),
                    },
                });
                continue;
            }
            origin = staged.origin;
            path = staged.input;
            at = path.parent().map(Arc::from);
        }
        let ft = meta.file_type();
        if ft.is_dir() {
            // Its entries are read at `path`: say so when that is not
            // below the walked root.
            let inner = at.is_some().then(|| Arc::from(path.as_path()));
            out.push(Entry {
                rel: rel.clone(),
                dir: at,
                kind: EntryKind::Dir,
            });
            walk_into(&origin, &path, inner.as_ref(), &rel, staging, out)?;
        } else if ft.is_file() {
            out.push(Entry {
                rel,
                dir: at,
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

    /// The tree `src` (lib/a, lib/a.so -> a, lib/sub/c) staged Buck2-style
    /// into `stage`: real directories, one symlink per input.
    fn staged_pair(t: &Path) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::symlink;
        let src = t.join("repo/art");
        let stage = t.join("out/stage");
        fs::create_dir_all(src.join("lib/sub")).unwrap();
        fs::write(src.join("lib/a"), b"aa").unwrap();
        symlink("a", src.join("lib/a.so")).unwrap();
        fs::write(src.join("lib/sub/c"), b"c").unwrap();
        fs::create_dir_all(stage.join("lib/sub")).unwrap();
        symlink("../../../repo/art/lib/a", stage.join("lib/a")).unwrap();
        symlink("../../../repo/art/lib/a.so", stage.join("lib/a.so")).unwrap();
        symlink(src.join("lib/sub/c"), stage.join("lib/sub/c")).unwrap();
        (src, stage)
    }

    #[test]
    fn staging_links_stand_for_the_inputs_they_mirror() {
        let t = tempfile::tempdir().unwrap();
        let (src, stage) = staged_pair(t.path());
        // Without staging roots the links escape.
        assert!(matches!(
            walk(&stage),
            Err(WalkError::SymlinkEscapes { .. })
        ));
        let got = walk_staged(&stage, std::slice::from_ref(&src)).unwrap();
        let want = walk(&src).unwrap();
        let kinds = |v: &[Entry]| -> Vec<(String, EntryKind)> {
            v.iter().map(|e| (e.rel.clone(), e.kind.clone())).collect()
        };
        assert_eq!(kinds(&got), kinds(&want));
        // Files are read from the inputs themselves.
        let a = got.iter().find(|e| e.rel == "lib/a").unwrap();
        assert_eq!(a.path(&stage), fs::canonicalize(src.join("lib/a")).unwrap());
        // A staged directory is walked as the input directory.
        fs::remove_dir_all(stage.join("lib/sub")).unwrap();
        std::os::unix::fs::symlink(src.join("lib/sub"), stage.join("lib/sub")).unwrap();
        let got = walk_staged(&stage, std::slice::from_ref(&src)).unwrap();
        assert_eq!(kinds(&got), kinds(&want));
        // ...and what it holds is read there too.
        let c = got.iter().find(|e| e.rel == "lib/sub/c").unwrap();
        assert_eq!(c.path(&stage), src.join("lib/sub/c"));
        let a = got.iter().find(|e| e.rel == "lib/a").unwrap();
        assert_eq!(a.path(&stage), fs::canonicalize(src.join("lib/a")).unwrap());
    }

    #[test]
    fn staging_never_lets_an_escape_through() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir().unwrap();
        let (src, stage) = staged_pair(t.path());
        let roots = std::slice::from_ref(&src);
        let escapes = |stage: &Path, roots: &[PathBuf]| {
            matches!(
                walk_staged(stage, roots),
                Err(WalkError::SymlinkEscapes { .. })
            )
        };
        // The original tree's own escaping link stays refused when staged.
        fs::write(t.path().join("repo/secret"), b"s").unwrap();
        symlink("../../secret", src.join("lib/bad")).unwrap();
        symlink("../../../repo/art/lib/bad", stage.join("lib/bad")).unwrap();
        assert!(escapes(&stage, roots));
        fs::remove_file(stage.join("lib/bad")).unwrap();
        fs::remove_file(src.join("lib/bad")).unwrap();
        assert!(walk_staged(&stage, roots).is_ok());

        // A link into a staging root at another path (a resolved copy of a
        // link, or a different input): not a mirror, refused.
        symlink("../../../repo/art/lib/a", stage.join("lib/b")).unwrap();
        assert!(escapes(&stage, roots));
        fs::remove_file(stage.join("lib/b")).unwrap();

        // A link to something outside every staging root.
        symlink("../../../repo/secret", stage.join("lib/s")).unwrap();
        assert!(escapes(&stage, roots));
        fs::remove_file(stage.join("lib/s")).unwrap();

        // The mirrored tree must lie inside the staging root, not above it.
        let narrow = [src.join("lib/sub")];
        assert!(escapes(&stage, &narrow));

        // A staging root that does not exist is an error, not "no roots".
        assert!(walk_staged(&stage, &[t.path().join("nope")]).is_err());
    }
}
