//! The exact shape of a bundle — container format, entry IDs, order and
//! offsets — so that a bundle whose code objects were moved elsewhere (split
//! into `.kpack` archives) can be rebuilt byte for byte: the same
//! uncompressed bytes (for a CCOB: the same decompressed payload), in the
//! same container format and version.
//!
//! [`BundleLayout::of`] records a layout only when [`BundleLayout::build`]
//! provably gives back the original bytes (header identical, every byte
//! outside the code objects zero); otherwise the bundle has no exact layout
//! and a rebuild falls back to clang's canonical form.

use crate::bundle::{Bundle, Format, BUNDLE_MAGIC};
use crate::error::{Error, Result};
use crate::stream::{BundleIndex, WalkSummary};

/// One entry of a [`BundleLayout`], in header order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutEntry {
    /// The entry ID, verbatim (`host-x86_64-unknown-linux-gnu-`,
    /// `hipv4-amdgcn-amd-amdhsa--gfx1100`, …).
    pub id: String,
    /// Offset of the code object in the uncompressed bundle.
    pub offset: u64,
    /// Size of the code object.
    pub size: u64,
}

/// Everything about a bundle except its code objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleLayout {
    /// Container format (uncompressed, or CCOB with version and method).
    pub format: Format,
    /// Size of the uncompressed bundle (for a CCOB: of its payload).
    pub size: u64,
    /// Entries in header order.
    pub entries: Vec<LayoutEntry>,
    /// A CCOB's stored hash (truncated MD5 of the payload), as the
    /// original's header says: a rebuild that gives back the original
    /// payload byte for byte writes it again instead of hashing the
    /// payload (a hash the original got wrong stays wrong, as it was).
    pub hash: Option<u64>,
    /// A CCOB's size as found (header included): what a rebuilt CCOB must
    /// not exceed to fit where the original was.
    pub packed: Option<u64>,
}

/// Bytes of the uncompressed header for these IDs.
fn header_len<'a>(ids: impl Iterator<Item = &'a str>) -> u64 {
    ids.fold(BUNDLE_MAGIC.len() as u64 + 8, |n, id| {
        n + 24 + id.len() as u64
    })
}

impl BundleLayout {
    /// The layout of `bundle`, whose uncompressed bytes are `bytes` (the
    /// input slice starting at the bundle for an uncompressed bundle, the
    /// decompressed payload for a CCOB). `None` when rebuilding from the
    /// layout would not reproduce those bytes exactly (non-zero padding,
    /// overlapping entries, a header that is not the canonical encoding).
    pub fn of(bundle: &Bundle<'_>, bytes: &[u8]) -> Option<BundleLayout> {
        let entries: Vec<LayoutEntry> = bundle
            .entries
            .iter()
            .map(|e| LayoutEntry {
                id: e.id.as_str().to_string(),
                offset: e.offset,
                size: e.size,
            })
            .collect();
        let hlen = header_len(entries.iter().map(|e| e.id.as_str()));
        let size = match bundle.format {
            Format::Uncompressed => entries
                .iter()
                .map(|e| e.offset.checked_add(e.size))
                .try_fold(hlen, |m, end| end.map(|end| m.max(end)))?,
            Format::Ccob { .. } => bytes.len() as u64,
        };
        let layout = BundleLayout {
            format: bundle.format,
            size,
            entries,
            hash: bundle.ccob.as_ref().map(|c| c.hash),
            packed: bundle.ccob.as_ref().map(|_| bundle.len),
        };
        layout.reproduces(bytes).then_some(layout)
    }

    /// The layout of an indexed bundle, given what a walk of it found
    /// ([`crate::walk_bundle`], [`crate::copy_payload`]): the same answer as
    /// [`of`](Self::of) without holding the uncompressed bytes.
    pub fn of_index(index: &BundleIndex, walk: &WalkSummary) -> Option<BundleLayout> {
        let entries: Vec<LayoutEntry> = index
            .entries
            .iter()
            .map(|e| LayoutEntry {
                id: e.id.as_str().to_string(),
                offset: e.offset,
                size: e.size,
            })
            .collect();
        let size = match index.format {
            Format::Uncompressed => index.end,
            Format::Ccob { .. } => index.payload_len,
        };
        let layout = BundleLayout {
            format: index.format,
            size,
            entries,
            hash: index.ccob.as_ref().map(|c| c.hash),
            packed: index.ccob.as_ref().map(|_| index.len),
        };
        if !walk.gaps_zero || layout.header() != index.header {
            return None;
        }
        // Code objects must not overlap the header, each other or the end.
        let mut ranges: Vec<(u64, u64)> = index
            .entries
            .iter()
            .filter(|e| e.size > 0)
            .map(|e| (e.offset, e.end()))
            .collect();
        ranges.sort_unstable();
        let mut pos = index.header.len() as u64;
        for (start, end) in ranges {
            if start < pos || end > size {
                return None;
            }
            pos = end;
        }
        Some(layout)
    }

    /// Whether [`build`](Self::build) with the code objects taken from
    /// `bytes` gives `bytes[..size]` back, checked without copying.
    fn reproduces(&self, bytes: &[u8]) -> bool {
        let Ok(size) = usize::try_from(self.size) else {
            return false;
        };
        let Some(bytes) = bytes.get(..size) else {
            return false;
        };
        let header = self.header();
        if bytes.get(..header.len()) != Some(header.as_slice()) {
            return false;
        }
        // Code object ranges, sorted; they must not overlap the header or
        // each other, and everything else must be zero.
        let mut ranges: Vec<(u64, u64)> = self
            .entries
            .iter()
            .filter(|e| e.size > 0)
            .map(|e| (e.offset, e.offset.saturating_add(e.size)))
            .collect();
        ranges.sort_unstable();
        let mut pos = header.len() as u64;
        for (start, end) in ranges {
            if start < pos || end > self.size {
                return false;
            }
            if bytes[pos as usize..start as usize].iter().any(|&b| b != 0) {
                return false;
            }
            pos = end;
        }
        bytes[pos as usize..].iter().all(|&b| b == 0)
    }

    /// The uncompressed header bytes (what [`build`](Self::build) puts
    /// first; a writer streaming the code objects after it needs them).
    pub fn header(&self) -> Vec<u8> {
        let hlen = header_len(self.entries.iter().map(|e| e.id.as_str()));
        let mut out = Vec::with_capacity(hlen as usize);
        out.extend_from_slice(BUNDLE_MAGIC);
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.size.to_le_bytes());
            out.extend_from_slice(&(e.id.len() as u64).to_le_bytes());
            out.extend_from_slice(e.id.as_bytes());
        }
        out
    }

    /// Rebuild the uncompressed bundle. `data[i]` is the code object of
    /// entry `i`; `None` is accepted only for empty entries (host entries).
    /// Compress the result with [`crate::write_ccob`] when `format` says so.
    pub fn build(&self, data: &[Option<&[u8]>]) -> Result<Vec<u8>> {
        let bad = |what: String| Error::Write(format!("bundle layout: {what}"));
        if data.len() != self.entries.len() {
            return Err(bad(format!(
                "{} code objects for {} entries",
                data.len(),
                self.entries.len()
            )));
        }
        let header = self.header();
        let size = usize::try_from(self.size).map_err(|_| bad("size".into()))?;
        if size < header.len() {
            return Err(bad(format!(
                "size {size} is smaller than the header ({} bytes)",
                header.len()
            )));
        }
        let mut out = vec![0u8; size];
        out[..header.len()].copy_from_slice(&header);
        for (e, d) in self.entries.iter().zip(data) {
            let d = match d {
                Some(d) => *d,
                None if e.size == 0 => &[][..],
                None => return Err(bad(format!("no code object for `{}`", e.id))),
            };
            if d.len() as u64 != e.size {
                return Err(bad(format!(
                    "`{}` has {} bytes, the layout says {}",
                    e.id,
                    d.len(),
                    e.size
                )));
            }
            let start = e.offset as usize;
            let end = start
                .checked_add(d.len())
                .filter(|&end| d.is_empty() || (end <= size && start >= header.len()))
                .ok_or_else(|| bad(format!("`{}` lies outside the bundle", e.id)))?;
            if !d.is_empty() {
                out[start..end].copy_from_slice(d);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_bundle, write_ccob, write_uncompressed, Method};

    fn sample() -> Vec<u8> {
        write_uncompressed(&[
            ("host-x86_64-unknown-linux-gnu-", &b""[..]),
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", &[1u8; 100][..]),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", &[2u8; 7][..]),
        ])
    }

    #[test]
    fn uncompressed_and_ccob_layouts_rebuild_the_same_bytes() {
        let raw = sample();
        for input in [
            raw.clone(),
            write_ccob(&raw, 3, Method::Zstd).unwrap(),
            write_ccob(&raw, 2, Method::Zlib).unwrap(),
        ] {
            let b = parse_bundle(&input).unwrap();
            let bytes = b.decompressed.as_deref().unwrap_or(&input);
            let layout = BundleLayout::of(&b, bytes).expect("exact layout");
            assert_eq!(layout.format, b.format);
            let data: Vec<Option<&[u8]>> = b.entries.iter().map(|e| Some(&*e.data)).collect();
            assert_eq!(layout.build(&data).unwrap(), raw);
            // Host entries need no data.
            let mut data = data;
            data[0] = None;
            assert_eq!(layout.build(&data).unwrap(), raw);
        }
    }

    #[test]
    fn non_zero_padding_has_no_exact_layout() {
        let mut raw = sample();
        let b = parse_bundle(&raw).unwrap();
        let first = b.entries[1].offset as usize;
        drop(b);
        raw[first - 1] = 0xaa;
        let b = parse_bundle(&raw).unwrap();
        assert!(BundleLayout::of(&b, &raw).is_none());
    }

    #[test]
    fn wrong_sizes_and_missing_code_are_errors() {
        let raw = sample();
        let b = parse_bundle(&raw).unwrap();
        let layout = BundleLayout::of(&b, &raw).unwrap();
        let err = layout
            .build(&[None, None, Some(&[2u8; 7][..])])
            .unwrap_err();
        assert!(err.to_string().contains("no code object"), "{err}");
        let err = layout
            .build(&[None, Some(&[1u8; 99][..]), Some(&[2u8; 7][..])])
            .unwrap_err();
        assert!(err.to_string().contains("99 bytes"), "{err}");
        assert!(layout.build(&[None]).is_err());
    }
}
