//! The model both host formats share (ELF in [`crate::elf`], PE32+/COFF in
//! [`crate::pe`]): what a file holds ([`State`]), where its bundles and
//! marker are ([`BundleInfo`], [`MarkerInfo`], [`SectionRange`]), the
//! 24-byte wrapper every HIP host format stores ([`RawWrapper`],
//! [`wrapper_table`], analysed: [`Wrapper`]) and whether bundles fit a reassembly ([`Fit`]).

use crate::elf::headers::{u32_at, u64_at};
use crate::elf::{Error, Result};

/// Wrapper magic of a fat binary ("HIPF", file bytes `46 50 49 48`).
pub const HIPF_MAGIC: u32 = 0x4849_5046;
/// Wrapper magic of a split binary ("HIPK", file bytes `48 49 50 4B`).
pub const HIPK_MAGIC: u32 = 0x4B50_4948;
/// Size of one `__CudaFatBinaryWrapper`.
pub const WRAPPER_SIZE: u64 = 24;

/// One `__CudaFatBinaryWrapper` analysed: what ELF and PE/COFF share, with
/// `P` how its pointer gets its run-time value (ELF
/// [`crate::elf::PointerModel`], PE [`crate::pe::PePointer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapper<P> {
    /// Position in the wrapper section.
    pub index: usize,
    pub file_offset: u64,
    /// `HIPF_MAGIC` or `HIPK_MAGIC` (anything else is an error).
    pub magic: u32,
    pub version: u32,
    /// The 8-byte `reserved1`/`dummy1` field (`co_index` in its low u32 for HIPK).
    pub reserved1: u64,
    /// Where the pointer field is: its address in ELF files (the
    /// `r_offset` a relocation has), its RVA in PE images, its section
    /// offset in relocatable objects of both.
    pub field: u64,
    /// The u64 stored in the pointer field.
    pub value_in_file: u64,
    pub pointer: P,
    /// Link-time value the pointer designates (address, RVA, or section
    /// offset in relocatable objects).
    pub target: u64,
    /// Bundle it points at (fat files).
    pub bundle: Option<usize>,
    /// It points into the marker section (split files; the marker starts
    /// there, at offset 0 for files split by this crate).
    pub points_to_marker: bool,
}

impl<P> Wrapper<P> {
    /// `co_index` of a HIPK wrapper (low u32 of `reserved1`).
    pub fn co_index(&self) -> u32 {
        (self.reserved1 & 0xffff_ffff) as u32
    }

    /// This wrapper as `inspect` shows it, its pointer described as
    /// `pointer`.
    pub(crate) fn described(&self, pointer: String) -> crate::DescribedWrapper {
        crate::DescribedWrapper {
            index: self.index,
            file_offset: self.file_offset,
            magic: crate::magic_name(self.magic),
            version: self.version,
            pointer,
            target: self.target,
            bundle: self.bundle,
            points_to_marker: self.points_to_marker,
            co_index: crate::hipk_co_index(self.magic, self.co_index()),
        }
    }
}

/// One `__CudaFatBinaryWrapper` as stored, before its pointer is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawWrapper {
    /// Position in the wrapper section.
    pub index: usize,
    /// File offset of the wrapper.
    pub file_offset: u64,
    /// `HIPF_MAGIC` or `HIPK_MAGIC` (anything else is refused).
    pub magic: u32,
    pub version: u32,
    /// The u64 stored in the pointer field (at `file_offset + 8`).
    pub value_in_file: u64,
    /// The 8-byte `reserved1`/`dummy1` field (`co_index` in its low u32 for HIPK).
    pub reserved1: u64,
}

/// Walk the wrappers of a wrapper section: `table` is its bytes (the caller
/// bounds them by the file and checks the size is a multiple of
/// [`WRAPPER_SIZE`]), stored at `file_offset`. Shared by the ELF and the
/// PE/COFF analyzers; a magic that is neither HIPF nor HIPK is an
/// [`Error::Wrapper`]. A trailing partial wrapper is ignored.
pub fn wrapper_table(
    table: &[u8],
    file_offset: u64,
) -> impl Iterator<Item = Result<RawWrapper>> + '_ {
    table
        .chunks_exact(WRAPPER_SIZE as usize)
        .enumerate()
        .map(move |(index, w)| {
            let off = file_offset + index as u64 * WRAPPER_SIZE;
            let magic = u32_at(w, 0, "wrapper magic")?;
            if magic != HIPF_MAGIC && magic != HIPK_MAGIC {
                return Err(Error::Wrapper {
                    index,
                    offset: off,
                    what: format!("magic {magic:#010x} is neither HIPF nor HIPK"),
                });
            }
            Ok(RawWrapper {
                index,
                file_offset: off,
                magic,
                version: u32_at(w, 4, "wrapper version")?,
                value_in_file: u64_at(w, 8, "wrapper pointer")?,
                reserved1: u64_at(w, 16, "wrapper reserved1")?,
            })
        })
}

/// What the binary holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No bundle section (ELF `.hip_fatbin`) and no wrappers: nothing to split.
    HostOnly,
    /// Device code present (HIPF wrappers, `.hip_fatbin` with bundles).
    Fat,
    /// Already split: HIPK wrappers pointing at the marker section.
    Split,
}

impl State {
    /// `host-only`, `fat` or `split`.
    pub fn name(self) -> &'static str {
        match self {
            State::HostOnly => "host-only",
            State::Fat => "fat",
            State::Split => "split",
        }
    }
}

/// A section's placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SectionRange {
    /// Section header index.
    pub index: usize,
    pub file_offset: u64,
    /// `sh_addr` (0 in relocatable objects).
    pub addr: u64,
    pub size: u64,
    /// `SHT_NOBITS` (no bytes in the file).
    pub nobits: bool,
}

/// One bundle found in the bundle section (ELF `.hip_fatbin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleInfo {
    /// Position in bundle-section order; this is the `co_index` the split
    /// binary's wrappers carry.
    pub index: usize,
    /// Offset from the start of the bundle section.
    pub section_offset: u64,
    pub file_offset: u64,
    /// Link-time address (section offset in relocatable objects).
    pub addr: u64,
    pub len: u64,
    pub format: rocpack_bundle::Format,
    /// Indices of the wrappers that point at this bundle (several for
    /// `-fgpu-rdc`, possibly none).
    pub wrappers: Vec<usize>,
}

/// The marker of a split binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerInfo {
    pub section: SectionRange,
    /// The section bytes (the opaque payload).
    pub bytes: Vec<u8>,
}

/// Whether bundles of given sizes fit where the split left room for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// A reassembly can place them.
    Fits,
    /// They are too large (or too small) for the room the split left:
    /// smaller (better compressed) bundles may fit.
    DoesNotFit,
}
