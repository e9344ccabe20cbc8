//! Writer behaviour: ordinals, TOC grouping, metadata, determinism across
//! thread counts, streaming into an existing stream, unpacked directories.

use std::io::{Cursor, Write};

use rocpack_kpack::{
    unpack_to_dir, Compression, ErrorKind, KpackReader, KpackStreamWriter, KpackWriter,
    UnpackManifest, UNPACK_MANIFEST,
};
use rocpack_testsupport::pseudo_random;

#[test]
fn interleaved_adds_group_by_binary_in_first_insertion_order() {
    let mut w = KpackWriter::new(Compression::None);
    assert_eq!(w.add("b#0", "gfx900", b"1".as_slice()).unwrap(), 0);
    assert_eq!(w.add("a#0", "gfx900", b"22".as_slice()).unwrap(), 1);
    assert_eq!(w.add("b#0", "gfx906", b"333".as_slice()).unwrap(), 2);
    let r = KpackReader::from_vec(w.to_vec().unwrap()).unwrap();
    let v: Vec<(&str, &str, u32)> = r
        .entries()
        .iter()
        .map(|e| (e.key.as_str(), e.target.as_str(), e.ordinal))
        .collect();
    assert_eq!(
        v,
        [
            ("b#0", "gfx900", 0),
            ("b#0", "gfx906", 2),
            ("a#0", "gfx900", 1)
        ]
    );
    // Defaults: arches = targets in first-added order; family empty for several.
    assert_eq!(r.gfx_arches(), ["gfx900", "gfx906"]);
    assert_eq!(r.gfx_arch_family(), "");
    assert_eq!(r.group_name(), "");
    // Rebuilding from the reader reproduces it.
    assert_eq!(
        r.to_writer(Compression::None).unwrap().to_vec().unwrap(),
        r.bytes()
    );
}

#[test]
fn duplicates_and_backslashes() {
    let mut w = KpackWriter::new(Compression::None);
    w.add("lib\\x.so#0", "gfx900", b"1".as_slice()).unwrap();
    let e = w.add("lib/x.so#0", "gfx900", b"1".as_slice()).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Duplicate { .. }), "{e}");
    let r = KpackReader::from_vec(w.to_vec().unwrap()).unwrap();
    assert_eq!(r.entries()[0].key, "lib/x.so#0");
    let mut s = KpackStreamWriter::new(Cursor::new(Vec::new()), Compression::None).unwrap();
    s.add("k#0", "gfx900", b"x").unwrap();
    assert!(s.add("k#0", "gfx900", b"y").is_err());
    assert!(
        s.add_frame("k#1", "gfx900", 1, b"x", None).is_err(),
        "add_frame needs zstd"
    );
}

#[test]
fn single_arch_defaults_family() {
    let mut w = KpackWriter::new(Compression::zstd());
    w.group_name("hip_lib");
    w.add("k#0", "gfx942:sramecc+:xnack-", pseudo_random(1, 5000))
        .unwrap();
    let r = KpackReader::from_vec(w.to_vec().unwrap()).unwrap();
    assert_eq!(r.arch(), Some("gfx942:sramecc+:xnack-"));
    assert_eq!(r.gfx_arch_family(), "gfx942:sramecc+:xnack-");
    assert_eq!(
        &*r.get("k#0", "gfx942:sramecc+:xnack-").unwrap(),
        &pseudo_random(1, 5000)[..]
    );
}

#[test]
fn metadata_round_trips_exactly() {
    let meta = rmpv::Value::Map(vec![
        ("target".into(), "hipv4-amdgcn-amd-amdhsa--gfx1100".into()),
        ("source_prefix".into(), "hip/stage".into()),
        ("n".into(), rmpv::Value::from(-300)),
        ("f".into(), rmpv::Value::F64(0.5)),
        ("b".into(), rmpv::Value::Binary(vec![1, 2, 3])),
    ]);
    for c in [Compression::None, Compression::zstd()] {
        let mut w = KpackWriter::new(c);
        w.add_with_metadata("k#0", "gfx1100", b"abc".as_slice(), Some(meta.clone()))
            .unwrap();
        w.add("k#1", "gfx1100", b"def".as_slice()).unwrap();
        let bytes = w.to_vec().unwrap();
        let r = KpackReader::from_bytes(&bytes).unwrap();
        assert_eq!(
            r.entry("k#0", "gfx1100").unwrap().metadata.as_ref(),
            Some(&meta)
        );
        assert_eq!(r.entry("k#1", "gfx1100").unwrap().metadata, None);
        assert_eq!(r.to_writer(c).unwrap().to_vec().unwrap(), bytes);
    }
}

/// Kernels placed and filled later (positioned writes, out of order) with
/// their metadata set afterwards give the bytes of adding them in order.
#[test]
fn placed_kernels_filled_later_equal_kernels_added_in_order() {
    use std::os::unix::fs::FileExt;
    let meta = rmpv::Value::Map(vec![("bundle".into(), rmpv::Value::from(7))]);
    let data: Vec<Vec<u8>> = (0..4u64)
        .map(|i| pseudo_random(i, 5000 + i as usize * 97))
        .collect();
    let mut w = KpackWriter::new(Compression::None);
    w.group_name("g").arch_family("gfx900").arches(["gfx900"]);
    for (i, d) in data.iter().enumerate() {
        let m = (i == 1).then(|| meta.clone());
        w.add_with_metadata(&format!("k#{i}"), "gfx900", d.as_slice(), m)
            .unwrap();
    }
    let want = w.to_vec().unwrap();

    let dir = rocpack_testsupport::tempdir();
    let path = dir.path().join("placed.kpack");
    let file = std::fs::File::create(&path).unwrap();
    let fill = file.try_clone().unwrap();
    let mut sw = KpackStreamWriter::new(std::io::BufWriter::new(file), Compression::None).unwrap();
    sw.group_name("g").arch_family("gfx900").arches(["gfx900"]);
    let mut places = Vec::new();
    for (i, d) in data.iter().enumerate() {
        if i % 2 == 0 {
            places.push((
                i,
                sw.add_placed(&format!("k#{i}"), "gfx900", d.len() as u64, None)
                    .unwrap(),
            ));
        } else {
            sw.add(&format!("k#{i}"), "gfx900", d).unwrap();
        }
    }
    sw.set_metadata(1, Some(meta.clone())).unwrap();
    assert!(sw.set_metadata(9, None).is_err(), "no kernel 9");
    for &(i, (ordinal, at)) in places.iter().rev() {
        assert_eq!(ordinal as usize, i);
        fill.write_all_at(&data[i], at).unwrap();
    }
    sw.finish().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), want);

    let mut z = KpackStreamWriter::new(Cursor::new(Vec::new()), Compression::zstd()).unwrap();
    assert!(
        z.add_placed("k#0", "gfx900", 3, None).is_err(),
        "placed needs none"
    );
}

#[test]
fn zstd_output_is_independent_of_thread_count() {
    let objs: Vec<Vec<u8>> = (0..40)
        .map(|i| pseudo_random(i as u64, 3000 + i * 997))
        .collect();
    let build = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut w = KpackWriter::new(Compression::Zstd { level: 5 });
            for (i, o) in objs.iter().enumerate() {
                w.add(
                    &format!("lib/l{}.so#0", i % 7),
                    &format!("gfx9{:02}", i / 7),
                    o.as_slice(),
                )
                .unwrap();
            }
            w.to_vec().unwrap()
        })
    };
    let one = build(1);
    assert_eq!(one, build(4));
    // And it equals the sequential stream writer.
    let mut s =
        KpackStreamWriter::new(Cursor::new(Vec::new()), Compression::Zstd { level: 5 }).unwrap();
    for (i, o) in objs.iter().enumerate() {
        s.add(
            &format!("lib/l{}.so#0", i % 7),
            &format!("gfx9{:02}", i / 7),
            o,
        )
        .unwrap();
    }
    assert_eq!(s.finish().unwrap().0.into_inner(), one);
    let r = KpackReader::from_bytes(&one).unwrap();
    for (i, o) in objs.iter().enumerate() {
        assert_eq!(
            &*r.get(
                &format!("lib/l{}.so#0", i % 7),
                &format!("gfx9{:02}", i / 7)
            )
            .unwrap(),
            &o[..]
        );
    }
}

#[test]
fn stream_writer_starts_at_current_position() {
    let mut cur = Cursor::new(Vec::new());
    cur.write_all(b"PREFIX--").unwrap();
    let mut s = KpackStreamWriter::new(cur, Compression::None).unwrap();
    s.add("k#0", "gfx900", b"hello").unwrap();
    let (cur, sum) = s.finish().unwrap();
    let all = cur.into_inner();
    assert_eq!(&all[..8], b"PREFIX--");
    assert_eq!(sum.total_size as usize, all.len() - 8);
    let r = KpackReader::from_bytes(&all[8..]).unwrap();
    assert_eq!(&*r.get("k#0", "gfx900").unwrap(), b"hello");
}

#[test]
fn empty_archives() {
    for c in [Compression::None, Compression::zstd()] {
        let w = KpackWriter::new(c);
        let r = KpackReader::from_vec(w.to_vec().unwrap()).unwrap();
        assert!(r.is_empty());
        assert_eq!(r.toc_offset(), if c == Compression::None { 64 } else { 68 });
    }
}

#[test]
fn compression_parses() {
    assert_eq!("none".parse::<Compression>().unwrap(), Compression::None);
    assert_eq!(
        "zstd".parse::<Compression>().unwrap(),
        Compression::Zstd { level: 3 }
    );
    assert_eq!(
        "zstd-per-kernel:19".parse::<Compression>().unwrap(),
        Compression::Zstd { level: 19 }
    );
    assert!("lz4".parse::<Compression>().is_err());
    assert!("zstd:x".parse::<Compression>().is_err());
    assert_eq!(
        rocpack_kpack::split_toc_key("lib/a#b.so#12"),
        Some(("lib/a#b.so", 12))
    );
    assert_eq!(rocpack_kpack::split_toc_key("bin/tkm"), None);
}

#[test]
fn unpack_dir_round_trip() {
    let mut w = KpackWriter::new(Compression::zstd());
    w.group_name("g")
        .arch_family("gfx110X")
        .arches(["gfx1100", "gfx1101"]);
    w.add_with_metadata(
        "lib/a.so#0",
        "gfx1100",
        pseudo_random(3, 700),
        Some(rmpv::Value::Map(vec![("t".into(), "x".into())])),
    )
    .unwrap();
    w.add("lib/a.so#0", "gfx1101", pseudo_random(4, 900))
        .unwrap();
    w.add("bin/b#0", "gfx90a:xnack+", pseudo_random(5, 10))
        .unwrap();
    let bytes = w.to_vec().unwrap();
    let r = KpackReader::from_bytes(&bytes).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new");
    let m = unpack_to_dir(&r, &out).unwrap();
    let files: Vec<&str> = m.kernels.iter().map(|k| k.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "0000_lib_a.so#0_gfx1100.hsaco",
            "0001_lib_a.so#0_gfx1101.hsaco",
            "0002_bin_b#0_gfx90a_xnack+.hsaco"
        ]
    );
    let mut listing: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listing.sort();
    assert_eq!(listing.len(), 4, "{listing:?}");
    assert!(listing.contains(&UNPACK_MANIFEST.to_string()));
    assert_eq!(
        std::fs::read(out.join(files[1])).unwrap(),
        pseudo_random(4, 900)
    );

    let back = UnpackManifest::read(&out).unwrap();
    assert_eq!(back, m);
    assert_eq!(
        back.to_writer(&out, back.compression().unwrap())
            .unwrap()
            .to_vec()
            .unwrap(),
        bytes
    );

    // Unpacking into an existing directory keeps other files, leaves no staging dir.
    std::fs::write(dir.path().join("keep.txt"), b"k").unwrap();
    unpack_to_dir(&r, dir.path()).unwrap();
    let n = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(n, 1 + 1 + 4, "new/, keep.txt, 3 objects + manifest");

    // A manifest naming a path outside the directory is refused.
    let mut evil = m.clone();
    evil.kernels[0].file = "../x".into();
    std::fs::write(
        out.join(UNPACK_MANIFEST),
        serde_json::to_vec(&evil).unwrap(),
    )
    .unwrap();
    assert!(UnpackManifest::read(&out).is_err());
}

#[test]
fn file_writer_is_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a_gfx1100.kpack");
    let mut f = rocpack_kpack::KpackFileWriter::create(&p, Compression::zstd()).unwrap();
    f.writer().group_name("a").arches(["gfx1100"]);
    f.writer()
        .add("k#0", "gfx1100", &pseudo_random(9, 4000))
        .unwrap();
    let frame = rocpack_kpack::compress_frame(&pseudo_random(2, 100), 3).unwrap();
    f.writer()
        .add_frame("k#1", "gfx1100", 100, &frame, None)
        .unwrap();
    assert!(!p.exists(), "nothing visible before finish");
    let sum = f.finish().unwrap();
    assert_eq!(sum.kernels, 2);
    let r = KpackReader::open(&p).unwrap();
    assert_eq!(
        &*r.get("k#1", "gfx1100").unwrap(),
        &pseudo_random(2, 100)[..]
    );
    assert_eq!(r.bytes().len() as u64, sum.total_size);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

    // Dropped unfinished: no file, no temp left.
    let q = dir.path().join("b.kpack");
    let mut f = rocpack_kpack::KpackFileWriter::create(&q, Compression::None).unwrap();
    f.writer().add("k#0", "gfx900", b"x").unwrap();
    drop(f);
    assert!(!q.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn verbatim_keys_survive_a_rewrite() {
    // Regression (fuzz): a key with a backslash, written by some other tool,
    // must be rewritten verbatim by to_writer and unpack/pack.
    let mut w = KpackWriter::new(Compression::zstd());
    w.normalize_keys(false);
    w.add("li\\/libhip.so#0", "gfx1100", pseudo_random(1, 300))
        .unwrap();
    w.add("li//libhip.so#0", "gfx1100", pseudo_random(2, 300))
        .unwrap();
    let bytes = w.to_vec().unwrap();
    let r = KpackReader::from_bytes(&bytes).unwrap();
    assert_eq!(r.entries()[0].key, "li\\/libhip.so#0");
    assert_eq!(
        r.to_writer(Compression::zstd()).unwrap().to_vec().unwrap(),
        bytes
    );
    let dir = tempfile::tempdir().unwrap();
    let m = unpack_to_dir(&r, &dir.path().join("u")).unwrap();
    let again = m
        .to_writer(&dir.path().join("u"), Compression::zstd())
        .unwrap();
    assert_eq!(again.to_vec().unwrap(), bytes);
}

/// `add_file_range` (file-to-file copy for `none`, read + compress for
/// zstd) writes the same bytes as `add_with_metadata` on the same data.
#[test]
fn file_ranges_write_what_slices_write() {
    let dir = rocpack_testsupport::tempdir();
    let src_path = dir.path().join("src.bin");
    // Small (read) and large (copied) code objects, at odd offsets.
    let sizes = [10usize, 4095, 4096, 70_000, 1 << 20];
    let mut all = Vec::new();
    let mut ranges = Vec::new();
    for (i, n) in sizes.iter().enumerate() {
        all.extend_from_slice(&pseudo_random(i as u64 + 1, 13));
        ranges.push((all.len() as u64, *n as u64));
        all.extend_from_slice(&pseudo_random(i as u64 + 100, *n));
    }
    std::fs::write(&src_path, &all).unwrap();
    let src = std::fs::File::open(&src_path).unwrap();
    for c in [Compression::None, Compression::zstd()] {
        let meta = |i: usize| Some(rmpv::Value::from(i as u64));
        let mut a = KpackStreamWriter::new(Cursor::new(Vec::new()), c).unwrap();
        let out = dir.path().join("b.kpack");
        let f = std::io::BufWriter::new(std::fs::File::create(&out).unwrap());
        let mut b = KpackStreamWriter::new(f, c).unwrap();
        for (i, &(off, len)) in ranges.iter().enumerate() {
            let key = format!("lib/x.so#{i}");
            let data = &all[off as usize..(off + len) as usize];
            a.add_with_metadata(&key, "gfx1100", data, meta(i)).unwrap();
            b.add_file_range(&key, "gfx1100", &src, off, len, meta(i))
                .unwrap();
        }
        let (a, sa) = a.finish().unwrap();
        let (mut b, sb) = b.finish().unwrap();
        b.flush().unwrap();
        drop(b);
        assert_eq!(sa, sb);
        let written = std::fs::read(&out).unwrap();
        assert_eq!(a.into_inner(), written, "{c:?}");
        let r = KpackReader::from_bytes(&written).unwrap();
        for (i, &(off, len)) in ranges.iter().enumerate() {
            let got = r.get(&format!("lib/x.so#{i}"), "gfx1100").unwrap();
            assert_eq!(&*got, &all[off as usize..(off + len) as usize]);
        }
    }
    // A range past the end of the source is an error, not a short entry.
    let mut w = KpackStreamWriter::new(Cursor::new(Vec::new()), Compression::None).unwrap();
    let len = all.len() as u64;
    assert!(w
        .add_file_range("k#0", "gfx1100", &src, len - 5000, 10_000, None)
        .is_err());
}

/// Issue 20 (d): zstd frames written by rocpack carry a content checksum
/// (frame header descriptor bit 2), so flipping any byte of a frame is an
/// error of that kernel's lookup, never other bytes. Without checksums
/// (main, and ROCm's writer) flips inside the compressed literals decoded
/// to wrong code.
#[test]
fn every_flipped_frame_byte_is_an_error() {
    // Text-like data: zstd keeps part of it as raw literals.
    let data: Vec<u8> = (0..6000u32)
        .map(|i| b"s_load_dword v0, s[4:5] ; kernel\n"[(i % 33) as usize] ^ ((i / 97) as u8 & 3))
        .collect();
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("g").arch_family("gfx900").arches(["gfx900"]);
    w.add("k#0", "gfx900", data.clone()).unwrap();
    let good = w.to_vec().unwrap();
    let r = KpackReader::from_bytes(&good).unwrap();
    let loc = r.blob_location(0).unwrap();
    let (a, n) = (loc.offset as usize, loc.size as usize);
    assert_eq!(good[a + 4] & 0x04, 0x04, "Content_Checksum_flag");
    let (mut errors, mut same) = (0, 0);
    for pos in a..a + n {
        for bit in [0x01u8, 0x80] {
            let mut v = good.clone();
            v[pos] ^= bit;
            match KpackReader::from_bytes(&v)
                .and_then(|r| r.get("k#0", "gfx900").map(|c| c.into_owned()))
            {
                Err(_) => errors += 1,
                Ok(got) if got == data => same += 1,
                Ok(_) => panic!(
                    "flipping bit {bit:#x} of frame byte {} decoded to other bytes",
                    pos - a
                ),
            }
        }
    }
    eprintln!("{n}-byte frame: {errors} flips are errors, {same} decode unchanged");
    assert!(errors > 0);
    // Without the checksum (ROCm's Python writer's frames), flips go unseen.
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.content_checksum(false);
    w.group_name("g").arch_family("gfx900").arches(["gfx900"]);
    w.add("k#0", "gfx900", data.clone()).unwrap();
    let plain = w.to_vec().unwrap();
    let r = KpackReader::from_bytes(&plain).unwrap();
    let loc = r.blob_location(0).unwrap();
    assert_eq!(plain[loc.offset as usize + 4] & 0x04, 0, "no checksum");
    assert_eq!(&r.get("k#0", "gfx900").unwrap()[..], &data[..]);
}

/// Issue 20 (d): Python's `zstandard` (the library rocm-kpack's Python
/// tools use for these frames) decodes rocpack's checksummed frames, and
/// rejects one with a flipped byte (checksum mismatch). Needs python3 with
/// `zstandard` (tests/ci/10-rust.sh pip-installs it for the python3 on PATH).
#[test]
fn python_zstandard_reads_checksummed_frames() {
    if !python_zstandard() {
        return;
    }
    let data = pseudo_random(9, 3000).repeat(3);
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("g").arch_family("gfx900").arches(["gfx900"]);
    w.add("k#0", "gfx900", data.clone()).unwrap();
    let bytes = w.to_vec().unwrap();
    let r = KpackReader::from_bytes(&bytes).unwrap();
    let loc = r.blob_location(0).unwrap();
    let frame = &bytes[loc.offset as usize..(loc.offset + loc.size) as usize];
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.zst");
    let bad = dir.path().join("bad.zst");
    let want = dir.path().join("want.bin");
    std::fs::write(&good, frame).unwrap();
    std::fs::write(&want, &data).unwrap();
    let mut f = frame.to_vec();
    let n = f.len();
    f[n - 2] ^= 0x01; // inside the checksum
    std::fs::write(&bad, f).unwrap();
    let script = r#"
import sys, zstandard
good, bad, want = (open(p, "rb").read() for p in sys.argv[1:4])
d = zstandard.ZstdDecompressor()
assert d.decompress(good) == want, "good frame"
try:
    d.decompress(bad)
except zstandard.ZstdError as e:
    print("rejected:", e)
else:
    sys.exit("a flipped checksum byte was accepted")
"#;
    let stdout = python(
        script,
        [good.as_os_str(), bad.as_os_str(), want.as_os_str()],
    );
    assert!(stdout.contains("rejected"), "{stdout}");

    // Issue 22: a frame streamed past the window (a 40 MiB code object
    // written from a file: `add_file_range` streams above
    // STREAM_THRESHOLD; its window is 2 MiB, not single-segment).
    let big: Vec<u8> = (0..10u64).flat_map(|i| pseudo_random(i, 4 << 20)).collect();
    let src = dir.path().join("big.bin");
    std::fs::write(&src, &big).unwrap();
    let mut s = KpackStreamWriter::new(Cursor::new(Vec::new()), Compression::zstd()).unwrap();
    let f = std::fs::File::open(&src).unwrap();
    s.add_file_range("k#0", "gfx900", &f, 0, big.len() as u64, None)
        .unwrap();
    let bytes = s.finish().unwrap().0.into_inner();
    let r = KpackReader::from_bytes(&bytes).unwrap();
    let loc = r.blob_location(0).unwrap();
    let frame = &bytes[loc.offset as usize..(loc.offset + loc.size) as usize];
    assert_eq!(
        frame[4] & 0x20,
        0,
        "a streamed frame past the window is multi-segment"
    );
    assert_eq!(frame_window(frame), 2 << 20);
    assert!(r.get("k#0", "gfx900").unwrap()[..] == big[..]);
    std::fs::write(&good, frame).unwrap();
    let script = r#"
import sys, zstandard
frame, want = (open(p, "rb").read() for p in sys.argv[1:3])
assert zstandard.ZstdDecompressor().decompress(frame) == want, "streamed frame"
print("ok")
"#;
    let stdout = python(script, [good.as_os_str(), src.as_os_str()]);
    assert!(stdout.contains("ok"), "{stdout}");
}

/// Whether the python3 on PATH has `zstandard`; under CI its absence is a
/// failure (tests/ci/10-rust.sh pip-installs it), elsewhere a logged skip.
fn python_zstandard() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import zstandard"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3-zstandard is missing (tests/ci/10-rust.sh installs it)"
        );
        eprintln!("SKIP: python3 zstandard not installed");
    }
    ok
}

/// Runs `python3 -c script args…`, which must succeed; returns its stdout.
fn python<I, S>(script: &str, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The window a zstd frame needs its decoder to accept (frame header:
/// the content size for a single-segment frame, else the window descriptor).
fn frame_window(frame: &[u8]) -> u64 {
    assert_eq!(&frame[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd magic");
    let fhd = frame[4];
    if fhd & 0x20 != 0 {
        // Single segment: Frame_Content_Size (after an optional dictionary ID).
        let did = [0usize, 1, 2, 4][(fhd & 3) as usize];
        let fcs = [1usize, 2, 4, 8][(fhd >> 6) as usize];
        let at = 5 + did;
        let mut b = [0u8; 8];
        b[..fcs].copy_from_slice(&frame[at..at + fcs]);
        let v = u64::from_le_bytes(b);
        return if fcs == 2 { v + 256 } else { v };
    }
    let wd = frame[5];
    let base = 1u64 << (10 + (wd >> 3));
    base + base / 8 * u64::from(wd & 7)
}

/// Issue 22 (e): archives at the high levels (19, the size-oriented choice
/// README's level table recommends, and 22, the highest accepted) keep the
/// format ROCm's runtime reads with its default decoder limits: every frame
/// needs a window of at most 2^27 bytes, and both our reader (the streaming
/// decoder the runtime library uses, default limits) and Python's
/// `zstandard` with a default `ZstdDecompressor` (one-shot and streaming)
/// decode every kernel. A code object of 10 MiB with a repeat 9 MiB apart
/// (beyond level 19's 8 MiB window) make the window choice matter.
#[test]
fn high_level_archives_fit_default_decoder_limits() {
    let ok = python_zstandard();
    let block = pseudo_random(22, 1 << 20);
    let kernels: Vec<Vec<u8>> = (0..1u8)
        .map(|k| {
            let mut v = Vec::with_capacity(10 << 20);
            for i in 0..10u8 {
                let mut b = block.clone();
                // Repeats 9 MiB apart; the rest differs per MiB.
                b[0] = if i >= 9 { i - 9 } else { i };
                b[1] = k;
                v.extend_from_slice(&b);
            }
            v
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    for level in [19, 22] {
        let mut w = KpackWriter::new(Compression::Zstd { level });
        w.group_name("g").arch_family("gfx900").arches(["gfx900"]);
        for (k, data) in kernels.iter().enumerate() {
            w.add(&format!("k#{k}"), "gfx900", data.clone()).unwrap();
        }
        let path = dir.path().join(format!("l{level}.kpack"));
        std::fs::write(&path, w.to_vec().unwrap()).unwrap();
        let r = KpackReader::open_file(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for (k, data) in kernels.iter().enumerate() {
            let e = r.entry(&format!("k#{k}"), "gfx900").unwrap();
            let loc = r.blob_location(e.ordinal).unwrap();
            let frame = &bytes[loc.offset as usize..(loc.offset + loc.size) as usize];
            let window = frame_window(frame);
            assert!(
                window <= 1 << 27,
                "level {level}: kernel {k} needs a {window}-byte window"
            );
            assert!(
                r.get_entry(e).unwrap().as_ref() == data.as_slice(),
                "level {level}: kernel {k} (our reader)"
            );
            let f = dir.path().join(format!("l{level}-{k}.zst"));
            std::fs::write(&f, frame).unwrap();
            std::fs::write(dir.path().join(format!("l{level}-{k}.want")), data).unwrap();
        }
    }
    if !ok {
        return;
    }
    let script = r#"
import glob, os, sys, zstandard
n = 0
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.zst"))):
    frame = open(f, "rb").read()
    want = open(f[:-4] + ".want", "rb").read()
    d = zstandard.ZstdDecompressor()
    assert d.decompress(frame) == want, f + ": one-shot"
    assert d.decompressobj().decompress(frame) == want, f + ": streaming"
    n += 1
print("decoded", n)
"#;
    let stdout = python(script, [dir.path().as_os_str()]);
    assert!(stdout.contains("decoded 2"), "{stdout}");
}

/// Issue 22: the streaming encoder (`ZSTD_compressStream2` with the size
/// pledged, fed in 1 MiB pieces, the last with `ZSTD_e_end`) makes the same
/// frame as the one-shot `ZSTD_compress2` of `compress_frame` up to the
/// window size: empty input, sizes around zstd's 128 KiB block, with and
/// without checksums. Past the window the streaming compressor's circular
/// buffer finds slightly different matches (a frame of the same data, a
/// few bytes apart), which is why only code objects above
/// `STREAM_THRESHOLD` are streamed. Either way the frame decodes to the
/// input and does not depend on how the reader hands out the bytes.
#[test]
fn streamed_frames_are_the_one_shot_frames_up_to_the_window() {
    /// Hands out at most `n` bytes per read (odd sizes on purpose).
    struct Dribble<'a>(&'a [u8], usize);
    impl std::io::Read for Dribble<'_> {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(b.len()).min(self.1);
            b[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let big = {
        // Compressible with long repeats (beyond any window) and noise.
        let block = pseudo_random(7, 3 << 20);
        let mut v = Vec::with_capacity(36 << 20);
        let mut i = 0u64;
        while v.len() < 36 << 20 {
            v.extend_from_slice(&block[(i as usize * 4099) % (1 << 20)..][..(1 << 20)]);
            v.extend_from_slice(&pseudo_random(i, 4096));
            i += 1;
        }
        v
    };
    let k = 128 << 10;
    let sizes = [
        0,
        1,
        100,
        k - 1,
        k,
        k + 1,
        2 * k,
        (1 << 20) + 7,
        2 << 20,
        9 << 20,
        big.len(),
    ];
    let mut report = Vec::new();
    for level in [1, 3, 19] {
        for checksum in [true, false] {
            for &n in &sizes {
                if (level == 19 && n > 9 << 20) || (!checksum && n > 2 << 20) {
                    continue; // slow; 9 MiB is past level 19's 8 MiB window already
                }
                let data = &big[..n];
                let one = rocpack_kpack::compress_frame_with(data, level, checksum).unwrap();
                let mut first: Option<Vec<u8>> = None;
                for piece in [usize::MAX, 65_537] {
                    let mut out = Vec::new();
                    let len = rocpack_kpack::compress_stream(
                        &mut Dribble(data, piece),
                        n as u64,
                        &mut out,
                        level,
                        checksum,
                    )
                    .unwrap();
                    assert_eq!(len, out.len() as u64);
                    match &first {
                        None => first = Some(out),
                        Some(f) => assert!(
                            f == &out,
                            "level {level}, {n} bytes: depends on the reader's pieces"
                        ),
                    }
                }
                let out = first.unwrap();
                if n <= 2 << 20 {
                    assert!(
                        out == one,
                        "level {level}, checksum {checksum}, {n} bytes: streamed frame ({} bytes) differs from one-shot ({} bytes)",
                        out.len(),
                        one.len()
                    );
                }
                if checksum {
                    report.push(format!(
                        "level {level} {n} B: {}",
                        if out == one {
                            "same".to_string()
                        } else {
                            format!("{} vs {} B", out.len(), one.len())
                        }
                    ));
                }
                let back = rocpack_kpack::decompress_frame(&out, n as u64).unwrap();
                assert!(
                    back == data,
                    "level {level}, {n} bytes: does not decode to the input"
                );
            }
        }
    }
    eprintln!("{}", report.join("\n"));
    // A source shorter than promised is an error, not a short frame.
    let e =
        rocpack_kpack::compress_stream(&mut &big[..10], 11, &mut Vec::new(), 3, true).unwrap_err();
    assert!(e.to_string().contains("ended after 10 of 11"), "{e}");
}

/// Issue 22: a reader from `open_file` checks a large frame from its
/// headers (frame header, block headers, checksum) instead of reading it
/// whole; its verdict on every damaged header byte, and on the size prefix,
/// is the whole-frame check's (libzstd's `ZSTD_findFrameCompressedSize`).
#[test]
fn header_walk_of_large_frames_agrees_with_libzstd() {
    let data: Vec<u8> = (0..40u64)
        .flat_map(|i| {
            let mut b = pseudo_random(i, 64 << 10);
            b.extend(std::iter::repeat_n(i as u8, 8 << 10));
            b
        })
        .collect();
    for (level, checksum) in [(3, true), (1, false)] {
        let mut w = KpackWriter::new(Compression::Zstd { level });
        w.content_checksum(checksum);
        w.group_name("g").arch_family("gfx900").arches(["gfx900"]);
        w.add("k#0", "gfx900", data.clone()).unwrap();
        w.add("k#1", "gfx900", data[..1000].to_vec()).unwrap();
        let good = w.to_vec().unwrap();
        let r = KpackReader::from_bytes(&good).unwrap();
        let loc = r.blob_location(0).unwrap();
        assert!(
            loc.size > 1 << 20,
            "frame of {} bytes is not large",
            loc.size
        );
        let (a, n) = (loc.offset as usize, loc.size as usize);
        // Block header offsets, walked here independently.
        let mut blocks = Vec::new();
        let d = good[a + 4];
        let mut p = a
            + 5
            + usize::from(d & 0x20 == 0)
            + [0, 1, 2, 4][usize::from(d & 3)]
            + [usize::from(d & 0x20 != 0), 2, 4, 8][usize::from(d >> 6)];
        loop {
            blocks.push(p);
            let h = u32::from_le_bytes([good[p], good[p + 1], good[p + 2], 0]);
            p += 3 + if (h >> 1) & 3 == 1 {
                1
            } else {
                (h >> 3) as usize
            };
            if h & 1 == 1 {
                break;
            }
        }
        assert!(blocks.len() > 5);
        let mut spots: Vec<usize> = (a - 4..a + 18).collect();
        for &b in blocks.iter().take(3).chain(blocks.iter().rev().take(2)) {
            spots.extend([b, b + 1, b + 2]);
        }
        spots.extend(a + n - 4..a + n);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.kpack");
        let (mut agree, mut errors) = (0, 0);
        for &pos in &spots {
            for bit in [0x01u8, 0x02, 0x08, 0x20, 0x80] {
                let mut v = good.clone();
                v[pos] ^= bit;
                std::fs::write(&path, &v).unwrap();
                let whole = KpackReader::from_bytes(&v).and_then(|r| r.checked_location(0));
                let walked = KpackReader::open_file(&path).and_then(|r| r.checked_location(0));
                match (&whole, &walked) {
                    (Ok(x), Ok(y)) => assert_eq!(x, y),
                    (Err(x), Err(y)) => {
                        errors += 1;
                        let y = y.to_string();
                        assert!(
                            y.ends_with(&x.to_string()),
                            "byte {pos} bit {bit:#x}: whole-frame check says {x}, header walk says {y}"
                        );
                    }
                    _ => panic!(
                        "byte {} (frame offset {}) bit {bit:#x}: whole-frame check {whole:?}, header walk {walked:?}",
                        pos,
                        pos as i64 - a as i64
                    ),
                }
                agree += 1;
            }
        }
        eprintln!("level {level}: {agree} damaged archives, same verdict; {errors} errors");
        assert!(errors > 10);
    }
}

/// Issue 22: `add_stream` writes a streamed frame with its size patched in
/// (zstd) or copies (none); what the reader returns is the input, a source
/// shorter than promised is an error, and the zstd archive equals one made
/// from the same bytes with `add` when the code object is below the window.
#[test]
fn add_stream_patches_the_frame_size() {
    let small = pseudo_random(1, 300 << 10);
    let big: Vec<u8> = (0..3u64).flat_map(|i| pseudo_random(i, 3 << 20)).collect();
    for comp in [Compression::None, Compression::zstd()] {
        let mut s = KpackStreamWriter::new(Cursor::new(Vec::new()), comp).unwrap();
        s.add_stream("a#0", "gfx900", &mut &small[..], small.len() as u64, None)
            .unwrap();
        s.add_stream("b#0", "gfx900", &mut &big[..], big.len() as u64, None)
            .unwrap();
        s.add("c#0", "gfx900", b"tail").unwrap();
        let e = s
            .add_stream("d#0", "gfx900", &mut &small[..5], 6, None)
            .unwrap_err();
        assert!(e.to_string().contains("ended after 5 of 6"), "{e}");
        // A fresh writer for the checks (the failed add left this one unusable).
        let mut s = KpackStreamWriter::new(Cursor::new(Vec::new()), comp).unwrap();
        s.add_stream("a#0", "gfx900", &mut &small[..], small.len() as u64, None)
            .unwrap();
        s.add_stream("b#0", "gfx900", &mut &big[..], big.len() as u64, None)
            .unwrap();
        s.add("c#0", "gfx900", b"tail").unwrap();
        let bytes = s.finish().unwrap().0.into_inner();
        let r = KpackReader::from_bytes(&bytes).unwrap();
        r.validate_kernels().unwrap();
        assert!(r.get("a#0", "gfx900").unwrap()[..] == small[..]);
        assert!(r.get("b#0", "gfx900").unwrap()[..] == big[..]);
        assert_eq!(&r.get("c#0", "gfx900").unwrap()[..], b"tail");
        // Below the window the streamed frame is the one-shot frame.
        let mut s = KpackStreamWriter::new(Cursor::new(Vec::new()), comp).unwrap();
        s.add("a#0", "gfx900", &small).unwrap();
        let one = s.finish().unwrap().0.into_inner();
        let mut s = KpackStreamWriter::new(Cursor::new(Vec::new()), comp).unwrap();
        s.add_stream("a#0", "gfx900", &mut &small[..], small.len() as u64, None)
            .unwrap();
        assert_eq!(s.finish().unwrap().0.into_inner(), one, "{comp:?}");
    }
}
