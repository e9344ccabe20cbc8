//! Error type shared by every parser and writer of this crate.
//!
//! Every error carries the file it is about (when known), the byte offset the
//! problem was found at (when it is about file content) and a [`ErrorKind`]
//! that says what was expected. The `Display` form is one line:
//! `lib_gfx1100.kpack: byte offset 570 (0x23a): toc["lib/x.so#0"]["gfx1100"].original_size: missing`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error with its location (boxed: one pointer wide, cheap to return).
#[derive(Debug)]
pub struct Error {
    inner: Box<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: Option<PathBuf>,
    offset: Option<u64>,
    kind: ErrorKind,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or writing a file failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The input ends before a structure that must be there.
    #[error("truncated: expected {what} ({needed} bytes), only {available} bytes left")]
    Truncated {
        /// The structure that was expected.
        what: &'static str,
        /// How many bytes it needs.
        needed: u64,
        /// How many bytes are left in the input.
        available: u64,
    },
    /// The file does not start with `KPAK`.
    #[error("bad magic {found:02x?}, expected \"KPAK\" (4b 50 41 4b)")]
    BadMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// The header version is not 1.
    #[error("unsupported KPAK version {0}, expected 1")]
    UnsupportedVersion(u32),
    /// A MessagePack value could not be decoded or has the wrong type.
    #[error("{field}: expected {expected}, found {found}")]
    Type {
        /// Dotted path of the field (`toc["k"]["gfx1100"].ordinal`).
        field: String,
        /// What the format requires.
        expected: &'static str,
        /// What was there.
        found: String,
    },
    /// A required field is absent.
    #[error("{field}: missing")]
    Missing {
        /// Dotted path of the field.
        field: String,
    },
    /// A field that the format does not define (or that is repeated).
    #[error("{field}: unexpected field")]
    Unexpected {
        /// Dotted path of the field.
        field: String,
    },
    /// `compression_scheme` names a scheme this crate does not know.
    #[error("compression_scheme: unknown scheme {0:?}, expected \"none\" or \"zstd-per-kernel\"")]
    UnknownScheme(String),
    /// A range in the file lies outside the region it must be in.
    #[error("{field}: range [{start}, {start}+{len}) is outside [{lo}, {hi})")]
    OutOfBounds {
        /// Dotted path of the field that gave the range.
        field: String,
        /// Start of the range.
        start: u64,
        /// Length of the range.
        len: u64,
        /// Lower bound of the allowed region.
        lo: u64,
        /// Upper bound (exclusive) of the allowed region.
        hi: u64,
    },
    /// Two values that must agree do not.
    #[error("{field}: expected {expected}, found {found}")]
    Mismatch {
        /// Dotted path of the field.
        field: String,
        /// Value required by another field.
        expected: u64,
        /// Value found.
        found: u64,
    },
    /// A value is invalid for another reason.
    #[error("{field}: {message}")]
    Invalid {
        /// Dotted path of the field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// Bytes follow the end of a structure that must end the input.
    #[error("{count} trailing bytes after {what}")]
    TrailingData {
        /// The structure that should have ended the input.
        what: &'static str,
        /// Number of extra bytes.
        count: u64,
    },
    /// The archive has no entry for this binary key and target.
    #[error("no kernel for key {key:?} and target {target:?}")]
    NotFound {
        /// The TOC binary key.
        key: String,
        /// The architecture key.
        target: String,
    },
    /// zstd could not decode a frame.
    #[error("zstd frame: {0}")]
    Zstd(String),
    /// The writer was given the same (binary key, arch) twice.
    #[error("kernel {key:?} for {target:?} added twice")]
    Duplicate {
        /// The TOC binary key.
        key: String,
        /// The architecture key.
        target: String,
    },
    /// The writer was asked for something the format cannot store.
    #[error("cannot write: {0}")]
    Limit(String),
}

impl Error {
    /// A new error without location.
    pub fn new(kind: ErrorKind) -> Self {
        Error {
            inner: Box::new(Inner {
                path: None,
                offset: None,
                kind,
            }),
        }
    }

    /// A new error at a byte offset.
    pub fn at(offset: u64, kind: ErrorKind) -> Self {
        Error {
            inner: Box::new(Inner {
                path: None,
                offset: Some(offset),
                kind,
            }),
        }
    }

    /// Attach the file this error is about (kept if already set).
    pub fn with_path(mut self, path: impl AsRef<Path>) -> Self {
        if self.inner.path.is_none() {
            self.inner.path = Some(path.as_ref().to_path_buf());
        }
        self
    }

    /// Shift the byte offset by `base` (for parsers run on a sub-slice).
    pub fn shifted(mut self, base: u64) -> Self {
        if let Some(o) = self.inner.offset.as_mut() {
            *o = o.saturating_add(base);
        }
        self
    }

    /// The file, if known.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Byte offset in the file (or in the buffer given to a `from_bytes`/`decode`).
    pub fn offset(&self) -> Option<u64> {
        self.inner.offset
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.kind
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::new(ErrorKind::Io(e))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.inner.path {
            write!(f, "{}: ", p.display())?;
        }
        if let Some(o) = self.inner.offset {
            write!(f, "byte offset {o} (0x{o:x}): ")?;
        }
        write!(f, "{}", self.inner.kind)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.inner.kind {
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}
