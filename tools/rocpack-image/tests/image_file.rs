//! `ImageFile` (analysis from positioned reads of the bytes the analysis
//! needs) gives what `analyze` of the whole file gives, on every ELF,
//! archive, PE and COFF fixture, fat and split, and on the malformed
//! inputs the fuzzers found; it reads a small part of a file; a FIFO is
//! refused without waiting and a file truncated after opening is an error.

use std::path::{Path, PathBuf};

use rocpack_image::{analyze, FileType, ImageFile};
use rocpack_testsupport as ts;

const MARKER: &[u8] = b"\x82\xa5hello-marker-payload-for-tests";

fn same_as_whole(path: &Path) -> (u64, u64) {
    let data = std::fs::read(path).unwrap();
    let f = ImageFile::open(path).unwrap();
    let what = path.display();
    match f.file_type() {
        FileType::Archive => {
            let whole = rocpack_image::elf::archive_members(&data).map(|ms| {
                ms.into_iter()
                    .filter(|m| matches!(rocpack_image::detect(m.data), FileType::Elf { .. }))
                    .map(|m| {
                        (
                            m.name.clone(),
                            rocpack_image::elf::analyze(m.data).map_err(|e| e.to_string()),
                        )
                    })
                    .collect::<Vec<_>>()
            });
            let sparse = f.members().unwrap().map(|ms| {
                ms.into_iter()
                    .map(|(m, i)| (m.name.clone(), i.map_err(|e| e.to_string())))
                    .collect::<Vec<_>>()
            });
            assert_eq!(
                whole.map_err(|e| e.to_string()),
                sparse.map_err(|e| e.to_string()),
                "{what}"
            );
        }
        _ => {
            let whole = analyze(&data).map_err(|e| e.to_string());
            let sparse = f.analyze().unwrap().map_err(|e| e.to_string());
            assert_eq!(whole, sparse, "{what}");
        }
    }
    (f.loaded(), f.len())
}

fn split_copy(src: &Path, dir: &Path) -> Option<PathBuf> {
    let data = std::fs::read(src).unwrap();
    let out = rocpack_image::split_file(&data, &mut |_, _| Ok(MARKER.to_vec())).ok()?;
    (out != data).then(|| {
        let p = dir.join(format!(
            "{}.split",
            src.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&p, out).unwrap();
        p
    })
}

fn check_dir(dir: &Path, tmp: &Path) -> usize {
    let mut n = 0;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for p in files {
        same_as_whole(&p);
        n += 1;
        if let Some(s) = split_copy(&p, tmp) {
            same_as_whole(&s);
            n += 1;
        }
    }
    n
}

#[test]
fn elf_and_archive_fixtures_analyse_as_from_the_whole_file() {
    ts::require_fixtures();
    let t = ts::tempdir();
    let n = check_dir(&ts::fatbins(), t.path());
    assert!(n >= 20, "{n} files checked");
    // The largest fixture: only headers, tables and wrappers are read.
    let (loaded, len) = same_as_whole(&ts::fatbins().join("libfx_multi.so"));
    assert!(loaded * 4 < len, "{loaded} of {len} bytes read");
}

#[test]
fn pe_fixtures_and_fuzz_inputs_analyse_as_from_the_whole_file() {
    let t = ts::tempdir();
    let n = check_dir(&ts::win_fixtures().join("fatbins-win"), t.path());
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let m = check_dir(&data, t.path());
    assert!(n >= 8 && m >= 1, "{n} PE fixtures, {m} fuzz inputs checked");
}

#[test]
fn fifo_refused_and_truncation_detected() {
    let t = ts::tempdir();
    let fifo = t.path().join("fifo");
    ts::mkfifo(&fifo);
    let e = ImageFile::open(&fifo).err().expect("a FIFO is refused");
    assert!(e.to_string().contains("not a regular file"), "{e}");
    ts::require_fixtures();
    let p = t.path().join("lib.so");
    std::fs::copy(ts::fatbins().join("libfx_multi.so"), &p).unwrap();
    let f = ImageFile::open(&p).unwrap();
    let len = f.len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let e = f.analyze().expect_err("truncated under us");
    assert!(e.to_string().contains("changed while it was read"), "{e}");
}

/// `splits_device_code`: one answer for ELF files, archives and PE images
/// (what `split-wheel` asks of every file it may split).
#[test]
fn splits_device_code_for_every_splittable_type() {
    if !ts::have_fixtures() {
        return;
    }
    let fat = ts::fatbins();
    for (name, want) in [
        ("libfx_multi.so", true),
        ("fx_app", true),
        ("libfx_hostonly.so", false),
        ("libfx_static.a", true),
    ] {
        let f = ImageFile::open(&fat.join(name)).unwrap();
        assert!(f.file_type().is_splittable(), "{name}");
        assert_eq!(f.splits_device_code().unwrap(), want, "{name}");
    }
    for (name, want, splittable) in [
        ("fx_win_msvc.dll", true, true),
        ("fx_win_kern.obj", false, false),
    ] {
        let p = ts::win_fatbin(name);
        if p.exists() {
            let f = ImageFile::open(&p).unwrap();
            assert_eq!(f.file_type().is_splittable(), splittable, "{name}");
            assert_eq!(f.splits_device_code().unwrap(), want, "{name}");
        }
    }
}

/// The units a split rewrites, one call for every type: the file itself
/// for ELF files and PE images, each ELF member of an archive (with its
/// range in the file), none for a COFF object; `rocpack_image::units` of
/// the bytes in memory gives the same members at the same offsets, and
/// their analysis is the same.
#[test]
fn units_of_every_type_and_of_the_bytes_in_memory() {
    if !ts::have_fixtures() {
        return;
    }
    let fat = ts::fatbins();
    let mut paths = vec![
        (fat.join("libfx_multi.so"), 1),
        (fat.join("libfx_static.a"), 3),
    ];
    let win = ts::win_fatbin("fx_win_msvc.dll");
    if win.exists() {
        paths.push((win, 1));
        paths.push((ts::win_fatbin("fx_win_kern.obj"), 0));
    }
    for (path, n) in paths {
        let what = path.display();
        let f = ImageFile::open(&path).unwrap();
        let units = f.units().unwrap().unwrap();
        assert_eq!(units.len(), n, "{what}");
        let data = std::fs::read(&path).unwrap();
        let in_memory = rocpack_image::units(&data).unwrap();
        for u in &units {
            let a = u.analysis.as_ref().unwrap();
            let (at, len) = u.range;
            let m = in_memory
                .iter()
                .find(|m| m.offset == at)
                .unwrap_or_else(|| panic!("{what}: no unit at {at}"));
            assert_eq!(m.data.len() as u64, len, "{what}");
            assert_eq!(
                m.member.as_ref().map(|m| m.name.clone()),
                u.member,
                "{what}"
            );
            assert_eq!(&m.analyze(&data.as_slice()).unwrap(), a, "{what}");
            if u.member.is_none() {
                assert_eq!((at, len), (0, data.len() as u64), "{what}");
            }
        }
    }
}

/// An archive member that is no ELF object is `NotAnImage` (split keeps
/// it, or refuses it when it carries device code), and an error about a
/// member names it.
#[test]
fn a_member_that_is_not_elf_is_not_an_image() {
    let body = b"just text\n";
    let mut ar = b"!<arch>\n".to_vec();
    ar.extend_from_slice(
        format!(
            "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
            "notes.txt/",
            0,
            0,
            0,
            644,
            body.len()
        )
        .as_bytes(),
    );
    ar.extend_from_slice(body);
    let units = rocpack_image::units(&ar).unwrap();
    assert_eq!(units.len(), 1);
    let u = &units[0];
    assert_eq!(u.member.as_ref().unwrap().name, "notes.txt");
    assert_eq!(u.offset, 68);
    let e = u.analyze(&ar.as_slice()).unwrap_err();
    assert!(
        matches!(e, rocpack_image::Error::NotAnImage("unknown")),
        "{e:?}"
    );
    let e = u.error(e);
    assert_eq!(
        e.to_string(),
        "archive member `notes.txt` at offset 0x8: not an ELF file, ar archive, PE image or COFF object (unknown)"
    );
}
