//! `.kpack` archives (KPAK v1), the `.rocm_kpack_ref` marker payload and the
//! retired `.kpm` manifest — byte-compatible with ROCm's rocm-kpack.
//!
//! * [`KpackReader`]: strict, total reader; memory-mapped, zero-copy for
//!   scheme `none`, zstd frames decoded straight from the mapping.
//! * [`KpackWriter`] / [`KpackStreamWriter`]: writers whose output is byte
//!   identical to rocm-kpack's Python `KpackArchive` for the same inputs.
//! * [`Marker`]: the marker payload; [`Loader`] reproduces the runtime's
//!   lookup (which archive, target and TOC key a wrapper resolves to).
//! * [`Kpm`]: legacy manifest.
//!
//! The byte layout is documented in `docs/formats/kpack.md`.

#![deny(missing_docs)]

pub mod bundle_meta;
pub mod commit;
mod dir;
mod error;
mod format;
mod io;
mod kpm;
mod loader;
mod marker;
mod msgpack;
pub mod ordered;
pub mod pack;
mod reader;
mod writer;
pub mod writer_budget;

pub use dir::{
    natural_key, read_pack_dir, target_from_file_name, unpack_file_name, unpack_to_dir, KernelFile,
    LoadedKernel, PackDir, UnpackManifest, UnpackedKernel, UNPACK_FORMAT, UNPACK_MANIFEST,
};
pub use error::{Error, ErrorKind, Result};
pub use format::{
    kpack_file_name, marker_search_path, normalize_key, pack_tree_file_name, split_toc_key,
    toc_key, BlobLocation, Compression, KernelEntry, Scheme, BLOB_ALIGNMENT, GFXARCH_PLACEHOLDER,
    HEADER_SIZE, KERNEL_TYPE_HSACO, KPACK_DIR, MAGIC, SCHEME_NONE, SCHEME_ZSTD, VERSION,
    ZSTD_DEFAULT_LEVEL, ZSTD_MAX_BLOB, ZSTD_MAX_KERNELS, ZSTD_MAX_RATIO,
};
pub use kpm::{Kpm, KpmFile};
pub use loader::{
    candidate_paths, compatible_targets, expand_search_path, fall_through, match_order,
    strip_target_prefix, weakly_canonical, Candidate, LoadError, Loader, LoaderEnv, Lookup,
    Resolved, AMDHSA_PREFIX, ENV_KPACK_PATH, ENV_KPACK_PATH_PREFIX, ENV_PATH_SEPARATOR,
    MAX_SEARCH_PATHS,
};
pub use marker::{Marker, MARKER_MAX_LEN, MARKER_SECTION, MARKER_SECTION_PE};
pub use pack::{pack, PackError, PackRequest, PackSummary};
pub use reader::KpackReader;
pub use writer::{
    compress_frame, compress_frame_with, compress_stream, frame_of_file_range, FileInput,
    KpackFileWriter, KpackStreamWriter, KpackWriter, StoredFrame, WriteSummary, BATCH_BYTES,
    STREAM_IN_CHUNK, STREAM_THRESHOLD,
};

/// Re-exported so callers can build and inspect entry `metadata` values.
pub use rmpv;

/// Decode one zstd frame that must produce exactly `original_size` bytes
/// (allocation grows with the real output, never trusting `original_size`).
pub fn decompress_frame(frame: &[u8], original_size: u64) -> Result<Vec<u8>> {
    reader::decompress(frame, original_size)
}
