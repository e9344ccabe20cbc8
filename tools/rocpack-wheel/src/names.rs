//! Distribution and wheel file names (PEP 503, PEP 427, PEP 508, PEP 685).

/// PEP 503 normalised name: lower case, every run of `-`, `_`, `.` becomes `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The distribution component of a wheel file name (PEP 427 escaping of the
/// normalised name): `Foo.Bar-baz` → `foo_bar_baz`.
pub fn file_component(name: &str) -> String {
    normalize(name).replace('-', "_")
}

/// A version as it appears in a wheel file name (`-` is not allowed there).
pub fn file_version(version: &str) -> String {
    version.replace('-', "_")
}

/// The `.kpack` name stem of a distribution: lower case, `-` → `_`
/// (`<dist>_<arch>.kpack`).
pub fn kpack_stem(name: &str) -> String {
    file_component(name)
}

/// Whether `name` is a valid distribution name (PEP 508): ASCII letters and
/// digits, with `.`, `-`, `_` inside.
pub fn is_valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    let ok_edge = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.first().is_some_and(ok_edge)
        && b.last().is_some_and(ok_edge)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'_'))
}

/// A wheel file name split into its PEP 427 fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelName {
    /// Distribution (as written in the file name).
    pub name: String,
    /// Version (as written in the file name).
    pub version: String,
    /// Optional build tag.
    pub build: Option<String>,
    /// Python tag(s), e.g. `py3` or `cp311`.
    pub python: String,
    /// ABI tag(s).
    pub abi: String,
    /// Platform tag(s).
    pub platform: String,
}

impl WheelName {
    /// Parses `name-version(-build)?-python-abi-platform.whl`.
    pub fn parse(file_name: &str) -> Option<WheelName> {
        let stem = file_name.strip_suffix(".whl")?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, build, rest) = match parts.len() {
            5 => (parts[0], parts[1], None, &parts[2..]),
            6 => (parts[0], parts[1], Some(parts[2]), &parts[3..]),
            _ => return None,
        };
        if parts.iter().any(|p| p.is_empty())
            || build.is_some_and(|b| !b.starts_with(|c: char| c.is_ascii_digit()))
        {
            return None;
        }
        Some(WheelName {
            name: name.to_string(),
            version: version.to_string(),
            build: build.map(str::to_string),
            python: rest[0].to_string(),
            abi: rest[1].to_string(),
            platform: rest[2].to_string(),
        })
    }

    /// The file name.
    pub fn file_name(&self) -> String {
        let mut s = format!("{}-{}", self.name, self.version);
        if let Some(b) = &self.build {
            s.push('-');
            s.push_str(b);
        }
        format!("{s}-{}-{}-{}.whl", self.python, self.abi, self.platform)
    }

    /// The same tags for another distribution and version.
    pub fn with_dist(&self, dist: &str, version: &str) -> WheelName {
        WheelName {
            name: file_component(dist),
            version: file_version(version),
            ..self.clone()
        }
    }

    /// Compressed tag set from `Tag:` lines of a WHEEL file
    /// (`py3-none-any`, …): each field's distinct values joined with `.`.
    pub fn from_tags(
        name: &str,
        version: &str,
        build: Option<&str>,
        tags: &[String],
    ) -> Option<WheelName> {
        let mut fields: [Vec<&str>; 3] = Default::default();
        for t in tags {
            let p: Vec<&str> = t.split('-').collect();
            if p.len() != 3 || p.iter().any(|s| s.is_empty()) {
                return None;
            }
            for (f, v) in fields.iter_mut().zip(p) {
                if !f.contains(&v) {
                    f.push(v);
                }
            }
        }
        if fields[0].is_empty() {
            return None;
        }
        Some(WheelName {
            name: file_component(name),
            version: file_version(version),
            build: build.map(str::to_string),
            python: fields[0].join("."),
            abi: fields[1].join("."),
            platform: fields[2].join("."),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pep503() {
        assert_eq!(normalize("Foo.Bar__baz"), "foo-bar-baz");
        assert_eq!(
            normalize("amd-torch-device-gfx12_0"),
            "amd-torch-device-gfx12-0"
        );
        assert_eq!(
            normalize("fxpkg-device-gfx1250-strict"),
            "fxpkg-device-gfx1250-strict"
        );
        assert_eq!(
            file_component("fxpkg-device-gfx1100"),
            "fxpkg_device_gfx1100"
        );
        assert_eq!(kpack_stem("Amd-Torch"), "amd_torch");
        assert!(is_valid_name("a.b-c_d1"));
        assert!(!is_valid_name("-a"));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name(""));
    }

    #[test]
    fn wheel_names() {
        let w = WheelName::parse("fxpkg-1.0-py3-none-linux_x86_64.whl").unwrap();
        assert_eq!(w.name, "fxpkg");
        assert_eq!(w.platform, "linux_x86_64");
        let d = w.with_dist("fxpkg-device-gfx1100", "1.0");
        assert_eq!(
            d.file_name(),
            "fxpkg_device_gfx1100-1.0-py3-none-linux_x86_64.whl"
        );
        let b = WheelName::parse("x-2.0-1abc-cp311-cp311-manylinux_2_28_x86_64.whl").unwrap();
        assert_eq!(b.build.as_deref(), Some("1abc"));
        assert_eq!(
            b.file_name(),
            "x-2.0-1abc-cp311-cp311-manylinux_2_28_x86_64.whl"
        );
        assert!(WheelName::parse("x-1.0-py3-none.whl").is_none());
        assert!(WheelName::parse("x-1.0-abc-py3-none-any.whl").is_none());
        let t = WheelName::from_tags(
            "fx",
            "1.0",
            None,
            &["py2-none-any".into(), "py3-none-any".into()],
        )
        .unwrap();
        assert_eq!(t.file_name(), "fx-1.0-py2.py3-none-any.whl");
    }
}
