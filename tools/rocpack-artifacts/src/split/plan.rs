//! Plan: which architectures are kept (`--exclude-arch`, `--gpu-targets`),
//! what stays in the generic artifact, and which database files and code
//! objects go to which per-architecture artifact and prefix. Nothing is
//! written here.

use std::collections::{BTreeMap, BTreeSet};

use super::scan::{Class, KernelRef, Scan};
use super::{check_name, is_excluded, FatBinarySummary, SplitError, SplitOptions};
use crate::walk::{self, EntryKind};

/// Per prefix (index into [`Plan::prefixes`]): database files (relative
/// paths) and code objects of one architecture.
pub(super) type PerPrefix = BTreeMap<usize, (Vec<String>, Vec<KernelRef>)>;

/// Where everything of the scanned input goes.
pub(super) struct Plan {
    /// Prefixes present in the input, manifest order.
    pub prefixes: Vec<PrefixPlan>,
    /// Manifest prefixes absent from the input.
    pub missing: Vec<String>,
    /// Architectures found (code objects and database files), sorted.
    pub discovered: BTreeSet<String>,
    /// Architectures dropped by `--exclude-arch` / `--gpu-targets`, sorted.
    pub excluded: Vec<String>,
    /// Kept architecture → prefix → database files and code objects.
    pub per_arch: BTreeMap<String, PerPrefix>,
    /// Fat binaries, in walk order.
    pub fat_summaries: Vec<FatBinarySummary>,
}

/// One prefix's entries and which of them the generic artifact receives.
pub(super) struct PrefixPlan {
    /// The manifest prefix.
    pub prefix: String,
    /// Its entries, sorted.
    pub entries: Vec<walk::Entry>,
    /// Per entry: copied into the generic artifact as it is (files that
    /// are neither fat binaries nor database files, and every symlink).
    /// Host-only rewrites of fat binaries were written by the scan.
    pub to_generic: Vec<bool>,
}

/// The targets `--gpu-targets` keeps, as base architectures (`None`: all).
fn wanted(opts: &SplitOptions) -> Option<BTreeSet<String>> {
    (!opts.gpu_targets.is_empty()).then(|| {
        opts.gpu_targets
            .iter()
            .filter_map(|t| rocpack_bundle::base_arch(t))
            .collect()
    })
}

/// Whether `--exclude-arch` / `--gpu-targets` (`wanted`) drop target `a`.
fn drops(opts: &SplitOptions, wanted: Option<&BTreeSet<String>>, a: &str) -> bool {
    is_excluded(a, &opts.exclude_arch)
        || wanted.is_some_and(|w| !rocpack_bundle::base_arch(a).is_some_and(|b| w.contains(&b)))
}

/// The architectures a split keeps (what [`plan`] decides), for the scan
/// to skip work on code objects that will be dropped.
pub(super) struct ArchFilter<'a> {
    opts: &'a SplitOptions,
    wanted: Option<BTreeSet<String>>,
}

impl<'a> ArchFilter<'a> {
    pub(super) fn new(opts: &'a SplitOptions) -> Self {
        ArchFilter {
            opts,
            wanted: wanted(opts),
        }
    }

    /// Whether target `a` is dropped.
    pub(super) fn drops(&self, a: &str) -> bool {
        drops(self.opts, self.wanted.as_ref(), a)
    }
}

/// Turns a scan into a plan; fails when `--gpu-targets` leaves no code
/// object in an artifact that has some.
pub(super) fn plan(opts: &SplitOptions, scan: Scan) -> Result<Plan, SplitError> {
    let Scan { prefixes, missing } = scan;

    let mut discovered = BTreeSet::new();
    for p in &prefixes {
        for c in p.classes.iter().flatten() {
            match c {
                Class::Database(a) => {
                    discovered.insert(a.clone());
                }
                Class::Fat(f) => discovered.extend(f.summary.architectures.iter().cloned()),
                Class::Generic => {}
            }
        }
    }
    for a in &discovered {
        check_name("architecture", a)?;
    }
    let wanted = wanted(opts);
    let dropped = |a: &str| drops(opts, wanted.as_ref(), a);
    let excluded: Vec<String> = discovered.iter().filter(|a| dropped(a)).cloned().collect();
    let kept: BTreeSet<String> = discovered.iter().filter(|a| !dropped(a)).cloned().collect();
    if let Some(w) = &wanted {
        let fats = || {
            prefixes.iter().flat_map(|p| {
                p.classes.iter().flatten().filter_map(|c| match c {
                    Class::Fat(f) => Some(f),
                    _ => None,
                })
            })
        };
        let any_fat = fats().next().is_some();
        let any_code = fats().any(|f| f.kernels.iter().any(|k| kept.contains(&k.arch)));
        if any_fat && !any_code {
            return Err(SplitError::Usage(format!(
                "--gpu-targets {} leaves no code object: the artifact has code for {}",
                w.iter().cloned().collect::<Vec<_>>().join(" "),
                discovered.iter().cloned().collect::<Vec<_>>().join(" ")
            )));
        }
    }

    let mut per_arch: BTreeMap<String, PerPrefix> = BTreeMap::new();
    let mut fat_summaries = Vec::new();
    let mut out = Vec::with_capacity(prefixes.len());
    for (pi, p) in prefixes.into_iter().enumerate() {
        let mut to_generic = Vec::with_capacity(p.entries.len());
        for (e, class) in p.entries.iter().zip(p.classes) {
            let generic = match (&e.kind, class) {
                (EntryKind::Dir, _) => false,
                (EntryKind::Symlink { .. }, _) => true,
                (EntryKind::File { .. }, Some(Class::Generic) | None) => true,
                (EntryKind::File { .. }, Some(Class::Database(arch))) => {
                    if kept.contains(&arch) {
                        let slot = per_arch.entry(arch).or_default().entry(pi).or_default();
                        slot.0.push(e.rel.clone());
                    }
                    false
                }
                (EntryKind::File { .. }, Some(Class::Fat(fat))) => {
                    for mut k in fat.kernels {
                        if kept.contains(&k.arch) {
                            k.prefix.clone_from(&p.prefix);
                            let slot = per_arch.entry(k.arch.clone()).or_default();
                            slot.entry(pi).or_default().1.push(k);
                        }
                    }
                    fat_summaries.push(fat.summary);
                    false
                }
            };
            to_generic.push(generic);
        }
        out.push(PrefixPlan {
            prefix: p.prefix,
            entries: p.entries,
            to_generic,
        });
    }
    Ok(Plan {
        prefixes: out,
        missing,
        discovered,
        excluded,
        per_arch,
        fat_summaries,
    })
}
