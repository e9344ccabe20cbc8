//! `snapctl`: prebuilt snapshots with a content-addressed store, crash-safe rotation
//! and a generated `stable_checksums.bzl`. Contract: design §3.2; reference: docs/cli/snapctl.md.
//!
//! Exit codes: 0 ok, 1 a check failed (verify, check, fetch digest mismatch), 2 usage or input error.

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use rocpack_snapshot::checksums;
use rocpack_snapshot::fsutil;
use rocpack_snapshot::metadata::Metadata;
use rocpack_snapshot::repo::{Channel, Repo};
use rocpack_snapshot::store::{BlobState, Store};
use rocpack_snapshot::txn::{self, CreateOutcome, CreateRequest, Recovery};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "snapctl",
    version,
    about = "Prebuilt snapshots: content-addressed store, crash-safe rotation, stable_checksums.bzl"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct Root {
    /// The snapshots root (holds stable/, last-stable/, archives/, snapctl.conf).
    #[arg(long, value_name = "DIR")]
    snapshots_root: PathBuf,
    /// Seconds to wait for the root's lock before failing (default: wait forever).
    #[arg(long, value_name = "SECS")]
    lock_timeout: Option<u64>,
}

impl Root {
    fn timeout(&self) -> Option<Duration> {
        self.lock_timeout.map(Duration::from_secs)
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Upload an artifact and rotate: last-stable → archives, stable → last-stable, new → stable.
    Create {
        #[command(flatten)]
        root: Root,
        /// Store URL: path, file://, s3://bucket/prefix (default: snapctl.conf, else <root>/store).
        #[arg(long)]
        store: Option<String>,
        /// ROCm version, e.g. 6.4.
        #[arg(long)]
        version: String,
        /// The prebuilt artifact (e.g. librcclx-dev.a).
        #[arg(long)]
        artifact: PathBuf,
        /// Header to snapshot beside metadata.txt (repeatable).
        #[arg(long = "header", value_name = "FILE")]
        headers: Vec<PathBuf>,
        /// Provenance, NAME=HASH (repeatable), e.g. rcclx=3a4e8509….
        #[arg(long = "commit", value_name = "NAME=HASH")]
        commits: Vec<String>,
        /// Checksums file to regenerate (default: snapctl.conf, else <root>/stable_checksums.bzl).
        #[arg(long)]
        checksums: Option<PathBuf>,
        /// Dict-name prefix of the checksums file (default: snapctl.conf, else RCCLX).
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Swap last-stable back into stable for one version (old stable → archives).
    Rollback {
        #[command(flatten)]
        root: Root,
        #[arg(long)]
        version: String,
        #[arg(long)]
        checksums: Option<PathBuf>,
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Write stable_checksums.bzl from the metadata files (`-` = stdout).
    GenChecksums {
        #[command(flatten)]
        root: Root,
        #[arg(long, short = 'o')]
        output: PathBuf,
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Exit 1 with a unified diff when the checked-in checksums file is stale.
    Check {
        #[command(flatten)]
        root: Root,
        #[arg(long)]
        checksums: PathBuf,
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Check that every referenced blob is in the store and matches its digest.
    Verify {
        #[command(flatten)]
        root: Root,
        #[arg(long)]
        store: Option<String>,
        /// Also verify the blobs of archived snapshots.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Download a snapshot's artifact, refusing content that does not match its digest.
    Fetch {
        #[command(flatten)]
        root: Root,
        #[arg(long)]
        store: Option<String>,
        /// stable or last-stable.
        #[arg(long, default_value = "stable")]
        channel: String,
        #[arg(long)]
        version: String,
        #[arg(long, short = 'o')]
        output: PathBuf,
    },
    /// List blobs no metadata (stable, last-stable, archives) references.
    Gc {
        #[command(flatten)]
        root: Root,
        #[arg(long)]
        store: Option<String>,
        /// Only report (required: deletion is left to the operator).
        #[arg(long)]
        dry_run: bool,
    },
    /// Table of channel × version: digest, size, created, commits.
    Status {
        #[command(flatten)]
        root: Root,
        #[arg(long)]
        json: bool,
    },
    /// Complete or roll back an interrupted rotation (also done automatically).
    Recover {
        #[command(flatten)]
        root: Root,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = e
                .downcast_ref::<rocpack_snapshot::Error>()
                .map_or(2, rocpack_snapshot::Error::exit_code);
            eprintln!("snapctl: error: {}", error_line(&e));
            ExitCode::from(u8::try_from(code).unwrap_or(2))
        }
    }
}

fn note_recovery(r: &Recovery) {
    if *r != Recovery::Nothing {
        eprintln!("snapctl: recovery: {r}");
    }
}

/// For read-only commands: recover first when needed, else hold a shared lock if one exists.
fn open_for_read(root: &Root) -> Result<(Repo, Option<rocpack_snapshot::repo::RepoLock>)> {
    let repo = Repo::open(&root.snapshots_root)?;
    // Only a committed-but-unapplied transaction changes what readers see;
    // uncommitted staging leftovers are ignored (the tree may be read-only).
    if txn::journal_pending(&repo) {
        let rec = txn::recover(&repo, root.timeout()).map_err(|e| {
            anyhow::anyhow!(
                "{}: an interrupted snapctl transaction must be completed before reading, and it could not be: {e} (run `snapctl recover --snapshots-root {}` with write access)",
                repo.root.display(),
                repo.root.display()
            )
        })?;
        note_recovery(&rec);
    }
    let lock = repo.lock(false, root.timeout())?;
    Ok((repo, lock))
}

fn parse_commits(v: &[String]) -> Result<Vec<(String, String)>> {
    v.iter()
        .map(|c| {
            c.split_once('=')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| {
                    rocpack_snapshot::Error::Usage(format!("--commit {c:?}: expected NAME=HASH"))
                        .into()
                })
        })
        .collect()
}

fn run(cli: Cli) -> Result<u8> {
    match cli.cmd {
        Cmd::Create {
            root,
            store,
            version,
            artifact,
            headers,
            commits,
            checksums,
            prefix,
        } => {
            let repo = Repo::open(&root.snapshots_root)?;
            let st = repo.store(store.as_deref())?;
            let req = CreateRequest {
                version,
                artifact,
                headers,
                commits: parse_commits(&commits)?,
                checksums: checksums.clone(),
                prefix,
                lock_timeout: root.timeout(),
                store_url: store.clone(),
            };
            match txn::create(&repo, &st, &req)? {
                CreateOutcome::AlreadyStable { meta, recovered } => {
                    note_recovery(&recovered);
                    println!(
                        "stable/{} already is this snapshot (sha256 {}); nothing to do",
                        meta.version, meta.sha256
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
                    println!(
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
                        println!("archived {a}");
                    }
                    println!(
                        "stable/{} <- sha256 {} ({})",
                        meta.version, meta.sha256, meta.created
                    );
                    println!("wrote {}", cpath.display());
                }
            }
            Ok(0)
        }
        Cmd::Rollback {
            root,
            version,
            checksums,
            prefix,
        } => {
            let repo = Repo::open(&root.snapshots_root)?;
            let out = txn::rollback(
                &repo,
                &version,
                checksums.as_deref(),
                prefix.as_deref(),
                root.timeout(),
            )?;
            note_recovery(&out.recovered);
            for a in &out.archived {
                println!("archived {a}");
            }
            println!(
                "stable/{version} <- sha256 {} ({})",
                out.restored.sha256, out.restored.created
            );
            println!("wrote {}", out.checksums.display());
            Ok(0)
        }
        Cmd::GenChecksums {
            root,
            output,
            prefix,
        } => {
            let (repo, _l) = open_for_read(&root)?;
            let text = txn::generate_checksums(&repo, &repo.checked_prefix(prefix.as_deref())?)?;
            if output == Path::new("-") {
                print!("{text}");
            } else {
                fsutil::atomic_write(&output, text.as_bytes(), "checksums file")?;
            }
            Ok(0)
        }
        Cmd::Check {
            root,
            checksums: file,
            prefix,
        } => {
            let (repo, _l) = open_for_read(&root)?;
            let want = txn::generate_checksums(&repo, &repo.checked_prefix(prefix.as_deref())?)?;
            let have = if file.exists() || file.is_symlink() {
                let b = rocpack_snapshot::fsutil::read_bounded(&file, 16 << 20)?;
                String::from_utf8_lossy(&b).into_owned()
            } else {
                String::new()
            };
            if have == want {
                eprintln!("{} is up to date", file.display());
                return Ok(0);
            }
            let name = file.display().to_string();
            print!(
                "{}",
                checksums::unified_diff(&name, &have, &format!("{name} (expected)"), &want)
            );
            eprintln!(
                "snapctl: {name} is stale; regenerate it with: snapctl gen-checksums --snapshots-root {} --output {name}",
                root.snapshots_root.display()
            );
            Ok(1)
        }
        Cmd::Verify {
            root,
            store,
            all,
            json,
        } => {
            let (repo, _l) = open_for_read(&root)?;
            let st = repo.store(store.as_deref())?;
            verify(&repo, &st, all, json)
        }
        Cmd::Fetch {
            root,
            store,
            channel,
            version,
            output,
        } => {
            let (repo, _l) = open_for_read(&root)?;
            let ch = Channel::parse(&channel)?;
            rocpack_snapshot::metadata::validate_version(&version)
                .map_err(rocpack_snapshot::Error::Usage)?;
            let snaps = repo.read_channel(ch)?;
            let Some(s) = snaps.get(&version) else {
                let have: Vec<&str> = snaps.keys().map(String::as_str).collect();
                return Err(rocpack_snapshot::Error::Usage(format!(
                    "no {} snapshot of ROCm {version} in {} (it has: {}); create one with: snapctl create --snapshots-root {} --version {version} --artifact FILE",
                    ch.dir(),
                    repo.root.display(),
                    if have.is_empty() { "none".into() } else { have.join(", ") },
                    repo.root.display()
                ))
                .into());
            };
            let st = repo.store(store.as_deref())?;
            let n = st.fetch(
                &s.meta.sha256,
                &output,
                s.meta.artifact.as_ref().map(|a| a.size),
            )?;
            println!(
                "{} {} ({n} bytes) -> {}",
                s.meta.store_key(),
                ch.dir(),
                output.display()
            );
            Ok(0)
        }
        Cmd::Gc {
            root,
            store,
            dry_run,
        } => {
            if !dry_run {
                return Err(rocpack_snapshot::Error::Usage(
                    "gc only reports (pass --dry-run); delete the listed blobs with your store's tools".into(),
                )
                .into());
            }
            let (repo, _l) = open_for_read(&root)?;
            let st = repo.store(store.as_deref())?;
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
                    println!(
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
        Cmd::Status { root, json } => {
            let (repo, _l) = open_for_read(&root)?;
            let mut rows = Vec::new();
            for ch in Channel::ALL {
                for (ver, s) in repo.read_channel(ch)? {
                    rows.push((ch, ver, s.meta));
                }
            }
            if json {
                let v: Vec<_> = rows
                    .iter()
                    .map(|(ch, ver, m)| status_json(*ch, ver, m))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!(
                    "{:<12} {:<8} {:<16} {:>12} {:<20} COMMITS",
                    "CHANNEL", "VERSION", "SHA256", "SIZE", "CREATED (UTC)"
                );
                for (ch, ver, m) in &rows {
                    let commits: Vec<String> = m
                        .commits
                        .iter()
                        .map(|(k, v)| format!("{k}={}", short(v)))
                        .collect();
                    println!(
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
        Cmd::Recover { root } => {
            let repo = Repo::open(&root.snapshots_root)?;
            let r = txn::recover(&repo, root.timeout())?;
            println!("{r}");
            Ok(0)
        }
    }
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

use rocpack_snapshot::metadata::MAX_HEADER_BYTES;

fn verify(repo: &Repo, st: &Store, all: bool, as_json: bool) -> Result<u8> {
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
        let mut problems = Vec::new();
        // Every snapshot is checked and every problem reported: an
        // unreadable or endless blob is one problem, not the end of verify.
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
        if let Some(d) = dir {
            for (h, want) in &m.headers {
                let p = d.join(h);
                match rocpack_snapshot::hash::sha256_file_limited(&p, Some(MAX_HEADER_BYTES)) {
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
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"ok": ok, "bad": v}))?
        );
    } else {
        for (ver, ch, p) in &bad {
            println!("BAD {ver} {ch}: {p}");
        }
    }
    eprintln!("verify: {ok} snapshot(s) ok, {} problem(s)", bad.len());
    Ok(if bad.is_empty() { 0 } else { 1 })
}

/// The error and its causes on one line, each cause only once: error types
/// that already print their source (`{path}: {source}`) would otherwise
/// repeat the OS message.
fn error_line(err: &anyhow::Error) -> String {
    let mut line = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !line.contains(&c) {
            line.push_str(": ");
            line.push_str(&c);
        }
    }
    line
}
