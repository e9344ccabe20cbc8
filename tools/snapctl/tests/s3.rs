//! `s3://` store against a real S3-compatible server (tests/ci/30-snapshot.sh starts
//! moto's server on 127.0.0.1 and runs this with `--ignored`). Environment:
//! SNAPCTL_TEST_S3_URL=s3://bucket/prefix plus the standard AWS_* variables.

mod common;
use common::*;
use std::fs;

#[test]
#[ignore = "needs an S3-compatible server; run by tests/ci/30-snapshot.sh"]
fn s3_store_create_verify_fetch_gc() {
    let url =
        std::env::var("SNAPCTL_TEST_S3_URL").expect("SNAPCTL_TEST_S3_URL (s3://bucket/prefix)");
    let s = Scratch::new(false);
    let shas: Vec<String> = (1..=3).map(|n| s.artifact(n)).collect();
    for n in 1..=3u64 {
        let mut a = s.create_args(n, "6.4");
        a.extend(["--store".into(), url.clone()]);
        let out = ok(&s.run(&a, &[]));
        assert!(
            out.contains(&format!("uploaded cas/sha256/{}", shas[n as usize - 1])),
            "{out}"
        );
    }
    // Store URL recorded once; later commands use it.
    assert!(fs::read_to_string(s.root().join("snapctl.conf"))
        .unwrap()
        .contains(&format!("store = {url}")));
    assert!(!s.root().join("store").exists());
    // Put-if-absent: the same artifact for another version is reused, not re-uploaded.
    let mut a = s.create_args(3, "7.0");
    a.extend(["--store".into(), url.clone()]);
    assert!(ok(&s.run(&a, &[])).contains(&format!("reused cas/sha256/{}", shas[2])));

    // A blob above the single-PUT limit (64 MiB) goes up as a multipart upload.
    let big = det_bytes(99, 70 << 20);
    fs::create_dir_all(s.path().join("art/big")).unwrap();
    fs::write(s.path().join("art/big/librcclx-dev.a"), &big).unwrap();
    let o = ok(&s.cmd(&[
        "create",
        "--snapshots-root",
        "root",
        "--version",
        "6.2",
        "--artifact",
        "art/big/librcclx-dev.a",
    ]));
    assert!(
        o.contains(&format!(
            "uploaded cas/sha256/{} ({} bytes)",
            sha256_hex(&big),
            big.len()
        )),
        "{o}"
    );

    let o = s.cmd(&["verify", "--snapshots-root", "root", "--all"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    ok(&s.fetch(&[], None, "6.2", "big.a"));
    assert!(fs::read(s.path().join("big.a")).unwrap() == big);
    ok(&s.fetch(&[], Some("last-stable"), "6.4", "got.a"));
    assert_eq!(s.sha_of("got.a"), shas[1]);
    let gc = ok(&s.cmd(&["gc", "--snapshots-root", "root", "--dry-run"]));
    assert_eq!(
        gc, "",
        "all three blobs are referenced (stable, last-stable, archive)"
    );

    // A blob that is not in the bucket is reported by verify.
    let m = s.root().join("stable/7.0/metadata.txt");
    let text = fs::read_to_string(&m).unwrap();
    let fake = "ee".repeat(32);
    fs::write(&m, text.replace(&shas[2], &fake)).unwrap();
    let o = s.cmd(&["verify", "--snapshots-root", "root"]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains(&format!("BAD 7.0 stable: blob cas/sha256/{fake} missing")),
        "{}",
        stdout(&o)
    );
    let o = s.fetch(&[], None, "7.0", "x.a");
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(!s.path().join("x.a").exists());
}

/// `http://host:port/<bucket>/<prefix>/<key>` of an object, from the test's
/// S3 URL and `AWS_ENDPOINT_URL` (moto serves path-style requests).
fn object_addr(url: &str, key: &str) -> (String, String) {
    let ep = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL");
    let host = ep
        .strip_prefix("http://")
        .expect("a plain http:// endpoint")
        .trim_end_matches('/')
        .to_string();
    let bp = url.strip_prefix("s3://").unwrap().trim_matches('/');
    (host, format!("/{bp}/{key}"))
}

/// Headers of an authenticated-looking request: moto refuses anonymous
/// object access but does not check signatures.
const MOTO_AUTH: &str = "Authorization: AWS4-HMAC-SHA256 Credential=rocpack/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\nContent-Type: application/octet-stream\r\n";

/// One plain HTTP request to moto; returns (status, body).
fn http(method: &str, url: &str, key: &str, body: &[u8]) -> (u32, Vec<u8>) {
    use std::io::{Read, Write};
    let (host, path) = object_addr(url, key);
    let mut s = std::net::TcpStream::connect(&host).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n{MOTO_AUTH}Connection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let split = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("HTTP response");
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status: u32 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap();
    let mut body = resp[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        // De-chunk.
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap().trim(), 16)
                .unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + n]);
            rest = &rest[nl + 2 + n + 2..];
        }
        body = out;
    }
    (status, body)
}

/// Item 2 of the hardening issue: wrong bytes stored under an artifact's
/// sha256 (an earlier upload raced a changing artifact) no longer make every
/// later `create` of the genuine artifact fail: the object is replaced from
/// the verified local copy.
#[test]
#[ignore = "needs an S3-compatible server; run by tests/ci/30-snapshot.sh"]
fn s3_poisoned_object_is_replaced() {
    let url = format!(
        "{}/poison",
        std::env::var("SNAPCTL_TEST_S3_URL").expect("SNAPCTL_TEST_S3_URL")
    );
    let s = Scratch::new(false);
    let sha = s.artifact(41);
    let key = format!("cas/sha256/{sha}");
    let (st, _) = http("PUT", &url, &key, b"not the artifact");
    assert_eq!(st, 200);
    let mut a = s.create_args(41, "6.4");
    a.extend(["--store".into(), url.clone()]);
    let o = s.run(&a, &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("replacing it"), "{}", stderr(&o));
    let (st, body) = http("GET", &url, &key, b"");
    assert_eq!(st, 200);
    assert_eq!(sha256_hex(&body), sha, "the object now holds the artifact");
    ok(&s.cmd(&["verify", "--snapshots-root", "root", "--all"]));
    // And again: nothing left to replace.
    let mut a = s.create_args(41, "7.0");
    a.extend(["--store".into(), url]);
    assert!(ok(&s.run(&a, &[])).contains(&format!("reused {key}")));
}

/// The artifact is rewritten in place while `create` copies, hashes and
/// uploads it: each create is refused (the file changed while it was read)
/// or publishes a whole version of it; every object in the store still
/// hashes to its name, and the metadata describes the bytes uploaded
/// (fetch gives them back).
#[test]
#[ignore = "needs an S3-compatible server; run by tests/ci/30-snapshot.sh"]
fn s3_artifact_changing_mid_upload_never_poisons() {
    use std::io::{Seek, SeekFrom, Write};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let url = format!(
        "{}/midupload",
        std::env::var("SNAPCTL_TEST_S3_URL").expect("SNAPCTL_TEST_S3_URL")
    );
    let s = Scratch::new(false);
    s.artifact(77);
    let art = s.path().join("art/lib77/librcclx-dev.a");
    let size = 8u64 << 20;
    fs::write(&art, det_bytes(78, size as usize)).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let writes = std::sync::Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, writes, art) = (stop.clone(), writes.clone(), art.clone());
        std::thread::spawn(move || {
            let mut x = 0x2545_f491_4f6c_dd1du64;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut f = fs::OpenOptions::new().write(true).open(&art).unwrap();
                f.seek(SeekFrom::Start(x % size)).unwrap();
                f.write_all(&x.to_le_bytes().repeat(512)).unwrap();
                writes.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // A snapshot made before the writer starts: what fetch gives back when
    // every create below is refused.
    s.artifact(79);
    let mut a = s.create_args(79, "6.4");
    a.extend(["--store".into(), url.clone()]);
    ok(&s.run(&a, &[]));
    let mut keys = Vec::new();
    let mut refused = 0;
    for i in 0..6u64 {
        let mut a = s.create_args(77, "6.4");
        a.pop();
        a.push(format!("rcclx={:040x}", 1000 + i));
        a.extend(["--store".into(), url.clone()]);
        let o = s.run(&a, &[]);
        if code(&o) == 2 && stderr(&o).contains("changed while snapctl read it") {
            refused += 1;
            continue;
        }
        let out = ok(&o);
        let k = out
            .split_whitespace()
            .find(|w| w.starts_with("cas/sha256/"))
            .unwrap()
            .to_string();
        keys.push(k);
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(writes.load(Ordering::Relaxed) > 0);
    eprintln!("{refused} creates refused, {} published", keys.len());
    for k in &keys {
        let (st, body) = http("GET", &url, k, b"");
        assert_eq!(st, 200, "{k}");
        assert_eq!(
            format!("cas/sha256/{}", sha256_hex(&body)),
            *k,
            "object {k} does not hash to its name"
        );
    }
    ok(&s.cmd(&["verify", "--snapshots-root", "root", "--all"]));
    ok(&s.fetch(&[], None, "6.4", "got.a"));
    let meta = fs::read_to_string(s.root().join("stable/6.4/metadata.txt")).unwrap();
    let got = s.sha_of("got.a");
    assert!(meta.contains(&got), "{meta}");
}
