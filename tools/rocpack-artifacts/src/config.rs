//! Packaging configuration (`packaging-config.json`, the rocm-kpack
//! recombine format, kpack-reference §6.1) with a strict schema.
//!
//! ```json
//! { "primary_shard": "gfx110X-build",
//!   "architecture_groups": { "gfx110X": { "display_name": "…", "architectures": ["gfx1100", …] } },
//!   "validation": { "error_on_duplicate_device_code": true,
//!                   "verify_generic_artifacts_match": false,
//!                   "error_on_missing_architecture": false } }
//! ```
//!
//! Unlike the reference, unknown keys, wrong types, duplicate keys, empty
//! groups, architectures that are not target IDs and an architecture claimed
//! by two groups are all errors, each naming the JSON path
//! (`architecture_groups.gfx110X.architectures[1]`). Group order is the
//! order of the file. `display_name` defaults to the group key; the
//! validation flags default to `true`, `false`, `false`.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::target::Target;

/// Largest config file accepted (bytes).
pub const MAX_CONFIG_SIZE: u64 = 16 * 1024 * 1024;

/// One architecture group: the package suffix and the archs it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchGroup {
    /// Group key, used as package suffix (`blas_lib_<name>`).
    pub name: String,
    /// Human-readable name.
    pub display_name: String,
    /// Target IDs as written in the file.
    pub architectures: Vec<String>,
}

/// The `validation` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Validation {
    /// Differing device code for one arch from two shards is an error (else a warning).
    pub error_on_duplicate_device_code: bool,
    /// Compare the generic artifacts of every shard with the primary's.
    pub verify_generic_artifacts_match: bool,
    /// An arch named in a group but found in no shard is an error (else a warning).
    pub error_on_missing_architecture: bool,
}

impl Default for Validation {
    fn default() -> Self {
        Validation {
            error_on_duplicate_device_code: true,
            verify_generic_artifacts_match: false,
            error_on_missing_architecture: false,
        }
    }
}

/// A validated packaging configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackagingConfig {
    /// Shard whose generic artifacts are used.
    pub primary_shard: String,
    /// Groups in file order.
    pub architecture_groups: Vec<ArchGroup>,
    /// Validation flags.
    pub validation: Validation,
}

/// Errors loading a packaging config. Every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// Config file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is too large.
    #[error("{path}: config is {size} bytes, larger than the {MAX_CONFIG_SIZE}-byte limit")]
    TooLarge {
        /// Config file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// Not valid JSON.
    #[error(
        "{path}: line {line} column {column} (byte offset {offset}): malformed JSON: {message}"
    )]
    Syntax {
        /// Config file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// Byte offset of the error.
        offset: usize,
        /// What serde_json expected.
        message: String,
    },
    /// Valid JSON that does not follow the schema or its rules.
    #[error("{path}: at `{json_path}`: {message}")]
    Schema {
        /// Config file.
        path: PathBuf,
        /// JSON path of the offending value (`.` for the root).
        json_path: String,
        /// What is wrong / what was expected.
        message: String,
    },
}

impl ConfigError {
    /// The JSON path for schema errors.
    pub fn json_path(&self) -> Option<&str> {
        match self {
            ConfigError::Schema { json_path, .. } => Some(json_path),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    primary_shard: String,
    architecture_groups: RawGroups,
    #[serde(default)]
    validation: Validation,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    #[serde(default)]
    display_name: Option<String>,
    architectures: Vec<String>,
}

/// Groups in file order; duplicate keys are rejected.
struct RawGroups(Vec<(String, RawGroup)>);

impl<'de> Deserialize<'de> for RawGroups {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawGroups;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object mapping group names to {display_name, architectures}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawGroups, A::Error> {
                let mut out: Vec<(String, RawGroup)> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                while let Some(key) = map.next_key::<String>()? {
                    if !seen.insert(key.clone()) {
                        return Err(de::Error::custom(format_args!(
                            "group `{key}` is defined twice"
                        )));
                    }
                    let group = map.next_value::<RawGroup>()?;
                    out.push((key, group));
                }
                Ok(RawGroups(out))
            }
        }
        d.deserialize_map(V)
    }
}

fn schema(path: &Path, json_path: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Schema {
        path: path.to_path_buf(),
        json_path: json_path.into(),
        message: message.into(),
    }
}

/// Whether `name` is usable as a file-name component we create.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_control)
}

fn byte_offset(text: &str, line: usize, column: usize) -> usize {
    let mut off = 0usize;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            return off.saturating_add(column.saturating_sub(1)).min(text.len());
        }
        off = off.saturating_add(l.len());
    }
    text.len()
}

impl PackagingConfig {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let io = |source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        };
        let bytes = crate::fsutil::read_bounded(path, MAX_CONFIG_SIZE).map_err(io)?;
        Self::parse(&bytes, path)
    }

    /// Parses and validates config bytes; `origin` names the file in errors.
    pub fn parse(bytes: &[u8], origin: &Path) -> Result<Self, ConfigError> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            let offset = e.valid_up_to();
            let line = bytes
                .get(..offset)
                .map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count())
                + 1;
            ConfigError::Syntax {
                path: origin.to_path_buf(),
                line,
                column: 0,
                offset,
                message: "expected UTF-8 text".into(),
            }
        })?;
        if text.trim().is_empty() {
            return Err(ConfigError::Syntax {
                path: origin.to_path_buf(),
                line: 1,
                column: 1,
                offset: 0,
                message: "file is empty, expected a JSON object".into(),
            });
        }
        let mut de = serde_json::Deserializer::from_str(text);
        let raw: RawConfig = match serde_path_to_error::deserialize(&mut de) {
            Ok(raw) => raw,
            Err(err) => {
                let json_path = err.path().to_string();
                let inner = err.into_inner();
                if inner.is_syntax() || inner.is_eof() {
                    return Err(ConfigError::Syntax {
                        path: origin.to_path_buf(),
                        line: inner.line(),
                        column: inner.column(),
                        offset: byte_offset(text, inner.line(), inner.column()),
                        message: strip_position(&inner.to_string()),
                    });
                }
                return Err(schema(
                    origin,
                    json_path,
                    strip_position(&inner.to_string()),
                ));
            }
        };
        if let Err(e) = de.end() {
            return Err(ConfigError::Syntax {
                path: origin.to_path_buf(),
                line: e.line(),
                column: e.column(),
                offset: byte_offset(text, e.line(), e.column()),
                message: strip_position(&e.to_string()),
            });
        }
        Self::validate(raw, origin)
    }

    fn validate(raw: RawConfig, origin: &Path) -> Result<Self, ConfigError> {
        if !safe_name(&raw.primary_shard) {
            return Err(schema(
                origin,
                "primary_shard",
                format!(
                    "`{}` is not a shard directory name (expected a non-empty name without `/`, not starting with `.`)",
                    raw.primary_shard
                ),
            ));
        }
        if raw.architecture_groups.0.is_empty() {
            return Err(schema(
                origin,
                "architecture_groups",
                "expected at least one architecture group",
            ));
        }
        let mut groups: Vec<ArchGroup> = Vec::new();
        // Processor → (target, group, json path) of every arch seen so far.
        // Targets only overlap on the same processor, so each check looks at
        // one bucket: validation is linear in the config, not quadratic.
        let mut claimed: std::collections::HashMap<String, Vec<(Target, String, String)>> =
            std::collections::HashMap::new();
        for (name, g) in raw.architecture_groups.0 {
            let gpath = format!("architecture_groups.{name}");
            if !safe_name(&name) || name == "generic" {
                return Err(schema(
                    origin,
                    gpath,
                    format!(
                        "group name `{name}` cannot be a package suffix (expected a non-empty name without `/`, not starting with `.`, not `generic`)"
                    ),
                ));
            }
            if g.architectures.is_empty() {
                return Err(schema(
                    origin,
                    format!("{gpath}.architectures"),
                    format!("group `{name}` has no architectures (expected a non-empty list)"),
                ));
            }
            for (i, arch) in g.architectures.iter().enumerate() {
                let apath = format!("{gpath}.architectures[{i}]");
                let target =
                    Target::parse(arch).map_err(|e| schema(origin, &apath, e.to_string()))?;
                if arch.starts_with(crate::target::AGENT_PREFIX) || arch.starts_with("hipv4-") {
                    return Err(schema(
                        origin,
                        apath,
                        format!("`{arch}`: expected a bare target ID such as gfx1100"),
                    ));
                }
                let bucket = claimed.entry(target.processor.clone()).or_default();
                if let Some((other, oname, opath)) = bucket.iter().find(|(t, _, _)| {
                    #[cfg(test)]
                    tests::COMPARISONS.with(|c| c.set(c.get() + 1));
                    t.compatible_with(&target)
                }) {
                    let msg = if *oname == name {
                        format!("architecture `{arch}` is listed twice in group `{name}` (also at `{opath}`)")
                    } else {
                        format!(
                            "architecture `{arch}` is claimed by two groups: `{oname}` (as `{other}` at `{opath}`) and `{name}`"
                        )
                    };
                    return Err(schema(origin, apath, msg));
                }
                bucket.push((target, name.clone(), apath));
            }
            groups.push(ArchGroup {
                display_name: g.display_name.unwrap_or_else(|| name.clone()),
                name,
                architectures: g.architectures,
            });
        }
        Ok(PackagingConfig {
            primary_shard: raw.primary_shard,
            architecture_groups: groups,
            validation: raw.validation,
        })
    }

    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&ArchGroup> {
        self.architecture_groups.iter().find(|g| g.name == name)
    }

    /// Names of every group whose architectures can serve code built for
    /// `arch` (same processor, no conflicting feature), in config order.
    pub fn groups_for_arch(&self, arch: &Target) -> Vec<&ArchGroup> {
        self.architecture_groups
            .iter()
            .filter(|g| {
                g.architectures
                    .iter()
                    .filter_map(|a| Target::parse(a).ok())
                    .any(|t| t.compatible_with(arch))
            })
            .collect()
    }
}

/// serde_json appends " at line L column C"; we report position separately.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg.get(..i).unwrap_or(msg).to_string(),
        None => msg.to_string(),
    }
}

#[cfg(test)]
mod tests {
    thread_local! {
        /// Target comparisons made by validation on this thread.
        pub(super) static COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Hardening item 11: comparisons grow linearly with the number of
    /// architectures, for distinct processors and for many groups sharing
    /// processors (each with a distinct, mutually incompatible feature
    /// set). The pairwise check made n²/2 (50 million for 10,000 groups).
    #[test]
    fn validation_comparisons_are_linear() {
        let feats = [
            "sramecc+:xnack+",
            "sramecc+:xnack-",
            "sramecc-:xnack+",
            "sramecc-:xnack-",
        ];
        for shared in [false, true] {
            let n = 10_000;
            let groups: Vec<String> = (0..n)
                .map(|i| {
                    let arch = if shared {
                        format!("gfx{}:{}", 10_000 + i / 4, feats[i % 4])
                    } else {
                        format!("gfx{}", 10_000 + i)
                    };
                    format!("\"g{i}\": {{\"architectures\": [\"{arch}\"]}}")
                })
                .collect();
            let json = format!(
                "{{\"primary_shard\": \"x\", \"architecture_groups\": {{{}}}}}",
                groups.join(",")
            );
            COMPARISONS.with(|c| c.set(0));
            let c = PackagingConfig::parse(json.as_bytes(), Path::new("big.json")).unwrap();
            assert_eq!(c.architecture_groups.len(), n);
            let made = COMPARISONS.with(|c| c.get());
            assert!(
                made <= 4 * n as u64,
                "{made} comparisons for {n} architectures (shared processors: {shared})"
            );
        }
    }

    #[test]
    fn many_groups_validate_in_linear_time() {
        // 20,000 groups with distinct processors: one bucket lookup each
        // (the pairwise check took half a minute for 10,000 groups).
        let groups: Vec<String> = (0..20_000)
            .map(|i| format!("\"g{i}\": {{\"architectures\": [\"gfx{}\"]}}", 10_000 + i))
            .collect();
        let json = format!(
            "{{\"primary_shard\": \"x\", \"architecture_groups\": {{{}}}}}",
            groups.join(",")
        );
        let c = PackagingConfig::parse(json.as_bytes(), Path::new("big.json")).unwrap();
        assert_eq!(c.architecture_groups.len(), 20_000);
        // The overlap check still works within one processor's bucket.
        let dup = json.replace("\"gfx10001\"]", "\"gfx10000:xnack+\"]");
        let e = PackagingConfig::parse(dup.as_bytes(), Path::new("big.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("claimed by two groups"), "{e}");
    }

    use super::*;

    fn parse(s: &str) -> Result<PackagingConfig, ConfigError> {
        PackagingConfig::parse(s.as_bytes(), Path::new("cfg.json"))
    }

    const GOOD: &str = r#"{"primary_shard":"a","architecture_groups":{
        "gfx110X":{"display_name":"R3","architectures":["gfx1100","gfx1101"]},
        "gfx90a":{"architectures":["gfx90a:xnack+"]}}}"#;

    #[test]
    fn parses_with_defaults_and_order() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.primary_shard, "a");
        let names: Vec<_> = c
            .architecture_groups
            .iter()
            .map(|g| g.name.as_str())
            .collect();
        assert_eq!(names, ["gfx110X", "gfx90a"]);
        assert_eq!(c.architecture_groups[1].display_name, "gfx90a");
        assert_eq!(c.validation, Validation::default());
        assert!(c.validation.error_on_duplicate_device_code);
    }

    fn schema_err(s: &str) -> (String, String) {
        match parse(s) {
            Err(ConfigError::Schema {
                json_path, message, ..
            }) => (json_path, message),
            other => panic!("{s}: expected schema error, got {other:?}"),
        }
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_path() {
        let (p, m) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx1100"],"colour":1}}}"#,
        );
        assert_eq!(p, "architecture_groups.g.colour");
        assert!(m.contains("unknown field"), "{m}");
        let (p, _) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx1100", 7]}}}"#,
        );
        assert_eq!(p, "architecture_groups.g.architectures[1]");
        let (p, _) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx1100"]}},"validation":{"error_on_missing_architecture":"yes"}}"#,
        );
        assert_eq!(p, "validation.error_on_missing_architecture");
        let (p, m) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx1100"]}},"version":2}"#,
        );
        assert_eq!(p, "version");
        assert!(m.contains("unknown field"), "{m}");
        let (_, m) = schema_err(r#"{"architecture_groups":{"g":{"architectures":["gfx1100"]}}}"#);
        assert!(m.contains("primary_shard"), "{m}");
        let (p, _) = schema_err(r#"{"primary_shard":3,"architecture_groups":{}}"#);
        assert_eq!(p, "primary_shard");
    }

    #[test]
    fn semantic_rules() {
        let (p, m) =
            schema_err(r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":[]}}}"#);
        assert_eq!(p, "architecture_groups.g.architectures");
        assert!(m.contains("no architectures"), "{m}");
        let (p, m) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx1100"]},"h":{"architectures":["gfx1101","gfx1100"]}}}"#,
        );
        assert_eq!(p, "architecture_groups.h.architectures[1]");
        assert!(
            m.contains("two groups") && m.contains("`g`") && m.contains("`h`"),
            "{m}"
        );
        let (p, _) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx90a"]},"h":{"architectures":["gfx90a:xnack+"]}}}"#,
        );
        assert_eq!(p, "architecture_groups.h.architectures[0]");
        // xnack+ and xnack- are different archs: allowed in different groups.
        parse(r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx90a:xnack-"]},"h":{"architectures":["gfx90a:xnack+"]}}}"#).unwrap();
        let (p, _) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["sm_80"]}}}"#,
        );
        assert_eq!(p, "architecture_groups.g.architectures[0]");
        let (p, _) = schema_err(r#"{"primary_shard":"a","architecture_groups":{}}"#);
        assert_eq!(p, "architecture_groups");
        let (p, _) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"generic":{"architectures":["gfx1100"]}}}"#,
        );
        assert_eq!(p, "architecture_groups.generic");
        let (p, _) = schema_err(
            r#"{"primary_shard":"../x","architecture_groups":{"g":{"architectures":["gfx1100"]}}}"#,
        );
        assert_eq!(p, "primary_shard");
        let (_, m) = schema_err(
            r#"{"primary_shard":"a","architecture_groups":{"g":{"architectures":["gfx1100"]},"g":{"architectures":["gfx1101"]}}}"#,
        );
        assert!(m.contains("defined twice"), "{m}");
    }

    #[test]
    fn malformed_json_reports_position() {
        match parse("{\n  \"primary_shard\": \"a\",\n  oops\n}") {
            Err(ConfigError::Syntax {
                line,
                column,
                offset,
                ..
            }) => {
                assert_eq!(line, 3);
                assert!(column >= 3);
                assert_eq!(offset, 26 + column - 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse(""), Err(ConfigError::Syntax { .. })));
        assert!(matches!(
            parse(&format!("{GOOD} {{}}")),
            Err(ConfigError::Syntax { .. })
        ));
        assert!(matches!(
            parse("{\"primary_shard\": \"a\""),
            Err(ConfigError::Syntax { .. })
        ));
    }

    #[test]
    fn groups_for_arch_uses_feature_compatibility() {
        let c = parse(GOOD).unwrap();
        let g = |a: &str| -> Vec<String> {
            c.groups_for_arch(&Target::parse(a).unwrap())
                .iter()
                .map(|g| g.name.clone())
                .collect()
        };
        assert_eq!(g("gfx1101"), ["gfx110X"]);
        assert_eq!(g("gfx90a"), ["gfx90a"]);
        assert!(g("gfx90a:xnack-").is_empty());
        assert!(g("gfx906").is_empty());
    }
}
