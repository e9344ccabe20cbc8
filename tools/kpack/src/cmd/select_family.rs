//! `kpack select-family`: which architecture group (and packages) a device
//! needs, with the runtime's ISA feature matching.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::select::{select_family, MatchKind, SelectError};

#[derive(Debug, clap::Args)]
pub struct SelectFamilyArgs {
    /// Device ISA, e.g. `gfx90a:xnack+` or `amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`.
    #[arg(long, value_name = "ISA")]
    pub arch: String,
    /// Packaging configuration.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// A recombined output directory: list the packages in it this device needs.
    #[arg(long, value_name = "DIR")]
    pub packages_dir: Option<PathBuf>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SelectFamilyArgs) -> anyhow::Result<ExitCode> {
    let config = PackagingConfig::load(&args.config)?;
    let sel = match select_family(&config, &args.arch) {
        Ok(s) => s,
        Err(e @ SelectError::NoGroup { .. }) => {
            if args.json {
                let v =
                    serde_json::json!({"ok": false, "agent": args.arch, "error": e.to_string()});
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
    let packages: Vec<String> = match &args.packages_dir {
        Some(dir) => {
            let mut names = Vec::new();
            for e in
                std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
            {
                let e = e?;
                if let Some(n) = e.file_name().to_str() {
                    let group_suffix = format!("_{}", sel.group);
                    if (n.ends_with("_generic") || n.ends_with(&group_suffix)) && e.path().is_dir()
                    {
                        names.push(n.to_string());
                    }
                }
            }
            names.sort();
            names
        }
        None => vec![
            "<component>_generic".to_string(),
            format!("<component>_{}", sel.group),
        ],
    };
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
