//! Plan: which architectures are kept (`--exclude-arch`, `--gpu-targets`),
//! what stays in the generic artifact, and which database files and code
//! objects go to which per-architecture artifact and prefix. Nothing is
//! written here.

use std::collections::{BTreeMap, BTreeSet};

use super::filter::{drops, wanted};
use super::scan::{Class, KernelRef, Scan};
use super::{check_name, FatBinarySummary, SplitError, SplitOptions};
use crate::databases::DatabaseKind;
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
    /// Options that left nothing (not errors).
    pub warnings: Vec<String>,
    /// `--split-databases` handlers that claimed no file.
    pub unmatched_databases: Vec<DatabaseKind>,
    /// `--gpu-targets` values the artifact has nothing for.
    pub unmatched_targets: Vec<String>,
}

/// The warnings for handlers and targets that matched nothing; `scope`
/// names where ("the artifact", "any artifact of the batch").
pub(super) fn no_op_warnings(
    databases: &[DatabaseKind],
    targets: &[String],
    scope: &str,
) -> Vec<String> {
    let mut out: Vec<String> = databases
        .iter()
        .map(|k| {
            format!(
                "--split-databases {k}: no file in {scope} matched ({}); such files stay in the generic artifact",
                k.layout()
            )
        })
        .collect();
    out.extend(
        targets.iter().map(|t| {
            format!("--gpu-targets {t}: {scope} has no code object or database file for it")
        }),
    );
    out
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

/// Turns a scan into a plan; fails when `--gpu-targets` leaves no code
/// object in an artifact that has some (naming `--exclude-arch` when that
/// removed what `--gpu-targets` kept), or nothing at all; collects warnings
/// for handlers and targets that match nothing.
pub(super) fn plan(opts: &SplitOptions, scan: Scan) -> Result<Plan, SplitError> {
    let Scan { prefixes, missing } = scan;

    let mut discovered = BTreeSet::new();
    let mut claimed: BTreeMap<DatabaseKind, usize> = BTreeMap::new();
    for p in &prefixes {
        for c in p.classes.iter().flatten() {
            match c {
                Class::Database(kind, a) => {
                    discovered.insert(a.clone());
                    *claimed.entry(*kind).or_insert(0usize) += 1;
                }
                Class::Fat(f) => discovered.extend(f.summary.architectures.iter().cloned()),
                Class::Generic | Class::FatObject { .. } => {}
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
    let mut warnings = Vec::new();
    // A handler that claims nothing is almost always a layout it does not
    // know (or a handler meant for another artifact): say so.
    let unmatched_databases: Vec<DatabaseKind> = opts
        .databases
        .iter()
        .filter(|k| !claimed.contains_key(k))
        .copied()
        .collect();
    let mut unmatched_targets = Vec::new();
    let fats = || {
        prefixes.iter().flat_map(|p| {
            p.classes.iter().flatten().filter_map(|c| match c {
                Class::Fat(f) => Some(f),
                _ => None,
            })
        })
    };
    let code_archs: BTreeSet<&str> = fats()
        .flat_map(|f| f.kernels.iter().map(|k| k.arch.as_str()))
        .collect();
    let any_kept_code = code_archs.iter().any(|a| kept.contains(*a));
    if let Some(w) = &wanted {
        let list = |v: &mut dyn Iterator<Item = &str>| v.collect::<Vec<_>>().join(" ");
        let targets = list(&mut opts.gpu_targets.iter().map(String::as_str));
        for t in &opts.gpu_targets {
            let base = rocpack_bundle::base_arch(t);
            let hit = discovered
                .iter()
                .any(|a| rocpack_bundle::base_arch(a).is_some_and(|b| Some(&b) == base.as_ref()));
            if !hit {
                unmatched_targets.push(t.clone());
            }
        }
        let selected: Vec<&str> = code_archs
            .iter()
            .copied()
            .filter(|a| rocpack_bundle::base_arch(a).is_some_and(|b| w.contains(&b)))
            .collect();
        if !code_archs.is_empty() && !any_kept_code {
            // Blame the option that dropped the code: `--gpu-targets` when
            // the artifact has none of those targets, `--exclude-arch` when
            // it removed every one `--gpu-targets` kept.
            return Err(SplitError::Usage(if selected.is_empty() {
                format!(
                    "--gpu-targets {targets} leaves no code object: the artifact has code for {}",
                    list(&mut code_archs.iter().copied())
                )
            } else {
                format!(
                    "--exclude-arch {} drops every code object --gpu-targets {targets} keeps ({}): nothing is left",
                    opts.exclude_arch.join(" "),
                    selected.join(" ")
                )
            }));
        }
        if code_archs.is_empty() && !discovered.is_empty() && kept.is_empty() {
            return Err(SplitError::Usage(format!(
                "--gpu-targets {targets} leaves nothing: the artifact has database files for {} only",
                list(&mut discovered.iter().map(String::as_str))
            )));
        }
    } else if !code_archs.is_empty() && !any_kept_code {
        warnings.push(format!(
            "--exclude-arch {} drops every code object (the artifact has code for {}): the output holds no device code",
            opts.exclude_arch.join(" "),
            code_archs.iter().copied().collect::<Vec<_>>().join(" ")
        ));
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
                (EntryKind::File { .. }, Some(Class::FatObject { bundles })) => {
                    warnings.push(format!(
                        "{}/{}: COFF object with HIP device code ({bundles} bundle(s)) copied fat into the generic artifact: COFF objects are not split (split the DLL/EXE they are linked into)",
                        p.prefix, e.rel
                    ));
                    true
                }
                (EntryKind::File { .. }, Some(Class::Database(_, arch))) => {
                    if kept.contains(&arch) {
                        let slot = per_arch.entry(arch).or_default().entry(pi).or_default();
                        slot.0.push(e.rel.clone());
                    }
                    false
                }
                (EntryKind::File { .. }, Some(Class::Fat(fat))) => {
                    let fat = *fat;
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
        warnings,
        unmatched_databases,
        unmatched_targets,
    })
}
