//! `reassembly_fits` is typed: only bundles that do not fit the room the
//! split left are `Fit::DoesNotFit`; any other fault of the host is an
//! error (`Error::DoesNotFit` is the one error it answers for).

mod common;

use common::*;
use rocpack_elf::{reassemble, reassembly_fits, split_host, Error, Fit};

/// The split host and original bundle sizes of fixture `name`.
fn split(name: &str) -> (Vec<u8>, Vec<u64>) {
    let p = fixtures().join("fatbins").join(name);
    let fat = std::fs::read(&p).unwrap();
    let lens = bundles_of(&fat).iter().map(|b| b.len() as u64).collect();
    (split_host(&fat, &marker_for(&p)).unwrap(), lens)
}

#[test]
fn fits_and_does_not_fit() {
    if !have_fixtures() {
        return;
    }
    let (host, lens) = split("libfx_multi.so");
    assert_eq!(reassembly_fits(&host, &lens).unwrap(), Fit::Fits);
    let huge: Vec<u64> = lens.iter().map(|l| l + (64 << 20)).collect();
    assert_eq!(reassembly_fits(&host, &huge).unwrap(), Fit::DoesNotFit);
}

/// What `reassembly_fits` calls does-not-fit is what the reassembly itself
/// fails with: `Error::DoesNotFit`, not a generic layout error.
#[test]
fn reassembly_of_bundles_that_do_not_fit_is_does_not_fit() {
    if !have_fixtures() {
        return;
    }
    let (host, lens) = split("libfx_multi.so");
    let huge: Vec<Vec<u8>> = lens
        .iter()
        .map(|&l| vec![0u8; l as usize + (1 << 20)])
        .collect();
    match reassemble(&host, &huge) {
        Err(Error::DoesNotFit { .. }) => {}
        other => panic!("expected DoesNotFit, got {:?}", other.map(|v| v.len())),
    }
}
