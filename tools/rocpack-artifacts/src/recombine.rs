//! Recombine ("reduce"): split CI shards → one generic package per component
//! plus one package per architecture group that has content.
//!
//! Input: `DIR/<shard>/<component>_generic/` and `DIR/<shard>/<component>_<arch>/`
//! (the output of `kpack split` for each shard), each with an
//! `artifact_manifest.txt`. Output (contract: design.md §3.1):
//!
//! * `OUT/<component>_generic/` — the primary shard's generic artifact
//!   (host code, markers, generic files), copied once;
//! * `OUT/<component>_<group>/` — only the `.kpack` files and arch database
//!   files of the group's archs, from whichever shards hold them, written
//!   only when there is at least one file; components with no arch content
//!   are reported as generic-only.
//!
//! Validation (all enforced, unlike the reference, kpack-reference §6.1):
//! `error_on_duplicate_device_code` (an arch built by several shards must
//! carry the same device code: files compared byte for byte, `.kpack`
//! archives kernel by kernel), `verify_generic_artifacts_match` (every
//! shard's generic artifact equals the primary's; split host binaries, whose
//! layout shifts with the size of the removed device code, are compared by
//! marker and wrappers), `error_on_missing_architecture` (a group arch no
//! shard built). Archs found in no group (the gfx906 fallback) are excluded
//! and listed. All violations are collected and reported together.
//!
//! Output is built in a staging directory beside `OUT` and renamed into
//! place only when everything succeeded: no partial output on error. Files
//! are copied with `std::fs::copy` (`copy_file_range` on Linux, so reflinks
//! or in-kernel copies where the file system allows) or hard-linked
//! ([`LinkMode::Hardlink`], falling back to copies), in parallel.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use crate::config::PackagingConfig;
use crate::databases;
use crate::fsutil::{self, FsError, IoContext};
use crate::manifest::{ArtifactManifest, ManifestError, MANIFEST_FILE};
use crate::target::Target;
use crate::walk::{self, EntryKind, WalkError};

/// How output files are materialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkMode {
    /// `std::fs::copy`: `copy_file_range` (reflink / in-kernel copy) with a
    /// read/write fallback. Output files are independent of the input.
    #[default]
    Copy,
    /// Hard links to the input files, falling back to copies across file
    /// systems. Fastest; output shares inodes with the input.
    Hardlink,
}

/// Options of [`recombine`].
#[derive(Debug, Clone)]
pub struct RecombineOptions {
    /// Directory whose subdirectories are the shards.
    pub input_shards_dir: PathBuf,
    /// The packaging configuration.
    pub config: PackagingConfig,
    /// Output directory (must not exist, or be empty).
    pub output_dir: PathBuf,
    /// Copy or hard-link.
    pub link_mode: LinkMode,
    /// Only this component (rocm-kpack's `--component`).
    pub component: Option<String>,
    /// Worker threads (`None`: rayon's default, all cores).
    pub jobs: Option<usize>,
    /// Directories a build system staged the shards from: a symlinked
    /// shard or artifact directory may also resolve inside one of them.
    pub staging_roots: Vec<PathBuf>,
}

/// Input problems (exit 2): nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecombineError {
    /// `--input-shards-dir` is missing or not a directory.
    #[error("{path}: input shards directory {problem}")]
    InputDir {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The primary shard named by the config is not in the input.
    #[error("primary shard `{shard}` not found in {dir} (shards present: {present})")]
    MissingPrimaryShard {
        /// Shard name.
        shard: String,
        /// Input dir.
        dir: PathBuf,
        /// Comma-separated shard names found.
        present: String,
    },
    /// `--component` names nothing.
    #[error("component `{0}` not found in any shard")]
    UnknownComponent(String),
    /// Output directory exists and is not empty.
    #[error("{0}: output directory exists and is not empty")]
    OutputNotEmpty(PathBuf),
    /// A manifest could not be read or parsed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A tree could not be walked.
    #[error(transparent)]
    Walk(#[from] WalkError),
    /// An I/O error.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// A copied file does not have the size of its source.
    #[error("{dst}: copied {got} bytes from {src}, expected {want}")]
    ShortCopy {
        /// Source.
        src: PathBuf,
        /// Destination.
        dst: PathBuf,
        /// Bytes written.
        got: u64,
        /// Source size.
        want: u64,
    },
    /// Validation failed (exit 1): every violation is listed.
    #[error("recombine failed {} check(s):\n  {}", .0.len(), .0.iter().map(|v| v.message.as_str()).collect::<Vec<_>>().join("\n  "))]
    Validation(Vec<Violation>),
}

impl RecombineError {
    /// Exit code per design.md §3.1: 1 for failed checks, 2 for input errors.
    pub fn exit_code(&self) -> u8 {
        match self {
            RecombineError::Validation(_) => 1,
            _ => 2,
        }
    }
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Machine-readable kind: `duplicate_device_code`, `generic_mismatch`,
    /// `missing_architecture`, `missing_generic`, `group_conflict`.
    pub kind: &'static str,
    /// Human-readable description naming shards and files.
    pub message: String,
}

/// One output package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackageReport {
    /// Directory name under OUT.
    pub name: String,
    /// Component.
    pub component: String,
    /// `generic` or `group`.
    pub kind: &'static str,
    /// Group name for group packages.
    pub group: Option<String>,
    /// Archs whose files it holds (group packages).
    pub architectures: Vec<String>,
    /// Shards files were taken from.
    pub source_shards: Vec<String>,
    /// Manifest prefixes.
    pub prefixes: Vec<String>,
    /// Regular files.
    pub files: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// Bytes of regular files.
    pub bytes: u64,
}

/// An arch found in shards but in no group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExcludedArch {
    /// Arch as in the artifact name.
    pub architecture: String,
    /// Shards holding it.
    pub shards: Vec<String>,
    /// Components holding it.
    pub components: Vec<String>,
}

/// A group arch no shard built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingArch {
    /// Arch as written in the config.
    pub architecture: String,
    /// Group listing it.
    pub group: String,
}

/// An arch built by several shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DuplicateArch {
    /// Component.
    pub component: String,
    /// Arch.
    pub architecture: String,
    /// Shards holding it (sorted; the first listed one supplied the files
    /// unless the primary shard is among them, then the primary did).
    pub shards: Vec<String>,
    /// Shard whose copy is used.
    pub used: String,
    /// Whether the device code was identical everywhere.
    pub identical: bool,
}

/// What [`recombine`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecombineReport {
    /// Primary shard.
    pub primary_shard: String,
    /// Shards found (sorted).
    pub shards: Vec<String>,
    /// Packages written, sorted by name.
    pub packages: Vec<PackageReport>,
    /// Components that got only a generic package.
    pub generic_only_components: Vec<String>,
    /// Archs in no group (not packaged).
    pub excluded_architectures: Vec<ExcludedArch>,
    /// Group archs found in no shard (warnings unless the flag made them errors).
    pub missing_architectures: Vec<MissingArch>,
    /// Archs present in several shards.
    pub duplicate_architectures: Vec<DuplicateArch>,
    /// Non-fatal findings.
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone)]
enum ArtifactKind {
    Generic,
    Arch(Target),
}

#[derive(Debug, Clone)]
struct Artifact {
    shard: String,
    /// Directory name (`blas_lib_gfx1100`).
    name: String,
    path: PathBuf,
    component: String,
    kind: ArtifactKind,
    manifest: ArtifactManifest,
}

/// One entry of an artifact tree, keyed by `prefix/rel`.
#[derive(Debug, Clone)]
struct TreeEntry {
    path: PathBuf,
    kind: EntryKind,
}

type Tree = BTreeMap<String, TreeEntry>;

/// A package to write: directory name, manifest, entries keyed by relpath.
type PackagePlan = (String, ArtifactManifest, Vec<(String, TreeEntry)>);

/// Parses an artifact directory name into (component, kind).
fn parse_artifact_name(name: &str) -> Option<(String, ArtifactKind)> {
    if let Some(c) = name.strip_suffix("_generic") {
        return (!c.is_empty()).then(|| (c.to_string(), ArtifactKind::Generic));
    }
    let (c, suffix) = name.rsplit_once('_')?;
    if c.is_empty() {
        return None;
    }
    let target = Target::parse(suffix)
        .ok()
        .or_else(|| databases::parse_target_exact(suffix).and_then(|t| Target::parse(&t).ok()))?;
    Some((c.to_string(), ArtifactKind::Arch(target)))
}

/// Subdirectories of `dir`. Shard and artifact directories may be symlinks
/// (build systems stage inputs that way), but only to directories inside
/// `root` (the shards directory) or inside one of `staging` (the declared
/// inputs a build system staged, canonical): a symlinked package pointing
/// elsewhere would make recombine package whatever it points at.
fn list_dirs(dir: &Path, root: &Path, staging: &[PathBuf]) -> Result<Vec<String>, FsError> {
    let root_real = fs::canonicalize(root).ctx(root, "resolve")?;
    let mut out = Vec::new();
    for name in fsutil::sorted_names(dir).ctx(dir, "read directory")? {
        let Some(n) = name.to_str() else { continue };
        if n.starts_with('.') {
            continue;
        }
        let p = dir.join(n);
        if !fs::metadata(&p).ctx(&p, "stat")?.is_dir() {
            continue;
        }
        if fs::symlink_metadata(&p)
            .ctx(&p, "stat")?
            .file_type()
            .is_symlink()
        {
            let real = fs::canonicalize(&p).ctx(&p, "resolve")?;
            if !real.starts_with(&root_real) && !staging.iter().any(|s| real.starts_with(s)) {
                return Err(FsError::new(
                    p,
                    "read shard",
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "symlink to {} outside the shards directory {}",
                            real.display(),
                            root.display()
                        ),
                    ),
                ));
            }
        }
        out.push(n.to_string());
    }
    Ok(out)
}

/// Walks every prefix of an artifact into one map keyed by `prefix/rel`
/// (the prefix directories themselves included as `Dir` entries).
fn artifact_tree(a: &Artifact) -> Result<Tree, RecombineError> {
    let mut tree = Tree::new();
    for prefix in a.manifest.prefixes() {
        // Real directories all the way down: no symlink in any component.
        let root = match fsutil::real_dir_below(&a.path, prefix) {
            Ok(Some(root)) => root,
            Ok(None) => continue,
            Err(msg) => {
                return Err(FsError::new(
                    a.path.clone(),
                    "read prefix",
                    io::Error::new(io::ErrorKind::InvalidData, msg),
                )
                .into())
            }
        };
        // Parent directories of the prefix, then the prefix itself.
        let mut acc = String::new();
        for comp in prefix.split('/') {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(comp);
            tree.entry(acc.clone()).or_insert_with(|| TreeEntry {
                path: fsutil::join_rel(&a.path, &acc),
                kind: EntryKind::Dir,
            });
        }
        for e in walk::walk(&root)? {
            tree.insert(
                format!("{prefix}/{}", e.rel),
                TreeEntry {
                    path: e.path(&root),
                    kind: e.kind,
                },
            );
        }
    }
    Ok(tree)
}

fn is_kpack_path(rel: &str) -> bool {
    rel.split('/').any(|c| c == rocpack_kpack::KPACK_DIR)
}

/// Byte-for-byte comparison (sizes first, then streamed chunks).
fn sha256_file(p: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    match fs::File::open(p) {
        Ok(mut f) => {
            if io::copy(&mut f, &mut h).is_err() {
                return "unreadable".into();
            }
            hex::encode(h.finalize())
        }
        Err(_) => "unreadable".into(),
    }
}

/// Compares two `.kpack` archives kernel by kernel; `None` when they hold
/// the same (key, arch) set with identical code objects, else a description.
fn kpack_difference(a: &Path, b: &Path) -> Option<String> {
    let ra = match rocpack_kpack::KpackReader::open(a) {
        Ok(r) => r,
        Err(e) => return Some(format!("cannot read: {e}")),
    };
    let rb = match rocpack_kpack::KpackReader::open(b) {
        Ok(r) => r,
        Err(e) => return Some(format!("cannot read: {e}")),
    };
    let ka: BTreeSet<(&str, &str)> = ra.kernels().collect();
    let kb: BTreeSet<(&str, &str)> = rb.kernels().collect();
    if ka != kb {
        let only: Vec<String> = ka
            .symmetric_difference(&kb)
            .take(4)
            .map(|(k, t)| format!("{k} [{t}]"))
            .collect();
        return Some(format!("different kernels (e.g. {})", only.join(", ")));
    }
    let mut diffs = Vec::new();
    for (k, t) in &ka {
        let same = matches!((ra.get(k, t), rb.get(k, t)), (Ok(x), Ok(y)) if x == y);
        if !same {
            diffs.push(format!("{k} [{t}]"));
        }
    }
    if diffs.is_empty() {
        None
    } else {
        Some(format!("code objects differ: {}", diffs.join(", ")))
    }
}

/// Whether two entries at the same relpath hold the same content; for
/// `.kpack` archives, same kernels. `Err(description)` when they differ.
fn same_device_content(rel: &str, a: &TreeEntry, b: &TreeEntry) -> Result<(), String> {
    match (&a.kind, &b.kind) {
        (EntryKind::Dir, EntryKind::Dir) => Ok(()),
        (EntryKind::Symlink { target: x }, EntryKind::Symlink { target: y }) => {
            if x == y {
                Ok(())
            } else {
                Err(format!(
                    "symlink targets differ (`{}` vs `{}`)",
                    x.display(),
                    y.display()
                ))
            }
        }
        (EntryKind::File { .. }, EntryKind::File { .. }) => {
            match fsutil::files_equal(&a.path, &b.path) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    if rel.ends_with(".kpack") {
                        match kpack_difference(&a.path, &b.path) {
                            None => Ok(()),
                            Some(d) => Err(d),
                        }
                    } else {
                        Err(format!(
                            "sha256 {} vs {}",
                            sha256_file(&a.path),
                            sha256_file(&b.path)
                        ))
                    }
                }
                Err(e) => Err(format!("cannot compare: {e}")),
            }
        }
        _ => Err("one is a file, the other a directory or symlink".into()),
    }
}

/// Split host binaries differ in layout between shards; compare what the
/// runtime uses instead: marker payload and wrapper co_indices.
fn host_binary_signature(p: &Path) -> Option<(Vec<u8>, Vec<u32>)> {
    let m = fsutil::Mapped::open(p).ok()?;
    let data = m.bytes();
    let info = rocpack_image::analyze_in(data, &m.source()).ok()?;
    if info.state() != rocpack_image::State::Split {
        return None;
    }
    let marker = info.marker()?.bytes.clone();
    Some((
        marker,
        info.wrapper_markers().iter().map(|w| w.co_index).collect(),
    ))
}

/// Everything a run found and decided before writing.
struct Plan {
    report: RecombineReport,
    /// (package name, manifest, entries to materialise).
    packages: Vec<PackagePlan>,
}

/// Runs recombine. `log` receives progress and warning lines (stderr).
pub fn recombine(
    opts: &RecombineOptions,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<RecombineReport, RecombineError> {
    match opts.jobs {
        Some(n) => match crate::jobs::pool(Some(n)) {
            Ok(pool) => pool.install(|| recombine_inner(opts, log)),
            Err(_) => recombine_inner(opts, log),
        },
        None => recombine_inner(opts, log),
    }
}

fn recombine_inner(
    opts: &RecombineOptions,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<RecombineReport, RecombineError> {
    let out = &opts.output_dir;
    // A commit into this directory that a kill interrupted is finished
    // first: its durable list says what belongs there, and the directory is
    // then judged complete, not partly filled.
    rocpack_kpack::commit::complete_interrupted(out).map_err(FsError::from)?;
    if let Ok(meta) = fs::symlink_metadata(out) {
        if !meta.is_dir() {
            return Err(RecombineError::OutputNotEmpty(out.clone()));
        }
        if fs::read_dir(out)
            .ctx(out, "read directory")?
            .next()
            .is_some()
        {
            return Err(RecombineError::OutputNotEmpty(out.clone()));
        }
    }
    let plan = plan(opts, log)?;
    let report = fsutil::commit_outputs(
        out,
        &[],
        |root| {
            let mut names = Vec::new();
            for (name, manifest, entries) in &plan.packages {
                write_package(&root.join(name), manifest, entries, opts.link_mode)?;
                names.push(name.into());
            }
            Ok((plan.report, names))
        },
        |_| RecombineError::OutputNotEmpty(out.clone()),
    )?;
    Ok(report)
}

fn write_package(
    dir: &Path,
    manifest: &ArtifactManifest,
    entries: &[(String, TreeEntry)],
    mode: LinkMode,
) -> Result<(), RecombineError> {
    fs::create_dir(dir).ctx(dir, "create directory")?;
    manifest.write_dir(dir)?;
    // Directories first (sorted, so parents precede children), then files
    // in parallel, then symlinks.
    for (rel, e) in entries {
        if matches!(e.kind, EntryKind::Dir) {
            let d = fsutil::join_rel(dir, rel);
            fs::create_dir_all(&d).ctx(&d, "create directory")?;
        }
    }
    entries
        .par_iter()
        .filter(|(_, e)| matches!(e.kind, EntryKind::File { .. }))
        .try_for_each(|(rel, e)| -> Result<(), RecombineError> {
            let dst = fsutil::join_rel(dir, rel);
            if let Some(parent) = dst.parent() {
                fs::create_dir_all(parent).ctx(parent, "create directory")?;
            }
            let EntryKind::File { size, .. } = e.kind else {
                return Ok(());
            };
            match mode {
                LinkMode::Hardlink => fsutil::link_or_copy(&e.path, &dst)?,
                LinkMode::Copy => {
                    let got = fs::copy(&e.path, &dst).ctx(&dst, "copy file")?;
                    if got != size {
                        return Err(RecombineError::ShortCopy {
                            src: e.path.clone(),
                            dst,
                            got,
                            want: size,
                        });
                    }
                }
            }
            Ok(())
        })?;
    for (rel, e) in entries {
        if let EntryKind::Symlink { target } = &e.kind {
            let dst = fsutil::join_rel(dir, rel);
            if let Some(parent) = dst.parent() {
                fs::create_dir_all(parent).ctx(parent, "create directory")?;
            }
            fsutil::copy_symlink(target, &dst)?;
        }
    }
    Ok(())
}

/// What a recombine collects while it plans: warnings (also logged) and
/// validation violations (reported together at the end).
struct Planner<'o, 'l> {
    opts: &'o RecombineOptions,
    log: &'l mut (dyn FnMut(&str) + Send),
    warnings: Vec<String>,
    violations: Vec<Violation>,
}

/// An arch's device code chosen for a component: target, merged tree,
/// shards used and merged manifest.
type ChosenArch = (Target, Tree, Vec<String>, ArtifactManifest);

/// What one component contributes to the plan.
#[derive(Default)]
struct ComponentPlan {
    duplicates: Vec<DuplicateArch>,
    packages: Vec<PackagePlan>,
    reports: Vec<PackageReport>,
    generic_only: bool,
}

fn plan(
    opts: &RecombineOptions,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Plan, RecombineError> {
    let mut p = Planner {
        opts,
        log,
        warnings: Vec::new(),
        violations: Vec::new(),
    };
    let (shards, staging) = p.shards()?;
    // 1. Collect artifacts.
    let artifacts = p.collect_artifacts(&shards, &staging)?;
    let components: BTreeSet<String> = artifacts.iter().map(|a| a.component.clone()).collect();
    // 2. Arch → groups; excluded and missing archs.
    let (excluded, missing) = p.arch_coverage(&artifacts, &shards);
    // 3. Per component: generic source, arch sources, duplicate checks.
    let mut duplicates = Vec::new();
    let mut packages: Vec<PackagePlan> = Vec::new();
    let mut reports: Vec<PackageReport> = Vec::new();
    let mut generic_only = Vec::new();
    for comp in &components {
        let Some(c) = p.component(comp, &artifacts)? else {
            continue;
        };
        duplicates.extend(c.duplicates);
        packages.extend(c.packages);
        reports.extend(c.reports);
        if c.generic_only {
            generic_only.push(comp.clone());
        }
    }
    if !p.violations.is_empty() {
        return Err(RecombineError::Validation(p.violations));
    }
    reports.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Plan {
        report: RecombineReport {
            primary_shard: opts.config.primary_shard.clone(),
            shards,
            packages: reports,
            generic_only_components: generic_only,
            excluded_architectures: excluded,
            missing_architectures: missing,
            duplicate_architectures: duplicates,
            warnings: p.warnings,
        },
        packages,
    })
}

impl Planner<'_, '_> {
    fn warn(&mut self, msg: String) {
        (self.log)(&format!("warning: {msg}"));
        self.warnings.push(msg);
    }

    fn violation(&mut self, kind: &'static str, message: String) {
        self.violations.push(Violation { kind, message });
    }

    /// The shards of the input directory (the primary one among them) and
    /// the resolved staging roots.
    fn shards(&mut self) -> Result<(Vec<String>, Vec<PathBuf>), RecombineError> {
        let cfg = &self.opts.config;
        let input = &self.opts.input_shards_dir;
        match fs::metadata(input) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(RecombineError::InputDir {
                    path: input.clone(),
                    problem: "is not a directory".into(),
                })
            }
            Err(e) => {
                return Err(RecombineError::InputDir {
                    path: input.clone(),
                    problem: format!("cannot be read: {e}"),
                })
            }
        }
        let staging = self
            .opts
            .staging_roots
            .iter()
            .map(|r| fs::canonicalize(r).ctx(r, "resolve staging root"))
            .collect::<Result<Vec<_>, FsError>>()?;
        let shards = list_dirs(input, input, &staging)?;
        if !shards.contains(&cfg.primary_shard) {
            return Err(RecombineError::MissingPrimaryShard {
                shard: cfg.primary_shard.clone(),
                dir: input.clone(),
                present: if shards.is_empty() {
                    "none".into()
                } else {
                    shards.join(", ")
                },
            });
        }
        Ok((shards, staging))
    }

    /// Every artifact of every shard (of the selected component), by shard
    /// and name; directories that are no artifact are skipped with a warning.
    fn collect_artifacts(
        &mut self,
        shards: &[String],
        staging: &[PathBuf],
    ) -> Result<Vec<Artifact>, RecombineError> {
        let input = &self.opts.input_shards_dir;
        let mut artifacts: Vec<Artifact> = Vec::new();
        for shard in shards {
            let sdir = input.join(shard);
            for name in list_dirs(&sdir, input, staging)? {
                let path = sdir.join(&name);
                if !path.join(MANIFEST_FILE).is_file() {
                    self.warn(format!("{}: skipped, no {MANIFEST_FILE}", path.display()));
                    continue;
                }
                let Some((component, kind)) = parse_artifact_name(&name) else {
                    self.warn(format!(
                        "{}: skipped, name is neither <component>_generic nor <component>_<gfx arch>",
                        path.display()
                    ));
                    continue;
                };
                if self
                    .opts
                    .component
                    .as_ref()
                    .is_some_and(|c| *c != component)
                {
                    continue;
                }
                let manifest = ArtifactManifest::read_dir(&path)?;
                artifacts.push(Artifact {
                    shard: shard.clone(),
                    name,
                    path,
                    component,
                    kind,
                    manifest,
                });
            }
        }
        if let Some(c) = &self.opts.component {
            if artifacts.is_empty() {
                return Err(RecombineError::UnknownComponent(c.clone()));
            }
        }
        Ok(artifacts)
    }

    /// The archs found in no group (excluded) and the group archs found in
    /// no shard (missing: a warning, or a violation when configured).
    fn arch_coverage(
        &mut self,
        artifacts: &[Artifact],
        shards: &[String],
    ) -> (Vec<ExcludedArch>, Vec<MissingArch>) {
        let cfg = &self.opts.config;
        let mut arch_names: BTreeMap<String, (Target, BTreeSet<String>, BTreeSet<String>)> =
            BTreeMap::new();
        for a in artifacts {
            if let ArtifactKind::Arch(t) = &a.kind {
                let e = arch_names
                    .entry(t.to_string())
                    .or_insert_with(|| (t.clone(), BTreeSet::new(), BTreeSet::new()));
                e.1.insert(a.shard.clone());
                e.2.insert(a.component.clone());
            }
        }
        let mut excluded = Vec::new();
        for (name, (t, sh, comps)) in &arch_names {
            if cfg.groups_for_arch(t).is_empty() {
                excluded.push(ExcludedArch {
                    architecture: name.clone(),
                    shards: sh.iter().cloned().collect(),
                    components: comps.iter().cloned().collect(),
                });
            }
        }
        if !excluded.is_empty() {
            (self.log)(&format!(
                "excluded (in no architecture group): {}",
                excluded
                    .iter()
                    .map(|e| format!("{} (shards {})", e.architecture, e.shards.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let mut missing = Vec::new();
        for g in &cfg.architecture_groups {
            for arch in &g.architectures {
                let Ok(t) = Target::parse(arch) else { continue };
                if !arch_names
                    .values()
                    .any(|(found, _, _)| found.compatible_with(&t))
                {
                    missing.push(MissingArch {
                        architecture: arch.clone(),
                        group: g.name.clone(),
                    });
                }
            }
        }
        for m in &missing {
            let msg = format!(
                "architecture {} of group {} was found in no shard ({})",
                m.architecture,
                m.group,
                shards.join(", ")
            );
            if cfg.validation.error_on_missing_architecture {
                self.violation(
                    "missing_architecture",
                    format!("{msg} (error_on_missing_architecture)"),
                );
            } else {
                self.warn(msg);
            }
        }
        (excluded, missing)
    }

    /// One component: its generic package (from the primary shard), its
    /// arch trees (duplicates across shards checked) and its group
    /// packages. `None` when it has no generic artifact in the primary
    /// shard (a violation).
    fn component(
        &mut self,
        comp: &str,
        artifacts: &[Artifact],
    ) -> Result<Option<ComponentPlan>, RecombineError> {
        let cfg = &self.opts.config;
        let mine: Vec<&Artifact> = artifacts.iter().filter(|a| a.component == comp).collect();
        let generics: Vec<&Artifact> = mine
            .iter()
            .copied()
            .filter(|a| matches!(a.kind, ArtifactKind::Generic))
            .collect();
        let Some(primary) = generics
            .iter()
            .copied()
            .find(|a| a.shard == cfg.primary_shard)
        else {
            self.violation(
                "missing_generic",
                format!(
                    "component {comp}: no {comp}_generic in primary shard {} (found in: {})",
                    cfg.primary_shard,
                    if generics.is_empty() {
                        "no shard".to_string()
                    } else {
                        generics
                            .iter()
                            .map(|a| a.shard.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            );
            return Ok(None);
        };
        let mut out = ComponentPlan::default();
        self.generic_package(comp, primary, &generics, &mut out)?;
        let chosen = self.choose_arch_trees(comp, &mine, &mut out.duplicates)?;
        let wrote_any = self.group_packages(comp, &chosen, &mut out)?;
        if !wrote_any {
            (self.log)(&format!(
                "component {comp}: generic-only (no device code for any configured group), wrote {comp}_generic only"
            ));
            out.generic_only = true;
        }
        Ok(Some(out))
    }

    /// The generic package: the primary's tree, minus any `.kpack` dirs;
    /// the other shards' generic artifacts compared with it when configured.
    fn generic_package(
        &mut self,
        comp: &str,
        primary: &Artifact,
        generics: &[&Artifact],
        out: &mut ComponentPlan,
    ) -> Result<(), RecombineError> {
        let primary_tree = artifact_tree(primary)?;
        if self.opts.config.validation.verify_generic_artifacts_match {
            for other in generics.iter().filter(|a| a.shard != primary.shard) {
                let tree = artifact_tree(other)?;
                for v in compare_generic(primary, &primary_tree, other, &tree) {
                    self.violation("generic_mismatch", v);
                }
            }
        }
        let mut gen_entries = Vec::new();
        for (rel, e) in &primary_tree {
            if is_kpack_path(rel) {
                continue;
            }
            gen_entries.push((rel.clone(), e.clone()));
        }
        if primary_tree.keys().any(|r| is_kpack_path(r)) {
            self.warn(format!(
                "{}: `.kpack` directory in a generic artifact ignored",
                primary.path.display()
            ));
        }
        let gname = format!("{comp}_generic");
        out.reports.push(package_report(
            &gname,
            comp,
            None,
            vec![],
            vec![primary.shard.clone()],
            &primary.manifest,
            &gen_entries,
        ));
        out.packages
            .push((gname, primary.manifest.clone(), gen_entries));
        Ok(())
    }

    /// The component's arch artifacts, grouped by arch: the primary
    /// shard's (else the first shard's) tree, with files only other shards
    /// have added; device code that differs between shards is a warning or
    /// a violation. Returns arch → chosen tree.
    fn choose_arch_trees(
        &mut self,
        comp: &str,
        mine: &[&Artifact],
        duplicates: &mut Vec<DuplicateArch>,
    ) -> Result<BTreeMap<String, ChosenArch>, RecombineError> {
        let cfg = &self.opts.config;
        let mut by_arch: BTreeMap<String, Vec<&Artifact>> = BTreeMap::new();
        for a in mine {
            if let ArtifactKind::Arch(t) = &a.kind {
                by_arch.entry(t.to_string()).or_default().push(a);
            }
        }
        let mut chosen: BTreeMap<String, ChosenArch> = BTreeMap::new();
        for (arch, mut list) in by_arch {
            list.sort_by(|a, b| {
                (a.shard != cfg.primary_shard, &a.shard)
                    .cmp(&(b.shard != cfg.primary_shard, &b.shard))
            });
            let Some(first) = list.first().copied() else {
                continue;
            };
            let ArtifactKind::Arch(target) = &first.kind else {
                continue;
            };
            let mut tree = artifact_tree(first)?;
            let mut manifest = first.manifest.clone();
            let mut identical = true;
            let trees: Vec<(&Artifact, Tree)> = list
                .iter()
                .skip(1)
                .map(|a| artifact_tree(a).map(|t| (*a, t)))
                .collect::<Result<_, _>>()?;
            for (other, otree) in &trees {
                let diffs: Vec<(String, String)> = otree
                    .par_iter()
                    .filter_map(|(rel, oe)| {
                        let e = tree.get(rel)?;
                        same_device_content(rel, e, oe)
                            .err()
                            .map(|d| (rel.clone(), d))
                    })
                    .collect();
                if !diffs.is_empty() {
                    identical = false;
                    self.differing_device_code(comp, &arch, first, other, &diffs);
                }
                // Files only the other shard has are added.
                for (rel, oe) in otree {
                    tree.entry(rel.clone()).or_insert_with(|| oe.clone());
                }
                for p in other.manifest.prefixes() {
                    manifest.push(p)?;
                }
            }
            if list.len() > 1 {
                duplicates.push(DuplicateArch {
                    component: comp.to_string(),
                    architecture: arch.clone(),
                    shards: {
                        let mut s: Vec<String> = list.iter().map(|a| a.shard.clone()).collect();
                        s.sort();
                        s
                    },
                    used: first.shard.clone(),
                    identical,
                });
            }
            let mut shards_used = vec![first.shard.clone()];
            shards_used.extend(trees.iter().map(|(a, _)| a.shard.clone()));
            chosen.insert(arch, (target.clone(), tree, shards_used, manifest));
        }
        Ok(chosen)
    }

    /// Device code of `arch` differing between shards: a violation when
    /// configured, else a warning that `first`'s is used.
    fn differing_device_code(
        &mut self,
        comp: &str,
        arch: &str,
        first: &Artifact,
        other: &Artifact,
        diffs: &[(String, String)],
    ) {
        let msg = format!(
            "device code for {arch} of component {comp} differs between shards {} and {}: {}",
            first.shard,
            other.shard,
            diffs
                .iter()
                .map(|(rel, d)| format!(
                    "{}/{}/{rel} vs {}/{}/{rel}: {d}",
                    first.shard, first.name, other.shard, other.name
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
        if self.opts.config.validation.error_on_duplicate_device_code {
            self.violation(
                "duplicate_device_code",
                format!("{msg} (error_on_duplicate_device_code)"),
            );
        } else {
            self.warn(format!("{msg}; using shard {}", first.shard));
        }
    }

    /// One package per architecture group with device code: the chosen
    /// trees of its archs merged (a path two archs provide differently is
    /// a violation). Returns whether any was planned.
    fn group_packages(
        &mut self,
        comp: &str,
        chosen: &BTreeMap<String, ChosenArch>,
        out: &mut ComponentPlan,
    ) -> Result<bool, RecombineError> {
        let cfg = &self.opts.config;
        let mut wrote_any = false;
        for g in &cfg.architecture_groups {
            let gtargets: Vec<Target> = g
                .architectures
                .iter()
                .filter_map(|a| Target::parse(a).ok())
                .collect();
            let mut merged: BTreeMap<String, (TreeEntry, String)> = BTreeMap::new();
            let mut prefixes = BTreeSet::new();
            let mut archs = Vec::new();
            let mut srcs = BTreeSet::new();
            for (arch, (t, tree, shards_used, manifest)) in chosen {
                if !gtargets.iter().any(|gt| gt.compatible_with(t)) {
                    continue;
                }
                archs.push(arch.clone());
                srcs.extend(shards_used.iter().cloned());
                prefixes.extend(manifest.prefixes().iter().cloned());
                for (rel, e) in tree {
                    match merged.get(rel) {
                        None => {
                            merged.insert(rel.clone(), (e.clone(), arch.clone()));
                        }
                        Some((prev, parch)) => {
                            if let Err(d) = same_device_content(rel, prev, e) {
                                self.violation(
                                    "group_conflict",
                                    format!(
                                        "component {comp}, group {}: {rel} is provided by both {parch} and {arch} with different content ({d})",
                                        g.name
                                    ),
                                );
                            }
                        }
                    }
                }
            }
            let entries: Vec<(String, TreeEntry)> =
                merged.into_iter().map(|(rel, (e, _))| (rel, e)).collect();
            if !entries
                .iter()
                .any(|(_, e)| matches!(e.kind, EntryKind::File { .. }))
            {
                continue;
            }
            wrote_any = true;
            let manifest = ArtifactManifest::from_prefixes(prefixes.iter())?;
            let name = format!("{comp}_{}", g.name);
            out.reports.push(package_report(
                &name,
                comp,
                Some(g.name.clone()),
                archs,
                srcs.into_iter().collect(),
                &manifest,
                &entries,
            ));
            out.packages.push((name, manifest, entries));
        }
        Ok(wrote_any)
    }
}

fn package_report(
    name: &str,
    component: &str,
    group: Option<String>,
    architectures: Vec<String>,
    source_shards: Vec<String>,
    manifest: &ArtifactManifest,
    entries: &[(String, TreeEntry)],
) -> PackageReport {
    let mut files = 0;
    let mut symlinks = 0;
    let mut bytes = 0u64;
    for (_, e) in entries {
        match e.kind {
            EntryKind::File { size, .. } => {
                files += 1;
                bytes = bytes.saturating_add(size);
            }
            EntryKind::Symlink { .. } => symlinks += 1,
            EntryKind::Dir => {}
        }
    }
    PackageReport {
        name: name.to_string(),
        component: component.to_string(),
        kind: if group.is_some() { "group" } else { "generic" },
        group,
        architectures,
        source_shards,
        prefixes: manifest.prefixes().to_vec(),
        files,
        symlinks,
        bytes,
    }
}

/// Differences between a shard's generic artifact and the primary's.
fn compare_generic(
    primary: &Artifact,
    ptree: &Tree,
    other: &Artifact,
    otree: &Tree,
) -> Vec<String> {
    let mut out = Vec::new();
    let head = format!(
        "component {}: generic artifact of shard {} differs from primary shard {}",
        primary.component, other.shard, primary.shard
    );
    let mut pm = primary.manifest.prefixes().to_vec();
    let mut om = other.manifest.prefixes().to_vec();
    pm.sort();
    om.sort();
    if pm != om {
        out.push(format!(
            "{head}: manifest prefixes [{}] vs [{}]",
            pm.join(", "),
            om.join(", ")
        ));
    }
    for rel in ptree.keys().filter(|k| !otree.contains_key(*k)) {
        out.push(format!("{head}: {rel} only in {}", primary.shard));
    }
    for rel in otree.keys().filter(|k| !ptree.contains_key(*k)) {
        out.push(format!("{head}: {rel} only in {}", other.shard));
    }
    let diffs: Vec<String> = ptree
        .par_iter()
        .filter_map(|(rel, pe)| {
            let oe = otree.get(rel)?;
            let d = same_device_content(rel, pe, oe).err()?;
            if let (EntryKind::File { .. }, EntryKind::File { .. }) = (&pe.kind, &oe.kind) {
                match (
                    host_binary_signature(&pe.path),
                    host_binary_signature(&oe.path),
                ) {
                    (Some(a), Some(b)) if a == b => return None,
                    (Some(a), Some(b)) if a.0 != b.0 => {
                        return Some(format!(
                            "{head}: {rel}: split host binaries carry different markers"
                        ))
                    }
                    (Some(_), Some(_)) => {
                        return Some(format!(
                            "{head}: {rel}: split host binaries have different wrapper co_indices"
                        ))
                    }
                    _ => {}
                }
            }
            Some(format!("{head}: {rel} ({d})"))
        })
        .collect();
    out.extend(diffs);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_names() {
        assert!(
            matches!(parse_artifact_name("blas_lib_generic"), Some((c, ArtifactKind::Generic)) if c == "blas_lib")
        );
        match parse_artifact_name("blas_lib_gfx1100") {
            Some((c, ArtifactKind::Arch(t))) => {
                assert_eq!(c, "blas_lib");
                assert_eq!(t.to_string(), "gfx1100");
            }
            other => panic!("{other:?}"),
        }
        match parse_artifact_name("blas_lib_gfx906:xnack-") {
            Some((_, ArtifactKind::Arch(t))) => assert_eq!(t.to_string(), "gfx906:xnack-"),
            other => panic!("{other:?}"),
        }
        assert!(parse_artifact_name("blas_lib_gfx110X-dgpu").is_none());
        assert!(parse_artifact_name("_generic").is_none());
        assert!(parse_artifact_name("nounderscore").is_none());
    }
}
