//! `kpack pack`: build a `.kpack` archive from code object files.
//!
//! Inputs are added in this order (it fixes the ordinals): `--input-dir`
//! directories, then `--entry` triples, then `--code-object` pairs.
//! Plain directories are read in natural name order (digit runs compared
//! as numbers), so `kpack unbundle`'s `b<bundle>-e<entry>-…` files get
//! per-target indices in bundle order.
//! A directory written by `kpack unpack` (it has `kpack-unpack.json`) is
//! rebuilt exactly: same keys, targets, order, metadata, group, family,
//! arches and scheme. Any other directory contributes its regular files in
//! name order; the target is taken from the file name (text after the last
//! `--`, e.g. `x-hipv4-amdgcn-amd-amdhsa--gfx1100.hsaco`, or a stem that
//! starts with `gfx`).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use rocpack_kpack::{
    normalize_key, read_pack_dir, toc_key, Compression, KpackFileWriter, PackDir, UnpackManifest,
};

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

/// One code object to pack: read from its file only when written.
struct Item {
    key: String,
    target: String,
    path: PathBuf,
    metadata: Option<rocpack_kpack::rmpv::Value>,
}

pub fn run(args: PackArgs) -> anyhow::Result<ExitCode> {
    if args.code_objects.is_empty() && args.entries.is_empty() && args.input_dirs.is_empty() {
        bail!("nothing to pack: give --code-object, --entry or --input-dir");
    }
    let mut items: Vec<Item> = Vec::new();
    let mut manifest_defaults: Option<UnpackManifest> = None;
    let mut per_target: HashMap<String, u64> = HashMap::new();
    let mut next_key =
        |target: &str, kernel_name: &Option<String>, what: &str| -> anyhow::Result<String> {
            let Some(name) = kernel_name else {
                bail!("{what} needs --kernel-name (the TOC key stem)");
            };
            let n = per_target.entry(target.to_owned()).or_insert(0);
            let k = normalize_key(&toc_key(name, *n));
            *n += 1;
            Ok(k)
        };

    for dir in &args.input_dirs {
        match read_pack_dir(dir)? {
            PackDir::Unpacked(m, files) => {
                items.extend(files.into_iter().map(|k| Item {
                    key: k.key,
                    target: k.target,
                    path: k.path,
                    metadata: k.metadata,
                }));
                manifest_defaults.get_or_insert(m);
            }
            PackDir::Plain(files) => {
                for (target, path) in files {
                    let key = next_key(
                        &target,
                        &args.kernel_name,
                        "--input-dir without kpack-unpack.json",
                    )?;
                    items.push(Item {
                        key,
                        target,
                        path,
                        metadata: None,
                    });
                }
            }
        }
    }
    for chunk in args.entries.chunks(3) {
        let [key, target, file] = chunk else {
            bail!("--entry takes KEY TARGET FILE");
        };
        items.push(Item {
            key: normalize_key(key),
            target: target.clone(),
            path: PathBuf::from(file),
            metadata: None,
        });
    }
    for spec in &args.code_objects {
        let Some((target, file)) = spec.split_once('=') else {
            bail!("--code-object {spec:?}: expected TARGET=FILE");
        };
        if target.is_empty() || file.is_empty() {
            bail!("--code-object {spec:?}: expected TARGET=FILE");
        }
        let key = next_key(target, &args.kernel_name, "--code-object")?;
        items.push(Item {
            key,
            target: target.to_owned(),
            path: PathBuf::from(file),
            metadata: None,
        });
    }
    // Every input is a regular file of a bounded size before anything is
    // written (a FIFO must not hang, a link to `/dev/zero` must not be read
    // forever).
    let mut opened = Vec::with_capacity(items.len());
    for it in &items {
        opened.push(open_input(&it.path)?);
    }

    let compression = match (&args.compression, &manifest_defaults) {
        (Some(c), _) => *c,
        (None, Some(m)) => m.compression()?,
        (None, None) => Compression::None,
    };
    // Written to a temporary file beside the output and renamed into place.
    let mut fw = KpackFileWriter::create(&args.output, compression)?;
    let w = fw.writer();
    // Keys are final here: `\` was normalised for command-line keys, and
    // keys from an unpacked manifest are kept verbatim.
    w.normalize_keys(false).content_checksum(true);
    if let Some(m) = &manifest_defaults {
        w.like_unpacked(m);
    }
    if args.no_zstd_checksum {
        w.content_checksum(false);
    }
    if let Some(g) = &args.group_name {
        w.group_name(g.clone());
    }
    if let Some(f) = &args.arch_family {
        w.arch_family(f.clone());
    }
    if !args.arches.is_empty() {
        w.arches(args.arches.iter().cloned());
    }
    // Code objects go from file to file (`none`) or are compressed a few
    // at a time, the large ones streamed (zstd): memory grows with neither
    // the number nor the size of the inputs.
    let spill_dir = match args.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let paths: Vec<PathBuf> = items.iter().map(|it| it.path.clone()).collect();
    let inputs = items
        .into_iter()
        .zip(&opened)
        .zip(&paths)
        .map(|((it, (file, len)), path)| rocpack_kpack::FileInput {
            key: it.key,
            target: it.target,
            file,
            offset: 0,
            len: *len,
            metadata: it.metadata,
            path: Some(path),
        })
        .collect();
    w.add_file_ranges(inputs, &spill_dir)?;
    for (path, (f, len)) in paths.iter().zip(&opened) {
        if f.metadata().map(|m| m.len()).ok() != Some(*len) {
            bail!("{}: changed size while it was read", path.display());
        }
    }
    let summary = fw.finish()?;
    println!(
        "{}: {} code objects, {} bytes, scheme {}",
        args.output.display(),
        summary.kernels,
        summary.total_size,
        compression.scheme()
    );
    Ok(ExitCode::SUCCESS)
}

/// Largest code object `pack` takes from one file (the archive format's own
/// limit is far larger; no real code object comes near this).
const MAX_CODE_OBJECT: u64 = 4 << 30;

/// Opens one input file: regular files only, at most [`MAX_CODE_OBJECT`]
/// bytes; its size.
fn open_input(path: &Path) -> anyhow::Result<(fs::File, u64)> {
    let (f, meta) = rocpack_artifacts::fsutil::open_regular(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    if meta.len() > MAX_CODE_OBJECT {
        bail!(
            "{}: cannot read: file is {} bytes; at most {MAX_CODE_OBJECT} are accepted",
            path.display(),
            meta.len()
        );
    }
    Ok((f, meta.len()))
}
