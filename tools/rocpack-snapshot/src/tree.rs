//! Source-snapshot trees: the tree digest, a symlink-keeping copy and the
//! extraction of a `git archive` tar stream.
//!
//! The **tree digest** (`sha256:<hex>`) is the sha256 of a manifest with one
//! line per entry, sorted by path bytes (docs/formats/snapshot-metadata.md §5):
//!
//! ```text
//! file <sha256 of content> <path>        regular file, not executable
//! exec <sha256 of content> <path>        regular file with any x bit
//! link <sha256 of target>  <path>        symbolic link (never followed)
//! dir  -                   <path>        directory (empty ones count too)
//! ```
//!
//! The channel's own `metadata.txt` and `manifest.txt` (at the top of the
//! tree) are not part of it. Anything else (FIFO, device, socket) is an error,
//! as is a path holding a newline.
//!
//! `manifest.txt` is that manifest as recorded with the snapshot: its sha256
//! is the recorded digest, so it proves itself, and [`diff`] of it against the
//! tree's manifest now names each added, removed and changed entry.

use crate::error::{io_at, Error, Result};
use crate::fsutil::{self, step};
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Name of the metadata file at the top of a channel directory (not hashed).
pub const METADATA: &str = "metadata.txt";
/// Name of the recorded per-file manifest at the top of a channel directory (not hashed).
pub const MANIFEST: &str = "manifest.txt";
/// Largest recorded manifest read back (about a million entries of typical paths).
pub const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// Top-level names a snapshot reserves for its own files (never hashed, never cut).
fn reserved(rel: &str) -> bool {
    rel == METADATA || rel == MANIFEST
}
/// Most entries a snapshot tree may hold (files, links and directories).
pub const MAX_ENTRIES: usize = 1_000_000;

/// One entry of a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    File { exec: bool },
    Link,
    Dir,
}

/// Opens a regular file without following a final symlink and without
/// blocking on a FIFO; anything but a regular file is refused on the open
/// descriptor (so a file swapped for a FIFO or a link meanwhile is an error).
fn open_no_follow(path: &Path) -> Result<File> {
    fsutil::open_regular_with(path, libc::O_NOFOLLOW)
}

/// Every entry under `dir` (relative paths, sorted by bytes), the top-level
/// `metadata.txt` and `manifest.txt` excluded. Symlinks are listed, never followed.
pub fn list(dir: &Path) -> Result<Vec<(String, Entry)>> {
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Ok(out)
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Entry)>) -> Result<()> {
    let rd = fs::read_dir(dir).map_err(io_at(dir))?;
    for ent in rd {
        let ent = ent.map_err(io_at(dir))?;
        let p = ent.path();
        let rel = p
            .strip_prefix(base)
            .unwrap_or(&p)
            .to_str()
            .ok_or_else(|| Error::input(&p, None, "path is not valid UTF-8"))?
            .to_string();
        if reserved(&rel) {
            continue;
        }
        if rel.contains('\n') {
            return Err(Error::input(&p, None, "path contains a newline"));
        }
        if out.len() >= MAX_ENTRIES {
            return Err(Error::input(
                base,
                None,
                format!("more than {MAX_ENTRIES} entries in a snapshot tree"),
            ));
        }
        let m = fs::symlink_metadata(&p).map_err(io_at(&p))?;
        let t = m.file_type();
        if t.is_symlink() {
            out.push((rel, Entry::Link));
        } else if t.is_dir() {
            out.push((rel, Entry::Dir));
            walk(base, &p, out)?;
        } else if t.is_file() {
            out.push((
                rel,
                Entry::File {
                    exec: m.permissions().mode() & 0o111 != 0,
                },
            ));
        } else {
            return Err(Error::input(
                &p,
                None,
                format!(
                    "{} in a snapshot tree (only files, directories and symlinks are allowed)",
                    fsutil::file_kind(&m)
                ),
            ));
        }
    }
    Ok(())
}

fn sha256_reader(mut r: impl Read, label: &Path) -> Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf).map_err(io_at(label))?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
    }
    Ok(hex::encode(h.finalize()))
}

/// The manifest the digest is computed over (see the module docs).
pub fn manifest(dir: &Path) -> Result<String> {
    let mut text = String::new();
    for (rel, e) in list(dir)? {
        let p = dir.join(&rel);
        let line = match e {
            Entry::Dir => format!("dir  - {rel}\n"),
            Entry::Link => {
                let target = fs::read_link(&p).map_err(io_at(&p))?;
                let d = hex::encode(Sha256::digest(target.as_os_str().as_encoded_bytes()));
                format!("link {d} {rel}\n")
            }
            Entry::File { exec } => {
                let d = sha256_reader(open_no_follow(&p)?, &p)?;
                format!("{} {d} {rel}\n", if exec { "exec" } else { "file" })
            }
        };
        text.push_str(&line);
    }
    Ok(text)
}

/// `sha256:<hex>` of a manifest's text.
pub fn digest_of(manifest: &str) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(manifest.as_bytes()))
    )
}

/// `sha256:<hex>` of [`manifest`].
pub fn digest(dir: &Path) -> Result<String> {
    Ok(digest_of(&manifest(dir)?))
}

/// Writes `manifest` as the channel directory's `manifest.txt` (durably).
pub fn write_manifest(dir: &Path, manifest: &str) -> Result<()> {
    fsutil::write_durable(&dir.join(MANIFEST), manifest.as_bytes())
}

/// The recorded `manifest.txt` of `dir`, when it is the manifest of `digest`.
/// `Err` says why the changed entries cannot be named (never a hard error:
/// the digest comparison already decided the verdict).
pub fn recorded_manifest(dir: &Path, digest: &str) -> std::result::Result<String, String> {
    let p = dir.join(MANIFEST);
    if fs::symlink_metadata(&p).is_err() {
        return Err(format!(
            "no {MANIFEST} (the snapshot predates per-file manifests), so the changed files cannot be named; a new cut, a rotation or `snapctl record-patch` records one"
        ));
    }
    let text = fsutil::read_text_bounded(&p, MAX_MANIFEST_BYTES)
        .map_err(|e| format!("cannot read {MANIFEST}: {e}"))?;
    if digest_of(&text) != digest {
        return Err(format!(
            "{MANIFEST} is not the manifest of {digest} (it was edited or is stale), so the changed files cannot be named"
        ));
    }
    Ok(text)
}

/// How one entry differs between two manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Removed,
    /// What changed: "content", "x bit set", "symlink target", "file -> symlink", …
    Changed(String),
}

/// One entry that differs between two manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    pub change: Change,
}

impl std::fmt::Display for FileChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.change {
            Change::Added => write!(f, "added   {}", self.path),
            Change::Removed => write!(f, "removed {}", self.path),
            Change::Changed(what) => write!(f, "changed {} ({what})", self.path),
        }
    }
}

/// Path -> (kind, digest) of a manifest's lines (malformed lines are skipped:
/// a recorded manifest is trusted only after its digest matched).
fn parse_manifest(t: &str) -> std::collections::BTreeMap<&str, (&str, &str)> {
    t.lines()
        .filter_map(|l| {
            let (kind, rest) = l.split_once(' ')?;
            let (d, p) = rest.trim_start().split_once(' ')?;
            Some((p, (kind, d)))
        })
        .collect()
}

fn kind_name(kind: &str) -> &str {
    match kind {
        "file" => "file",
        "exec" => "executable",
        "link" => "symlink",
        "dir" => "directory",
        other => other,
    }
}

/// Every entry that differs from `old` (the recorded manifest) to `new`,
/// sorted by path bytes.
pub fn diff(old: &str, new: &str) -> Vec<FileChange> {
    let (a, b) = (parse_manifest(old), parse_manifest(new));
    let mut paths: Vec<&str> = a.keys().chain(b.keys()).copied().collect();
    paths.sort_unstable_by(|x, y| x.as_bytes().cmp(y.as_bytes()));
    paths.dedup();
    paths
        .into_iter()
        .filter_map(|p| {
            let change = match (a.get(p), b.get(p)) {
                (None, Some(_)) => Change::Added,
                (Some(_), None) => Change::Removed,
                (Some(x), Some(y)) if x == y => return None,
                (Some((ka, da)), Some((kb, db))) => Change::Changed(match (*ka, *kb) {
                    (k1, k2) if k1 == k2 && k1 == "link" => "symlink target".into(),
                    (k1, k2) if k1 == k2 => "content".into(),
                    ("file", "exec") if da == db => "x bit set".into(),
                    ("exec", "file") if da == db => "x bit cleared".into(),
                    ("file", "exec") => "content, x bit set".into(),
                    ("exec", "file") => "content, x bit cleared".into(),
                    (k1, k2) => format!("{} -> {}", kind_name(k1), kind_name(k2)),
                }),
                (None, None) => return None,
            };
            Some(FileChange {
                path: p.to_string(),
                change,
            })
        })
        .collect()
}

fn write_file(dst: &Path, mut from: impl Read, exec: bool, label: &Path) -> Result<()> {
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if exec { 0o755 } else { 0o644 })
        .open(dst)
        .map_err(io_at(dst))?;
    std::io::copy(&mut from, &mut to).map_err(io_at(label))?;
    // The umask may have dropped bits: set them exactly, on the descriptor
    // (a path could be swapped meanwhile).
    to.set_permissions(fs::Permissions::from_mode(if exec { 0o755 } else { 0o644 }))
        .map_err(io_at(dst))?;
    to.flush().map_err(io_at(dst))?;
    to.sync_all().map_err(io_at(dst))
}

/// fsync every directory of the tree under `dir` (files are synced when written).
fn fsync_dirs(dir: &Path) -> Result<()> {
    for (rel, e) in list(dir)? {
        if e == Entry::Dir {
            fsutil::fsync_dir(&dir.join(rel))?;
        }
    }
    fsutil::fsync_dir(dir)
}

/// Copies the tree `src` (top-level `metadata.txt` and `manifest.txt`
/// excluded) into the new directory `dst`: files with their x bit, symlinks
/// as symlinks, empty directories too; everything fsynced. Returns the
/// [`manifest`] of the copy, so a caller can compare its digest with the
/// source's recorded one (a file rewritten while it was copied shows up as a
/// mismatch, never as silently mixed bytes).
pub fn copy_tree(src: &Path, dst: &Path) -> Result<String> {
    fs::create_dir(dst).map_err(io_at(dst))?;
    for (rel, e) in list(src)? {
        let (s, d) = (src.join(&rel), dst.join(&rel));
        match e {
            Entry::Dir => fs::create_dir(&d).map_err(io_at(&d))?,
            Entry::Link => {
                let t = fs::read_link(&s).map_err(io_at(&s))?;
                std::os::unix::fs::symlink(&t, &d).map_err(io_at(&d))?;
            }
            Entry::File { exec } => write_file(&d, open_no_follow(&s)?, exec, &s)?,
        }
    }
    fsync_dirs(dst)?;
    manifest(dst)
}

/// A relative path of a tar entry, refused when absolute, with `..`, or empty.
fn safe_rel(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// What [`extract_tar`] made at one relative path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Made {
    /// A directory: named by its own tar entry (`explicit`) or made as a parent.
    Dir {
        explicit: bool,
    },
    Link,
    File,
}

/// Every path the extraction made, so that no entry lands under a symlink
/// (or a file) the extraction itself created and no name is made twice.
/// A git tree can hold two entries of one name (a symlink `a` to a
/// directory outside the root and a directory `a/`; git writes no such tree,
/// but `git fetch` accepts one while `transfer.fsckObjects` is off): without
/// this, `a/<file>` would be written through the symlink, outside `dst`.
struct Extraction {
    dst: PathBuf,
    made: std::collections::HashMap<PathBuf, Made>,
}

impl Extraction {
    fn refuse(rel: &Path, msg: String) -> Error {
        Error::input(
            Path::new("<git archive>"),
            None,
            format!("{}: {msg}; refusing the tree", rel.display()),
        )
    }

    /// Makes the missing parents of `rel` (each a new directory, never
    /// through an existing link); refuses a parent that is a link or a file.
    fn parents(&mut self, rel: &Path) -> Result<()> {
        let mut prefix = PathBuf::new();
        let comps: Vec<_> = rel.components().collect();
        for c in &comps[..comps.len().saturating_sub(1)] {
            prefix.push(c);
            match self.made.get(&prefix) {
                Some(Made::Dir { .. }) => {}
                Some(k) => {
                    return Err(Self::refuse(
                        rel,
                        format!(
                            "its parent {} is a {} in the same tree (two entries with one name)",
                            prefix.display(),
                            if *k == Made::Link { "symlink" } else { "file" }
                        ),
                    ))
                }
                None => {
                    let d = self.dst.join(&prefix);
                    fs::create_dir(&d).map_err(io_at(&d))?;
                    self.made
                        .insert(prefix.clone(), Made::Dir { explicit: false });
                }
            }
        }
        Ok(())
    }

    /// Records `rel` as `kind`; `Ok(false)` when it is a directory already
    /// made as a parent (nothing to create), an error for any other repeat.
    fn claim(&mut self, rel: &Path, kind: Made) -> Result<bool> {
        match self.made.get(rel).copied() {
            None => {
                self.made.insert(rel.to_path_buf(), kind);
                Ok(true)
            }
            Some(Made::Dir { explicit: false }) if kind == (Made::Dir { explicit: true }) => {
                self.made.insert(rel.to_path_buf(), kind);
                Ok(false)
            }
            Some(_) => Err(Self::refuse(
                rel,
                "the tree holds two entries with this name".into(),
            )),
        }
    }
}

/// Extracts a `git archive --format=tar` stream into the new directory `dst`:
/// regular files (x bit kept), directories and symlinks (kept as links, with
/// their target as written). pax headers are skipped; hard links, devices and
/// FIFOs, absolute paths and `..` are refused, and so are a name given twice
/// and an entry under a symlink or file of the same tree (see [`Extraction`]):
/// nothing is ever created, opened or written through a link this extraction
/// made. Returns the number of entries.
pub fn extract_tar(stream: impl Read, dst: &Path) -> Result<usize> {
    fs::create_dir(dst).map_err(io_at(dst))?;
    let mut ar = tar::Archive::new(stream);
    let label = PathBuf::from("<git archive>");
    let mut made = Extraction {
        dst: dst.to_path_buf(),
        made: Default::default(),
    };
    let mut n = 0usize;
    for ent in ar.entries().map_err(io_at(&label))? {
        let ent = ent.map_err(io_at(&label))?;
        let kind = ent.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            continue;
        }
        let raw = ent.path().map_err(io_at(&label))?.into_owned();
        let rel = safe_rel(&raw)
            .ok_or_else(|| Error::input(&label, None, format!("unsafe path {}", raw.display())))?;
        if rel.to_str().is_some_and(reserved) {
            return Err(Error::input(
                &label,
                None,
                format!(
                    "the archive has a top-level {}, a name a snapshot reserves for its own files ({METADATA}, {MANIFEST})",
                    rel.display()
                ),
            ));
        }
        n += 1;
        if n > MAX_ENTRIES {
            return Err(Error::input(
                &label,
                None,
                format!("more than {MAX_ENTRIES} entries"),
            ));
        }
        made.parents(&rel)?;
        let d = dst.join(&rel);
        if kind.is_dir() {
            if made.claim(&rel, Made::Dir { explicit: true })? {
                fs::create_dir(&d).map_err(io_at(&d))?;
            }
        } else if kind.is_symlink() {
            let t = ent
                .link_name()
                .map_err(io_at(&label))?
                .ok_or_else(|| Error::input(&d, None, "symlink without a target"))?
                .into_owned();
            made.claim(&rel, Made::Link)?;
            std::os::unix::fs::symlink(&t, &d).map_err(io_at(&d))?;
        } else if kind.is_file() {
            let exec = ent.header().mode().map_err(io_at(&label))? & 0o111 != 0;
            made.claim(&rel, Made::File)?;
            write_file(&d, ent, exec, &label)?;
        } else {
            return Err(Error::input(
                &d,
                None,
                format!("unsupported tar entry type {kind:?} in the archive"),
            ));
        }
    }
    step("extracted snapshot tree");
    fsync_dirs(dst)?;
    Ok(n)
}

/// Atomically exchanges two directory entries (`renameat2(RENAME_EXCHANGE)`),
/// so a reader of `b` sees the old tree or the new one, never neither. On a
/// filesystem without it (EINVAL/ENOSYS): `b` → `a.old`, `a` → `b`,
/// `a.old` → `a` — each step a rename that a journal replay completes.
pub(crate) fn exchange(a: &Path, b: &Path) -> Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            let mut old = a.as_os_str().to_owned();
            old.push(".old");
            let old = PathBuf::from(old);
            fs::rename(b, &old).map_err(io_at(b))?;
            fs::rename(a, b).map_err(io_at(b))?;
            fs::rename(&old, a).map_err(io_at(a))
        }
        Err(e) => Err(Error::io(b, e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_sees_content_mode_links_and_empty_dirs() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a");
        fs::create_dir_all(d.join("x/y")).unwrap();
        fs::write(d.join("x/f.c"), "int x;\n").unwrap();
        fs::write(d.join(METADATA), "ignored").unwrap();
        std::os::unix::fs::symlink("f.c", d.join("x/l")).unwrap();
        let d0 = digest(&d).unwrap();
        fs::write(d.join(METADATA), "still ignored").unwrap();
        fs::write(d.join(MANIFEST), "ignored too").unwrap();
        assert_eq!(digest(&d).unwrap(), d0);
        let c = t.path().join("copy");
        assert_eq!(digest_of(&copy_tree(&d, &c).unwrap()), d0);
        assert!(!c.join(MANIFEST).exists());
        assert!(fs::symlink_metadata(c.join("x/l"))
            .unwrap()
            .file_type()
            .is_symlink());
        fs::set_permissions(d.join("x/f.c"), fs::Permissions::from_mode(0o755)).unwrap();
        let d1 = digest(&d).unwrap();
        assert_ne!(d1, d0);
        fs::remove_dir(d.join("x/y")).unwrap();
        assert_ne!(digest(&d).unwrap(), d1);
        fs::remove_file(d.join("x/l")).unwrap();
        std::os::unix::fs::symlink("g.c", d.join("x/l")).unwrap();
        fs::write(d.join("x/new.c"), "int n;\n").unwrap();
        let m0 = manifest(&c).unwrap();
        let m1 = manifest(&d).unwrap();
        let shown: Vec<String> = diff(&m0, &m1).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            shown,
            vec![
                "changed x/f.c (x bit set)",
                "changed x/l (symlink target)",
                "added   x/new.c",
                "removed x/y",
            ]
        );
        assert!(diff(&m0, &m0).is_empty());
    }

    #[test]
    fn diff_names_kind_and_content_changes() {
        let old = "dir  - a\nfile 11 a/b\nexec 22 a/c\nfile 33 a/d\n";
        let new = "dir  - a\nlink 44 a/b\nexec 23 a/c\nexec 34 a/d\n";
        let shown: Vec<String> = diff(old, new).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            shown,
            vec![
                "changed a/b (file -> symlink)",
                "changed a/c (content)",
                "changed a/d (content, x bit set)",
            ]
        );
    }

    #[test]
    fn recorded_manifest_proves_itself() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        fs::write(d.join("f"), "x").unwrap();
        let m = manifest(d).unwrap();
        let dg = digest_of(&m);
        assert!(recorded_manifest(d, &dg)
            .unwrap_err()
            .contains("no manifest.txt"));
        write_manifest(d, &m).unwrap();
        assert_eq!(recorded_manifest(d, &dg).unwrap(), m);
        assert_eq!(digest(d).unwrap(), dg, "manifest.txt is not hashed");
        fs::write(d.join(MANIFEST), m.replace("file", "exec")).unwrap();
        assert!(recorded_manifest(d, &dg)
            .unwrap_err()
            .contains("not the manifest of"));
    }
}
