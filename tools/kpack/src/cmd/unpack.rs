//! `kpack unpack FILE --output-dir DIR`: one file per code object plus
//! `kpack-unpack.json`, from which `kpack pack --input-dir DIR` rebuilds
//! the archive byte for byte.

use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_kpack::{unpack_to_dir, KpackReader};

#[derive(Debug, clap::Args)]
pub struct UnpackArgs {
    /// The `.kpack` archive.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Where to write the code objects (created if missing).
    #[arg(long = "output-dir", short = 'o', value_name = "DIR")]
    pub output_dir: PathBuf,

    /// Print the manifest as JSON instead of one line per code object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: UnpackArgs) -> anyhow::Result<ExitCode> {
    // Positioned reads, never mapped: each code object is decoded from
    // the file through fixed buffers into its output file.
    let reader = KpackReader::open_file(&args.file)?;
    let manifest = unpack_to_dir(&reader, &args.output_dir)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&manifest)?);
    } else {
        for k in &manifest.kernels {
            println!("{}\t{}\t{}\t{}", k.file, k.key, k.target, k.size);
        }
    }
    Ok(ExitCode::SUCCESS)
}
