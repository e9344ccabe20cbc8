//! Hardening item 12: messages. A directory given as FILE says it is a
//! directory (not "cannot map: No such device"); a FIFO is refused at once
//! (no hang) by every command that reads a FILE; the OS error is said once;
//! errors name the user's paths, never a staging path. Also the
//! `.kpack`-unbundle regression: kernels are written with their bytes (they
//! were written empty).

mod common;
use common::*;

#[test]
fn directories_and_fifos_given_as_file_say_what_they_are() {
    let tmp = tempdir();
    let t = tmp.path();
    let dir = t.join("d");
    std::fs::create_dir(&dir).unwrap();
    let fifo = t.join("f");
    mkfifo(&fifo);
    let out = t.join("o");
    for (file, needle) in [(&dir, "a directory"), (&fifo, "FIFO")] {
        for args in [
            vec!["inspect", s(file)],
            vec!["unbundle", s(file), "--output-dir", s(&out)],
            vec!["unpack", s(file), "--output-dir", s(&out)],
        ] {
            let o = kpack_bounded(&args);
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
            assert!(e.contains(needle), "{args:?}: {e}");
            assert!(e.contains(s(file)), "{args:?}: {e}");
            assert!(!e.contains("No such device"), "{args:?}: {e}");
            assert!(!out.exists(), "{args:?}");
        }
    }
}

#[test]
fn os_errors_are_said_once_and_name_user_paths() {
    let tmp = tempdir();
    let t = tmp.path();
    let missing = t.join("missing.so");
    for args in [
        vec!["inspect", s(&missing)],
        vec!["unpack", s(&missing), "--output-dir", "x"],
    ] {
        let o = kpack_bounded(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert_eq!(e.matches("No such file or directory").count(), 1, "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // unbundle into a path whose parent is a regular file: the message
    // names that path, not a staging directory.
    let input = golden("test_zstd.kpack");
    let file = t.join("plain");
    std::fs::write(&file, b"x").unwrap();
    let out = file.join("sub");
    let o = kpack_bounded(&["unbundle", s(&input), "--output-dir", s(&out)]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains(s(&file)), "{e}");
    assert!(!e.contains(".kpack-unbundle-"), "{e}");
    assert!(!e.contains(".partial-"), "{e}");
}

#[test]
fn unbundle_of_a_kpack_writes_each_kernel_with_its_bytes() {
    let tmp = tempdir();
    for name in ["test_zstd.kpack", "test_noop.kpack"] {
        let input = golden(name);
        let r = rocpack_kpack::KpackReader::open(&input).unwrap();
        let out = tmp.path().join(name);
        let o = kpack_bounded(&["unbundle", s(&input), "--output-dir", s(&out)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let listing = String::from_utf8(o.stdout).unwrap();
        assert_eq!(listing.lines().count(), r.len());
        for line in listing.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            let bytes = std::fs::read(f[0]).unwrap();
            assert_eq!(f[2], bytes.len().to_string(), "{line}");
            assert!(!bytes.is_empty(), "{line}");
            assert_eq!(f[3], sha256_hex(&bytes), "{line}");
        }
        // Same bytes as the reader gives (an independent path).
        let mut want: Vec<Vec<u8>> = r
            .entries()
            .iter()
            .map(|e| r.get_entry(e).unwrap().into_owned())
            .collect();
        let mut got: Vec<Vec<u8>> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{name}");
    }
}
