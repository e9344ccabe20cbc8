//! rocpack-bundle: clang offload bundles, read and write.
//!
//! * Uncompressed `__CLANG_OFFLOAD_BUNDLE__` bundles and compressed `CCOB`
//!   bundles (header versions 1, 2, 3; zlib or zstd), with optional check of
//!   the stored truncated-MD5 hash: [`parse_bundle`], [`parse_bundle_with`].
//! * Every bundle of a `.hip_fatbin` section, in linear time:
//!   [`find_bundles`]; over positioned reads of a file ([`FileRange`]),
//!   so headers are found without mapping device code: [`find_bundles_in`].
//! * Target IDs (`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+`, `gfx11-generic`,
//!   host entries) and ISA compatibility as the ROCm runtime decides it:
//!   [`TargetId`], [`isa_matches`], [`compatible_targets`]; every spelling
//!   ROCm's trees use for a GPU target, normalised to one identity
//!   ([`base_arch`], [`parse_target_exact`], [`miopen_arch`]), and the one
//!   check of a user-given target ([`parse_gpu_target`]).
//! * Bounded memory for any payload: [`index_bundle`] reads the entry table
//!   alone (a CCOB's prefix), [`walk_bundle`] streams every code object to
//!   a sink in chunks, decompressing a CCOB once; [`walk_entries`] decodes
//!   code objects straight into the caller's buffers and skips the rest;
//!   [`copy_payload`] spills a payload to a writer.
//! * Writers whose output clang-offload-bundler unbundles to identical bytes:
//!   [`write_uncompressed`], [`write_ccob`].
//! * [`fsutil`]: inputs opened without blocking on a FIFO and refused
//!   unless regular, read with a size bound; lexical absolute paths.
//! * [`memory`]: the one ledger of the process's large buffers (zstd
//!   contexts, decoder windows, queued code objects) and its budget.
//! * [`FileIdent`]: the identity of a file (device, inode, size, times) that
//!   every reader compares to refuse a file rewritten while it is read.
//!
//! Every parser is total: any input yields a value or an [`Error`] naming the
//! byte offset, never a panic, and allocations are bounded by the input size.
//! Byte layouts: `docs/formats/offload-bundle.md`.

mod bundle;
mod error;
pub mod fsutil;
mod ident;
mod layout;
pub mod memory;
mod source;
mod stream;
mod target;
mod unnamed;
mod write;

pub use bundle::{
    bundle_extent, ccob_hash, decompress_ccob, find_bundles, parse_bundle, parse_bundle_with,
    parse_ccob_header, Bundle, BundleSpan, CcobHeader, Compression, Entry, EntryData, Format,
    Method, ParseOptions, BUNDLE_MAGIC, CCOB_MAGIC, MAX_CCOB_RATIO,
};
pub use error::{Error, Result};
pub use ident::FileIdent;
pub use layout::{BundleLayout, LayoutEntry};
pub use source::{bundle_extent_in, find_bundles_in, FileRange, ReadAt, Window};
pub use stream::{
    copy_payload, index_bundle, index_bundle_in, release_decoders, walk_bundle, walk_entries,
    BundleIndex, CopyError, EntryDest, EntrySink, EntryTarget, IndexEntry, WalkSummary, CHUNK,
    DECODER_WINDOW_MAX,
};
pub use target::spelling::{
    arch_from_file_name, base_arch, miopen_arch, parse_gpu_target, parse_target_exact,
};
pub use target::{
    compatible_targets, generic_covers, generic_for, is_gfx_processor, isa_matches,
    runtime_compatible_targets, strip_target_prefix, targets_overlap, Feature, TargetId,
    AMDHSA_PREFIX, MAX_FEATURES, RUNTIME_MAX_FEATURES,
};
pub use unnamed::link_unnamed;
pub use write::{
    ccob_header_len, write_ccob, write_ccob_level, write_ccob_long, write_ccob_params,
    write_uncompressed, write_uncompressed_aligned, CcobEncoder, CcobParams, DEFAULT_ALIGN,
    DEFAULT_ZLIB_LEVEL, DEFAULT_ZSTD_LEVEL,
};
