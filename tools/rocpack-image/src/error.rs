//! The one error type of the crate, for ELF files, `ar` archives and
//! PE/COFF images alike (`crate::elf::Error` is this type): every variant
//! but [`Error::Io`] names the byte offset it is about.
//!
//! Faults with the same meaning on both sides of the seam (truncation,
//! wrapper, bundle, layout, "does not fit", I/O) are one variant each,
//! with one message whatever the host format; only the wording that names
//! the format ("malformed ELF" / "malformed PE/COFF", the not-an-image
//! cases) has a variant per format.

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
    /// Not an ELF file / not an archive (the ELF analysis and rewrite).
    #[error("not an ELF file or ar archive: bad magic at offset 0")]
    NotElf,
    /// Not an ELF file, archive, PE image or COFF object (the dispatch;
    /// what [`crate::detect`] says it is).
    #[error("not an ELF file, ar archive, PE image or COFF object ({0})")]
    NotAnImage(&'static str),
    /// Structurally invalid ELF input.
    #[error("malformed ELF at offset {offset:#x}: {what}")]
    Malformed { offset: u64, what: String },
    /// Valid ELF this crate does not handle.
    #[error("unsupported ELF at offset {offset:#x}: {what}")]
    Unsupported { offset: u64, what: String },
    /// Structurally invalid PE/COFF input.
    #[error("malformed PE/COFF at offset {offset:#x}: {what}")]
    PeMalformed { offset: u64, what: String },
    /// Valid PE/COFF this crate does not handle (or refuses to rewrite).
    #[error("unsupported PE/COFF at offset {offset:#x}: {what}")]
    PeUnsupported { offset: u64, what: String },
    /// A `__CudaFatBinaryWrapper` that cannot be followed.
    #[error("wrapper {index} at offset {offset:#x}: {what}")]
    Wrapper {
        index: usize,
        offset: u64,
        what: String,
    },
    /// A bundle inside the bundle section is invalid.
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
    /// [`crate::Fit`]). Same message form as `Layout`.
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
            | Error::PeMalformed { offset, .. }
            | Error::PeUnsupported { offset, .. }
            | Error::Wrapper { offset, .. }
            | Error::Bundle { offset, .. }
            | Error::Layout { offset, .. }
            | Error::DoesNotFit { offset, .. }
            | Error::Archive { offset, .. }
            | Error::Member { offset, .. } => Some(*offset),
            Error::NotElf | Error::NotAnImage(_) => Some(0),
            Error::Io { .. } => None,
        }
    }

    /// Whether the file is valid but of a flavour this crate does not read
    /// (an ELF file with an odd `e_type` or `PN_XNUM`, a PE/COFF feature it
    /// does not handle): a caller may copy such a file as it is when a
    /// byte scan ([`crate::carries_device_code`]) finds no device code in it.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Error::Unsupported { .. } | Error::PeUnsupported { .. }
        )
    }

    /// `self`, an error about archive member `name` (header at `offset`).
    pub fn in_member(self, name: &str, offset: u64) -> Error {
        Error::Member {
            name: name.to_string(),
            offset,
            source: Box::new(self),
        }
    }

    /// Structurally invalid ELF input.
    pub(crate) fn malformed(offset: u64, what: impl Into<String>) -> Self {
        Error::Malformed {
            offset,
            what: what.into(),
        }
    }

    /// Valid ELF this crate does not handle.
    pub(crate) fn unsupported(offset: u64, what: impl Into<String>) -> Self {
        Error::Unsupported {
            offset,
            what: what.into(),
        }
    }

    /// Structurally invalid PE/COFF input.
    pub(crate) fn pe_malformed(offset: u64, what: impl Into<String>) -> Self {
        Error::PeMalformed {
            offset,
            what: what.into(),
        }
    }

    /// Valid PE/COFF this crate does not handle.
    pub(crate) fn pe_unsupported(offset: u64, what: impl Into<String>) -> Self {
        Error::PeUnsupported {
            offset,
            what: what.into(),
        }
    }

    /// Wrapper `index` at `offset` cannot be followed.
    pub(crate) fn wrapper(index: usize, offset: u64, what: impl Into<String>) -> Self {
        Error::Wrapper {
            index,
            offset,
            what: what.into(),
        }
    }

    /// The bundle at file `offset` is invalid.
    pub(crate) fn bundle(offset: u64, source: rocpack_bundle::Error) -> Self {
        Error::Bundle { offset, source }
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
