//! The `snapctl` commands on top of [`crate::txn`], [`crate::repo`] and
//! [`crate::store`]: what each command reads, prints and exits with. The
//! binary only parses arguments (clap) and maps errors to exit codes.
//!
//! Every function writes its report to `out` (stdout for the binary), notes
//! to stderr, and returns the exit code of a run that did not fail: 0 ok, 1 a
//! check failed (`check`, `verify`). Errors carry their own exit code
//! ([`Error::exit_code`]).

use crate::checksums;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::hash;
use crate::metadata::{validate_version, Metadata, MAX_HEADER_BYTES};
use crate::repo::{Channel, Repo, RepoLock};
use crate::store::{BlobState, Store};
use crate::txn::{self, CreateOutcome, CreateRequest, Recovery};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The snapshots root and how long to wait for its lock.
#[derive(Clone, Debug)]
pub struct RootOpts {
    pub root: PathBuf,
    /// `None`: wait forever.
    pub lock_timeout: Option<Duration>,
}

/// Output sink of the commands.
pub type Out<'a> = &'a mut dyn Write;

macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err(|e| Error::io("<stdout>", e))?
    };
}

fn json_text(v: &serde_json::Value) -> Result<String> {
    serde_json::to_string_pretty(v).map_err(|e| Error::Usage(format!("JSON output: {e}")))
}

fn note_recovery(r: &Recovery) {
    if *r != Recovery::Nothing {
        eprintln!("snapctl: recovery: {r}");
    }
}

/// For read-only commands: recover first when a committed transaction is
/// pending, else hold a shared lock if one exists.
fn open_for_read(root: &RootOpts) -> Result<(Repo, Option<RepoLock>)> {
    let repo = Repo::open(&root.root)?;
    // Only a committed-but-unapplied transaction changes what readers see;
    // uncommitted staging leftovers are ignored (the tree may be read-only).
    if txn::journal_pending(&repo) {
        let rec = txn::recover(&repo, root.lock_timeout).map_err(|e| {
            Error::Usage(format!(
                "{}: an interrupted snapctl transaction must be completed before reading, and it could not be: {e} (run `snapctl recover --snapshots-root {}` with write access)",
                repo.root.display(),
                repo.root.display()
            ))
        })?;
        note_recovery(&rec);
    }
    let lock = repo.lock(false, root.lock_timeout)?;
    Ok((repo, lock))
}

/// Parses `--commit NAME=HASH` values.
pub fn parse_commits(v: &[String]) -> Result<Vec<(String, String)>> {
    v.iter()
        .map(|c| {
            c.split_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| Error::Usage(format!("--commit {c:?}: expected NAME=HASH")))
        })
        .collect()
}

/// Arguments of [`create`].
#[derive(Clone, Debug)]
pub struct CreateArgs {
    pub store: Option<String>,
    pub version: String,
    pub artifact: PathBuf,
    pub headers: Vec<PathBuf>,
    /// `NAME=HASH` as given.
    pub commits: Vec<String>,
    pub checksums: Option<PathBuf>,
    pub prefix: Option<String>,
    /// `--abi-input` files and `--abi-base` (default: the working directory).
    pub abi_inputs: Vec<PathBuf>,
    pub abi_base: Option<PathBuf>,
}

/// `snapctl create`.
pub fn create(root: &RootOpts, a: CreateArgs, out: Out<'_>) -> Result<u8> {
    let repo = Repo::open_for_create(&root.root)?;
    let fresh = std::fs::symlink_metadata(&root.root).is_err();
    let st = repo.store(a.store.as_deref())?;
    let req = CreateRequest {
        version: a.version,
        artifact: a.artifact,
        headers: a.headers,
        commits: parse_commits(&a.commits)?,
        checksums: a.checksums,
        prefix: a.prefix,
        lock_timeout: root.lock_timeout,
        store_url: a.store,
        abi_inputs: crate::abi::resolve_inputs(&a.abi_inputs, a.abi_base.as_deref())?,
    };
    let outcome = txn::create(&repo, &st, &req)?;
    if fresh {
        eprintln!(
            "snapctl: created the snapshots root {}",
            root.root.display()
        );
    }
    match outcome {
        CreateOutcome::AlreadyStable { meta, recovered } => {
            note_recovery(&recovered);
            say!(
                out,
                "stable/{} already is this snapshot (sha256 {}); nothing to do",
                meta.version,
                meta.sha256
            );
        }
        CreateOutcome::Created {
            meta,
            put,
            archived,
            checksums: cpath,
            recovered,
        } => {
            note_recovery(&recovered);
            say!(
                out,
                "{} {} ({} bytes) in {}",
                if put.already_present {
                    "reused"
                } else {
                    "uploaded"
                },
                put.key,
                put.digest.size,
                st.describe(),
            );
            for a in &archived {
                say!(out, "archived {a}");
            }
            say!(
                out,
                "stable/{} <- sha256 {} ({})",
                meta.version,
                meta.sha256,
                meta.created
            );
            say!(out, "wrote {}", cpath.display());
        }
    }
    Ok(0)
}

/// `snapctl create --kind source`: cuts `req` into the root (made when
/// missing; its parent must exist) and prints what changed.
pub fn create_source(
    root: &RootOpts,
    req: &crate::source::SourceCreate,
    out: Out<'_>,
) -> Result<u8> {
    fsutil::create_dir_all_durable(&root.root)?;
    let repo = Repo::open(&root.root)?;
    let o = crate::source::create(&repo, req)?;
    crate::source::report(&o, out)?;
    Ok(0)
}

/// `snapctl check`, either kind of root: a source root (no `checksums`
/// given) has its trees checked (and, with `git_repo`, its recorded
/// commits re-cut); a prebuilt root has its checksums file compared with
/// the one its metadata generates (`checksums`, default from snapctl.conf).
pub fn check_any(
    root: &RootOpts,
    checksums: Option<&Path>,
    prefix: Option<&str>,
    git_repo: Option<&Path>,
    out: Out<'_>,
) -> Result<u8> {
    if checksums.is_none() && crate::source::is_source_root(&root.root) {
        return crate::source::check(&root.root, git_repo, root.lock_timeout, out);
    }
    if let Some(g) = git_repo {
        return Err(Error::Usage(format!(
            "--repo {}: only source snapshot roots are re-cut from a repository; {} is a prebuilt root",
            g.display(),
            root.root.display()
        )));
    }
    let file = match checksums {
        Some(f) => f.to_path_buf(),
        None => Repo::open(&root.root)?.checksums_path(None),
    };
    check(root, &file, prefix, out)
}

/// `snapctl status`, either kind of root.
pub fn status_any(root: &RootOpts, as_json: bool, out: Out<'_>) -> Result<u8> {
    if crate::source::is_source_root(&root.root) {
        return crate::source::status(&root.root, as_json, out);
    }
    status(root, as_json, out)
}

/// Arguments of [`recut`].
#[derive(Clone, Debug)]
pub struct RecutArgs {
    pub store: Option<String>,
    /// `stable`, `last-stable` or `last_stable`.
    pub channel: String,
    pub version: String,
    pub artifact: PathBuf,
    /// `--abi-input` values: `FILE` (recorded relative to `abi_base`) or `PATH=FILE`.
    pub abi_inputs: Vec<PathBuf>,
    /// Where the recorded ABI inputs are now (default: the working directory).
    pub abi_base: Option<PathBuf>,
    pub checksums: Option<PathBuf>,
    pub prefix: Option<String>,
}

/// `snapctl recut`: a snapshot of any channel gets a rebuilt archive and
/// fresh ABI-input digests, keeping its headers and commits.
pub fn recut(root: &RootOpts, a: RecutArgs, out: Out<'_>) -> Result<u8> {
    let repo = Repo::open(&root.root)?;
    let st = repo.store(a.store.as_deref())?;
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let abi_base = a.abi_base.as_ref().map_or(cwd.clone(), |b| cwd.join(b));
    let req = txn::RecutRequest {
        channel: Channel::parse(&a.channel)?,
        version: a.version,
        artifact: a.artifact,
        abi_inputs: crate::abi::resolve_inputs(&a.abi_inputs, Some(&abi_base))?,
        abi_base,
        checksums: a.checksums,
        prefix: a.prefix,
        lock_timeout: root.lock_timeout,
    };
    let o = txn::recut(&repo, &st, &req)?;
    note_recovery(&o.recovered);
    let dir = format!("{}/{}", req.channel.dir(), o.meta.version);
    let Some(put) = o.put else {
        say!(
            out,
            "{dir} already has this archive (sha256 {}) and these ABI inputs; nothing to do",
            o.meta.sha256
        );
        return Ok(0);
    };
    say!(
        out,
        "{} {} ({} bytes) in {}",
        if put.already_present {
            "reused"
        } else {
            "uploaded"
        },
        put.key,
        put.digest.size,
        st.describe(),
    );
    for a in &o.archived {
        say!(out, "archived {a}");
    }
    say!(
        out,
        "{dir} <- sha256 {} ({}), was {}; kept {} header(s), {} commit(s)",
        o.meta.sha256,
        o.meta.created,
        o.old.sha256,
        o.meta.headers.len(),
        o.meta.commits.len()
    );
    for (p, d) in &o.meta.abi_inputs {
        let was =
            o.old
                .abi_inputs
                .get(p)
                .map_or("new", |w| if w == d { "unchanged" } else { "changed" });
        say!(out, "  ABI input {p}: {d} ({was})");
    }
    say!(out, "wrote {}", o.checksums.display());
    Ok(0)
}

/// `snapctl rollback`.
pub fn rollback(
    root: &RootOpts,
    version: &str,
    checksums: Option<&Path>,
    prefix: Option<&str>,
    out: Out<'_>,
) -> Result<u8> {
    let repo = Repo::open(&root.root)?;
    let res = txn::rollback(&repo, version, checksums, prefix, root.lock_timeout)?;
    note_recovery(&res.recovered);
    for a in &res.archived {
        say!(out, "archived {a}");
    }
    say!(
        out,
        "stable/{version} <- sha256 {} ({})",
        res.restored.sha256,
        res.restored.created
    );
    say!(out, "wrote {}", res.checksums.display());
    Ok(0)
}

/// `snapctl gen-checksums` (`output` `-` = `out`).
pub fn gen_checksums(
    root: &RootOpts,
    output: &Path,
    prefix: Option<&str>,
    out: Out<'_>,
) -> Result<u8> {
    let (repo, _l) = open_for_read(root)?;
    let text = txn::generate_checksums(&repo, &repo.checked_prefix(prefix)?)?;
    if output == Path::new("-") {
        write!(out, "{text}").map_err(|e| Error::io("<stdout>", e))?;
    } else {
        fsutil::atomic_write(output, text.as_bytes(), "checksums file")?;
    }
    Ok(0)
}

/// `snapctl check`: 1 with a unified diff on `out` when `file` is stale.
pub fn check(root: &RootOpts, file: &Path, prefix: Option<&str>, out: Out<'_>) -> Result<u8> {
    let (repo, _l) = open_for_read(root)?;
    let want = txn::generate_checksums(&repo, &repo.checked_prefix(prefix)?)?;
    let have = if file.exists() || file.is_symlink() {
        let b = fsutil::read_bounded(file, 16 << 20)?;
        String::from_utf8_lossy(&b).into_owned()
    } else {
        String::new()
    };
    if have == want {
        eprintln!("{} is up to date", file.display());
        return Ok(0);
    }
    let name = file.display().to_string();
    write!(
        out,
        "{}",
        checksums::unified_diff(&name, &have, &format!("{name} (expected)"), &want)
    )
    .map_err(|e| Error::io("<stdout>", e))?;
    eprintln!(
        "snapctl: {name} is stale; regenerate it with: snapctl gen-checksums --snapshots-root {} --output {name}",
        root.root.display()
    );
    Ok(1)
}

/// `snapctl fetch`.
pub fn fetch(
    root: &RootOpts,
    store: Option<&str>,
    channel: &str,
    version: &str,
    output: &Path,
    out: Out<'_>,
) -> Result<u8> {
    let (repo, _l) = open_for_read(root)?;
    let ch = Channel::parse(channel)?;
    validate_version(version).map_err(Error::Usage)?;
    let snaps = repo.read_channel(ch)?;
    let Some(s) = snaps.get(version) else {
        let have: Vec<&str> = snaps.keys().map(String::as_str).collect();
        return Err(Error::Usage(format!(
            "no {} snapshot of ROCm {version} in {} (it has: {}); create one with: snapctl create --snapshots-root {} --version {version} --artifact FILE",
            ch.dir(),
            repo.root.display(),
            if have.is_empty() { "none".into() } else { have.join(", ") },
            repo.root.display()
        )));
    };
    let st = repo.store(store)?;
    let n = st.fetch(
        &s.meta.sha256,
        output,
        s.meta.artifact.as_ref().map(|a| a.size),
    )?;
    say!(
        out,
        "{} {} ({n} bytes) -> {}",
        s.meta.store_key(),
        ch.dir(),
        output.display()
    );
    Ok(0)
}

/// `snapctl gc --dry-run`: lists unreferenced objects and upload leftovers.
pub fn gc(root: &RootOpts, store: Option<&str>, dry_run: bool, out: Out<'_>) -> Result<u8> {
    if !dry_run {
        return Err(Error::Usage(
            "gc only reports (pass --dry-run); delete the listed blobs with your store's tools"
                .into(),
        ));
    }
    let (repo, _l) = open_for_read(root)?;
    let st = repo.store(store)?;
    let mut referenced = BTreeSet::new();
    for ch in Channel::ALL {
        for s in repo.read_channel(ch)?.values() {
            referenced.insert(s.meta.store_key());
        }
    }
    for (_, _, md) in repo.read_archives()? {
        referenced.insert(md.store_key());
    }
    let (mut n, mut bytes) = (0u64, 0u64);
    for b in st.list()? {
        if b.is_temp || !referenced.contains(&b.key) {
            say!(
                out,
                "would delete {} ({} bytes){}",
                b.key,
                b.size,
                if b.is_temp {
                    " [leftover of an interrupted upload]"
                } else {
                    ""
                }
            );
            n += 1;
            bytes = bytes.saturating_add(b.size);
        }
    }
    eprintln!(
        "gc --dry-run: {n} unreferenced object(s), {bytes} bytes; {} referenced",
        referenced.len()
    );
    Ok(0)
}

fn short(s: &str) -> &str {
    s.get(..12).unwrap_or(s)
}

fn status_json(ch: Channel, ver: &str, m: &Metadata) -> serde_json::Value {
    json!({
        "channel": ch.key(),
        "version": ver,
        "sha256": m.sha256,
        "sha1": m.sha1,
        "size": m.artifact.as_ref().map(|a| a.size),
        "file": m.artifact_name(),
        "store_key": m.store_key(),
        "created": m.created,
        "commits": m.commits.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "headers": m.headers,
    })
}

/// `snapctl status`: channel × version table (or JSON).
pub fn status(root: &RootOpts, as_json: bool, out: Out<'_>) -> Result<u8> {
    let (repo, _l) = open_for_read(root)?;
    let mut rows = Vec::new();
    for ch in Channel::ALL {
        for (ver, s) in repo.read_channel(ch)? {
            rows.push((ch, ver, s.meta));
        }
    }
    if as_json {
        let v: Vec<_> = rows
            .iter()
            .map(|(ch, ver, m)| status_json(*ch, ver, m))
            .collect();
        say!(out, "{}", json_text(&serde_json::Value::Array(v))?);
    } else {
        say!(
            out,
            "{:<12} {:<8} {:<16} {:>12} {:<20} COMMITS",
            "CHANNEL",
            "VERSION",
            "SHA256",
            "SIZE",
            "CREATED (UTC)"
        );
        for (ch, ver, m) in &rows {
            let commits: Vec<String> = m
                .commits
                .iter()
                .map(|(k, v)| format!("{k}={}", short(v)))
                .collect();
            say!(
                out,
                "{:<12} {:<8} {:<16} {:>12} {:<20} {}",
                ch.dir(),
                ver,
                short(&m.sha256),
                m.artifact
                    .as_ref()
                    .map_or("?".to_string(), |a| a.size.to_string()),
                m.created,
                commits.join(" ")
            );
        }
    }
    Ok(0)
}

/// `snapctl recover`.
pub fn recover(root: &RootOpts, out: Out<'_>) -> Result<u8> {
    let repo = Repo::open(&root.root)?;
    let r = txn::recover(&repo, root.lock_timeout)?;
    say!(out, "{r}");
    Ok(0)
}

/// `snapctl verify`: every referenced blob (and every header of stable and
/// last-stable) checked; every problem reported, exit 1 when there is one.
pub fn verify(
    root: &RootOpts,
    store: Option<&str>,
    all: bool,
    as_json: bool,
    out: Out<'_>,
) -> Result<u8> {
    let (repo, _l) = open_for_read(root)?;
    let st = repo.store(store)?;
    verify_repo(&repo, &st, all, as_json, out)
}

fn blob_problems(st: &Store, m: &Metadata) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    match st.check(&m.sha256, m.artifact.as_ref().map(|a| a.size))? {
        BlobState::Ok { size } => {
            if let Some(a) = &m.artifact {
                if a.size != size {
                    problems.push(format!(
                        "blob {} has {size} bytes, metadata says {}",
                        m.store_key(),
                        a.size
                    ));
                }
            }
        }
        BlobState::Missing => problems.push(format!(
            "blob {} missing from {}: expected sha256 {}, actual: missing",
            m.store_key(),
            st.describe(),
            m.sha256
        )),
        BlobState::Corrupt { actual_sha256, .. } => problems.push(format!(
            "blob {} corrupt in {}: expected sha256 {}, actual sha256 {actual_sha256}",
            m.store_key(),
            st.describe(),
            m.sha256
        )),
        BlobState::Oversize { expected, seen } => problems.push(format!(
            "blob {} in {} has at least {seen} bytes, metadata says {expected} (not read further)",
            m.store_key(),
            st.describe(),
        )),
        BlobState::Unreadable(why) => problems.push(format!(
            "blob {} unreadable in {}: {why}",
            m.store_key(),
            st.describe(),
        )),
    }
    Ok(problems)
}

fn header_problems(dir: &Path, m: &Metadata) -> Vec<String> {
    let mut problems = Vec::new();
    for (h, want) in &m.headers {
        let p = dir.join(h);
        match hash::sha256_file_limited(&p, Some(MAX_HEADER_BYTES)) {
            Ok(Ok((got, _))) if &got == want => {}
            Ok(Ok((got, _))) => problems.push(format!(
                "header {h}: expected sha256 {want}, actual sha256 {got}"
            )),
            Ok(Err(_)) => problems.push(format!(
                "header {h}: larger than {MAX_HEADER_BYTES} bytes (not read further)"
            )),
            Err(e) if p.symlink_metadata().is_err() => problems.push(format!(
                "header {h}: expected sha256 {want}, actual: missing ({e})"
            )),
            Err(e) => problems.push(format!("header {h}: {e}")),
        }
    }
    problems
}

/// [`verify`] on an opened repo and store.
pub fn verify_repo(repo: &Repo, st: &Store, all: bool, as_json: bool, out: Out<'_>) -> Result<u8> {
    let mut items: Vec<(String, String, Metadata, Option<PathBuf>)> = Vec::new();
    for ch in Channel::ALL {
        for (ver, s) in repo.read_channel(ch)? {
            items.push((ver, ch.dir().to_string(), s.meta, Some(s.dir)));
        }
    }
    if all {
        for (ver, file, md) in repo.read_archives()? {
            items.push((ver, format!("archives/{file}"), md, None));
        }
    }
    let mut bad = Vec::new();
    let mut ok = 0usize;
    for (ver, ch, m, dir) in &items {
        // Every snapshot is checked and every problem reported: an
        // unreadable or endless blob is one problem, not the end of verify.
        let mut problems = blob_problems(st, m)?;
        if let Some(d) = dir {
            problems.extend(header_problems(d, m));
        }
        if problems.is_empty() {
            ok += 1;
        }
        for p in problems {
            bad.push((ver.clone(), ch.clone(), p));
        }
    }
    if as_json {
        let v: Vec<_> = bad
            .iter()
            .map(|(ver, ch, p)| json!({"version": ver, "channel": ch, "problem": p}))
            .collect();
        say!(out, "{}", json_text(&json!({"ok": ok, "bad": v}))?);
    } else {
        for (ver, ch, p) in &bad {
            say!(out, "BAD {ver} {ch}: {p}");
        }
    }
    eprintln!("verify: {ok} snapshot(s) ok, {} problem(s)", bad.len());
    Ok(if bad.is_empty() { 0 } else { 1 })
}
