#![no_main]
//! split-wheel's input side on arbitrary bytes: central-directory scan, entry
//! inflation, streamed RECORD rows and the RECORD check never panic nor
//! allocate beyond the caps. A wheel that passes is written again by the own
//! zip writer (entries copied compressed, fresh RECORD) and read back with the
//! `zip` crate as an independent reader: same names, same bytes; the output
//! passes the same checks. The input bytes are also streamed as a RECORD text.

use rocpack_wheel::meta::input_record_rows;
use rocpack_wheel::zipio::{self, Content, InputRef, InputWheel, OutEntry, WriteOptions};
use std::io::Read;

/// Inputs expanding to more than this are checked, not written again.
const ROUND_TRIP_MAX: u64 = 4 << 20;

fn check(
    dir: &std::path::Path,
    path: &std::path::Path,
) -> Option<(InputWheel, String, zipio::Digests)> {
    let mut w = InputWheel::open(path).ok()?;
    let record = (0..w.table.len())
        .map(|i| w.table.name(i))
        .find(|n| {
            n.split_once('/')
                .is_some_and(|(d, r)| d.ends_with(".dist-info") && r == "RECORD")
        })?
        .to_string();
    let digests = zipio::Digests::new(dir).ok()?;
    let root = dir.join("root");
    zipio::verify(&mut w, &record, &root, dir, &digests, &|_, _| false).ok()?;
    Some((w, record, digests))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = input_record_rows(data, "x.dist-info/RECORD", |_| Ok(()));

    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.whl");
    std::fs::write(&input, data).unwrap();
    // Every entry inflates (or fails) within its declared size.
    if let Ok(w) = InputWheel::open(&input) {
        for i in 0..w.table.len() {
            let mut n = 0u64;
            if let Ok(k) = w.inflate(i, |c| {
                n += c.len() as u64;
                Ok(())
            }) {
                assert_eq!(k, n);
            }
        }
    }
    let Some((w, record, digests)) = check(tmp.path(), &input) else {
        return;
    };
    if w.expanded > ROUND_TRIP_MAX {
        return;
    }
    let dist_info = record.trim_end_matches("/RECORD").to_string();
    let mut want = Vec::new();
    let mut entries = Vec::new();
    for i in 0..w.table.len() {
        let name = w.table.name(i).to_string();
        if rocpack_wheel::meta::is_record_file(&name, &record) {
            continue;
        }
        let mut b = Vec::new();
        w.inflate(i, |c| {
            b.extend_from_slice(c);
            Ok(())
        })
        .expect("verified entry inflates");
        want.push((name.clone(), b));
        entries.push(OutEntry {
            name,
            content: Content::Input(i),
            mode: w.table.rec(i).mode(),
            store: false,
        });
    }
    entries.push(OutEntry {
        name: format!("{dist_info}/extra.txt"),
        content: Content::Bytes(b"fresh\n".to_vec()),
        mode: 0o644,
        store: false,
    });
    want.push((format!("{dist_info}/extra.txt"), b"fresh\n".to_vec()));
    let out = tmp.path().join("out.whl");
    let opts = WriteOptions {
        time: zipio::zip_time(Some(0)),
        level: 1,
    };
    let input_ref = InputRef {
        wheel: &w,
        digests: &digests,
    };
    let sink = zipio::sink(false, &out, &dist_info, Some(input_ref), opts, tmp.path())
        .expect("writer opens");
    zipio::write_all(sink, entries, &dist_info).expect("a verified wheel is written again");

    // Independent reader: every written entry has the input's bytes.
    let mut z =
        zip::ZipArchive::new(std::fs::File::open(&out).unwrap()).expect("zip crate reads it");
    want.sort();
    let mut got = Vec::new();
    for k in 0..z.len() {
        let mut f = z.by_index(k).expect("zip crate opens entry");
        let name = f.name().expect("zip crate reads the name").to_string();
        let mut b = Vec::new();
        f.read_to_end(&mut b)
            .expect("zip crate inflates entry (CRC checked)");
        if name != record {
            got.push((name, b));
        }
    }
    got.sort();
    assert_eq!(got, want);
    assert!(
        check(tmp.path(), &out).is_some(),
        "the written wheel passes the input checks"
    );
});
