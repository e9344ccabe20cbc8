//! Error type shared by every parser and writer of this crate.
//!
//! Byte offsets are relative to the buffer handed to the function that
//! failed (a section, a bundle, or a decompressed CCOB payload, as the message
//! says); callers that know the file offset of that buffer add it when they
//! report the error.

/// Everything that can go wrong while reading or writing bundles.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input ends before a structure it announces.
    #[error("truncated input at byte offset {offset}: expected {expected} ({needed} bytes), only {available} bytes left")]
    Truncated {
        offset: u64,
        expected: &'static str,
        needed: u64,
        available: u64,
    },
    /// A field holds a value the format does not allow.
    #[error("malformed bundle at byte offset {offset}: {what}")]
    Malformed { offset: u64, what: String },
    /// Neither bundle magic where one was required.
    #[error(
        "byte offset {offset}: expected `__CLANG_OFFLOAD_BUNDLE__` or `CCOB` magic, found {found}"
    )]
    BadMagic { offset: u64, found: String },
    /// A CCOB header names a version or method this crate does not know.
    #[error("CCOB at byte offset {offset}: unsupported {what}")]
    Unsupported { offset: u64, what: String },
    /// The compressed payload of a CCOB does not decode.
    #[error("CCOB at byte offset {offset}: decompression failed: {reason}")]
    Decompress { offset: u64, reason: String },
    /// The stored truncated MD5 does not match the decompressed payload.
    #[error("CCOB at byte offset {offset}: hash mismatch: header stores {stored:016x}, payload hashes to {computed:016x}")]
    HashMismatch {
        offset: u64,
        stored: u64,
        computed: u64,
    },
    /// A bundle entry ID or device name that is not a valid target ID.
    #[error("invalid target ID {id:?}: {reason}")]
    TargetId { id: String, reason: String },
    /// A writer was asked for something the format cannot represent.
    #[error("cannot write bundle: {0}")]
    Write(String),
}

impl Error {
    /// Byte offset the error refers to, when it has one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Truncated { offset, .. }
            | Error::Malformed { offset, .. }
            | Error::BadMagic { offset, .. }
            | Error::Unsupported { offset, .. }
            | Error::Decompress { offset, .. }
            | Error::HashMismatch { offset, .. } => Some(*offset),
            Error::TargetId { .. } | Error::Write(_) => None,
        }
    }

    /// The same error with its offset moved by `base` (used when a parse of
    /// a sub-slice is reported relative to the enclosing buffer).
    pub fn shifted(self, base: u64) -> Self {
        let add = |o: u64| o.saturating_add(base);
        match self {
            Error::Truncated {
                offset,
                expected,
                needed,
                available,
            } => Error::Truncated {
                offset: add(offset),
                expected,
                needed,
                available,
            },
            Error::Malformed { offset, what } => Error::Malformed {
                offset: add(offset),
                what,
            },
            Error::BadMagic { offset, found } => Error::BadMagic {
                offset: add(offset),
                found,
            },
            Error::Unsupported { offset, what } => Error::Unsupported {
                offset: add(offset),
                what,
            },
            Error::Decompress { offset, reason } => Error::Decompress {
                offset: add(offset),
                reason,
            },
            Error::HashMismatch {
                offset,
                stored,
                computed,
            } => Error::HashMismatch {
                offset: add(offset),
                stored,
                computed,
            },
            e @ (Error::TargetId { .. } | Error::Write(_)) => e,
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Little-endian readers that turn short input into [`Error::Truncated`].
pub(crate) fn read_u16(b: &[u8], at: usize, what: &'static str) -> Result<u16> {
    let s = slice(b, at, 2, what)?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}

pub(crate) fn read_u32(b: &[u8], at: usize, what: &'static str) -> Result<u32> {
    let s = slice(b, at, 4, what)?;
    let mut a = [0u8; 4];
    a.copy_from_slice(s);
    Ok(u32::from_le_bytes(a))
}

pub(crate) fn read_u64(b: &[u8], at: usize, what: &'static str) -> Result<u64> {
    let s = slice(b, at, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

pub(crate) fn slice<'a>(
    b: &'a [u8],
    at: usize,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8]> {
    at.checked_add(len)
        .and_then(|end| b.get(at..end))
        .ok_or(Error::Truncated {
            offset: at as u64,
            expected: what,
            needed: len as u64,
            available: b.len().saturating_sub(at) as u64,
        })
}

/// Printable rendering of a few bytes for error messages.
pub(crate) fn show_bytes(b: &[u8]) -> String {
    let head = &b[..b.len().min(8)];
    if head.is_empty() {
        return "end of input".to_string();
    }
    let hex: Vec<String> = head.iter().map(|x| format!("{x:02x}")).collect();
    format!("bytes {}", hex.join(" "))
}
