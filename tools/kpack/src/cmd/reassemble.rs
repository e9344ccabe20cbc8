//! `kpack reassemble --host FILE --kpack-dir DIR -o OUT`: rebuild the fat
//! binary (ELF, static archive or PE32+ image) from a split host binary and its `.kpack`
//! files. For every wrapper `co_index` *i* the code objects stored under
//! `<kernel_name>#<i>` (kernel name from the marker) in all `.kpack` files
//! under DIR become one bundle. When the split recorded the bundle's layout
//! (`metadata.bundle`, docs/formats/split-elf.md) and every entry is found,
//! the bundle is rebuilt exactly: same container format and version (CCOB
//! v1/v2/v3, same method), same entry IDs, order and offsets, so its
//! uncompressed bytes equal the input's. Otherwise (older splits, a subset
//! of the archives) it is rebuilt as clang writes one: host entry first,
//! device entries sorted by ID, 4096-aligned, as CCOB v2 (zstd) if the
//! uncompressed bundles do not fit where `.hip_fatbin` was.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use rocpack_bundle::Format;
use rocpack_image::Analysis;
use rocpack_kpack::bundle_meta::{self, EntryPlace};
use rocpack_kpack::{KpackReader, Marker};

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

/// One code object found in the archives.
struct Found {
    data: Vec<u8>,
    /// Its place in the original bundle (`metadata.bundle`), if recorded.
    place: Option<EntryPlace>,
}

/// The bundles (by co_index) of one split file, from the archives. Each
/// bundle whose layout the split recorded is rebuilt exactly (format,
/// version, entry IDs, order, offsets); the others in clang's canonical
/// form (`canonical` counts them, with the first reason). `effort` (0 to
/// [`MAX_EFFORT`]) is how hard compressed bundles are squeezed: the
/// decompressed bytes are the same at every effort, only their compressed
/// size differs, and a rebuilt `.hip_fatbin` must fit where the original was.
fn bundles_for(
    info: &Analysis,
    readers: &[(PathBuf, KpackReader)],
    what: &str,
    effort: u8,
    canonical: &mut (usize, Option<String>),
) -> rocpack_image::Result<Vec<Vec<u8>>> {
    let err = |msg: String| rocpack_image::Error::Layout {
        offset: 0,
        what: msg,
    };
    let wrappers = info.wrapper_markers();
    let w0 = wrappers
        .first()
        .ok_or_else(|| err(format!("{what}: split binary without wrappers")))?;
    let bytes =
        w0.2.ok_or_else(|| err(format!("{what}: wrapper 0 does not point at a marker")))?;
    let marker = Marker::decode(bytes).map_err(|e| err(format!("{what}: bad marker: {e}")))?;
    let count = wrappers.iter().map(|w| w.1 as usize + 1).max().unwrap_or(0);
    let mut bundles = Vec::with_capacity(count);
    for co in 0..count {
        let key = marker.lookup_key(co as u64);
        // By full entry ID (the metadata's `target`, else ours).
        let mut found: BTreeMap<String, Found> = BTreeMap::new();
        for (path, r) in readers {
            for e in r.entries().iter().filter(|e| e.key == key) {
                let data = r
                    .get_entry(e)
                    .map_err(|x| err(format!("{}: {x}", path.display())))?;
                let place = e.metadata.as_ref().and_then(bundle_meta::decode);
                let id = place
                    .as_ref()
                    .map(|p| p.id.clone())
                    .unwrap_or_else(|| format!("{DEVICE_PREFIX}{}", e.target));
                if let Some(prev) = found.get(&id) {
                    if prev.data.as_slice() != data.as_ref() {
                        return Err(err(format!(
                            "{what}: `{key}` for {} differs between archives",
                            e.target
                        )));
                    }
                    continue;
                }
                found.insert(
                    id,
                    Found {
                        data: data.into_owned(),
                        place,
                    },
                );
            }
        }
        if found.is_empty() {
            return Err(err(format!(
                "{what}: no code objects for `{key}` in any .kpack file"
            )));
        }
        match exact_bundle(&found, effort) {
            Ok(b) => bundles.push(b),
            Err(why) => {
                canonical.0 += 1;
                canonical.1.get_or_insert(format!("bundle {co}: {why}"));
                let mut entries: Vec<(&str, &[u8])> = vec![(HOST_ID, &[][..])];
                entries.extend(found.iter().map(|(id, f)| (id.as_str(), f.data.as_slice())));
                let bundle = rocpack_bundle::write_uncompressed(&entries);
                if effort > 0 {
                    let c = rocpack_bundle::write_ccob_long(
                        &bundle,
                        2,
                        rocpack_bundle::Method::Zstd,
                        19,
                    )
                    .map_err(|x| err(format!("{what}: {x}")))?;
                    bundles.push(c);
                } else {
                    bundles.push(bundle);
                }
            }
        }
    }
    Ok(bundles)
}

/// Highest `effort` of [`bundles_for`].
const MAX_EFFORT: u8 = 2;

/// The bundle in its original layout and container format, or why not.
/// Compressed at LLVM's default level (effort 0), then with long-distance
/// matching at level 9 (1, what current LLVM writes) and 19 (2).
fn exact_bundle(found: &BTreeMap<String, Found>, effort: u8) -> Result<Vec<u8>, String> {
    let mut parts = Vec::with_capacity(found.len());
    for f in found.values() {
        let place = f
            .place
            .as_ref()
            .ok_or("the split did not record its layout")?;
        parts.push((place, f.data.len() as u64));
    }
    let layout = bundle_meta::restore(&parts)?;
    let mut data: Vec<Option<&[u8]>> = vec![None; layout.entries.len()];
    for f in found.values() {
        if let Some(p) = &f.place {
            if let Some(slot) = usize::try_from(p.index).ok().and_then(|i| data.get_mut(i)) {
                *slot = Some(&f.data);
            }
        }
    }
    let raw = layout.build(&data).map_err(|e| e.to_string())?;
    match layout.format {
        Format::Uncompressed => Ok(raw),
        Format::Ccob { version, method } => match effort {
            0 => rocpack_bundle::write_ccob(&raw, version, method),
            1 => rocpack_bundle::write_ccob_long(&raw, version, method, 9),
            _ => rocpack_bundle::write_ccob_long(&raw, version, method, 19),
        }
        .map_err(|e| e.to_string()),
    }
}

/// Largest host file `reassemble` reads (real fat libraries stay well below).
const MAX_HOST_FILE: u64 = 64 << 30;

pub fn run(args: ReassembleArgs) -> anyhow::Result<ExitCode> {
    // Regular files only, bounded by their size (a FIFO must not hang, a
    // link to /dev/zero must not be read forever).
    let host = rocpack_artifacts::fsutil::read_bounded(&args.host, MAX_HOST_FILE)
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
    let mut canonical = (0usize, None::<String>);
    let mut build = |effort: u8| {
        canonical = (0, None);
        rocpack_image::reassemble_file(&host, &mut |member, info| {
            let what = if member.is_empty() {
                name.clone()
            } else {
                format!("{name}({member})")
            };
            bundles_for(info, &readers, &what, effort, &mut canonical)
        })
    };
    // Squeeze harder only while the bundles do not fit.
    let mut effort = 0;
    let out = loop {
        match build(effort) {
            Ok(o) => break o,
            Err(
                rocpack_image::Error::Layout { .. }
                | rocpack_image::Error::Elf(rocpack_elf::Error::Layout { .. }),
            ) if effort < MAX_EFFORT => effort += 1,
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!("failed to reassemble `{name}`")))
            }
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
    if let (n, Some(why)) = &canonical {
        eprintln!(
            "kpack: note: {n} bundle(s) rebuilt in clang's canonical form, not the original layout (first: {why})"
        );
    }
    eprintln!(
        "kpack: reassembled `{}` ({} bytes)",
        args.output.display(),
        out.len()
    );
    Ok(ExitCode::SUCCESS)
}
