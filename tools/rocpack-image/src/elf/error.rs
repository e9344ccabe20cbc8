//! Error type of the crate: every variant names the byte offset it is about.

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong, with the byte offset in the input it is about.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input ends before a structure it declares.
    #[error("truncated input: {what} at offset {offset:#x} needs {needed} bytes, input has {len}")]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        len: u64,
    },
    /// Bytes inside the input that were not loaded (a file analysed from
    /// the parts its loader read: the loader skipped what the analysis
    /// reads).
    #[error("{what} at offset {offset:#x} ({needed} bytes) was not loaded from the file")]
    NotLoaded {
        what: &'static str,
        offset: u64,
        needed: u64,
    },
    /// Not an ELF file / not an archive.
    #[error("not an ELF file or ar archive: bad magic at offset 0")]
    NotElf,
    /// Structurally invalid input.
    #[error("malformed ELF at offset {offset:#x}: {what}")]
    Malformed { offset: u64, what: String },
    /// Valid ELF this crate does not handle.
    #[error("unsupported ELF at offset {offset:#x}: {what}")]
    Unsupported { offset: u64, what: String },
    /// A `__CudaFatBinaryWrapper` that cannot be followed.
    #[error("wrapper {index} at offset {offset:#x}: {what}")]
    Wrapper {
        index: usize,
        offset: u64,
        what: String,
    },
    /// A bundle inside `.hip_fatbin` is invalid.
    #[error("bundle at file offset {offset:#x}: {source}")]
    Bundle {
        offset: u64,
        #[source]
        source: rocpack_bundle::Error,
    },
    /// The rewrite cannot place what it must place (never "retry with
    /// smaller bundles": that is [`Error::DoesNotFit`]).
    #[error("layout at offset {offset:#x}: {what}")]
    Layout { offset: u64, what: String },
    /// Reassembly: the bundles given do not fit the room the split left
    /// for them (smaller, better compressed bundles may; see
    /// [`crate::elf::reassembly_fits`]). Same message form as `Layout`.
    #[error("layout at offset {offset:#x}: {what}")]
    DoesNotFit { offset: u64, what: String },
    /// Invalid `ar` archive structure.
    #[error("malformed archive at offset {offset:#x}: {what}")]
    Archive { offset: u64, what: String },
    /// Reading the input or writing the output failed.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// An error inside an archive member (offsets are member-relative).
    #[error("archive member `{name}` at offset {offset:#x}: {source}")]
    Member {
        name: String,
        offset: u64,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// The byte offset the error is about (for members: of the member).
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Truncated { offset, .. }
            | Error::NotLoaded { offset, .. }
            | Error::Malformed { offset, .. }
            | Error::Unsupported { offset, .. }
            | Error::Wrapper { offset, .. }
            | Error::Bundle { offset, .. }
            | Error::Layout { offset, .. }
            | Error::DoesNotFit { offset, .. }
            | Error::Archive { offset, .. }
            | Error::Member { offset, .. } => Some(*offset),
            Error::NotElf => Some(0),
            Error::Io { .. } => None,
        }
    }

    pub(crate) fn malformed(offset: u64, what: impl Into<String>) -> Self {
        Error::Malformed {
            offset,
            what: what.into(),
        }
    }

    pub(crate) fn unsupported(offset: u64, what: impl Into<String>) -> Self {
        Error::Unsupported {
            offset,
            what: what.into(),
        }
    }

    pub(crate) fn does_not_fit(offset: u64, what: impl Into<String>) -> Self {
        Error::DoesNotFit {
            offset,
            what: what.into(),
        }
    }

    pub(crate) fn layout(offset: u64, what: impl Into<String>) -> Self {
        Error::Layout {
            offset,
            what: what.into(),
        }
    }
}
