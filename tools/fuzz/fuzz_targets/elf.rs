#![no_main]
//! ELF / ar analysis, split and reassembly must never panic. Properties:
//! a successful split analyses as split with every wrapper on the marker,
//! and reassembling it with the original bundles gives back a fat binary
//! whose wrappers point at the same bundles.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rocpack_elf::archive_members(data);
    let Ok(info) = rocpack_elf::analyze(data) else {
        let _ = rocpack_elf::split_file(data, &mut |_, _| Ok(b"fuzz-marker".to_vec()));
        return;
    };
    let _ = rocpack_elf::reassemble(data, &[b"__CLANG_OFFLOAD_BUNDLE__".to_vec()]);
    let bundles: Vec<Vec<u8>> = (0..info.bundles.len())
        .filter_map(|i| {
            rocpack_elf::bundle_bytes(data, &info, i)
                .ok()
                .map(<[u8]>::to_vec)
        })
        .collect();
    if let Ok(split) = rocpack_elf::split_host(data, b"fuzz-marker") {
        if info.has_device_code() {
            let s = rocpack_elf::analyze(&split).expect("split output must analyse");
            assert_eq!(s.state, rocpack_elf::State::Split);
            assert!(s.wrappers.iter().all(|w| w.points_to_marker));
            if let Ok(back) = rocpack_elf::reassemble(&split, &bundles) {
                let b = rocpack_elf::analyze(&back).expect("reassembled output must analyse");
                let want: Vec<_> = info.wrappers.iter().map(|w| w.bundle).collect();
                let got: Vec<_> = b.wrappers.iter().map(|w| w.bundle).collect();
                assert_eq!(want, got);
            }
        }
    }
});
