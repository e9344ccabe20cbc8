//! rocpack-wheel: split a fat Python wheel into a target-neutral host wheel
//! and one device wheel per GPU target (`kpack-reference.md` §12.5), and
//! check an installed tree.
//!
//! The split itself is `rocpack_artifacts::split` run on the wheel's files
//! that it may change (extracted into a private temporary directory; the
//! rest is copied from the input wheel compressed as it is): the same ELF host-only
//! rewrite, database handlers, `--gpu-targets` filter and `.kpack` writer as
//! `kpack split`. This crate adds the wheel side: reading and checking the
//! input and writing the outputs ([`zip`]), names ([`names`]), METADATA/WHEEL/RECORD ([`meta`]),
//! assembling host, device and family wheels ([`split`]), the device
//! selector sdist and GPU detection ([`selector`]) and the installed-tree
//! lookup check ([`installed`]).

use std::path::PathBuf;

pub mod installed;
pub mod meta;
pub mod names;
pub mod selector;
pub mod split;
pub mod zip;

/// The zip layer at its former path ([`zip`]).
pub use zip as zipio;
/// The central-directory reader at its former path ([`zip::central`]).
pub use zip::central;

pub use split::{split_wheel, OutputFormat, WheelSplitOptions, WheelSplitReport};

/// Why a wheel split or check failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WheelError {
    /// Bad input or arguments.
    #[error("{0}")]
    Usage(String),
    /// A file-system operation failed.
    #[error("{}: {what}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The OS error.
        error: std::io::Error,
    },
    /// The zip layer failed.
    #[error("{0}")]
    Zip(String),
    /// The split of the wheel's files failed.
    #[error(transparent)]
    Split(#[from] rocpack_artifacts::split::SplitError),
    /// A walk of a tree failed.
    #[error(transparent)]
    Walk(#[from] rocpack_artifacts::walk::WalkError),
    /// A manifest could not be written.
    #[error(transparent)]
    Manifest(#[from] rocpack_artifacts::manifest::ManifestError),
    /// A staging or file operation of the shared helpers failed.
    #[error(transparent)]
    Fs(#[from] rocpack_artifacts::fsutil::FsError),
}
