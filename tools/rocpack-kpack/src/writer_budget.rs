//! Memory the zstd compressors of a process hold at once.
//!
//! A compression context grows with the level and with the input (zstd
//! sizes its tables to it): a few MiB at level 3, about 80 MiB at level 19
//! for a code object of 8 MiB or more, several hundred MiB at level 22
//! uncapped. Every compression of this crate first takes a [`Permit`] for
//! zstd's own estimate of its context ([`context_bytes`]) from the process's
//! memory ledger ([`rocpack_bundle::memory`], re-exported here), which the
//! CCOB decoders and a split's queued code objects share: peak memory does
//! not grow with `--jobs` at high levels.
//!
//! Levels above 19 ("ultra") have their tables and window capped
//! ([`ULTRA_HASH_LOG_MAX`], [`ULTRA_CHAIN_LOG_MAX`], [`ULTRA_WINDOW_LOG_MAX`]):
//! uncapped, a single level-22 context for a 32 MiB code object is about
//! 400 MiB. A code object small enough that zstd's own parameters stay under
//! the caps (up to 4 MiB) gets exactly the frame plain level 22 gives.

pub use rocpack_bundle::memory::{hold, permit, try_hold, Held, Permit, BUDGET};
use zstd::zstd_safe::zstd_sys;

/// Largest `hashLog` of an ultra level (2^23 entries, 32 MiB).
pub const ULTRA_HASH_LOG_MAX: u32 = 23;
/// Largest `chainLog` of an ultra level (2^24 entries, 64 MiB).
pub const ULTRA_CHAIN_LOG_MAX: u32 = 24;
/// Largest window of an ultra level (32 MiB: the streamed compressor's
/// buffer).
pub const ULTRA_WINDOW_LOG_MAX: u32 = 25;

/// Levels above this are "ultra" (capped).
const ULTRA_FROM: i32 = 20;

/// Lowest level at which [`prepare_process`] always has freed buffers
/// returned to the system.
pub const RETURN_FREES_FROM: i32 = 10;

/// Lowest level at which [`prepare_process`] has freed buffers returned
/// to the system when more than two workers run.
pub const RETURN_FREES_WIDE_FROM: i32 = 4;

/// Process setup for a run that compresses with `compression` on `jobs`
/// worker threads (`None`: one per CPU). From [`RETURN_FREES_FROM`] on,
/// and from [`RETURN_FREES_WIDE_FROM`] on with more than two workers,
/// large freed buffers go back to the system
/// ([`rocpack_bundle::memory::return_large_frees`]), so peak RSS stays
/// within the budget at any `--jobs`: measured on the 27-target XLA
/// plugin, `zstd:9 --jobs 8` peaked at 293–317 MiB without it and
/// 199 MiB with it. It costs about a tenth more CPU at level 9, so it is
/// left off where the allocator's arenas stay small (two workers: 175 MiB
/// at `zstd:9`) and at the default level (203 MiB at `--jobs 8`). For
/// binaries, before threads start.
pub fn prepare_process(compression: crate::Compression, jobs: Option<usize>) {
    let crate::Compression::Zstd { level } = compression else {
        return;
    };
    let workers = jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    if level >= RETURN_FREES_FROM || (level >= RETURN_FREES_WIDE_FROM && workers > 2) {
        rocpack_bundle::memory::return_large_frees();
    }
}

/// zstd's parameters for `level` and an input of `len` bytes, as the
/// compressors of this crate use them (ultra levels capped).
pub(crate) fn params(level: i32, len: u64) -> zstd_sys::ZSTD_compressionParameters {
    #[allow(unsafe_code)]
    // SAFETY: a pure function of its arguments (returns a plain struct).
    let mut p = unsafe { zstd_sys::ZSTD_getCParams(level, len.max(1), 0) };
    if level >= ULTRA_FROM {
        p.hashLog = p.hashLog.min(ULTRA_HASH_LOG_MAX);
        p.chainLog = p.chainLog.min(ULTRA_CHAIN_LOG_MAX);
        p.windowLog = p.windowLog.min(ULTRA_WINDOW_LOG_MAX);
    }
    p
}

/// The caps of an ultra level that zstd's own parameters for `len` bytes
/// exceed, as (hashLog, chainLog, windowLog) to set; `None` where zstd's
/// value stands (every level up to 19, and small inputs).
pub(crate) fn ultra_caps(level: i32, len: u64) -> [Option<u32>; 3] {
    if level < ULTRA_FROM {
        return [None; 3];
    }
    #[allow(unsafe_code)]
    // SAFETY: as in `params`.
    let p = unsafe { zstd_sys::ZSTD_getCParams(level, len.max(1), 0) };
    [
        (p.hashLog > ULTRA_HASH_LOG_MAX).then_some(ULTRA_HASH_LOG_MAX),
        (p.chainLog > ULTRA_CHAIN_LOG_MAX).then_some(ULTRA_CHAIN_LOG_MAX),
        (p.windowLog > ULTRA_WINDOW_LOG_MAX).then_some(ULTRA_WINDOW_LOG_MAX),
    ]
}

/// Bytes a context compressing `len` bytes at `level` takes, by zstd's own
/// estimate: one-shot ([`crate::compress_frame`]), or `streaming`
/// ([`crate::compress_stream`], which adds its window buffer).
pub fn context_bytes(level: i32, len: u64, streaming: bool) -> u64 {
    let p = params(level, len);
    #[allow(unsafe_code)]
    // SAFETY: pure functions of a plain struct.
    let n = unsafe {
        if streaming {
            zstd_sys::ZSTD_estimateCStreamSize_usingCParams(p)
        } else {
            zstd_sys::ZSTD_estimateCCtxSize_usingCParams(p)
        }
    };
    n as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_grow_with_level_and_ultra_is_capped() {
        let l3 = context_bytes(3, 5 << 20, false);
        let l19 = context_bytes(19, 5 << 20, false);
        assert!(l3 < 8 << 20, "{l3}");
        assert!(l19 > 64 << 20, "{l19}");
        // Uncapped, level 22 on 32 MiB is ~400 MiB.
        let l22 = context_bytes(22, 32 << 20, true);
        assert!(l22 < 160 << 20, "{l22}");
        assert_eq!(ultra_caps(19, 1 << 30), [None; 3]);
        assert_eq!(ultra_caps(22, 1 << 20), [None; 3]);
        assert_eq!(
            ultra_caps(22, 1 << 30),
            [
                Some(ULTRA_HASH_LOG_MAX),
                Some(ULTRA_CHAIN_LOG_MAX),
                Some(ULTRA_WINDOW_LOG_MAX)
            ]
        );
    }
}
