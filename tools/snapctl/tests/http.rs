//! `http(s)://` store (read-only): a tiny loopback HTTP server serves a local store dir.

mod common;
use common::*;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;

/// Serves files under `dir` on 127.0.0.1 (GET/HEAD, 404 otherwise) until the test ends.
fn serve(dir: PathBuf) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming().take(200) {
            let Ok(mut c) = conn else { continue };
            let mut r = BufReader::new(c.try_clone().unwrap());
            let mut first = String::new();
            if r.read_line(&mut first).is_err() {
                continue;
            }
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                    break;
                }
            }
            let mut parts = first.split_whitespace();
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
            let file = dir.join(path.trim_start_matches('/'));
            let resp = match fs::read(&file) {
                Ok(body) if !path.contains("..") && file.is_file() => {
                    let mut v = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nLast-Modified: Tue, 27 Jan 2026 10:11:12 GMT\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    if method == "GET" {
                        v.extend(body);
                    }
                    v
                }
                _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_vec(),
            };
            let _ = c.write_all(&resp);
        }
    });
    format!("http://{addr}/")
}

#[test]
fn http_store_fetch_verify_and_read_only() {
    let s = Scratch::new(false);
    let a1 = s.artifact(1);
    let a2 = s.artifact(2);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    ok(&s.run(&s.create_args(2, "6.4"), &[]));
    let url = serve(s.store());

    ok(&s.fetch(&["--store", &url], None, "6.4", "got.a"));
    assert_eq!(s.sha_of("got.a"), a2);
    let o = s.cmd(&["verify", "--snapshots-root", "root", "--store", &url]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));

    // Corrupted on the server: verify names it, fetch refuses it.
    let p = s.store().join("cas/sha256").join(&a1);
    let mut perm = fs::metadata(&p).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    fs::set_permissions(&p, perm).unwrap();
    fs::write(&p, b"not the artifact").unwrap();
    let bad = sha256_hex(b"not the artifact");
    let o = s.cmd(&["verify", "--snapshots-root", "root", "--store", &url]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains(&format!("BAD 6.4 last-stable: blob cas/sha256/{a1} corrupt in {url}: expected sha256 {a1}, actual sha256 {bad}")), "{}", stdout(&o));
    let o = s.fetch(&["--store", &url], Some("last-stable"), "6.4", "bad.a");
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(!s.path().join("bad.a").exists());
    // Missing on the server.
    fs::remove_file(&p).unwrap();
    let o = s.cmd(&["verify", "--snapshots-root", "root", "--store", &url]);
    assert!(stdout(&o).contains("actual: missing"), "{}", stdout(&o));

    // Read-only: create refuses before touching the repo.
    s.artifact(3);
    let mut a = s.create_args(3, "6.4");
    a.extend(["--store".into(), url.clone()]);
    let before = tree(&s.root());
    let o = s.run(&a, &[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("read-only"), "{}", stderr(&o));
    assert_same_tree(&before, &tree(&s.root()), "create on http store");
}

/// A mirror that announces 10^11 bytes and streams zeros for as long as it is read.
fn serve_liar(announce: u64) -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = sent.clone();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming().take(50) {
            let Ok(mut c) = conn else { continue };
            let counter = counter.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut first = String::new();
                let _ = r.read_line(&mut first);
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                        break;
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {announce}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
                );
                if c.write_all(head.as_bytes()).is_err() || first.starts_with("HEAD") {
                    return;
                }
                let zeros = vec![0u8; 1 << 16];
                while c.write_all(&zeros).is_ok() {
                    counter.fetch_add(zeros.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    (format!("http://{addr}/"), sent)
}

/// Item 4 of the hardening issue: `fetch` and `verify` read no more than the
/// size the metadata records, from a lying mirror and from a dir store whose
/// blob was replaced by `/dev/zero`; nothing is left at the output path.
#[test]
fn fetch_and_verify_are_bounded_by_the_recorded_size() {
    let s = Scratch::new(false);
    s.artifact(1);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    let (url, sent) = serve_liar(100_000_000_000);
    let fetch = |store: &str| s.fetch(&["--store", store], None, "6.4", "got.a");
    let o = fetch(&url);
    fails_with(&o, 1, "metadata says");
    assert!(!s.path().join("got.a").exists());
    let leftovers: Vec<_> = fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".part"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let o = s.cmd(&["verify", "--snapshots-root", "root", "--store", &url]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("metadata says"), "{}", stdout(&o));
    // The announced size is refused before the body is read; at most what
    // the socket buffers took was ever written by the server.
    let total = sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(total < 64 << 20, "server sent {total} bytes");

    // Dir store: the blob replaced by a symlink to /dev/zero.
    let blob = fs::read_dir(s.store().join("cas/sha256"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &blob).unwrap();
    let o = fetch("root/store");
    assert_ne!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    assert!(!s.path().join("got.a").exists());
    let o = s.cmd(&["verify", "--snapshots-root", "root"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(stdout(&o).contains("not a regular file"), "{}", stdout(&o));
}

/// `verify` reports every bad snapshot, not just the first unreadable blob.
#[test]
fn verify_reports_every_bad_blob() {
    let s = Scratch::new(false);
    s.artifact(1);
    s.artifact(2);
    ok(&s.run(&s.create_args(1, "6.4"), &[]));
    ok(&s.run(&s.create_args(2, "7.0"), &[]));
    let blobs: Vec<_> = fs::read_dir(s.store().join("cas/sha256"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(blobs.len(), 2);
    // One unreadable (a directory where the blob was), one FIFO.
    fs::remove_file(&blobs[0]).unwrap();
    fs::create_dir(&blobs[0]).unwrap();
    fs::remove_file(&blobs[1]).unwrap();
    let st = std::process::Command::new("mkfifo")
        .arg(&blobs[1])
        .status()
        .unwrap();
    assert!(st.success());
    let o = s.cmd(&["verify", "--snapshots-root", "root"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(stdout(&o).matches("BAD ").count(), 2, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("0 snapshot(s) ok, 2 problem(s)"),
        "{}",
        stderr(&o)
    );
}
