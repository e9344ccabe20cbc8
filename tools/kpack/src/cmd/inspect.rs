//! `kpack inspect FILE [--json]`: describe a fat binary, static archive, raw
//! bundle, CCOB or `.kpack` file. The analysis and its text rendering
//! live in `rocpack_inspect`; this file is the command line.
//!
//! JSON schema: `docs/cli/inspect-json.md`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use rocpack_inspect::{self as inspect, Input};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// ELF fat binary (shared library, executable, object), PE32+ image
    /// (DLL, EXE, .pyd), COFF object (.obj), static archive, raw bundle,
    /// CCOB or `.kpack` file.
    pub file: PathBuf,
    /// Print JSON (schema in docs/cli/inspect-json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also check each compressed bundle's stored hash (the truncated MD5
    /// of its payload; `hash_matches` true or false instead of null). Off
    /// by default, as in clang-offload-bundler, which computes it only
    /// with `-verbose`: it is one sequential MD5 of the whole payload, the
    /// slowest part of inspecting a large CCOB. Without it code objects are
    /// still decompressed, size-checked and SHA-256-hashed, and a damaged
    /// stream still fails to decompress.
    #[arg(long, conflicts_with = "no_hash_check")]
    pub check_hash: bool,
    /// The default (no MD5 of CCOB payloads); kept for scripts written when
    /// checking was the default.
    #[arg(long, hide = true)]
    pub no_hash_check: bool,
}

pub fn run(args: InspectArgs) -> Result<ExitCode> {
    let mut input = Input::open(&args.file)?;
    if !args.check_hash {
        input = input.without_ccob_hash();
    }
    let desc = inspect::inspect(&input, &args.file.display().to_string())?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &desc)?;
        writeln!(out)?;
    } else {
        inspect::write_text(&mut out, &desc)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
