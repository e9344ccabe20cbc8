//! Offload target IDs and ROCm ISA compatibility matching.
//!
//! A bundle entry ID is `<offload-kind>-<triple>-<target-id>`, for example
//! `hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+` (kind `hipv4`, triple
//! `amdgcn-amd-amdhsa-` with an empty environment, target ID
//! `gfx90a:xnack+`). Host entries have no target ID:
//! `host-x86_64-unknown-linux--` (clang 19), `host-x86_64-unknown-linux`
//! (clang 15), `host-x86_64-pc-linux-gnu-` (RDC objects). [`TargetId`]
//! also accepts an HSA ISA name (`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`)
//! and a bare target ID (`gfx11-generic`, `gfx90a:xnack-`), so the same type
//! describes code objects and devices. The spellings of a target in file
//! and directory names are read by [`spelling`].

pub(crate) mod spelling;

use std::fmt;

use crate::error::{Error, Result};

/// Offload kinds that may start a bundle entry ID.
const KINDS: &[&str] = &[
    "host", "hip", "hipv4", "openmp", "hcc", "cuda", "sycl", "fpga", "hipspv",
];

/// Most target features an ID may carry (real ones have at most two:
/// `sramecc`, `xnack`); bounds the runtime's 2^n candidate list.
pub const MAX_FEATURES: usize = 8;

/// One `:name+` / `:name-` target feature.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Feature {
    pub name: String,
    /// `true` for `+`, `false` for `-`.
    pub enabled: bool,
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.name, if self.enabled { '+' } else { '-' })
    }
}

/// A parsed bundle entry ID, HSA ISA name or bare target ID.
///
/// Equality, ordering and hashing use the verbatim text, and `Display`
/// prints it unchanged, so IDs survive a parse / print round trip byte for
/// byte (they are written back into bundles and `.kpack` TOCs).
#[derive(Debug, Clone)]
pub struct TargetId {
    raw: String,
    kind: Option<String>,
    triple: Option<String>,
    /// Processor plus features, verbatim (text after the triple).
    target: String,
    processor: String,
    features: Vec<Feature>,
}

impl PartialEq for TargetId {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}
impl Eq for TargetId {}
impl std::hash::Hash for TargetId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.raw.hash(state)
    }
}
impl PartialOrd for TargetId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TargetId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.raw.cmp(&other.raw)
    }
}

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl AsRef<str> for TargetId {
    fn as_ref(&self) -> &str {
        &self.raw
    }
}

impl std::str::FromStr for TargetId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        TargetId::parse(s)
    }
}

fn bad(id: &str, reason: impl Into<String>) -> Error {
    Error::TargetId {
        id: id.to_string(),
        reason: reason.into(),
    }
}

impl TargetId {
    /// Parse a bundle entry ID, an ISA name or a bare target ID.
    pub fn parse(s: &str) -> Result<Self> {
        if s.is_empty() {
            return Err(bad(s, "empty"));
        }
        if let Some(c) = s.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(bad(s, format!("character {c:?} is not printable ASCII")));
        }
        let (kind, triple, target) = if s.starts_with("gfx") {
            (None, None, s.to_string())
        } else {
            let comps: Vec<&str> = s.split('-').collect();
            let (kind, rest) = match comps.split_first() {
                Some((first, rest)) if KINDS.contains(first) => (Some(first.to_string()), rest),
                _ => (None, &comps[..]),
            };
            if rest.is_empty() || rest[0].is_empty() {
                return Err(bad(s, "missing target triple after the offload kind"));
            }
            // arch-vendor-os, then an optional environment unless the next
            // component already names a processor (old `amdgcn-amd-amdhsa-gfx906`).
            let mut n = rest.len().min(3);
            if let Some(env) = rest.get(3) {
                if !env.starts_with("gfx") {
                    n = 4;
                }
            }
            if let Some(c) = rest[..n].iter().find(|c| {
                !c.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.')
            }) {
                return Err(bad(
                    s,
                    format!("triple component {c:?} has invalid characters"),
                ));
            }
            let triple = rest[..n].join("-");
            let target = rest[n..].join("-");
            (kind, Some(triple), target)
        };

        let (processor, features) = if target.is_empty() {
            (String::new(), Vec::new())
        } else {
            let mut parts = target.split(':');
            let processor = parts.next().unwrap_or_default().to_string();
            if processor.is_empty() {
                return Err(bad(s, "empty processor name before ':'"));
            }
            if !processor
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
            {
                return Err(bad(
                    s,
                    format!("processor {processor:?} has invalid characters"),
                ));
            }
            let mut features: Vec<Feature> = Vec::new();
            for p in parts {
                let (name, enabled) = match p.as_bytes().last() {
                    Some(b'+') => (&p[..p.len() - 1], true),
                    Some(b'-') => (&p[..p.len() - 1], false),
                    _ => return Err(bad(s, format!("feature {p:?} must end in '+' or '-'"))),
                };
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(bad(s, format!("feature {p:?} has an invalid name")));
                }
                if features.len() >= MAX_FEATURES {
                    return Err(bad(s, format!("more than {MAX_FEATURES} target features")));
                }
                if features.iter().any(|f| f.name == name) {
                    return Err(bad(s, format!("feature {name:?} given twice")));
                }
                features.push(Feature {
                    name: name.to_string(),
                    enabled,
                });
            }
            (processor, features)
        };
        Ok(TargetId {
            raw: s.to_string(),
            kind,
            triple,
            target,
            processor,
            features,
        })
    }

    /// The verbatim text.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Offload kind (`hipv4`, `hip`, `host`, …) when the text has one.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// Target triple (`amdgcn-amd-amdhsa-`, `x86_64-unknown-linux`, …).
    pub fn triple(&self) -> Option<&str> {
        self.triple.as_deref()
    }

    /// Processor and features verbatim (`gfx942:sramecc+:xnack-`); empty for
    /// host entries. This is kpack's "arch key": the text after the last `--`.
    pub fn target_id(&self) -> &str {
        &self.target
    }

    /// Processor name without features (`gfx90a`, `gfx11-generic`).
    pub fn arch(&self) -> &str {
        &self.processor
    }

    /// Target features in the order written.
    pub fn features(&self) -> &[Feature] {
        &self.features
    }

    /// Setting of one feature: `Some(true)` for `+`, `Some(false)` for `-`,
    /// `None` when unspecified ("any").
    pub fn feature(&self, name: &str) -> Option<bool> {
        self.features
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.enabled)
    }

    /// Host entry (offload kind `host`, or no processor at all).
    pub fn is_host(&self) -> bool {
        self.kind.as_deref() == Some("host") || self.processor.is_empty()
    }

    /// The one check of an AMDGPU code-object target, shared by every tool
    /// that reads one (`kpack split` for bundle entries, `verify`,
    /// `recombine`, `select-family` and the packaging config for target
    /// IDs): offload kind `hip`/`hipv4` or none, triple `amdgcn-amd-amdhsa…`
    /// or none, and an LLVM processor name ([`is_gfx_processor`]:
    /// `gfx1100`, `gfx90a`, `gfx9-4-generic`; not `GFX1100`, not
    /// `-gfx1030`). `Err` says what was expected.
    pub fn check_amdgpu(&self) -> std::result::Result<(), &'static str> {
        let amdgpu_triple = self
            .triple()
            .is_none_or(|t| t.starts_with("amdgcn-amd-amdhsa"));
        let offload_kind = matches!(self.kind(), None | Some("hip") | Some("hipv4"));
        if !amdgpu_triple || !offload_kind || self.is_host() {
            return Err(
                "an AMDGPU target (`gfx…`, `amdgcn-amd-amdhsa--gfx…` or `hipv4-amdgcn-amd-amdhsa--gfx…`)",
            );
        }
        if !is_gfx_processor(self.arch()) {
            return Err(
                "`gfx` followed by digits, lowercase letters or `-` (e.g. gfx1100, gfx90a, gfx9-4-generic)",
            );
        }
        Ok(())
    }

    /// Generic processor such as `gfx11-generic` or `gfx9-4-generic`.
    pub fn is_generic(&self) -> bool {
        self.processor.ends_with("-generic")
    }

    /// Concrete processors a generic target runs on (empty for a
    /// non-generic or unknown generic target).
    pub fn generic_covers(&self) -> &'static [&'static str] {
        generic_covers(&self.processor)
    }
}

/// Whether `name` is an AMDGPU processor name as LLVM spells them: `gfx`,
/// a digit, then digits, lowercase letters or `-` (`gfx1100`, `gfx90a`,
/// `gfx9-4-generic`).
pub fn is_gfx_processor(name: &str) -> bool {
    name.strip_prefix("gfx").is_some_and(|rest| {
        rest.as_bytes().first().is_some_and(u8::is_ascii_digit)
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-')
    })
}

/// Generic processor → concrete processors, as the HIP runtime (CLR's
/// `TargetToGeneric` table) and LLVM's generic processor table map them
/// (`gfx9-4-generic` covers `gfx940` and `gfx941` too).
const GENERICS: &[(&str, &[&str])] = &[
    (
        "gfx9-generic",
        &["gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"],
    ),
    ("gfx9-4-generic", &["gfx940", "gfx941", "gfx942", "gfx950"]),
    (
        "gfx10-1-generic",
        &["gfx1010", "gfx1011", "gfx1012", "gfx1013"],
    ),
    (
        "gfx10-3-generic",
        &[
            "gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036",
        ],
    ),
    (
        "gfx11-generic",
        &[
            "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
        ],
    ),
    ("gfx12-generic", &["gfx1200", "gfx1201"]),
];

/// Concrete processors covered by a generic processor name.
pub fn generic_covers(generic: &str) -> &'static [&'static str] {
    GENERICS
        .iter()
        .find(|(g, _)| *g == generic)
        .map(|(_, c)| *c)
        .unwrap_or(&[])
}

/// The generic processor a concrete processor falls back to, if any.
pub fn generic_for(processor: &str) -> Option<&'static str> {
    GENERICS
        .iter()
        .find(|(_, c)| c.contains(&processor))
        .map(|(g, _)| *g)
}

/// The prefix HSA agent ISA names carry.
pub const AMDHSA_PREFIX: &str = "amdgcn-amd-amdhsa--";

/// Most features [`runtime_compatible_targets`] expands (2^n candidates);
/// the runtime has no bound, real ISAs carry at most two.
pub const RUNTIME_MAX_FEATURES: usize = 16;

/// The runtime's `strip_target_prefix`: remove a leading
/// `amdgcn-amd-amdhsa--`, only when something follows it.
pub fn strip_target_prefix(isa: &str) -> &str {
    match isa.strip_prefix(AMDHSA_PREFIX) {
        Some(rest) if !rest.is_empty() => rest,
        _ => isa,
    }
}

/// The kpack runtime's `for_each_compatible_target` (kpack-reference §4.5)
/// on raw agent ISA text, total on any input: strip the
/// `amdgcn-amd-amdhsa--` prefix, split on `:`, drop empty feature strings
/// (features are taken verbatim, not validated), then every subset of the
/// features in descending bitmask order over the features as given (bit
/// `n-1-i` selects feature `i`): `gfx942:sramecc+:xnack-` →
/// `gfx942:sramecc+:xnack-`, `gfx942:sramecc+`, `gfx942:xnack-`, `gfx942`.
/// No generic fallback: the runtime's caller (CLR) passes the generic ISA
/// as a separate, lower-priority arch. Features beyond the first
/// [`RUNTIME_MAX_FEATURES`] are ignored.
pub fn runtime_compatible_targets(isa: &str) -> Vec<String> {
    let t = strip_target_prefix(isa);
    let mut parts = t.split(':');
    let processor = parts.next().unwrap_or("");
    let features: Vec<&str> = parts
        .filter(|f| !f.is_empty())
        .take(RUNTIME_MAX_FEATURES)
        .collect();
    let mut out = Vec::with_capacity(1 << features.len());
    push_subsets(&mut out, processor, &features);
    out
}

/// Candidate target IDs for a device, in the order the ROCm runtime (CLR
/// plus the kpack loader) tries them: first the device's own processor with
/// every subset of its features ([`runtime_compatible_targets`] order: the
/// kpack loader's descending bit mask over the features in the order given,
/// full set first, bare processor last), then the same for the generic
/// processor CLR's `TargetToGeneric` falls back to, which keeps only the
/// `sramecc` and `xnack` settings (in that order). Host entries have none.
pub fn compatible_targets(device: &TargetId) -> Vec<String> {
    let mut out = Vec::new();
    if device.arch().is_empty() {
        return out;
    }
    let own: Vec<String> = device.features().iter().map(|f| f.to_string()).collect();
    push_subsets(&mut out, device.arch(), &own);
    if let Some(g) = generic_for(device.arch()) {
        let kept: Vec<String> = ["sramecc", "xnack"]
            .iter()
            .filter_map(|n| {
                device.feature(n).map(|enabled| {
                    Feature {
                        name: n.to_string(),
                        enabled,
                    }
                    .to_string()
                })
            })
            .collect();
        push_subsets(&mut out, g, &kept);
    }
    out
}

fn push_subsets<S: AsRef<str>>(out: &mut Vec<String>, processor: &str, features: &[S]) {
    // Callers bound the feature count (MAX_FEATURES for parsed IDs,
    // RUNTIME_MAX_FEATURES for raw text), so the shifts cannot overflow.
    let n = features.len().min(RUNTIME_MAX_FEATURES);
    let full: u32 = (1u32 << n) - 1;
    for mask in (0..=full).rev() {
        let mut s = processor.to_string();
        for (i, f) in features.iter().take(n).enumerate() {
            if mask & (1 << (n - 1 - i)) != 0 {
                s.push(':');
                s.push_str(f.as_ref());
            }
        }
        out.push(s);
    }
}

/// Whether two target IDs can describe the same device mode: same
/// processor and no feature set to opposite values (a feature one side
/// leaves unspecified matches either setting on the other). Symmetric,
/// unlike [`isa_matches`]: this is the "overlap" test for user-written
/// targets (a config listing `gfx906` covers `gfx906:xnack-` content and
/// vice versa), not the runtime's load decision. Host entries overlap
/// nothing.
pub fn targets_overlap(a: &TargetId, b: &TargetId) -> bool {
    !a.arch().is_empty()
        && a.arch() == b.arch()
        && a.features()
            .iter()
            .all(|f| b.feature(&f.name).is_none_or(|e| e == f.enabled))
}

/// Whether a code object built for `code_object_target` can run on a device
/// whose ISA is `device` (as the ROCm runtime decides).
///
/// Same processor: every feature the code object pins must be reported by
/// the device with the same setting (features the code object leaves
/// unspecified match either setting; a feature the device does not report
/// never matches a pinned one). Generic code object: the device's processor
/// must be one the generic covers, with the same rule applied to the
/// device's `sramecc`/`xnack` settings. Host entries never match. Feature
/// order does not matter (the runtime compares canonical, alphabetically
/// ordered strings; this compares sets).
pub fn isa_matches(code_object_target: &TargetId, device: &TargetId) -> bool {
    let co = code_object_target;
    if co.arch().is_empty() || device.arch().is_empty() {
        return false;
    }
    let subset = |allowed: &dyn Fn(&str) -> bool| {
        co.features()
            .iter()
            .all(|f| allowed(&f.name) && device.feature(&f.name) == Some(f.enabled))
    };
    if co.arch() == device.arch() {
        return subset(&|_| true);
    }
    if co.is_generic() && generic_for(device.arch()) == Some(co.arch()) {
        return subset(&|n| n == "sramecc" || n == "xnack");
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> TargetId {
        TargetId::parse(s).unwrap()
    }

    #[test]
    fn amdgpu_check_is_one_rule() {
        for ok in [
            "gfx1100",
            "gfx90a:xnack-",
            "gfx9-4-generic",
            "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
            "hipv4-amdgcn-amd-amdhsa--gfx1030",
            "hip-amdgcn-amd-amdhsa-gfx906",
        ] {
            assert_eq!(t(ok).check_amdgpu(), Ok(()), "{ok}");
        }
        for bad in [
            "GFX1100",
            "hipv4-amdgcn-amd-amdhsa--GFX1100",
            "hip64-amdgcn-amd-amdhsa---gfx1030",
            "hipv4-amdgcn-amd-amdhsa--",
            "hipv4-amdgcn-amd-amdhsa",
            "host-x86_64-unknown-linux--",
            "openmp-amdgcn-amd-amdhsa--gfx90a",
            "hipv4-x86_64-unknown-linux--gfx90a",
        ] {
            if let Ok(id) = TargetId::parse(bad) {
                assert!(id.check_amdgpu().is_err(), "{bad}");
            }
        }
    }

    #[test]
    fn parses_device_entries() {
        let id = t("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+");
        assert_eq!(id.kind(), Some("hipv4"));
        assert_eq!(id.triple(), Some("amdgcn-amd-amdhsa-"));
        assert_eq!(id.target_id(), "gfx90a:xnack+");
        assert_eq!(id.arch(), "gfx90a");
        assert_eq!(id.feature("xnack"), Some(true));
        assert_eq!(id.feature("sramecc"), None);
        assert!(!id.is_host() && !id.is_generic());

        let id = t("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-");
        assert_eq!(id.target_id(), "gfx942:sramecc+:xnack-");
        assert_eq!(
            id.features(),
            &[
                Feature {
                    name: "sramecc".into(),
                    enabled: true
                },
                Feature {
                    name: "xnack".into(),
                    enabled: false
                }
            ]
        );
        let id = t("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic");
        assert_eq!(id.arch(), "gfx10-3-generic");
        assert!(id.is_generic());
        assert_eq!(id.generic_covers().len(), 7);
        let id = t("hip-amdgcn-amd-amdhsa--gfx1100");
        assert_eq!(id.kind(), Some("hip"));
        assert_eq!(id.arch(), "gfx1100");
        // pre-clang-13 spelling without the empty environment
        let id = t("hip-amdgcn-amd-amdhsa-gfx906");
        assert_eq!(id.triple(), Some("amdgcn-amd-amdhsa"));
        assert_eq!(id.arch(), "gfx906");
    }

    #[test]
    fn parses_host_entries() {
        for s in [
            "host-x86_64-unknown-linux--",
            "host-x86_64-unknown-linux",
            "host-x86_64-pc-linux-gnu-",
            "host-x86_64-pc-linux-gnu",
        ] {
            let id = t(s);
            assert!(id.is_host(), "{s}");
            assert_eq!(id.kind(), Some("host"));
            assert_eq!(id.target_id(), "");
            assert_eq!(id.arch(), "");
            assert_eq!(id.to_string(), s);
        }
        assert_eq!(
            t("host-x86_64-pc-linux-gnu-").triple(),
            Some("x86_64-pc-linux-gnu")
        );
    }

    #[test]
    fn parses_isa_names_and_bare_ids() {
        let id = t("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-");
        assert_eq!(id.kind(), None);
        assert_eq!(id.target_id(), "gfx942:sramecc+:xnack-");
        let id = t("gfx11-generic");
        assert!(id.is_generic());
        assert_eq!(id.arch(), "gfx11-generic");
        assert!(t("gfx90a:xnack-").feature("xnack") == Some(false));
    }

    #[test]
    fn rejects_bad_ids() {
        for s in [
            "",
            "gfx90a:xnack",
            "gfx90a:",
            "gfx90a::xnack+",
            "gfx90a:xnack+:xnack-",
            "hipv4-",
            "hip v4-amdgcn",
            ":xnack+",
            "gfx90a:+",
            "gfx1:a+:b+:c+:d+:e+:f+:g+:h+:i+",
        ] {
            assert!(TargetId::parse(s).is_err(), "{s:?} should fail");
        }
    }

    #[test]
    fn matching_follows_the_runtime() {
        let dev = t("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-");
        assert_eq!(
            compatible_targets(&dev),
            vec![
                "gfx942:sramecc+:xnack-",
                "gfx942:sramecc+",
                "gfx942:xnack-",
                "gfx942",
                "gfx9-4-generic:sramecc+:xnack-",
                "gfx9-4-generic:sramecc+",
                "gfx9-4-generic:xnack-",
                "gfx9-4-generic",
            ]
        );
        for co in [
            "gfx942",
            "gfx942:xnack-",
            "gfx942:sramecc+",
            "gfx942:sramecc+:xnack-",
            "gfx942:xnack-:sramecc+",
            "gfx9-4-generic",
            "gfx9-4-generic:xnack-",
        ] {
            assert!(isa_matches(&t(co), &dev), "{co}");
        }
        for co in [
            "gfx942:xnack+",
            "gfx942:sramecc-",
            "gfx90a",
            "gfx9-generic",
            "gfx9-4-generic:xnack+",
            "host-x86_64-unknown-linux--",
        ] {
            assert!(!isa_matches(&t(co), &dev), "{co}");
        }
        // device that does not report xnack: a code object pinning it never matches
        let bare = t("gfx90a");
        assert!(isa_matches(&t("gfx90a"), &bare));
        assert!(!isa_matches(&t("gfx90a:xnack+"), &bare));
        assert!(!isa_matches(&t("gfx90a:xnack-"), &bare));
        // xnack+ device
        let x = t("gfx90a:xnack+");
        assert!(isa_matches(
            &t("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+"),
            &x
        ));
        assert!(!isa_matches(
            &t("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"),
            &x
        ));
        assert!(isa_matches(&t("hipv4-amdgcn-amd-amdhsa--gfx90a"), &x));
        // generics
        for (g, yes, no) in [
            ("gfx11-generic", "gfx1151", "gfx1200"),
            ("gfx12-generic", "gfx1201", "gfx1100"),
            ("gfx10-3-generic", "gfx1030", "gfx1010"),
            ("gfx10-1-generic", "gfx1012", "gfx1030"),
            ("gfx9-generic", "gfx906", "gfx90a"),
            ("gfx9-generic", "gfx900", "gfx908"),
        ] {
            assert!(isa_matches(&t(g), &t(yes)), "{g} on {yes}");
            assert!(!isa_matches(&t(g), &t(no)), "{g} on {no}");
        }
        // a generic device name matches only itself
        assert!(isa_matches(&t("gfx11-generic"), &t("gfx11-generic")));
        assert!(!isa_matches(&t("gfx1100"), &t("gfx11-generic")));
    }

    #[test]
    fn three_features_use_descending_mask_order() {
        let dev = t("gfx9000:a+:b-:c+");
        assert_eq!(
            compatible_targets(&dev),
            vec![
                "gfx9000:a+:b-:c+",
                "gfx9000:a+:b-",
                "gfx9000:a+:c+",
                "gfx9000:a+",
                "gfx9000:b-:c+",
                "gfx9000:b-",
                "gfx9000:c+",
                "gfx9000",
            ]
        );
    }

    #[test]
    fn candidate_order_is_pinned_for_real_devices() {
        let cases: &[(&str, &[&str])] = &[
            ("gfx90a:xnack+", &["gfx90a:xnack+", "gfx90a"]),
            (
                "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
                &[
                    "gfx942:sramecc+:xnack-",
                    "gfx942:sramecc+",
                    "gfx942:xnack-",
                    "gfx942",
                    "gfx9-4-generic:sramecc+:xnack-",
                    "gfx9-4-generic:sramecc+",
                    "gfx9-4-generic:xnack-",
                    "gfx9-4-generic",
                ],
            ),
            ("gfx1102", &["gfx1102", "gfx11-generic"]),
            ("amdgcn-amd-amdhsa--gfx1151", &["gfx1151", "gfx11-generic"]),
            ("gfx906", &["gfx906", "gfx9-generic"]),
            (
                "gfx906:sramecc+:xnack-",
                &[
                    "gfx906:sramecc+:xnack-",
                    "gfx906:sramecc+",
                    "gfx906:xnack-",
                    "gfx906",
                    "gfx9-generic:sramecc+:xnack-",
                    "gfx9-generic:sramecc+",
                    "gfx9-generic:xnack-",
                    "gfx9-generic",
                ],
            ),
            // gfx940/gfx941 fall back to gfx9-4-generic (CLR's table)
            ("gfx940", &["gfx940", "gfx9-4-generic"]),
            (
                "gfx941:xnack+",
                &[
                    "gfx941:xnack+",
                    "gfx941",
                    "gfx9-4-generic:xnack+",
                    "gfx9-4-generic",
                ],
            ),
            // generic fallback keeps sramecc/xnack in canonical order
            (
                "gfx942:xnack-:sramecc+",
                &[
                    "gfx942:xnack-:sramecc+",
                    "gfx942:xnack-",
                    "gfx942:sramecc+",
                    "gfx942",
                    "gfx9-4-generic:sramecc+:xnack-",
                    "gfx9-4-generic:sramecc+",
                    "gfx9-4-generic:xnack-",
                    "gfx9-4-generic",
                ],
            ),
            ("host-x86_64-unknown-linux--", &[]),
        ];
        for (dev, want) in cases {
            assert_eq!(compatible_targets(&t(dev)), *want, "{dev}");
        }
        // The loader-level expansion has no generic fallback.
        assert_eq!(runtime_compatible_targets("gfx1102"), ["gfx1102"]);
        assert_eq!(
            runtime_compatible_targets("amdgcn-amd-amdhsa--gfx90a:xnack+"),
            ["gfx90a:xnack+", "gfx90a"]
        );
        assert!(isa_matches(&t("gfx9-4-generic"), &t("gfx940")));
        assert!(isa_matches(
            &t("gfx9-4-generic:xnack+"),
            &t("gfx941:xnack+")
        ));
    }

    #[test]
    fn runtime_expansion_is_textual_and_total() {
        assert_eq!(
            runtime_compatible_targets("gfx942:sramecc+:xnack-"),
            [
                "gfx942:sramecc+:xnack-",
                "gfx942:sramecc+",
                "gfx942:xnack-",
                "gfx942"
            ]
        );
        // features are not validated, empty ones are dropped
        assert_eq!(
            runtime_compatible_targets("gfx9:a::b"),
            ["gfx9:a:b", "gfx9:a", "gfx9:b", "gfx9"]
        );
        assert_eq!(runtime_compatible_targets("gfx1100::"), ["gfx1100"]);
        // the bare prefix is not stripped; empty input gives one empty candidate
        assert_eq!(
            runtime_compatible_targets("amdgcn-amd-amdhsa--"),
            ["amdgcn-amd-amdhsa--"]
        );
        assert_eq!(runtime_compatible_targets(""), [""]);
        assert_eq!(strip_target_prefix("amdgcn-amd-amdhsa--gfx90a"), "gfx90a");
        let many = format!("gfx1{}", ":f+".repeat(20));
        assert_eq!(
            runtime_compatible_targets(&many).len(),
            1 << RUNTIME_MAX_FEATURES
        );
    }

    #[test]
    fn gfx_processor_names() {
        for ok in ["gfx1100", "gfx90a", "gfx9-4-generic", "gfx90c"] {
            assert!(is_gfx_processor(ok), "{ok}");
        }
        for bad in ["", "gfx", "gfxABC", "gfx90A", "sm_80", "gfxa1", "gfx9_0"] {
            assert!(!is_gfx_processor(bad), "{bad}");
        }
    }

    #[test]
    fn overlap_is_symmetric_and_treats_unspecified_as_any() {
        for (a, b, want) in [
            ("gfx906", "gfx906:xnack-", true),
            ("gfx942:sramecc+", "gfx942:xnack-", true),
            ("gfx90a:xnack+", "gfx90a:xnack-", false),
            ("gfx1100", "gfx1101", false),
            ("gfx11-generic", "gfx1100", false),
            (
                "host-x86_64-unknown-linux--",
                "host-x86_64-unknown-linux--",
                false,
            ),
        ] {
            assert_eq!(targets_overlap(&t(a), &t(b)), want, "{a} {b}");
            assert_eq!(targets_overlap(&t(b), &t(a)), want, "{b} {a}");
        }
    }
}
