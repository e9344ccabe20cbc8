//! Family selection: which architecture group (and so which packages) a
//! machine with a given GPU needs. The target-ID type it matches with is
//! [`crate::target::Target`] (shared with config, recombine and verify).
//!
//! Matching follows the ROCm runtime (`isa_target_match.cpp`, see
//! kpack-reference §4.5): the agent's ISA name (with or without the
//! `amdgcn-amd-amdhsa--` prefix) is expanded into its compatible targets —
//! every subset of its features, most specific first, in descending bitmask
//! order — and the first candidate a group lists wins. Like CLR, the generic
//! target of the processor (`gfx11-generic` for `gfx1100`, …) is tried after
//! the specific ones. A bare processor with no features (`gfx90a`) that no
//! group lists verbatim falls back to a group holding the same processor with
//! features (a person typing `gfx90a` means "any mode"); such a match is
//! reported as [`MatchKind::Processor`].

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::Serialize;

use crate::config::{ArchGroup, PackagingConfig};
// Target IDs live in their own module (config parses them too); re-exported
// here, where callers have always found them.
pub use crate::target::{generic_processor, Target, TargetError, AGENT_PREFIX};

/// How the agent matched the selected group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    /// A compatible target of the agent (itself or a feature subset) is listed.
    Exact,
    /// Only the generic target of the agent's processor is listed.
    Generic,
    /// The agent named no features and the group lists the processor with some.
    Processor,
}

/// Result of [`select_family`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// The agent ISA as given.
    pub agent: String,
    /// The group name (package suffix).
    pub group: String,
    /// The group's display name.
    pub display_name: String,
    /// The group architecture that matched.
    pub matched_architecture: String,
    /// How it matched.
    pub match_kind: MatchKind,
    /// Every architecture of the group.
    pub architectures: Vec<String>,
}

/// Errors of [`select_family`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SelectError {
    /// `--arch` is not a target ID.
    #[error("--arch: {0}")]
    BadArch(#[from] TargetError),
    /// No group serves the device.
    #[error("no architecture group serves `{agent}` (groups: {groups})")]
    NoGroup {
        /// The agent ISA as given.
        agent: String,
        /// `name [archs]` of every group.
        groups: String,
    },
}

/// Picks the architecture group a device with ISA `agent` needs.
pub fn select_family(config: &PackagingConfig, agent: &str) -> Result<Selection, SelectError> {
    let target = Target::parse(agent)?;
    let groups: Vec<(&ArchGroup, Vec<Target>)> = config
        .architecture_groups
        .iter()
        .map(|g| {
            let ts = g
                .architectures
                .iter()
                .filter_map(|a| Target::parse(a).ok())
                .map(|t| t.canonical())
                .collect();
            (g, ts)
        })
        .collect();
    let found = |cands: &[Target]| -> Option<(&ArchGroup, String)> {
        for cand in cands {
            let c = cand.canonical();
            for (g, ts) in &groups {
                if let Some(pos) = ts.iter().position(|t| *t == c) {
                    return Some((g, g.architectures.get(pos).cloned().unwrap_or_default()));
                }
            }
        }
        None
    };
    // The device's own candidates, then CLR's generic fallback, in the
    // runtime's order (rocpack_bundle::compatible_targets).
    let (own, generic): (Vec<Target>, Vec<Target>) = target
        .id()
        .map(|id| rocpack_bundle::compatible_targets(&id))
        .unwrap_or_default()
        .iter()
        .filter_map(|c| Target::parse(c).ok())
        .partition(|c| c.processor == target.processor);
    let mut hit = found(&own).map(|(g, a)| (g, a, MatchKind::Exact));
    if hit.is_none() {
        hit = found(&generic).map(|(g, a)| (g, a, MatchKind::Generic));
    }
    if hit.is_none() && target.features.is_empty() {
        'outer: for (g, ts) in &groups {
            for (i, t) in ts.iter().enumerate() {
                if t.processor == target.processor {
                    let a = g.architectures.get(i).cloned().unwrap_or_default();
                    hit = Some((g, a, MatchKind::Processor));
                    break 'outer;
                }
            }
        }
    }
    match hit {
        Some((g, arch, kind)) => Ok(Selection {
            agent: agent.to_string(),
            group: g.name.clone(),
            display_name: g.display_name.clone(),
            matched_architecture: arch,
            match_kind: kind,
            architectures: g.architectures.clone(),
        }),
        None => Err(SelectError::NoGroup {
            agent: agent.to_string(),
            groups: config
                .architecture_groups
                .iter()
                .map(|g| format!("{} [{}]", g.name, g.architectures.join(", ")))
                .collect::<Vec<_>>()
                .join("; "),
        }),
    }
}

/// Packages a machine of `group` installs: with `packages_dir`, its
/// subdirectories named `*_generic` or `*_<group>` (sorted); without, the
/// name patterns `<component>_generic` and `<component>_<group>`.
pub fn family_packages(packages_dir: Option<&Path>, group: &str) -> io::Result<Vec<String>> {
    let Some(dir) = packages_dir else {
        return Ok(vec![
            "<component>_generic".to_string(),
            format!("<component>_{group}"),
        ]);
    };
    let group_suffix = format!("_{group}");
    let mut names = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    for e in entries {
        let e = e?;
        if let Some(n) = e.file_name().to_str() {
            if (n.ends_with("_generic") || n.ends_with(&group_suffix)) && e.path().is_dir() {
                names.push(n.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// The group [`select_family`] picks for each of `targets` (`None`: none).
pub fn groups_of<'a>(
    config: &PackagingConfig,
    targets: &'a [String],
) -> BTreeMap<&'a String, Option<String>> {
    targets
        .iter()
        .map(|t| (t, select_family(config, t).ok().map(|s| s.group)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Target {
        Target::parse(s).unwrap()
    }

    #[test]
    fn parses_and_prints_targets() {
        assert_eq!(t("gfx1100").to_string(), "gfx1100");
        assert_eq!(
            t("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-").to_string(),
            "gfx942:sramecc+:xnack-"
        );
        assert_eq!(
            t("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+").to_string(),
            "gfx90a:xnack+"
        );
        assert_eq!(t("gfx9-4-generic").processor, "gfx9-4-generic");
        for bad in [
            "",
            "gfx",
            "sm_80",
            "gfx90a:xnack",
            "gfx90a:xnack+:xnack-",
            "gfxABC",
            "gfx1100:+",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn compatible_targets_follow_runtime_order() {
        let got: Vec<String> = t("gfx942:sramecc+:xnack-")
            .compatible_targets()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "gfx942:sramecc+:xnack-",
                "gfx942:sramecc+",
                "gfx942:xnack-",
                "gfx942"
            ]
        );
        assert_eq!(t("gfx1100").compatible_targets(), vec![t("gfx1100")]);
    }

    #[test]
    fn compatibility_ignores_unspecified_features() {
        assert!(t("gfx906").compatible_with(&t("gfx906:xnack-")));
        assert!(t("gfx906:xnack-").compatible_with(&t("gfx906")));
        assert!(!t("gfx90a:xnack+").compatible_with(&t("gfx90a:xnack-")));
        assert!(!t("gfx1100").compatible_with(&t("gfx1101")));
    }

    #[test]
    fn generic_fallback_table() {
        assert_eq!(t("gfx1151").generic().unwrap().processor, "gfx11-generic");
        assert_eq!(
            t("gfx942:xnack-").generic().unwrap().to_string(),
            "gfx9-4-generic:xnack-"
        );
        assert!(t("gfx90a").generic().is_none());
    }

    #[test]
    fn select_family_matching_kinds() {
        let cfg = crate::config::PackagingConfig::parse(
            br#"{"primary_shard":"a","architecture_groups":{
                "cdna2":{"architectures":["gfx90a:xnack+","gfx908"]},
                "cdna2off":{"architectures":["gfx90a:xnack-"]},
                "rdna3":{"architectures":["gfx11-generic"]}}}"#,
            std::path::Path::new("c.json"),
        )
        .unwrap();
        let sel = |a: &str| select_family(&cfg, a).map(|s| (s.group, s.match_kind));
        assert_eq!(
            sel("gfx90a:sramecc+:xnack+").unwrap(),
            ("cdna2".into(), MatchKind::Exact)
        );
        assert_eq!(
            sel("gfx90a:xnack-").unwrap(),
            ("cdna2off".into(), MatchKind::Exact)
        );
        assert_eq!(
            sel("gfx908:xnack-").unwrap(),
            ("cdna2".into(), MatchKind::Exact)
        );
        assert_eq!(
            sel("gfx1102").unwrap(),
            ("rdna3".into(), MatchKind::Generic)
        );
        // Bare processor: first group listing it with features.
        assert_eq!(
            sel("gfx90a").unwrap(),
            ("cdna2".into(), MatchKind::Processor)
        );
        assert!(matches!(sel("gfx942"), Err(SelectError::NoGroup { .. })));
        assert!(matches!(sel("sm_90"), Err(SelectError::BadArch(_))));
        // Every listed arch selects its own group (the fuzz target's invariant).
        for g in &cfg.architecture_groups {
            for a in &g.architectures {
                assert_eq!(select_family(&cfg, a).unwrap().group, g.name, "{a}");
            }
        }
    }

    #[test]
    fn generic_fallback_uses_the_bundle_table() {
        let cfg = crate::config::PackagingConfig::parse(
            br#"{"primary_shard":"a","architecture_groups":{
                "cdna3":{"architectures":["gfx9-4-generic:xnack-"]}}}"#,
            std::path::Path::new("c.json"),
        )
        .unwrap();
        for agent in [
            "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
            "gfx940:xnack-",
            "gfx950:sramecc-:xnack-",
        ] {
            let s = select_family(&cfg, agent).unwrap();
            assert_eq!(
                (s.group.as_str(), s.match_kind),
                ("cdna3", MatchKind::Generic),
                "{agent}"
            );
        }
        assert!(select_family(&cfg, "gfx942:xnack+").is_err());
        // A device that does not report xnack cannot load xnack- code.
        assert!(select_family(&cfg, "gfx950").is_err());
        // Non-AMDGPU ids the bundle parser accepts are still refused here.
        for bad in [
            "host-x86_64-unknown-linux--",
            "openmp-x86_64-unknown-linux--gfx90a",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn family_packages_lists_generic_and_group_directories() {
        assert_eq!(
            family_packages(None, "gfx110X").unwrap(),
            ["<component>_generic", "<component>_gfx110X"]
        );
        let t = tempfile::tempdir().unwrap();
        for d in ["b_gfx110X", "a_generic", "c_gfx94X", "d_generic.txt"] {
            std::fs::create_dir(t.path().join(d)).unwrap();
        }
        std::fs::write(t.path().join("e_gfx110X"), b"").unwrap();
        assert_eq!(
            family_packages(Some(t.path()), "gfx110X").unwrap(),
            ["a_generic", "b_gfx110X"]
        );
        let missing = t.path().join("missing");
        let err = family_packages(Some(&missing), "g")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("{}: ", missing.display())),
            "{err}"
        );
    }

    #[test]
    fn groups_of_maps_each_target() {
        let cfg = crate::config::PackagingConfig::parse(
            br#"{"primary_shard":"a","architecture_groups":{
                "cdna2":{"architectures":["gfx90a:xnack+"]},
                "rdna3":{"architectures":["gfx11-generic"]}}}"#,
            std::path::Path::new("c.json"),
        )
        .unwrap();
        let targets = ["gfx1100".to_string(), "gfx942".to_string()];
        let got: Vec<(String, Option<String>)> = groups_of(&cfg, &targets)
            .into_iter()
            .map(|(t, g)| (t.clone(), g))
            .collect();
        assert_eq!(
            got,
            [
                ("gfx1100".to_string(), Some("rdna3".to_string())),
                ("gfx942".to_string(), None)
            ]
        );
    }
}
