//! Crash-safe rotation.
//!
//! Every mutation of the snapshots root is a transaction:
//! 1. (under the root's exclusive lock, after recovering any earlier transaction)
//!    validate all input and all existing metadata; upload + verify the blob;
//! 2. **stage**: write every file the transaction will install (new metadata, headers,
//!    copies of the snapshots being rotated or archived, the regenerated checksums file)
//!    into `.snapctl/staging/<txid>/`, fsynced;
//! 3. **commit**: write `.snapctl/journal.json` (temp + fsync + rename) listing the installs
//!    (staged file → destination) and the removals;
//! 4. **apply**: rename each staged file onto its destination (atomic replace, dir fsync),
//!    then remove files that the new state no longer has — every one of them has by then
//!    been installed elsewhere (archive or last-stable) durably;
//! 5. remove the staging dir and the journal.
//!
//! Recovery ([`recover`], run automatically by every command): with a journal, step 4-5 are
//! replayed (each step is idempotent: a staged file that is gone was already renamed);
//! without one, leftover staging is discarded — the repo was never touched.

use crate::checksums::{self, Channels};
use crate::error::{io_at, Error, Result};
use crate::fsutil::{self, step};
use crate::hash;
use crate::metadata::{
    describe_char, validate_artifact_name, validate_header_name, validate_version, Artifact,
    Metadata,
};
use crate::repo::{now_utc, Channel, Repo, Snapshot};
use crate::store::{PutOutcome, Store};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const JOURNAL: &str = "journal.json";
const STAGING: &str = "staging";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Install {
    /// File name inside the staging dir.
    staged: String,
    /// Destination, relative to the root (or absolute).
    dest: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Journal {
    format: u32,
    txid: String,
    op: String,
    version: String,
    installs: Vec<Install>,
    removes: Vec<String>,
    /// Whole directories (source snapshots), applied before `installs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    trees: Vec<TreeInstall>,
}

/// A directory staged whole and swapped onto its destination in one step
/// (`renameat2(RENAME_EXCHANGE)`; `rename` when the destination is new).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct TreeInstall {
    /// Directory name inside the staging dir.
    staged: String,
    /// Destination, relative to the root.
    dest: String,
    /// sha256 of the staged tree's `metadata.txt`: the destination holding
    /// it means the swap is done (replays skip it).
    meta_sha256: String,
    /// Where the replaced directory goes (relative to the root; `None`: deleted).
    old_to: Option<String>,
}

/// What [`recover`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    Nothing,
    /// An interrupted transaction was rolled back (the repo had not been touched).
    RolledBack,
    /// An interrupted, committed transaction was completed.
    Completed {
        op: String,
        version: String,
    },
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Recovery::Nothing => write!(f, "nothing to recover"),
            Recovery::RolledBack => write!(
                f,
                "rolled back an interrupted transaction that had not committed"
            ),
            Recovery::Completed { op, version } => {
                write!(f, "completed an interrupted `{op}` of ROCm {version}")
            }
        }
    }
}

/// Inputs of [`create`].
#[derive(Clone, Debug)]
pub struct CreateRequest {
    pub version: String,
    pub artifact: PathBuf,
    pub headers: Vec<PathBuf>,
    /// (name, hash) pairs, e.g. ("rcclx", "3a4e…").
    pub commits: Vec<(String, String)>,
    /// Checksums file to regenerate (default: from the repo config).
    pub checksums: Option<PathBuf>,
    pub prefix: Option<String>,
    pub lock_timeout: Option<Duration>,
    /// `--store` as given; recorded in `snapctl.conf` when the root has no store yet.
    pub store_url: Option<String>,
    /// ABI inputs (recorded path, file) from `--abi-input` ([`crate::abi::resolve_inputs`]).
    pub abi_inputs: Vec<(String, PathBuf)>,
}

/// Result of [`create`].
#[derive(Clone, Debug)]
pub enum CreateOutcome {
    Created {
        meta: Metadata,
        put: PutOutcome,
        /// Archive files written (relative to the root).
        archived: Vec<String>,
        checksums: PathBuf,
        recovered: Recovery,
    },
    /// stable/<ver> already holds exactly this snapshot (e.g. a re-run after a crash).
    AlreadyStable { meta: Metadata, recovered: Recovery },
}

/// Result of [`rollback`].
#[derive(Clone, Debug)]
pub struct RollbackOutcome {
    pub restored: Metadata,
    pub archived: Vec<String>,
    pub checksums: PathBuf,
    pub recovered: Recovery,
}

fn dest_path(root: &Path, dest: &str) -> PathBuf {
    let p = Path::new(dest);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// Completes or rolls back an interrupted transaction. Caller holds the exclusive lock.
pub fn recover_locked(repo: &Repo) -> Result<Recovery> {
    let pdir = repo.private_dir();
    let jpath = pdir.join(JOURNAL);
    if jpath.exists() {
        let text = fsutil::read_text_bounded(&jpath, 64 << 20)?;
        let j: Journal = serde_json::from_str(&text)
            .map_err(|e| Error::input(&jpath, Some(e.line()), format!("corrupt journal: {e}")))?;
        apply(repo, &j)?;
        return Ok(Recovery::Completed {
            op: j.op,
            version: j.version,
        });
    }
    let staging = pdir.join(STAGING);
    let leftovers: Vec<String> = crate::repo::sorted_entries(&pdir)?
        .into_iter()
        .filter(|n| n.starts_with(".journal.json.tmp"))
        .collect();
    let has_staging = !crate::repo::sorted_entries(&staging)?.is_empty();
    if !has_staging && leftovers.is_empty() {
        return Ok(Recovery::Nothing);
    }
    step("recover: discard uncommitted staging");
    for n in leftovers {
        let p = pdir.join(n);
        fs::remove_file(&p).map_err(io_at(&p))?;
    }
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(io_at(&staging))?;
    }
    fsutil::fsync_dir(&pdir)?;
    Ok(Recovery::RolledBack)
}

/// Takes the lock and recovers (`snapctl recover`).
pub fn recover(repo: &Repo, lock_timeout: Option<Duration>) -> Result<Recovery> {
    let _lock = repo.lock(true, lock_timeout)?;
    recover_locked(repo)
}

/// `true` when a committed transaction was interrupted before it was fully
/// applied: the channel directories may be half-way, so readers must see it
/// rolled forward first. Uncommitted staging leftovers do not count: they
/// never touched what readers read (and a read-only tree cannot drop them).
pub fn journal_pending(repo: &Repo) -> bool {
    repo.private_dir().join(JOURNAL).exists()
}

/// `true` when an interrupted transaction (committed or not) left anything to recover.
pub fn needs_recovery(repo: &Repo) -> bool {
    let pdir = repo.private_dir();
    pdir.join(JOURNAL).exists()
        || crate::repo::sorted_entries(&pdir.join(STAGING)).is_ok_and(|v| !v.is_empty())
}

/// Archives are append-only: install `src` at `dst` with `link` + `unlink`,
/// which fails instead of replacing an existing archive. A `dst` that already
/// holds the same bytes is a replay after an interruption between the two.
fn install_no_clobber(src: &Path, dst: &Path) -> Result<()> {
    match fs::hard_link(src, dst) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let same = fsutil::read_bounded(src, ARCHIVE_MAX)
                .and_then(|a| fsutil::read_bounded(dst, ARCHIVE_MAX).map(|b| a == b))
                .unwrap_or(false);
            if !same {
                return Err(Error::input(
                    dst,
                    None,
                    "an archived snapshot with this name already exists; archives are never replaced"
                        .to_string(),
                ));
            }
        }
        Err(e) => return Err(Error::io(dst, e)),
    }
    fs::remove_file(src).map_err(io_at(src))
}

/// Largest archived file compared byte for byte on a replay.
const ARCHIVE_MAX: u64 = 64 << 20;

fn apply(repo: &Repo, j: &Journal) -> Result<()> {
    let staging = repo.private_dir().join(STAGING).join(&j.txid);
    for t in &j.trees {
        apply_tree(repo, &staging, t)?;
    }
    for ins in &j.installs {
        let src = staging.join(&ins.staged);
        let dst = dest_path(&repo.root, &ins.dest);
        if !src.exists() {
            if dst.exists() {
                continue; // renamed before the interruption
            }
            return Err(Error::input(
                repo.private_dir().join(JOURNAL),
                None,
                format!(
                    "staged file {} for {} is gone and the destination does not exist",
                    src.display(),
                    ins.dest
                ),
            ));
        }
        let dir = fsutil::parent_of(&dst);
        fsutil::create_dir_all_durable(&dir)?;
        step(&format!("install {}", ins.dest));
        if ins.dest.starts_with("archives/") {
            install_no_clobber(&src, &dst)?;
            fsutil::fsync_dir(&dir)?;
            continue;
        }
        match fs::rename(&src, &dst) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::CrossesDevices => {
                // Destination on another filesystem (e.g. the checksums file): copy beside it, then rename.
                fsutil::sweep_stale_temps(&dst);
                let tmp = fsutil::temp_beside(&dst)?;
                fsutil::copy_durable(&src, tmp.path())?;
                tmp.persist(&dst).map_err(|e| Error::io(&dst, e.error))?;
                fsutil::fsync_dir(&dir)?;
                fs::remove_file(&src).map_err(io_at(&src))?;
            }
            Err(e) => return Err(Error::io(&dst, e)),
        }
        fsutil::fsync_dir(&dir)?;
    }
    for r in &j.removes {
        let p = dest_path(&repo.root, r);
        if p.exists() {
            step(&format!("remove {r}"));
            fs::remove_file(&p).map_err(io_at(&p))?;
            fsutil::fsync_dir(&fsutil::parent_of(&p))?;
        }
    }
    if staging.exists() {
        step("remove staging dir");
        fs::remove_dir_all(&staging).map_err(io_at(&staging))?;
    }
    let pdir = repo.private_dir();
    let jpath = pdir.join(JOURNAL);
    step("remove journal");
    fs::remove_file(&jpath).map_err(io_at(&jpath))?;
    fsutil::fsync_dir(&pdir)?;
    Ok(())
}

/// sha256 of `dir/metadata.txt`, `None` when it is absent or unreadable.
fn meta_sha256(dir: &Path) -> Option<String> {
    hash::sha256_file(&dir.join(crate::tree::METADATA))
        .ok()
        .map(|d| d.0)
}

/// One idempotent step of [`TreeInstall`]: swap the staged tree in (unless
/// the destination already holds it), then move the replaced tree (now at
/// the staged path) to `old_to` or delete it.
fn apply_tree(repo: &Repo, staging: &Path, t: &TreeInstall) -> Result<()> {
    let src = staging.join(&t.staged);
    let dst = dest_path(&repo.root, &t.dest);
    let dir = fsutil::parent_of(&dst);
    if meta_sha256(&dst).as_deref() != Some(t.meta_sha256.as_str()) {
        if fs::symlink_metadata(&src).is_err() {
            return Err(Error::input(
                repo.private_dir().join(JOURNAL),
                None,
                format!(
                    "staged tree {} for {} is gone and the destination does not hold it",
                    src.display(),
                    t.dest
                ),
            ));
        }
        fsutil::create_dir_all_durable(&dir)?;
        step(&format!("swap in {}", t.dest));
        if fs::symlink_metadata(&dst).is_ok() {
            crate::tree::exchange(&src, &dst)?;
        } else {
            fs::rename(&src, &dst).map_err(io_at(&dst))?;
        }
        fsutil::fsync_dir(&dir)?;
        fsutil::fsync_dir(staging)?;
    }
    // The three-rename fallback of `exchange` parks the replaced tree at `<staged>.old`.
    let parked = staging.join(format!("{}.old", t.staged));
    if fs::symlink_metadata(&src).is_err() && fs::symlink_metadata(&parked).is_ok() {
        fs::rename(&parked, &src).map_err(io_at(&src))?;
    }
    if fs::symlink_metadata(&src).is_ok() {
        match &t.old_to {
            Some(to) => {
                let to = dest_path(&repo.root, to);
                let tdir = fsutil::parent_of(&to);
                fsutil::create_dir_all_durable(&tdir)?;
                step(&format!("archive the replaced {}", t.dest));
                // `rename` onto an existing non-empty directory fails: an archive is never replaced.
                fs::rename(&src, &to).map_err(io_at(&to))?;
                fsutil::fsync_dir(&tdir)?;
            }
            None => {
                step(&format!("delete the replaced {}", t.dest));
                fs::remove_dir_all(&src).map_err(io_at(&src))?;
            }
        }
        fsutil::fsync_dir(staging)?;
    }
    Ok(())
}

/// Fills a staged directory (which does not exist yet) with a tree.
pub(crate) type TreeFill = Box<dyn FnOnce(&Path) -> Result<()>>;

/// A whole directory to install: how to build it, where it goes, where the
/// directory it replaces goes (`None`: deleted).
pub(crate) struct TreePlan {
    pub fill: TreeFill,
    pub dest: String,
    pub old_to: Option<String>,
}

/// Builds a transaction: staged content and where it goes.
pub(crate) struct Plan {
    txid: String,
    op: String,
    version: String,
    /// (staged content source, destination relative to root or absolute)
    installs: Vec<(Source, String)>,
    removes: Vec<String>,
    pub(crate) trees: Vec<TreePlan>,
}

pub(crate) enum Source {
    File(PathBuf),
    Bytes(Vec<u8>),
    /// A file that must still have this sha256 when it is staged.
    Hashed(PathBuf, String),
}

impl Plan {
    pub(crate) fn new(op: &str, version: &str, now: &chrono::DateTime<chrono::Utc>) -> Plan {
        Plan {
            txid: format!("{}-{}", now.format("%Y%m%d_%H%M%S"), std::process::id()),
            op: op.to_string(),
            version: version.to_string(),
            installs: Vec::new(),
            removes: Vec::new(),
            trees: Vec::new(),
        }
    }

    /// Adds a file install (staged content → destination relative to the root).
    pub(crate) fn install(&mut self, src: Source, dest: String) {
        self.installs.push((src, dest));
    }

    /// Builds every tree in `staging/T<i>` (fsynced by the fill functions).
    fn stage_trees(&mut self, staging: &Path) -> Result<Vec<TreeInstall>> {
        let mut out = Vec::new();
        for (i, t) in std::mem::take(&mut self.trees).into_iter().enumerate() {
            let name = format!("T{i:03}");
            let p = staging.join(&name);
            step(&format!("stage tree {}", t.dest));
            (t.fill)(&p)?;
            let meta_sha256 = meta_sha256(&p).ok_or_else(|| {
                Error::Usage(format!(
                    "internal error: staged tree for {} has no metadata.txt",
                    t.dest
                ))
            })?;
            out.push(TreeInstall {
                staged: name,
                dest: t.dest,
                meta_sha256,
                old_to: t.old_to,
            });
        }
        fsutil::fsync_dir(staging)?;
        Ok(out)
    }

    /// Copies every install into `staging` (fsynced).
    fn stage(&self, staging: &Path) -> Result<Vec<Install>> {
        let mut installs = Vec::new();
        for (i, (src, dest)) in self.installs.iter().enumerate() {
            let name = format!("{i:03}");
            let p = staging.join(&name);
            step(&format!("stage {dest}"));
            match src {
                Source::File(f) => fsutil::copy_durable(f, &p)?,
                Source::Bytes(b) => fsutil::write_durable(&p, b)?,
                Source::Hashed(f, want) => {
                    let got = hash::copy_hashed(f, &p)?;
                    if &got.sha256 != want {
                        return Err(Error::Digest {
                            what: format!(
                                "{} changed while snapctl ran (staged for {dest})",
                                f.display()
                            ),
                            expected: want.clone(),
                            actual: got.sha256,
                        });
                    }
                }
            }
            installs.push(Install {
                staged: name,
                dest: dest.clone(),
            });
        }
        fsutil::fsync_dir(staging)?;
        Ok(installs)
    }

    /// Stage, commit, apply.
    pub(crate) fn run(mut self, repo: &Repo) -> Result<()> {
        let pdir = repo.private_dir();
        let staging = pdir.join(STAGING).join(&self.txid);
        fsutil::create_dir_all_durable(&staging)?;
        // Before the commit point nothing outside the staging dir changed: on
        // any error (ENOSPC, a header that changed since it was hashed) the
        // staging dir goes too, so a failed run leaves no trace.
        let staged = self
            .stage_trees(&staging)
            .and_then(|t| Ok((t, self.stage(&staging)?)));
        let (trees, installs) = match staged {
            Ok(v) => v,
            Err(e) => {
                let _ = fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        let j = Journal {
            format: 1,
            txid: self.txid,
            op: self.op,
            version: self.version,
            installs,
            removes: self.removes,
            trees,
        };
        let text = serde_json::to_string_pretty(&j).map_err(|e| Error::Usage(e.to_string()))?;
        let jpath = pdir.join(JOURNAL);
        if let Err(e) = fsutil::atomic_write(&jpath, text.as_bytes(), "journal (commit point)") {
            // Not committed unless the journal is in place (its rename is the commit).
            if !jpath.exists() {
                let _ = fs::remove_dir_all(&staging);
            }
            return Err(e);
        }
        apply(repo, &j)
    }
}

/// Archive stamp for `ver`: `now`, moved past the newest existing stamp so names never
/// collide and sort in rotation order.
///
/// Stamps have one-second resolution, so `now` is truncated to the second
/// before the comparison: two rotations within the same second must not get
/// the same name (the second `rename` would replace the first archive).
/// Called under the root's lock, so the newest stamp cannot change meanwhile.
fn archive_stamp(repo: &Repo, ver: &str, now: &chrono::DateTime<chrono::Utc>) -> Result<String> {
    use chrono::Timelike;
    let mut t = now.with_nanosecond(0).unwrap_or(*now);
    if let Some(last) = repo.archive_stamps(ver)?.last() {
        if let Ok(lt) = chrono::NaiveDateTime::parse_from_str(last, "%Y%m%d_%H%M%S") {
            let lt = lt.and_utc();
            if lt >= t {
                t = lt + chrono::Duration::seconds(1);
            }
        }
    }
    Ok(t.format("%Y%m%d_%H%M%S").to_string())
}

/// A snapshot about to become stable must be whole: every header its
/// metadata lists present, a regular file, with the recorded sha256.
fn check_complete(snap: &Snapshot) -> Result<()> {
    check_whole(
        snap,
        "of the last-stable snapshot",
        "refusing to make an incomplete snapshot stable",
    )
}

/// Every header `snap`'s metadata lists is present with its recorded sha256.
fn check_whole(snap: &Snapshot, whose: &str, refusing: &str) -> Result<()> {
    for (h, want) in &snap.meta.headers {
        let p = snap.dir.join(h);
        let problem = match hash::sha256_file_limited(&p, Some(crate::metadata::MAX_HEADER_BYTES)) {
            Ok(Ok((got, _))) if &got == want => continue,
            Ok(Ok((got, _))) => format!("sha256 {got}, metadata says {want}"),
            Ok(Err(_)) => format!("larger than {} bytes", crate::metadata::MAX_HEADER_BYTES),
            Err(e) => e.to_string(),
        };
        return Err(Error::input(
            &p,
            None,
            format!("header {h} {whose}: {problem}; {refusing}"),
        ));
    }
    Ok(())
}

fn read_state(repo: &Repo) -> Result<(BTreeMap<String, Snapshot>, BTreeMap<String, Snapshot>)> {
    Ok((
        repo.read_channel(Channel::Stable)?,
        repo.read_channel(Channel::LastStable)?,
    ))
}

fn channels_of(stable: &BTreeMap<String, Snapshot>, last: &BTreeMap<String, Snapshot>) -> Channels {
    Channels {
        stable: stable
            .iter()
            .map(|(k, s)| (k.clone(), s.meta.clone()))
            .collect(),
        last_stable: last
            .iter()
            .map(|(k, s)| (k.clone(), s.meta.clone()))
            .collect(),
    }
}

fn checksums_dest(repo: &Repo, path: &Path) -> String {
    let p = if path.is_absolute() {
        path.to_path_buf()
    } else if let Ok(r) = path.strip_prefix(&repo.root) {
        return r.display().to_string();
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    p.display().to_string()
}

/// Reads the repo and renders the checksums file (validated through Starlark).
pub fn generate_checksums(repo: &Repo, prefix: &str) -> Result<String> {
    let (stable, last) = read_state(repo)?;
    checksums::generate(prefix, &channels_of(&stable, &last))
}

/// Why `--commit NAME=HASH` cannot be recorded in `metadata.txt`, if it cannot.
fn commit_problem(name: &str, hash: &str) -> Option<String> {
    for (what, s) in [("NAME", name), ("HASH", hash)] {
        if s.is_empty() {
            return Some(format!("the {what} is empty"));
        }
        if let Some(c) = s.chars().find(|c| c.is_control() || c.is_whitespace()) {
            return Some(format!("the {what} contains {}", describe_char(c)));
        }
    }
    if name.contains(':') {
        return Some("the NAME contains ':' (the separator of metadata.txt entries)".into());
    }
    None
}

/// `snapctl create`: upload the artifact, rotate last-stable → archives, stable →
/// last-stable, new → stable, regenerate the checksums file — as one transaction.
pub fn create(repo: &Repo, store: &Store, req: &CreateRequest) -> Result<CreateOutcome> {
    // 1. Validate arguments before touching anything.
    validate_version(&req.version).map_err(Error::Usage)?;
    let amd = fs::metadata(&req.artifact)
        .map_err(|e| Error::input(&req.artifact, None, format!("artifact: {e}")))?;
    if !amd.is_file() {
        return Err(Error::input(
            &req.artifact,
            None,
            "artifact is not a regular file",
        ));
    }
    let art_name = req
        .artifact
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    validate_artifact_name(&art_name)
        .map_err(|m| Error::input(&req.artifact, None, format!("--artifact: {m}")))?;
    let mut header_names = BTreeMap::new();
    for h in &req.headers {
        let hm = fs::metadata(h).map_err(|e| Error::input(h, None, format!("header: {e}")))?;
        if !hm.is_file() {
            return Err(Error::input(h, None, "header is not a regular file"));
        }
        let n = h
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        validate_header_name(&n).map_err(|m| Error::input(h, None, format!("--header: {m}")))?;
        if header_names.insert(n.clone(), h.clone()).is_some() {
            return Err(Error::Usage(format!("two headers are named {n}")));
        }
    }
    let mut commits = req.commits.clone();
    for (n, v) in &commits {
        if let Some(p) = commit_problem(n, v) {
            return Err(Error::Usage(format!(
                "--commit {:?}: {p}; expected NAME=HASH",
                format!("{n}={v}")
            )));
        }
    }
    commits.sort();
    if commits
        .windows(2)
        .any(|w| w.first().map(|a| &a.0) == w.get(1).map(|b| &b.0))
    {
        return Err(Error::Usage("the same --commit NAME is given twice".into()));
    }
    let prefix = repo.checked_prefix(req.prefix.as_deref())?;
    checksums::validate_prefix(&prefix).map_err(Error::Usage)?;
    let checksums_path = repo.checksums_path(req.checksums.as_deref());

    // 2. Lock, recover, read and validate the whole repo (a first create
    //    makes the root: see `Repo::open_for_create`).
    repo.ensure_root()?;
    let _lock = repo.lock(true, req.lock_timeout)?;
    let recovered = recover_locked(repo)?;
    let (stable, last) = read_state(repo)?;
    let now = now_utc()?;

    // 3. Header digests, then the blob (uploaded and verified before any metadata moves).
    let mut headers = BTreeMap::new();
    for (n, p) in &header_names {
        headers.insert(n.clone(), hash::sha256_file(p)?.0);
    }
    let abi_inputs = crate::abi::digests(&req.abi_inputs)?;
    let ver = req.version.clone();
    if let Some(cur) = stable.get(&ver) {
        let same_files = {
            let mut want: Vec<String> = headers.keys().cloned().collect();
            want.push("metadata.txt".into());
            want.sort();
            want == cur.files
        };
        if same_files
            && cur.meta.headers == headers
            && cur.meta.commits == commits
            && cur.meta.abi_inputs == abi_inputs
        {
            let (sha256, _) = hash::sha256_file(&req.artifact)?;
            if cur.meta.sha256 == sha256
                && cur
                    .meta
                    .artifact
                    .as_ref()
                    .is_some_and(|a| a.name == art_name)
            {
                return Ok(CreateOutcome::AlreadyStable {
                    meta: cur.meta.clone(),
                    recovered,
                });
            }
        }
    }
    let put = store.put_file(&req.artifact)?;
    let meta = Metadata {
        created: now.format("%Y-%m-%d %H:%M:%S").to_string(),
        version: ver.clone(),
        sha1: Some(put.digest.sha1.clone()),
        sha256: put.digest.sha256.clone(),
        artifact: Some(Artifact {
            name: art_name,
            size: put.digest.size,
            store_key: put.key.clone(),
        }),
        headers,
        commits,
        abi_inputs,
    };

    // 4. Plan.
    let mut plan = Plan::new("create", &ver, &now);
    let mut archived = Vec::new();
    let sdir = repo.channel_dir(Channel::Stable, &ver);
    let ldir = repo.channel_dir(Channel::LastStable, &ver);
    let mut final_stable = stable.clone();
    let mut final_last = last.clone();
    if let Some(cur_stable) = stable.get(&ver) {
        if let Some(cur_last) = last.get(&ver) {
            let stamp = archive_stamp(repo, &ver, &now)?;
            for f in &cur_last.files {
                let d = format!("archives/{ver}/{stamp}_{f}");
                plan.installs.push((Source::File(ldir.join(f)), d.clone()));
                archived.push(d);
            }
            for f in &cur_last.files {
                if !cur_stable.files.contains(f) {
                    plan.removes.push(rel(&repo.root, &ldir.join(f)));
                }
            }
        }
        for f in &cur_stable.files {
            plan.installs
                .push((Source::File(sdir.join(f)), rel(&repo.root, &ldir.join(f))));
        }
        final_last.insert(
            ver.clone(),
            Snapshot {
                dir: ldir.clone(),
                ..cur_stable.clone()
            },
        );
        let mut new_files: Vec<&str> = meta.headers.keys().map(String::as_str).collect();
        new_files.push("metadata.txt");
        for f in &cur_stable.files {
            if !new_files.contains(&f.as_str()) {
                plan.removes.push(rel(&repo.root, &sdir.join(f)));
            }
        }
    }
    for (n, p) in &header_names {
        let want = meta.headers.get(n).cloned().unwrap_or_default();
        plan.installs.push((
            Source::Hashed(p.clone(), want),
            rel(&repo.root, &sdir.join(n)),
        ));
    }
    plan.installs.push((
        Source::Bytes(meta.render().into_bytes()),
        rel(&repo.root, &sdir.join("metadata.txt")),
    ));
    final_stable.insert(
        ver.clone(),
        Snapshot {
            meta: meta.clone(),
            dir: sdir.clone(),
            files: Vec::new(),
        },
    );
    let text = checksums::generate(&prefix, &channels_of(&final_stable, &final_last))?;
    plan.installs.push((
        Source::Bytes(text.into_bytes()),
        checksums_dest(repo, &checksums_path),
    ));
    if let Some(conf) = repo.config_update(
        req.store_url.as_deref(),
        req.checksums.as_deref(),
        req.prefix.as_deref(),
    ) {
        plan.installs.push((
            Source::Bytes(conf.into_bytes()),
            crate::repo::CONFIG_FILE.to_string(),
        ));
    }

    // 5. Stage, commit, apply.
    plan.run(repo)?;
    Ok(CreateOutcome::Created {
        meta,
        put,
        archived,
        checksums: checksums_path,
        recovered,
    })
}

/// `snapctl rollback`: last-stable → stable; the old stable goes to archives; last-stable
/// becomes empty for that version. Regenerates the checksums file.
pub fn rollback(
    repo: &Repo,
    version: &str,
    checksums_cli: Option<&Path>,
    prefix: Option<&str>,
    lock_timeout: Option<Duration>,
) -> Result<RollbackOutcome> {
    validate_version(version).map_err(Error::Usage)?;
    let prefix_cli = prefix;
    let prefix = repo.checked_prefix(prefix_cli)?;
    checksums::validate_prefix(&prefix).map_err(Error::Usage)?;
    let checksums_path = repo.checksums_path(checksums_cli);
    let _lock = repo.lock(true, lock_timeout)?;
    let recovered = recover_locked(repo)?;
    let (stable, last) = read_state(repo)?;
    let Some(cur_last) = last.get(version) else {
        return Err(Error::Usage(format!(
            "no last-stable snapshot of ROCm {version} to roll back to (last-stable has: {})",
            if last.is_empty() {
                "none".to_string()
            } else {
                last.keys().cloned().collect::<Vec<_>>().join(", ")
            }
        )));
    };
    check_complete(cur_last)?;
    let now = now_utc()?;
    let mut plan = Plan::new("rollback", version, &now);
    let sdir = repo.channel_dir(Channel::Stable, version);
    let ldir = repo.channel_dir(Channel::LastStable, version);
    let mut archived = Vec::new();
    if let Some(cur_stable) = stable.get(version) {
        let stamp = archive_stamp(repo, version, &now)?;
        for f in &cur_stable.files {
            let d = format!("archives/{version}/{stamp}_{f}");
            plan.installs.push((Source::File(sdir.join(f)), d.clone()));
            archived.push(d);
        }
        for f in &cur_stable.files {
            if !cur_last.files.contains(f) {
                plan.removes.push(rel(&repo.root, &sdir.join(f)));
            }
        }
    }
    for f in &cur_last.files {
        plan.installs
            .push((Source::File(ldir.join(f)), rel(&repo.root, &sdir.join(f))));
    }
    for f in &cur_last.files {
        plan.removes.push(rel(&repo.root, &ldir.join(f)));
    }
    let mut final_stable = stable.clone();
    let mut final_last = last.clone();
    final_stable.insert(
        version.to_string(),
        Snapshot {
            dir: sdir.clone(),
            ..cur_last.clone()
        },
    );
    final_last.remove(version);
    let text = checksums::generate(&prefix, &channels_of(&final_stable, &final_last))?;
    plan.installs.push((
        Source::Bytes(text.into_bytes()),
        checksums_dest(repo, &checksums_path),
    ));
    if let Some(conf) = repo.config_update(None, checksums_cli, prefix_cli) {
        plan.installs.push((
            Source::Bytes(conf.into_bytes()),
            crate::repo::CONFIG_FILE.to_string(),
        ));
    }
    let restored = cur_last.meta.clone();
    plan.run(repo)?;
    Ok(RollbackOutcome {
        restored,
        archived,
        checksums: checksums_path,
        recovered,
    })
}

/// Inputs of [`recut`].
#[derive(Clone, Debug)]
pub struct RecutRequest {
    pub channel: Channel,
    pub version: String,
    /// The rebuilt archive (any file name: the recorded one is kept).
    pub artifact: PathBuf,
    /// Where recorded ABI-input paths not in `abi_inputs` are found now (the workspace root).
    pub abi_base: PathBuf,
    /// ABI inputs given (recorded path, file): recorded ones and new ones.
    pub abi_inputs: Vec<(String, PathBuf)>,
    pub checksums: Option<PathBuf>,
    pub prefix: Option<String>,
    pub lock_timeout: Option<Duration>,
}

/// Result of [`recut`].
#[derive(Clone, Debug)]
pub struct RecutOutcome {
    /// The snapshot as it was.
    pub old: Metadata,
    /// The snapshot now (the same as `old` when nothing changed).
    pub meta: Metadata,
    /// `None`: nothing to do (same archive, same ABI inputs).
    pub put: Option<PutOutcome>,
    pub archived: Vec<String>,
    pub checksums: PathBuf,
    pub recovered: Recovery,
}

/// The ABI inputs of a re-cut: the files given (`--abi-input`), and every
/// other path the snapshot recorded, found again under `base`. A recorded
/// path that is neither is an error naming it.
fn recut_abi_inputs(
    recorded: &BTreeMap<String, String>,
    base: &Path,
    given: &[(String, PathBuf)],
) -> Result<BTreeMap<String, String>> {
    let mut inputs = given.to_vec();
    for path in recorded.keys() {
        if given.iter().any(|(n, _)| n == path) {
            continue;
        }
        let f = base.join(path);
        if fs::symlink_metadata(&f).is_err() {
            return Err(Error::input(
                &f,
                None,
                format!(
                    "ABI input {path}, recorded by the snapshot, is neither given (--abi-input {path}=FILE) nor under the ABI base {} (--abi-base WORKSPACE_ROOT); a file the dependency no longer has: re-cut with `snapctl create` instead",
                    base.display()
                ),
            ));
        }
        inputs.push((path.clone(), f));
    }
    crate::abi::digests(&inputs)
}

/// `snapctl recut`: replaces the archive of one snapshot of any channel in
/// place (no rotation), keeping everything else it records: headers (the
/// files beside its metadata, checked against their digests), commits and
/// artifact name; its ABI inputs are hashed again (see [`recut_abi_inputs`]).
/// The old metadata goes to `archives/<ver>/`; the checksums file is
/// regenerated. For a snapshot whose dependencies changed under it: rebuild
/// the archive from the recorded commits against the new dependencies, then
/// recut.
pub fn recut(repo: &Repo, store: &Store, req: &RecutRequest) -> Result<RecutOutcome> {
    validate_version(&req.version).map_err(Error::Usage)?;
    let amd = fs::metadata(&req.artifact)
        .map_err(|e| Error::input(&req.artifact, None, format!("artifact: {e}")))?;
    if !amd.is_file() {
        return Err(Error::input(
            &req.artifact,
            None,
            "artifact is not a regular file",
        ));
    }
    let prefix = repo.checked_prefix(req.prefix.as_deref())?;
    checksums::validate_prefix(&prefix).map_err(Error::Usage)?;
    let checksums_path = repo.checksums_path(req.checksums.as_deref());
    let ver = req.version.clone();
    let _lock = repo.lock(true, req.lock_timeout)?;
    let recovered = recover_locked(repo)?;
    let (mut stable, mut last) = read_state(repo)?;
    let snaps = match req.channel {
        Channel::Stable => &mut stable,
        Channel::LastStable => &mut last,
    };
    let Some(cur) = snaps.get(&ver).cloned() else {
        return Err(Error::Usage(format!(
            "no {} snapshot of ROCm {ver} to re-cut ({} has: {})",
            req.channel.dir(),
            req.channel.dir(),
            if snaps.is_empty() {
                "none".to_string()
            } else {
                snaps.keys().cloned().collect::<Vec<_>>().join(", ")
            }
        )));
    };
    let whose = format!("of the {} snapshot", req.channel.dir());
    check_whole(&cur, &whose, "refusing to re-cut an incomplete snapshot")?;
    let abi_inputs = recut_abi_inputs(&cur.meta.abi_inputs, &req.abi_base, &req.abi_inputs)?;
    let (sha256, _) = hash::sha256_file(&req.artifact)?;
    if sha256 == cur.meta.sha256 && abi_inputs == cur.meta.abi_inputs {
        return Ok(RecutOutcome {
            old: cur.meta.clone(),
            meta: cur.meta,
            put: None,
            archived: Vec::new(),
            checksums: checksums_path,
            recovered,
        });
    }
    let now = now_utc()?;
    let put = store.put_file(&req.artifact)?;
    let meta = Metadata {
        created: now.format("%Y-%m-%d %H:%M:%S").to_string(),
        version: ver.clone(),
        sha1: Some(put.digest.sha1.clone()),
        sha256: put.digest.sha256.clone(),
        artifact: Some(Artifact {
            name: cur.meta.artifact_name().to_string(),
            size: put.digest.size,
            store_key: put.key.clone(),
        }),
        headers: cur.meta.headers.clone(),
        commits: cur.meta.commits.clone(),
        abi_inputs,
    };
    let mut plan = Plan::new("recut", &ver, &now);
    let stamp = archive_stamp(repo, &ver, &now)?;
    let old_meta = cur.dir.join("metadata.txt");
    // The name every archived metadata file has (gc and verify read them).
    let archived = vec![format!("archives/{ver}/{stamp}_metadata.txt")];
    plan.installs
        .push((Source::File(old_meta.clone()), archived[0].clone()));
    plan.installs.push((
        Source::Bytes(meta.render().into_bytes()),
        rel(&repo.root, &old_meta),
    ));
    snaps.insert(
        ver.clone(),
        Snapshot {
            meta: meta.clone(),
            ..cur.clone()
        },
    );
    let text = checksums::generate(&prefix, &channels_of(&stable, &last))?;
    plan.installs.push((
        Source::Bytes(text.into_bytes()),
        checksums_dest(repo, &checksums_path),
    ));
    if let Some(conf) = repo.config_update(None, req.checksums.as_deref(), req.prefix.as_deref()) {
        plan.installs.push((
            Source::Bytes(conf.into_bytes()),
            crate::repo::CONFIG_FILE.to_string(),
        ));
    }
    plan.run(repo)?;
    Ok(RecutOutcome {
        old: cur.meta,
        meta,
        put: Some(put),
        archived,
        checksums: checksums_path,
        recovered,
    })
}
