//! The streaming wheel writer (`zipio::WheelWriter`) read back by other
//! zip implementations: the zip crate, Python's `zipfile` (`testzip`, the
//! reader pip uses) and Info-ZIP's `unzip -t` when installed; ZIP64 end
//! records past 65,535 entries; stored, deflated, non-ASCII and empty
//! entries; RECORD generated from the bytes written.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::Command;

use rocpack_testsupport::{have_tool, tempdir};
use rocpack_wheel::zipio::{self, Content, OutEntry, WriteOptions};
use sha2::{Digest, Sha256};

fn opts() -> WriteOptions {
    WriteOptions {
        time: zipio::zip_time(Some(1_700_000_000)),
        level: 6,
    }
}

fn entry(name: &str, b: &[u8], store: bool) -> OutEntry {
    OutEntry {
        name: name.to_string(),
        content: Content::Bytes(b.to_vec()),
        mode: 0o644,
        store,
    }
}

/// Python's zipfile: opens, `testzip()` (every CRC), and returns the count.
fn python_count(whl: &Path) -> Option<usize> {
    if !have_tool("python3") {
        return None;
    }
    let o = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile\nz = zipfile.ZipFile(sys.argv[1])\nassert z.testzip() is None\nprint(len(z.infolist()))",
        ])
        .arg(whl)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "python zipfile: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(String::from_utf8_lossy(&o.stdout).trim().parse().unwrap())
}

fn unzip_t(whl: &Path) {
    if have_tool("unzip") {
        let o = Command::new("unzip").arg("-tqq").arg(whl).output().unwrap();
        assert!(
            o.status.success(),
            "unzip -t: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

fn write(out: &Path, entries: Vec<OutEntry>, tmp: &Path) -> zipio::Written {
    let sink = zipio::sink(false, out, "x-1.dist-info", None, opts(), tmp).unwrap();
    zipio::write_all(sink, entries, "x-1.dist-info").unwrap()
}

#[test]
fn other_readers_accept_what_the_writer_writes() {
    let t = tempdir();
    let big: Vec<u8> = (0..3_000_000u32)
        .flat_map(|i| (i % 251).to_le_bytes())
        .collect();
    let entries = vec![
        entry("pkg/__init__.py", b"x = 1\n", false),
        entry("pkg/empty.txt", b"", false),
        entry("pkg/stored.bin", &big[..100_000], true),
        entry("pkg/big.bin", &big, false),
        entry("pkg/caf\u{e9}/\u{65e5}\u{672c}.txt", b"utf-8 name", false),
        entry("pkg/a,b.txt", b"comma", false),
        entry("x-1.dist-info/METADATA", b"Name: x\nVersion: 1\n", false),
    ];
    let out = t.path().join("x-1-py3-none-any.whl");
    let w = write(&out, entries.clone(), t.path());
    assert_eq!(w.files, entries.len() + 1);
    assert_eq!(w.bytes, fs::metadata(&out).unwrap().len());
    // The zip crate: names, bytes, modes, RECORD.
    let mut a = zip::ZipArchive::new(fs::File::open(&out).unwrap()).unwrap();
    let mut names = Vec::new();
    for i in 0..a.len() {
        let mut f = a.by_index(i).unwrap();
        let mut b = Vec::new();
        f.read_to_end(&mut b).unwrap();
        assert_eq!(f.unix_mode().unwrap() & 0o777, 0o644);
        let name = f.name().unwrap().to_string();
        if let Some(e) = entries.iter().find(|e| e.name == name) {
            let Content::Bytes(want) = &e.content else {
                unreachable!()
            };
            assert_eq!(&b, want, "{name}");
        } else {
            assert_eq!(name, "x-1.dist-info/RECORD");
            let text = String::from_utf8(b).unwrap();
            let h = rocpack_wheel::meta::b64url(&Sha256::digest(&big));
            assert!(
                text.contains(&format!("pkg/big.bin,sha256={h},{}\n", big.len())),
                "{text}"
            );
            assert!(text.contains("\"pkg/a,b.txt\",sha256="), "{text}");
            assert!(text.ends_with("x-1.dist-info/RECORD,,\n"), "{text}");
        }
        names.push(name);
    }
    // In the order given, dist-info last, RECORD at the very end.
    assert_eq!(names.first().unwrap(), "pkg/__init__.py");
    assert_eq!(names.last().unwrap(), "x-1.dist-info/RECORD");
    if let Some(n) = python_count(&out) {
        assert_eq!(n, entries.len() + 1);
    }
    unzip_t(&out);
    // Deterministic: the same entries give the same bytes.
    let again = t.path().join("again.whl");
    write(&again, entries, t.path());
    assert_eq!(fs::read(&out).unwrap(), fs::read(&again).unwrap());
}

#[test]
fn more_than_65535_entries_get_zip64_end_records() {
    let t = tempdir();
    let n = 70_000usize;
    let entries: Vec<OutEntry> = (0..n)
        .map(|i| entry(&format!("p/{i:06}.txt"), format!("{i}\n").as_bytes(), false))
        .collect();
    let out = t.path().join("x-1-py3-none-any.whl");
    let w = write(&out, entries, t.path());
    assert_eq!(w.files, n + 1);
    let b = fs::read(&out).unwrap();
    // ZIP64 end record and locator before the classic end record.
    let eocd = b.len() - 22;
    assert_eq!(&b[eocd..eocd + 4], b"PK\x05\x06");
    assert_eq!(&b[eocd - 20..eocd - 16], b"PK\x06\x07");
    assert_eq!(&b[eocd - 76..eocd - 72], b"PK\x06\x06");
    let a = zip::ZipArchive::new(fs::File::open(&out).unwrap()).unwrap();
    assert_eq!(a.len(), n + 1);
    if let Some(c) = python_count(&out) {
        assert_eq!(c, n + 1);
    }
    unzip_t(&out);
    // Our own reader takes it too (ZIP64 end record).
    let f = fs::File::open(&out).unwrap();
    let (table, _, s) = rocpack_wheel::central::scan(&f, b.len() as u64, &zipio::LIMITS).unwrap();
    assert_eq!((table.len(), s.entries), (n + 1, (n + 1) as u64));
}

/// An input wheel rewritten after it was opened (size, times or inode) is
/// refused before any output is committed: raw copies would mix old
/// offsets with new bytes.
#[test]
fn an_input_rewritten_while_read_is_refused() {
    let t = tempdir();
    let out = t.path().join("x-1-py3-none-any.whl");
    write(&out, vec![entry("pkg/a.py", b"a = 1\n", false)], t.path());
    let w = zipio::InputWheel::open(&out).unwrap();
    w.check_unchanged().unwrap();
    assert_eq!(
        w.read_entry("pkg/a.py", 100).unwrap().unwrap(),
        b"a = 1\n".to_vec()
    );
    // Same length, other bytes (a rewrite in place).
    let mut b = fs::read(&out).unwrap();
    let n = b.len();
    b[n - 1] ^= 0;
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(&out, &b).unwrap();
    let e = w.check_unchanged().unwrap_err().to_string();
    assert!(e.contains("changed while it was read"), "{e}");
}
