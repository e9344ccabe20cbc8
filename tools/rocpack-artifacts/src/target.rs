//! Target IDs as the packaging code sees them (`gfxNNN[:feature(+|-)]*`):
//! parsed and validated by [`rocpack_bundle::TargetId`] with the one rule
//! every tool applies ([`rocpack_bundle::TargetId::check_amdgpu`]), kept as
//! processor + features. Used by the packaging config, family selection,
//! recombine and verify.

use std::fmt;

use rocpack_bundle::TargetId;

/// Prefix of HSA agent ISA names.
pub const AGENT_PREFIX: &str = rocpack_bundle::AMDHSA_PREFIX;

/// A parsed target ID: `gfxNNN[:feature(+|-)]*`.
///
/// Parsing and matching are delegated to [`rocpack_bundle::TargetId`],
/// which owns target IDs; this type keeps the processor/feature view the
/// packaging code works with.
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
    pub expected: String,
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` is not a target ID: {}", self.text, self.expected)
    }
}

impl std::error::Error for TargetError {}

impl Target {
    /// Parses `gfx…[:feat±]*`, optionally prefixed by `amdgcn-amd-amdhsa--`
    /// (an HSA ISA name) or `hip[v4]-amdgcn-amd-amdhsa--` (a bundle entry
    /// ID), with [`TargetId::parse`]. The processor must be an AMDGPU one
    /// ([`rocpack_bundle::is_gfx_processor`]).
    pub fn parse(text: &str) -> Result<Self, TargetError> {
        let err = |expected: String| TargetError {
            text: text.to_string(),
            expected,
        };
        let id = TargetId::parse(text).map_err(|e| match e {
            rocpack_bundle::Error::TargetId { reason, .. } => err(reason),
            other => err(other.to_string()),
        })?;
        id.check_amdgpu().map_err(|e| err(e.to_string()))?;
        Ok(Self::from_id(&id))
    }

    fn from_id(id: &TargetId) -> Self {
        Target {
            processor: id.arch().to_string(),
            features: id
                .features()
                .iter()
                .map(|f| (f.name.clone(), f.enabled))
                .collect(),
        }
    }

    /// This target as a [`TargetId`] (bare form, `gfx942:sramecc+`);
    /// `None` only for a hand-built `Target` that is not a valid ID.
    pub fn id(&self) -> Option<TargetId> {
        TargetId::parse(&self.to_string()).ok()
    }

    /// Whether the processor is a generic one (`gfx11-generic`).
    pub fn is_generic(&self) -> bool {
        self.processor.ends_with("-generic")
    }

    /// The runtime's compatible targets for an agent with this ISA, most
    /// specific first (descending feature bitmask, kpack-reference §4.5),
    /// without generic fallback ([`rocpack_bundle::runtime_compatible_targets`]).
    pub fn compatible_targets(&self) -> Vec<Target> {
        rocpack_bundle::runtime_compatible_targets(&self.to_string())
            .iter()
            .filter_map(|c| Target::parse(c).ok())
            .collect()
    }

    /// Same processor and no feature set to opposite values: code built for
    /// one can serve a device described by the other
    /// ([`rocpack_bundle::targets_overlap`]).
    pub fn compatible_with(&self, other: &Target) -> bool {
        match (self.id(), other.id()) {
            (Some(a), Some(b)) => rocpack_bundle::targets_overlap(&a, &b),
            _ => false,
        }
    }

    /// The target with features in canonical (alphabetical) order, used to
    /// compare IDs that list features in different orders.
    pub fn canonical(&self) -> Target {
        let mut t = self.clone();
        t.features.sort();
        t
    }

    /// CLR's `TargetToGeneric`: the generic processor this one falls back to
    /// ([`rocpack_bundle::generic_for`]), with the same features.
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

/// The generic processor a specific one belongs to
/// ([`rocpack_bundle::generic_for`], CLR's `TargetToGeneric` table).
pub fn generic_processor(processor: &str) -> Option<&'static str> {
    rocpack_bundle::generic_for(processor)
}
