#![no_main]
//! Any bytes as a `.hip_fatbin` section and as a bundle: errors are fine,
//! panics and over-sized allocations are not.

use rocpack_bundle::{find_bundles, parse_bundle_with, ParseOptions};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let opts = ParseOptions {
        verify_hash: true,
        max_decompressed_size: 1 << 24,
        ..Default::default()
    };
    if let Ok(b) = parse_bundle_with(data, &opts) {
        assert!(b.len as usize <= data.len());
        for e in &b.entries {
            assert_eq!(e.data.len() as u64, e.size);
            assert_eq!(
                rocpack_bundle::TargetId::parse(e.id.as_str()).ok().as_ref(),
                Some(&e.id)
            );
        }
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
