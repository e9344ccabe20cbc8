//! `kpack reassemble --host FILE --kpack-dir DIR -o OUT`: rebuild the fat
//! binary (ELF or static archive) from a split host binary and its `.kpack`
//! files. For every wrapper `co_index` *i* the code objects stored under
//! `<kernel_name>#<i>` (kernel name from the marker) in all `.kpack` files
//! under DIR become one bundle: host entry first, device entries sorted by
//! ID, 4096-aligned, as clang writes them. If the uncompressed bundles do not
//! fit where `.hip_fatbin` was, they are written as CCOB v2 (zstd).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use rocpack_elf::FatBinaryInfo;
use rocpack_kpack::{KpackReader, Marker};

#[derive(Debug, clap::Args)]
pub struct ReassembleArgs {
    /// The split (host-only) ELF file or static archive.
    #[arg(long, value_name = "FILE")]
    pub host: PathBuf,
    /// Directory searched (recursively) for `.kpack` files.
    #[arg(long, value_name = "DIR")]
    pub kpack_dir: PathBuf,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
}

/// Host entry ID clang-19 writes.
const HOST_ID: &str = "host-x86_64-unknown-linux--";
const DEVICE_PREFIX: &str = "hipv4-amdgcn-amd-amdhsa--";

fn find_kpacks(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("failed to read `{}`", dir.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("failed to read `{}`", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let ft = e.file_type()?;
        if ft.is_dir() {
            find_kpacks(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "kpack") {
            out.push(p);
        }
    }
    Ok(())
}

/// The bundles (by co_index) of one split file, from the archives.
fn bundles_for(
    info: &FatBinaryInfo,
    readers: &[(PathBuf, KpackReader)],
    what: &str,
    compress: bool,
) -> rocpack_elf::Result<Vec<Vec<u8>>> {
    let err = |msg: String| rocpack_elf::Error::Layout {
        offset: 0,
        what: msg,
    };
    let w0 = info
        .wrappers
        .first()
        .ok_or_else(|| err(format!("{what}: split binary without wrappers")))?;
    let bytes = w0
        .marker_bytes(info)
        .ok_or_else(|| err(format!("{what}: wrapper 0 does not point at a marker")))?;
    let marker = Marker::decode(bytes).map_err(|e| err(format!("{what}: bad marker: {e}")))?;
    let count = info
        .wrappers
        .iter()
        .map(|w| w.co_index() as usize + 1)
        .max()
        .unwrap_or(0);
    let mut bundles = Vec::with_capacity(count);
    for co in 0..count {
        let key = marker.lookup_key(co as u64);
        let mut objs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (path, r) in readers {
            for e in r.entries().iter().filter(|e| e.key == key) {
                let data = r
                    .get_entry(e)
                    .map_err(|x| err(format!("{}: {x}", path.display())))?;
                let id = format!("{DEVICE_PREFIX}{}", e.target);
                if let Some(prev) = objs.get(&id) {
                    if prev.as_slice() != data.as_ref() {
                        return Err(err(format!(
                            "{what}: `{key}` for {} differs between archives",
                            e.target
                        )));
                    }
                    continue;
                }
                objs.insert(id, data.into_owned());
            }
        }
        if objs.is_empty() {
            return Err(err(format!(
                "{what}: no code objects for `{key}` in any .kpack file"
            )));
        }
        let mut entries: Vec<(String, Vec<u8>)> = vec![(HOST_ID.to_string(), Vec::new())];
        entries.extend(objs);
        let bundle = rocpack_bundle::write_uncompressed(&entries);
        if compress {
            let c = rocpack_bundle::write_ccob_level(&bundle, 2, rocpack_bundle::Method::Zstd, 19)
                .map_err(|x| err(format!("{what}: {x}")))?;
            bundles.push(c);
        } else {
            bundles.push(bundle);
        }
    }
    Ok(bundles)
}

pub fn run(args: ReassembleArgs) -> anyhow::Result<ExitCode> {
    let host = std::fs::read(&args.host)
        .with_context(|| format!("failed to read `{}`", args.host.display()))?;
    let mut paths = Vec::new();
    find_kpacks(&args.kpack_dir, &mut paths)?;
    if paths.is_empty() {
        bail!("no .kpack files under `{}`", args.kpack_dir.display());
    }
    let mut readers = Vec::with_capacity(paths.len());
    for p in paths {
        let r =
            KpackReader::open(&p).with_context(|| format!("failed to open `{}`", p.display()))?;
        readers.push((p, r));
    }
    let name = args.host.display().to_string();
    let build = |compress: bool| {
        rocpack_elf::reassemble_file(&host, &mut |member, info| {
            let what = if member.is_empty() {
                name.clone()
            } else {
                format!("{name}({member})")
            };
            bundles_for(info, &readers, &what, compress)
        })
    };
    let out = match build(false) {
        Ok(o) => o,
        Err(rocpack_elf::Error::Layout { .. }) => {
            build(true).with_context(|| format!("failed to reassemble `{name}`"))?
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("failed to reassemble `{name}`")))
        }
    };
    // Write atomically next to the output, with the host file's mode.
    let dir = args
        .output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = args
        .output
        .file_name()
        .with_context(|| format!("bad output path `{}`", args.output.display()))?;
    let tmp = dir.join(format!(
        ".{}.kpack-reassemble.tmp",
        file_name.to_string_lossy()
    ));
    let written = (|| -> anyhow::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_all()?;
        let perm = std::fs::metadata(&args.host)?.permissions();
        std::fs::set_permissions(&tmp, perm)?;
        std::fs::rename(&tmp, &args.output)?;
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.context(format!("failed to write `{}`", args.output.display())));
    }
    eprintln!(
        "kpack: reassembled `{}` ({} bytes)",
        args.output.display(),
        out.len()
    );
    Ok(ExitCode::SUCCESS)
}
