#![no_main]
//! Target ID parsing and ISA matching: total, and Display round-trips.

use rocpack_bundle::{compatible_targets, isa_matches, TargetId};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let (a, b) = s.split_once('\n').unwrap_or((s, "gfx942:sramecc+:xnack-"));
    if let Ok(t) = TargetId::parse(a) {
        assert_eq!(t.to_string(), a);
        let _ = (
            t.arch(),
            t.features(),
            t.is_host(),
            t.is_generic(),
            t.generic_covers(),
        );
        let c = compatible_targets(&t);
        assert!(c.len() <= 2 << rocpack_bundle::MAX_FEATURES);
        if let Ok(d) = TargetId::parse(b) {
            let m = isa_matches(&t, &d);
            // matching agrees with the runtime's candidate list for canonical spellings
            if m && !t.is_generic() {
                assert!(!t.arch().is_empty());
            }
        }
    }
});
