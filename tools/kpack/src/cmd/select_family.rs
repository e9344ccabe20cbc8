//! `kpack select-family`: which architecture group (and packages) a device
//! needs, with the runtime's ISA feature matching.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::select::{
    family_packages, groups_of, select_family, MatchKind, SelectError,
};
use rocpack_wheel::selector;

#[derive(Debug, clap::Args)]
pub struct SelectFamilyArgs {
    /// Device ISA, e.g. `gfx90a:xnack+` or `amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`.
    #[arg(
        long,
        value_name = "ISA",
        required_unless_present = "detect",
        conflicts_with = "detect"
    )]
    pub arch: Option<String>,
    /// Packaging configuration.
    #[arg(long, value_name = "FILE", required_unless_present = "detect")]
    pub config: Option<PathBuf>,
    /// Print the GPU targets of this machine as a device selector finds them
    /// (`ROCPACK_GPU_TARGETS`, else the kernel driver's topology under
    /// `ROCPACK_SYSFS_ROOT` or /sys, else the selector's default) and, with
    /// `--selector`, the device packages it would install; with `--config`,
    /// each target's group.
    #[arg(long)]
    pub detect: bool,
    /// A selector written by `kpack split-wheel --selector` (the `.tar.gz`,
    /// it unpacked, or its `selector.json`).
    #[arg(long, value_name = "SDIST", requires = "detect")]
    pub selector: Option<PathBuf>,
    /// A recombined output directory: list the packages in it this device needs.
    #[arg(long, value_name = "DIR")]
    pub packages_dir: Option<PathBuf>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SelectFamilyArgs) -> anyhow::Result<ExitCode> {
    let (Some(arch), Some(config)) = (&args.arch, &args.config) else {
        return run_detect(&args);
    };
    let config = PackagingConfig::load(config)?;
    let sel = match select_family(&config, arch) {
        Ok(s) => s,
        Err(e @ SelectError::NoGroup { .. }) => {
            if args.json {
                let v = serde_json::json!({"ok": false, "agent": arch, "error": e.to_string()});
                println!("{}", serde_json::to_string_pretty(&v)?);
            }
            eprintln!("kpack select-family: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    if sel.match_kind == MatchKind::Processor {
        eprintln!(
            "kpack select-family: note: `{}` names no target features; matched group arch `{}` by processor",
            sel.agent, sel.matched_architecture
        );
    }
    // Packages: generic + this group's, per component found in --packages-dir,
    // else the name patterns.
    let packages = family_packages(args.packages_dir.as_deref(), &sel.group)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut v = serde_json::to_value(&sel)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("ok".into(), true.into());
            o.insert("packages".into(), serde_json::to_value(&packages)?);
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        writeln!(out, "{}", sel.group)?;
        writeln!(out, "display_name: {}", sel.display_name)?;
        writeln!(
            out,
            "matched: {} ({:?})",
            sel.matched_architecture, sel.match_kind
        )?;
        writeln!(out, "packages: {}", packages.join(" "))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `kpack select-family --detect [--selector SDIST] [--config FILE]`: the
/// selector's detection (`rocpack_wheel::selector`, the same rules as its
/// Python backend). Exit 1 when no target is found or one has no device
/// wheel in the selector.
fn run_detect(args: &SelectFamilyArgs) -> anyhow::Result<ExitCode> {
    let data = match &args.selector {
        Some(p) => Some(selector::read_selector(p)?),
        None => None,
    };
    let e = selector::explain_detected(data.as_ref()).map_err(|e| anyhow::anyhow!(e))?;
    let config = match &args.config {
        Some(p) => Some(PackagingConfig::load(p)?),
        None => None,
    };
    let groups = match &config {
        Some(c) => groups_of(c, &e.targets),
        None => BTreeMap::new(),
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut v = serde_json::to_value(&e)?;
        if let (Some(o), true) = (v.as_object_mut(), config.is_some()) {
            o.insert("groups".into(), serde_json::to_value(&groups)?);
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        for n in &e.notes {
            eprintln!("kpack select-family: note: {n}");
        }
        writeln!(out, "source: {}", e.source.name())?;
        writeln!(out, "targets: {}", e.targets.join(" "))?;
        for (t, g) in &groups {
            writeln!(out, "group {t}: {}", g.as_deref().unwrap_or("(none)"))?;
        }
        if data.is_some() {
            writeln!(out, "packages: {}", e.packages.join(" "))?;
        }
    }
    if let Some(why) = e.failure(data.is_some()) {
        eprintln!("kpack select-family: {why}");
    }
    Ok(if e.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
