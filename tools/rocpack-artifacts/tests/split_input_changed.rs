//! A fat binary rewritten while it is being split is an error, never an
//! artifact mixing its old and new bytes: the write stage reads code
//! objects from the inputs again (uncompressed bundles copied, CCOBs
//! decompressed into `--compression none` archives), so the split checks,
//! once every output is written, that each fat binary is still what the
//! scan read. The rewrite happens deterministically, from the progress
//! callback that announces the write stage (no clocks): same size, other
//! bytes; grown; replaced by another file. Each must fail, leave no output
//! directory, and name the file; an untouched input splits.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rocpack_artifacts::split::{split_artifact, Progress, SplitOptions};
use rocpack_testsupport::fixtures;

/// Rewrites `path` (once) when the write stage begins.
struct RewriteAtPacking {
    path: PathBuf,
    how: fn(&Path),
    done: Mutex<bool>,
}

impl Progress for RewriteAtPacking {
    fn begin(&self, phase: &str, _total: u64) {
        let mut done = self.done.lock().unwrap();
        if phase == "packing" && !*done {
            (self.how)(&self.path);
            *done = true;
        }
    }
}

fn same_size_other_bytes(p: &Path) {
    let mut b = fs::read(p).unwrap();
    let n = b.len();
    b[n / 2] ^= 0xff;
    fs::write(p, b).unwrap();
}

fn grown(p: &Path) {
    use std::io::Write;
    fs::OpenOptions::new()
        .append(true)
        .open(p)
        .unwrap()
        .write_all(b"more")
        .unwrap();
}

fn replaced(p: &Path) {
    let b = fs::read(p).unwrap();
    let tmp = p.with_extension("new");
    fs::write(&tmp, b).unwrap();
    fs::rename(&tmp, p).unwrap();
}

fn leave(_: &Path) {}

/// A case: its name, the rewrite, and what the error must say (`None`: the
/// split succeeds).
type Case = (&'static str, fn(&Path), Option<&'static str>);

#[test]
fn a_fat_binary_rewritten_during_the_split_fails_it() {
    let cases: [Case; 4] = [
        ("untouched", leave, None),
        (
            "same size",
            same_size_other_bytes,
            Some("rewritten in place"),
        ),
        ("grown", grown, Some("bytes, now")),
        ("replaced", replaced, Some("replaced by another file")),
    ];
    for compression in [
        rocpack_kpack::Compression::None,
        rocpack_kpack::Compression::zstd(),
    ] {
        for fixture in ["libfx_multi.so", "libfx_multi_compressed.so"] {
            for (name, how, want) in cases {
                let tmp = tempfile::tempdir().unwrap();
                let art = tmp.path().join("art");
                let lib = art.join("lib").join(fixture);
                fs::create_dir_all(lib.parent().unwrap()).unwrap();
                fs::copy(fixtures().join("fatbins").join(fixture), &lib).unwrap();
                fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
                let out = tmp.path().join("out");
                let opts = SplitOptions {
                    compression,
                    ..SplitOptions::new(art.clone(), "t", out.clone())
                };
                let progress = RewriteAtPacking {
                    path: lib.clone(),
                    how,
                    done: Mutex::new(false),
                };
                let r = split_artifact(&opts, &progress);
                assert!(*progress.done.lock().unwrap(), "{name}: no packing phase");
                let what = format!("{fixture}, {name}, {compression:?}");
                match want {
                    None => {
                        r.unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert!(out.is_dir(), "{what}");
                    }
                    Some(msg) => {
                        let e = r
                            .err()
                            .unwrap_or_else(|| panic!("{what}: split succeeded"))
                            .to_string();
                        assert!(
                            e.contains("changed while it was being split"),
                            "{what}: {e}"
                        );
                        assert!(e.contains(msg) && e.contains(fixture), "{what}: {e}");
                        assert!(!out.exists(), "{what}: output left behind");
                    }
                }
            }
        }
    }
}
