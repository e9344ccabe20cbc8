//! `kpack unbundle FILE --output-dir DIR`: write one file per code object
//! found in FILE (any input `kpack inspect` understands).
//!
//! Names (deterministic): `b<bundle>-e<entry>-<entry id>.<ext>` for bundle
//! entries, under `<member>/` for archive members; `.kpack` kernels use
//! `rocpack_kpack::unpack_file_name`. `<ext>` is `hsaco` for AMDGPU ELF,
//! `bc` for LLVM bitcode, `bin` otherwise. Empty host entries are skipped.
//! Files are written to a temporary directory beside DIR and moved into
//! place only when all succeeded, so a failure leaves nothing partial.
//! stdout: one line per file, `path<TAB>target<TAB>size<TAB>sha256`.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::inspect::{describe, hash_all, Desc, Input};

#[derive(Debug, clap::Args)]
pub struct UnbundleArgs {
    /// Fat binary, static archive, raw bundle, CCOB or `.kpack` file.
    pub file: PathBuf,
    /// Directory to create (must not exist, or be empty).
    #[arg(long, short = 'o')]
    pub output_dir: PathBuf,
}

fn sanitize(s: &str) -> String {
    let t: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match t.as_str() {
        "" | "." | ".." => format!("_{t}"),
        _ => t,
    }
}

fn ext(data: &[u8]) -> &'static str {
    if data.starts_with(b"\x7fELF") {
        "hsaco"
    } else if data.starts_with(b"BC\xc0\xde") || data.starts_with(&[0xde, 0xc0, 0x17, 0x0b]) {
        "bc"
    } else {
        "bin"
    }
}

struct Planned<'d> {
    rel: PathBuf,
    target: String,
    sha256: String,
    data: &'d [u8],
}

fn plan<'d>(d: &'d Desc<'_>, dir: &Path, out: &mut Vec<Planned<'d>>, used: &mut BTreeSet<PathBuf>) {
    for b in &d.bundles {
        for c in &b.code_objects {
            if c.is_host && c.size == 0 {
                continue;
            }
            let name = format!(
                "b{}-e{}-{}.{}",
                b.index,
                c.index,
                sanitize(&c.target),
                ext(&c.data)
            );
            out.push(Planned {
                rel: dir.join(name),
                target: c.target.clone(),
                sha256: c.sha256.clone(),
                data: &c.data,
            });
        }
    }
    if let Some(k) = &d.kpack {
        for e in &k.kernels {
            out.push(Planned {
                rel: dir.join(rocpack_kpack::unpack_file_name(
                    e.ordinal, &e.key, &e.target,
                )),
                target: e.target.clone(),
                sha256: e.sha256.clone(),
                data: &e.data,
            });
        }
    }
    for m in &d.members {
        let member = m
            .file
            .rsplit_once('(')
            .map(|(_, n)| n.trim_end_matches(')'))
            .unwrap_or(&m.file);
        let base = sanitize(member);
        let mut sub = dir.join(&base);
        let mut n = 1;
        while !used.insert(sub.clone()) {
            n += 1;
            sub = dir.join(format!("{base}.{n}"));
        }
        plan(m, &sub, out, used);
    }
}

pub fn run(args: UnbundleArgs) -> Result<ExitCode> {
    let input = Input::open(&args.file)?;
    let name = args.file.display().to_string();
    let mut desc = describe(&input, &name)?;
    hash_all(&input, &mut desc)?;

    let mut files = Vec::new();
    plan(&desc, Path::new(""), &mut files, &mut BTreeSet::new());

    let outdir = &args.output_dir;
    if outdir.exists() {
        let empty = std::fs::read_dir(outdir)
            .with_context(|| format!("{}: cannot read", outdir.display()))?
            .next()
            .is_none();
        if !empty {
            bail!(
                "output directory {} exists and is not empty",
                outdir.display()
            );
        }
    }
    let parent = match outdir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .with_context(|| format!("{}: cannot create", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".kpack-unbundle-")
        .tempdir_in(&parent)
        .with_context(|| format!("{}: cannot create a temporary directory", parent.display()))?;
    for f in &files {
        let path = tmp.path().join(&f.rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)
                .with_context(|| format!("{}: cannot create", p.display()))?;
        }
        std::fs::write(&path, f.data)
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    if outdir.exists() {
        std::fs::remove_dir(outdir)
            .with_context(|| format!("{}: cannot replace", outdir.display()))?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, outdir)
        .with_context(|| format!("cannot move {} to {}", kept.display(), outdir.display()))?;

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for f in &files {
        writeln!(
            out,
            "{}\t{}\t{}\t{}",
            outdir.join(&f.rel).display(),
            f.target,
            f.data.len(),
            f.sha256
        )?;
    }
    if files.is_empty() {
        eprintln!("kpack: note: {name}: no code objects found");
    }
    Ok(ExitCode::SUCCESS)
}
