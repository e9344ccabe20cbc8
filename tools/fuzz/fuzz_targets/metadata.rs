#![no_main]
//! metadata.txt parser: never panics; whatever parses renders and re-parses to the same value.

use rocpack_snapshot::metadata::Metadata;
use std::path::Path;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = Metadata::parse(Path::new("metadata.txt"), text) {
        let again = Metadata::parse(Path::new("metadata.txt"), &m.render())
            .expect("rendered metadata parses");
        assert_eq!(again, m);
    }
});
