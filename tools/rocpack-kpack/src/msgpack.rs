//! The small part of MessagePack this crate needs, with byte offsets.
//!
//! Decoding walks a byte slice with a position so that every error names the
//! byte offset of the offending value. Counts (array/map lengths) are checked
//! against the bytes left before anything is allocated: every element needs
//! at least one byte, so no input can make the decoder reserve more than a
//! small multiple of its own size.
//!
//! Encoding uses `rmp`'s writers, which choose the smallest representation
//! exactly like msgpack-python with `use_bin_type=True`: positive fixint /
//! `cc` / `cd` / `ce` / `cf` for unsigned integers, fixstr / `d9` / `da` /
//! `db` for strings, fixmap / `de` / `df`, fixarray / `dc` / `dd`.

use crate::error::{Error, ErrorKind, Result};

/// Maximum nesting accepted in free-form values (entry `metadata`).
pub(crate) const MAX_DEPTH: usize = 128;

/// Name of the MessagePack type that starts with byte `b`.
pub(crate) fn type_name(b: u8) -> &'static str {
    match b {
        0x00..=0x7f | 0xcc..=0xcf => "unsigned integer",
        0xe0..=0xff | 0xd0..=0xd3 => "signed integer",
        0x80..=0x8f | 0xde | 0xdf => "map",
        0x90..=0x9f | 0xdc | 0xdd => "array",
        0xa0..=0xbf | 0xd9..=0xdb => "str",
        0xc0 => "nil",
        0xc1 => "reserved byte 0xc1",
        0xc2 | 0xc3 => "bool",
        0xc4..=0xc6 => "bin",
        0xc7..=0xc9 | 0xd4..=0xd8 => "ext",
        0xca | 0xcb => "float",
    }
}

/// A read position in a byte buffer; offsets in errors are `base + pos`.
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    /// Start reading `data` at `pos`; reported offsets are `base + pos`.
    pub(crate) fn new(data: &'a [u8], pos: usize, base: u64) -> Self {
        Cursor { data, pos, base }
    }

    /// Offset (as reported in errors) of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base.saturating_add(self.pos as u64)
    }

    /// Position in the buffer.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    fn truncated(&self, what: &'static str, needed: usize) -> Error {
        Error::at(
            self.offset(),
            ErrorKind::Truncated {
                what,
                needed: needed as u64,
                available: self.remaining() as u64,
            },
        )
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.truncated(what, n))?;
        let s = self
            .data
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(what, n))?;
        self.pos = end;
        Ok(s)
    }

    fn peek(&self, what: &'static str) -> Result<u8> {
        self.data
            .get(self.pos)
            .copied()
            .ok_or_else(|| self.truncated(what, 1))
    }

    fn be(&mut self, n: usize, what: &'static str) -> Result<u64> {
        let b = self.take(n, what)?;
        Ok(b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    fn type_error(
        &self,
        at: u64,
        field: &dyn Fn() -> String,
        expected: &'static str,
        b: u8,
    ) -> Error {
        let _ = self;
        Error::at(
            at,
            ErrorKind::Type {
                field: field(),
                expected,
                found: format!("{} (marker byte 0x{b:02x})", type_name(b)),
            },
        )
    }

    /// Read a non-negative integer of any width.
    pub(crate) fn read_uint(&mut self, field: &dyn Fn() -> String) -> Result<u64> {
        let at = self.offset();
        let b = self.peek("MessagePack integer")?;
        let v = match b {
            0x00..=0x7f => {
                self.pos += 1;
                u64::from(b)
            }
            0xcc..=0xcf => {
                self.pos += 1;
                self.be(1 << (b - 0xcc), "MessagePack integer")?
            }
            0xd0..=0xd3 => {
                self.pos += 1;
                let n = 1usize << (b - 0xd0);
                let raw = self.be(n, "MessagePack integer")?;
                let bits = 8 * n as u32;
                let negative = raw >> (bits - 1) & 1 == 1;
                if negative {
                    return Err(Error::at(
                        at,
                        ErrorKind::Type {
                            field: field(),
                            expected: "non-negative integer",
                            found: "negative integer".into(),
                        },
                    ));
                }
                raw
            }
            _ => return Err(self.type_error(at, field, "non-negative integer", b)),
        };
        Ok(v)
    }

    /// Read a str (UTF-8 required) without copying.
    pub(crate) fn read_str(&mut self, field: &dyn Fn() -> String) -> Result<&'a str> {
        let at = self.offset();
        let b = self.peek("MessagePack str")?;
        let len = match b {
            0xa0..=0xbf => {
                self.pos += 1;
                u64::from(b & 0x1f)
            }
            0xd9..=0xdb => {
                self.pos += 1;
                self.be(1 << (b - 0xd9), "MessagePack str length")?
            }
            _ => return Err(self.type_error(at, field, "str", b)),
        };
        let len =
            usize::try_from(len).map_err(|_| self.truncated("MessagePack str body", usize::MAX))?;
        let bytes = self.take(len, "MessagePack str body")?;
        std::str::from_utf8(bytes).map_err(|e| {
            Error::at(
                at,
                ErrorKind::Type {
                    field: field(),
                    expected: "UTF-8 str",
                    found: format!("invalid UTF-8 ({e})"),
                },
            )
        })
    }

    fn read_len(
        &mut self,
        field: &dyn Fn() -> String,
        fix: std::ops::RangeInclusive<u8>,
        long: [u8; 2],
        expected: &'static str,
        per_item: usize,
    ) -> Result<usize> {
        let at = self.offset();
        let b = self.peek("MessagePack length")?;
        let len = if fix.contains(&b) {
            self.pos += 1;
            u64::from(b & 0x0f)
        } else if b == long[0] {
            self.pos += 1;
            self.be(2, "MessagePack length")?
        } else if b == long[1] {
            self.pos += 1;
            self.be(4, "MessagePack length")?
        } else {
            return Err(self.type_error(at, field, expected, b));
        };
        // Every element needs at least one byte: refuse counts the input cannot hold.
        let need = len.saturating_mul(per_item as u64);
        if need > self.remaining() as u64 {
            return Err(Error::at(
                at,
                ErrorKind::Invalid {
                    field: field(),
                    message: format!(
                        "{expected} claims {len} elements but only {} bytes follow",
                        self.remaining()
                    ),
                },
            ));
        }
        usize::try_from(len).map_err(|_| self.truncated("MessagePack elements", usize::MAX))
    }

    /// Read an array header; the count is checked against the bytes left.
    pub(crate) fn read_array_len(&mut self, field: &dyn Fn() -> String) -> Result<usize> {
        self.read_len(field, 0x90..=0x9f, [0xdc, 0xdd], "array", 1)
    }

    /// Read a map header; the count is checked against the bytes left.
    pub(crate) fn read_map_len(&mut self, field: &dyn Fn() -> String) -> Result<usize> {
        self.read_len(field, 0x80..=0x8f, [0xde, 0xdf], "map", 2)
    }

    /// Read any value (used for free-form `metadata`).
    pub(crate) fn read_value(&mut self, field: &dyn Fn() -> String) -> Result<rmpv::Value> {
        let at = self.offset();
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        let mut rd: &[u8] = rest;
        let v = rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH).map_err(|e| {
            Error::at(
                at,
                ErrorKind::Type {
                    field: field(),
                    expected: "MessagePack value",
                    found: format!("undecodable data ({e})"),
                },
            )
        })?;
        self.pos += rest.len() - rd.len();
        Ok(v)
    }
}

/// Writers that choose the smallest encoding (msgpack-python semantics).
pub(crate) mod enc {
    use crate::error::{Error, ErrorKind, Result};

    fn limit(what: &str, len: usize) -> Error {
        Error::new(ErrorKind::Limit(format!(
            "{what} of {len} elements/bytes exceeds the MessagePack 32-bit limit"
        )))
    }

    fn io<E: std::fmt::Display>(e: E) -> Error {
        Error::new(ErrorKind::Limit(format!(
            "MessagePack encoding failed: {e}"
        )))
    }

    fn len32(what: &str, len: usize) -> Result<u32> {
        u32::try_from(len).map_err(|_| limit(what, len))
    }

    /// Write a str.
    pub(crate) fn str(buf: &mut Vec<u8>, s: &str) -> Result<()> {
        len32("str", s.len())?;
        rmp::encode::write_str(buf, s).map_err(io)
    }

    /// Write an unsigned integer in its smallest form.
    pub(crate) fn uint(buf: &mut Vec<u8>, v: u64) -> Result<()> {
        rmp::encode::write_uint(buf, v).map(|_| ()).map_err(io)
    }

    /// Write a map header.
    pub(crate) fn map(buf: &mut Vec<u8>, len: usize) -> Result<()> {
        rmp::encode::write_map_len(buf, len32("map", len)?)
            .map(|_| ())
            .map_err(io)
    }

    /// Write an array header.
    pub(crate) fn array(buf: &mut Vec<u8>, len: usize) -> Result<()> {
        rmp::encode::write_array_len(buf, len32("array", len)?)
            .map(|_| ())
            .map_err(io)
    }

    /// Write any value.
    pub(crate) fn value(buf: &mut Vec<u8>, v: &rmpv::Value) -> Result<()> {
        rmpv::encode::write_value(buf, v).map_err(io)
    }
}

/// Render a string for field paths: `["lib/x.so#0"]`.
pub(crate) fn q(s: &str) -> String {
    format!("[{s:?}]")
}
