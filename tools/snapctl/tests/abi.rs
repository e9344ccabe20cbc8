//! ABI-drift guard with a real break: a prebuilt archive compiled against
//! one layout of a dependency's struct, linked into a program compiled
//! against the next layout. Without the guard the program prints a wrong
//! sum; `snapctl abi-check` (what the rules run before the archive can be
//! linked) stops it, naming the changed header and the two ways out.

mod common;

use common::*;
use std::fs;
use std::path::Path;

const POINT_V1: &str = "struct point { int x; int y; };\n";
/// The dependency grew a field in front: every offset moved.
const POINT_V2: &str = "struct point { long id; int x; int y; };\n";

/// Links `app.c` (compiled against the current dep/point.h) with the
/// snapshot's archive and returns what the program prints.
fn link_and_run(w: &Path) -> String {
    sh(w, "cc -Idep -o app app.c art/liblib.a");
    stdout(&sh(w, "./app")).trim().to_string()
}

fn abi_check(w: &Path, extra: &[&str]) -> std::process::Output {
    let meta = fs::read_to_string(w.join("root/stable/7.0/metadata.txt")).unwrap();
    let mut args = vec!["abi-check".to_string()];
    let mut in_abi = false;
    for l in meta.lines() {
        if l == "ABI inputs:" {
            in_abi = true;
        } else if in_abi && l.starts_with("  ") {
            let (p, d) = l.trim().rsplit_once(": ").unwrap();
            args.push("--expect".into());
            args.push(format!("{p}={d}"));
        } else {
            in_abi = false;
        }
    }
    args.extend(["--input".into(), "dep/point.h=dep/point.h".into()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    snapctl(w, &args, &[])
}

#[test]
fn struct_layout_change_wrong_result_without_guard_stopped_with_it() {
    if !rocpack_testsupport::have_tool("cc") {
        panic!("cc is required (installed by tests/ci/lib.sh)");
    }
    let t = rocpack_testsupport::tempdir();
    let w = t.path();
    fs::create_dir_all(w.join("dep")).unwrap();
    fs::create_dir_all(w.join("art")).unwrap();
    fs::create_dir_all(w.join("root")).unwrap();
    fs::write(w.join("dep/point.h"), POINT_V1).unwrap();
    fs::write(
        w.join("lib.c"),
        "#include \"point.h\"\nint lib_sum(const struct point *p) { return p->x + p->y; }\n",
    )
    .unwrap();
    fs::write(
        w.join("app.c"),
        "#include <stdio.h>\n#include \"point.h\"\nint lib_sum(const struct point *p);\nint main(void) { struct point p = {0}; p.x = 2; p.y = 3; printf(\"%d\\n\", lib_sum(&p)); return 0; }\n",
    )
    .unwrap();
    sh(
        w,
        "cc -O1 -Idep -c lib.c -o lib.o && ar rcs art/liblib.a lib.o",
    );
    let out = ok(&snapctl(
        w,
        &[
            "create",
            "--snapshots-root",
            "root",
            "--version",
            "7.0",
            "--artifact",
            "art/liblib.a",
            "--abi-input",
            "dep/point.h",
        ],
        &[],
    ));
    assert!(out.contains("stable/7.0"), "{out}");
    let meta = fs::read_to_string(w.join("root/stable/7.0/metadata.txt")).unwrap();
    assert!(
        meta.contains(&format!(
            "  dep/point.h: {}",
            sha256_hex(POINT_V1.as_bytes())
        )),
        "{meta}"
    );
    let bzl = fs::read_to_string(w.join("root/stable_checksums.bzl")).unwrap();
    assert!(bzl.contains("\"abi_inputs\": {\"dep/point.h\": "), "{bzl}");

    // Same layout: the guard passes and the program is right.
    let o = abi_check(w, &["--stamp", "ok.stamp"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(w.join("ok.stamp").exists());
    assert_eq!(link_and_run(w), "5");

    // The dependency changes its struct layout.
    fs::write(w.join("dep/point.h"), POINT_V2).unwrap();
    // Without the guard: it links and silently computes a wrong result.
    let wrong = link_and_run(w);
    eprintln!("without the guard, 2 + 3 = {wrong}");
    assert_ne!(
        wrong, "5",
        "the layout change did not break the prebuilt archive"
    );
    // With the guard: exit 1 before linking, naming the file and both ways out.
    let o = abi_check(
        w,
        &["--library", "lib", "--channel", "stable", "--version", "7.0", "--recut", "snapctl create --snapshots-root root --version 7.0 --artifact art/liblib.a --abi-input dep/point.h", "--dev=--//:lib_channel=dev", "--stamp", "bad.stamp"],
    );
    let err = fails_with(&o, 1, "ABI drift");
    assert!(
        err.contains(&format!(
            "changed: dep/point.h (snapshot built against sha256 {}, now {})",
            sha256_hex(POINT_V1.as_bytes()),
            sha256_hex(POINT_V2.as_bytes())
        )),
        "{err}"
    );
    assert!(
        err.contains("re-cut this snapshot") && err.contains("--//:lib_channel=dev"),
        "{err}"
    );
    assert!(!w.join("bad.stamp").exists());
    // The same check with the input as two arguments (what the Buck2 rule passes).
    let meta = fs::read_to_string(w.join("root/stable/7.0/metadata.txt")).unwrap();
    let recorded = meta
        .lines()
        .find_map(|l| l.trim().strip_prefix("dep/point.h: "))
        .unwrap()
        .to_string();
    let expect = format!("dep/point.h={recorded}");
    let pair = |file: &str| {
        snapctl(
            w,
            &[
                "abi-check",
                "--expect",
                &expect,
                "--input-pair",
                "dep/point.h",
                file,
            ],
            &[],
        )
    };
    fails_with(&pair("dep/point.h"), 1, "changed: dep/point.h");
    fs::write(w.join("v1.h"), POINT_V1).unwrap();
    assert_eq!(code(&pair("v1.h")), 0);

    // Re-cut against the new layout: the guard passes again and the sum is right.
    sh(
        w,
        "cc -O1 -Idep -c lib.c -o lib.o && rm -f art/liblib.a && ar rcs art/liblib.a lib.o",
    );
    ok(&snapctl(
        w,
        &[
            "create",
            "--snapshots-root",
            "root",
            "--version",
            "7.0",
            "--artifact",
            "art/liblib.a",
            "--abi-input",
            "dep/point.h",
        ],
        &[],
    ));
    let o = abi_check(w, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(link_and_run(w), "5");
}

#[test]
fn abi_inputs_outside_the_base_or_twice_are_usage_errors() {
    let t = rocpack_testsupport::tempdir();
    let w = t.path();
    fs::create_dir_all(w.join("art")).unwrap();
    fs::create_dir_all(w.join("root")).unwrap();
    fs::write(w.join("art/liblib.a"), b"!<arch>\n").unwrap();
    fs::write(w.join("h.h"), b"int x;\n").unwrap();
    let o = snapctl(
        w,
        &[
            "create",
            "--snapshots-root",
            "root",
            "--version",
            "7.0",
            "--artifact",
            "art/liblib.a",
            "--abi-input",
            "h.h",
            "--abi-input",
            "./h.h",
        ],
        &[],
    );
    fails_with(&o, 2, "given twice");
    let o = snapctl(
        w,
        &[
            "create",
            "--snapshots-root",
            "root",
            "--version",
            "7.0",
            "--artifact",
            "art/liblib.a",
            "--abi-input",
            "/etc/hostname",
            "--abi-base",
            ".",
        ],
        &[],
    );
    fails_with(&o, 2, "not under the ABI base");
    assert!(!w.join("root/stable").exists());
}

/// `abi-check` with one path twice in `--expect` or `--input` (also after
/// normalisation, also through `--input-pair`): refused with exit 2 and no
/// stamp, whatever the order (before, the last value silently won: exit 0
/// with the stamp written, or exit 1, depending on the order). Without
/// `--library` the message names no library twice ("the the library").
#[test]
fn abi_check_refuses_a_path_given_twice_and_names_the_library_once() {
    let t = rocpack_testsupport::tempdir();
    let w = t.path();
    fs::write(w.join("v1.h"), POINT_V1).unwrap();
    fs::write(w.join("v2.h"), POINT_V2).unwrap();
    let (d1, d2) = (
        sha256_hex(POINT_V1.as_bytes()),
        sha256_hex(POINT_V2.as_bytes()),
    );
    let run = |args: &[&str]| {
        let mut a = vec!["abi-check", "--stamp", "ok.stamp"];
        a.extend_from_slice(args);
        snapctl(w, &a, &[])
    };
    let e1 = format!("dep/p.h={d1}");
    let e2 = format!("./dep/p.h={d2}");
    let cases: [Vec<&str>; 6] = [
        vec!["--expect", &e1, "--expect", &e2, "--input", "dep/p.h=v1.h"],
        vec!["--expect", &e2, "--expect", &e1, "--input", "dep/p.h=v1.h"],
        vec![
            "--expect",
            &e1,
            "--input",
            "dep/p.h=v2.h",
            "--input",
            "dep/./p.h=v1.h",
        ],
        vec![
            "--expect",
            &e1,
            "--input",
            "dep/p.h=v1.h",
            "--input",
            "dep/p.h=v2.h",
        ],
        vec![
            "--expect",
            &e1,
            "--input",
            "dep/p.h=v1.h",
            "--input-pair",
            "dep/p.h",
            "v1.h",
        ],
        vec!["--expect", &e1, "--expect", &e1, "--input", "dep/p.h=v1.h"],
    ];
    for c in &cases {
        let err = fails_with(&run(c), 2, "dep/p.h is given twice");
        assert!(!w.join("ok.stamp").exists(), "{c:?}: stamp written\n{err}");
    }
    assert_eq!(code(&run(&["--expect", &e1, "--input", "dep/p.h=v1.h"])), 0);
    assert!(w.join("ok.stamp").exists());
    let err = fails_with(
        &run(&["--expect", &e1, "--input", "dep/p.h=v2.h"]),
        1,
        "ABI drift",
    );
    assert!(!err.contains("the the"), "{err}");
    assert!(err.contains("the prebuilt snapshot"), "{err}");
    assert!(err.contains("build the library from source"), "{err}");
}

/// The `Headers:` and `Commit Hashes:` sections of a metadata file.
fn kept_sections(meta: &str) -> String {
    let mut out = String::new();
    let mut on = false;
    for l in meta.lines() {
        if l == "Headers:" || l == "Commit Hashes:" {
            on = true;
        } else if !l.starts_with("  ") {
            on = false;
        }
        if on {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// `recut` after a dependency change, for each channel: a rebuilt archive
/// in place (no rotation), the snapshot's headers, commits and artifact name
/// kept, its ABI inputs hashed again (recorded path under --abi-base, or
/// PATH=FILE), the old metadata archived, the checksums file rewritten; the
/// guard then passes and the program is right. Run the way `bazel run` runs
/// it: from another directory, with BUILD_WORKING_DIRECTORY naming where the
/// relative paths start. Before, `create` could only write stable (and a
/// header-less one when run as the guard printed it).
#[test]
fn recut_keeps_headers_and_commits_for_any_channel() {
    if !rocpack_testsupport::have_tool("cc") {
        panic!("cc is required (installed by tests/ci/lib.sh)");
    }
    let t = rocpack_testsupport::tempdir();
    let w = t.path();
    for d in ["dep", "art", "inc", "elsewhere"] {
        fs::create_dir_all(w.join(d)).unwrap();
    }
    fs::write(w.join("dep/point.h"), POINT_V1).unwrap();
    fs::write(w.join("inc/lib.h"), "int lib_sum(const void *);\n").unwrap();
    fs::write(
        w.join("app.c"),
        "#include <stdio.h>\n#include \"point.h\"\nint lib_sum(const struct point *p);\nint main(void) { struct point p = {0}; p.x = 2; p.y = 3; printf(\"%d\\n\", lib_sum(&p)); return 0; }\n",
    )
    .unwrap();
    let lib = |n: u32| {
        fs::write(
            w.join("lib.c"),
            format!("#include \"point.h\"\nint lib_sum(const struct point *p) {{ return p->x + p->y + {n} - {n}; }}\nint lib_release = {n};\n"),
        )
        .unwrap();
        sh(
            w,
            "cc -O1 -Idep -c lib.c -o lib.o && rm -f art/liblib.a && ar rcs art/liblib.a lib.o",
        );
    };
    let create = |rel: &str| {
        ok(&snapctl(
            w,
            &[
                "create",
                "--snapshots-root",
                "root",
                "--version",
                "7.0",
                "--artifact",
                "art/liblib.a",
                "--header",
                "inc/lib.h",
                "--commit",
                rel,
                "--abi-input",
                "dep/point.h",
            ],
            &[],
        ))
    };
    lib(1);
    create("lib=r1");
    lib(2);
    create("lib=r2");
    let meta =
        |ch: &str| fs::read_to_string(w.join(format!("root/{ch}/7.0/metadata.txt"))).unwrap();
    let before = [
        kept_sections(&meta("stable")),
        kept_sections(&meta("last-stable")),
    ];
    assert!(
        before[0].contains("lib.h") && before[0].contains("lib: r2"),
        "{}",
        before[0]
    );
    assert!(before[1].contains("lib: r1"), "{}", before[1]);

    fs::write(w.join("dep/point.h"), POINT_V2).unwrap();
    let v2 = sha256_hex(POINT_V2.as_bytes());
    // bazel run: started elsewhere, told where the user was.
    let recut = |ch: &str, extra: &[&str]| {
        let mut a = vec![
            "recut",
            "--snapshots-root",
            "root",
            "--channel",
            ch,
            "--version",
            "7.0",
            "--artifact",
            "art/liblib.a",
            "--abi-base",
            ".",
        ];
        a.extend_from_slice(extra);
        snapctl(
            &w.join("elsewhere"),
            &a,
            &[("BUILD_WORKING_DIRECTORY", rocpack_testsupport::s(w))],
        )
    };
    lib(2);
    let out = ok(&recut("stable", &[]));
    assert!(
        out.contains("stable/7.0 <- sha256") && out.contains("kept 1 header(s), 1 commit(s)"),
        "{out}"
    );
    assert!(
        out.contains(&format!("ABI input dep/point.h: {v2} (changed)")),
        "{out}"
    );
    assert_eq!(code(&recut("stable", &[])), 0);
    assert!(stdout(&recut("stable", &[])).contains("nothing to do"));
    // last-stable, its input given as PATH=FILE (a generated header elsewhere).
    fs::write(w.join("elsewhere/point.h"), POINT_V2).unwrap();
    lib(1);
    let out = ok(&recut(
        "last-stable",
        &["--abi-input", "dep/point.h=elsewhere/point.h"],
    ));
    assert!(out.contains("last-stable/7.0 <- sha256"), "{out}");
    let after = [
        kept_sections(&meta("stable")),
        kept_sections(&meta("last-stable")),
    ];
    assert_eq!(after, before, "headers or commits changed");
    for ch in ["stable", "last-stable"] {
        let m = meta(ch);
        assert!(m.contains(&format!("  dep/point.h: {v2}")), "{m}");
        assert!(m.contains("name: liblib.a"), "{m}");
    }
    assert!(w.join("root/stable/7.0/lib.h").exists());
    let archived: Vec<String> = rocpack_testsupport::dir_names(&w.join("root/archives/7.0"))
        .into_iter()
        .filter(|n| n.ends_with("_metadata.txt"))
        .collect();
    assert_eq!(archived.len(), 2, "{archived:?}");
    let bzl = fs::read_to_string(w.join("root/stable_checksums.bzl")).unwrap();
    assert_eq!(bzl.matches(&v2).count(), 2, "{bzl}");
    ok(&snapctl(w, &["check", "--snapshots-root", "root"], &[]));
    ok(&snapctl(w, &["verify", "--snapshots-root", "root"], &[]));
    // The guard passes and the program is right against the new layout.
    let o = abi_check(w, &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    lib(2);
    sh(w, "rm -f art/liblib.a");
    ok(&snapctl(
        w,
        &[
            "fetch",
            "--snapshots-root",
            "root",
            "--version",
            "7.0",
            "-o",
            "art/liblib.a",
        ],
        &[],
    ));
    assert_eq!(link_and_run(w), "5");
    // A recorded input found nowhere, and a channel without the version: refused.
    fs::remove_file(w.join("dep/point.h")).unwrap();
    fails_with(
        &recut("stable", &[]),
        2,
        "recorded by the snapshot, is neither given",
    );
    fails_with(
        &snapctl(
            w,
            &[
                "recut",
                "--snapshots-root",
                "root",
                "--channel",
                "stable",
                "--version",
                "6.4",
                "--artifact",
                "art/liblib.a",
            ],
            &[],
        ),
        2,
        "no stable snapshot of ROCm 6.4 to re-cut",
    );
}
