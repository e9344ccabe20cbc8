//! Parallel work whose failure is reported deterministically: of the items
//! that fail, the one with the lowest index, whatever the number of
//! threads and the order they finish in ([`try_map_ordered`]).

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

/// `f` over `items` on the rayon pool, results in item order. On failure
/// the error of the lowest-index item that fails: items after a failure
/// already seen are skipped (they cannot change the answer), items before
/// it still run, so the reported error never depends on timing. (A plain
/// `collect::<Result<_, _>>()` reports whichever failure a thread met
/// first.)
pub fn try_map_ordered<T, R, E, F>(items: &[T], f: F) -> std::result::Result<Vec<R>, E>
where
    T: Sync,
    R: Send,
    E: Send,
    F: Fn(&T) -> std::result::Result<R, E> + Sync + Send,
{
    let first_failure = AtomicUsize::new(usize::MAX);
    let results: Vec<Option<std::result::Result<R, E>>> = items
        .par_iter()
        .enumerate()
        .map(|(i, item)| {
            if i > first_failure.load(Ordering::Relaxed) {
                return None;
            }
            let r = f(item);
            if r.is_err() {
                first_failure.fetch_min(i, Ordering::Relaxed);
            }
            Some(r)
        })
        .collect();
    // An item is skipped only after a lower one failed: in item order that
    // failure comes first and ends the loop.
    results.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::try_map_ordered;

    #[test]
    fn the_lowest_failure_wins_for_any_thread_count() {
        let items: Vec<u32> = (0..200).collect();
        for threads in [1, 2, 3, 4, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            for _ in 0..20 {
                let r = pool.install(|| {
                    try_map_ordered(&items, |&i| {
                        // The lowest failure is the slowest item.
                        if i == 3 {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                        if i == 3 || i == 150 || i == 199 {
                            Err(i)
                        } else {
                            Ok(i * 2)
                        }
                    })
                });
                assert_eq!(r, Err(3), "{threads} threads");
            }
            let ok = pool.install(|| try_map_ordered(&items, |&i| Ok::<u32, ()>(i + 1)));
            assert_eq!(ok.unwrap(), (1..=200).collect::<Vec<_>>());
        }
    }
}
