//! Library-level: the commands that serve both kinds of snapshots root
//! (`ops::check_any`, `ops::status_any`, `ops::create_source`) pick the
//! right one by what the root holds, as `snapctl` (which only parses
//! arguments) relies on.

use rocpack_snapshot::ops::{self, CreateArgs, RootOpts};
use rocpack_snapshot::repo::Channel;
use rocpack_snapshot::source::SourceCreate;
use rocpack_testsupport::{git_commit_all, git_init};
use std::fs;
use std::path::Path;

fn opts(root: &Path) -> RootOpts {
    RootOpts {
        root: root.to_path_buf(),
        lock_timeout: None,
    }
}

fn run(f: impl FnOnce(&mut Vec<u8>) -> rocpack_snapshot::Result<u8>) -> (u8, String) {
    let mut out = Vec::new();
    let rc = f(&mut out).expect("command");
    (rc, String::from_utf8(out).expect("UTF-8 report"))
}

#[test]
fn check_and_status_route_by_the_kind_of_root() {
    let t = rocpack_testsupport::tempdir();
    let d = t.path();
    // A prebuilt root.
    let pre = d.join("prebuilt");
    fs::write(d.join("libx.a"), b"!<arch>\n").unwrap();
    let args = CreateArgs {
        store: None,
        version: "6.4".into(),
        artifact: d.join("libx.a"),
        headers: Vec::new(),
        commits: vec!["x=1".into()],
        checksums: None,
        prefix: Some("X".into()),
        abi_inputs: Vec::new(),
        abi_base: None,
    };
    assert_eq!(run(|o| ops::create(&opts(&pre), args, o)).0, 0);
    let (rc, text) = run(|o| ops::check_any(&opts(&pre), None, None, None, o));
    // The prebuilt check (its verdict goes to stderr), not the source one.
    assert_eq!(rc, 0, "{text}");
    assert!(!text.starts_with("OK "), "{text}");
    let (_, text) = run(|o| ops::status_any(&opts(&pre), true, o));
    assert!(text.contains("\"6.4\""), "{text}");
    let e = ops::check_any(&opts(&pre), None, None, Some(d), &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("prebuilt root"), "{e}");

    // A source root, cut from a git repository.
    let src = d.join("src");
    git_init(&src);
    fs::create_dir_all(src.join("lib")).unwrap();
    fs::write(src.join("lib/a.h"), "int a;\n").unwrap();
    let commit = git_commit_all(&src, "one");
    let cut = SourceCreate {
        repo: src.clone(),
        rev: commit.clone(),
        subtree: "lib".into(),
        include: Vec::new(),
        exclude: Vec::new(),
        channel: Channel::Stable,
        no_rotate: false,
        no_archive: false,
        lock_timeout: None,
    };
    let root = d.join("source");
    assert_eq!(run(|o| ops::create_source(&opts(&root), &cut, o)).0, 0);
    let (rc, text) = run(|o| ops::check_any(&opts(&root), None, None, Some(&src), o));
    assert_eq!(rc, 0, "{text}");
    assert!(text.starts_with("OK stable sha256:"), "{text}");
    let (_, text) = run(|o| ops::status_any(&opts(&root), false, o));
    assert!(text.contains(&commit[..12]), "{text}");
    // An unrecorded edit: red, naming the file.
    fs::write(root.join("stable/lib/a.h"), "int b;\n").unwrap();
    let (rc, text) = run(|o| ops::check_any(&opts(&root), None, None, None, o));
    assert_eq!(rc, 1, "{text}");
    assert!(text.contains("changed lib/a.h (content)"), "{text}");
}
