//! The snapshots root: seed-compatible layout, configuration, lock and clock.
//!
//! ```text
//! <root>/snapctl.conf                    store = …, checksums = …, prefix = … (optional)
//! <root>/stable/<ver>/{metadata.txt, <headers>}
//! <root>/last-stable/<ver>/{metadata.txt, <headers>}
//! <root>/archives/<ver>/<YYYYMMDD_HHMMSS>_<file>
//! <root>/.snapctl/{lock, journal.json, staging/}   (private; ignore in VCS)
//! ```

use crate::error::{io_at, Error, Result};
use crate::fsutil;
use crate::metadata::{validate_version, Metadata};
use crate::store::Store;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Name of the per-root configuration file.
pub const CONFIG_FILE: &str = "snapctl.conf";
/// Private directory (lock, journal, staging).
pub const PRIVATE_DIR: &str = ".snapctl";
/// Default local store, relative to the root, when neither `--store` nor the config names one.
pub const DEFAULT_STORE: &str = "store";
/// Default checksums file, relative to the root.
pub const DEFAULT_CHECKSUMS: &str = "stable_checksums.bzl";

/// A release channel with a directory in the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Channel {
    Stable,
    LastStable,
}

impl Channel {
    pub const ALL: [Channel; 2] = [Channel::Stable, Channel::LastStable];

    /// Directory name (`stable`, `last-stable`).
    pub fn dir(self) -> &'static str {
        match self {
            Channel::Stable => "stable",
            Channel::LastStable => "last-stable",
        }
    }

    /// Key used in generated files (`stable`, `last_stable`).
    pub fn key(self) -> &'static str {
        match self {
            Channel::Stable => "stable",
            Channel::LastStable => "last_stable",
        }
    }

    /// Accepts `stable`, `last-stable`, `last_stable`.
    pub fn parse(s: &str) -> Result<Channel> {
        match s {
            "stable" => Ok(Channel::Stable),
            "last-stable" | "last_stable" => Ok(Channel::LastStable),
            _ => Err(Error::Usage(format!(
                "unknown channel {s:?} (expected stable or last-stable)"
            ))),
        }
    }
}

/// One snapshot directory (`<channel>/<ver>/`).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub meta: Metadata,
    pub dir: PathBuf,
    /// Regular files in the directory (metadata.txt included), sorted.
    pub files: Vec<String>,
}

/// A configuration value and the line it came from.
#[derive(Clone, Debug)]
pub struct ConfValue {
    pub value: String,
    pub line: usize,
}

/// `snapctl.conf`: `key = value` lines, `#` comments.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub store: Option<ConfValue>,
    pub checksums: Option<ConfValue>,
    pub prefix: Option<ConfValue>,
}

impl Config {
    fn parse(path: &Path, text: &str) -> Result<Config> {
        let mut c = Config::default();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                return Err(Error::input(
                    path,
                    Some(i + 1),
                    format!("expected `key = value`, found {line:?}"),
                ));
            };
            let (k, v) = (k.trim(), v.trim());
            if v.is_empty() {
                return Err(Error::input(
                    path,
                    Some(i + 1),
                    format!("`{k}` has an empty value"),
                ));
            }
            let slot = match k {
                "store" => &mut c.store,
                "checksums" => &mut c.checksums,
                "prefix" => &mut c.prefix,
                _ => {
                    return Err(Error::input(
                        path,
                        Some(i + 1),
                        format!("unknown key {k:?} (expected store, checksums or prefix)"),
                    ))
                }
            };
            if slot.is_some() {
                return Err(Error::input(
                    path,
                    Some(i + 1),
                    format!("duplicate key {k:?}"),
                ));
            }
            *slot = Some(ConfValue {
                value: v.to_string(),
                line: i + 1,
            });
        }
        Ok(c)
    }

    fn render(&self) -> String {
        let mut s = String::from(
            "# snapctl configuration of this snapshots root (relative paths are relative to it).\n",
        );
        for (k, v) in [
            ("store", &self.store),
            ("checksums", &self.checksums),
            ("prefix", &self.prefix),
        ] {
            if let Some(v) = v {
                s.push_str(&format!("{k} = {}\n", v.value));
            }
        }
        s
    }
}

/// An opened snapshots root.
#[derive(Clone, Debug)]
pub struct Repo {
    pub root: PathBuf,
    pub config: Config,
}

impl Repo {
    /// Opens `root` (which must be a directory) and reads its configuration.
    pub fn open(root: &Path) -> Result<Repo> {
        let md = fs::metadata(root).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::input(
                    root,
                    None,
                    format!(
                        "snapshots root does not exist; the first `snapctl create --snapshots-root {} --version VERSION --artifact FILE` makes it",
                        root.display()
                    ),
                )
            } else {
                Error::input(root, None, format!("snapshots root: {e}"))
            }
        })?;
        if !md.is_dir() {
            return Err(Error::input(
                root,
                None,
                "snapshots root is not a directory",
            ));
        }
        let cpath = root.join(CONFIG_FILE);
        let config = if cpath.exists() {
            Config::parse(&cpath, &fsutil::read_text_bounded(&cpath, 1 << 16)?)?
        } else {
            Config::default()
        };
        Ok(Repo {
            root: root.to_path_buf(),
            config,
        })
    }

    /// [`Repo::open`] for `snapctl create`, which makes the root when it
    /// does not exist yet (see [`Repo::ensure_root`]): a missing root is an
    /// empty repo with the default config.
    pub fn open_for_create(root: &Path) -> Result<Repo> {
        match fs::symlink_metadata(root) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Repo {
                root: root.to_path_buf(),
                config: Config::default(),
            }),
            _ => Repo::open(root),
        }
    }

    /// Creates the root (and its missing parents, durably) when it does not
    /// exist; `true` when it was created.
    pub fn ensure_root(&self) -> Result<bool> {
        if fs::symlink_metadata(&self.root).is_ok() {
            return Ok(false);
        }
        fsutil::create_dir_all_durable(&self.root)?;
        Ok(true)
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    pub fn private_dir(&self) -> PathBuf {
        self.root.join(PRIVATE_DIR)
    }

    /// `<root>/<channel>/<ver>`.
    pub fn channel_dir(&self, ch: Channel, ver: &str) -> PathBuf {
        self.root.join(ch.dir()).join(ver)
    }

    /// The store: `--store` (relative to the working directory) wins, then the
    /// config (relative to the root), then `<root>/store`.
    pub fn store(&self, cli: Option<&str>) -> Result<Store> {
        if let Some(url) = cli {
            return Store::open(url, Path::new("."));
        }
        if let Some(v) = &self.config.store {
            return Store::open(&v.value, &self.root).map_err(|e| {
                Error::input(
                    self.config_path(),
                    Some(v.line),
                    format!("store = {}: {e}", v.value),
                )
            });
        }
        Store::open(DEFAULT_STORE, &self.root)
    }

    /// Path of the checksums file the rotation regenerates.
    pub fn checksums_path(&self, cli: Option<&Path>) -> PathBuf {
        if let Some(p) = cli {
            return p.to_path_buf();
        }
        let rel = self
            .config
            .checksums
            .as_ref()
            .map_or(DEFAULT_CHECKSUMS, |v| v.value.as_str());
        self.root.join(rel)
    }

    /// Dict prefix: `--prefix`, then config, then `RCCLX`.
    pub fn prefix(&self, cli: Option<&str>) -> String {
        cli.map(str::to_string)
            .or_else(|| self.config.prefix.as_ref().map(|v| v.value.clone()))
            .unwrap_or_else(|| crate::checksums::DEFAULT_PREFIX.to_string())
    }

    /// Dict prefix for a run given `--prefix cli`: the recorded one, or `cli`, or `RCCLX`.
    /// A `--prefix` that differs from the one `snapctl.conf` records is refused: it
    /// would rename every dict of the checksums file its consumers `load()`.
    pub fn checked_prefix(&self, cli: Option<&str>) -> Result<String> {
        if let (Some(c), Some(rec)) = (cli, self.config.prefix.as_ref()) {
            if c != rec.value {
                return Err(Error::Usage(format!(
                    "--prefix {c} differs from prefix = {} recorded in {} (line {}); \
                     the checksums file's consumers load {}_* names: drop --prefix, \
                     or edit the file to rename them on purpose",
                    rec.value,
                    self.config_path().display(),
                    rec.line,
                    rec.value
                )));
            }
        }
        Ok(self.prefix(cli))
    }

    /// New content of `snapctl.conf` recording `store`/`checksums`/`prefix` the first
    /// time they are given (`None` when nothing changes). Written by the rotation's
    /// transaction, so later runs (and the fix commands rules print) need no flags.
    pub fn config_update(
        &self,
        store: Option<&str>,
        checksums: Option<&Path>,
        prefix: Option<&str>,
    ) -> Option<String> {
        let mut cfg = self.config.clone();
        let mut changed = false;
        if cfg.prefix.is_none() {
            if let Some(p) = prefix {
                cfg.prefix = Some(ConfValue {
                    value: p.to_string(),
                    line: 0,
                });
                changed = true;
            }
        }
        if cfg.store.is_none() {
            if let Some(s) = store {
                cfg.store = Some(ConfValue {
                    value: self.portable_store_url(s),
                    line: 0,
                });
                changed = true;
            }
        }
        if cfg.checksums.is_none() {
            if let Some(c) = checksums {
                let abs = absolutize(c);
                let value = relative_to(&abs, &absolutize(&self.root)).unwrap_or(abs);
                cfg.checksums = Some(ConfValue {
                    value: value.display().to_string(),
                    line: 0,
                });
                changed = true;
            }
        }
        changed.then(|| cfg.render())
    }

    fn portable_store_url(&self, s: &str) -> String {
        if s.contains("://") && !s.starts_with("file://") {
            return s.to_string();
        }
        let p = absolutize(Path::new(s.strip_prefix("file://").unwrap_or(s)));
        relative_to(&p, &absolutize(&self.root))
            .unwrap_or(p)
            .display()
            .to_string()
    }

    /// Reads every snapshot of a channel. Directories without `metadata.txt` count as
    /// absent; a malformed `metadata.txt` or a directory name that is not a version is an error.
    pub fn read_channel(&self, ch: Channel) -> Result<BTreeMap<String, Snapshot>> {
        let dir = self.root.join(ch.dir());
        let mut out = BTreeMap::new();
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Error::io(&dir, e)),
        };
        let mut names = Vec::new();
        for ent in rd {
            let ent = ent.map_err(io_at(&dir))?;
            // Follows symlinks: build systems stage snapshot trees as symlink farms.
            if fs::metadata(ent.path())
                .map_err(io_at(&ent.path()))?
                .is_dir()
            {
                names.push(ent.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        for ver in names {
            if ver.starts_with('.') {
                continue;
            }
            let vdir = dir.join(&ver);
            validate_version(&ver).map_err(|m| Error::input(&vdir, None, m))?;
            if let Some(s) = read_snapshot_dir(&vdir, &ver)? {
                out.insert(ver, s);
            }
        }
        Ok(out)
    }

    /// Archived metadata files of every version: (version, file name, parsed metadata).
    pub fn read_archives(&self) -> Result<Vec<(String, String, Metadata)>> {
        let dir = self.root.join("archives");
        let mut out = Vec::new();
        for ver in sorted_entries(&dir)? {
            let vdir = dir.join(&ver);
            if !vdir.is_dir() || ver.starts_with('.') {
                continue;
            }
            for f in sorted_entries(&vdir)? {
                if is_archive_name(&f, "metadata.txt") {
                    let md = Metadata::read(&vdir.join(&f))?;
                    out.push((ver.clone(), f, md));
                }
            }
        }
        Ok(out)
    }

    /// Archive stamps (`YYYYMMDD_HHMMSS`) already used for `ver`.
    pub fn archive_stamps(&self, ver: &str) -> Result<Vec<String>> {
        let vdir = self.root.join("archives").join(ver);
        let mut v: Vec<String> = sorted_entries(&vdir)?
            .into_iter()
            .filter(|f| f.len() > 16 && is_stamp(&f[..15]) && f.as_bytes().get(15) == Some(&b'_'))
            .map(|f| f[..15].to_string())
            .collect();
        v.dedup();
        Ok(v)
    }

    /// Takes the root's lock: exclusive (writers) or shared (readers). Waits, printing
    /// one message, up to `timeout` (forever when `None`).
    pub fn lock(&self, exclusive: bool, timeout: Option<Duration>) -> Result<Option<RepoLock>> {
        let pdir = self.private_dir();
        let path = pdir.join("lock");
        let file = if exclusive {
            fsutil::create_dir_all_durable(&pdir)?;
            let gi = pdir.join(".gitignore");
            if fsutil::read_bounded(&gi, 64).ok().as_deref() != Some(b"*\n".as_slice()) {
                // Static content, rewritten whenever it is not exactly this: no temp file
                // needed. Unlinked first, so a FIFO or symlink there is replaced, not written to.
                let _ = fs::remove_file(&gi);
                fs::write(&gi, b"*\n").map_err(io_at(&gi))?;
            }
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io_at(&path))?
        } else {
            // Readers never create anything (the root may be read-only, e.g. in a build sandbox).
            // Non-blocking: a FIFO planted there must not hang the reader.
            match rocpack_bundle::fsutil::open_nonblocking(&path, 0) {
                Ok(f) => f,
                Err(_) => return Ok(None),
            }
        };
        let start = Instant::now();
        let mut announced = false;
        loop {
            let r = if exclusive {
                file.try_lock()
            } else {
                file.try_lock_shared()
            };
            match r {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) => {}
                Err(fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
            if let Some(t) = timeout {
                if start.elapsed() >= t {
                    return Err(Error::LockTimeout {
                        path,
                        secs: t.as_secs(),
                    });
                }
            }
            if !announced {
                eprintln!(
                    "snapctl: waiting for the lock on {} (held by {}){}",
                    self.root.display(),
                    lock_holders(&file),
                    timeout.map_or(String::new(), |t| format!(
                        "; giving up after {} s",
                        t.as_secs()
                    ))
                );
                announced = true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Some(RepoLock { _file: file }))
    }
}

/// Who holds the `flock` on `file` right now, from `/proc/locks` (the
/// kernel's table, so never a stale pid left in a file by a dead process).
fn lock_holders(file: &File) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = file.metadata() else {
        return "another snapctl".into();
    };
    let dev = meta.dev();
    let want = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let table = fsutil::read_text_bounded(Path::new("/proc/locks"), 16 << 20).unwrap_or_default();
    let mut holders = Vec::new();
    for line in table.lines() {
        // `1: FLOCK  ADVISORY  WRITE 12345 08:01:1234567 0 EOF`; blocked waiters are `->` lines.
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str()) {
            if let (Some(kind), Some(pid)) = (f.get(3), f.get(4)) {
                let who = if *kind == "WRITE" { "writer" } else { "reader" };
                holders.push(format!("{who} pid {pid}"));
            }
        }
    }
    if holders.is_empty() {
        "another snapctl".into()
    } else {
        holders.join(", ")
    }
}

/// Held lock; released on drop (or process exit).
pub struct RepoLock {
    _file: File,
}

fn read_snapshot_dir(vdir: &Path, ver: &str) -> Result<Option<Snapshot>> {
    let mpath = vdir.join("metadata.txt");
    if !mpath.exists() {
        return Ok(None);
    }
    let meta = Metadata::read(&mpath)?;
    if meta.version != ver {
        return Err(Error::input(
            &mpath,
            Some(2),
            format!(
                "ROCm version {} does not match its directory {ver}",
                meta.version
            ),
        ));
    }
    let mut files = Vec::new();
    for f in sorted_entries(vdir)? {
        if f.starts_with('.') {
            continue;
        }
        let p = vdir.join(&f);
        if fs::metadata(&p).is_ok_and(|m| m.is_file()) {
            files.push(f);
        }
    }
    Ok(Some(Snapshot {
        meta,
        dir: vdir.to_path_buf(),
        files,
    }))
}

/// Sorted entry names of `dir` (empty when it does not exist).
pub fn sorted_entries(dir: &Path) -> Result<Vec<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    let mut v = Vec::new();
    for ent in rd {
        v.push(
            ent.map_err(io_at(dir))?
                .file_name()
                .to_string_lossy()
                .into_owned(),
        );
    }
    v.sort();
    Ok(v)
}

fn is_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 15
        && b.iter().enumerate().all(|(i, c)| {
            if i == 8 {
                *c == b'_'
            } else {
                c.is_ascii_digit()
            }
        })
}

/// `YYYYMMDD_HHMMSS_<file>`.
pub fn is_archive_name(name: &str, file: &str) -> bool {
    name.len() == 16 + file.len()
        && is_stamp(&name[..15])
        && name.ends_with(file)
        && name.as_bytes().get(15) == Some(&b'_')
}

/// Current time: `SOURCE_DATE_EPOCH` when set, else the clock; always UTC.
pub fn now_utc() -> Result<chrono::DateTime<chrono::Utc>> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => {
            let secs: i64 = v
                .trim()
                .parse()
                .map_err(|_| Error::Usage(format!("SOURCE_DATE_EPOCH={v:?} is not an integer")))?;
            chrono::DateTime::from_timestamp(secs, 0)
                .ok_or_else(|| Error::Usage(format!("SOURCE_DATE_EPOCH={v:?} is out of range")))
        }
        Err(_) => Ok(chrono::Utc::now()),
    }
}

fn absolutize(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

fn normalize(p: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    out
}

/// `path` relative to `base` (both absolute), using `..` as needed.
fn relative_to(path: &Path, base: &Path) -> Option<PathBuf> {
    let (p, b) = (normalize(path), normalize(base));
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in p.get(common..)? {
        out.push(c);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    Some(out)
}
