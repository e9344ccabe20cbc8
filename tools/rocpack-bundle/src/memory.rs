//! Memory the large buffers of a process hold at once: zstd compression
//! contexts ([`permit`]) and memory declared elsewhere ([`hold`],
//! [`try_hold`]: CCOB decoders and their windows, code objects queued for
//! compression, decoder contexts kept for reuse) share one [`BUDGET`]. A
//! compression that does not fit waits for a permit to be returned, unless
//! no compression runs (one always can). Permits are taken one at a time
//! and their holders never wait for anything, so waiting cannot deadlock;
//! peak memory then does not grow with the number of threads.
//!
//! It lives here, below the compressors (`rocpack-kpack`'s
//! `writer_budget` sizes their contexts), because the decoders of this
//! crate declare what they keep.

use std::sync::{Condvar, Mutex};

/// Bytes the compression contexts and the declared holdings of a process
/// may add up to before a further compression waits, or a [`try_hold`]
/// is refused. With the process itself and the few buffers outside it (a
/// walk's chunk, a code object being decoded), peak RSS stays under
/// 256 MiB at any thread count.
pub const BUDGET: u64 = 184 << 20;

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

impl Ledger {
    /// Whether `bytes` more fit [`BUDGET`] beside everything counted.
    fn fits(&self, bytes: u64) -> bool {
        self.contexts + self.held + bytes <= BUDGET
    }
}

/// The ledger once `bytes` fit [`BUDGET`] or no compression runs (the
/// only one running always may; its holders never wait, so this cannot
/// deadlock).
fn room_for(bytes: u64) -> std::sync::MutexGuard<'static, Ledger> {
    let mut l = ledger();
    while l.contexts > 0 && !l.fits(bytes) {
        l = RETURNED.wait(l).unwrap_or_else(|p| p.into_inner());
    }
    l
}

/// Takes `f`'s bytes off the ledger and wakes the waiters.
fn give_back(f: impl FnOnce(&mut Ledger)) {
    f(&mut ledger());
    RETURNED.notify_all();
}

/// The right to run one compression whose context takes `bytes`; returned
/// on drop.
#[derive(Debug)]
pub struct Permit(u64);

impl Drop for Permit {
    fn drop(&mut self) {
        give_back(|l| l.contexts = l.contexts.saturating_sub(self.0));
    }
}

/// Waits until a context of `bytes` fits [`BUDGET`] beside the permits
/// out and the memory held, or no compression runs; takes it.
pub fn permit(bytes: u64) -> Permit {
    room_for(bytes).contexts += bytes;
    Permit(bytes)
}

/// Memory declared by [`hold`]; given back on drop.
#[derive(Debug)]
pub struct Held(u64);

impl Drop for Held {
    fn drop(&mut self) {
        give_back(|l| l.held = l.held.saturating_sub(self.0));
    }
}

/// Waits, as [`permit`] does, until `bytes` fit [`BUDGET`] beside the
/// permits out and the memory held, or no compression runs; declares them
/// held elsewhere in the process (a decoder's window, before it is
/// allocated): further compressions count them against [`BUDGET`].
pub fn hold(bytes: u64) -> Held {
    room_for(bytes).held += bytes;
    Held(bytes)
}

/// Declares `bytes` held, as [`hold`] does, only if they fit [`BUDGET`]
/// beside the permits out and the memory already held (never waits):
/// memory that can be spent another way (a code object queued for another
/// thread, which its own thread can compress instead) is spent only within
/// the budget.
pub fn try_hold(bytes: u64) -> Option<Held> {
    let mut l = ledger();
    l.fits(bytes).then(|| {
        l.held += bytes;
        Held(bytes)
    })
}

/// Makes the process give buffers of a MiB or more (code objects, zstd
/// windows and contexts) back to the system when they are freed, so that
/// peak RSS follows this ledger. glibc otherwise raises its mmap threshold
/// to the largest block freed so far (up to 32 MiB) and keeps later blocks
/// of that size in per-thread arenas: a split at `zstd:19` with 8 workers
/// held 65 MiB more than was ever in use at once. It costs fresh pages for
/// fresh buffers (at level 3, 25-40 % more system time), so it is for
/// high compression levels, where compressing dominates. Process-wide:
/// for binaries, before they start threads; no effect off glibc.
#[allow(unsafe_code)]
pub fn return_large_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's tuning.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
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
        assert!(
            try_hold(1).is_none(),
            "memory over the budget was declared held"
        );
        drop(held);
    }

    /// Memory declared beside running compressions waits for room as a
    /// context does (a decoder's window is not allocated over the budget);
    /// memory that can be spent another way is refused instead.
    #[test]
    fn a_hold_waits_for_room_and_a_try_hold_is_refused() {
        let running = permit(BUDGET - (1 << 20));
        assert!(try_hold(2 << 20).is_none(), "declared beside a full budget");
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            let _h = hold(2 << 20);
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "a window was declared beside a full budget"
        );
        drop(running);
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the window is declared once the compression ends");
        t.join().unwrap();
    }
}
