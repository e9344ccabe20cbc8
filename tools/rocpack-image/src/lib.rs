//! rocpack-image: one seam over the host files that carry HIP device code.
//!
//! Layout (as in gimli-rs/object): the model both formats share is at the
//! root ([`State`], [`BundleInfo`], [`MarkerInfo`], [`SectionRange`],
//! [`RawWrapper`] / [`wrapper_table`], [`Fit`], the [`Sparse`] map of loaded
//! pieces, the rewrite's [`Out`] pieces and the reassembly's [`Bundles`]); [`elf`] (ELF files and `ar` archives; also published under its
//! historical name, the `rocpack-elf` crate, which re-exports it) and
//! [`pe`] (PE32+ images, COFF objects) are siblings; the functions below
//! are the one dispatch over both, streaming included. Callers never
//! branch on ELF vs PE.
//!
//! * [`detect`]`(head) -> `[`FileType`] — the one file-type detection
//!   function of rocpack (ELF, AMDGPU code object, PE, COFF, `ar`, bundle,
//!   CCOB, `.kpack`); [`detect_file`] reads the head of a regular file.
//! * [`analyze`]`(data) -> `[`Analysis`] — ELF ([`elf::analyze`]) or
//!   PE32+/COFF ([`pe::analyze`]), by what [`detect`] says.
//! * [`analyze_in`]`(data, src) -> `[`Analysis`] / [`split_to`]`(data, src,
//!   analysis, marker, file)` — the same analysis and host-only rewrite of
//!   a file that is never read whole (headers and tables through `data`,
//!   the rest through positioned reads of `src`), written range by range.
//! * [`units`] / [`Unit::analyze`] / [`split_archive_to`] — the images of
//!   a mapped file a split rewrites (the file, or each `ar` member), their
//!   analysis, and an archive's split written range by range.
//! * [`describe_in`]`(data, src) -> `[`Description`] / [`Analysis::describe`]
//!   — what an image holds in terms both formats share (bundles, wrappers
//!   with their pointer model in words, marker, notes) plus the format's
//!   header facts ([`Headers`]): everything `kpack inspect` says about an
//!   ELF file, PE image, COFF object or raw AMDGPU code object.
//! * [`carries_device_code`] / [`file_carries_device_code`] — the byte
//!   scan for device code in what an analysis refused, any format.
//! * [`ImageFile`] — the same analysis of a file (and of an archive's
//!   members) without reading it whole: headers, tables, wrappers and
//!   markers through positioned reads, memory flat in the file's size.
//! * [`split_file`] / [`reassemble_file`] — detect → analyse → rewrite →
//!   reassemble for ELF files, `ar` archives and PE32+ images alike; the
//!   callbacks get the [`Analysis`] of each file (or archive member).
//! * [`Reassembly`] — the same reassembly streamed: detect and analyse a
//!   split host once, ask whether bundles of given sizes [`Fit`], write the
//!   file from bundles in a spill file (or place them straight into it),
//!   one dispatch for ELF files, `ar` archives and PE32+ images.
//!
//! The ELF and PE/COFF analyzers walk wrappers with one helper
//! ([`wrapper_table`]), and report faults with one [`Error`] type
//! (`elf::Error` is the same type): what means the same on both sides
//! (wrapper, bundle, layout, does-not-fit, I/O) is one variant, with one
//! message whatever the host format.
//!
//! PE layout of the rewrite: `docs/formats/split-pe.md`; ELF:
//! `docs/formats/split-elf.md`. The marker payload is opaque bytes here.

mod bundles;
mod describe;
mod detect;
mod device;
pub mod elf;
mod error;
mod file;
mod model;
mod out;
pub mod pe;
mod reassembly;
mod sparse;
mod units;

pub use bundles::Bundles;
pub use describe::{
    describe_in, hipk_co_index, magic_name, DescribedBundle, DescribedWrapper, Description,
    Headers, OffloadSection, SectionPlacement,
};
pub use detect::{detect, detect_file, FileType, HEAD_LEN};
pub use device::{carries_device_code, file_carries_device_code};
pub use error::{Error, Result};
pub use file::{FileUnit, ImageFile};
pub use model::{
    wrapper_table, BundleInfo, Fit, MarkerInfo, RawWrapper, SectionRange, State, Wrapper,
    HIPF_MAGIC, HIPK_MAGIC, WRAPPER_SIZE,
};
pub use out::Out;
pub use reassembly::{ArchiveError, Form, MemberBundlesFn, Reassembly};
pub use sparse::{Sparse, SparseView};
pub use units::{units, Member, Unit};

use std::fs::File;

use crate::elf::FatBinaryInfo;
use rocpack_bundle::ReadAt;

/// Analysis of one host file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Analysis {
    /// ELF file (see `crate::elf::analyze`).
    Elf(FatBinaryInfo),
    /// PE32+ image or COFF object.
    Pe(pe::PeInfo),
}

impl Analysis {
    /// Host-only, fat or split.
    pub fn state(&self) -> State {
        match self {
            Analysis::Elf(i) => i.state,
            Analysis::Pe(i) => i.state,
        }
    }

    /// Whether splitting would remove device code.
    pub fn has_device_code(&self) -> bool {
        match self {
            Analysis::Elf(i) => i.has_device_code(),
            Analysis::Pe(i) => i.has_device_code(),
        }
    }

    /// Bundles of the bundle section, by `co_index`.
    pub fn bundles(&self) -> &[BundleInfo] {
        match self {
            Analysis::Elf(i) => &i.bundles,
            Analysis::Pe(i) => &i.bundles,
        }
    }

    /// The marker section of a split file.
    pub fn marker(&self) -> Option<&MarkerInfo> {
        match self {
            Analysis::Elf(i) => i.marker.as_ref(),
            Analysis::Pe(i) => i.marker.as_ref(),
        }
    }

    /// Every wrapper's magic, `co_index` and the marker payload it points at.
    pub fn wrapper_markers(&self) -> Vec<WrapperMarker<'_>> {
        match self {
            Analysis::Elf(i) => i
                .wrappers
                .iter()
                .map(|w| WrapperMarker {
                    magic: w.magic,
                    co_index: w.co_index(),
                    marker: w.marker_bytes(i),
                })
                .collect(),
            Analysis::Pe(i) => i
                .wrappers
                .iter()
                .map(|w| WrapperMarker {
                    magic: w.magic,
                    co_index: w.co_index(),
                    marker: w.marker_bytes(i),
                })
                .collect(),
        }
    }
}

/// One wrapper of an analysed file as a split's reader sees it
/// ([`Analysis::wrapper_markers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrapperMarker<'a> {
    /// [`HIPF_MAGIC`] or [`HIPK_MAGIC`].
    pub magic: u32,
    /// Low u32 of `reserved1`: the bundle index of a HIPK wrapper.
    pub co_index: u32,
    /// The marker payload it points at (HIPK wrappers of split files).
    pub marker: Option<&'a [u8]>,
}

/// Analyse an ELF file, PE32+ image or COFF object.
pub fn analyze(data: &[u8]) -> Result<Analysis> {
    match detect(data) {
        FileType::Elf { .. } => Ok(Analysis::Elf(crate::elf::analyze(data)?)),
        FileType::Pe { .. } | FileType::Coff { .. } => Ok(Analysis::Pe(pe::analyze(data)?)),
        t => Err(Error::NotAnImage(t.name())),
    }
}

/// Analyse an ELF file, PE32+ image or COFF object without reading it
/// whole: `data` holds what the analysis reads (a mapping, or a
/// [`crate::elf::SparseView`] of a file), `src` reads the whole file with
/// positioned reads (the bundle headers). The streaming counterpart of
/// [`analyze`], and the one dispatch of every bounded-memory path.
pub fn analyze_in(data: &[u8], src: &dyn ReadAt) -> Result<Analysis> {
    analyze_as(data, src, detect(data))
}

/// [`analyze_in`] of a file whose type `kind` was detected from its head
/// already (`data` may hold less than the head: [`ImageFile`]).
pub(crate) fn analyze_as<'d, R: object::ReadRef<'d>>(
    data: R,
    src: &dyn ReadAt,
    kind: FileType,
) -> Result<Analysis> {
    match kind {
        FileType::Elf { .. } => Ok(Analysis::Elf(crate::elf::analyze_in(data, src)?)),
        FileType::Pe { .. } | FileType::Coff { .. } => {
            Ok(Analysis::Pe(pe::analyze_as(data, src, kind)?))
        }
        t => Err(Error::NotAnImage(t.name())),
    }
}

/// The host-only rewrite of an analysed ELF file or PE32+ image (`info`:
/// its [`analyze_in`]) written to `dst` (empty, opened for reading and
/// writing) range by range from `src`: neither the host part nor the
/// output is held in memory. `marker` is the marker payload. Returns the
/// bytes written.
pub fn split_to(
    data: &[u8],
    src: &dyn ReadAt,
    info: &Analysis,
    marker: &[u8],
    dst: &File,
) -> Result<u64> {
    match info {
        Analysis::Elf(_) => Ok(crate::elf::split_host_to(data, src, marker, dst)?),
        Analysis::Pe(i) => pe::split_to(data, src, i, marker, dst),
    }
}

/// The split of an `ar` archive written to `dst` with memory bounded by
/// its largest member: `marker_for(member, analysis)` gives the marker
/// payload of each member with device code (members are read one at a
/// time through `src`, split ones rewritten through `spill`; the others
/// are copied). Returns the bytes written.
pub fn split_archive_to(
    data: &[u8],
    src: &dyn ReadAt,
    marker_for: &mut MarkerFn<'_>,
    spill: &File,
    dst: &mut dyn std::io::Write,
) -> Result<u64> {
    crate::elf::split_archive_to(data, src, &mut elf_cb(marker_for), spill, dst)
}

/// Raw bytes of bundle `index` of an analysed file.
pub fn bundle_bytes<'a>(data: &'a [u8], info: &Analysis, index: usize) -> Result<&'a [u8]> {
    match info {
        Analysis::Elf(i) => Ok(crate::elf::bundle_bytes(data, i, index)?),
        Analysis::Pe(i) => pe::bundle_bytes(data, i, index),
    }
}

/// Callback giving the marker payload of one file or archive member.
pub type MarkerFn<'a> = dyn FnMut(&str, &Analysis) -> Result<Vec<u8>> + 'a;
/// Callback giving the bundles (by `co_index`) of one split file or member.
pub type BundlesFn<'a> = dyn FnMut(&str, &Analysis) -> Result<Vec<Vec<u8>>> + 'a;

fn elf_cb<T>(
    f: &mut dyn FnMut(&str, &Analysis) -> Result<T>,
) -> impl FnMut(&str, &FatBinaryInfo) -> Result<T> + '_ {
    move |name, info| f(name, &Analysis::Elf(info.clone()))
}

/// Split an ELF file, `ar` archive or PE32+ image: `marker_for(member,
/// analysis)` gives the marker payload of each file (member `""`) with
/// device code. Files without device code come back byte-identical.
pub fn split_file(data: &[u8], marker_for: &mut MarkerFn<'_>) -> Result<Vec<u8>> {
    match detect(data) {
        FileType::Elf { .. } | FileType::Archive => {
            Ok(crate::elf::split_file(data, &mut elf_cb(marker_for))?)
        }
        FileType::Pe { .. } | FileType::Coff { .. } => {
            let info = pe::analyze(data)?;
            if !info.has_device_code() {
                return Ok(data.to_vec());
            }
            let a = Analysis::Pe(info);
            let marker = marker_for("", &a)?;
            let Analysis::Pe(info) = a else {
                unreachable!()
            };
            pe::split_analyzed(data, &info, &marker)
        }
        t => Err(Error::NotAnImage(t.name())),
    }
}

/// Reassemble a split ELF file, `ar` archive or PE32+ image;
/// `bundles_for(member, analysis)` returns the bundles by `co_index`.
pub fn reassemble_file(data: &[u8], bundles_for: &mut BundlesFn<'_>) -> Result<Vec<u8>> {
    match detect(data) {
        FileType::Elf { .. } | FileType::Archive => {
            Ok(crate::elf::reassemble_file(data, &mut elf_cb(bundles_for))?)
        }
        FileType::Pe { .. } | FileType::Coff { .. } => {
            let a = Analysis::Pe(pe::analyze(data)?);
            if a.state() != State::Split {
                return Ok(data.to_vec());
            }
            let bundles = bundles_for("", &a)?;
            pe::reassemble(data, &bundles)
        }
        t => Err(Error::NotAnImage(t.name())),
    }
}
