//! `kpack unbundle FILE --output-dir DIR`: write one file per code object
//! found in FILE (any input `kpack inspect` understands).
//!
//! Names (deterministic): `b<bundle>-e<entry>-<entry id>.<ext>` for bundle
//! entries, under `<member>/` for archive members; `.kpack` kernels use
//! `rocpack_kpack::unpack_file_name`. `<ext>` is `hsaco` for AMDGPU ELF,
//! `bc` for LLVM bitcode, `bin` otherwise. Empty host entries are skipped.
//! Files are written to a temporary directory beside DIR and moved into
//! place only when all succeeded, so a failure leaves nothing partial.
//! Code objects stream from the input to their files (a CCOB is
//! decompressed once per pass, never held whole); bundles whose entries
//! overlap are refused. Logic: `rocpack_inspect::unbundle`.
//! stdout: one line per file, `path<TAB>target<TAB>size<TAB>sha256`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use rocpack_inspect::{self as inspect, Input};

#[derive(Debug, clap::Args)]
pub struct UnbundleArgs {
    /// Fat binary, static archive, raw bundle, CCOB or `.kpack` file.
    pub file: PathBuf,
    /// Directory to create (must not exist, or be empty).
    #[arg(long, short = 'o')]
    pub output_dir: PathBuf,
}

pub fn run(args: UnbundleArgs) -> Result<ExitCode> {
    let input = Input::open(&args.file)?;
    let name = args.file.display().to_string();
    let desc = inspect::inspect(&input, &name)?;
    let files = inspect::unbundle(&input, &desc, &args.output_dir)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for f in &files {
        writeln!(
            out,
            "{}\t{}\t{}\t{}",
            args.output_dir.join(&f.rel).display(),
            f.target,
            f.size,
            f.sha256
        )?;
    }
    out.flush()?;
    if files.is_empty() {
        eprintln!("kpack: note: {name}: no code objects found");
    }
    Ok(ExitCode::SUCCESS)
}
