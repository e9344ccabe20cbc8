//! `kpack recombine`: split CI shards → `<component>_generic` + one package
//! per architecture group (design.md §3.1). Logic: `rocpack_artifacts::recombine`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::recombine::{recombine, LinkMode, RecombineError, RecombineOptions};

#[derive(Debug, clap::Args)]
pub struct RecombineArgs {
    /// Directory whose subdirectories are split shards (each the output of `kpack split`).
    #[arg(long, value_name = "DIR")]
    pub input_shards_dir: PathBuf,
    /// Packaging configuration (rocm-kpack format: primary_shard, architecture_groups, validation).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Output directory; must not exist or be empty. Written atomically.
    #[arg(long, value_name = "DIR")]
    pub output_dir: PathBuf,
    /// Only recombine this component.
    #[arg(long, value_name = "NAME")]
    pub component: Option<String>,
    /// Hard-link output files to the input (falls back to copies) instead of copying.
    #[arg(long)]
    pub hardlink: bool,
    /// Worker threads (default: all cores).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// A directory the build system staged shards from (repeatable): a
    /// symlinked shard or artifact directory may resolve inside it.
    #[arg(long, value_name = "DIR")]
    pub staging_root: Vec<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Accepted for rocm-kpack compatibility; logs always go to stderr.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

pub fn run(args: RecombineArgs) -> anyhow::Result<ExitCode> {
    let config = PackagingConfig::load(&args.config)?;
    let opts = RecombineOptions {
        input_shards_dir: args.input_shards_dir.clone(),
        config,
        output_dir: args.output_dir.clone(),
        link_mode: if args.hardlink {
            LinkMode::Hardlink
        } else {
            LinkMode::Copy
        },
        component: args.component.clone(),
        jobs: super::capped_jobs("recombine", args.jobs),
        staging_roots: args.staging_root.clone(),
    };
    let mut log = |s: &str| eprintln!("kpack recombine: {s}");
    let result = recombine(&opts, &mut log);
    let mut out = std::io::stdout().lock();
    match result {
        Ok(report) => {
            if args.json {
                let mut v = serde_json::to_value(&report)?;
                if let Some(o) = v.as_object_mut() {
                    o.insert("ok".into(), serde_json::Value::Bool(true));
                }
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                for p in &report.packages {
                    writeln!(
                        out,
                        "{}\t{} files, {} symlinks, {} bytes{}",
                        p.name,
                        p.files,
                        p.symlinks,
                        p.bytes,
                        if p.architectures.is_empty() {
                            String::new()
                        } else {
                            format!(" [{}]", p.architectures.join(", "))
                        }
                    )?;
                }
                for c in &report.generic_only_components {
                    writeln!(out, "generic-only component: {c}")?;
                }
                for e in &report.excluded_architectures {
                    writeln!(
                        out,
                        "excluded architecture: {} (in no group; shards {})",
                        e.architecture,
                        e.shards.join(", ")
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            if args.json {
                let violations = match &err {
                    RecombineError::Validation(v) => serde_json::to_value(v)?,
                    _ => serde_json::Value::Array(vec![]),
                };
                let v = serde_json::json!({
                    "ok": false,
                    "error": err.to_string(),
                    "violations": violations,
                });
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
            }
            eprintln!("kpack recombine: error: {err}");
            Ok(ExitCode::from(err.exit_code()))
        }
    }
}
