#![no_main]
//! `.rocm_kpack_ref` payload: both decoders are total, and whatever decodes
//! re-encodes to something that decodes (strictly) to the same marker.

use rocpack_kpack::{compatible_targets, Marker};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = Marker::decode_strict(data);
    if let Ok(m) = Marker::decode(data) {
        let enc = m.encode();
        assert_eq!(Marker::decode_strict(&enc).expect("re-encoded marker"), m);
        let _ = m.lookup_key(u64::from(data.len() as u32));
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let t = compatible_targets(s);
        assert!(!t.is_empty() && t.len() <= 1 << 16);
    }
});
