//! rocpack-elf: the ELF side of `rocpack-image` under its historical name.
//!
//! HIP fat-binary analysis, strip-safe host-only rewrite and lossless
//! reassembly of ELF64 little-endian files and `ar` archives live in
//! [`rocpack_image::elf`] (beside [`rocpack_image::pe`], with the types
//! both formats share at the root of `rocpack-image`); this crate
//! re-exports that module so `rocpack_elf::analyze`, `rocpack_elf::State`,
//! … keep working. New code calls `rocpack_image` (its one dispatch for
//! ELF and PE), or `rocpack_image::elf` for what only ELF has.

pub use rocpack_image::elf::*;
