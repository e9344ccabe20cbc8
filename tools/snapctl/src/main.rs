//! `snapctl`: prebuilt snapshots with a content-addressed store, crash-safe rotation
//! and a generated `stable_checksums.bzl`. Contract: design §3.2; reference: docs/cli/snapctl.md.
//!
//! Exit codes: 0 ok, 1 a check failed (verify, check, fetch digest mismatch), 2 usage or input error.

//! Argument parsing only: each command is a function of
//! `rocpack_snapshot::ops`, which prints its report to stdout.

use clap::{Args, Parser, Subcommand};
use rocpack_snapshot::ops::{self, CreateArgs, RootOpts};
use rocpack_snapshot::repo::{Channel, Repo};
use rocpack_snapshot::source;
use std::io::Write;
use std::path::PathBuf;
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
    fn opts(&self) -> RootOpts {
        RootOpts {
            root: self.snapshots_root.clone(),
            lock_timeout: self.lock_timeout.map(Duration::from_secs),
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Prebuilt: upload an artifact and rotate last-stable → archives, stable → last-stable,
    /// new → stable. Source (`--kind source`): cut a subtree at a commit into a channel.
    Create {
        #[command(flatten)]
        root: Root,
        /// prebuilt (default) or source.
        #[arg(long, default_value = "prebuilt", value_parser = ["prebuilt", "source"])]
        kind: String,
        #[command(flatten)]
        source: Box<SourceArgs>,
        /// Store URL: path, file://, s3://bucket/prefix (default: snapctl.conf, else <root>/store).
        #[arg(long)]
        store: Option<String>,
        /// ROCm version, e.g. 6.4 (prebuilt).
        #[arg(long, required_if_eq("kind", "prebuilt"))]
        version: Option<String>,
        /// The prebuilt artifact (e.g. librcclx-dev.a).
        #[arg(long, required_if_eq("kind", "prebuilt"))]
        artifact: Option<PathBuf>,
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
        /// A header or library the artifact was compiled against (repeatable): its sha256
        /// is recorded, and `abi-check` (run by the rules) fails when it changes.
        #[arg(long = "abi-input", value_name = "FILE", num_args = 1..)]
        abi_inputs: Vec<PathBuf>,
        /// Directory ABI-input paths are recorded relative to (the workspace root; default: cwd).
        #[arg(long, value_name = "DIR")]
        abi_base: Option<PathBuf>,
    },
    /// Prebuilt: give one snapshot of any channel a rebuilt archive (e.g. after its
    /// dependencies changed), keeping its headers, commits and artifact name; its ABI
    /// inputs are hashed again under --abi-base. No rotation; the old metadata → archives.
    Recut {
        #[command(flatten)]
        root: Root,
        /// stable or last-stable.
        #[arg(long, default_value = "stable")]
        channel: String,
        #[arg(long)]
        version: String,
        /// The rebuilt archive (any file name: the snapshot's recorded name is kept).
        #[arg(long)]
        artifact: PathBuf,
        /// Store URL (default: snapctl.conf, else <root>/store).
        #[arg(long)]
        store: Option<String>,
        /// Directory the recorded ABI-input paths are relative to (the workspace root; default: cwd).
        #[arg(long, value_name = "DIR")]
        abi_base: Option<PathBuf>,
        /// An ABI input now, FILE (recorded relative to --abi-base) or PATH=FILE (repeatable;
        /// recorded paths not given are looked up under --abi-base).
        #[arg(long = "abi-input", value_name = "FILE", num_args = 1..)]
        abi_inputs: Vec<PathBuf>,
        #[arg(long)]
        checksums: Option<PathBuf>,
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
    /// Prebuilt: exit 1 with a unified diff when the checked-in checksums file is stale.
    /// Source: exit 1 when a tree differs from its recorded digest (or, with --repo, the
    /// recorded commit does not cut to the recorded tree).
    Check {
        #[command(flatten)]
        root: Root,
        /// Prebuilt roots: the checksums file (default: snapctl.conf, else <root>/stable_checksums.bzl).
        #[arg(long)]
        checksums: Option<PathBuf>,
        #[arg(long)]
        prefix: Option<String>,
        /// Source roots: also re-cut each source_commit from this repository and compare.
        #[arg(long, value_name = "DIR")]
        repo: Option<PathBuf>,
    },
    /// Prebuilt: fail (exit 1) naming every ABI input that differs from what the snapshot
    /// was compiled against (run by prebuilt_snapshot before the archive can be linked).
    AbiCheck(Box<AbiCheckArgs>),
    /// Source snapshots: last-stable ← copy of stable (stable untouched).
    Rotate {
        #[command(flatten)]
        root: Root,
        /// Delete the replaced last-stable instead of moving it to archives/.
        #[arg(long)]
        no_archive: bool,
    },
    /// Source snapshots: record the current tree of a channel as a deliberate patch.
    RecordPatch {
        #[command(flatten)]
        root: Root,
        #[arg(long, default_value = "stable")]
        channel: String,
        /// Who made the patch (e.g. an e-mail address).
        #[arg(long)]
        who: String,
        /// Why (one line; e.g. the upstream fix it backports).
        #[arg(long)]
        why: String,
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

// The arguments of `abi-check` (its help text is the variant's doc comment).
#[derive(Args)]
struct AbiCheckArgs {
    /// Recorded digest, PATH=SHA256 (repeatable; from the checksums file's abi_inputs).
    #[arg(long = "expect", value_name = "PATH=SHA256")]
    expect: Vec<String>,
    /// The file the build uses now for PATH, PATH=FILE (repeatable).
    #[arg(long = "input", value_name = "PATH=FILE")]
    inputs: Vec<String>,
    /// The same as two arguments, `--input-pair PATH FILE` (for build
    /// systems that pass FILE as its own argument, e.g. Buck2).
    #[arg(long = "input-pair", num_args = 2, value_names = ["PATH", "FILE"])]
    input_pairs: Vec<String>,
    /// The library's name, for the message (default: none, "the library").
    #[arg(long, default_value = "")]
    library: String,
    #[arg(long, default_value = "prebuilt")]
    channel: String,
    #[arg(long, default_value = "")]
    version: String,
    /// Command that re-cuts the snapshot (for the message).
    #[arg(long, default_value = "")]
    recut: String,
    /// What to rebuild before the re-cut (for the message).
    #[arg(long, default_value = "")]
    rebuild: String,
    /// Command going back to the previous snapshot (for the message; stable only).
    #[arg(long, default_value = "")]
    rollback: String,
    /// How to build from source instead (for the message).
    #[arg(long, default_value = "")]
    dev: String,
    /// Where the recovery is documented (for the message).
    #[arg(long, default_value = "")]
    docs: String,
    /// The snapshot's metadata.txt: the message names the commits it records.
    #[arg(long, value_name = "FILE")]
    metadata: Option<PathBuf>,
    /// Written when the check passes: the rules' action output.
    #[arg(long, value_name = "FILE")]
    stamp: Option<PathBuf>,
    /// Write the verdict ("OK …" or the drift message) to FILE and exit 0 either way
    /// (the rules' test of a channel the configuration does not select).
    #[arg(long, value_name = "FILE", conflicts_with = "stamp")]
    report: Option<PathBuf>,
}

/// `create --kind source` arguments.
#[derive(Args, Clone)]
struct SourceArgs {
    /// Git repository to cut from.
    #[arg(long, value_name = "DIR", required_if_eq("kind", "source"))]
    repo: Option<PathBuf>,
    /// Commit (any git revision) whose subtree becomes the snapshot.
    #[arg(long, required_if_eq("kind", "source"))]
    rev: Option<String>,
    /// Path of the subtree inside the repository (kept as-is under the channel dir).
    #[arg(long, required_if_eq("kind", "source"))]
    subtree: Option<String>,
    /// Only paths matching this glob (relative to the subtree; `**` allowed; repeatable).
    #[arg(long = "include", value_name = "GLOB")]
    include: Vec<String>,
    /// Leave out paths matching this glob (relative to the subtree; repeatable).
    #[arg(long = "exclude", value_name = "GLOB")]
    exclude: Vec<String>,
    /// Channel to cut into (source): stable (rotates stable → last-stable first) or last-stable.
    #[arg(long, default_value = "stable")]
    channel: String,
    /// Cut into stable without rotating it to last-stable first.
    #[arg(long)]
    no_rotate: bool,
    /// Delete replaced channel directories instead of moving them to archives/.
    #[arg(long)]
    no_archive: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `bazel run` starts a tool in its runfiles tree and names the directory the
    // user ran it from in BUILD_WORKING_DIRECTORY: relative paths mean what was typed.
    if let Some(d) = std::env::var_os("BUILD_WORKING_DIRECTORY").filter(|d| !d.is_empty()) {
        if let Err(e) = std::env::set_current_dir(&d) {
            eprintln!(
                "snapctl: error: BUILD_WORKING_DIRECTORY {}: {e}",
                std::path::Path::new(&d).display()
            );
            return ExitCode::from(2);
        }
    }
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("snapctl: error: {}", error_line(&e));
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        }
    }
}

fn run(cli: Cli) -> rocpack_snapshot::Result<u8> {
    let stdout = std::io::stdout();
    let out = &mut stdout.lock();
    match cli.cmd {
        Cmd::Create {
            root, kind, source, ..
        } if kind == "source" => create_source(&root, *source, out),
        Cmd::Create {
            root,
            store,
            version,
            artifact,
            headers,
            commits,
            checksums,
            prefix,
            abi_inputs,
            abi_base,
            ..
        } => ops::create(
            &root.opts(),
            CreateArgs {
                store,
                version: version.unwrap_or_default(),
                artifact: artifact.unwrap_or_default(),
                headers,
                commits,
                checksums,
                prefix,
                abi_inputs,
                abi_base,
            },
            out,
        ),
        Cmd::AbiCheck(args) => abi_check(*args),
        Cmd::Rollback {
            root,
            version,
            checksums,
            prefix,
        } => ops::rollback(
            &root.opts(),
            &version,
            checksums.as_deref(),
            prefix.as_deref(),
            out,
        ),
        Cmd::Recut {
            root,
            channel,
            version,
            artifact,
            store,
            abi_base,
            abi_inputs,
            checksums,
            prefix,
        } => ops::recut(
            &root.opts(),
            ops::RecutArgs {
                store,
                channel,
                version,
                artifact,
                abi_inputs,
                abi_base,
                checksums,
                prefix,
            },
            out,
        ),
        Cmd::GenChecksums {
            root,
            output,
            prefix,
        } => ops::gen_checksums(&root.opts(), &output, prefix.as_deref(), out),
        Cmd::Check {
            root,
            checksums,
            prefix,
            repo,
        } => ops::check_any(
            &root.opts(),
            checksums.as_deref(),
            prefix.as_deref(),
            repo.as_deref(),
            out,
        ),
        Cmd::Rotate { root, no_archive } => {
            let o = root.opts();
            let r = source::rotate(&Repo::open(&o.root)?, no_archive, o.lock_timeout)?;
            source::report(&r, out)?;
            Ok(0)
        }
        Cmd::RecordPatch {
            root,
            channel,
            who,
            why,
        } => record_patch(&root, &channel, &who, &why, out),
        Cmd::Verify {
            root,
            store,
            all,
            json,
        } => ops::verify(&root.opts(), store.as_deref(), all, json, out),
        Cmd::Fetch {
            root,
            store,
            channel,
            version,
            output,
        } => ops::fetch(
            &root.opts(),
            store.as_deref(),
            &channel,
            &version,
            &output,
            out,
        ),
        Cmd::Gc {
            root,
            store,
            dry_run,
        } => ops::gc(&root.opts(), store.as_deref(), dry_run, out),
        Cmd::Status { root, json } => ops::status_any(&root.opts(), json, out),
        Cmd::Recover { root } => ops::recover(&root.opts(), out),
    }
}

/// `create --kind source`: cut a subtree at a commit into a channel.
fn create_source(
    root: &Root,
    source: SourceArgs,
    out: &mut dyn Write,
) -> rocpack_snapshot::Result<u8> {
    let req = rocpack_snapshot::source::SourceCreate {
        repo: source.repo.unwrap_or_default(),
        rev: source.rev.unwrap_or_default(),
        subtree: source.subtree.unwrap_or_default(),
        include: source.include,
        exclude: source.exclude,
        channel: Channel::parse(&source.channel)?,
        no_rotate: source.no_rotate,
        no_archive: source.no_archive,
        lock_timeout: root.opts().lock_timeout,
    };
    ops::create_source(&root.opts(), &req, out)
}

/// `abi-check`: the recorded ABI inputs against the build's, the message
/// naming the commits the snapshot's metadata records.
fn abi_check(args: AbiCheckArgs) -> rocpack_snapshot::Result<u8> {
    let AbiCheckArgs {
        expect,
        mut inputs,
        input_pairs,
        library,
        channel,
        version,
        recut,
        rebuild,
        rollback,
        dev,
        docs,
        metadata,
        stamp,
        report,
    } = args;
    inputs.extend(input_pairs.chunks(2).map(|p| p.join("=")));
    let commits = match metadata {
        Some(m) => rocpack_snapshot::metadata::Metadata::read(&m)?.commits,
        None => Vec::new(),
    };
    rocpack_snapshot::abi::run_check(
        &expect,
        &inputs,
        &rocpack_snapshot::abi::Context {
            library,
            channel,
            version,
            recut,
            rebuild,
            rollback,
            dev,
            commits,
            docs,
        },
        stamp.as_deref(),
        report.as_deref(),
    )
}

/// `record-patch`: record the channel's current tree as a deliberate patch.
fn record_patch(
    root: &Root,
    channel: &str,
    who: &str,
    why: &str,
    out: &mut dyn Write,
) -> rocpack_snapshot::Result<u8> {
    let o = root.opts();
    let ch = Channel::parse(channel)?;
    let (m, _) = source::record_patch(&Repo::open(&o.root)?, ch, who, why, o.lock_timeout)?;
    writeln!(
        out,
        "{} <- patch by {who}: tree {}",
        ch.dir(),
        m.tree_digest.as_deref().unwrap_or("?")
    )
    .map_err(|e| rocpack_snapshot::Error::Io {
        path: "<stdout>".into(),
        source: e,
    })?;
    Ok(0)
}

/// The error and its causes on one line, each cause only once: error types
/// that already print their source (`{path}: {source}`) would otherwise
/// repeat the OS message.
fn error_line(err: &rocpack_snapshot::Error) -> String {
    let mut line = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !line.contains(&c_text) {
            line.push_str(": ");
            line.push_str(&c_text);
        }
        cause = c.source();
    }
    line
}
