//! `kpack split-wheel`: one fat wheel in; a host wheel (same file name),
//! one device wheel per GPU target and optional family wheels out
//! (`kpack-reference.md` §12.5).
//!
//! 1. The input (a `.whl`, or an exploded wheel directory) is checked
//!    entry by entry against its RECORD (plain relative paths, no
//!    symlinks, sizes, CRCs, hashes). Of a wheel only the files the split
//!    may change (ELF, PE and `ar` files; database files below the overlay)
//!    are extracted into a private temporary directory; a directory is
//!    copied there whole.
//! 2. That tree is split by `rocpack_artifacts::split` with one manifest
//!    prefix: the overlay root (`--overlay-root`, default the wheel root).
//!    The `.kpack` stem is the distribution name lower-cased, `-` → `_`, so
//!    each host binary's marker points at
//!    `../…/.kpack/<dist>_@GFXARCH@.kpack` below the overlay root.
//! 3. Host wheel: files outside the overlay and unchanged files are copied
//!    compressed as they are, straight from the input wheel; rewritten
//!    binaries are compressed again; database files are gone; METADATA
//!    gains `device-<target>`, `device-<group>` and `device-all` extras
//!    with exact pins; RECORD is regenerated. Written in one pass over the
//!    input's name table, so memory does not grow with the entry count
//!    beyond the table (16 bytes per entry plus its name).
//! 4. Device wheel per target (base arch: `gfx90a:xnack-` and
//!    `gfx90a:xnack+` archives share the `gfx90a` wheel), named
//!    `<prefix>-<target>` (PEP 503), holding the archives and database
//!    files at their wheel paths, pinned to the host version, WHEEL tags
//!    copied from the host.
//! 5. Family wheels (packaging config `architecture_groups`) require the
//!    device wheels of the group's targets that exist, and only those.
//!
//! Everything is written into a staging directory and moved into the
//! output directory only when every wheel was written: never a partial set.

use std::fs;
use std::path::{Path, PathBuf};

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::databases::DatabaseKind;
use rocpack_artifacts::fsutil::{self, FsError};
use rocpack_artifacts::split::Progress;
use rocpack_kpack::commit::StagingDir;
use rocpack_kpack::Compression;
use serde::Serialize;

use crate::names;
use crate::selector::{ExtraNames, SelectorData, SelectorOptions};
use crate::zip;
use crate::WheelError;

mod input;
mod plan;
mod write;

use input::{check_overlay, load_input, read_meta};
use plan::{
    add_extras, find_targets, plan_device_wheel, plan_family_wheels, split_overlay, Planned,
    WheelInfo,
};
use write::{write_wheels, WriteCtx};

/// Directory name the wheel's files are extracted into, below the private
/// artifact directory (it becomes the first component of TOC keys).
const ROOT_NAME: &str = "site-packages";
/// Largest METADATA / WHEEL file read.
const MAX_META: u64 = 16 << 20;
/// The `@GFXARCH@` placeholder of `--device-requires-dist`.
pub const GFXARCH: &str = "@GFXARCH@";

/// Wheel files or exploded directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// `.whl` files.
    #[default]
    Wheel,
    /// One directory per wheel (its files as installed, RECORD included).
    Directory,
}

/// What to split and how.
#[derive(Debug, Clone)]
pub struct WheelSplitOptions {
    /// A `.whl` file or an exploded wheel directory.
    pub input: PathBuf,
    /// Output directory (created; existing wheels are never overwritten).
    pub output_dir: PathBuf,
    /// Device distribution prefix (default `<host distribution>-device`).
    pub device_package_prefix: Option<String>,
    /// Directory (wheel-relative) whose fat binaries are split and where
    /// `.kpack/` goes; `None` or empty: the wheel root.
    pub overlay_root: Option<String>,
    /// Extra `Requires-Dist` of device wheels; `@GFXARCH@` is replaced by
    /// the target (such entries go to target wheels only).
    pub device_requires_dist: Vec<String>,
    /// Database handlers, in priority order.
    pub databases: Vec<DatabaseKind>,
    /// Keep only these targets (base-arch match; see `kpack split`).
    pub gpu_targets: Vec<String>,
    /// `.kpack` compression.
    pub compression: Compression,
    /// Wheels or directories.
    pub output_format: OutputFormat,
    /// Worker threads (`None`: one per CPU). Output does not depend on it.
    pub jobs: Option<usize>,
    /// Packaging config whose `architecture_groups` become family wheels.
    pub config: Option<PackagingConfig>,
    /// Deflate level of wheel entries (0 = store).
    pub zip_level: i64,
    /// `SOURCE_DATE_EPOCH`: timestamp of every entry (default 1980-01-01).
    pub source_date_epoch: Option<u64>,
    /// Also write the device selector sdist (and the host's `device` extra).
    pub selector: Option<SelectorOptions>,
    /// Names of the host's per-target and per-group extras.
    pub extra_names: ExtraNames,
}

/// `SOURCE_DATE_EPOCH` is set but is not a number of seconds.
#[derive(Debug, thiserror::Error)]
#[error("SOURCE_DATE_EPOCH={value:?} is not a number of seconds")]
pub struct BadSourceDateEpoch {
    /// The variable's value.
    pub value: String,
    /// Why it does not parse.
    #[source]
    pub source: std::num::ParseIntError,
}

/// [`WheelSplitOptions::source_date_epoch`] from a `SOURCE_DATE_EPOCH`
/// value (`None` or blank: unset).
pub fn parse_source_date_epoch(value: Option<&str>) -> Result<Option<u64>, BadSourceDateEpoch> {
    match value {
        Some(v) if !v.trim().is_empty() => {
            v.trim()
                .parse()
                .map(Some)
                .map_err(|source| BadSourceDateEpoch {
                    value: v.to_string(),
                    source,
                })
        }
        _ => Ok(None),
    }
}

impl WheelSplitOptions {
    /// Options with defaults for everything but input and output.
    pub fn new(input: impl Into<PathBuf>, output_dir: impl Into<PathBuf>) -> Self {
        WheelSplitOptions {
            input: input.into(),
            output_dir: output_dir.into(),
            device_package_prefix: None,
            overlay_root: None,
            device_requires_dist: Vec::new(),
            databases: Vec::new(),
            gpu_targets: Vec::new(),
            compression: Compression::Zstd { level: 3 },
            output_format: OutputFormat::Wheel,
            jobs: None,
            config: None,
            zip_level: 6,
            source_date_epoch: None,
            selector: None,
            extra_names: ExtraNames::Rocm,
        }
    }
}

/// One written wheel.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WheelFile {
    /// File (or directory) name in the output directory.
    pub file: String,
    /// Distribution name (PEP 503 normalised for generated wheels).
    pub distribution: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Files in it, RECORD included.
    pub files: usize,
    /// `Requires-Dist` added (device and family wheels: all of them).
    pub requires: Vec<String>,
}

/// One device wheel.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeviceWheel {
    /// Target (base arch) it serves.
    pub target: String,
    /// Architectures (target IDs) whose code it holds.
    pub architectures: Vec<String>,
    /// The wheel.
    pub wheel: WheelFile,
    /// `.kpack` archives (wheel paths).
    pub kpacks: Vec<String>,
    /// Database files (wheel paths).
    pub database_files: Vec<String>,
}

/// One family wheel.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FamilyWheel {
    /// Architecture group name.
    pub group: String,
    /// Targets whose device wheels it requires.
    pub members: Vec<String>,
    /// Group architectures with no device wheel (not required).
    pub absent: Vec<String>,
    /// The wheel.
    pub wheel: WheelFile,
}

/// One split fat binary, by wheel path.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FatBinary {
    /// Path inside the wheel.
    pub path: String,
    /// Architectures found in it.
    pub architectures: Vec<String>,
    /// Code objects found.
    pub code_objects: u64,
    /// Size before.
    pub input_bytes: u64,
    /// Size of the host-only rewrite.
    pub output_bytes: u64,
}

/// Result of a wheel split.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WheelSplitReport {
    /// The input wheel (file name).
    pub input: String,
    /// Its size in bytes (sum of file sizes for a directory).
    pub input_bytes: u64,
    /// Host distribution name (as in METADATA).
    pub distribution: String,
    /// Host version.
    pub version: String,
    /// Overlay root (`""`: wheel root).
    pub overlay_root: String,
    /// The host wheel.
    pub host: WheelFile,
    /// Fat binaries rewritten host-only.
    pub fat_binaries: Vec<FatBinary>,
    /// Targets with a device wheel, sorted.
    pub targets: Vec<String>,
    /// Device wheels, by target.
    pub device_wheels: Vec<DeviceWheel>,
    /// Family wheels, in config order.
    pub family_wheels: Vec<FamilyWheel>,
    /// Config groups without any target of this wheel (no family wheel).
    pub skipped_groups: Vec<String>,
    /// `.kpack` compression.
    pub compression: String,
    /// Output format (`wheel` or `directory`).
    pub output_format: String,
    /// The selector sdist (`--selector`).
    pub selector: Option<SelectorFile>,
}

/// The written selector sdist.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SelectorFile {
    /// File name in the output directory.
    pub file: String,
    /// Size in bytes.
    pub bytes: u64,
    /// What its backend chooses from.
    pub data: SelectorData,
}

fn usage(msg: impl Into<String>) -> WheelError {
    WheelError::Usage(msg.into())
}

fn ioerr(path: &Path, what: &'static str, e: std::io::Error) -> WheelError {
    WheelError::Io {
        path: path.to_path_buf(),
        what,
        error: e,
    }
}

/// Splits one wheel. Nothing appears in the output directory unless every
/// wheel was written.
pub fn split_wheel(
    opts: &WheelSplitOptions,
    progress: &dyn Progress,
) -> Result<WheelSplitReport, WheelError> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = opts.jobs {
        b = b.num_threads(n.max(1));
    }
    let pool = b
        .build()
        .map_err(|e| usage(format!("cannot start worker threads: {e}")))?;
    pool.install(|| split_inner(opts, progress))
}

fn check_output(opts: &WheelSplitOptions) -> Result<(), WheelError> {
    let inp =
        fsutil::absolute_lexical(&opts.input).map_err(|e| ioerr(&opts.input, "resolve", e))?;
    let out = fsutil::absolute_lexical(&opts.output_dir)
        .map_err(|e| ioerr(&opts.output_dir, "resolve", e))?;
    let inp_real = fs::canonicalize(&inp).unwrap_or(inp.clone());
    let out_real = rocpack_kpack::weakly_canonical(&out);
    if inp.is_dir() && (out.starts_with(&inp) || out_real.starts_with(&inp_real)) {
        return Err(usage(format!(
            "output directory {} is inside the input wheel directory {}",
            opts.output_dir.display(),
            opts.input.display()
        )));
    }
    Ok(())
}

/// Each `--device-requires-dist` becomes one `Requires-Dist:` line of a
/// METADATA file: it must be one line (a newline would add headers of its
/// own) and start with a distribution name.
fn check_requires(reqs: &[String]) -> Result<(), WheelError> {
    for r in reqs {
        let bad = |why: String| usage(format!("--device-requires-dist {r:?}: {why}"));
        if let Some(c) = r.chars().find(|c| c.is_control()) {
            return Err(bad(format!(
                "contains {} (a METADATA field is one line: it would add headers of its own)",
                match c {
                    '\n' => "a newline".to_string(),
                    '\r' => "a carriage return".to_string(),
                    c => format!("the control character U+{:04X}", u32::from(c)),
                }
            )));
        }
        let t = r.trim().replace(GFXARCH, "gfx");
        let name: String = t
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            .collect();
        if !names::is_valid_name(&name) {
            return Err(bad(
                "does not start with a distribution name (PEP 508: `name[extras] (version specifiers); markers`)"
                    .into(),
            ));
        }
    }
    Ok(())
}

fn split_inner(
    opts: &WheelSplitOptions,
    progress: &dyn Progress,
) -> Result<WheelSplitReport, WheelError> {
    check_requires(&opts.device_requires_dist)?;
    check_output(opts)?;
    let staging = StagingDir::new(&opts.output_dir).map_err(FsError::from)?;
    let parent = staging
        .dest()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let work = tempfile::Builder::new()
        .prefix(".kpack-split-wheel-")
        .tempdir_in(&parent)
        .map_err(|e| ioerr(&parent, "create temporary directory", e))?;
    let art = work.path().join("art");
    let root = art.join(ROOT_NAME);
    let tmp = work.path().join("zip");
    fs::create_dir_all(&tmp).map_err(|e| ioerr(&tmp, "create directory", e))?;
    let digests = zip::Digests::new(&tmp)?;

    // 1. Input.
    let loaded = load_input(opts, &root, &tmp, &digests)?;
    let (input_name, input_bytes) = (loaded.name.clone(), loaded.bytes);
    // 2. dist-info, METADATA, WHEEL.
    let mut meta = read_meta(&loaded, &root)?;
    // 3. Overlay root.
    let overlay = check_overlay(opts, &loaded, &root)?;
    // 4. Split the overlay with the artifact splitter.
    let split = split_overlay(opts, work.path(), &art, &overlay, &meta.name, progress)?;
    // 5. Targets: base arch of each architecture written.
    let mut targets = find_targets(opts, &split.report, &meta)?;
    let wheel_info = WheelInfo {
        dist_name: &meta.name,
        host_name: &meta.host_name,
        wheel_meta: &meta.wheel_meta,
        version: &meta.version,
    };
    // 6. Device wheels.
    let mut planned: Vec<Planned> = Vec::new();
    let mut device_wheels = Vec::new();
    for (target, arts) in &targets.by_target {
        let (w, d) = plan_device_wheel(
            opts,
            &loaded,
            &targets,
            &split,
            &overlay,
            &wheel_info,
            (target, arts),
        )?;
        device_wheels.push(d);
        planned.push(w);
    }
    // 7. Family wheels.
    let (mut family_wheels, skipped_groups) =
        plan_family_wheels(opts, &mut targets, &wheel_info, &mut planned)?;
    // 8. Host wheel.
    let (host_requires, selector) = add_extras(opts, &mut meta, &targets, &family_wheels)?;
    let host_file = meta.host_name.file_name();
    // 9. Write every wheel into the staging directory, then commit.
    let cx = WriteCtx {
        opts,
        staging: &staging,
        loaded: &loaded,
        digests: &digests,
        tmp: &tmp,
        root: &root,
    };
    let (written, selector) =
        write_wheels(&cx, &meta, &split, &overlay, &host_file, planned, selector)?;
    staging.commit().map_err(FsError::from)?;
    drop(loaded);
    drop(digests);
    drop(work);

    let mut it = written.into_iter();
    let mut fill = |w: &mut WheelFile| {
        if let Some((n, x)) = it.next() {
            w.file = n;
            w.bytes = x.bytes;
            w.files = x.files;
        }
    };
    let mut host = WheelFile {
        file: host_file,
        distribution: meta.name.clone(),
        bytes: 0,
        files: 0,
        requires: host_requires,
    };
    fill(&mut host);
    for d in &mut device_wheels {
        fill(&mut d.wheel);
    }
    for f in &mut family_wheels {
        fill(&mut f.wheel);
    }
    Ok(WheelSplitReport {
        input: input_name.unwrap_or_else(|| opts.input.display().to_string()),
        input_bytes,
        distribution: meta.name,
        version: meta.version,
        overlay_root: overlay,
        host,
        fat_binaries: split.fat_binaries,
        targets: targets.by_target.keys().cloned().collect(),
        device_wheels,
        family_wheels,
        skipped_groups,
        compression: split.report.compression,
        output_format: match opts.output_format {
            OutputFormat::Wheel => "wheel".into(),
            OutputFormat::Directory => "directory".into(),
        },
        selector,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_source_date_epoch;

    #[test]
    fn source_date_epoch_values() {
        assert_eq!(parse_source_date_epoch(None).unwrap(), None);
        assert_eq!(parse_source_date_epoch(Some(" ")).unwrap(), None);
        assert_eq!(parse_source_date_epoch(Some(" 42\n")).unwrap(), Some(42));
        let e = parse_source_date_epoch(Some("x")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "SOURCE_DATE_EPOCH=\"x\" is not a number of seconds"
        );
        assert!(std::error::Error::source(&e).is_some());
    }
}
