//! `kpack verify`: check a split shard output or a recombined tree
//! (logic: `rocpack_artifacts::verify`). Exit 1 listing every violation.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::verify::{verify, InstallModel, VerifyOptions};

/// `--install-model` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModelArg {
    /// Packages extracted into one root with their prefix directories.
    Overlay,
    /// Every prefix copied into one install root (TheRock's dist/, tarballs).
    Flatten,
    /// Both (the default).
    Both,
}

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Directory whose subdirectories are packages (`kpack split` or `kpack recombine` output).
    #[arg(long, value_name = "DIR", required_unless_present = "installed_tree")]
    pub artifacts_dir: Option<PathBuf>,
    /// Instead: an installed tree (e.g. a venv's site-packages after
    /// `pip install` of split wheels); every lookup for --gpu-target must resolve.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["artifacts_dir", "config"], requires = "gpu_target")]
    pub installed_tree: Option<PathBuf>,
    /// The device arch whose lookups --installed-tree checks (e.g. gfx1100).
    #[arg(long, value_name = "TARGET", requires = "installed_tree")]
    pub gpu_target: Option<String>,
    /// Packaging config: exact archs of group packages (else inferred from names like gfx110X).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Install layouts whose lookups must all resolve.
    #[arg(long, value_enum, default_value = "both")]
    pub install_model: ModelArg,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Accepted for rocm-kpack compatibility.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Accepted for rocm-kpack compatibility (unused).
    #[arg(long, value_name = "PATH", hide = true)]
    pub clang_offload_bundler: Option<PathBuf>,
}

pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    if let (Some(t), Some(g)) = (&args.installed_tree, &args.gpu_target) {
        return super::split_wheel::run_verify_installed(t, g, args.json);
    }
    let config = match &args.config {
        Some(p) => Some(PackagingConfig::load(p)?),
        None => None,
    };
    let install_models = match args.install_model {
        ModelArg::Overlay => vec![InstallModel::Overlay],
        ModelArg::Flatten => vec![InstallModel::Flatten],
        ModelArg::Both => InstallModel::ALL.to_vec(),
    };
    let opts = VerifyOptions {
        artifacts_dir: args.artifacts_dir.clone().unwrap_or_default(),
        config,
        install_models,
    };
    let report = verify(&opts, &mut |s| eprintln!("kpack verify: {s}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        for v in &report.violations {
            let loc = if v.path.is_empty() {
                v.package.clone()
            } else {
                format!("{}/{}", v.package, v.path)
            };
            writeln!(out, "FAIL [{}] {loc}: {}", v.kind, v.message)?;
        }
        for m in &report.models {
            writeln!(
                out,
                "{} install: {}/{} lookups resolved ({} for archs a binary was not built for)",
                m.model, m.resolved, m.lookups, m.not_built
            )?;
        }
        writeln!(
            out,
            "{}: {} packages, {} files, {} kpack archives, {} split host binaries, {}/{} lookups resolved ({} for archs a binary was not built for), {} violation(s)",
            if report.ok { "OK" } else { "FAILED" },
            report.packages,
            report.files,
            report.kpack_files,
            report.host_binaries,
            report.lookups_resolved,
            report.lookups,
            report.lookups_not_built,
            report.violations.len()
        )?;
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
