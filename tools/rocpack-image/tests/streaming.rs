//! The streaming operations of the seam: `analyze_in` (headers through a
//! slice, bundles through positioned reads) and `split_to` (written range
//! by range) give, for ELF files and PE32+ images alike, what the
//! in-memory `analyze` and `split_file` give.

use rocpack_image::{analyze, analyze_in, split_file, split_to};
use rocpack_testsupport::{fatbins, have_fixtures, win_fatbin};

fn check(path: &std::path::Path) {
    let what = path.display();
    let fat = std::fs::read(path).unwrap();
    let src: &[u8] = &fat;
    let info = analyze_in(&fat, &src).unwrap();
    assert_eq!(info, analyze(&fat).unwrap(), "{what}");
    assert!(info.has_device_code(), "{what}");
    let marker = b"marker payload".to_vec();
    let want = split_file(&fat, &mut |_, _| Ok(marker.clone())).unwrap();
    let dst = tempfile::tempfile().unwrap();
    let n = split_to(&fat, &src, &info, &marker, &dst).unwrap();
    let mut got = vec![0u8; n as usize];
    std::os::unix::fs::FileExt::read_exact_at(&dst, &mut got, 0).unwrap();
    assert_eq!(n, want.len() as u64, "{what}");
    assert!(got == want, "{what}: split_to differs from split_file");
}

#[test]
fn elf_and_pe_stream_as_they_split_in_memory() {
    if !have_fixtures() {
        return;
    }
    check(&fatbins().join("libfx_multi.so"));
    check(&fatbins().join("libfx_rdc.so"));
    for pe in ["fx_win_msvc.dll", "fx_win_lld.dll"] {
        let p = win_fatbin(pe);
        if p.exists() {
            check(&p);
        }
    }
}

#[test]
fn analyze_in_refuses_what_is_not_an_image() {
    let data = b"!<arch>\n".to_vec();
    let src: &[u8] = &data;
    assert!(matches!(
        analyze_in(&data, &src),
        Err(rocpack_image::Error::NotAnImage(_))
    ));
}
