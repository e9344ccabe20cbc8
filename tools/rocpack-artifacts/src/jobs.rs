//! Worker counts. `--jobs N` is a request: more threads than a machine can
//! run only add scheduling load (100,000 asked for once started thousands of
//! threads on 2 cores), so every pool is capped at [`limit`] and the CLI says
//! when it reduced a request.

/// Hard upper bound on worker threads, whatever the machine.
pub const MAX_JOBS: usize = 256;

/// Workers per CPU allowed above the CPU count (I/O-bound phases overlap).
pub const PER_CPU: usize = 4;

/// The most worker threads a pool gets on this machine:
/// `PER_CPU` × CPUs available to this process, at most [`MAX_JOBS`].
pub fn limit() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.saturating_mul(PER_CPU).clamp(1, MAX_JOBS)
}

/// `requested` workers capped at [`limit`] (and at least 1), with a note
/// saying so when the request was reduced.
pub fn cap(requested: usize) -> (usize, Option<String>) {
    let lim = limit();
    if requested > lim {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        (
            lim,
            Some(format!(
                "--jobs {requested} reduced to {lim} ({PER_CPU} per CPU, {cpus} CPU(s) available, at most {MAX_JOBS})"
            )),
        )
    } else {
        (requested.max(1), None)
    }
}

/// A thread pool of `jobs` workers (capped by [`cap`]; `None`: one per
/// CPU, rayon's default).
pub fn pool(jobs: Option<usize>) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = jobs {
        b = b.num_threads(cap(n).0);
    }
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_capped() {
        let lim = limit();
        assert!((1..=MAX_JOBS).contains(&lim));
        assert_eq!(cap(1), (1, None));
        assert_eq!(cap(0), (1, None));
        let (n, note) = cap(100_000);
        assert_eq!(n, lim);
        assert!(note.unwrap().contains("--jobs 100000 reduced to"));
        assert_eq!(pool(Some(usize::MAX)).unwrap().current_num_threads(), lim);
    }
}
