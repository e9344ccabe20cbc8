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

    ok(&s.cmd(&[
        "fetch",
        "--snapshots-root",
        "root",
        "--store",
        &url,
        "--version",
        "6.4",
        "-o",
        "got.a",
    ]));
    assert_eq!(sha256_hex(&fs::read(s.path().join("got.a")).unwrap()), a2);
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
    let o = s.cmd(&[
        "fetch",
        "--snapshots-root",
        "root",
        "--store",
        &url,
        "--channel",
        "last-stable",
        "--version",
        "6.4",
        "-o",
        "bad.a",
    ]);
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
