//! verify on a split of the heterogeneous fixture fat binaries (`fatbins/`):
//! binaries built for different arch sets, a static archive, RELR and
//! non-PIE executables. Lookups for archs a binary was never built for are
//! not violations; lookups for code that exists in the tree are.

use std::fs;

use rocpack_artifacts::split::{split_artifact, NoProgress, SplitOptions};
use rocpack_testsupport::fatbins;

mod common;
use common::verify_dir;

#[test]
fn split_fatbins_verify_and_archive_members_are_checked() {
    let t = tempfile::tempdir().unwrap();
    let art = t.path().join("x_gfxall");
    for (sub, names) in [
        (
            "pre/lib",
            &[
                "libfx_static.a",
                "libfx_multi.so",
                "libfx_generic.so",
                "libfx_rdc.so",
                "libfx_two_tu.so",
            ][..],
        ),
        ("pre/bin", &["fx_app_nopie", "fx_app_relr"][..]),
    ] {
        fs::create_dir_all(art.join(sub)).unwrap();
        for n in names {
            fs::copy(fatbins().join(n), art.join(sub).join(n)).unwrap();
        }
    }
    fs::write(art.join("artifact_manifest.txt"), "pre\n").unwrap();
    let out = t.path().join("out");
    split_artifact(
        &SplitOptions {
            compression: rocpack_kpack::Compression::None,
            ..SplitOptions::new(art.clone(), "x", out.clone())
        },
        &NoProgress,
    )
    .unwrap();
    let r = verify_dir(&out);
    assert!(r.ok, "{:#?}", r.violations);
    assert!(r.host_binaries >= 8, "{}", r.host_binaries); // 5 .so/.exe + 2 archive members + …
    assert!(r.lookups_resolved > 0 && r.lookups_not_built > 0);
    assert_eq!(r.lookups, r.lookups_resolved + r.lookups_not_built);

    // Put the fat static archive back: its members are fat again.
    let a = out.join("x_generic/pre/lib/libfx_static.a");
    fs::remove_file(&a).unwrap();
    fs::copy(fatbins().join("libfx_static.a"), &a).unwrap();
    let r = verify_dir(&out);
    assert!(
        r.violations
            .iter()
            .any(|v| v.kind == "fat_binary" && v.path.starts_with("pre/lib/libfx_static.a(")),
        "{:#?}",
        r.violations
    );
}
