//! ELF: HIP fat-binary analysis, strip-safe host-only rewrite and lossless
//! reassembly, for ELF64 little-endian executables, shared objects,
//! relocatable objects and `ar` archives of them (the `rocpack-elf` crate
//! re-exports this module). The types shared with [`crate::pe`] are defined
//! at the crate root and re-exported here.
//!
//! This module knows nothing about `.kpack`: the marker payload is opaque bytes.
//! Layout of the rewrite: `docs/formats/split-elf.md`.
//!
//! # Public API (summary)
//!
//! * [`analyze`]`(&[u8]) -> Result<`[`FatBinaryInfo`]`>` — ELF kind, state
//!   (host-only / fat / split), `.hip_fatbin` range, every bundle
//!   ([`BundleInfo`]: offset, length, format, wrappers pointing at it), every
//!   wrapper ([`WrapperInfo`]: magic, version, `co_index`, pointer model and
//!   the bundle it *really* points at), the marker bytes of split binaries.
//! * [`bundle_bytes`]`(data, &info, bundle_index) -> &[u8]` — the raw bytes
//!   of one bundle; [`parse_bundles`]`(data, &info) -> Vec<rocpack_bundle::Bundle>`
//!   — every bundle parsed (element *i* = `co_index` *i*; code objects are
//!   borrowed for uncompressed bundles), overlapping entries refused.
//! * [`wrapper_table`]`(table, file_offset)` — the wrapper walk shared with
//!   the PE/COFF side ([`crate::pe`]): each 24-byte wrapper as a
//!   [`RawWrapper`], a magic other than HIPF/HIPK refused as
//!   [`Error::Wrapper`].
//! * [`WrapperInfo::marker_bytes`] — the marker payload a HIPK wrapper
//!   points at; [`WrapperInfo::co_index`].
//! * [`split_host`]`(data, marker_payload) -> Result<Vec<u8>>` — host-only
//!   rewrite of an ELF file. Host-only input comes back byte-identical.
//!   Each HIPK wrapper's `co_index` (low u32 of its `reserved1`) is the
//!   index of the bundle it pointed at ([`BundleInfo::index`]), so several
//!   wrappers of an `-fgpu-rdc` binary share one index. Pack bundle *i* as
//!   TOC key `<kernel_name>#<i>`.
//! * [`reassemble`]`(host, bundles) -> Result<Vec<u8>>` — inverse of
//!   [`split_host`]: `bundles[i]` is the bundle (uncompressed or CCOB bytes)
//!   for `co_index` *i*.
//! * Bounded memory: [`split_host_to`] and [`reassemble_to`] write the same
//!   bytes to a file range by range (the rewrite is a list of input ranges,
//!   bundle ranges and new bytes with small patches on top; the host part
//!   and the bundles are copied through one 1 MiB buffer, never held).
//!   [`Bundles::In`] gives the bundles as ranges of a spill file.
//!   [`Sparse`] loads only the bytes an analysis reads from a file (headers,
//!   tables, wrapper and marker sections, the relocations the wrappers
//!   need) with positioned reads: `analyze_in(sparse.bytes(), &file)`
//!   analyses a 1 GiB library with a few MiB resident, never mapping it.
//! * Archives: [`is_archive`], [`archive_members`], [`split_archive`],
//!   [`reassemble_archive`]; [`split_file`]`(data, &mut |member, info| marker)`
//!   / [`reassemble_file`]`(data, &mut |member, info| bundles)` dispatch on
//!   ELF vs archive (member name is `""` for a plain ELF file). Members
//!   without device code (and `-fgpu-rdc` objects) are kept byte for byte.
//! * Guarantees: deterministic output; no panics or unbounded allocation on
//!   any input; the output of [`split_host`] survives GNU `strip` and
//!   `llvm-strip` (program headers stay at `e_phoff`, no section-less
//!   PT_LOAD), every relocation model (RELA, REL, RELR, absolute `ET_EXEC`)
//!   keeps working; [`reassemble`] is the exact inverse (byte-identical when
//!   the bundles are).
//! * Errors: [`Error`] (every variant names a byte offset; `Error::offset`).

mod analyze;
mod archive;
mod describe;
pub(crate) mod headers;
mod object_file;
pub(crate) mod rewrite;
mod sections;
mod sparse;

/// The types ELF shares with PE/COFF (defined at the crate root).
pub use crate::{
    wrapper_table, BundleInfo, Bundles, Fit, MarkerInfo, Out, RawWrapper, SectionRange, Sparse,
    SparseView, State, HIPF_MAGIC, HIPK_MAGIC, WRAPPER_SIZE,
};
pub use crate::{Error, Result};
pub use analyze::{
    analyze, analyze_in, ElfKind, FatBinaryInfo, PointerModel, WrapperInfo, FATBIN_SECTION,
    MARKER_SECTION, OFFLOAD_SECTION_PREFIX, WRAPPER_SECTION,
};
pub use archive::{
    archive_members, archive_members_in, is_archive, reassemble_archive, reassemble_archive_to,
    split_archive, split_archive_to, ArchiveMember,
};
pub use describe::ElfHeader;
pub(crate) use describe::{describe, describe_code_object};
pub use rewrite::{
    parse_bundles, reassemble, reassemble_into, reassemble_placed, reassemble_to, reassembly_fits,
    split_host, split_host_in, split_host_to,
};

/// Raw bytes of bundle `index` of an analysed fat binary.
pub fn bundle_bytes<'a>(data: &'a [u8], info: &FatBinaryInfo, index: usize) -> Result<&'a [u8]> {
    let b = info
        .bundles
        .get(index)
        .ok_or_else(|| Error::malformed(0, format!("no bundle {index}")))?;
    headers::get(data, b.file_offset, b.len, "bundle")
}

/// Callback giving the marker payload of one file or archive member.
pub type MarkerFn<'a> = dyn FnMut(&str, &FatBinaryInfo) -> Result<Vec<u8>> + 'a;
/// Callback giving the bundles (by `co_index`) of one split file or member.
pub type BundlesFn<'a> = dyn FnMut(&str, &FatBinaryInfo) -> Result<Vec<Vec<u8>>> + 'a;

/// Split an ELF file or an `ar` archive. For archives, `marker_for` is
/// called with each member that has device code (its name and analysis)
/// and returns that member's marker payload; ELF files use `marker_for("", info)`.
pub fn split_file(data: &[u8], marker_for: &mut MarkerFn<'_>) -> Result<Vec<u8>> {
    if is_archive(data) {
        split_archive(data, marker_for)
    } else {
        let info = analyze(data)?;
        if !info.has_device_code() {
            return Ok(data.to_vec());
        }
        let marker = marker_for("", &info)?;
        split_host(data, &marker)
    }
}

/// Reassemble an ELF file or an `ar` archive; `bundles_for(member_name,
/// marker_bytes)` returns the bundles of one split member (by `co_index`).
pub fn reassemble_file(data: &[u8], bundles_for: &mut BundlesFn<'_>) -> Result<Vec<u8>> {
    if is_archive(data) {
        reassemble_archive(data, bundles_for)
    } else {
        let info = analyze(data)?;
        if info.state != State::Split {
            return Ok(data.to_vec());
        }
        let bundles = bundles_for("", &info)?;
        reassemble(data, &bundles)
    }
}
