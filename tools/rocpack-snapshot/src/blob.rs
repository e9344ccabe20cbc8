//! What a blob store reports, shared by the local store ([`crate::store`])
//! and the remote ones (`remote`), so neither depends on the other's module.

use crate::hash::FileDigest;

/// Prefix of in-flight temporary files inside `cas/sha256/` of a local store.
pub const TEMP_PREFIX: &str = ".tmp-";

/// Result of [`crate::store::Store::put_file`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutOutcome {
    pub digest: FileDigest,
    /// `cas/sha256/<hex>`.
    pub key: String,
    /// The blob was already in the store (and verified to match).
    pub already_present: bool,
}

/// State of one blob, from [`crate::store::Store::check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobState {
    Missing,
    Ok {
        size: u64,
    },
    Corrupt {
        actual_sha256: String,
        size: u64,
    },
    /// Longer than the size the metadata records: announced by the store or
    /// seen while reading (reading stopped there; nothing was hashed).
    Oversize {
        expected: u64,
        seen: u64,
    },
    /// The blob exists but cannot be read (not a regular file, I/O error).
    Unreadable(String),
}

/// An entry of [`crate::store::Store::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// `cas/sha256/<hex>` or, for leftovers of interrupted uploads, the temp file's key.
    pub key: String,
    pub size: u64,
    pub is_temp: bool,
}
