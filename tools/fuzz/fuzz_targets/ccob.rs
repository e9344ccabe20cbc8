#![no_main]
//! CCOB headers and payloads: the input after a forced `CCOB` magic.

use rocpack_bundle::{decompress_ccob, parse_bundle_with, ParseOptions};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut buf = Vec::with_capacity(data.len() + 4);
    buf.extend_from_slice(b"CCOB");
    buf.extend_from_slice(data);
    let opts = ParseOptions {
        verify_hash: data.first().is_some_and(|b| b & 1 == 1),
        max_decompressed_size: 1 << 24,
        ..Default::default()
    };
    if let Ok((h, used, payload)) = decompress_ccob(&buf, &opts) {
        assert!(used as usize <= buf.len());
        assert_eq!(payload.len() as u64, h.uncompressed_size);
    }
    let _ = parse_bundle_with(&buf, &opts);
});
