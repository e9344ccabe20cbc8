//! Content-addressed blob store: `<store>/cas/sha256/<hex>`.
//!
//! Blobs are written put-if-absent from one private, verified copy of the
//! artifact; an existing object whose bytes do not hash to its name is the
//! only one ever replaced (by that copy). Nothing here deletes a good blob.
//! Backends: a local directory (the default), `http(s)://` (read-only) and
//! `s3://bucket/prefix` (read/write), the last two through `object_store`
//! (cargo features `http` and `s3`).

use crate::error::{io_at, Error, Result};
use crate::fsutil::{self, step};
use crate::hash;
use crate::metadata::{is_hex, store_key};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub use crate::blob::{BlobState, Listed, PutOutcome, TEMP_PREFIX};

/// A blob store.
pub enum Store {
    Local(LocalStore),
    #[cfg(feature = "remote")]
    Remote(crate::remote::RemoteStore),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.describe())
    }
}

impl Store {
    /// Opens a store from a URL: a path or `file://` path (relative paths resolve against
    /// `base`), `http(s)://…` (read-only) or `s3://bucket/prefix`.
    pub fn open(url: &str, base: &Path) -> Result<Store> {
        if url.starts_with("s3://") || url.starts_with("http://") || url.starts_with("https://") {
            #[cfg(feature = "remote")]
            {
                return crate::remote::RemoteStore::open(url).map(Store::Remote);
            }
            #[cfg(not(feature = "remote"))]
            {
                return Err(Error::Usage(format!(
                    "store {url}: this snapctl was built without remote (s3/http) store support"
                )));
            }
        }
        if let Some((scheme, _)) = url.split_once("://") {
            if scheme != "file" {
                return Err(Error::Usage(format!(
                    "store {url}: unsupported scheme {scheme}:// (expected a path, file://, http(s):// or s3://)"
                )));
            }
        }
        let p = url.strip_prefix("file://").unwrap_or(url);
        if p.is_empty() {
            return Err(Error::Usage("empty store path".into()));
        }
        let dir = if Path::new(p).is_absolute() {
            PathBuf::from(p)
        } else {
            base.join(p)
        };
        match std::fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => Err(Error::Usage(format!(
                "store {}: exists but is not a directory",
                dir.display()
            ))),
            Ok(_) => match std::fs::read_dir(&dir) {
                Ok(_) => Ok(Store::Local(LocalStore { dir })),
                Err(e) => Err(Error::Usage(format!(
                    "store {}: unreadable: {e}",
                    dir.display()
                ))),
            },
            // Created on first upload.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Store::Local(LocalStore { dir }))
            }
            Err(e) => Err(Error::Usage(format!("store {}: {e}", dir.display()))),
        }
    }

    /// Human-readable location.
    pub fn describe(&self) -> String {
        match self {
            Store::Local(l) => l.dir.display().to_string(),
            #[cfg(feature = "remote")]
            Store::Remote(r) => r.describe(),
        }
    }

    /// Hashes `src`, stores it under its sha256 if absent and verifies the stored blob.
    pub fn put_file(&self, src: &Path) -> Result<PutOutcome> {
        match self {
            Store::Local(l) => l.put_file(src),
            #[cfg(feature = "remote")]
            Store::Remote(r) => r.put_file(src),
        }
    }

    /// Re-hashes the blob of `sha256`, reading at most `expected_size + 1`
    /// bytes when the metadata records a size.
    pub fn check(&self, sha256: &str, expected_size: Option<u64>) -> Result<BlobState> {
        match self {
            Store::Local(l) => l.check(sha256, expected_size),
            #[cfg(feature = "remote")]
            Store::Remote(r) => r.check(sha256, expected_size),
        }
    }

    /// Downloads the blob of `sha256` to `out`; refuses (and writes nothing at `out`)
    /// when the content does not hash to `sha256` or is longer than
    /// `expected_size` (a lying mirror, a blob replaced by `/dev/zero`: the
    /// download stops at `expected_size + 1` bytes, the disk never fills).
    pub fn fetch(&self, sha256: &str, out: &Path, expected_size: Option<u64>) -> Result<u64> {
        if !is_hex(sha256, 64) {
            return Err(Error::Usage(format!("{sha256:?} is not a sha256 digest")));
        }
        let dir = fsutil::parent_of(out);
        let tmp = dir.join(format!(
            ".{}.part-{}",
            out.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        // A leftover of a killed run of an earlier process with this pid.
        let _ = fs::remove_file(&tmp);
        let guard = RemoveOnDrop(Some(tmp.clone()));
        let res = match self {
            Store::Local(l) => l.fetch_to(sha256, &tmp, expected_size),
            #[cfg(feature = "remote")]
            Store::Remote(r) => r.fetch_to(sha256, &tmp, expected_size),
        };
        let actual = match res? {
            Ok(a) => a,
            Err(seen) => {
                return Err(Error::Size {
                    what: format!(
                        "refusing blob {} from {}",
                        store_key(sha256),
                        self.describe()
                    ),
                    expected: expected_size.unwrap_or_default(),
                    seen,
                })
            }
        };
        if actual.0 != sha256 {
            return Err(Error::Digest {
                what: format!(
                    "refusing blob {} from {}",
                    store_key(sha256),
                    self.describe()
                ),
                expected: sha256.to_string(),
                actual: actual.0,
            });
        }
        fs::rename(&tmp, out).map_err(io_at(out))?;
        guard.disarm();
        fsutil::fsync_dir(&dir)?;
        Ok(actual.1)
    }

    /// Every blob (and leftover temp file) in the store, sorted by key.
    pub fn list(&self) -> Result<Vec<Listed>> {
        match self {
            Store::Local(l) => l.list(),
            #[cfg(feature = "remote")]
            Store::Remote(r) => r.list(),
        }
    }
}

/// Removes a temp file when dropped, unless disarmed.
pub(crate) struct RemoveOnDrop(pub(crate) Option<PathBuf>);

impl RemoveOnDrop {
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// The private copy an upload publishes.
enum Temp {
    /// `O_TMPFILE`: has no name until linked.
    Unnamed(fs::File),
    /// Fallback where `O_TMPFILE` is not supported.
    Named(PathBuf, RemoveOnDrop),
}

/// An unnamed file in `dir` (`O_TMPFILE`, mode 0444), or `None` where the
/// filesystem (or a missing `/proc`) does not allow linking one into place.
fn unnamed_in(dir: &Path) -> Option<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    if !Path::new("/proc/self/fd").is_dir() {
        return None;
    }
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o444)
        .open(dir)
        .ok()
}

/// Removes named temp files (`.tmp-<pid>-<n>`) of uploads killed before they
/// could clean up: their pid is gone and they have not been written to for
/// ten minutes (a store shared over NFS may hold another host's running
/// upload, whose pid means nothing here; it keeps writing or links within
/// seconds).
fn sweep_dead_temps(cas: &Path) {
    let Ok(rd) = fs::read_dir(cas) else { return };
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(TEMP_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let stale = ent
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() >= 600);
        if stale
            && Path::new("/proc/self").exists()
            && !Path::new("/proc").join(pid.to_string()).exists()
        {
            let _ = fs::remove_file(ent.path());
        }
    }
}

/// What is wrong with a blob that is not [`BlobState::Ok`] at the expected size.
fn describe_wrong(state: &BlobState) -> String {
    match state {
        BlobState::Ok { size } => format!("has {size} bytes"),
        BlobState::Missing => "vanished".into(),
        BlobState::Corrupt { actual_sha256, .. } => {
            format!("holds bytes hashing to {actual_sha256}")
        }
        BlobState::Oversize { seen, .. } => format!("holds more than {seen} bytes"),
        BlobState::Unreadable(why) => format!("is unreadable ({why})"),
    }
}

/// A store in a local directory.
pub struct LocalStore {
    pub dir: PathBuf,
}

static TEMP_COUNTER: AtomicU32 = AtomicU32::new(0);

impl LocalStore {
    fn cas_dir(&self) -> PathBuf {
        self.dir.join("cas").join("sha256")
    }

    /// Path of the blob of `sha256`.
    pub fn blob_path(&self, sha256: &str) -> PathBuf {
        self.cas_dir().join(sha256)
    }

    fn put_file(&self, src: &Path) -> Result<PutOutcome> {
        let meta =
            fs::metadata(src).map_err(|e| Error::input(src, None, format!("artifact: {e}")))?;
        if !meta.is_file() {
            return Err(Error::input(src, None, "artifact is not a regular file"));
        }
        let cas = self.cas_dir();
        fsutil::create_dir_all_durable(&cas).map_err(|e| Error::Store {
            store: self.dir.display().to_string(),
            msg: format!("cannot create {}: {e}", cas.display()),
        })?;
        sweep_dead_temps(&cas);
        step("upload: copy artifact into store temp file");
        // One pass: copy, hash, fsync, re-read to verify. No memory map: a
        // source truncated meanwhile is an error, not SIGBUS. The copy is an
        // unnamed O_TMPFILE where the filesystem has them, so no crash (not
        // even kill -9) and no error (ENOSPC included) leaves a temp file in
        // the store; elsewhere a named temp file, removed on every error and
        // swept by the next upload once its process is gone.
        let (digest, tmp) = match unnamed_in(&cas) {
            Some(mut f) => {
                let label = cas.join(format!("{TEMP_PREFIX}unnamed"));
                (
                    hash::copy_hashed_into(src, &mut f, &label)?,
                    Temp::Unnamed(f),
                )
            }
            None => {
                let tmp = cas.join(format!(
                    "{TEMP_PREFIX}{}-{}",
                    std::process::id(),
                    TEMP_COUNTER.fetch_add(1, Ordering::SeqCst)
                ));
                let d = hash::copy_hashed(src, &tmp)?;
                let guard = RemoveOnDrop(Some(tmp.clone()));
                let mut perms = fs::metadata(&tmp).map_err(io_at(&tmp))?.permissions();
                perms.set_readonly(true);
                fs::set_permissions(&tmp, perms).map_err(io_at(&tmp))?;
                (d, Temp::Named(tmp, guard))
            }
        };
        step("upload: fsync and verify temp blob");
        let blob = cas.join(&digest.sha256);
        step("upload: link blob into place (put-if-absent)");
        let linked = match &tmp {
            Temp::Unnamed(f) => rocpack_bundle::link_unnamed(f, &blob),
            Temp::Named(p, _) => fs::hard_link(p, &blob),
        };
        let already_present = match linked {
            Ok(()) => {
                fsutil::fsync_dir(&cas)?;
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // A content address holds one content: a blob whose bytes do
                // not hash to its name (disk corruption, tampering) is
                // replaced by the verified copy, atomically.
                match self.check(&digest.sha256, Some(digest.size))? {
                    BlobState::Ok { size } if size == digest.size => true,
                    wrong => {
                        eprintln!(
                            "snapctl: {} {}; replacing it with the verified upload",
                            blob.display(),
                            describe_wrong(&wrong)
                        );
                        self.replace_blob(&tmp, &cas, &blob)?;
                        false
                    }
                }
            }
            Err(e) => return Err(Error::io(&blob, e)),
        };
        step("upload: remove temp file");
        if let Temp::Named(p, guard) = tmp {
            guard.disarm();
            fs::remove_file(&p).map_err(io_at(&p))?;
        }
        Ok(PutOutcome {
            key: store_key(&digest.sha256),
            digest,
            already_present,
        })
    }

    /// Installs the verified temp copy over a wrong blob with one `rename`.
    fn replace_blob(&self, tmp: &Temp, cas: &Path, blob: &Path) -> Result<()> {
        let side = cas.join(format!(
            "{TEMP_PREFIX}{}-{}",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        match tmp {
            Temp::Unnamed(f) => rocpack_bundle::link_unnamed(f, &side).map_err(io_at(&side))?,
            Temp::Named(p, _) => fs::hard_link(p, &side).map_err(io_at(&side))?,
        }
        let guard = RemoveOnDrop(Some(side.clone()));
        fs::rename(&side, blob).map_err(io_at(blob))?;
        guard.disarm();
        fsutil::fsync_dir(cas)
    }

    fn check(&self, sha256: &str, expected_size: Option<u64>) -> Result<BlobState> {
        let blob = self.blob_path(sha256);
        match fs::symlink_metadata(&blob) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BlobState::Missing),
            Err(e) => return Ok(BlobState::Unreadable(Error::io(&blob, e).to_string())),
            Ok(_) => {}
        }
        Ok(match hash::sha256_file_limited(&blob, expected_size) {
            Err(e) => BlobState::Unreadable(e.to_string()),
            Ok(Err(seen)) => BlobState::Oversize {
                expected: expected_size.unwrap_or_default(),
                seen,
            },
            Ok(Ok((actual, size))) if actual == sha256 => BlobState::Ok { size },
            Ok(Ok((actual, size))) => BlobState::Corrupt {
                actual_sha256: actual,
                size,
            },
        })
    }

    /// Copies the blob to `tmp` (at most `expected_size + 1` bytes) and
    /// hashes the copy; `Ok(Err(n))` when it is longer than `expected_size`.
    fn fetch_to(
        &self,
        sha256: &str,
        tmp: &Path,
        expected_size: Option<u64>,
    ) -> Result<std::result::Result<(String, u64), u64>> {
        let blob = self.blob_path(sha256);
        if fs::symlink_metadata(&blob).is_err() {
            return Err(Error::Store {
                store: self.dir.display().to_string(),
                msg: format!("blob {} not found", store_key(sha256)),
            });
        }
        let from = hash::open_regular(&blob)?;
        let limit = expected_size.map_or(u64::MAX, |l| l.saturating_add(1));
        let mut to = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(io_at(tmp))?;
        let n =
            std::io::copy(&mut std::io::Read::take(from, limit), &mut to).map_err(io_at(tmp))?;
        if expected_size.is_some_and(|e| n > e) {
            return Ok(Err(n));
        }
        to.sync_all().map_err(io_at(tmp))?;
        drop(to);
        hash::sha256_file_limited(tmp, expected_size)
    }

    fn list(&self) -> Result<Vec<Listed>> {
        let cas = self.cas_dir();
        let mut out = Vec::new();
        let rd = match fs::read_dir(&cas) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Error::io(&cas, e)),
        };
        for ent in rd {
            let ent = ent.map_err(io_at(&cas))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            let size = ent.metadata().map_err(io_at(&ent.path()))?.len();
            out.push(Listed {
                key: format!("cas/sha256/{name}"),
                size,
                is_temp: !is_hex(&name, 64),
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}
