//! `metadata.txt`: the seed's era-1 format (reference §3.1) plus the artifact's
//! name, size and store key and the digests of the headers beside it.
//!
//! ```text
//! Snapshot created: 2026-01-27 10:11:12 UTC
//! ROCm version: 6.4
//!
//! Checksums:
//!   sha1: <40 hex>
//!   sha256: <64 hex>
//!
//! Artifact:                       (snapctl addition)
//!   name: librcclx-dev.a
//!   size: 84934656
//!   store_key: cas/sha256/<64 hex>
//!
//! Headers:                        (snapctl addition)
//!   rccl.h: <64 hex sha256>
//!
//! Commit Hashes:
//!   fbsource: <hash>
//!   rcclx: <hash>
//! ```

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Largest metadata file accepted (they are a few hundred bytes).
pub const MAX_METADATA_BYTES: u64 = 1 << 20;

/// Artifact name the seed hard-codes; used when an era-1 file does not record one.
pub const SEED_ARTIFACT_NAME: &str = "librcclx-dev.a";

/// Largest header file `verify` and `rollback` hash: headers are source
/// files, and a symlink to `/dev/zero` must not be hashed forever.
pub const MAX_HEADER_BYTES: u64 = 256 << 20;

/// What the snapshot's artifact is and where it lives in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    pub name: String,
    pub size: u64,
    /// `cas/sha256/<hex>`, always consistent with [`Metadata::sha256`].
    pub store_key: String,
}

/// One parsed `metadata.txt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// `YYYY-MM-DD HH:MM:SS`, UTC.
    pub created: String,
    pub version: String,
    pub sha1: Option<String>,
    pub sha256: String,
    pub artifact: Option<Artifact>,
    /// Header file name → sha256 (snapctl-written files only).
    pub headers: BTreeMap<String, String>,
    /// Commit name → hash, in file order (the seed writes them sorted).
    pub commits: Vec<(String, String)>,
    /// ABI inputs (workspace-relative path → sha256) the artifact was
    /// compiled against (`create --abi-input`; see [`crate::abi`]).
    pub abi_inputs: BTreeMap<String, String>,
}

/// Store key of a sha256 digest.
pub fn store_key(sha256: &str) -> String {
    format!("cas/sha256/{sha256}")
}

/// Validates a ROCm version string: `MAJOR.MINOR` or `MAJOR.MINOR.PATCH`, digits only.
pub fn validate_version(v: &str) -> std::result::Result<(), String> {
    let parts: Vec<&str> = v.split('.').collect();
    let ok = (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_digit()));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "unknown ROCm version string {v:?}: expected MAJOR.MINOR[.PATCH] such as \"6.4\" or \"7.0\""
        ))
    }
}

/// `true` when `s` is exactly `len` hex digits.
pub fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A character named for a message: `a newline`, `a tab`, `U+0007`.
pub fn describe_char(c: char) -> String {
    match c {
        '\n' => "a newline".into(),
        '\r' => "a carriage return".into(),
        '\t' => "a tab".into(),
        '\0' => "a NUL byte".into(),
        ' ' => "a space".into(),
        '\\' => "a backslash".into(),
        c if c.is_control() || c.is_whitespace() => format!("U+{:04X}", u32::from(c)),
        c => format!("'{c}'"),
    }
}

/// Why `name` cannot be placed in a snapshot directory, if it cannot.
fn file_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".into());
    }
    if name == "." || name == ".." {
        return Some("it names a directory".into());
    }
    if name.starts_with('.') {
        return Some("it starts with '.'".into());
    }
    if let Some(c) = name
        .chars()
        .find(|&c| matches!(c, '/' | '\\' | ':') || c.is_control() || c.is_whitespace())
    {
        let why = match c {
            '/' => " (a file name, not a path, is recorded)",
            '\\' => " (not a path separator here, and not portable)",
            ':' => " (the separator of metadata.txt entries)",
            _ => "",
        };
        return Some(format!("it contains {}{why}", describe_char(c)));
    }
    None
}

/// A file name that is safe to place in a snapshot directory (see
/// [`validate_header_name`] and [`validate_artifact_name`] for the names
/// that are also reserved).
pub fn validate_file_name(name: &str) -> std::result::Result<(), String> {
    match file_name_problem(name) {
        Some(p) => Err(format!("{name:?} is not a usable file name: {p}")),
        None => Ok(()),
    }
}

/// The name of a header snapshotted beside `metadata.txt`.
pub fn validate_header_name(name: &str) -> std::result::Result<(), String> {
    validate_file_name(name)?;
    if name == "metadata.txt" {
        return Err(
            "a header may not be named metadata.txt (the snapshot's own metadata file beside it)"
                .into(),
        );
    }
    Ok(())
}

/// The file name of the artifact (stored in the blob store under its
/// digest; its name is recorded in `metadata.txt`).
pub fn validate_artifact_name(name: &str) -> std::result::Result<(), String> {
    validate_file_name(name)?;
    if name == "metadata.txt" {
        return Err(
            "the artifact may not be named metadata.txt: that is the name of a snapshot's own metadata file (pass the prebuilt library, e.g. librcclx-dev.a)"
                .into(),
        );
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Section {
    None,
    Checksums,
    Artifact,
    Headers,
    Commits,
    Abi,
}

/// What [`Metadata::parse`] has read so far: one line at a time, then
/// [`Parser::finish`] checks that nothing required is missing.
struct Parser<'p> {
    path: &'p Path,
    created: Option<String>,
    version: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
    art_name: Option<(usize, String)>,
    art_size: Option<(usize, u64)>,
    art_key: Option<(usize, String)>,
    headers: BTreeMap<String, String>,
    abi_inputs: BTreeMap<String, String>,
    commits: Vec<(String, String)>,
    section: Section,
    seen: Vec<String>,
    checksums_line: Option<usize>,
    artifact_line: Option<usize>,
}

impl<'p> Parser<'p> {
    fn new(path: &'p Path) -> Self {
        Parser {
            path,
            created: None,
            version: None,
            sha1: None,
            sha256: None,
            art_name: None,
            art_size: None,
            art_key: None,
            headers: BTreeMap::new(),
            abi_inputs: BTreeMap::new(),
            commits: Vec::new(),
            section: Section::None,
            seen: Vec::new(),
            checksums_line: None,
            artifact_line: None,
        }
    }

    fn err(&self, line: usize, msg: String) -> Error {
        Error::input(self.path, Some(line), msg)
    }

    /// An indented `  name: value` line of the current section.
    fn entry(&mut self, lineno: usize, line: &str) -> Result<()> {
        let entry = line.trim();
        // ABI input paths may hold ':'; their value (hex) never does.
        let split = if self.section == Section::Abi {
            entry.rsplit_once(':')
        } else {
            entry.split_once(':')
        };
        let Some((key, value)) = split else {
            return Err(self.err(lineno, format!("expected `  name: value`, found {entry:?}")));
        };
        let (key, value) = (key.trim(), value.trim());
        if value.is_empty() {
            return Err(self.err(lineno, format!("`{key}` has an empty value")));
        }
        match self.section {
            Section::None => {
                Err(self.err(
                    lineno,
                    format!("indented entry {entry:?} outside any section (expected `Checksums:` or `Commit Hashes:` first)"),
                ))
            }
            Section::Checksums => self.checksum(lineno, key, value),
            Section::Artifact => self.artifact_field(lineno, key, value),
            Section::Headers => {
                validate_header_name(key).map_err(|m| self.err(lineno, m))?;
                if !is_hex(value, 64) {
                    return Err(self.err(lineno, format!("header {key}: sha256 must be 64 hex digits, found {value:?}")));
                }
                if self.headers.insert(key.to_string(), value.to_ascii_lowercase()).is_some() {
                    return Err(self.err(lineno, format!("duplicate header {key}")));
                }
                Ok(())
            }
            Section::Abi => {
                let name = crate::abi::normalize_path(key).map_err(|m| self.err(lineno, m))?;
                if !is_hex(value, 64) {
                    return Err(self.err(lineno, format!("ABI input {key}: sha256 must be 64 hex digits, found {value:?}")));
                }
                if self.abi_inputs.insert(name, value.to_ascii_lowercase()).is_some() {
                    return Err(self.err(lineno, format!("duplicate ABI input {key}")));
                }
                Ok(())
            }
            Section::Commits => {
                if key.is_empty() || key.contains(char::is_whitespace) || value.contains(char::is_whitespace) {
                    return Err(self.err(lineno, format!("expected `  name: hash`, found {entry:?}")));
                }
                if self.commits.iter().any(|(k, _)| k == key) {
                    return Err(self.err(lineno, format!("duplicate commit name {key}")));
                }
                self.commits.push((key.to_string(), value.to_string()));
                Ok(())
            }
        }
    }

    /// `  sha1: …` or `  sha256: …` under `Checksums:`.
    fn checksum(&mut self, lineno: usize, key: &str, value: &str) -> Result<()> {
        let (slot, digits) = match key {
            "sha1" => (&mut self.sha1, 40),
            "sha256" => (&mut self.sha256, 64),
            other => {
                return Err(self.err(
                    lineno,
                    format!("unknown checksum {other:?} (expected sha1 or sha256)"),
                ))
            }
        };
        if slot.is_some() {
            return Err(self.err(lineno, format!("duplicate {key}")));
        }
        if !is_hex(value, digits) {
            return Err(self.err(
                lineno,
                format!(
                    "{key} must be {digits} hex digits, found {value:?} ({} chars)",
                    value.len()
                ),
            ));
        }
        *slot = Some(value.to_ascii_lowercase());
        Ok(())
    }

    /// `  name:`, `  size:` or `  store_key:` under `Artifact:`.
    fn artifact_field(&mut self, lineno: usize, key: &str, value: &str) -> Result<()> {
        match key {
            "name" if self.art_name.is_none() => {
                validate_artifact_name(value).map_err(|m| self.err(lineno, m))?;
                self.art_name = Some((lineno, value.to_string()));
            }
            "size" if self.art_size.is_none() => {
                let n: u64 = value.parse().map_err(|_| {
                    self.err(
                        lineno,
                        format!("size must be a decimal byte count, found {value:?}"),
                    )
                })?;
                self.art_size = Some((lineno, n));
            }
            "store_key" if self.art_key.is_none() => {
                self.art_key = Some((lineno, value.to_string()));
            }
            "name" | "size" | "store_key" => {
                return Err(self.err(lineno, format!("duplicate {key}")))
            }
            other => {
                return Err(self.err(
                    lineno,
                    format!("unknown artifact field {other:?} (expected name, size, store_key)"),
                ))
            }
        }
        Ok(())
    }

    /// A top-level `Tag: rest` line: a field, or the header of a section.
    fn top_level(&mut self, lineno: usize, line: &str) -> Result<()> {
        let (tag, rest) = match line.split_once(':') {
            Some((t, r)) => (t, r.trim()),
            None => return Err(self.err(lineno, format!("unexpected line {line:?}"))),
        };
        if self.seen.contains(&tag.to_string()) {
            return Err(self.err(lineno, format!("duplicate `{tag}:`")));
        }
        self.seen.push(tag.to_string());
        self.section = Section::None;
        match tag {
            "Snapshot created" => {
                let Some(ts) = rest.strip_suffix(" UTC") else {
                    return Err(self.err(
                        lineno,
                        format!(
                            "expected `Snapshot created: YYYY-MM-DD HH:MM:SS UTC`, found {rest:?}"
                        ),
                    ));
                };
                if chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%d %H:%M:%S").is_err()
                    || ts.len() != 19
                {
                    return Err(self.err(
                        lineno,
                        format!("timestamp {ts:?} is not YYYY-MM-DD HH:MM:SS"),
                    ));
                }
                self.created = Some(ts.to_string());
            }
            "ROCm version" => {
                validate_version(rest).map_err(|m| self.err(lineno, m))?;
                self.version = Some(rest.to_string());
            }
            "Checksums" | "Artifact" | "Headers" | "Commit Hashes" | "ABI inputs"
                if !rest.is_empty() =>
            {
                return Err(self.err(
                    lineno,
                    format!("`{tag}:` must be followed by indented entries on the next lines"),
                ));
            }
            "Checksums" => {
                self.section = Section::Checksums;
                self.checksums_line = Some(lineno);
            }
            "Artifact" => {
                self.section = Section::Artifact;
                self.artifact_line = Some(lineno);
            }
            "Headers" => self.section = Section::Headers,
            "ABI inputs" => self.section = Section::Abi,
            "Commit Hashes" => self.section = Section::Commits,
            other => return Err(self.err(lineno, format!("unknown field {other:?}"))),
        }
        Ok(())
    }

    /// The metadata read, once every line was; `end`: the last non-blank
    /// line, named by errors about what is missing.
    fn finish(self, end: usize) -> Result<Metadata> {
        let path = self.path;
        let err = |line: usize, msg: String| Error::input(path, Some(line), msg);
        let created = self
            .created
            .ok_or_else(|| err(1, "missing `Snapshot created: … UTC` line".into()))?;
        let version = self
            .version
            .ok_or_else(|| err(end, "missing `ROCm version:` line".into()))?;
        let sha256 = self.sha256.ok_or_else(|| {
            err(
                self.checksums_line.unwrap_or(end),
                "missing checksum: expected `  sha256: <64 hex>` under `Checksums:`".into(),
            )
        })?;
        let artifact = match (self.art_name, self.art_size, self.art_key) {
            (None, None, None) => None,
            (Some((_, name)), Some((_, size)), Some((kl, key))) => {
                if key != store_key(&sha256) {
                    return Err(err(
                        kl,
                        format!(
                            "store_key {key:?} does not match sha256 (expected {})",
                            store_key(&sha256)
                        ),
                    ));
                }
                Some(Artifact {
                    name,
                    size,
                    store_key: key,
                })
            }
            _ => {
                return Err(err(
                    self.artifact_line.unwrap_or(end),
                    "`Artifact:` needs all of name, size and store_key".into(),
                ))
            }
        };
        Ok(Metadata {
            created,
            version,
            sha1: self.sha1,
            sha256,
            artifact,
            headers: self.headers,
            commits: self.commits,
            abi_inputs: self.abi_inputs,
        })
    }
}

impl Metadata {
    /// Parses `text` (the content of `path`). Errors name `path` and the 1-based line.
    pub fn parse(path: &Path, text: &str) -> Result<Metadata> {
        let mut parser = Parser::new(path);
        let mut last_line = 0;
        for (idx, raw) in text.split('\n').enumerate() {
            let lineno = idx + 1;
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.trim().is_empty() {
                continue;
            }
            last_line = lineno;
            if line.starts_with([' ', '\t']) {
                parser.entry(lineno, line)?;
            } else {
                parser.top_level(lineno, line)?;
            }
        }
        parser.finish(last_line.max(1))
    }

    /// Reads and parses a `metadata.txt` file.
    pub fn read(path: &Path) -> Result<Metadata> {
        let text = crate::fsutil::read_text_bounded(path, MAX_METADATA_BYTES)?;
        Metadata::parse(path, &text)
    }

    /// Store key of the artifact (derived from the sha256 for seed files).
    pub fn store_key(&self) -> String {
        store_key(&self.sha256)
    }

    /// Artifact file name (the seed's hard-coded name for era-1 files).
    pub fn artifact_name(&self) -> &str {
        self.artifact
            .as_ref()
            .map_or(SEED_ARTIFACT_NAME, |a| a.name.as_str())
    }

    /// Renders the file. Deterministic; round-trips through [`Metadata::parse`].
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Snapshot created: {} UTC", self.created);
        let _ = writeln!(s, "ROCm version: {}", self.version);
        s.push_str("\nChecksums:\n");
        if let Some(sha1) = &self.sha1 {
            let _ = writeln!(s, "  sha1: {sha1}");
        }
        let _ = writeln!(s, "  sha256: {}", self.sha256);
        if let Some(a) = &self.artifact {
            s.push_str("\nArtifact:\n");
            let _ = writeln!(s, "  name: {}", a.name);
            let _ = writeln!(s, "  size: {}", a.size);
            let _ = writeln!(s, "  store_key: {}", a.store_key);
        }
        if !self.headers.is_empty() {
            s.push_str("\nHeaders:\n");
            for (name, digest) in &self.headers {
                let _ = writeln!(s, "  {name}: {digest}");
            }
        }
        if !self.abi_inputs.is_empty() {
            s.push_str("\nABI inputs:\n");
            for (name, digest) in &self.abi_inputs {
                let _ = writeln!(s, "  {name}: {digest}");
            }
        }
        s.push_str("\nCommit Hashes:\n");
        for (name, hash) in &self.commits {
            let _ = writeln!(s, "  {name}: {hash}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "Snapshot created: 2025-11-12 09:41:07 UTC\nROCm version: 6.4\n\nChecksums:\n  sha1: 0123456789abcdef0123456789abcdef01234567\n  sha256: f020955817372efaabc97be6f3687a2480640074931c5cb0b1082701b9af479f\n\nCommit Hashes:\n  fbsource: 3a4e8509bb07aaaaaaaaaaaaaaaaaaaaaaaaaaaa\n  rcclx: 3a4e8509bb07aaaaaaaaaaaaaaaaaaaaaaaaaaaa\n";

    #[test]
    fn seed_file_parses_and_round_trips() {
        let m = Metadata::parse(Path::new("m.txt"), SEED).unwrap();
        assert_eq!(m.version, "6.4");
        assert_eq!(m.artifact, None);
        assert_eq!(m.artifact_name(), SEED_ARTIFACT_NAME);
        assert_eq!(m.commits.len(), 2);
        assert_eq!(m.render(), SEED);
    }

    #[test]
    fn extended_file_round_trips() {
        let mut m = Metadata::parse(Path::new("m.txt"), SEED).unwrap();
        m.artifact = Some(Artifact {
            name: "lib.a".into(),
            size: 42,
            store_key: m.store_key(),
        });
        m.headers.insert("rccl.h".into(), "ab".repeat(32));
        let text = m.render();
        assert_eq!(Metadata::parse(Path::new("m.txt"), &text).unwrap(), m);
    }

    #[test]
    fn errors_name_line() {
        let bad = SEED.replace(
            "f020955817372efaabc97be6f3687a2480640074931c5cb0b1082701b9af479f",
            "xyz",
        );
        let e = Metadata::parse(Path::new("m.txt"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.txt:6:"), "{e}");
        let missing = SEED.replace(
            "  sha256: f020955817372efaabc97be6f3687a2480640074931c5cb0b1082701b9af479f\n",
            "",
        );
        let e = Metadata::parse(Path::new("m.txt"), &missing)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.txt:4:") && e.contains("missing checksum"),
            "{e}"
        );
        let short = SEED.replace(
            "f020955817372efaabc97be6f3687a2480640074931c5cb0b1082701b9af479f",
            "f0209558",
        );
        assert!(Metadata::parse(Path::new("m.txt"), &short).is_err());
        let ver = SEED.replace("ROCm version: 6.4", "ROCm version: six");
        let e = Metadata::parse(Path::new("m.txt"), &ver)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.txt:2:"), "{e}");
    }

    #[test]
    fn versions() {
        assert!(validate_version("6.4").is_ok());
        assert!(validate_version("6.4.2").is_ok());
        assert!(validate_version("6").is_err());
        assert!(validate_version("6.x").is_err());
        assert!(validate_version("../6.4").is_err());
    }
}
