//! `kpack split`: artifact directory → `NAME_generic` + `NAME_<arch>` artifacts.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_artifacts::split::{self, Progress, SplitOptions, SplitReport};

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["artifact_dir", "batch_artifact_parent_dir"])))]
pub struct SplitArgs {
    /// Artifact directory holding `artifact_manifest.txt` and its prefixes.
    #[arg(
        long,
        value_name = "DIR",
        visible_alias = "input-dir",
        requires = "artifact_prefix"
    )]
    artifact_dir: Option<PathBuf>,

    /// Split every artifact directory under DIR (names `<prefix>_<family>`;
    /// `*_generic` skipped); all or nothing.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["artifact_dir", "artifact_prefix"])]
    batch_artifact_parent_dir: Option<PathBuf>,

    /// Artifact prefix NAME: writes `NAME_generic/` and `NAME_<arch>/`.
    #[arg(long, value_name = "NAME", visible_alias = "component-name")]
    artifact_prefix: Option<String>,

    /// Output directory (created; existing outputs are never overwritten).
    #[arg(long, value_name = "OUT")]
    output_dir: PathBuf,

    /// Database handlers to run, in priority order: rocblas, hipblaslt,
    /// hipsparselt, aotriton, miopen, composablekernel, hipkernelprovider, hotswap_cache,
    /// or the preset torch-fat (rocblas hipblaslt hipsparselt aotriton miopen).
    #[arg(long, value_name = "HANDLER", num_args = 1.., value_parser = super::parse_db)]
    split_databases: Vec<super::Handlers>,

    /// `.kpack` compression: `zstd` (default, level 3), `zstd:LEVEL` or `none`.
    #[arg(long, value_name = "SCHEME", default_value = "zstd", value_parser = super::parse_compression)]
    compression: rocpack_kpack::Compression,

    /// Drop these architectures (`gfx906` also drops `gfx906:xnack-`; a
    /// target with features drops only itself).
    #[arg(long, value_name = "ARCH", num_args = 1.., value_parser = rocpack_bundle::parse_gpu_target)]
    exclude_arch: Vec<String>,

    /// Keep only these GPU targets, by base arch in any spelling (`gfx90a`
    /// keeps `gfx90a:xnack-` code and `…_gfx90a-xnack-.hsaco` files);
    /// everything else is dropped. Fails when nothing is left.
    #[arg(long, value_name = "TARGET", num_args = 1.., value_parser = rocpack_bundle::parse_gpu_target)]
    gpu_targets: Vec<String>,

    /// Worker threads (default: one per CPU; at most 4 per CPU and 256,
    /// larger requests are reduced with a note). The output does not depend on it.
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,

    /// A directory the build system staged inputs from (repeatable): a
    /// symlink of the input tree that leads into DIR at its own relative
    /// path stands for that input, which is judged as the original tree
    /// would be (its own symlinks must stay inside the artifact).
    #[arg(long, value_name = "DIR")]
    staging_root: Vec<PathBuf>,

    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,

    /// Accepted for rocm-kpack compatibility; ignored (no subprocesses are run).
    #[arg(long, value_name = "PATH")]
    clang_offload_bundler: Option<PathBuf>,

    /// Accepted for rocm-kpack compatibility; ignored (staging happens beside OUT).
    #[arg(long, value_name = "DIR")]
    tmp_dir: Option<PathBuf>,

    /// Accepted for rocm-kpack compatibility; ignored.
    #[arg(long, hide = true)]
    verbose: bool,
}

/// Progress bar on stderr (only created when stderr is a TTY).
struct Bar(indicatif::ProgressBar);

impl Progress for Bar {
    fn begin(&self, phase: &str, total: u64) {
        self.0.set_length(total);
        self.0.set_position(0);
        self.0.set_message(phase.to_string());
    }
    fn advance(&self, n: u64) {
        self.0.inc(n);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

fn print_text(r: &SplitReport, out: &std::path::Path) {
    println!("{}", out.join(&r.generic).display());
    for a in &r.arch_artifacts {
        println!("{}", out.join(&a.name).display());
    }
}

fn log_discovery(r: &SplitReport) {
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(" ")
        }
    };
    let mut line = format!(
        "kpack split: {}: architectures: {}",
        r.artifact_prefix,
        list(&r.architectures)
    );
    if !r.excluded_architectures.is_empty() {
        line.push_str(&format!(
            " (excluded: {})",
            r.excluded_architectures.join(" ")
        ));
    }
    line.push_str(&format!(
        "; {} fat binar{} split, {} generic file(s), {} symlink(s)",
        r.fat_binaries.len(),
        if r.fat_binaries.len() == 1 {
            "y"
        } else {
            "ies"
        },
        r.generic_files,
        r.symlinks
    ));
    eprintln!("{line}");
    for w in &r.warnings {
        eprintln!("kpack split: {}: warning: {w}", r.artifact_prefix);
    }
    for p in &r.missing_prefixes {
        eprintln!(
            "kpack split: {}: prefix `{p}` listed in the manifest does not exist; skipped",
            r.artifact_prefix
        );
    }
}

pub fn run(args: SplitArgs) -> anyhow::Result<ExitCode> {
    if let Some(p) = &args.clang_offload_bundler {
        eprintln!(
            "kpack split: note: --clang-offload-bundler {} ignored (bundles are parsed in-process)",
            p.display()
        );
    }
    if let Some(p) = &args.tmp_dir {
        eprintln!(
            "kpack split: note: --tmp-dir {} ignored (output is staged beside --output-dir)",
            p.display()
        );
    }
    let jobs = super::capped_jobs("split", args.jobs);
    rocpack_kpack::writer_budget::prepare_process(args.compression, jobs);
    let opts = SplitOptions {
        artifact_dir: args.artifact_dir.clone().unwrap_or_default(),
        artifact_prefix: args.artifact_prefix.clone().unwrap_or_default(),
        output_dir: args.output_dir.clone(),
        databases: super::databases(&args.split_databases),
        compression: args.compression,
        exclude_arch: args.exclude_arch.clone(),
        gpu_targets: args.gpu_targets.clone(),
        jobs,
        staging_roots: args.staging_root.clone(),
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new(0);
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {elapsed}")
        {
            pb.set_style(style.progress_chars("=> "));
        }
        Bar(pb)
    });
    let progress: &dyn Progress = match &bar {
        Some(b) => b,
        None => &split::NoProgress,
    };
    let (input, result) = match &args.batch_artifact_parent_dir {
        Some(parent) => (parent, split::split_batch(parent, &opts, progress)),
        None => (
            &opts.artifact_dir,
            split::split_artifact(&opts, progress).map(|r| vec![r]),
        ),
    };
    let reports = result.map_err(|e| {
        let what = if e.wrote_nothing() {
            "nothing was written"
        } else {
            "the output directory may hold part of the outputs (see below)"
        };
        anyhow::Error::new(e).context(format!("split of {} failed; {what}", input.display()))
    })?;
    for r in &reports {
        log_discovery(r);
    }
    if args.json {
        let v = if args.batch_artifact_parent_dir.is_some() {
            serde_json::to_value(&reports)?
        } else {
            serde_json::to_value(&reports[0])?
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for r in &reports {
            print_text(r, &args.output_dir);
        }
    }
    Ok(ExitCode::SUCCESS)
}
