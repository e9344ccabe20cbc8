//! PE32+ images and COFF objects: analysis, host-only rewrite, reassembly.

mod analyze;
mod describe;
mod rewrite;
pub(crate) mod sparse;

pub(crate) use analyze::analyze_as;
pub(crate) use describe::{describe, describe_pe32};

pub use analyze::{
    analyze, analyze_in, bundle_bytes, ImageHeaders, PeInfo, PeKind, PePointer, PeSection,
    PeWrapper, FATBIN_SECTIONS, MARKER_CHARACTERISTICS, MARKER_SECTION, WRAPPER_SECTIONS,
    WRAPPER_SIZE,
};
pub use describe::PeHeader;
pub use rewrite::{
    pe_checksum, pe_checksum_in, reassemble, reassemble_analyzed_to, reassemble_to,
    reassembly_fits, split_analyzed, split_host, split_to,
};
