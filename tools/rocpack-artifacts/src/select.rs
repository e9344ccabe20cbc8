//! Family selection: which architecture group (and so which packages) a
//! machine with a given GPU needs, plus the small target-ID helpers that
//! recombine and verify share with it.
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

use std::fmt;

use serde::Serialize;

use crate::config::{ArchGroup, PackagingConfig};

/// Prefix of HSA agent ISA names.
pub const AGENT_PREFIX: &str = "amdgcn-amd-amdhsa--";

/// Upper bound on target features we expand (2^n candidates).
const MAX_FEATURES: usize = 8;

/// A parsed target ID: `gfxNNN[:feature(+|-)]*`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    /// `gfx1100`, `gfx90a`, `gfx9-4-generic`, …
    pub processor: String,
    /// Features in the order given, e.g. `[("sramecc", true), ("xnack", false)]`.
    pub features: Vec<(String, bool)>,
}

/// Why a string is not a target ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetError {
    /// The text that was parsed.
    pub text: String,
    /// What was expected.
    pub expected: &'static str,
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not a target ID: {}", self.text, self.expected)
    }
}

impl std::error::Error for TargetError {}

impl Target {
    /// Parses `gfx…[:feat±]*`, optionally prefixed by `amdgcn-amd-amdhsa--`
    /// (or `hipv4-amdgcn-amd-amdhsa--`, a bundle entry ID).
    pub fn parse(text: &str) -> Result<Self, TargetError> {
        let err = |expected| TargetError {
            text: text.to_string(),
            expected,
        };
        let body = text.strip_prefix("hipv4-").unwrap_or(text);
        let body = body.strip_prefix(AGENT_PREFIX).unwrap_or(body);
        let mut parts = body.split(':');
        let processor = parts.next().unwrap_or_default();
        let rest = processor
            .strip_prefix("gfx")
            .ok_or_else(|| err("a processor name starting with `gfx`"))?;
        if rest.is_empty()
            || !rest
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
            || !rest.as_bytes()[0].is_ascii_digit()
        {
            return Err(err(
                "`gfx` followed by digits, lowercase letters or `-` (e.g. gfx1100, gfx90a, gfx9-4-generic)",
            ));
        }
        let mut features: Vec<(String, bool)> = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue; // the runtime drops empty feature strings
            }
            let (name, on) = if let Some(n) = part.strip_suffix('+') {
                (n, true)
            } else if let Some(n) = part.strip_suffix('-') {
                (n, false)
            } else {
                return Err(err("each feature to end in `+` or `-` (e.g. xnack+)"));
            };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(err("a feature name made of letters and digits"));
            }
            if features.iter().any(|(n, _)| n == name) {
                return Err(err("each feature at most once"));
            }
            features.push((name.to_string(), on));
        }
        if features.len() > MAX_FEATURES {
            return Err(err("at most 8 features"));
        }
        Ok(Target {
            processor: processor.to_string(),
            features,
        })
    }

    /// Whether the processor is a generic one (`gfx11-generic`).
    pub fn is_generic(&self) -> bool {
        self.processor.ends_with("-generic")
    }

    /// The runtime's compatible targets for an agent with this ISA, most
    /// specific first (descending feature bitmask, kpack-reference §4.5).
    pub fn compatible_targets(&self) -> Vec<Target> {
        let n = self.features.len().min(MAX_FEATURES);
        let mut out = Vec::with_capacity(1 << n);
        for mask in (0u32..(1u32 << n)).rev() {
            let features = self
                .features
                .iter()
                .take(n)
                .enumerate()
                .filter(|(i, _)| mask & (1 << (n - 1 - i)) != 0)
                .map(|(_, f)| f.clone())
                .collect();
            out.push(Target {
                processor: self.processor.clone(),
                features,
            });
        }
        out
    }

    /// Same processor and no feature set to opposite values: code built for
    /// one can serve a device described by the other.
    pub fn compatible_with(&self, other: &Target) -> bool {
        self.processor == other.processor
            && self.features.iter().all(|(name, on)| {
                other
                    .features
                    .iter()
                    .all(|(oname, oon)| oname != name || oon == on)
            })
    }

    /// The target with features in canonical (alphabetical) order, used to
    /// compare IDs that list features in different orders.
    pub fn canonical(&self) -> Target {
        let mut t = self.clone();
        t.features.sort();
        t
    }

    /// CLR's `TargetToGeneric`: the generic processor this one falls back to.
    pub fn generic(&self) -> Option<Target> {
        let g = generic_processor(&self.processor)?;
        Some(Target {
            processor: g.to_string(),
            features: self.features.clone(),
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.processor)?;
        for (name, on) in &self.features {
            write!(f, ":{name}{}", if *on { '+' } else { '-' })?;
        }
        Ok(())
    }
}

/// The generic processor a specific one belongs to (LLVM's generic targets).
pub fn generic_processor(processor: &str) -> Option<&'static str> {
    Some(match processor {
        "gfx900" | "gfx902" | "gfx904" | "gfx906" | "gfx909" | "gfx90c" => "gfx9-generic",
        "gfx940" | "gfx941" | "gfx942" | "gfx950" => "gfx9-4-generic",
        "gfx1010" | "gfx1011" | "gfx1012" | "gfx1013" => "gfx10-1-generic",
        "gfx1030" | "gfx1031" | "gfx1032" | "gfx1033" | "gfx1034" | "gfx1035" | "gfx1036" => {
            "gfx10-3-generic"
        }
        "gfx1100" | "gfx1101" | "gfx1102" | "gfx1103" | "gfx1150" | "gfx1151" | "gfx1152"
        | "gfx1153" => "gfx11-generic",
        "gfx1200" | "gfx1201" => "gfx12-generic",
        _ => return None,
    })
}

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
    let mut hit = found(&target.compatible_targets()).map(|(g, a)| (g, a, MatchKind::Exact));
    if hit.is_none() {
        if let Some(gen) = target.generic() {
            hit = found(&gen.compatible_targets()).map(|(g, a)| (g, a, MatchKind::Generic));
        }
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
}
