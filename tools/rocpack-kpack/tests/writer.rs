//! Writer behaviour: ordinals, TOC grouping, metadata, determinism across
//! thread counts, streaming into an existing stream, unpacked directories.

use std::io::{Cursor, Write};

use rocpack_kpack::{
    unpack_to_dir, Compression, ErrorKind, KpackReader, KpackStreamWriter, KpackWriter,
    UnpackManifest, UNPACK_MANIFEST,
};

fn sample(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|i| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            if i % 3 == 0 {
                (x >> 16) as u8
            } else {
                b'A' + (i % 7) as u8
            }
        })
        .collect()
}

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
    w.add("k#0", "gfx942:sramecc+:xnack-", sample(5000, 1))
        .unwrap();
    let r = KpackReader::from_vec(w.to_vec().unwrap()).unwrap();
    assert_eq!(r.arch(), Some("gfx942:sramecc+:xnack-"));
    assert_eq!(r.gfx_arch_family(), "gfx942:sramecc+:xnack-");
    assert_eq!(
        &*r.get("k#0", "gfx942:sramecc+:xnack-").unwrap(),
        &sample(5000, 1)[..]
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

#[test]
fn zstd_output_is_independent_of_thread_count() {
    let objs: Vec<Vec<u8>> = (0..40).map(|i| sample(3000 + i * 997, i as u32)).collect();
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
        sample(700, 3),
        Some(rmpv::Value::Map(vec![("t".into(), "x".into())])),
    )
    .unwrap();
    w.add("lib/a.so#0", "gfx1101", sample(900, 4)).unwrap();
    w.add("bin/b#0", "gfx90a:xnack+", sample(10, 5)).unwrap();
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
    assert_eq!(std::fs::read(out.join(files[1])).unwrap(), sample(900, 4));

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
    f.writer().add("k#0", "gfx1100", &sample(4000, 9)).unwrap();
    let frame = rocpack_kpack::compress_frame(&sample(100, 2), 3).unwrap();
    f.writer()
        .add_frame("k#1", "gfx1100", 100, &frame, None)
        .unwrap();
    assert!(!p.exists(), "nothing visible before finish");
    let sum = f.finish().unwrap();
    assert_eq!(sum.kernels, 2);
    let r = KpackReader::open(&p).unwrap();
    assert_eq!(&*r.get("k#1", "gfx1100").unwrap(), &sample(100, 2)[..]);
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
    w.add("li\\/libhip.so#0", "gfx1100", sample(300, 1))
        .unwrap();
    w.add("li//libhip.so#0", "gfx1100", sample(300, 2)).unwrap();
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
