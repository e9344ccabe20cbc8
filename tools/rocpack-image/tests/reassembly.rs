//! `Reassembly`: one dispatch for ELF and PE hosts; "does not fit" is the
//! typed `Fit::DoesNotFit`, asked before anything is written.

use rocpack_image::{Fit, Form, Reassembly};
use rocpack_testsupport::{fatbins, have_fixtures, win_fatbin};

/// The split host of `fat` and the sizes of its original bundles.
fn split_with_lens(fat: &[u8]) -> (Vec<u8>, Vec<u64>) {
    let info = rocpack_image::analyze(fat).unwrap();
    let lens = (0..info.bundles().len())
        .map(|i| rocpack_image::bundle_bytes(fat, &info, i).unwrap().len() as u64)
        .collect();
    // The marker payload is opaque to the image crate.
    let marker = b"marker payload".to_vec();
    let host = rocpack_image::split_file(fat, &mut |_, _| Ok(marker.clone())).unwrap();
    (host, lens)
}

fn check(fat: &[u8], what: &str) {
    let (host, lens) = split_with_lens(fat);
    let src: &[u8] = &host;
    let r = Reassembly::open(&host, &src).unwrap();
    assert_eq!(r.form(), Form::Split, "{what}");
    assert_eq!(r.fits(&lens).unwrap(), Fit::Fits, "{what}");
    let huge: Vec<u64> = lens.iter().map(|l| l + (64 << 20)).collect();
    assert_eq!(r.fits(&huge).unwrap(), Fit::DoesNotFit, "{what}");
    // Smaller bundles (one target's archive, bundles compressed harder)
    // go where the larger ones were.
    for small in [
        lens.iter().map(|l| l / 3).collect::<Vec<u64>>(),
        vec![1; lens.len()],
    ] {
        assert_eq!(r.fits(&small).unwrap(), Fit::Fits, "{what}: {small:?}");
    }
    // The unsplit file is copied.
    let r = Reassembly::open(fat, &fat).unwrap();
    assert_eq!(r.form(), Form::Unchanged, "{what}");
}

#[test]
fn elf_and_pe_say_whether_bundles_fit() {
    if !have_fixtures() {
        return;
    }
    check(
        &std::fs::read(fatbins().join("libfx_multi.so")).unwrap(),
        "ELF",
    );
    let pe = win_fatbin("fx_win_msvc.dll");
    if pe.exists() {
        check(&std::fs::read(pe).unwrap(), "PE");
    }
}
