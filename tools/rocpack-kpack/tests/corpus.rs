//! Hostile inputs: truncations, bit flips, oversized counts and huge lengths
//! must give errors that name the field and offset — never a panic.

use rocpack_kpack::{Compression, ErrorKind, KpackReader, KpackWriter, Kpm, Marker};

/// A golden archive's bytes.
fn golden(name: &str) -> Vec<u8> {
    let p = rocpack_testsupport::golden(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Parse, then read every kernel; must not panic.
fn exercise(bytes: &[u8]) -> Result<(), rocpack_kpack::Error> {
    let r = KpackReader::from_bytes(bytes)?;
    let all = r.validate_kernels();
    for e in r.entries() {
        let d = r.get_entry(e)?;
        assert_eq!(d.len() as u64, e.original_size);
    }
    assert!(all.is_ok(), "validate_kernels agrees with get_entry");
    // Whatever reads as valid re-writes to an archive with the same contents.
    let comp = match r.scheme() {
        rocpack_kpack::Scheme::None => Compression::None,
        rocpack_kpack::Scheme::ZstdPerKernel => Compression::zstd(),
    };
    let again = KpackReader::from_vec(r.to_writer(comp)?.to_vec()?)?;
    assert_eq!(again.gfx_arches(), r.gfx_arches());
    for e in r.entries() {
        assert_eq!(again.get(&e.key, &e.target)?, r.get_entry(e)?);
    }
    Ok(())
}

#[test]
fn every_truncation_is_an_error() {
    for name in ["test_noop.kpack", "test_zstd.kpack"] {
        let data = golden(name);
        for n in 0..data.len() {
            let err = KpackReader::from_bytes(&data[..n]).expect_err(&format!("{name} cut at {n}"));
            assert!(
                err.offset().is_some(),
                "{name} cut at {n}: no offset in {err}"
            );
        }
        exercise(&data).unwrap();
    }
}

#[test]
fn every_bit_flip_is_handled() {
    for name in ["test_noop.kpack", "test_zstd.kpack"] {
        let data = golden(name);
        let mut ok = 0;
        let mut errs = 0;
        for i in 0..data.len() {
            for bit in 0..8 {
                let mut d = data.clone();
                d[i] ^= 1 << bit;
                match exercise(&d) {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        errs += 1;
                        assert!(!e.to_string().is_empty());
                    }
                }
            }
        }
        // Flips in header/TOC structure are caught; flips inside raw kernel
        // bytes (scheme none) are legitimately still valid archives.
        assert!(
            errs > 0 && ok + errs == data.len() * 8,
            "{name}: {ok} ok, {errs} errors"
        );
    }
}

/// A valid 64-byte header followed by `toc` at offset 64 (empty blob region).
fn with_toc(toc: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(b"KPAK");
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&64u64.to_le_bytes());
    v.resize(64, 0);
    v.extend_from_slice(toc);
    v
}

/// The golden noop archive with its TOC re-encoded after `edit`.
fn noop_with(edit: impl FnOnce(&mut Vec<(rmpv::Value, rmpv::Value)>)) -> Vec<u8> {
    let data = golden("test_noop.kpack");
    let mut rd = &data[570..];
    let v = rmpv::decode::read_value(&mut rd).unwrap();
    let rmpv::Value::Map(mut m) = v else { panic!() };
    edit(&mut m);
    let mut out = data[..570].to_vec();
    rmpv::encode::write_value(&mut out, &rmpv::Value::Map(m)).unwrap();
    out
}

fn field<'a>(m: &'a mut [(rmpv::Value, rmpv::Value)], k: &str) -> &'a mut rmpv::Value {
    &mut m
        .iter_mut()
        .find(|(key, _)| key.as_str() == Some(k))
        .unwrap()
        .1
}

fn map_field<'a>(v: &'a mut rmpv::Value, k: &str) -> &'a mut rmpv::Value {
    let rmpv::Value::Map(m) = v else {
        panic!("not a map")
    };
    field(m, k)
}

#[test]
fn oversized_counts_are_refused_before_allocating() {
    // gfx_arches claims 2^32-1 elements.
    let mut toc = vec![0x81];
    toc.push(0xaa);
    toc.extend_from_slice(b"gfx_arches");
    toc.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
    let e = KpackReader::from_bytes(&with_toc(&toc)).unwrap_err();
    assert_eq!(e.offset(), Some(64 + 12), "{e}");
    assert!(e.to_string().contains("gfx_arches"), "{e}");
    assert!(e.to_string().contains("4294967295 elements"), "{e}");

    // Top-level map32 claiming 2^32-1 pairs.
    let e = KpackReader::from_bytes(&with_toc(&[0xdf, 0xff, 0xff, 0xff, 0xff])).unwrap_err();
    assert_eq!(e.offset(), Some(64));

    // zstd frame count larger than the blob can hold.
    let data = golden("test_zstd.kpack");
    let mut d = data.clone();
    d[64..68].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert_eq!(e.offset(), Some(64), "{e}");
    assert!(e.to_string().contains("frames cannot fit"), "{e}");
}

#[test]
fn huge_lengths_are_errors() {
    // str32 of 4 GiB.
    let e = KpackReader::from_bytes(&with_toc(&[0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, b'a']))
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Truncated { .. }), "{e}");
    assert_eq!(e.offset(), Some(70), "the str body was expected at 70");

    // blobs[1].size = 2^64-1.
    let d = noop_with(|m| {
        let rmpv::Value::Array(b) = field(m, "blobs") else {
            panic!()
        };
        *map_field(&mut b[1], "size") = rmpv::Value::from(u64::MAX);
    });
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OutOfBounds { .. }), "{e}");
    assert!(e.to_string().contains("blobs[1]"), "{e}");

    // toc_offset past EOF.
    let mut d = golden("test_noop.kpack");
    d[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert_eq!(e.offset(), Some(8));
    assert!(e.to_string().contains("toc_offset"), "{e}");

    // zstd original_size claims 2^60 bytes.
    let r = KpackReader::from_bytes(&golden("test_zstd.kpack")).unwrap();
    let mut w = r.to_writer(Compression::zstd()).unwrap();
    let _ = &mut w;
    let data = golden("test_zstd.kpack");
    let mut rd = &data[198..];
    let rmpv::Value::Map(mut m) = rmpv::decode::read_value(&mut rd).unwrap() else {
        panic!()
    };
    let toc = field(&mut m, "toc");
    let lib = map_field(toc, "lib/libhip.so#0");
    let g = map_field(lib, "gfx1100");
    *map_field(g, "original_size") = rmpv::Value::from(1u64 << 60);
    let mut d = data[..198].to_vec();
    rmpv::encode::write_value(&mut d, &rmpv::Value::Map(m)).unwrap();
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(e.to_string().contains("original_size"), "{e}");
    assert_eq!(e.offset(), Some(72), "frame of ordinal 0 starts at 72: {e}");
}

#[test]
fn zstd_frame_without_content_size_and_wrong_original_size() {
    // A frame without the content-size field: the reader must trust nothing
    // and fail when decoding yields a different length.
    let data = vec![7u8; 1000];
    let mut c = zstd::bulk::Compressor::new(3).unwrap();
    c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
        .unwrap();
    let frame = c.compress(&data).unwrap();
    assert_eq!(
        zstd::zstd_safe::get_frame_content_size(&frame).unwrap(),
        None
    );

    let mut s = rocpack_kpack::KpackStreamWriter::new(
        std::io::Cursor::new(Vec::new()),
        Compression::zstd(),
    )
    .unwrap();
    s.add_frame("k#0", "gfx900", 500_000, &frame, None).unwrap();
    let (cur, _) = s.finish().unwrap();
    let r = KpackReader::from_vec(cur.into_inner()).unwrap();
    let e = r.get("k#0", "gfx900").unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Mismatch {
                expected: 500_000,
                found: 1000,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.offset(), Some(72));

    // Right size works.
    let mut s = rocpack_kpack::KpackStreamWriter::new(
        std::io::Cursor::new(Vec::new()),
        Compression::zstd(),
    )
    .unwrap();
    s.add_frame("k#0", "gfx900", 1000, &frame, None).unwrap();
    let r = KpackReader::from_vec(s.finish().unwrap().0.into_inner()).unwrap();
    assert_eq!(&*r.get("k#0", "gfx900").unwrap(), &data[..]);
}

#[test]
fn missing_original_size_names_field_and_offset() {
    let d = noop_with(|m| {
        let toc = field(m, "toc");
        let e = map_field(map_field(toc, "bin/testapp#0"), "gfx900");
        let rmpv::Value::Map(em) = e else { panic!() };
        em.retain(|(k, _)| k.as_str() != Some("original_size"));
    });
    let e = KpackReader::from_bytes(&d).unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains(r#"toc["bin/testapp#0"]["gfx900"].original_size: missing"#),
        "{s}"
    );
    assert!(matches!(e.kind(), ErrorKind::Missing { .. }));
    // Offset = the entry map inside the TOC.
    let off = e.offset().unwrap() as usize;
    assert!(off > 570 && d[off] == 0x82, "{s}");
}

#[test]
fn repeated_keys_are_errors() {
    // The TOC map lists the same binary key twice.
    let mut w = KpackWriter::new(Compression::None);
    w.add("aa#0", "gfx900", b"1".as_slice()).unwrap();
    w.add("bb#0", "gfx900", b"2".as_slice()).unwrap();
    let mut d = w.to_vec().unwrap();
    let i = d.windows(5).position(|x| x == b"bb#0\x81").unwrap();
    d[i] = b'a';
    d[i + 1] = b'a';
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(e.to_string().contains("repeated binary key"), "{e}");
    assert_eq!(e.offset(), Some(i as u64 - 1));
}

#[test]
fn unknown_scheme_is_an_error() {
    let d = noop_with(|m| *field(m, "compression_scheme") = rmpv::Value::from("lz4-per-kernel"));
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::UnknownScheme(s) if s == "lz4-per-kernel"),
        "{e}"
    );
    assert!(e.offset().unwrap() > 570);
}

#[test]
fn size_mismatch_is_an_error() {
    let d = noop_with(|m| {
        let toc = field(m, "toc");
        let e = map_field(map_field(toc, "lib/libtest.so#0"), "gfx906");
        *map_field(e, "original_size") = rmpv::Value::from(220u64);
    });
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::Mismatch {
                expected: 220,
                found: 219,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("blobs[1].size"), "{e}");
}

#[test]
fn out_of_bounds_blob_and_bad_ordinal() {
    let d = noop_with(|m| {
        let rmpv::Value::Array(b) = field(m, "blobs") else {
            panic!()
        };
        *map_field(&mut b[2], "offset") = rmpv::Value::from(500u64); // 500+168 > toc at 570
    });
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::OutOfBounds {
                start: 500,
                len: 168,
                hi: 570,
                ..
            }
        ),
        "{e}"
    );

    let d = noop_with(|m| {
        let toc = field(m, "toc");
        let e = map_field(map_field(toc, "bin/testapp#0"), "gfx900");
        *map_field(e, "ordinal") = rmpv::Value::from(7u64);
    });
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(
        e.to_string()
            .contains(".ordinal: 7 is not below the blob count 3"),
        "{e}"
    );

    let d = noop_with(|m| {
        let toc = field(m, "toc");
        let e = map_field(map_field(toc, "bin/testapp#0"), "gfx900");
        *map_field(e, "ordinal") = rmpv::Value::from(0u64);
    });
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(e.to_string().contains("used by two entries"), "{e}");
}

#[test]
fn wrong_types_bad_magic_version_trailing() {
    let d = noop_with(|m| *field(m, "gfx_arches") = rmpv::Value::from("gfx900"));
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(
        e.to_string()
            .contains("gfx_arches: expected array, found str"),
        "{e}"
    );

    let mut d = golden("test_noop.kpack");
    d[0] = b'X';
    assert!(matches!(
        KpackReader::from_bytes(&d).unwrap_err().kind(),
        ErrorKind::BadMagic { .. }
    ));
    let mut d = golden("test_noop.kpack");
    d[4] = 2;
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::UnsupportedVersion(2)));
    assert_eq!(e.offset(), Some(4));
    let mut d = golden("test_noop.kpack");
    d.push(0);
    let e = KpackReader::from_bytes(&d).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::TrailingData { count: 1, .. }),
        "{e}"
    );
    assert_eq!(e.offset(), Some(903));

    // Errors from open() name the file.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.kpack");
    std::fs::write(&p, &d).unwrap();
    let e = KpackReader::open(&p).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("{}: byte offset 903", p.display())),
        "{e}"
    );
    let e = KpackReader::open(dir.path().join("missing.kpack")).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Io(_)));
}

#[test]
fn other_parsers_survive_garbage() {
    let mut seeds = vec![
        golden("test_noop.kpm"),
        Marker::for_split("hip_lib", 2, "hip/stage/lib/libx.so").encode(),
    ];
    seeds.push(golden("test_zstd.kpack"));
    for s in seeds {
        for n in 0..s.len() {
            let _ = Kpm::decode(&s[..n]);
            let _ = Marker::decode(&s[..n]);
            let _ = Marker::decode_strict(&s[..n]);
        }
        for i in 0..s.len() {
            for bit in 0..8 {
                let mut d = s.clone();
                d[i] ^= 1 << bit;
                let _ = Kpm::decode(&d);
                let _ = Marker::decode(&d);
                let _ = Marker::decode_strict(&d);
            }
        }
    }
    // Deep nesting in metadata stops at the depth limit.
    let mut w = KpackWriter::new(Compression::None);
    let mut v = rmpv::Value::Nil;
    for _ in 0..20 {
        v = rmpv::Value::Array(vec![v]);
    }
    w.add_with_metadata("k#0", "gfx900", b"x".as_slice(), Some(v.clone()))
        .unwrap();
    let r = KpackReader::from_vec(w.to_vec().unwrap()).unwrap();
    assert_eq!(r.entries()[0].metadata.as_ref(), Some(&v));
    let mut deep = vec![0x81, 0xa1, b'a'];
    deep.extend(std::iter::repeat_n(0x91, 5000));
    deep.push(0xc0);
    let _ = KpackReader::from_bytes(&with_toc(&deep));
}
