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
    ok(&s.cmd(&[
        "fetch",
        "--snapshots-root",
        "root",
        "--version",
        "6.2",
        "-o",
        "big.a",
    ]));
    assert!(fs::read(s.path().join("big.a")).unwrap() == big);
    ok(&s.cmd(&[
        "fetch",
        "--snapshots-root",
        "root",
        "--channel",
        "last-stable",
        "--version",
        "6.4",
        "-o",
        "got.a",
    ]));
    assert_eq!(
        sha256_hex(&fs::read(s.path().join("got.a")).unwrap()),
        shas[1]
    );
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
    let o = s.cmd(&[
        "fetch",
        "--snapshots-root",
        "root",
        "--version",
        "7.0",
        "-o",
        "x.a",
    ]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(!s.path().join("x.a").exists());
}
