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
        err.contains("re-cut the snapshot") && err.contains("--//:lib_channel=dev"),
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
