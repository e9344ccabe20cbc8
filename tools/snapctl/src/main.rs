//! `snapctl`: prebuilt snapshots with a content-addressed store, crash-safe rotation
//! and a generated `stable_checksums.bzl`. Contract: design §3.2; reference: docs/cli/snapctl.md.
//!
//! Exit codes: 0 ok, 1 a check failed (verify, check, fetch digest mismatch), 2 usage or input error.

//! Argument parsing only: each command is a function of
//! `rocpack_snapshot::ops`, which prints its report to stdout.

use clap::{Args, Parser, Subcommand};
use rocpack_snapshot::ops::{self, CreateArgs, RootOpts};
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
            root,
            store,
            version,
            artifact,
            headers,
            commits,
            checksums,
            prefix,
        } => ops::create(
            &root.opts(),
            CreateArgs {
                store,
                version,
                artifact,
                headers,
                commits,
                checksums,
                prefix,
            },
            out,
        ),
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
        Cmd::GenChecksums {
            root,
            output,
            prefix,
        } => ops::gen_checksums(&root.opts(), &output, prefix.as_deref(), out),
        Cmd::Check {
            root,
            checksums,
            prefix,
        } => ops::check(&root.opts(), &checksums, prefix.as_deref(), out),
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
        Cmd::Status { root, json } => ops::status(&root.opts(), json, out),
        Cmd::Recover { root } => ops::recover(&root.opts(), out),
    }
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
