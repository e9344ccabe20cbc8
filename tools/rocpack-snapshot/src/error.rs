//! Error type shared by every module of the crate.

use std::path::{Path, PathBuf};

/// Everything that can go wrong. [`Error::exit_code`] maps it onto the CLI's
/// documented exit codes (design §3.2: 1 = a check failed, 2 = usage or input error).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed or invalid input: a file (and line when known) and what was expected.
    #[error("{}: {msg}", location(path, *line))]
    Input {
        path: PathBuf,
        line: Option<usize>,
        msg: String,
    },
    /// Bad command-line arguments or an impossible request (no file involved).
    #[error("{0}")]
    Usage(String),
    /// An I/O failure on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The blob store failed (network, permissions, missing object…).
    #[error("store {store}: {msg}")]
    Store { store: String, msg: String },
    /// Content did not match its digest (fetch, verify-after-upload, existing blob).
    #[error("{what}: digest mismatch: expected sha256 {expected}, actual {actual}")]
    Digest {
        what: String,
        expected: String,
        actual: String,
    },
    /// Content is longer than the size its metadata records (reading stopped there).
    #[error("{what}: size mismatch: metadata says {expected} bytes, the store has at least {seen} (not read further)")]
    Size {
        what: String,
        expected: u64,
        seen: u64,
    },
    /// The snapshots root is locked by another process for longer than allowed.
    #[error("{}: timed out after {secs} s waiting for the lock held by another snapctl", path.display())]
    LockTimeout { path: PathBuf, secs: u64 },
    /// The generated Starlark did not evaluate to the expected dicts.
    #[error("internal error: generated {file} does not round-trip through starlark: {msg}")]
    Starlark { file: String, msg: String },
}

fn location(path: &Path, line: Option<usize>) -> String {
    match line {
        Some(l) => format!("{}:{l}", path.display()),
        None => path.display().to_string(),
    }
}

impl Error {
    /// Process exit code for this error (design §3.2).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Digest { .. } | Error::Size { .. } => 1,
            _ => 2,
        }
    }

    pub(crate) fn input(
        path: impl Into<PathBuf>,
        line: Option<usize>,
        msg: impl Into<String>,
    ) -> Self {
        Error::Input {
            path: path.into(),
            line,
            msg: msg.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `.map_err(io_at(path))` helper.
pub(crate) fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}
