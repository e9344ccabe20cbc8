//! All-or-nothing commits of output files ([`PendingFile`]: `pack`'s
//! archive) and output directories (split, recombine, unpack).
//!
//! A [`PendingFile`] is written where nobody sees it and appears at its
//! destination complete, in one step, at [`PendingFile::commit`]. On Linux
//! it is an unnamed `O_TMPFILE` in the destination's directory, linked into
//! place (`linkat`) at the commit: a process killed while writing, even by
//! `SIGKILL`, leaves nothing behind. Where `O_TMPFILE` is refused (some
//! filesystems, other systems) it is a named `.kpack-tmp-XXXXXX` file
//! renamed into place, removed on drop (a `SIGKILL` leaves it).
//!
//! Everything is built in a staging directory beside the destination,
//! `.<dest name>.partial-XXXXXX`, and then committed:
//!
//! * **new destination**: the staging directory is renamed to it, one
//!   atomic step;
//! * **existing destination** (several artifacts split into one output
//!   directory, a re-run into a shared shards directory): the names to move
//!   are first written to `<staging>/.commit` and made durable, then each
//!   staged child is renamed into the destination. A process killed between
//!   two renames leaves a staging directory holding a `.commit` list: the
//!   next split or recombine into that destination, or
//!   [`complete_interrupted`], **rolls it forward** (moves the rest), so the
//!   destination ends up with every output of the interrupted run, never a
//!   subset. A staging directory killed before its `.commit` was written is
//!   simply removed.
//!
//! Liveness: each staging directory has a sibling lock file
//! (`.<dest name>.partial-XXXXXX.lock`) that its process holds with
//! `flock` from creation to the end; recovery only touches staging
//! directories whose lock it can take, so a concurrent run is never
//! disturbed. The lock file is created before the staging directory and
//! removed after it, so a staging directory without a lock file is dead.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// An I/O error during a commit, with the path and the operation.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}: {error}")]
pub struct CommitError {
    /// The path involved.
    pub path: PathBuf,
    /// What was being done ("rename into output directory", …).
    pub what: &'static str,
    /// The underlying error.
    pub error: io::Error,
}

impl CommitError {
    fn new(path: impl Into<PathBuf>, what: &'static str, error: io::Error) -> Self {
        Self {
            path: path.into(),
            what,
            error,
        }
    }
}

impl CommitError {
    /// Whether the destination may already hold outputs of this commit
    /// (an error past the point of no return): callers must not report
    /// "nothing was written" then.
    pub fn wrote_something(&self) -> bool {
        self.what == COMMIT_INTERRUPTED || self.what == COMMITTED_UNSYNCED
    }

    /// Re-labels an error that happened after outputs started to move.
    fn past_point_of_no_return(self, what: &'static str) -> Self {
        let inner = format!("{}: {}: {}", self.path.display(), self.what, self.error);
        Self {
            path: self.path,
            what,
            error: io::Error::new(self.error.kind(), inner),
        }
    }
}

/// `what` of a commit that failed after outputs started moving into an
/// existing destination: some are in place, the rest stays in the staging
/// directory (with its `.commit` list), and the next run into the same
/// destination, or [`complete_interrupted`], moves it.
pub const COMMIT_INTERRUPTED: &str = "commit interrupted after outputs started moving into the output directory (the staging directory is kept; the next split or recombine into it completes the commit)";

/// `what` of a commit whose outputs are all in place but not made durable.
pub const COMMITTED_UNSYNCED: &str =
    "outputs moved into place, but the output directory could not be synced";

type FsError = CommitError;

trait IoContext<T> {
    fn ctx(self, path: &Path, what: &'static str) -> Result<T, CommitError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, path: &Path, what: &'static str) -> Result<T, CommitError> {
        self.map_err(|e| CommitError::new(path, what, e))
    }
}

fn sorted_names(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

/// Our own commit list: a regular file of bounded size.
fn read_list(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let f = File::open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let mut v = Vec::new();
    f.take(16 << 20).read_to_end(&mut v)?;
    Ok(v)
}

/// Prefix of the temporary names of [`PendingFile`]s in the output
/// directory.
pub const TMP_PREFIX: &str = ".kpack-tmp-";

/// An output file being written: invisible until [`PendingFile::commit`]
/// puts it at its destination (atomically replacing what is there), gone
/// if dropped uncommitted. Written and seeked like the [`File`] it is.
#[derive(Debug)]
pub struct PendingFile {
    file: File,
    /// The fallback's name (`None`: an unnamed `O_TMPFILE`).
    named: Option<tempfile::TempPath>,
    /// The destination's directory.
    dir: PathBuf,
}

/// Whether opening an `O_TMPFILE` failed because the filesystem or kernel
/// does not offer it (not because of the directory).
#[cfg(target_os = "linux")]
fn tmpfile_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOSYS)
    )
}

impl PendingFile {
    /// A new empty file that [`PendingFile::commit`] will put at `dest`,
    /// created in `dest`'s directory (so the commit never copies).
    pub fn new(dest: &Path) -> io::Result<PendingFile> {
        Self::create(dest, true)
    }

    fn create(dest: &Path, unnamed: bool) -> io::Result<PendingFile> {
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // The link at the commit goes through /proc/self/fd (linkat with
        // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH).
        #[cfg(target_os = "linux")]
        if unnamed && Path::new("/proc/self/fd").is_dir() {
            use std::os::unix::fs::OpenOptionsExt;
            match fs::OpenOptions::new()
                .read(true)
                .write(true)
                .mode(0o644)
                .custom_flags(libc::O_TMPFILE)
                .open(&dir)
            {
                Ok(file) => {
                    return Ok(PendingFile {
                        file,
                        named: None,
                        dir,
                    })
                }
                Err(e) if tmpfile_refused(&e) => {}
                Err(e) => return Err(e),
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = unnamed;
        let (file, path) = tempfile::Builder::new()
            .prefix(TMP_PREFIX)
            .tempfile_in(&dir)?
            .into_parts();
        Ok(PendingFile {
            file,
            named: Some(path),
            dir,
        })
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file, to write.
    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    /// Whether the file has no name until its commit (`O_TMPFILE`).
    pub fn is_unnamed(&self) -> bool {
        self.named.is_none()
    }

    /// Makes the file readable by all (`0644`, like any output), syncs it
    /// and puts it at `dest`, replacing what is there in one step.
    pub fn commit(self, dest: &Path) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        self.file
            .set_permissions(fs::Permissions::from_mode(0o644))?;
        self.file.sync_all()?;
        match self.named {
            Some(p) => p.persist(dest).map_err(|e| e.error),
            None => link_into_place(&self.file, &self.dir, dest),
        }
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl io::Seek for PendingFile {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

/// Gives the unnamed `file` the name `dest`: linked there directly when
/// `dest` does not exist, else linked under a fresh temporary name in `dir`
/// and renamed over `dest` (`linkat` never replaces).
fn link_into_place(file: &File, dir: &Path, dest: &Path) -> io::Result<()> {
    let link = |to: &Path| rocpack_bundle::link_unnamed(file, to);
    match link(dest) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        done => return done,
    }
    let named = tempfile::Builder::new()
        .prefix(TMP_PREFIX)
        .make_in(dir, |p| link(p))?;
    named.persist(dest).map(drop).map_err(|e| e.error)
}

/// Name of the list of names a staging directory is committing.
const COMMIT_LIST: &str = ".commit";

/// A staging directory beside a final output location. Dropped without a
/// successful [`StagingDir::commit`], it is removed with everything in it.
#[derive(Debug)]
pub struct StagingDir {
    dest: PathBuf,
    /// The staging directory; `None` once committed.
    dir: Option<PathBuf>,
    lock_path: PathBuf,
    _lock: File,
}

fn partial_prefix(dest: &Path) -> String {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".to_string());
    format!(".{name}.partial-")
}

fn parent_of(dest: &Path) -> PathBuf {
    dest.parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"))
}

fn already_exists(path: PathBuf, what: &'static str) -> FsError {
    FsError::new(
        path,
        what,
        io::Error::new(io::ErrorKind::AlreadyExists, "already exists"),
    )
}

/// Writes `bytes` to `path` and makes file and directory entry durable.
fn write_durable(path: &Path, bytes: &[u8]) -> Result<(), FsError> {
    let mut f = File::create(path).ctx(path, "create")?;
    f.write_all(bytes).ctx(path, "write")?;
    f.sync_all().ctx(path, "sync")?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), FsError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(dir, "sync directory")
}

impl StagingDir {
    /// Creates a staging directory (and its lock) in `dest`'s parent
    /// directory, creating that parent if needed. Interrupted commits into
    /// `dest` are rolled forward first (see [`complete_interrupted`]).
    pub fn new(dest: &Path) -> Result<Self, FsError> {
        let dest =
            rocpack_bundle::fsutil::absolute_lexical(dest).ctx(dest, "resolve output directory")?;
        let parent = parent_of(&dest);
        fs::create_dir_all(&parent).ctx(&parent, "create directory")?;
        complete_interrupted(&dest)?;
        let prefix = partial_prefix(&dest);
        // Lock first, directory second: a staging directory whose lock file
        // is missing belongs to nobody.
        let lock_file = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".lock")
            .tempfile_in(&parent)
            .ctx(&parent, "create staging lock")?;
        let (lock, lock_path) = lock_file
            .keep()
            .map_err(|e| FsError::new(&parent, "create staging lock", e.error))?;
        lock.lock().ctx(&lock_path, "lock staging directory")?;
        let dir_name = lock_path
            .file_name()
            .and_then(OsStr::to_str)
            .and_then(|n| n.strip_suffix(".lock"))
            .map(str::to_string)
            .unwrap_or_default();
        let dir = parent.join(&dir_name);
        if let Err(e) = fs::create_dir(&dir) {
            let _ = fs::remove_file(&lock_path);
            return Err(FsError::new(dir, "create staging directory", e));
        }
        Ok(Self {
            dest,
            dir: Some(dir),
            lock_path,
            _lock: lock,
        })
    }

    /// Where to build the output.
    pub fn path(&self) -> &Path {
        self.dir.as_deref().unwrap_or(&self.dest)
    }

    /// The final destination.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Children of the destination that the commit would overwrite.
    pub fn conflicts(&self, names: &[OsString]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|n| self.dest.join(n))
            .filter(|p| fs::symlink_metadata(p).is_ok())
            .collect()
    }

    /// Moves the staged tree into place, all or nothing. Fails (and cleans
    /// up) if any staged child already exists in the destination.
    pub fn commit(mut self) -> Result<PathBuf, FsError> {
        let Some(staged) = self.dir.clone() else {
            return Ok(self.dest.clone());
        };
        match fs::symlink_metadata(&self.dest) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::rename(&staged, &self.dest).ctx(&self.dest, "rename staging directory")?;
                self.dir = None;
                sync_dir(&parent_of(&self.dest))
                    .map_err(|e| e.past_point_of_no_return(COMMITTED_UNSYNCED))?;
                Ok(self.dest.clone())
            }
            Err(e) => Err(FsError::new(&self.dest, "stat output directory", e)),
            Ok(meta) if !meta.is_dir() => Err(FsError::new(
                &self.dest,
                "use as output directory",
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a directory",
                ),
            )),
            Ok(_) => {
                let names = sorted_names(&staged).ctx(&staged, "list directory")?;
                if let Some(c) = self.conflicts(&names).into_iter().next() {
                    return Err(already_exists(c, "write output"));
                }
                // Durable intent first: from here on, an interruption is
                // rolled forward, never left half-way.
                let mut list = Vec::new();
                for n in &names {
                    list.extend_from_slice(n.as_encoded_bytes());
                    list.push(b'\n');
                }
                for n in &names {
                    sync_tree(&staged.join(n))?;
                }
                write_durable(&staged.join(COMMIT_LIST), &list)?;
                // Past this point the staging directory is kept on error: a
                // later run rolls the commit forward.
                self.dir = None;
                move_listed(&staged, &self.dest, &names)
                    .map_err(|e| e.past_point_of_no_return(COMMIT_INTERRUPTED))?;
                sync_dir(&self.dest).map_err(|e| e.past_point_of_no_return(COMMITTED_UNSYNCED))?;
                fs::remove_dir_all(&staged)
                    .ctx(&staged, "remove staging directory")
                    .map_err(|e| e.past_point_of_no_return(COMMITTED_UNSYNCED))?;
                Ok(self.dest.clone())
            }
        }
    }
}

impl Drop for StagingDir {
    fn drop(&mut self) {
        // The staging directory (if still there) goes first, then its lock.
        if let Some(d) = self.dir.take() {
            let _ = fs::remove_dir_all(d);
        }
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// Makes the files below `p` durable (so a rolled-forward commit never
/// exposes empty files after a power loss).
fn sync_tree(p: &Path) -> Result<(), FsError> {
    let meta = fs::symlink_metadata(p).ctx(p, "stat")?;
    if meta.is_dir() {
        for n in sorted_names(p).ctx(p, "list directory")? {
            sync_tree(&p.join(n))?;
        }
        sync_dir(p)
    } else if meta.is_file() {
        File::open(p).and_then(|f| f.sync_all()).ctx(p, "sync")
    } else {
        Ok(())
    }
}

/// Test hook: `ROCPACK_FAULT_COMMIT_AFTER=N` aborts the process (no
/// destructors, like `kill -9`) after the N-th rename of a commit into an
/// existing directory, so tests can interrupt exactly there.
pub const FAULT_ENV: &str = "ROCPACK_FAULT_COMMIT_AFTER";

/// Test hook: `ROCPACK_FAULT_COMMIT_ERROR_AFTER=N` makes the (N+1)-th rename
/// of a commit into an existing directory fail with an I/O error (the
/// process goes on, as after a real `EXDEV` or `ENOSPC`).
pub const FAULT_ERROR_ENV: &str = "ROCPACK_FAULT_COMMIT_ERROR_AFTER";

fn fault_after(done: usize) -> io::Result<()> {
    let at = |var: &str| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    if at(FAULT_ENV) == Some(done) {
        eprintln!("kpack: {FAULT_ENV}={done}: simulated crash during commit");
        std::process::abort();
    }
    if at(FAULT_ERROR_ENV) == Some(done) {
        return Err(io::Error::other(format!(
            "{FAULT_ERROR_ENV}={done}: simulated I/O error"
        )));
    }
    Ok(())
}

/// Renames each of `names` still present in `staged` into `dest`.
fn move_listed(staged: &Path, dest: &Path, names: &[OsString]) -> Result<(), FsError> {
    fault_after(0).ctx(dest, "rename into output directory")?;
    for (i, n) in names.iter().enumerate() {
        let from = staged.join(n);
        if fs::symlink_metadata(&from).is_err() {
            continue; // moved before the interruption
        }
        let to = dest.join(n);
        if fs::symlink_metadata(&to).is_ok() {
            return Err(already_exists(to, "complete interrupted commit"));
        }
        fs::rename(&from, &to).ctx(&to, "rename into output directory")?;
        fault_after(i + 1).ctx(&to, "rename into output directory")?;
    }
    Ok(())
}

/// Rolls forward every interrupted commit into `dest` (staging directories
/// of dead processes holding a `.commit` list) and removes dead staging
/// directories that never reached their commit. Returns the staging
/// directories it completed. Staging directories of live processes are
/// left alone.
pub fn complete_interrupted(dest: &Path) -> Result<Vec<PathBuf>, FsError> {
    let dest =
        rocpack_bundle::fsutil::absolute_lexical(dest).ctx(dest, "resolve output directory")?;
    let parent = parent_of(&dest);
    let prefix = partial_prefix(&dest);
    let names = match sorted_names(&parent) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(FsError::new(parent, "list directory", e)),
    };
    let mut completed = Vec::new();
    for n in names {
        let Some(name) = n.to_str() else { continue };
        if !name.starts_with(&prefix) || name.ends_with(".lock") {
            continue;
        }
        let staged = parent.join(name);
        if !fs::symlink_metadata(&staged).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let lock_path = parent.join(format!("{name}.lock"));
        // Held while we look: a live owner keeps its lock, a dead one lost it.
        let _held = match File::open(&lock_path) {
            Ok(f) => match f.try_lock() {
                Ok(()) => Some(f),
                Err(fs::TryLockError::WouldBlock) => continue,
                Err(fs::TryLockError::Error(e)) => {
                    return Err(FsError::new(lock_path, "lock staging directory", e))
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(FsError::new(lock_path, "open staging lock", e)),
        };
        let list_path = staged.join(COMMIT_LIST);
        match read_list(&list_path) {
            Ok(list) => {
                let listed: Vec<OsString> = list
                    .split(|&b| b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| {
                        use std::os::unix::ffi::OsStrExt;
                        OsStr::from_bytes(l).to_os_string()
                    })
                    .collect();
                if fs::symlink_metadata(&dest).is_err() {
                    fs::create_dir_all(&dest).ctx(&dest, "create directory")?;
                }
                move_listed(&staged, &dest, &listed)?;
                sync_dir(&dest)?;
                completed.push(staged.clone());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(FsError::new(list_path, "read commit list", e)),
        }
        fs::remove_dir_all(&staged).ctx(&staged, "remove dead staging directory")?;
        let _ = fs::remove_file(&lock_path);
    }
    // Lock files whose staging directory is gone (killed after the rename).
    for n in sorted_names(&parent).ctx(&parent, "list directory")? {
        let Some(name) = n.to_str() else { continue };
        if let Some(dir) = name
            .strip_suffix(".lock")
            .filter(|d| d.starts_with(&prefix))
        {
            let lock_path = parent.join(name);
            if fs::symlink_metadata(parent.join(dir)).is_err()
                && File::open(&lock_path).is_ok_and(|f| f.try_lock().is_ok())
            {
                let _ = fs::remove_file(&lock_path);
            }
        }
    }
    Ok(completed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".partial-"))
            .collect()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Written, the file has no name; committed, it is at its destination
    /// (0644, replacing an older file); dropped, nothing is left. The
    /// named fallback ends the same, through a `.kpack-tmp-` name.
    #[test]
    fn pending_file_appears_only_at_commit() {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::PermissionsExt;
        for unnamed in [true, false] {
            let root = tempfile::tempdir().unwrap();
            let dest = root.path().join("a.kpack");
            let mut f = PendingFile::create(&dest, unnamed).unwrap();
            assert_eq!(f.is_unnamed(), unnamed && cfg!(target_os = "linux"));
            f.write_all(b"hello world").unwrap();
            f.seek(SeekFrom::Start(0)).unwrap();
            f.write_all(b"HELLO").unwrap();
            let seen = names(root.path());
            if f.is_unnamed() {
                assert!(seen.is_empty(), "{seen:?}");
            } else {
                assert!(
                    seen.len() == 1 && seen[0].starts_with(TMP_PREFIX),
                    "{seen:?}"
                );
            }
            f.commit(&dest).unwrap();
            assert_eq!(fs::read(&dest).unwrap(), b"HELLO world");
            let mode = fs::metadata(&dest).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644);
            // Replacing an existing output.
            let mut f = PendingFile::create(&dest, unnamed).unwrap();
            f.write_all(b"new").unwrap();
            f.commit(&dest).unwrap();
            assert_eq!(fs::read(&dest).unwrap(), b"new");
            assert_eq!(names(root.path()), ["a.kpack"]);
            // Dropped uncommitted.
            let mut f = PendingFile::create(&root.path().join("b.kpack"), unnamed).unwrap();
            f.write_all(b"lost").unwrap();
            drop(f);
            assert_eq!(names(root.path()), ["a.kpack"]);
        }
    }

    #[test]
    fn staging_dir_commit_and_conflicts() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        let s = StagingDir::new(&out).unwrap();
        fs::create_dir(s.path().join("a_generic")).unwrap();
        fs::write(s.path().join("a_generic/f"), b"x").unwrap();
        s.commit().unwrap();
        assert_eq!(fs::read(out.join("a_generic/f")).unwrap(), b"x");

        let s = StagingDir::new(&out).unwrap();
        fs::create_dir(s.path().join("b_generic")).unwrap();
        s.commit().unwrap();
        assert!(out.join("b_generic").is_dir());

        // Conflict: refused, nothing moved, staging removed.
        let s = StagingDir::new(&out).unwrap();
        fs::create_dir(s.path().join("a_generic")).unwrap();
        fs::create_dir(s.path().join("c_generic")).unwrap();
        assert!(s.commit().is_err());
        assert!(!out.join("c_generic").exists());
        assert!(leftovers(root.path()).is_empty());
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 1);
    }

    #[test]
    fn staging_dir_dropped_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        {
            let s = StagingDir::new(&out).unwrap();
            fs::write(s.path().join("f"), b"x").unwrap();
        }
        assert!(!out.exists());
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
    }

    /// A commit interrupted after its list was written (simulated: the
    /// staging directory and list exist, one name already moved, the lock
    /// is free) is completed by the next run; one that never wrote its list
    /// is removed; one whose owner is alive is left alone.
    #[test]
    fn interrupted_commits_roll_forward() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        fs::create_dir(&out).unwrap();
        fs::create_dir(out.join("other")).unwrap();
        let dead = root.path().join(".out.partial-dead01");
        for n in ["x_generic", "x_gfx1100", "x_gfx942"] {
            fs::create_dir_all(dead.join(n)).unwrap();
            fs::write(dead.join(n).join("artifact_manifest.txt"), n).unwrap();
        }
        fs::write(dead.join(COMMIT_LIST), b"x_generic\nx_gfx1100\nx_gfx942\n").unwrap();
        fs::write(root.path().join(".out.partial-dead01.lock"), b"").unwrap();
        fs::rename(dead.join("x_generic"), out.join("x_generic")).unwrap();
        let uncommitted = root.path().join(".out.partial-dead02");
        fs::create_dir_all(uncommitted.join("y_generic")).unwrap();
        let live = StagingDir::new(&root.path().join("out")).unwrap();
        fs::create_dir(live.path().join("z_generic")).unwrap();

        // `StagingDir::new` above already rolled the dead ones forward.
        let mut got: Vec<_> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        got.sort();
        assert_eq!(got, ["other", "x_generic", "x_gfx1100", "x_gfx942"]);
        assert!(!dead.exists() && !uncommitted.exists());
        // The live one is untouched by another recovery, then commits.
        assert!(complete_interrupted(&out).unwrap().is_empty());
        assert!(live.path().join("z_generic").is_dir());
        live.commit().unwrap();
        assert!(out.join("z_generic").is_dir());
        assert!(
            leftovers(root.path()).is_empty(),
            "{:?}",
            leftovers(root.path())
        );
    }
}
