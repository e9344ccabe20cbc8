#![no_main]
//! Packaging config parser + family selection: never panics, and a config
//! that parses always satisfies its documented invariants.

use std::path::Path;

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::select::{select_family, Target};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(cfg) = PackagingConfig::parse(data, Path::new("fuzz.json")) else {
        return;
    };
    assert!(!cfg.architecture_groups.is_empty());
    for g in &cfg.architecture_groups {
        assert!(!g.architectures.is_empty());
        assert!(g.name != "generic" && !g.name.contains('/'));
        for a in &g.architectures {
            let t = Target::parse(a).expect("validated arch parses");
            // No other group arch is compatible with this one.
            let claims = cfg.groups_for_arch(&t);
            assert_eq!(claims.len(), 1, "{a} claimed by several groups");
            let sel = select_family(&cfg, a).expect("a listed arch selects its group");
            assert_eq!(sel.group, g.name);
        }
    }
    // Arbitrary agent strings taken from the input never panic.
    if let Ok(text) = std::str::from_utf8(data) {
        for word in text.split(|c: char| c == '"' || c.is_whitespace()).take(32) {
            let _ = select_family(&cfg, word);
        }
    }
});
