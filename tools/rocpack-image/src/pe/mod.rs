//! PE32+ images and COFF objects: analysis, host-only rewrite, reassembly.

mod analyze;
mod rewrite;
pub(crate) mod sparse;

pub(crate) use analyze::analyze_as;

pub use analyze::{
    analyze, analyze_in, bundle_bytes, ImageHeaders, PeInfo, PeKind, PePointer, PeSection,
    PeWrapper, FATBIN_SECTIONS, MARKER_CHARACTERISTICS, MARKER_SECTION, WRAPPER_SECTIONS,
    WRAPPER_SIZE,
};
pub use rewrite::{
    pe_checksum, pe_checksum_in, reassemble, reassemble_analyzed_to, reassemble_to,
    reassembly_fits, split_analyzed, split_host, split_to,
};
