//! Verify a split shard output or a recombined tree: a directory whose
//! subdirectories are packages (`<component>_generic`, `<component>_<arch>`
//! or `<component>_<group>`), each with an `artifact_manifest.txt`.
//!
//! Checks (each failure is one [`Violation`]; all are collected):
//! * every package has a valid manifest; every listed prefix is a directory;
//!   nothing lies outside the listed prefixes; no symlink leaves its package;
//! * generic packages: no fat binary with device code, no `.kpack` file;
//!   every split binary has only HIPK wrappers pointing at a marker that
//!   decodes strictly;
//! * arch packages: only `.kpack` files (under a `.kpack` directory) and
//!   arch database files; every file's arch belongs to the package (its arch,
//!   its group from `--config`, or the family pattern `gfx110X`); one arch
//!   lives in one package per component; every `.kpack` parses strictly and
//!   every kernel reads back; every TOC target is listed in `gfx_arches`;
//! * the end-to-end check: for every split host binary, every wrapper
//!   `co_index` and every arch the component's packages ship, the runtime's
//!   lookup (marker search paths relative to the binary, `@GFXARCH@`
//!   expanded with the runtime's compatible targets, first archive listing
//!   the target wins, kpack-reference §2.2) over the tree as installed (all
//!   packages overlaid) finds an AMDGPU code object; and every kernel in a
//!   `.kpack` belongs to a binary that can ask for it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use crate::config::PackagingConfig;
use crate::databases::{self, DatabaseKind};
use crate::fsutil::{self, FsError, IoContext};
use crate::manifest::{ArtifactManifest, MANIFEST_FILE};
use crate::target::Target;
use crate::walk::{self, EntryKind};

/// The `.kpack` entry metadata key listing the device targets of the
/// entry's original bundle (written by `kpack split`).
pub const BUNDLE_TARGETS: &str = "bundle_targets";

/// Options of [`verify`].
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Directory holding the packages.
    pub artifacts_dir: PathBuf,
    /// Packaging config: gives the exact archs of group packages.
    pub config: Option<PackagingConfig>,
    /// Install models whose lookups are checked (empty: both).
    pub install_models: Vec<InstallModel>,
}

/// How packages are installed (`kpack-reference.md` §12.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InstallModel {
    /// Packages extracted into one root, prefix directories kept.
    Overlay,
    /// Every prefix of every package copied into one install root (TheRock's
    /// `dist/`, tarballs); a later prefix's file replaces an earlier one's
    /// (packages in name order, prefixes in sorted order).
    Flatten,
}

impl InstallModel {
    /// Both models, in report order.
    pub const ALL: [InstallModel; 2] = [InstallModel::Overlay, InstallModel::Flatten];

    /// `overlay` / `flatten`.
    pub fn name(self) -> &'static str {
        match self {
            InstallModel::Overlay => "overlay",
            InstallModel::Flatten => "flatten",
        }
    }
}

/// Lookups of one install model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModelReport {
    /// `overlay` or `flatten`.
    pub model: String,
    /// (binary, co_index, arch) lookups tried.
    pub lookups: usize,
    /// Lookups that found a code object.
    pub resolved: usize,
    /// Lookups for an arch the binary was never built for.
    pub not_built: usize,
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Violation {
    /// Package directory name.
    pub package: String,
    /// Path inside the package (empty for the package itself).
    pub path: String,
    /// Machine-readable kind (`missing_manifest`, `fat_binary`, `unresolved`, …).
    pub kind: &'static str,
    /// What is wrong.
    pub message: String,
}

/// Result of [`verify`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// No violation.
    pub ok: bool,
    /// Packages checked.
    pub packages: usize,
    /// Regular files checked.
    pub files: usize,
    /// Split host binaries found.
    pub host_binaries: usize,
    /// `.kpack` archives checked.
    pub kpack_files: usize,
    /// (binary, co_index, arch) lookups tried, over every install model.
    pub lookups: usize,
    /// Lookups that found a code object, over every install model.
    pub lookups_resolved: usize,
    /// Lookups for an arch the binary was never built for (the archive is
    /// there, and no archive in the tree has code of that binary for it).
    pub lookups_not_built: usize,
    /// The same counts per install model.
    pub models: Vec<ModelReport>,
    /// Everything that failed, sorted.
    pub violations: Vec<Violation>,
    /// Things that could not be checked.
    pub warnings: Vec<String>,
}

/// Input problems (exit 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The directory cannot be read.
    #[error(transparent)]
    Fs(#[from] FsError),
    /// Not a directory.
    #[error("{0}: not a directory")]
    NotADir(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PkgKind {
    Generic,
    /// Suffix after the component.
    Arch(String),
}

#[derive(Debug)]
struct Package {
    name: String,
    component: String,
    kind: PkgKind,
    /// Regular files and symlinks keyed by path relative to the package.
    files: Vec<(String, PathBuf, EntryKind)>,
    /// Prefixes of its manifest, sorted.
    prefixes: Vec<String>,
}

impl Package {
    /// Where package path `rel` lands in `model`'s install root.
    fn installed<'r>(&self, rel: &'r str, model: InstallModel) -> &'r str {
        if model == InstallModel::Overlay {
            return rel;
        }
        self.prefixes
            .iter()
            .filter_map(|p| rel.strip_prefix(p.as_str())?.strip_prefix('/'))
            .min_by_key(|r| r.len())
            .unwrap_or(rel)
    }
}

/// Archs a package may hold.
#[derive(Debug, Clone)]
enum ArchSet {
    Exact(Vec<Target>),
    /// `gfx110X`: processors `gfx110?`.
    Pattern(String),
    Unknown,
}

impl ArchSet {
    fn allows(&self, t: &Target) -> Option<bool> {
        match self {
            ArchSet::Exact(v) => Some(v.iter().any(|a| a.compatible_with(t))),
            ArchSet::Pattern(p) => Some(
                t.processor.len() == p.len() + 1
                    && t.processor.starts_with(p.as_str())
                    && !t.is_generic(),
            ),
            ArchSet::Unknown => None,
        }
    }
}

fn arch_set(suffix: &str, config: Option<&PackagingConfig>) -> ArchSet {
    if let Some(g) = config.and_then(|c| c.group(suffix)) {
        return ArchSet::Exact(
            g.architectures
                .iter()
                .filter_map(|a| Target::parse(a).ok())
                .collect(),
        );
    }
    if let Ok(t) = Target::parse(suffix) {
        return ArchSet::Exact(vec![t]);
    }
    if let Some(t) = databases::parse_target_exact(suffix).and_then(|t| Target::parse(&t).ok()) {
        return ArchSet::Exact(vec![t]);
    }
    if let Some(stem) = suffix.strip_suffix('X') {
        if stem.starts_with("gfx")
            && stem.len() > 3
            && stem[3..].bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return ArchSet::Pattern(stem.to_string());
        }
    }
    ArchSet::Unknown
}

fn parse_package_name(name: &str) -> Option<(String, PkgKind)> {
    if let Some(c) = name.strip_suffix("_generic") {
        return (!c.is_empty()).then(|| (c.to_string(), PkgKind::Generic));
    }
    let (c, s) = name.rsplit_once('_')?;
    (!c.is_empty() && !s.is_empty()).then(|| (c.to_string(), PkgKind::Arch(s.to_string())))
}

/// Lexically joins `rel` (may hold `..`) onto `base` (a `/`-separated
/// relative dir); `None` when it leaves the root.
fn join_lexical(base: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = base.split('/').filter(|c| !c.is_empty()).collect();
    for c in Path::new(rel).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(n) => parts.push(n.to_str()?),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

struct HostBinary {
    package: String,
    component: String,
    rel: String,
    /// `rel`, or `rel(member)` for a static-archive member.
    label: String,
    marker: rocpack_kpack::Marker,
    co_indices: BTreeSet<u64>,
}

/// What one generic-package file turned out to be.
enum GenericFinding {
    Host(HostBinary),
    Violation(Violation),
    Warning(String),
}

fn v(package: &str, path: &str, kind: &'static str, message: impl Into<String>) -> Violation {
    Violation {
        package: package.to_string(),
        path: path.to_string(),
        kind,
        message: message.into(),
    }
}

fn check_generic_file(pkg: &Package, rel: &str, path: &Path) -> Vec<GenericFinding> {
    let mut out = Vec::new();
    if rel.ends_with(".kpack") || rel.split('/').any(|c| c == rocpack_kpack::KPACK_DIR) {
        out.push(GenericFinding::Violation(v(
            &pkg.name,
            rel,
            "kpack_in_generic",
            "`.kpack` file in a generic package (belongs in an arch package)",
        )));
        return out;
    }
    // Headers, tables, wrappers and markers only, through positioned reads
    // (never the whole file, never a mapping a truncation could fault).
    let unreadable = |why: String| GenericFinding::Violation(v(&pkg.name, rel, "unreadable", why));
    let image = match rocpack_image::ImageFile::open(path) {
        Ok(i) => i,
        Err(e) => {
            out.push(unreadable(format!("cannot read file: {e}")));
            return out;
        }
    };
    let kind = image.file_type();
    if matches!(
        kind,
        rocpack_image::FileType::Bundle | rocpack_image::FileType::Ccob
    ) {
        out.push(GenericFinding::Warning(format!(
            "{}/{rel}: device-only offload bundle in a generic package: it ships only the archs of the shard it came from",
            pkg.name
        )));
    } else if kind.is_splittable() {
        // Device code objects without an arch in the name stay generic in
        // split (nothing names their arch); they are not judged.
        fat_coff_members(&image, pkg, rel, path, &mut out);
        match image.units() {
            Err(e) => out.push(unreadable(format!("cannot read file: {e}"))),
            Ok(Ok(units)) => {
                for u in units {
                    let label = match &u.member {
                        Some(m) => format!("{rel}({m})"),
                        None => rel.to_string(),
                    };
                    out.extend(judge_image(pkg, rel, &label, u.analysis, &|| {
                        carries_device_code_in(path, Some(u.range))
                    }));
                }
            }
            Ok(Err(e)) => out.push(GenericFinding::Warning(format!(
                "{}/{rel}: static archive could not be read: {e}",
                pkg.name
            ))),
        }
    } else if kind.is_unsplit_object() {
        // Split copies these as they are (it splits the images they are
        // linked into): not a failure, but device code every arch package
        // ships, which a release engineer wants to know about.
        if let Ok(Ok(info)) = image.analyze() {
            if info.has_device_code() {
                out.push(GenericFinding::Warning(format!(
                    "{}/{rel}: fat COFF object ({} bundle(s) of HIP device code) in a generic package: COFF objects are not split",
                    pkg.name,
                    info.bundles().len()
                )));
            }
        }
    }
    out
}

/// The COFF object members of an `ar` archive (a Windows `.lib`) with
/// HIP device code: a fat binary in a generic package (split refuses such
/// a library: it splits no COFF object). None in any other file.
fn fat_coff_members(
    image: &rocpack_image::ImageFile,
    pkg: &Package,
    rel: &str,
    path: &Path,
    out: &mut Vec<GenericFinding>,
) {
    let Ok(Ok(members)) = image.coff_members() else {
        return;
    };
    for (name, at, len) in members {
        if carries_device_code_in(path, Some((at, len))) {
            out.push(GenericFinding::Violation(v(
                &pkg.name,
                &format!("{rel}({name})"),
                "fat_binary",
                "COFF object with HIP device code in a static library left in a generic package: \
                 `kpack split` refuses such a library (COFF objects are not split; split the DLL/EXE \
                 they are linked into)",
            )));
        }
    }
}

/// Whether `path` (or the `(offset, len)` range of it) holds HIP device
/// code by its magics (`rocpack_image::carries_device_code`), for files the
/// analysis refused: read in bounded pieces, never mapped.
fn carries_device_code_in(path: &Path, range: Option<(u64, u64)>) -> bool {
    let Ok(file) = fs::File::open(path) else {
        return false;
    };
    let (at, n) = match range {
        Some(r) => r,
        None => match file.metadata() {
            Ok(m) => (0, m.len()),
            Err(_) => return false,
        },
    };
    rocpack_image::file_carries_device_code(&file, at, n).unwrap_or(false)
}

/// Judges one ELF file or PE image (a file, or an archive member labelled
/// `label`) by its analysis; `carries()` says whether one that cannot be
/// analysed holds device code.
fn judge_image(
    pkg: &Package,
    rel: &str,
    label: &str,
    info: rocpack_image::Result<rocpack_image::Analysis>,
    carries: &dyn Fn() -> bool,
) -> Vec<GenericFinding> {
    let mut out = Vec::new();
    let info = match info {
        Ok(i) => i,
        // A file we cannot analyse (PN_XNUM, 32-bit, odd e_type) is fine
        // without device code; with it, it is a fat binary nobody can see
        // into, shipped in a generic package.
        Err(e) if carries() => {
            out.push(GenericFinding::Violation(v(
                &pkg.name,
                label,
                "fat_binary",
                format!("carries HIP device code but cannot be analysed ({e}): a fat binary left in a generic package"),
            )));
            return out;
        }
        Err(_) => return out, // not a HIP binary (other ELF flavours)
    };
    let wrappers = info.wrapper_markers();
    match info.state() {
        rocpack_image::State::HostOnly => {}
        rocpack_image::State::Fat => {
            if info.has_device_code() {
                out.push(GenericFinding::Violation(v(
                    &pkg.name,
                    label,
                    "fat_binary",
                    format!(
                        "fat binary with device code left in a generic package ({} bundle(s) in its bundle section, {} HIPF wrapper(s))",
                        info.bundles().len(),
                        wrappers.len()
                    ),
                )));
            }
        }
        rocpack_image::State::Split => {
            let bad: Vec<usize> = wrappers
                .iter()
                .enumerate()
                .filter(|(_, w)| w.magic != rocpack_image::HIPK_MAGIC || w.marker.is_none())
                .map(|(i, _)| i)
                .collect();
            if !bad.is_empty() {
                out.push(GenericFinding::Violation(v(
                    &pkg.name,
                    label,
                    "bad_wrapper",
                    format!("wrapper(s) {bad:?} are not HIPK wrappers pointing at the marker"),
                )));
            }
            let Some(m) = info.marker() else {
                out.push(GenericFinding::Violation(v(
                    &pkg.name,
                    label,
                    "bad_marker",
                    "HIPK wrappers but no marker section (.rocm_kpack_ref / .kpackrf)",
                )));
                return out;
            };
            match rocpack_kpack::Marker::decode_strict(&m.bytes) {
                Ok(marker) => out.push(GenericFinding::Host(HostBinary {
                    package: pkg.name.clone(),
                    component: pkg.component.clone(),
                    rel: rel.to_string(),
                    label: label.to_string(),
                    marker,
                    co_indices: wrappers.iter().map(|w| u64::from(w.co_index)).collect(),
                })),
                Err(e) => out.push(GenericFinding::Violation(v(
                    &pkg.name,
                    label,
                    "bad_marker",
                    format!("marker does not decode: {e}"),
                ))),
            }
        }
    }
    out
}

/// Archive files that opened: overlay path → (package, reader).
type Kpacks = BTreeMap<String, (String, rocpack_kpack::KpackReader)>;
/// Component → archs its packages ship.
type Shipped = BTreeMap<String, BTreeSet<String>>;
/// (kernel name, target) → co_indices some archive of the tree holds.
type Built = BTreeMap<(String, String), BTreeSet<u64>>;
/// (kernel name, co_index) → device targets the split recorded for it.
type Recorded = BTreeMap<(String, u64), BTreeSet<String>>;
/// (kernel name, co_index) the split host binaries ask for.
type Requested = BTreeSet<(String, u64)>;

/// A warning: logged and kept for the report.
fn warn(log: &mut dyn FnMut(&str), warnings: &mut Vec<String>, msg: String) {
    log(&format!("warning: {msg}"));
    warnings.push(msg);
}

/// Runs every check. `log` gets warning lines.
pub fn verify(
    opts: &VerifyOptions,
    log: &mut dyn FnMut(&str),
) -> Result<VerifyReport, VerifyError> {
    let root = &opts.artifacts_dir;
    if !fs::metadata(root).ctx(root, "stat")?.is_dir() {
        return Err(VerifyError::NotADir(root.clone()));
    }
    let mut report = VerifyReport::default();
    let mut vio: Vec<Violation> = Vec::new();
    let mut warnings: Vec<String> = Vec::new();

    // 1. Packages, manifests, walks.
    let packages = collect_packages(root, &mut vio, &mut warnings, log)?;
    report.packages = packages.len();
    if packages.is_empty() {
        // Nothing checked is not a pass: an empty directory, a wrong
        // `--artifacts-dir` or packages under other names would otherwise
        // print `OK: 0 packages`.
        vio.push(v(
            "",
            "",
            "no_packages",
            format!(
                "{}: no package to check (a package is a directory, or a symlink to one, named `<component>_generic` or `<component>_<arch or group>`)",
                root.display()
            ),
        ));
    }
    report.files = packages
        .iter()
        .map(|p| {
            p.files
                .iter()
                .filter(|f| matches!(f.2, EntryKind::File { .. }))
                .count()
        })
        .sum();

    // 2. Generic packages (parallel per file).
    let hosts = check_generic_packages(&packages, &mut vio, &mut warnings, log);
    report.host_binaries = hosts.len();

    // 3. Arch packages: contents, arch membership, kpacks.
    let (kpacks, shipped) =
        check_arch_packages(&packages, opts, &mut report, &mut vio, &mut warnings, log);

    // 4. Overlay conflicts (same install path from two packages).
    check_overlay(&packages, &mut vio);

    // 5. Runtime lookups.
    let (built, recorded, requested) = lookup_index(&kpacks, &hosts, &mut vio);
    let index = LookupIndex {
        packages: &packages,
        kpacks: &kpacks,
        hosts: &hosts,
        shipped: &shipped,
        built: &built,
        recorded: &recorded,
    };
    index.lookups(opts, &mut report, &mut vio);
    orphan_kernels(&kpacks, &requested, &mut vio);

    vio.sort();
    vio.dedup();
    report.ok = vio.is_empty();
    report.violations = vio;
    report.warnings = warnings;
    Ok(report)
}

/// Every package under `root` (a directory, or a symlink to one), its
/// manifest and files; what is wrong with each is a violation.
fn collect_packages(
    root: &Path,
    vio: &mut Vec<Violation>,
    warnings: &mut Vec<String>,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Package>, VerifyError> {
    let mut packages: Vec<Package> = Vec::new();
    for name in fsutil::sorted_names(root).ctx(root, "read directory")? {
        let Some(name) = name.to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let link = root.join(&name);
        let meta = fs::symlink_metadata(&link).ctx(&link, "stat")?;
        // Build systems hand their outputs over as symlinks (`bazel-bin`,
        // Buck2's `buck-out` links, a directory of links to rule outputs):
        // a package that is a symlink to a directory is followed and
        // checked like any other; one that leads nowhere is a violation.
        let path = if meta.file_type().is_symlink() {
            match fs::canonicalize(&link) {
                Ok(real) if real.is_dir() => real,
                Ok(_) => continue, // a link to a file, not a package
                Err(e) => {
                    vio.push(v(
                        &name,
                        "",
                        "bad_package",
                        format!("symlinked package does not resolve to a directory: {e}"),
                    ));
                    continue;
                }
            }
        } else if meta.is_dir() {
            link
        } else {
            continue;
        };
        let Some((component, kind)) = parse_package_name(&name) else {
            vio.push(v(
                &name,
                "",
                "bad_package_name",
                "name is neither <component>_generic nor <component>_<arch or group>",
            ));
            continue;
        };
        let manifest = match ArtifactManifest::read_dir(&path) {
            Ok(m) => Some(m),
            Err(e) => {
                let kind = if path.join(MANIFEST_FILE).exists() {
                    "bad_manifest"
                } else {
                    "missing_manifest"
                };
                vio.push(v(&name, MANIFEST_FILE, kind, e.to_string()));
                None
            }
        };
        let mut files = Vec::new();
        match walk::walk(&path) {
            Ok(entries) => {
                for e in entries {
                    if e.rel == MANIFEST_FILE {
                        continue;
                    }
                    if matches!(e.kind, EntryKind::Dir) {
                        continue;
                    }
                    if let Some(m) = &manifest {
                        let inside = m.prefixes().iter().any(|p| {
                            e.rel
                                .strip_prefix(p.as_str())
                                .is_some_and(|r| r.starts_with('/'))
                        });
                        if !inside {
                            vio.push(v(
                                &name,
                                &e.rel,
                                "outside_manifest",
                                "file is under no prefix listed in artifact_manifest.txt",
                            ));
                        }
                    }
                    let at = e.path(&path);
                    files.push((e.rel, at, e.kind));
                }
            }
            Err(e) => vio.push(v(&name, "", "bad_tree", e.to_string())),
        }
        if let Some(m) = &manifest {
            for p in m.prefixes() {
                if !fsutil::join_rel(&path, p).is_dir() {
                    warn(
                        log,
                        warnings,
                        format!("{name}: manifest prefix {p} does not exist"),
                    );
                }
            }
        }
        let mut prefixes: Vec<String> = manifest
            .as_ref()
            .map(|m| m.prefixes().to_vec())
            .unwrap_or_default();
        prefixes.sort();
        packages.push(Package {
            name,
            component,
            kind,
            files,
            prefixes,
        });
    }
    Ok(packages)
}

/// The files of the generic packages (in parallel): the split host
/// binaries found, violations and warnings.
fn check_generic_packages(
    packages: &[Package],
    vio: &mut Vec<Violation>,
    warnings: &mut Vec<String>,
    log: &mut dyn FnMut(&str),
) -> Vec<HostBinary> {
    let generic_jobs: Vec<(&Package, &String, &PathBuf)> = packages
        .iter()
        .filter(|p| p.kind == PkgKind::Generic)
        .flat_map(|p| {
            p.files
                .iter()
                .filter(|f| matches!(f.2, EntryKind::File { .. }))
                .map(move |f| (p, &f.0, &f.1))
        })
        .collect();
    let findings: Vec<GenericFinding> = generic_jobs
        .par_iter()
        .flat_map_iter(|(p, rel, path)| check_generic_file(p, rel, path))
        .collect();
    let mut hosts: Vec<HostBinary> = Vec::new();
    for f in findings {
        match f {
            GenericFinding::Host(h) => hosts.push(h),
            GenericFinding::Violation(x) => vio.push(x),
            GenericFinding::Warning(w) => warn(log, warnings, w),
        }
    }
    hosts
}

/// The arch packages: each file a `.kpack` (parsing strictly, in a
/// `.kpack` directory, its targets listed) or an arch database file, of
/// archs the package's suffix stands for, each arch of a component in one
/// package. Returns the archives that opened and the archs each component
/// ships.
fn check_arch_packages(
    packages: &[Package],
    opts: &VerifyOptions,
    report: &mut VerifyReport,
    vio: &mut Vec<Violation>,
    warnings: &mut Vec<String>,
    log: &mut dyn FnMut(&str),
) -> (Kpacks, Shipped) {
    // overlay rel → (package, path) of kpack files that opened.
    let mut kpacks: BTreeMap<String, (String, rocpack_kpack::KpackReader)> = BTreeMap::new();
    // component → arch string → packages holding it
    let mut arch_homes: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    // component → archs shipped
    let mut shipped: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // package suffix → archs seen in that suffix across components
    let mut suffix_archs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let db_kinds = DatabaseKind::ALL;
    for p in packages
        .iter()
        .filter(|p| matches!(p.kind, PkgKind::Arch(_)))
    {
        let PkgKind::Arch(suffix) = &p.kind else {
            continue;
        };
        let set = arch_set(suffix, opts.config.as_ref());
        if matches!(set, ArchSet::Unknown) {
            let msg = format!(
                "{}: cannot tell which archs package suffix `{suffix}` stands for (pass --config); arch membership not checked",
                p.name
            );
            warn(log, warnings, msg);
        }
        if let ArchSet::Exact(v) = &set {
            if opts.config.is_some() || v.len() == 1 {
                let e = shipped.entry(p.component.clone()).or_default();
                for t in v {
                    e.insert(t.to_string());
                }
            }
        }
        let opened: Vec<(String, PathBuf, Result<rocpack_kpack::KpackReader, String>)> = p
            .files
            .par_iter()
            .filter(|f| matches!(f.2, EntryKind::File { .. }) && f.0.ends_with(".kpack"))
            .map(|(rel, path, _)| {
                let r = rocpack_kpack::KpackReader::open(path).map_err(|e| e.to_string());
                let r = r.and_then(|r| {
                    for e in r.entries() {
                        r.get_entry(e)
                            .map_err(|err| format!("kernel {} [{}]: {err}", e.key, e.target))?;
                    }
                    Ok(r)
                });
                (rel.clone(), path.clone(), r)
            })
            .collect();
        for (rel, path, r) in opened {
            let _ = path;
            report.kpack_files += 1;
            if !rel.split('/').any(|c| c == rocpack_kpack::KPACK_DIR) {
                vio.push(v(
                    &p.name,
                    &rel,
                    "misplaced_kpack",
                    "`.kpack` file outside a `.kpack` directory",
                ));
            }
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    vio.push(v(
                        &p.name,
                        &rel,
                        "bad_kpack",
                        format!("does not parse strictly: {e}"),
                    ));
                    continue;
                }
            };
            let listed: BTreeSet<&str> = r.gfx_arches().iter().map(String::as_str).collect();
            let mut unlisted: BTreeSet<&str> = BTreeSet::new();
            for (_, t) in r.kernels() {
                if !listed.contains(t) {
                    unlisted.insert(t);
                }
            }
            if !unlisted.is_empty() {
                vio.push(v(&p.name, &rel, "unlisted_target", format!("TOC targets {unlisted:?} missing from gfx_arches {listed:?}: the runtime can never load them")));
            }
            for a in r.gfx_arches() {
                note_arch(
                    vio,
                    p,
                    &rel,
                    a,
                    &set,
                    &mut arch_homes,
                    &mut shipped,
                    &mut suffix_archs,
                    suffix,
                );
            }
            kpacks.insert(rel, (p.name.clone(), r));
        }
        for (rel, _, kind) in &p.files {
            if rel.ends_with(".kpack") {
                continue;
            }
            if matches!(kind, EntryKind::Symlink { .. }) {
                vio.push(v(
                    &p.name,
                    rel,
                    "non_arch_file",
                    "symlink in an arch package (only .kpack and arch database files belong there)",
                ));
                continue;
            }
            match databases::classify(&db_kinds, rel) {
                Some((_, arch)) => match Target::parse(&arch) {
                    Ok(_) => note_arch(
                        vio,
                        p,
                        rel,
                        &arch,
                        &set,
                        &mut arch_homes,
                        &mut shipped,
                        &mut suffix_archs,
                        suffix,
                    ),
                    Err(_) => vio.push(v(
                        &p.name,
                        rel,
                        "non_arch_file",
                        format!("database file with unparsable arch `{arch}`"),
                    )),
                },
                None => vio.push(v(
                    &p.name,
                    rel,
                    "non_arch_file",
                    "not a .kpack or arch database file: generic content in an arch package",
                )),
            }
        }
    }
    for (comp, homes) in &arch_homes {
        for (arch, pkgs) in homes {
            if pkgs.len() > 1 {
                let list: Vec<&str> = pkgs.iter().map(String::as_str).collect();
                vio.push(v(
                    list.first().copied().unwrap_or_default(),
                    "",
                    "arch_in_two_packages",
                    format!(
                        "component {comp}: {arch} content is in several packages: {}",
                        list.join(", ")
                    ),
                ));
            }
        }
    }
    // Archs of a package's group seen in other components' packages of the
    // same group are promised too (a family package ships all its archs).
    for p in packages {
        if let PkgKind::Arch(suffix) = &p.kind {
            if let Some(a) = suffix_archs.get(suffix) {
                shipped
                    .entry(p.component.clone())
                    .or_default()
                    .extend(a.iter().cloned());
            }
        }
    }

    (kpacks, shipped)
}

/// Two packages installing different files at the same path.
fn check_overlay(packages: &[Package], vio: &mut Vec<Violation>) {
    let mut overlay: BTreeMap<&str, Vec<(&Package, &PathBuf)>> = BTreeMap::new();
    for p in packages {
        for (rel, path, kind) in &p.files {
            if matches!(kind, EntryKind::File { .. }) {
                overlay.entry(rel.as_str()).or_default().push((p, path));
            }
        }
    }
    for (rel, list) in &overlay {
        if list.len() > 1 {
            let first = list[0];
            for other in &list[1..] {
                let same = fsutil::files_equal(first.1, other.1).unwrap_or(false);
                if !same {
                    vio.push(v(
                        &first.0.name,
                        rel,
                        "overlay_conflict",
                        format!(
                            "{} and {} install different files at {rel}",
                            first.0.name, other.0.name
                        ),
                    ));
                }
            }
        }
    }
}

/// What the archives hold ([`Built`]), what the split recorded
/// ([`Recorded`]) and what the host binaries ask for ([`Requested`]; a
/// marker with an absolute search path is a violation).
fn lookup_index(
    kpacks: &Kpacks,
    hosts: &[HostBinary],
    vio: &mut Vec<Violation>,
) -> (Built, Recorded, Requested) {
    // (kernel name, target) → co_indices present in some archive of the tree.
    let mut built: BTreeMap<(String, String), BTreeSet<u64>> = BTreeMap::new();
    for (_, r) in kpacks.values() {
        for (key, t) in r.kernels() {
            if let Some((name, i)) = rocpack_kpack::split_toc_key(key) {
                built
                    .entry((name.to_string(), t.to_string()))
                    .or_default()
                    .insert(i);
            }
        }
    }
    // (kernel name, co_index) → the device targets of that bundle as
    // `kpack split` recorded them (`metadata.bundle_targets` of any of its
    // entries): what the binary was built for, whichever archives are left.
    let mut recorded: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
    for (_, r) in kpacks.values() {
        for e in r.entries() {
            let Some(ts) = e.metadata.as_ref().and_then(recorded_targets) else {
                continue;
            };
            if let Some((name, i)) = rocpack_kpack::split_toc_key(&e.key) {
                recorded
                    .entry((name.to_string(), i))
                    .or_default()
                    .extend(ts);
            }
        }
    }
    let mut requested: BTreeSet<(String, u64)> = BTreeSet::new();
    for h in hosts {
        for i in &h.co_indices {
            requested.insert((h.marker.kernel_name.clone(), *i));
        }
        if h.marker
            .kpack_search_paths
            .iter()
            .any(|s| Path::new(s).is_absolute())
        {
            vio.push(v(
                &h.package,
                &h.rel,
                "absolute_search_path",
                "marker has an absolute search path: not relocatable and not checkable in the tree",
            ));
        }
    }
    (built, recorded, requested)
}

/// What the runtime lookups of every install model need.
struct LookupIndex<'a> {
    packages: &'a [Package],
    kpacks: &'a Kpacks,
    hosts: &'a [HostBinary],
    shipped: &'a Shipped,
    built: &'a Built,
    recorded: &'a Recorded,
}

impl LookupIndex<'_> {
    /// Every wrapper of every host binary looked up for every arch its
    /// component ships, as the runtime would, in each install model.
    fn lookups(&self, opts: &VerifyOptions, report: &mut VerifyReport, vio: &mut Vec<Violation>) {
        let (packages, kpacks, hosts, shipped, built, recorded) = (
            self.packages,
            self.kpacks,
            self.hosts,
            self.shipped,
            self.built,
            self.recorded,
        );
        let by_name: BTreeMap<&str, &Package> =
            packages.iter().map(|p| (p.name.as_str(), p)).collect();
        let models: Vec<InstallModel> = if opts.install_models.is_empty() {
            InstallModel::ALL.to_vec()
        } else {
            let mut m = opts.install_models.clone();
            m.sort();
            m.dedup();
            m
        };
        for model in models {
            // The archives as installed in this model; a later file at the same
            // place replaces an earlier one (packages by name, then prefixes).
            let mut order: Vec<(&str, &str, &str)> = kpacks
                .iter()
                .map(|(rel, (pkg, _))| {
                    let inst = by_name
                        .get(pkg.as_str())
                        .map_or(rel.as_str(), |p| p.installed(rel, model));
                    (pkg.as_str(), rel.as_str(), inst)
                })
                .collect();
            order.sort();
            let mut installed: BTreeMap<&str, &rocpack_kpack::KpackReader> = BTreeMap::new();
            for (_, rel, inst) in order {
                installed.insert(inst, &kpacks[rel].1);
            }
            let mut mr = ModelReport {
                model: model.name().to_string(),
                ..ModelReport::default()
            };
            for h in hosts {
                let archs = shipped.get(&h.component).cloned().unwrap_or_default();
                let rel = by_name
                    .get(h.package.as_str())
                    .map_or(h.rel.as_str(), |p| p.installed(&h.rel, model));
                let dir = rel.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                for arch in &archs {
                    for &co in &h.co_indices {
                        mr.lookups += 1;
                        match lookup(&h.marker, dir, co, arch, &installed) {
                            Ok(()) => mr.resolved += 1,
                            Err(LookupError::Broken(msg)) => vio.push(v(
                                &h.package,
                                &h.label,
                                "unresolved",
                                format!(
                                    "{} install: wrapper co_index {co}, arch {arch}: {msg}",
                                    model.name()
                                ),
                            )),
                            Err(miss) => {
                                // No archive has this key for the arch: fine when
                                // this translation unit (co_index) was never built
                                // for it — each has its own arch set (-fgpu-rdc
                                // off, mixed --offload-arch), and a package may
                                // hold only another library's database files for
                                // an arch — a violation when its code for the
                                // arch is elsewhere in the tree, or the split
                                // recorded that the bundle had it.
                                let compatible = rocpack_kpack::compatible_targets(arch);
                                let name = &h.marker.kernel_name;
                                let elsewhere: Vec<u64> = compatible
                                    .iter()
                                    .filter_map(|t| built.get(&(name.clone(), t.clone())))
                                    .flatten()
                                    .copied()
                                    .collect();
                                let record = recorded.get(&(name.clone(), co));
                                let had: Option<&String> =
                                    record.and_then(|r| compatible.iter().find(|t| r.contains(*t)));
                                let (msg, no_archive) = match &miss {
                                    LookupError::NoKernel(m) => (m, false),
                                    LookupError::NoArchive(m) | LookupError::Broken(m) => (m, true),
                                };
                                let why = if elsewhere.contains(&co) {
                                    Some(format!(
                                        "the tree holds {arch} code for co_index {elsewhere:?} of this binary"
                                    ))
                                } else if let Some(t) = had {
                                    Some(format!(
                                        "the split recorded {t} code for this bundle, and no archive in the tree holds it"
                                    ))
                                } else if record.is_none() && no_archive {
                                    Some(
                                        "no archive records which targets this bundle was built for (split by ROCm's splitter or an older kpack), so a missing archive cannot be told from one never built"
                                            .to_string(),
                                    )
                                } else {
                                    None
                                };
                                match why {
                                    None => mr.not_built += 1,
                                    Some(why) => vio.push(v(
                                        &h.package,
                                        &h.label,
                                        "unresolved",
                                        format!(
                                            "{} install: wrapper co_index {co}, arch {arch}: {msg} ({why})",
                                            model.name()
                                        ),
                                    )),
                                }
                            }
                        }
                    }
                }
            }
            report.lookups += mr.lookups;
            report.lookups_resolved += mr.resolved;
            report.lookups_not_built += mr.not_built;
            report.models.push(mr);
        }
    }
}

/// Archive entries no split host binary in the tree asks for.
fn orphan_kernels(kpacks: &Kpacks, requested: &Requested, vio: &mut Vec<Violation>) {
    for (rel, (pkg, r)) in kpacks {
        let mut orphans = BTreeSet::new();
        for (key, _) in r.kernels() {
            let ok = rocpack_kpack::split_toc_key(key)
                .is_some_and(|(name, i)| requested.contains(&(name.to_string(), i)));
            if !ok {
                orphans.insert(key);
            }
        }
        if !orphans.is_empty() {
            let list: Vec<&str> = orphans.into_iter().take(8).collect();
            vio.push(v(
                pkg,
                rel,
                "orphan_kernel",
                format!(
                    "kernels no split host binary in the tree asks for: {}",
                    list.join(", ")
                ),
            ));
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn note_arch(
    vio: &mut Vec<Violation>,
    p: &Package,
    rel: &str,
    arch: &str,
    set: &ArchSet,
    homes: &mut BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    shipped: &mut BTreeMap<String, BTreeSet<String>>,
    suffix_archs: &mut BTreeMap<String, BTreeSet<String>>,
    suffix: &str,
) {
    let Ok(t) = Target::parse(arch) else {
        vio.push(v(
            &p.name,
            rel,
            "bad_arch",
            format!("`{arch}` is not a target ID"),
        ));
        return;
    };
    if set.allows(&t) == Some(false) {
        vio.push(v(
            &p.name,
            rel,
            "cross_arch",
            format!(
                "{arch} content in package {} (suffix `{suffix}` does not cover {arch})",
                p.name
            ),
        ));
        return;
    }
    homes
        .entry(p.component.clone())
        .or_default()
        .entry(t.to_string())
        .or_default()
        .insert(p.name.clone());
    if rel.ends_with(".kpack") {
        shipped
            .entry(p.component.clone())
            .or_default()
            .insert(t.to_string());
        suffix_archs
            .entry(suffix.to_string())
            .or_default()
            .insert(t.to_string());
    }
}

/// The runtime's lookup (2026 rules: fall-through across every archive
/// listing the target) over one install root, `installed` mapping each
/// archive's path in that root to the archive.
fn lookup(
    marker: &rocpack_kpack::Marker,
    dir: &str,
    co_index: u64,
    arch: &str,
    installed: &BTreeMap<&str, &rocpack_kpack::KpackReader>,
) -> Result<(), LookupError> {
    // Expansion and match order are the runtime's own (rocpack_kpack's
    // loader, shared with librocm_kpack); only path resolution differs: the
    // tree is checked as installed, lexically, not on this machine.
    let key = marker.lookup_key(co_index);
    let mut candidates: Vec<String> = Vec::new();
    for s in &marker.kpack_search_paths {
        if Path::new(s).is_absolute() {
            continue;
        }
        for e in rocpack_kpack::expand_search_path(s, &[arch]) {
            if let Some(p) = join_lexical(dir, &e) {
                if !candidates.contains(&p) {
                    candidates.push(p);
                }
            }
        }
    }
    let valid: Vec<(&String, &rocpack_kpack::KpackReader)> = candidates
        .iter()
        .filter_map(|c| installed.get(c.as_str()).map(|r| (c, *r)))
        .collect();
    if valid.is_empty() {
        return Err(LookupError::NoArchive(format!(
            "no archive found (ARCHIVE_NOT_FOUND); looked for {}",
            candidates.join(", ")
        )));
    }
    let readers: Vec<&rocpack_kpack::KpackReader> = valid.iter().map(|(_, r)| *r).collect();
    let order = rocpack_kpack::match_order(&[arch], &readers);
    // The runtime's fall-through (one loop, shared with librocm_kpack): any
    // per-archive failure moves on to the next archive listing the target.
    // A lookup is "not built" only when every archive lacked the key.
    let mut only_misses = true;
    let got = rocpack_kpack::fall_through(&order, |(i, t, _)| {
        let (path, r) = valid[*i];
        let t = t.as_str();
        if r.entry(&key, t).is_none() {
            return Err(format!(
                "{path} lists {t} but has no kernel {key} (KERNEL_NOT_FOUND)"
            ));
        }
        only_misses = false;
        let bytes = r
            .get(&key, t)
            .map_err(|e| format!("{path}: kernel {key} [{t}] does not read: {e}"))?;
        if !rocpack_image::detect(&bytes).is_code_object() {
            return Err(format!(
                "{path}: kernel {key} [{t}] is not an AMDGPU ELF code object"
            ));
        }
        Ok(())
    });
    match got {
        Ok(_) => Ok(()),
        Err(Some((_, m))) if only_misses => Err(LookupError::NoKernel(m)),
        Err(Some((_, m))) => Err(LookupError::Broken(m)),
        Err(None) => Err(LookupError::NoArchive(format!(
            "no archive lists a target compatible with {arch} (ARCH_NOT_FOUND); archives: {}",
            valid
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Why a lookup failed.
enum LookupError {
    /// Every archive that matched the arch lacks the key.
    NoKernel(String),
    /// No archive at the search paths, or none lists a compatible target.
    NoArchive(String),
    /// The code object is there but unreadable or not AMDGPU code.
    Broken(String),
}

/// `metadata.bundle_targets` of a `.kpack` entry written by `kpack split`:
/// the targets of every device code object of the entry's original bundle
/// (`docs/formats/kpack.md` §2).
fn recorded_targets(metadata: &rocpack_kpack::rmpv::Value) -> Option<Vec<String>> {
    let list = metadata
        .as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(BUNDLE_TARGETS))?
        .1
        .as_array()?;
    list.iter()
        .map(|t| t.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_join() {
        assert_eq!(
            join_lexical("a/lib", "../.kpack/x.kpack").as_deref(),
            Some("a/.kpack/x.kpack")
        );
        assert_eq!(join_lexical("", ".kpack/x").as_deref(), Some(".kpack/x"));
        assert_eq!(join_lexical("a", "../../x"), None);
    }

    #[test]
    fn arch_sets() {
        let t = |s: &str| Target::parse(s).unwrap();
        let s = arch_set("gfx110X", None);
        assert_eq!(s.allows(&t("gfx1101")), Some(true));
        assert_eq!(s.allows(&t("gfx1200")), Some(false));
        assert_eq!(s.allows(&t("gfx11-generic")), Some(false));
        let s = arch_set("gfx906", None);
        assert_eq!(s.allows(&t("gfx906:xnack-")), Some(true));
        assert_eq!(s.allows(&t("gfx90a")), Some(false));
        assert!(matches!(arch_set("legacy", None), ArchSet::Unknown));
    }
}
