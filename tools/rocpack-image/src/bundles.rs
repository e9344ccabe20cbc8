//! The bundles given to a reassembly ([`Bundles`]), ELF and PE alike: in
//! memory, ranges of a spill file, sizes only (planning), or places the
//! caller fills itself.

use crate::elf::rewrite::NO_AUX;
use crate::elf::{Error, Result};
use crate::out::Out;

/// The bundles given to a reassembly: element *i* is the bundle for
/// `co_index` *i*.
#[derive(Clone, Copy)]
pub enum Bundles<'a> {
    /// In memory.
    Owned(&'a [Vec<u8>]),
    /// `(offset, len)` ranges of a source (a spill file): the bundles are
    /// copied from it range by range, never held in memory (but for
    /// relocatable objects and split-in-place binaries, whose rebuilt
    /// `.hip_fatbin` must fit the few bytes the split left).
    In {
        src: &'a dyn rocpack_bundle::ReadAt,
        ranges: &'a [(u64, u64)],
    },
    /// Sizes only, for planning ([`reassembly_fits`]): written as zeros.
    Sizes(&'a [u64]),
    /// `(offset, len)` ranges of bundles the caller writes into the output
    /// itself ([`reassemble_placed`]); never read.
    Later(&'a [(u64, u64)]),
}

impl Bundles<'_> {
    /// How many bundles.
    pub fn count(&self) -> usize {
        match self {
            Bundles::Owned(b) => b.len(),
            Bundles::In { ranges, .. } | Bundles::Later(ranges) => ranges.len(),
            Bundles::Sizes(l) => l.len(),
        }
    }

    /// Their sizes.
    pub fn lens(&self) -> Vec<u64> {
        match self {
            Bundles::Owned(b) => b.iter().map(|b| b.len() as u64).collect(),
            Bundles::In { ranges, .. } | Bundles::Later(ranges) => {
                ranges.iter().map(|r| r.1).collect()
            }
            Bundles::Sizes(l) => l.to_vec(),
        }
    }

    /// The source [`Out::write_to`] reads them from.
    pub fn aux(&self) -> &dyn rocpack_bundle::ReadAt {
        match self {
            Bundles::Owned(_) | Bundles::Sizes(_) | Bundles::Later(_) => &NO_AUX,
            Bundles::In { src, .. } => *src,
        }
    }

    /// Append bundle `i` to `out`.
    pub fn push(&self, i: usize, out: &mut Out) {
        match self {
            Bundles::Owned(b) => out.extend_from_slice(&b[i]),
            Bundles::In { ranges, .. } | Bundles::Later(ranges) => {
                out.push_aux(ranges[i].0, ranges[i].1)
            }
            Bundles::Sizes(l) => out.resize(out.len().saturating_add(l[i])),
        }
    }

    /// Every bundle in memory (only where the caller bounded their size).
    pub(crate) fn read_all(&self) -> Result<Vec<Vec<u8>>> {
        match self {
            Bundles::Owned(b) => Ok(b.to_vec()),
            Bundles::In { src, ranges } => ranges
                .iter()
                .map(|&(off, len)| {
                    let mut o = Out::default();
                    o.push_aux(off, len);
                    o.to_vec(&NO_AUX, *src)
                })
                .collect(),
            Bundles::Sizes(l) => Ok(l
                .iter()
                .map(|&n| vec![0; usize::try_from(n).unwrap_or(0)])
                .collect()),
            Bundles::Later(_) => Err(Error::layout(
                0,
                "internal: bundles placed by the caller are not readable",
            )),
        }
    }
}
