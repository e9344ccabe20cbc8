//! `artifact_manifest.txt`: the list of install prefixes ("stage roots") an
//! artifact directory holds, one relative path per line.
//!
//! Format (TheRock / rocm-kpack): UTF-8 text, one prefix per line, blank
//! lines ignored, `\n` line ends (a trailing `\r` is tolerated on read). The
//! writer emits every prefix followed by `\n` (an empty manifest is an empty
//! file), in the order the list holds them.
//!
//! Every prefix is validated: it must be a non-empty relative path made of
//! normal components — no absolute paths, no `..`, no `.`, no empty
//! components, no backslashes and no NUL — so that joining it to an artifact
//! directory can never leave that directory.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// File name of the manifest inside every artifact directory.
pub const MANIFEST_FILE: &str = "artifact_manifest.txt";

/// Upper bound on the size of a manifest we are willing to read (bytes).
pub const MAX_MANIFEST_SIZE: u64 = 16 * 1024 * 1024;

/// Why a prefix is not acceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PrefixProblem {
    /// The prefix is empty.
    Empty,
    /// The prefix starts with `/`.
    Absolute,
    /// The prefix has a `..` component.
    ParentDir,
    /// The prefix has a `.` or empty component (e.g. `a//b`, `./a`).
    NonNormalComponent,
    /// The prefix contains `\` or NUL.
    BadCharacter,
}

impl fmt::Display for PrefixProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PrefixProblem::Empty => "empty prefix",
            PrefixProblem::Absolute => {
                "absolute prefix (must be relative to the artifact directory)"
            }
            PrefixProblem::ParentDir => {
                "prefix has a `..` component (would leave the artifact directory)"
            }
            PrefixProblem::NonNormalComponent => "prefix has a `.` or empty path component",
            PrefixProblem::BadCharacter => "prefix contains a backslash or NUL character",
        })
    }
}

/// Errors reading, parsing or writing a manifest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// The manifest file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The manifest file.
        path: PathBuf,
        /// The underlying error (part of the message).
        error: io::Error,
    },
    /// The manifest file is larger than [`MAX_MANIFEST_SIZE`].
    #[error("{path}: manifest is {size} bytes, larger than the {MAX_MANIFEST_SIZE}-byte limit")]
    TooLarge {
        /// The manifest file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },
    /// The manifest is not UTF-8.
    #[error("{path}: byte offset {offset}: expected UTF-8 text")]
    NotUtf8 {
        /// The manifest file.
        path: PathBuf,
        /// Offset of the first invalid byte.
        offset: usize,
    },
    /// A line holds an unacceptable prefix.
    #[error("{path}: line {line} (byte offset {offset}): `{prefix}`: {problem}")]
    BadPrefix {
        /// The manifest file (or `<memory>`).
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// Byte offset of the start of the line.
        offset: usize,
        /// The offending text (trimmed).
        prefix: String,
        /// What is wrong with it.
        problem: PrefixProblem,
    },
}

/// Checks one prefix; returns the problem if it is not a safe relative path.
pub fn check_prefix(prefix: &str) -> Result<(), PrefixProblem> {
    if prefix.is_empty() {
        return Err(PrefixProblem::Empty);
    }
    if prefix.contains('\\') || prefix.contains('\0') {
        return Err(PrefixProblem::BadCharacter);
    }
    if prefix.starts_with('/') {
        return Err(PrefixProblem::Absolute);
    }
    let mut saw_parent = false;
    let mut saw_non_normal = false;
    for comp in prefix.split('/') {
        match comp {
            ".." => saw_parent = true,
            "" | "." => saw_non_normal = true,
            _ => {}
        }
    }
    if saw_parent {
        return Err(PrefixProblem::ParentDir);
    }
    if saw_non_normal {
        return Err(PrefixProblem::NonNormalComponent);
    }
    Ok(())
}

/// The prefixes of one artifact directory, in manifest order, without
/// duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArtifactManifest {
    prefixes: Vec<String>,
}

impl ArtifactManifest {
    /// An empty manifest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses manifest text. `origin` only names the file in errors.
    ///
    /// A single trailing `/` on a prefix is dropped (`a/b/` == `a/b`);
    /// a prefix listed twice is kept once (first position).
    pub fn parse(text: &str, origin: &Path) -> Result<Self, ManifestError> {
        let mut manifest = Self::new();
        let mut offset = 0usize;
        for (idx, raw_line) in text.split_inclusive('\n').enumerate() {
            let line_start = offset;
            offset = offset.saturating_add(raw_line.len());
            let line = raw_line.trim();
            if line.is_empty() {
                continue;
            }
            let prefix = line.strip_suffix('/').unwrap_or(line);
            if let Err(problem) = check_prefix(prefix) {
                return Err(ManifestError::BadPrefix {
                    path: origin.to_path_buf(),
                    line: idx + 1,
                    offset: line_start,
                    prefix: line.to_string(),
                    problem,
                });
            }
            manifest.push_unchecked(prefix);
        }
        Ok(manifest)
    }

    /// Parses raw bytes (must be UTF-8).
    pub fn parse_bytes(bytes: &[u8], origin: &Path) -> Result<Self, ManifestError> {
        let text = std::str::from_utf8(bytes).map_err(|e| ManifestError::NotUtf8 {
            path: origin.to_path_buf(),
            offset: e.valid_up_to(),
        })?;
        Self::parse(text, origin)
    }

    /// Reads and parses a manifest file.
    pub fn read_file(path: &Path) -> Result<Self, ManifestError> {
        let io_err = |error| ManifestError::Io {
            path: path.to_path_buf(),
            error,
        };
        let bytes = crate::fsutil::read_bounded(path, MAX_MANIFEST_SIZE).map_err(io_err)?;
        Self::parse_bytes(&bytes, path)
    }

    /// Reads `<dir>/artifact_manifest.txt`.
    pub fn read_dir(dir: &Path) -> Result<Self, ManifestError> {
        Self::read_file(&dir.join(MANIFEST_FILE))
    }

    /// Builds a manifest from prefixes, validating each.
    pub fn from_prefixes<I, S>(prefixes: I) -> Result<Self, ManifestError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut m = Self::new();
        for p in prefixes {
            m.push(p.as_ref())?;
        }
        Ok(m)
    }

    /// Appends a prefix (validated); a prefix already present is not added again.
    pub fn push(&mut self, prefix: &str) -> Result<(), ManifestError> {
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        check_prefix(prefix).map_err(|problem| ManifestError::BadPrefix {
            path: PathBuf::from("<memory>"),
            line: self.prefixes.len() + 1,
            offset: 0,
            prefix: prefix.to_string(),
            problem,
        })?;
        self.push_unchecked(prefix);
        Ok(())
    }

    fn push_unchecked(&mut self, prefix: &str) {
        if !self.prefixes.iter().any(|p| p == prefix) {
            self.prefixes.push(prefix.to_string());
        }
    }

    /// The prefixes, in manifest order.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// Whether the manifest lists `prefix`.
    pub fn contains(&self, prefix: &str) -> bool {
        self.prefixes.iter().any(|p| p == prefix)
    }

    /// Number of prefixes.
    pub fn len(&self) -> usize {
        self.prefixes.len()
    }

    /// Whether the manifest is empty.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// Sorts the prefixes (byte order).
    pub fn sort(&mut self) {
        self.prefixes.sort();
    }

    /// The manifest text: each prefix followed by `\n`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for p in &self.prefixes {
            s.push_str(p);
            s.push('\n');
        }
        s
    }

    /// Writes `<dir>/artifact_manifest.txt` (the directory must exist).
    pub fn write_dir(&self, dir: &Path) -> Result<(), ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        std::fs::write(&path, self.to_text()).map_err(|error| ManifestError::Io { path, error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ArtifactManifest, ManifestError> {
        ArtifactManifest::parse(s, Path::new("m.txt"))
    }

    #[test]
    fn parses_lines_keeps_order_and_dedups() {
        let m = parse("b/stage\n\n  a/stage/ \r\nb/stage\n").unwrap();
        assert_eq!(m.prefixes(), ["b/stage", "a/stage"]);
        assert_eq!(m.to_text(), "b/stage\na/stage\n");
    }

    #[test]
    fn empty_manifest_round_trips() {
        let m = parse("\n\n").unwrap();
        assert!(m.is_empty());
        assert_eq!(m.to_text(), "");
    }

    #[test]
    fn rejects_unsafe_prefixes_with_line_and_offset() {
        for (text, problem, line, offset) in [
            ("ok\n../x\n", PrefixProblem::ParentDir, 2, 3),
            ("/abs/x\n", PrefixProblem::Absolute, 1, 0),
            ("a/../../b\n", PrefixProblem::ParentDir, 1, 0),
            ("a\n\nb//c\n", PrefixProblem::NonNormalComponent, 3, 3),
            ("./a\n", PrefixProblem::NonNormalComponent, 1, 0),
            ("a\\b\n", PrefixProblem::BadCharacter, 1, 0),
        ] {
            match parse(text) {
                Err(ManifestError::BadPrefix {
                    problem: p,
                    line: l,
                    offset: o,
                    ..
                }) => {
                    assert_eq!((p, l, o), (problem, line, offset), "{text:?}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn rejects_non_utf8() {
        let e = ArtifactManifest::parse_bytes(b"ab\xffc", Path::new("m")).unwrap_err();
        assert!(matches!(e, ManifestError::NotUtf8 { offset: 2, .. }), "{e}");
    }

    #[test]
    fn reads_fixture_manifest() {
        let text = "math-libs/BLAS/rocBLAS/stage\nmath-libs/BLAS/hipBLASLt/stage\n";
        let m = parse(text).unwrap();
        assert_eq!(m.to_text(), text);
        assert_eq!(m.to_text().len(), 60);
    }
}
