//! `kpack pack`: build a `.kpack` archive from code object files.
//!
//! The inputs, their order and the archive's defaults are
//! [`rocpack_kpack::pack`]'s; this only maps flags to a [`PackRequest`].

use std::path::PathBuf;
use std::process::ExitCode;

use rocpack_kpack::{pack, Compression, PackRequest};

#[derive(Debug, clap::Args)]
pub struct PackArgs {
    /// Output `.kpack` file (written atomically).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,

    /// Add a code object for TARGET (arch key, e.g. gfx1100 or gfx90a:xnack+)
    /// under key `<kernel-name>#<n>`, n counting code objects per target.
    #[arg(long = "code-object", value_name = "TARGET=FILE")]
    pub code_objects: Vec<String>,

    /// Add a code object under an explicit TOC key (e.g. `lib/libfoo.so#0`).
    #[arg(long = "entry", num_args = 3, value_names = ["KEY", "TARGET", "FILE"])]
    pub entries: Vec<String>,

    /// A directory written by `kpack unpack` or `kpack unbundle`.
    #[arg(long = "input-dir", value_name = "DIR")]
    pub input_dirs: Vec<PathBuf>,

    /// Key stem for `--code-object` and plain directories (the binary's marker
    /// `kernel_name`, e.g. `hip/stage/lib/libfoo.so`).
    #[arg(long = "kernel-name", value_name = "NAME")]
    pub kernel_name: Option<String>,

    /// `none`, `zstd` (level 3, as rocm-kpack) or `zstd:LEVEL`.
    /// Default: the scheme recorded by `kpack unpack`, else `none`.
    #[arg(long, value_name = "SCHEME")]
    pub compression: Option<Compression>,

    /// zstd frames without content checksums, byte for byte what rocm-kpack's
    /// Python writer produces (default: with checksums, or as recorded by
    /// `kpack unpack`).
    #[arg(long = "no-zstd-checksum")]
    pub no_zstd_checksum: bool,

    /// TOC `group_name` (default: from the unpacked manifest, else empty).
    #[arg(long = "group-name", value_name = "NAME")]
    pub group_name: Option<String>,

    /// TOC `gfx_arch_family` (default: manifest, else the only arch, else empty).
    #[arg(long = "arch-family", value_name = "FAMILY")]
    pub arch_family: Option<String>,

    /// TOC `gfx_arches`, repeatable (default: manifest, else the targets added).
    #[arg(long = "arch", value_name = "ARCH")]
    pub arches: Vec<String>,
}

pub fn run(args: PackArgs) -> anyhow::Result<ExitCode> {
    let mut entries = Vec::new();
    for chunk in args.entries.chunks(3) {
        let [key, target, file] = chunk else {
            anyhow::bail!("--entry takes KEY TARGET FILE");
        };
        entries.push((key.clone(), target.clone(), PathBuf::from(file)));
    }
    if let Some(c) = args.compression {
        rocpack_kpack::writer_budget::prepare_process(c, None);
    }
    let req = PackRequest {
        entries,
        output: args.output,
        input_dirs: args.input_dirs,
        code_objects: args.code_objects,
        kernel_name: args.kernel_name,
        compression: args.compression,
        no_content_checksum: args.no_zstd_checksum,
        group_name: args.group_name,
        arch_family: args.arch_family,
        arches: args.arches,
    };
    let summary = pack(&req)?;
    println!(
        "{}: {} code objects, {} bytes, scheme {}",
        req.output.display(),
        summary.written.kernels,
        summary.written.total_size,
        summary.compression.scheme()
    );
    Ok(ExitCode::SUCCESS)
}
