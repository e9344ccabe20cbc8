//! Error type of the crate: every PE/COFF variant names the byte offset it is about.
//!
//! Only what is PE/COFF's own lives here (its "malformed"/"unsupported"
//! wording, the not-an-image case); faults with the same meaning on both
//! sides of the seam (wrapper, bundle, truncation, I/O) are
//! `crate::elf::Error` values carried by [`Error::Elf`].

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the ELF side of the seam, and the faults both sides share: a
    /// `__CudaFatBinaryWrapper` that cannot be followed
    /// (`crate::elf::Error::Wrapper`), an invalid bundle in the bundle
    /// section (`crate::elf::Error::Bundle`). One type, one message for
    /// each, whatever the host format.
    #[error(transparent)]
    Elf(#[from] crate::elf::Error),
    /// Not an ELF file, archive, PE image or COFF object.
    #[error("not an ELF file, ar archive, PE image or COFF object ({0})")]
    NotAnImage(&'static str),
    /// Structurally invalid PE/COFF input.
    #[error("malformed PE/COFF at offset {offset:#x}: {what}")]
    Malformed { offset: u64, what: String },
    /// Valid PE/COFF this crate does not handle (or refuses to rewrite).
    #[error("unsupported PE/COFF at offset {offset:#x}: {what}")]
    Unsupported { offset: u64, what: String },
    /// The rewrite cannot place what it must place (never "retry with
    /// smaller bundles": that is [`Error::DoesNotFit`]).
    #[error("layout at offset {offset:#x}: {what}")]
    Layout { offset: u64, what: String },
    /// Reassembly: the bundles given do not fit the bundle section the
    /// split left (see [`crate::Fit`]). Same message form as `Layout`.
    #[error("layout at offset {offset:#x}: {what}")]
    DoesNotFit { offset: u64, what: String },
}

impl Error {
    /// The byte offset the error is about.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Elf(e) => e.offset(),
            Error::NotAnImage(_) => Some(0),
            Error::Malformed { offset, .. }
            | Error::Unsupported { offset, .. }
            | Error::Layout { offset, .. }
            | Error::DoesNotFit { offset, .. } => Some(*offset),
        }
    }

    /// Whether the file is valid but of a flavour this crate does not read
    /// (an ELF file with an odd `e_type` or `PN_XNUM`, a PE/COFF feature it
    /// does not handle): a caller may copy such a file as it is when a
    /// byte scan finds no device code in it.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            Error::Unsupported { .. } | Error::Elf(crate::elf::Error::Unsupported { .. })
        )
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

    /// Wrapper `index` at `offset` cannot be followed (shared with ELF).
    pub(crate) fn wrapper(index: usize, offset: u64, what: impl Into<String>) -> Self {
        Error::Elf(crate::elf::Error::Wrapper {
            index,
            offset,
            what: what.into(),
        })
    }

    /// The bundle at file `offset` is invalid (shared with ELF).
    pub(crate) fn bundle(offset: u64, source: rocpack_bundle::Error) -> Self {
        Error::Elf(crate::elf::Error::Bundle { offset, source })
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
