//! Inputs the `pe` fuzz target (tools/fuzz/fuzz_targets/pe.rs) found, kept
//! in `tests/data/`, each checked against the property it broke. They need
//! no fixtures.

use std::path::PathBuf;

use rocpack_image::elf::State;
use rocpack_image::pe;

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// CI's 20-fuzz.sh: an image with bundles in `.hip_fat` but no wrapper
/// section (its `.hipFatB` header renamed `.hipFa`) analysed as fat, the
/// split "succeeded" and its output analysed as host-only, not split: a
/// host-only image whose device code nothing could find again. The split
/// now refuses it, naming the bundle section.
#[test]
fn bundles_without_wrappers_are_refused_not_split_into_a_host_only_image() {
    let fat = data("fuzz-pe-bundles-without-wrappers.dll");
    let info = pe::analyze(&fat).unwrap();
    assert_eq!(info.state, State::Fat);
    assert!(info.has_device_code() && info.wrappers.is_empty());
    let e = pe::split_host(&fat, b"fuzz-marker").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("`.hip_fat` holds 1 bundle(s)") && msg.contains("no wrapper section"),
        "{msg}"
    );
    assert_eq!(
        e.offset(),
        Some(info.sections[info.fatbin.unwrap().index].header_offset)
    );
    // Through the seam too.
    let e = rocpack_image::split_file(&fat, &mut |_, _| Ok(b"fuzz-marker".to_vec())).unwrap_err();
    assert!(e.to_string().contains("no wrapper section"), "{e}");
}

/// A split image (from the fuzz corpus) whose `.hip_fat` claims a
/// VirtualSize of 4 GiB: reassembly allocated it all (libFuzzer: malloc of
/// 4,290,661,824 bytes). Refused now, before any allocation.
#[test]
fn reassembly_of_a_4_gib_bundle_section_is_refused() {
    let host = data("fuzz-pe-reassemble-4gib-section.dll");
    let info = pe::analyze(&host).unwrap();
    assert_eq!(info.state, State::Split);
    let e = pe::reassemble(&host, &[b"__CLANG_OFFLOAD_BUNDLE__".to_vec()]).unwrap_err();
    assert!(e.to_string().contains("VirtualSize 0xffbe4dc0"), "{e}");
}

/// A split image whose FileAlignment is 0x61706b2e: reassembly padded the
/// bundle section to it (libFuzzer: malloc of 1.6 GB). FileAlignment must
/// be a power of two of at most 64 KiB to be rewritten.
#[test]
fn reassembly_with_an_absurd_file_alignment_is_refused() {
    let host = data("fuzz-pe-reassemble-huge-file-alignment.dll");
    assert_eq!(pe::analyze(&host).unwrap().state, State::Split);
    let e = pe::reassemble(&host, &[b"__CLANG_OFFLOAD_BUNDLE__".to_vec()]).unwrap_err();
    assert!(e.to_string().contains("FileAlignment 0x61706b2e"), "{e}");
}
