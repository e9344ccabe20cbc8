//! Split ("map" phase): one TheRock artifact directory in, one generic
//! artifact (host code, markers, generic files) plus one artifact per GPU
//! architecture (`.kpack` archives and arch database files) out.
//!
//! Layout written under the output directory, for artifact prefix `NAME`:
//!
//! ```text
//! NAME_generic/artifact_manifest.txt          every processed prefix
//! NAME_generic/<prefix>/…                     host-only binaries, generic files, symlinks
//! NAME_<arch>/artifact_manifest.txt           prefixes with content for <arch>
//! NAME_<arch>/<prefix>/.kpack/NAME_<arch>.kpack
//! NAME_<arch>/<prefix>/<db file relpath>      database files of <arch>
//! ```
//!
//! Each prefix gets its **own** `.kpack` holding the code objects of the
//! binaries below that prefix, so the marker search path
//! `../…/.kpack/NAME_@GFXARCH@.kpack` (relative to the binary) resolves in
//! every layout where the prefix stays intact. rocm-kpack writes one archive
//! under the first prefix only, so binaries of the other prefixes point at a
//! file that does not exist.
//!
//! TOC keys are `<prefix>/<relpath>#<i>` where `i` is the index of the
//! bundle in `.hip_fatbin` (the `co_index` the host-only rewrite stores in
//! each wrapper; several wrappers of an `-fgpu-rdc` binary share one).
//! Static archive members use `<prefix>/<relpath>(<member>)` as kernel name.
//!
//! Everything is built in a staging directory beside the output and moved
//! into place only when the whole split succeeded; walks are sorted, TOCs are
//! written in sorted key order, so the result is byte-identical whatever the
//! thread count or the directories involved.

//! The work is done in three steps, one module each: [`scan`] walks and
//! classifies the input (writing host-only rewrites as it goes), [`plan`]
//! decides which architectures are kept and where every file and code
//! object goes, [`write`] writes the generic and per-architecture
//! artifacts. This module holds the options and report types and commits
//! the result through `rocpack-kpack`'s [`StagingDir`](rocpack_kpack::commit::StagingDir).

mod filter;
mod plan;
mod scan;
mod write;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rocpack_kpack::Compression;
use serde::Serialize;

use crate::databases::DatabaseKind;
use crate::fsutil::{self, FsError, IoContext};
use crate::manifest::{ArtifactManifest, ManifestError};
use crate::walk::WalkError;

/// What to split and how.
#[derive(Debug, Clone)]
pub struct SplitOptions {
    /// The artifact directory (holds `artifact_manifest.txt`).
    pub artifact_dir: PathBuf,
    /// Artifact prefix `NAME` (e.g. `blas_lib`): outputs are `NAME_generic`, `NAME_<arch>`.
    pub artifact_prefix: String,
    /// Output directory (created; may exist, but not hold the outputs already).
    pub output_dir: PathBuf,
    /// Database handlers, in priority order.
    pub databases: Vec<DatabaseKind>,
    /// Compression of the `.kpack` archives.
    pub compression: Compression,
    /// Architectures to drop: `gfx906` drops `gfx906` and every
    /// `gfx906:<features>`; `gfx906:xnack-` drops only that exact target.
    pub exclude_arch: Vec<String>,
    /// Keep only these targets, matched by base arch in any spelling
    /// (`gfx90a` keeps `gfx90a:xnack-` and `…_gfx90a-xnack-.hsaco`;
    /// `gfx1250-strict` is not `gfx1250`). Everything else is dropped, from
    /// the generic artifact too. Empty: keep every target.
    pub gpu_targets: Vec<String>,
    /// Worker threads (`None`: one per CPU). Output does not depend on it.
    pub jobs: Option<usize>,
    /// Directories a build system staged the inputs from: symlinks into
    /// them stand for the inputs they mirror ([`walk::walk_staged`]).
    pub staging_roots: Vec<PathBuf>,
}

impl SplitOptions {
    /// Options for splitting `artifact_dir` (artifact prefix `prefix`)
    /// into `output_dir` with the CLI's defaults: no database handler,
    /// zstd, every target, one worker per CPU, no staging roots.
    pub fn new(
        artifact_dir: impl Into<PathBuf>,
        prefix: impl Into<String>,
        output_dir: impl Into<PathBuf>,
    ) -> SplitOptions {
        SplitOptions {
            artifact_dir: artifact_dir.into(),
            artifact_prefix: prefix.into(),
            output_dir: output_dir.into(),
            databases: Vec::new(),
            compression: Compression::zstd(),
            exclude_arch: Vec::new(),
            gpu_targets: Vec::new(),
            jobs: None,
            staging_roots: Vec::new(),
        }
    }
}

/// Progress callbacks (the CLI draws a bar on a TTY).
pub trait Progress: Sync {
    /// A phase with `total` units starts.
    fn begin(&self, _phase: &str, _total: u64) {}
    /// `n` units done.
    fn advance(&self, _n: u64) {}
    /// Everything is done.
    fn finish(&self) {}
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// Why a split failed. Every variant names the file (and, where there is
/// one, the byte offset).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SplitError {
    /// Bad arguments (names, overlapping directories, existing outputs).
    #[error("{0}")]
    Usage(String),
    /// The artifact manifest is missing or invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The input tree has something a split must not copy.
    #[error(transparent)]
    Walk(#[from] WalkError),
    /// A file-system operation failed.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// A fat binary (ELF file, `ar` archive, PE32+ image) could not be
    /// analysed or rewritten.
    #[error("{path}: byte offset {offset}: {error}")]
    Image {
        /// The input file.
        path: PathBuf,
        /// Byte offset the error is about.
        offset: u64,
        /// The error (part of the message).
        error: rocpack_image::Error,
    },
    /// A bundle could not be parsed.
    #[error("{path}: byte offset {offset}: {error}")]
    Bundle {
        /// The input file.
        path: PathBuf,
        /// Byte offset of the bundle.
        offset: u64,
        /// The error (part of the message).
        error: rocpack_bundle::Error,
    },
    /// A `.kpack` archive could not be written.
    #[error("{path}: {error}")]
    Kpack {
        /// The archive being written.
        path: PathBuf,
        /// The error (part of the message).
        error: rocpack_kpack::Error,
    },
    /// Several artifacts of a batch failed.
    #[error("{} artifact(s) failed:\n{}", .0.len(), .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Batch(Vec<SplitError>),
}

impl SplitError {
    /// Whether the output directory is untouched: true for every error but
    /// a commit that failed after outputs started moving into place.
    pub fn wrote_nothing(&self) -> bool {
        match self {
            SplitError::Fs(e) => !e.wrote_something(),
            SplitError::Batch(v) => v.iter().all(SplitError::wrote_nothing),
            _ => true,
        }
    }
}

/// One code object written to a `.kpack`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KpackSummary {
    /// Path relative to the output directory.
    pub path: String,
    /// Number of code objects.
    pub kernels: u64,
    /// Total uncompressed code-object bytes.
    pub code_bytes: u64,
    /// Archive size in bytes.
    pub file_bytes: u64,
}

/// One output artifact for an architecture.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ArchArtifact {
    /// The architecture (target ID, features kept).
    pub arch: String,
    /// Directory name (`NAME_<arch>`).
    pub name: String,
    /// Prefixes in its manifest.
    pub prefixes: Vec<String>,
    /// `.kpack` archives written.
    pub kpacks: Vec<KpackSummary>,
    /// Database files, relative to the artifact directory.
    pub database_files: Vec<String>,
}

/// One fat binary that was split.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FatBinarySummary {
    /// `<prefix>/<relpath>` (also the marker's kernel name for ELF files).
    pub path: String,
    /// Bundles found (all archive members together).
    pub bundles: u64,
    /// Device code objects found (before exclusion).
    pub code_objects: u64,
    /// Architectures found in it, sorted.
    pub architectures: Vec<String>,
    /// Input size in bytes.
    pub input_bytes: u64,
    /// Host-only output size in bytes.
    pub output_bytes: u64,
}

/// Result of splitting one artifact directory.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SplitReport {
    /// `NAME`.
    pub artifact_prefix: String,
    /// Prefixes processed (manifest order).
    pub prefixes: Vec<String>,
    /// Manifest prefixes that do not exist in the input (skipped).
    pub missing_prefixes: Vec<String>,
    /// Architectures discovered in the input, sorted (before exclusion).
    pub discovered_architectures: Vec<String>,
    /// Architectures dropped by `--exclude-arch`.
    pub excluded_architectures: Vec<String>,
    /// Architectures written, sorted.
    pub architectures: Vec<String>,
    /// The generic artifact's directory name.
    pub generic: String,
    /// Regular files copied to the generic artifact (fat binaries excluded).
    pub generic_files: u64,
    /// Symlinks recreated in the generic artifact.
    pub symlinks: u64,
    /// Fat binaries rewritten host-only.
    pub fat_binaries: Vec<FatBinarySummary>,
    /// Per-architecture artifacts.
    pub arch_artifacts: Vec<ArchArtifact>,
    /// Compression scheme of the archives.
    pub compression: String,
    /// Options that matched or left nothing (a database handler that
    /// claimed no file, a `--gpu-targets` target the artifact lacks, an
    /// `--exclude-arch` that dropped every code object); printed on stderr.
    pub warnings: Vec<String>,
    /// `--split-databases` handlers that claimed no file of this artifact.
    pub unmatched_databases: Vec<String>,
    /// `--gpu-targets` values this artifact has nothing for.
    pub unmatched_gpu_targets: Vec<String>,
}

/// Is `arch` dropped by one of `excludes`?
pub fn is_excluded(arch: &str, excludes: &[String]) -> bool {
    excludes.iter().any(|e| {
        if e.contains(':') {
            e == arch
        } else {
            arch == e || arch.split(':').next() == Some(e.as_str())
        }
    })
}

fn check_name(kind: &str, name: &str) -> Result<(), SplitError> {
    let bad = name.is_empty()
        || name == "."
        || name == ".."
        || name.starts_with('.')
        || name.contains('/')
        || name.contains('\\')
        || name.contains('\0');
    if bad {
        Err(SplitError::Usage(format!(
            "invalid {kind} `{name}`: must be a plain, non-hidden file name"
        )))
    } else {
        Ok(())
    }
}

fn mkdir_p(p: &Path) -> Result<(), SplitError> {
    fs::create_dir_all(p).ctx(p, "create directory")?;
    Ok(())
}

/// Splits one artifact directory into `stage` (a directory that will be
/// moved into the output as a whole): scan, plan, write. Returns the report.
fn split_into(
    opts: &SplitOptions,
    stage: &Path,
    progress: &dyn Progress,
) -> Result<SplitReport, SplitError> {
    check_name("artifact prefix", &opts.artifact_prefix)?;
    let name = &opts.artifact_prefix;
    let manifest = ArtifactManifest::read_dir(&opts.artifact_dir)?;
    let generic_name = format!("{name}_generic");
    let generic_root = stage.join(&generic_name);
    // Decompressed CCOB payloads live here until the archives are written.
    let spill = scan::Spill::new(stage)?;
    let scanned = scan::scan(opts, &manifest, &generic_root, &spill, progress)?;
    let mut plan = plan::plan(opts, scanned)?;
    let generic = write::write_generic(&plan, &generic_root)?;
    let arch_artifacts = write::write_arch_artifacts(opts, stage, &mut plan, &spill, progress)?;
    spill.check_inputs()?;
    Ok(SplitReport {
        artifact_prefix: name.clone(),
        prefixes: generic.manifest.prefixes().to_vec(),
        missing_prefixes: plan.missing,
        discovered_architectures: plan.discovered.into_iter().collect(),
        excluded_architectures: plan.excluded,
        architectures: arch_artifacts.iter().map(|a| a.arch.clone()).collect(),
        generic: generic_name,
        generic_files: generic.files,
        symlinks: generic.symlinks,
        fat_binaries: plan.fat_summaries,
        arch_artifacts,
        compression: opts.compression.scheme().as_str().to_string(),
        warnings: {
            let mut w = plan::no_op_warnings(
                &plan.unmatched_databases,
                &plan.unmatched_targets,
                "the artifact",
            );
            w.extend(plan.warnings);
            w
        },
        unmatched_databases: plan
            .unmatched_databases
            .iter()
            .map(|k| k.name().to_string())
            .collect(),
        unmatched_gpu_targets: plan.unmatched_targets,
    })
}

/// Rejects an output directory inside the input (the walk would see it).
fn check_dirs(artifact_dir: &Path, output_dir: &Path) -> Result<(), SplitError> {
    let a = fsutil::absolute_lexical(artifact_dir).ctx(artifact_dir, "resolve")?;
    let o = fsutil::absolute_lexical(output_dir).ctx(output_dir, "resolve")?;
    let a_real = fs::canonicalize(&a).unwrap_or(a.clone());
    // Through every symlink on the way, even where the output does not
    // exist yet: a symlinked parent must not hide that it is inside.
    let o_parent_real = rocpack_kpack::weakly_canonical(&o);
    if o.starts_with(&a) || o_parent_real.starts_with(&a_real) {
        return Err(SplitError::Usage(format!(
            "output directory {} is inside the artifact directory {}",
            output_dir.display(),
            artifact_dir.display()
        )));
    }
    Ok(())
}

/// Output directory names a report produced.
fn output_names(r: &SplitReport) -> Vec<OsString> {
    let mut v = vec![OsString::from(&r.generic)];
    v.extend(r.arch_artifacts.iter().map(|a| OsString::from(&a.name)));
    v
}

/// Runs `f` on a thread pool of `jobs` threads (`None`: rayon's default;
/// capped by [`crate::jobs::cap`]).
fn with_pool<T: Send>(jobs: Option<usize>, f: impl FnOnce() -> T + Send) -> Result<T, SplitError> {
    let pool = crate::jobs::pool(jobs)
        .map_err(|e| SplitError::Usage(format!("cannot start {jobs:?} worker threads: {e}")))?;
    Ok(pool.install(f))
}

/// Splits one artifact directory. Nothing appears in the output directory
/// unless the whole split succeeds.
pub fn split_artifact(
    opts: &SplitOptions,
    progress: &dyn Progress,
) -> Result<SplitReport, SplitError> {
    with_pool(opts.jobs, || split_artifact_inner(opts, progress))?
}

fn split_artifact_inner(
    opts: &SplitOptions,
    progress: &dyn Progress,
) -> Result<SplitReport, SplitError> {
    check_name("artifact prefix", &opts.artifact_prefix)?;
    check_dirs(&opts.artifact_dir, &opts.output_dir)?;
    let generic = OsString::from(format!("{}_generic", opts.artifact_prefix));
    fsutil::commit_outputs(
        &opts.output_dir,
        &[generic],
        |staging| {
            let report = split_into(opts, staging, progress)?;
            let names = output_names(&report);
            Ok((report, names))
        },
        already_exists,
    )
}

/// The error for an output that is already in the output directory.
fn already_exists(path: &Path) -> SplitError {
    SplitError::Usage(format!("{}: already exists", path.display()))
}

/// One artifact directory found by [`batch_artifacts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchItem {
    /// The artifact directory.
    pub dir: PathBuf,
    /// Its artifact prefix (directory name without the last `_<family>`).
    pub artifact_prefix: String,
}

/// Artifact directories under `parent` (sorted): subdirectories holding an
/// `artifact_manifest.txt` whose name has a `_<family>` suffix that is not
/// `generic`, as rocm-kpack's batch mode selects them.
pub fn batch_artifacts(parent: &Path) -> Result<Vec<BatchItem>, SplitError> {
    let mut out = Vec::new();
    for n in fsutil::sorted_names(parent).ctx(parent, "read directory")? {
        let dir = parent.join(&n);
        let Some(n) = n.to_str() else { continue };
        let is_dir = fs::symlink_metadata(&dir)
            .map(|m| m.is_dir())
            .unwrap_or(false);
        if !is_dir || !dir.join(crate::manifest::MANIFEST_FILE).is_file() {
            continue;
        }
        let Some((prefix, family)) = n.rsplit_once('_') else {
            continue;
        };
        if family == "generic" || prefix.is_empty() {
            continue;
        }
        out.push(BatchItem {
            dir,
            artifact_prefix: prefix.to_string(),
        });
    }
    Ok(out)
}

/// Splits every artifact directory under `parent` into one output
/// directory. All or nothing: when any artifact fails, every failure is
/// reported and nothing is written.
pub fn split_batch(
    parent: &Path,
    template: &SplitOptions,
    progress: &dyn Progress,
) -> Result<Vec<SplitReport>, SplitError> {
    with_pool(template.jobs, || {
        split_batch_inner(parent, template, progress)
    })?
}

fn split_batch_inner(
    parent: &Path,
    template: &SplitOptions,
    progress: &dyn Progress,
) -> Result<Vec<SplitReport>, SplitError> {
    check_dirs(parent, &template.output_dir)?;
    let items = batch_artifacts(parent)?;
    fsutil::commit_outputs(
        &template.output_dir,
        &[],
        |staging| split_batch_into(&items, template, staging, progress),
        already_exists,
    )
}

/// Splits `items` into `staging`; returns the reports and the output names.
fn split_batch_into(
    items: &[BatchItem],
    template: &SplitOptions,
    staging: &Path,
    progress: &dyn Progress,
) -> Result<(Vec<SplitReport>, Vec<OsString>), SplitError> {
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    let mut names: Vec<OsString> = Vec::new();
    for item in items {
        let opts = SplitOptions {
            artifact_dir: item.dir.clone(),
            artifact_prefix: item.artifact_prefix.clone(),
            ..template.clone()
        };
        // Two artifact dirs with one prefix (e.g. `x_gfx110X` and `x_gfx120X`
        // in one parent) would write the same outputs.
        let sub = staging.join(format!(".{}", reports.len() + errors.len()));
        let r = fs::create_dir(&sub)
            .ctx(&sub, "create directory")
            .map_err(SplitError::from)
            .and_then(|_| split_into(&opts, &sub, progress));
        match r {
            Ok(r) => {
                for n in output_names(&r) {
                    let from = sub.join(&n);
                    let to = staging.join(&n);
                    if to.exists() || names.contains(&n) {
                        errors.push(SplitError::Usage(format!(
                            "{}: output {} is produced by two artifact directories",
                            item.dir.display(),
                            n.to_string_lossy()
                        )));
                        continue;
                    }
                    fs::rename(&from, &to).ctx(&to, "rename")?;
                    names.push(n);
                }
                fs::remove_dir_all(&sub).ctx(&sub, "remove")?;
                reports.push(r);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(if errors.len() == 1 {
            errors.remove(0)
        } else {
            SplitError::Batch(errors)
        });
    }
    batch_no_op_warnings(&mut reports, template);
    Ok((reports, names))
}

/// In a batch, a handler or `--gpu-targets` value that matches nothing in
/// one artifact is normal (each family's artifact has its own libraries and
/// targets): the per-artifact warnings go, and one warning (on the first
/// report) remains for what matched nothing in any artifact of the batch.
fn batch_no_op_warnings(reports: &mut [SplitReport], template: &SplitOptions) {
    let everywhere = |pick: &dyn Fn(&SplitReport) -> &Vec<String>| -> Vec<String> {
        let mut all: Option<Vec<String>> = None;
        for r in reports.iter() {
            let v = pick(r);
            all = Some(match all {
                None => v.clone(),
                Some(a) => a.into_iter().filter(|x| v.contains(x)).collect(),
            });
        }
        all.unwrap_or_default()
    };
    let dbs_names = everywhere(&|r| &r.unmatched_databases);
    let targets = everywhere(&|r| &r.unmatched_gpu_targets);
    for r in reports.iter_mut() {
        let dbs: Vec<DatabaseKind> = template
            .databases
            .iter()
            .filter(|k| r.unmatched_databases.iter().any(|n| n == k.name()))
            .copied()
            .collect();
        let own = plan::no_op_warnings(&dbs, &r.unmatched_gpu_targets, "the artifact");
        r.warnings.retain(|w| !own.contains(w));
    }
    if let Some(first) = reports.first_mut() {
        let dbs: Vec<DatabaseKind> = template
            .databases
            .iter()
            .filter(|k| dbs_names.iter().any(|n| n == k.name()))
            .copied()
            .collect();
        let mut w = plan::no_op_warnings(&dbs, &targets, "any artifact of the batch");
        w.append(&mut first.warnings);
        first.warnings = w;
    }
}

/// A [`Progress`] counting units, for tests and `--json` summaries.
#[derive(Debug, Default)]
pub struct CountingProgress {
    /// Units advanced.
    pub done: AtomicU64,
}

impl Progress for CountingProgress {
    fn advance(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusion_rules() {
        let ex = vec!["gfx906".to_string(), "gfx90a:xnack-".to_string()];
        assert!(is_excluded("gfx906", &ex));
        assert!(is_excluded("gfx906:xnack-", &ex));
        assert!(!is_excluded("gfx9060", &ex));
        assert!(is_excluded("gfx90a:xnack-", &ex));
        assert!(!is_excluded("gfx90a:xnack+", &ex));
        assert!(!is_excluded("gfx90a", &ex));
    }

    #[test]
    fn names_checked() {
        assert!(check_name("p", "blas_lib").is_ok());
        for bad in ["", ".", "..", ".x", "a/b", "a\\b"] {
            assert!(check_name("p", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sub_slice_offsets() {
        let v = vec![0u8; 10];
        assert_eq!(scan::offset_in(&v, &v[3..5]), Some(3));
        let w = vec![0u8; 2];
        assert_eq!(scan::offset_in(&v, &w), None);
    }
}
