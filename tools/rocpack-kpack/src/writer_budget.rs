//! Memory the zstd compressors of a process hold at once.
//!
//! A compression context grows with the level and with the input (zstd
//! sizes its tables to it): a few MiB at level 3, about 80 MiB at level 19
//! for a code object of 8 MiB or more, several hundred MiB at level 22
//! uncapped. Every compression of this crate first takes a [`Permit`] for
//! zstd's own estimate of its context ([`context_bytes`]). Permits and the
//! memory other parts of the process declare ([`hold`]: a split's CCOB
//! decoders, whose windows are as large as the payloads) share [`BUDGET`];
//! a compression that does not fit waits for a permit to be returned, unless
//! no compression runs (one always can). Permits are taken one at a time and
//! their holders never wait for anything, so waiting cannot deadlock; peak
//! memory then no longer grows with `--jobs` at high levels.
//!
//! Levels above 19 ("ultra") have their tables and window capped
//! ([`ULTRA_HASH_LOG_MAX`], [`ULTRA_CHAIN_LOG_MAX`], [`ULTRA_WINDOW_LOG_MAX`]):
//! uncapped, a single level-22 context for a 32 MiB code object is about
//! 400 MiB. A code object small enough that zstd's own parameters stay under
//! the caps (up to 4 MiB) gets exactly the frame plain level 22 gives.

use std::sync::{Condvar, Mutex};

use zstd::zstd_safe::zstd_sys;

/// Bytes the compression contexts and the declared holdings of a process
/// may add up to before a further compression waits. With a split's queue
/// of decoded code objects (64 MiB at most) and the process itself, peak
/// RSS stays under 256 MiB: the 27-target XLA plugin at `zstd:19` peaked at
/// 257 MiB with a budget of 208 MiB.
pub const BUDGET: u64 = 184 << 20;

/// Largest `hashLog` of an ultra level (2^23 entries, 32 MiB).
pub const ULTRA_HASH_LOG_MAX: u32 = 23;
/// Largest `chainLog` of an ultra level (2^24 entries, 64 MiB).
pub const ULTRA_CHAIN_LOG_MAX: u32 = 24;
/// Largest window of an ultra level (32 MiB: the streamed compressor's
/// buffer).
pub const ULTRA_WINDOW_LOG_MAX: u32 = 25;

/// Levels above this are "ultra" (capped).
const ULTRA_FROM: i32 = 20;

#[derive(Default)]
struct Ledger {
    contexts: u64,
    held: u64,
}

static LEDGER: Mutex<Ledger> = Mutex::new(Ledger {
    contexts: 0,
    held: 0,
});
static RETURNED: Condvar = Condvar::new();

fn ledger() -> std::sync::MutexGuard<'static, Ledger> {
    // A poisoned lock (a panic elsewhere) only loses the bound's accuracy.
    LEDGER.lock().unwrap_or_else(|p| p.into_inner())
}

/// The right to run one compression whose context takes `bytes`; returned
/// on drop.
#[derive(Debug)]
pub struct Permit(u64);

impl Drop for Permit {
    fn drop(&mut self) {
        let mut l = ledger();
        l.contexts = l.contexts.saturating_sub(self.0);
        drop(l);
        RETURNED.notify_all();
    }
}

/// Waits until a context of `bytes` fits [`BUDGET`] beside the permits
/// out and the memory held, or no compression runs; takes it.
pub fn permit(bytes: u64) -> Permit {
    let mut l = ledger();
    while l.contexts > 0 && l.contexts + l.held + bytes > BUDGET {
        l = RETURNED.wait(l).unwrap_or_else(|p| p.into_inner());
    }
    l.contexts += bytes;
    Permit(bytes)
}

/// Memory declared by [`hold`]; given back on drop.
#[derive(Debug)]
pub struct Held(u64);

impl Drop for Held {
    fn drop(&mut self) {
        let mut l = ledger();
        l.held = l.held.saturating_sub(self.0);
        drop(l);
        RETURNED.notify_all();
    }
}

/// Declares `bytes` held elsewhere in the process (never waits): further
/// compressions count them against [`BUDGET`].
pub fn hold(bytes: u64) -> Held {
    ledger().held += bytes;
    Held(bytes)
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
    use std::sync::mpsc;
    use std::time::Duration;

    /// A compression that does not fit waits for one to end; the only one
    /// running always runs, whatever it and the held memory take.
    #[test]
    fn a_context_over_the_budget_waits_and_one_always_runs() {
        let big = permit(BUDGET);
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            let _p = permit(1 << 20);
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "a second context started beside a full budget"
        );
        drop(big);
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the waiting context starts once the first is returned");
        t.join().unwrap();
        let held = hold(4 * BUDGET);
        drop(permit(2 * BUDGET));
        drop(held);
    }

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
