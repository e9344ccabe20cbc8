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

/// A `.kpack` with two damaged zstd frames (their content checksums
/// flipped: the headers pass, decoding fails): `kpack inspect` and `kpack
/// unpack` report the first damaged kernel in TOC order, the same message
/// on every run and for any thread count. The first one is large (slow to
/// decode) and the second small and half-way down the TOC, where a second
/// worker starts: reporting whichever failure a thread met first named the
/// second one.
#[test]
fn two_damaged_frames_report_the_first_for_any_thread_count() {
    use rocpack_kpack::{Compression, KpackReader, KpackWriter};
    let tmp = tempdir();
    let mut w = KpackWriter::new(Compression::zstd());
    w.add("k#0", "gfx1100", pseudo_random(1, 12 << 20)).unwrap();
    for i in 1..16u64 {
        let key = format!("k#{i}");
        w.add(&key, "gfx1100", pseudo_random(i + 1, 4096)).unwrap();
    }
    let mut bytes = w.to_vec().unwrap();
    let r = KpackReader::from_bytes(&bytes).unwrap();
    let mut offsets = Vec::new();
    for key in ["k#0", "k#8"] {
        let e = r.entry(key, "gfx1100").unwrap();
        let loc = r.blob_location(e.ordinal).unwrap();
        // The frame's last byte: its content checksum.
        bytes[(loc.offset + loc.size - 1) as usize] ^= 0xff;
        offsets.push(loc.offset);
    }
    drop(r);
    let input = tmp.path().join("damaged.kpack");
    std::fs::write(&input, &bytes).unwrap();
    let mut messages = std::collections::BTreeSet::new();
    for threads in ["1", "2", "3", "4"] {
        for run in 0..4 {
            let out = tmp.path().join(format!("unpacked-{threads}-{run}"));
            for args in [
                vec!["inspect", s(&input)],
                vec!["unpack", s(&input), "--output-dir", s(&out)],
            ] {
                let o = std::process::Command::new(KPACK)
                    .args(&args)
                    .env("RAYON_NUM_THREADS", threads)
                    .output()
                    .unwrap();
                let e = stderr(&o);
                assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
                messages.insert((args[0].to_string(), e));
            }
        }
    }
    assert_eq!(messages.len(), 2, "{messages:#?}");
    for (cmd, e) in &messages {
        assert!(
            e.contains(&offsets[0].to_string()) && !e.contains(&offsets[1].to_string()),
            "{cmd} names the first damaged frame (at {}), not the second (at {}): {e}",
            offsets[0],
            offsets[1]
        );
    }
}
