//! `split_wheel` on wheels built here from fixture fat binaries: outputs,
//! metadata, RECORD, determinism, the installed-tree lookup check, and
//! failures that leave nothing behind.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use rocpack_artifacts::databases::DatabaseKind;
use rocpack_artifacts::split::NoProgress;
use rocpack_testsupport::{fatbins, tempdir};
use rocpack_wheel::installed::verify_installed;
use rocpack_wheel::{split_wheel, WheelSplitOptions};
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;

fn fatbin(name: &str) -> Vec<u8> {
    fs::read(fatbins().join(name)).unwrap()
}

const WHEEL: &str = "fx_pkg-2.0-py3-none-linux_x86_64.whl";

type Files = Vec<(&'static str, Vec<u8>, Option<u32>)>;

/// (name, bytes, mode) entries → a wheel file (a symlink entry when mode is None).
fn make_wheel(path: &Path, files: &Files) {
    let mut z = zip::ZipWriter::new(fs::File::create(path).unwrap());
    for (n, b, m) in files {
        match m {
            Some(m) => {
                z.start_file(*n, SimpleFileOptions::default().unix_permissions(*m))
                    .unwrap();
                z.write_all(b).unwrap();
            }
            None => z
                .add_symlink(*n, "target", SimpleFileOptions::default())
                .unwrap(),
        }
    }
    z.finish().unwrap();
}

fn base_files() -> Files {
    vec![
        ("fx/__init__.py", b"x = 1\n".to_vec(), Some(0o644)),
        (
            "fx/lib/libfx_multi.so",
            fatbin("libfx_multi.so"),
            Some(0o755),
        ),
        (
            "fx/lib/libfx_multi_compressed.so",
            fatbin("libfx_multi_compressed.so"),
            Some(0o755),
        ),
        (
            "fx/lib/rocblas/library/TensileLibrary_lazy_gfx942.dat",
            b"db".to_vec(),
            Some(0o644),
        ),
        (
            "fx/lib/rocblas/library/TensileLibrary.dat",
            b"idx".to_vec(),
            Some(0o644),
        ),
        ("other/readme.txt", b"hello".to_vec(), Some(0o644)),
        (
            "fx_pkg-2.0.dist-info/METADATA",
            b"Metadata-Version: 2.1\nName: fx-pkg\nVersion: 2.0\n\nLong description.\n".to_vec(),
            Some(0o644),
        ),
        (
            "fx_pkg-2.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n".to_vec(),
            Some(0o644),
        ),
        (
            "fx_pkg-2.0.dist-info/RECORD",
            b"stale\n".to_vec(),
            Some(0o644),
        ),
    ]
}

fn opts(input: &Path, out: &Path) -> WheelSplitOptions {
    let mut o = WheelSplitOptions::new(input, out);
    o.overlay_root = Some("fx".into());
    o.databases = vec![DatabaseKind::Rocblas];
    o
}

fn read_zip(path: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut a = zip::ZipArchive::new(fs::File::open(path).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    for i in 0..a.len() {
        let mut f = a.by_index(i).unwrap();
        let mut b = Vec::new();
        f.read_to_end(&mut b).unwrap();
        out.insert(
            f.name().unwrap().to_string(),
            (b, f.unix_mode().unwrap_or(0) & 0o777),
        );
    }
    out
}

fn extract_into(wheel: &Path, root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for (n, (b, mode)) in read_zip(wheel) {
        let p = root.join(&n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, b).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

#[test]
fn splits_into_host_and_device_wheels() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    make_wheel(&input, &base_files());
    let out = t.path().join("out");
    let r = split_wheel(&opts(&input, &out), &NoProgress).unwrap();
    assert_eq!(r.fat_binaries.len(), 2);
    assert!(r.targets.contains(&"gfx90a".to_string()), "{:?}", r.targets);
    assert!(r.targets.contains(&"gfx942".to_string()));

    let host = read_zip(&out.join(WHEEL));
    assert!(
        !host
            .keys()
            .any(|k| k.ends_with(".kpack") || k.contains("gfx942")),
        "{:?}",
        host.keys()
    );
    assert!(host.contains_key("other/readme.txt"));
    assert!(host.contains_key("fx/lib/rocblas/library/TensileLibrary.dat"));
    assert_eq!(host["fx/lib/libfx_multi.so"].1, 0o755);
    let meta = text(&host["fx_pkg-2.0.dist-info/METADATA"].0);
    assert!(
        meta.contains("Provides-Extra: device-gfx942\nRequires-Dist: fx-pkg-device-gfx942==2.0; extra == \"device-gfx942\"\n"),
        "{meta}"
    );
    assert!(meta.ends_with("\nLong description.\n"), "{meta}");
    // RECORD: every other entry with its sha256 and size, itself with neither.
    let record = text(&host["fx_pkg-2.0.dist-info/RECORD"].0);
    let rows: Vec<&str> = record.lines().collect();
    assert_eq!(rows.len(), host.len());
    for (n, (b, _)) in &host {
        let row = if n.ends_with("/RECORD") {
            format!("{n},,")
        } else {
            let h = rocpack_wheel::meta::b64url(&Sha256::digest(b));
            format!("{n},sha256={h},{}", b.len())
        };
        assert!(rows.contains(&row.as_str()), "{row} not in\n{record}");
    }

    let dev = out.join("fx_pkg_device_gfx90a-2.0-py3-none-linux_x86_64.whl");
    let d = read_zip(&dev);
    let kpacks: Vec<&String> = d.keys().filter(|k| k.ends_with(".kpack")).collect();
    assert_eq!(
        kpacks,
        [
            "fx/.kpack/fx_pkg_gfx90a:xnack+.kpack",
            "fx/.kpack/fx_pkg_gfx90a:xnack-.kpack"
        ]
    );
    let dm = text(&d["fx_pkg_device_gfx90a-2.0.dist-info/METADATA"].0);
    assert!(
        dm.contains("Name: fx-pkg-device-gfx90a\n") && dm.contains("Requires-Dist: fx-pkg==2.0\n"),
        "{dm}"
    );
    let d942 = read_zip(&out.join("fx_pkg_device_gfx942-2.0-py3-none-linux_x86_64.whl"));
    assert!(d942.contains_key("fx/lib/rocblas/library/TensileLibrary_lazy_gfx942.dat"));

    // Installed: host alone resolves nothing; host + gfx942 resolves for gfx942 only.
    let site = t.path().join("site");
    extract_into(&out.join(WHEEL), &site);
    let bare = verify_installed(&site, "gfx942").unwrap();
    assert!(
        !bare.ok && bare.lookups == 2 && bare.resolved == 0,
        "{bare:?}"
    );
    extract_into(
        &out.join("fx_pkg_device_gfx942-2.0-py3-none-linux_x86_64.whl"),
        &site,
    );
    let ok = verify_installed(&site, "gfx942").unwrap();
    assert!(ok.ok && ok.resolved == 2, "{ok:?}");
    let other = verify_installed(&site, "gfx1100").unwrap();
    assert!(!other.ok, "{other:?}");
    // The fat input itself fails the check.
    let fat = t.path().join("fat");
    extract_into(&input, &fat);
    let f = verify_installed(&fat, "gfx942").unwrap();
    assert!(
        !f.ok && f.failures.iter().any(|l| l.contains("fat binary")),
        "{f:?}"
    );
}

#[test]
fn output_does_not_depend_on_jobs_or_directory() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    make_wheel(&input, &base_files());
    let mut a = opts(&input, &t.path().join("a"));
    a.jobs = Some(1);
    let mut b = opts(&input, &t.path().join("x/y/b"));
    b.jobs = Some(4);
    split_wheel(&a, &NoProgress).unwrap();
    split_wheel(&b, &NoProgress).unwrap();
    let names = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&a.output_dir), names(&b.output_dir));
    assert!(names(&a.output_dir).len() > 5);
    for n in names(&a.output_dir) {
        assert_eq!(
            fs::read(a.output_dir.join(&n)).unwrap(),
            fs::read(b.output_dir.join(&n)).unwrap(),
            "{n:?}"
        );
    }
}

#[test]
fn failures_leave_nothing() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    make_wheel(&input, &base_files());
    // A filter that keeps nothing.
    let mut o = opts(&input, &t.path().join("none"));
    o.gpu_targets = vec!["gfx1030".into()];
    assert!(split_wheel(&o, &NoProgress).is_err());
    assert!(!t.path().join("none").exists());
    // One wheel of the set exists already.
    let out = t.path().join("busy");
    fs::create_dir(&out).unwrap();
    fs::write(
        out.join("fx_pkg_device_gfx942-2.0-py3-none-linux_x86_64.whl"),
        b"x",
    )
    .unwrap();
    let e = split_wheel(&opts(&input, &out), &NoProgress).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    assert_eq!(fs::read_dir(&out).unwrap().count(), 1);
    // Nothing temporary left beside the outputs.
    let left: Vec<_> = fs::read_dir(t.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn refuses_unsafe_or_inconsistent_wheels() {
    let t = tempdir();
    let cases: Vec<(&str, Files, Option<&str>)> = vec![
        (
            "escape",
            vec![("../evil.py", b"x".to_vec(), Some(0o644))],
            None,
        ),
        ("symlink", vec![("fx/link", Vec::new(), None)], None),
        (
            "outside",
            vec![("other/libfx.so", fatbin("libfx_multi.so"), Some(0o755))],
            None,
        ),
        ("no-device-code", Vec::new(), Some("other")),
    ];
    for (label, extra, overlay) in cases {
        let input = t.path().join(label).join(WHEEL);
        fs::create_dir_all(input.parent().unwrap()).unwrap();
        let mut files = base_files();
        files.extend(extra);
        make_wheel(&input, &files);
        let out = t.path().join(label).join("out");
        let mut o = opts(&input, &out);
        if let Some(ov) = overlay {
            o.overlay_root = Some(ov.into());
        }
        let r = split_wheel(&o, &NoProgress);
        assert!(r.is_err(), "{label}: accepted");
        assert!(!out.exists(), "{label}: output left");
        assert!(!t.path().join("evil.py").exists());
    }
}

/// `--device-package-prefix` (normalised), `--compression none`,
/// `--device-requires-dist` with `@GFXARCH@` (target wheels only) and
/// family wheels from a packaging config whose dependencies all exist.
#[test]
fn prefix_compression_requires_and_families() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    make_wheel(&input, &base_files());
    let out = t.path().join("out");
    let mut o = opts(&input, &out);
    o.device_package_prefix = Some("AMD.Fx_Device".into());
    o.compression = rocpack_kpack::Compression::None;
    o.device_requires_dist = vec![
        "rocm-sdk-device-@GFXARCH@>=7".into(),
        "rocm-sdk-core".into(),
    ];
    o.config = Some(
        rocpack_artifacts::config::PackagingConfig::parse(
            br#"{"primary_shard": "x", "architecture_groups": {
                 "gfx9X": {"display_name": "a", "architectures": ["gfx90a", "gfx942", "gfx950"]},
                 "gfx101X": {"display_name": "b", "architectures": ["gfx1010"]}}}"#,
            Path::new("cfg.json"),
        )
        .unwrap(),
    );
    let r = split_wheel(&o, &NoProgress).unwrap();
    assert_eq!(r.skipped_groups, ["gfx101X"]);
    let files: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // Every distribution a wheel depends on is one of the wheels written
    // (or the external `rocm-sdk-*` ones asked for).
    let mut dists = std::collections::BTreeSet::new();
    let mut requires = Vec::new();
    for f in &files {
        let z = read_zip(&out.join(f));
        let (_, (m, _)) = z
            .iter()
            .find(|(k, _)| k.ends_with(".dist-info/METADATA"))
            .unwrap();
        let m = text(m);
        let name = m
            .lines()
            .find_map(|l| l.strip_prefix("Name: "))
            .unwrap()
            .to_string();
        dists.insert(name.to_lowercase().replace(['_', '.'], "-"));
        for l in m.lines().filter_map(|l| l.strip_prefix("Requires-Dist: ")) {
            requires.push((name.clone(), l.to_string()));
        }
        // --compression none: every archive is stored raw (scheme "none").
        for (k, (b, _)) in &z {
            if k.ends_with(".kpack") {
                let r = rocpack_kpack::KpackReader::from_bytes(b).unwrap();
                assert_eq!(r.scheme(), rocpack_kpack::Scheme::None, "{k}");
            }
        }
    }
    for t in &r.targets {
        let dist = format!("amd-fx-device-{t}");
        assert!(dists.contains(&dist), "{dist} not in {dists:?}");
        let f = format!(
            "amd_fx_device_{}-2.0-py3-none-linux_x86_64.whl",
            t.replace('-', "_")
        );
        assert!(files.contains(&f), "{f} not in {files:?}");
        assert!(
            requires.contains(&(dist.clone(), format!("rocm-sdk-device-{t}>=7"))),
            "{requires:?}"
        );
        assert!(requires.contains(&(dist.clone(), "rocm-sdk-core".into())));
        assert!(requires.contains(&(dist.clone(), "fx-pkg==2.0".into())));
        assert!(requires.contains(&(
            "fx-pkg".into(),
            format!("{dist}==2.0; extra == \"device-{t}\"")
        )));
        assert!(requires.contains(&(
            "fx-pkg".into(),
            format!("{dist}==2.0; extra == \"device-all\"")
        )));
    }
    // The family wheel: its members that exist, no @GFXARCH@ entry.
    let fam: Vec<&String> = requires
        .iter()
        .filter(|(n, _)| n == "amd-fx-device-gfx9x")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(
        fam,
        [
            "fx-pkg==2.0",
            "amd-fx-device-gfx90a==2.0",
            "amd-fx-device-gfx942==2.0",
            "rocm-sdk-core"
        ],
        "{requires:?}"
    );
    for (_, req) in &requires {
        let dep = req.split(['=', '>', ';']).next().unwrap().trim();
        assert!(
            dists.contains(dep) || dep.starts_with("rocm-sdk-"),
            "{dep} is required but no wheel provides it"
        );
    }
}
