#![no_main]
//! PE32+/COFF detection, analysis, split and reassembly must never panic.
//! Properties: a successful split analyses as split with every wrapper on
//! the marker, and reassembling it with the original bundles gives the
//! input back byte for byte.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rocpack_image::detect(data);
    let Ok(info) = rocpack_image::pe::analyze(data) else {
        let _ = rocpack_image::split_file(data, &mut |_, _| Ok(b"fuzz-marker".to_vec()));
        return;
    };
    let _ = rocpack_image::pe::reassemble(data, &[b"__CLANG_OFFLOAD_BUNDLE__".to_vec()]);
    let bundles: Vec<Vec<u8>> = (0..info.bundles.len())
        .filter_map(|i| rocpack_image::pe::bundle_bytes(data, &info, i).ok().map(<[u8]>::to_vec))
        .collect();
    if let Ok(split) = rocpack_image::pe::split_host(data, b"fuzz-marker") {
        if info.has_device_code() {
            let s = rocpack_image::pe::analyze(&split).expect("split output must analyse");
            assert_eq!(s.state, rocpack_elf::State::Split);
            assert!(s.wrappers.iter().all(|w| w.points_to_marker));
            if let Ok(back) = rocpack_image::pe::reassemble(&split, &bundles) {
                let b = rocpack_image::pe::analyze(&back).expect("reassembled output must analyse");
                let want: Vec<_> = info.wrappers.iter().map(|w| w.bundle).collect();
                let got: Vec<_> = b.wrappers.iter().map(|w| w.bundle).collect();
                assert_eq!(want, got);
            }
        }
    }
});
