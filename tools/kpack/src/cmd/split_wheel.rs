//! `kpack split-wheel`: fat wheel → host wheel + per-target device wheels
//! (logic: `rocpack_wheel`). Also the installed-tree check behind
//! `kpack verify --installed-tree`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use rocpack_artifacts::config::PackagingConfig;
use rocpack_wheel::selector::{ExtraNames, SelectorOptions};
use rocpack_wheel::split::{
    parse_source_date_epoch, OutputFormat, WheelSplitOptions, WheelSplitReport,
};

/// `--output-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// `.whl` files.
    Wheel,
    /// One directory per wheel, laid out as installed.
    Directory,
}

#[derive(Debug, clap::Args)]
pub struct SplitWheelArgs {
    /// The fat wheel (`.whl`) or an exploded wheel directory.
    #[arg(value_name = "WHEEL")]
    input: PathBuf,

    /// Output directory (created; existing wheels are never overwritten).
    #[arg(long, short = 'o', value_name = "OUT")]
    output_dir: PathBuf,

    /// Device distributions are `<PREFIX>-<target>` (default `<host>-device`).
    #[arg(long, value_name = "PREFIX")]
    device_package_prefix: Option<String>,

    /// Wheel directory whose fat binaries are split and where `.kpack/`
    /// goes (e.g. `torch`); default: the wheel root.
    #[arg(long, value_name = "DIR")]
    overlay_root: Option<String>,

    /// Extra `Requires-Dist` of device wheels; `@GFXARCH@` is replaced by the
    /// target (such entries go to per-target wheels only).
    #[arg(long, value_name = "REQ", num_args = 1..)]
    device_requires_dist: Vec<String>,

    /// Database handlers (as `kpack split`): rocblas, hipblaslt, hipsparselt,
    /// aotriton, miopen, composablekernel, hipkernelprovider, hotswap_cache, or torch-fat.
    #[arg(long, value_name = "HANDLER", num_args = 1.., visible_aliases = ["databases", "wheel-type"], value_parser = super::parse_db)]
    split_databases: Vec<super::Handlers>,

    /// Keep only these GPU targets (base-arch match, any spelling).
    #[arg(long, value_name = "TARGET", num_args = 1.., value_parser = rocpack_bundle::parse_gpu_target)]
    gpu_targets: Vec<String>,

    /// `.kpack` compression: `zstd` (default, level 3), `zstd:LEVEL` or `none`.
    #[arg(long, value_name = "SCHEME", default_value = "zstd", value_parser = super::parse_compression)]
    compression: rocpack_kpack::Compression,

    /// zstd level (rocm-kpack spelling; same as `--compression zstd:LEVEL`).
    #[arg(long, value_name = "N")]
    compression_level: Option<i32>,

    /// Write `.whl` files or exploded directories.
    #[arg(long, value_enum, default_value = "wheel")]
    output_format: FormatArg,

    /// Packaging config (as `kpack recombine`): one family wheel per
    /// `architecture_groups` entry that has targets in this wheel.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Deflate level of wheel entries, 0 (store) to 9.
    #[arg(long, value_name = "N", default_value_t = 6, value_parser = clap::value_parser!(i64).range(0..=9))]
    zip_level: i64,

    /// Worker threads (default: one per CPU). The output does not depend on it.
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,

    /// Also write the device selector: a source distribution named like the
    /// device prefix whose backend requires, at install time, the device
    /// wheels of the machine's GPUs; the host gains a `device` extra for it.
    #[arg(long)]
    selector: bool,

    /// Targets the selector picks when neither `ROCPACK_GPU_TARGETS` nor the
    /// kernel driver names any GPU (default: none, such an install fails).
    #[arg(long, value_name = "TARGET", num_args = 1.., requires = "selector", value_parser = rocpack_bundle::parse_gpu_target)]
    selector_default: Vec<String>,

    /// Per-target extras of the host: `rocm` (`device-gfx1100`) or `pytorch` (`gfx1100`).
    #[arg(long, value_enum, default_value = "rocm")]
    device_extra_names: ExtraNamesArg,

    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// `--device-extra-names` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExtraNamesArg {
    /// `device-gfx1100`.
    Rocm,
    /// `gfx1100`.
    Pytorch,
}

fn print_text(r: &WheelSplitReport, out: &Path) {
    eprintln!(
        "kpack split-wheel: {} {}: {} fat binar{}, targets: {}; host {} -> {} bytes",
        r.distribution,
        r.version,
        r.fat_binaries.len(),
        if r.fat_binaries.len() == 1 {
            "y"
        } else {
            "ies"
        },
        r.targets.join(" "),
        r.input_bytes,
        r.host.bytes
    );
    println!("{}", out.join(&r.host.file).display());
    for d in &r.device_wheels {
        println!("{}", out.join(&d.wheel.file).display());
    }
    for f in &r.family_wheels {
        println!("{}", out.join(&f.wheel.file).display());
    }
    if let Some(s) = &r.selector {
        println!("{}", out.join(&s.file).display());
    }
    for g in &r.skipped_groups {
        eprintln!("kpack split-wheel: group {g}: no target in this wheel; no family wheel");
    }
}

pub fn run(args: SplitWheelArgs) -> anyhow::Result<ExitCode> {
    let config = match &args.config {
        Some(p) => Some(PackagingConfig::load(p)?),
        None => None,
    };
    let compression = args.compression.with_level(args.compression_level);
    let jobs = super::capped_jobs("split-wheel", args.jobs);
    rocpack_kpack::writer_budget::prepare_process(compression, jobs);
    let opts = WheelSplitOptions {
        device_package_prefix: args.device_package_prefix.clone(),
        overlay_root: args.overlay_root.clone(),
        device_requires_dist: args.device_requires_dist.clone(),
        databases: super::databases(&args.split_databases),
        gpu_targets: args.gpu_targets.clone(),
        compression,
        output_format: match args.output_format {
            FormatArg::Wheel => OutputFormat::Wheel,
            FormatArg::Directory => OutputFormat::Directory,
        },
        jobs,
        config,
        zip_level: args.zip_level,
        source_date_epoch: parse_source_date_epoch(
            std::env::var("SOURCE_DATE_EPOCH").ok().as_deref(),
        )?,
        selector: args.selector.then(|| SelectorOptions {
            default_targets: args.selector_default.clone(),
        }),
        extra_names: match args.device_extra_names {
            ExtraNamesArg::Rocm => ExtraNames::Rocm,
            ExtraNamesArg::Pytorch => ExtraNames::Pytorch,
        },
        ..WheelSplitOptions::new(&args.input, &args.output_dir)
    };
    let report = rocpack_wheel::split_wheel(&opts, &rocpack_artifacts::split::NoProgress)
        .with_context(|| {
            format!(
                "split of {} failed; nothing was written",
                args.input.display()
            )
        })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &args.output_dir);
    }
    Ok(ExitCode::SUCCESS)
}

/// `kpack verify --installed-tree DIR --gpu-target T`.
pub fn run_verify_installed(root: &Path, target: &str, json: bool) -> anyhow::Result<ExitCode> {
    let r = rocpack_wheel::installed::verify_installed(root, target)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
    } else {
        for f in &r.failures {
            writeln!(out, "FAIL {f}")?;
        }
        writeln!(
            out,
            "{}: {} for {}: {} split host binaries, {}/{} lookups resolved, {} kpack archives",
            if r.ok { "OK" } else { "FAILED" },
            root.display(),
            r.target,
            r.host_binaries,
            r.resolved,
            r.lookups,
            r.kpack_files
        )?;
    }
    Ok(if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
