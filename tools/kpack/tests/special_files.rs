//! Special files never hang or blow memory: a FIFO, a directory or a
//! symlink to /dev/zero given where a file is read is refused at once with
//! what it is (exit 2), under a 256 MiB address-space ceiling.

mod common;
use common::*;

#[test]
fn fifos_directories_and_devices_are_refused() {
    let tmp = tempdir();
    let t = tmp.path();
    let (fifo, zero) = fifo_and_dev_zero(t, "fifo", "zero");
    // A split input whose manifest is a FIFO.
    let art = t.join("x_lib");
    std::fs::create_dir_all(art.join("lib")).unwrap();
    mkfifo(&art.join("artifact_manifest.txt"));
    let out = t.join("o");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["inspect", s(&fifo)], "FIFO"),
        (vec!["inspect", s(t)], "directory"),
        (vec!["inspect", s(&zero)], "not a regular file"),
        (vec!["unbundle", s(&fifo), "--output-dir", s(&out)], "FIFO"),
        (
            vec!["select-family", "--arch", "gfx1100", "--config", s(&fifo)],
            "FIFO",
        ),
        (
            vec!["select-family", "--arch", "gfx1100", "--config", s(&zero)],
            "device",
        ),
        (split_args(&art, "x_lib", &out), "FIFO"),
    ];
    for (args, needle) in cases {
        let err = refused_bounded(&args, needle);
        // The OS error is said once.
        assert!(
            err.matches("not a regular file").count() <= 1,
            "{args:?}: {err}"
        );
    }
}
