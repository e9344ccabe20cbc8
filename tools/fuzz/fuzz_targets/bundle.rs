#![no_main]
//! Any bytes as a `.hip_fatbin` section and as a bundle: errors are fine,
//! panics and over-sized allocations are not. The streaming reader
//! (`index_bundle` + `walk_bundle`, what inspect, unbundle and split use)
//! agrees with the in-memory parser: what one accepts the other accepts,
//! with the same code objects.

use rocpack_bundle::{find_bundles, index_bundle, parse_bundle_with, walk_bundle, ParseOptions};

/// Streamed bytes per entry, compared by length and FNV-1a (no copy, so
/// overlapping entries cost no memory here).
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}
const FNV0: u64 = 0xcbf2_9ce4_8422_2325;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let opts = ParseOptions {
        verify_hash: true,
        max_decompressed_size: 1 << 24,
        ..Default::default()
    };
    let parsed = parse_bundle_with(data, &opts);
    if let Ok(b) = &parsed {
        assert!(b.len as usize <= data.len());
        for e in &b.entries {
            assert_eq!(e.data.len() as u64, e.size);
            assert_eq!(
                rocpack_bundle::TargetId::parse(e.id.as_str()).ok().as_ref(),
                Some(&e.id)
            );
        }
    }
    // The streaming reader; entries summing to more than 64 MiB (overlaps
    // feed shared bytes once per entry) are only indexed, to bound time.
    let index = index_bundle(data, &opts);
    if let Ok(idx) = &index {
        let total: u64 = idx.entries.iter().map(|e| e.size).sum();
        if total <= 64 << 20 {
            let mut got = vec![(0u64, FNV0); idx.entries.len()];
            let walked = walk_bundle::<rocpack_bundle::Error>(
                data,
                idx,
                &opts,
                &mut |_| Ok(()),
                &mut |i, at, chunk| {
                    assert_eq!(at, got[i].0, "entry {i} chunks out of order");
                    got[i] = (at + chunk.len() as u64, fnv(got[i].1, chunk));
                    Ok(())
                },
            );
            match (&parsed, walked) {
                (Ok(b), Ok(_)) => {
                    assert_eq!(b.entries.len(), got.len());
                    for (e, g) in b.entries.iter().zip(&got) {
                        assert_eq!((e.size, fnv(FNV0, &e.data)), *g, "{}", e.id);
                    }
                }
                (Ok(_), Err(e)) => panic!("parsed in memory, but the walk failed: {e}"),
                (Err(e), Ok(_)) => panic!("walked, but the in-memory parse failed: {e}"),
                (Err(_), Err(_)) => {}
            }
        }
    } else if let (Ok(_), Err(e)) = (&parsed, &index) {
        panic!("parsed in memory, but index_bundle failed: {e}");
    }
    if let Ok(spans) = find_bundles(data) {
        let mut prev_end = 0;
        for s in spans {
            assert!(s.offset >= prev_end);
            prev_end = s.offset + s.len;
            assert!(prev_end <= data.len() as u64);
            let _ = parse_bundle_with(&data[s.offset as usize..], &opts);
        }
    }
});
