//! `kpack reassemble --host FILE --kpack-dir DIR -o OUT`: rebuild the fat
//! binary (ELF, static archive or PE32+ image) from a split host binary and
//! its `.kpack` files (`rocpack_artifacts::reassemble`).

use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_artifacts::reassemble;

#[derive(Debug, clap::Args)]
pub struct ReassembleArgs {
    /// The split (host-only) ELF file, static archive or PE32+ image.
    #[arg(long, value_name = "FILE")]
    pub host: PathBuf,
    /// Directory searched (recursively) for `.kpack` files.
    #[arg(long, value_name = "DIR")]
    pub kpack_dir: PathBuf,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
}

/// Labels listed in a note before it says how many more there are.
const LISTED: usize = 8;

fn listed(labels: &[&str]) -> String {
    let mut s = labels[..labels.len().min(LISTED)].join(", ");
    if labels.len() > LISTED {
        s.push_str(&format!(" and {} more", labels.len() - LISTED));
    }
    s
}

pub fn run(args: ReassembleArgs) -> anyhow::Result<ExitCode> {
    let report = reassemble::reassemble(&args.host, &args.kpack_dir, &args.output)?;
    let out = args.output.display();
    let canonical = report.notes.canonical();
    if let Some((label, why)) = canonical.first() {
        eprintln!(
            "kpack: note: {} bundle(s) rebuilt in clang's canonical form, not the original layout (first: {label}: {why})",
            canonical.len()
        );
    }
    let recompressed = report.notes.recompressed();
    if !recompressed.is_empty() {
        eprintln!(
            "kpack: note: `{out}` differs from the original: {} compressed bundle(s) recompressed \
             ({}); their code objects and decompressed bytes are the original's",
            recompressed.len(),
            listed(&recompressed)
        );
    }
    eprintln!("kpack: reassembled `{out}` ({} bytes)", report.bytes);
    Ok(ExitCode::SUCCESS)
}
