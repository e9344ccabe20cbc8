//! The compression-effort ladder: how hard a rebuilt CCOB is squeezed
//! ([`params`]) and the retry of one bundle at rising effort until it is
//! no larger than the original ([`write_fitting`]).

use rocpack_bundle::{BundleLayout, CcobParams, Method};

use super::code_objects::{write_exact, CodeObject};
use super::ReassembleError;

/// Highest effort of [`params`].
pub const MAX_EFFORT: u8 = 3;

/// How a CCOB is compressed at `effort`. zstd: level 4, then level 6,
/// both without long-distance matching over a window of at most 2^24
/// (16 MiB: the encoder then holds about 25 MiB whatever the bundle's
/// size); then level 9 and level 19 with long matching over a window
/// covering the bundle (at most 2^27, what every zstd decoder accepts; the
/// encoder then holds about the bundle). zlib: LLVM's default level 6,
/// then 9. A bundle whose split recorded its original size is squeezed
/// harder on its own until it is no larger ([`write_fitting`]); without
/// the record, all bundles again at the next effort while they do not fit.
///
/// Why a 16 MiB window without long matching first: a bundle holding one
/// code object per target is mostly repeats one code object apart (~5-9 MB
/// in ROCm's XLA plugin), which a 2^24 window covers, and long matching
/// there costs time and bytes. Measured on the XLA plugin (41 CCOB v3, 1.2
/// GB of code objects, a `.hip_fatbin` without slack; libzstd 1.5, one
/// core, all 41 bundles): level 4 with the 2^24 window 0.85x the original
/// bytes, 40 of 41 bundles fit, 0.60 s of CPU; level 6 the same way 0.77x,
/// all fit, 2.0 s; level 6 with long matching (the previous first try)
/// 0.99x, 34 fit, 3.2 s; level 3 with a 2^21 window 1.1x.
pub fn params(method: Method, effort: u8) -> CcobParams {
    let level = match (method, effort) {
        (Method::Zstd, 0) => 4,
        (Method::Zstd, 1) => 6,
        (Method::Zstd, 2) => 9,
        (Method::Zstd, _) => 19,
        (Method::Zlib, 0 | 1) => rocpack_bundle::DEFAULT_ZLIB_LEVEL as i32,
        (Method::Zlib, _) => 9,
    };
    CcobParams {
        level,
        long: effort >= 2,
        max_window_log: if effort < 2 { 24 } else { 27 },
    }
}

/// [`write_exact`] at the first effort of `efforts`, then at the next
/// ones while the result is larger than the original CCOB the split
/// recorded (`layout.packed`): `out()` gives a fresh writer each time (the
/// same place), `finish` ends each attempt. Returns the header, the bytes
/// written by the last attempt and whether that attempt is still larger
/// than the original.
pub fn write_fitting<W: std::io::Write>(
    layout: &BundleLayout,
    parts: &[(usize, CodeObject<'_>)],
    efforts: std::ops::RangeInclusive<u8>,
    out: &mut dyn FnMut() -> W,
    finish: &mut dyn FnMut(W) -> std::io::Result<()>,
    what: &str,
) -> Result<Fitted, ReassembleError> {
    let (mut e, last) = (*efforts.start(), (*efforts.end()).min(MAX_EFFORT));
    loop {
        let mut w = out();
        let (header, n) = write_exact(layout, parts, e, &mut w, what)?;
        finish(w)
            .map_err(|x| ReassembleError::io(format!("{what}: failed to write a bundle"), x))?;
        let larger = layout.packed.is_some_and(|p| header.len() as u64 + n > p);
        if larger && e < last {
            e += 1;
            continue;
        }
        return Ok(Fitted {
            header,
            n,
            larger,
            effort: e,
        });
    }
}

/// What [`write_fitting`] wrote.
pub struct Fitted {
    /// The CCOB header, to go in front of the bytes written (empty for an
    /// uncompressed bundle).
    pub header: Vec<u8>,
    /// Bytes written after the header.
    pub n: u64,
    /// Whether the bundle is larger than the original it replaces (which
    /// then fits only if other bundles leave room for it).
    pub larger: bool,
    /// The effort of the last attempt.
    pub effort: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effort_rises_to_long_matching_over_a_larger_window() {
        let levels: Vec<i32> = (0..=MAX_EFFORT)
            .map(|e| params(Method::Zstd, e).level)
            .collect();
        assert_eq!(levels, [4, 6, 9, 19]);
        assert!(!params(Method::Zstd, 1).long && params(Method::Zstd, 2).long);
        assert_eq!(params(Method::Zstd, 0).max_window_log, 24);
        assert_eq!(params(Method::Zstd, MAX_EFFORT).max_window_log, 27);
        assert_eq!(params(Method::Zlib, MAX_EFFORT).level, 9);
    }
}
