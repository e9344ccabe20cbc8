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

/// The RECORD of `files` (every file but RECORD, then RECORD itself).
fn record_of(files: &Files, record_path: &str) -> Vec<u8> {
    let mut r = String::new();
    for (n, b, m) in files {
        if *n != record_path && m.is_some() {
            let h = rocpack_wheel::meta::b64url(&Sha256::digest(b));
            r.push_str(&format!("{n},sha256={h},{}\n", b.len()));
        }
    }
    r.push_str(&format!("{record_path},,\n"));
    r.into_bytes()
}

/// (name, bytes, mode) entries → a wheel file (a symlink entry when mode is
/// None). A RECORD whose content is `AUTO` is replaced by the files' RECORD.
fn make_wheel(path: &Path, files: &Files) {
    let mut files = files.clone();
    let auto: Vec<&'static str> = files
        .iter()
        .filter(|(n, b, _)| n.ends_with(".dist-info/RECORD") && b == b"AUTO")
        .map(|(n, _, _)| *n)
        .collect();
    for rp in auto {
        let r = record_of(&files, rp);
        for f in files.iter_mut().filter(|f| f.0 == rp) {
            f.1 = r.clone();
        }
    }
    let mut z = zip::ZipWriter::new(fs::File::create(path).unwrap());
    for (n, b, m) in &files {
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
        ("fx_pkg-2.0.dist-info/RECORD", b"AUTO".to_vec(), Some(0o644)),
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

/// A FIFO named like a wheel is refused at once (opening it blocking would
/// wait forever for a writer).
#[test]
fn a_fifo_named_like_a_wheel_is_refused_not_waited_on() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    let made = std::process::Command::new("mkfifo")
        .arg(&input)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let o = opts(&input, &t.path().join("out"));
    std::thread::spawn(move || {
        let _ = tx.send(
            split_wheel(&o, &NoProgress)
                .map(|_| ())
                .map_err(|e| e.to_string()),
        );
    });
    let r = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("split_wheel still waits on the FIFO after 60 s");
    let e = r.unwrap_err();
    assert!(e.contains("not a regular file (a FIFO)"), "{e}");
    assert!(!t.path().join("out").exists());
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

// ---- Hostile inputs (issue 25 item 7): each is refused before anything is
// ---- written, naming what is wrong.

/// Splits `input` into `<dir>/out`; returns the error text and checks that
/// no output directory and no work directory were left.
fn refused(input: &Path, o: Option<WheelSplitOptions>) -> String {
    let dir = input.parent().unwrap();
    let out = dir.join("out");
    let o = o.unwrap_or_else(|| opts(input, &out));
    let e = match split_wheel(&o, &NoProgress) {
        Ok(r) => panic!("accepted: {r:?}"),
        Err(e) => e.to_string(),
    };
    assert!(!o.output_dir.exists(), "output left: {e}");
    let left: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".kpack-split-wheel-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    e
}

fn le16(v: usize) -> [u8; 2] {
    u16::try_from(v).unwrap().to_le_bytes()
}

fn le32(v: u64) -> [u8; 4] {
    u32::try_from(v).unwrap().to_le_bytes()
}

/// A local header (method deflate, 1980-01-01) for `name`.
fn lfh(name: &str, crc: u32, csize: u64, usize: u64) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend(0x0403_4b50u32.to_le_bytes());
    h.extend([20, 0, 0, 0, 8, 0, 0, 0, 0x21, 0]);
    h.extend(crc.to_le_bytes());
    h.extend(le32(csize));
    h.extend(le32(usize));
    h.extend(le16(name.len()));
    h.extend([0, 0]);
    h.extend(name.as_bytes());
    h
}

/// The overlapping-entry zip bomb (David Fifield's construction): entry i's
/// deflate stream quotes the local headers of entries i+1.. in stored
/// blocks and ends in one shared kernel of `kernel` zero bytes, so every
/// name expands to the kernel and more. Each entry is a valid deflate
/// stream with a correct CRC: a reader that does not look at the layout
/// extracts names × kernel bytes. `files` come first, as ordinary entries.
fn overlap_bomb(path: &Path, files: &Files, names: &[&str], kernel: usize) {
    use flate2::write::DeflateEncoder;
    use flate2::{Compression, Crc};
    let mut enc = DeflateEncoder::new(Vec::new(), Compression::best());
    enc.write_all(&vec![0u8; kernel]).unwrap();
    let k = enc.finish().unwrap();
    // From the last entry to the first: (crc, csize, usize, local header).
    let mut next: Option<(Crc, u64, u64, Vec<u8>)> = None;
    let mut headers = Vec::new();
    for name in names.iter().rev() {
        let (crc, csize, usize) = match &next {
            None => {
                let mut zeros = Crc::new();
                zeros.update(&vec![0u8; kernel]);
                (zeros, k.len() as u64, kernel as u64)
            }
            Some((ncrc, ncs, nus, nh)) => {
                let mut c = Crc::new();
                c.update(nh);
                c.combine(ncrc);
                (c, 5 + nh.len() as u64 + ncs, nh.len() as u64 + nus)
            }
        };
        let h = lfh(name, crc.sum(), csize, usize);
        headers.push((name.to_string(), crc.sum(), csize, usize, h.clone()));
        next = Some((crc, csize, usize, h));
    }
    headers.reverse();
    // Ordinary entries first (written by the zip crate), then the bomb.
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut buf);
        for (n, b, m) in files {
            z.start_file(
                *n,
                SimpleFileOptions::default().unix_permissions(m.unwrap()),
            )
            .unwrap();
            z.write_all(b).unwrap();
        }
        z.finish().unwrap();
    }
    let plain = zip::ZipArchive::new(std::io::Cursor::new(buf.get_ref().clone())).unwrap();
    let cd_start = plain.central_directory_start() as usize;
    let mut out = buf.get_ref()[..cd_start].to_vec();
    let plain_cd = buf.get_ref()[cd_start..buf.get_ref().len() - 22].to_vec();
    let mut offsets = Vec::new();
    for (i, (_, _, _, _, h)) in headers.iter().enumerate() {
        offsets.push(out.len() as u64);
        out.extend(h);
        if let Some((_, _, _, _, nh)) = headers.get(i + 1) {
            out.push(0); // stored block, not final
            out.extend(le16(nh.len()));
            out.extend(le16(!nh.len() & 0xffff));
        }
    }
    out.extend(&k);
    let cd = out.len() as u64;
    out.extend(&plain_cd);
    for ((name, crc, csize, usize, _), off) in headers.iter().zip(&offsets) {
        out.extend(0x0201_4b50u32.to_le_bytes());
        out.extend([20, 3, 20, 0, 0, 0, 8, 0, 0, 0, 0x21, 0]);
        out.extend(crc.to_le_bytes());
        out.extend(le32(*csize));
        out.extend(le32(*usize));
        out.extend(le16(name.len()));
        out.extend([0, 0, 0, 0, 0, 0, 0, 0]);
        out.extend((0o100644u32 << 16).to_le_bytes());
        out.extend(le32(*off));
        out.extend(name.as_bytes());
    }
    let n = files.len() + names.len();
    let cd_len = out.len() as u64 - cd;
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0, 0, 0, 0]);
    out.extend(le16(n));
    out.extend(le16(n));
    out.extend(le32(cd_len));
    out.extend(le32(cd));
    out.extend([0, 0]);
    fs::write(path, out).unwrap();
}

/// Item 7: the overlapping-entry zip bomb is refused from its central
/// directory, naming two entries that overlap, before anything is
/// extracted (the zip crate alone inflates every name in full; so does
/// Python's zipfile).
#[test]
fn overlapping_entry_zip_bomb_is_refused_before_writing() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    let names: Vec<String> = (0..16).map(|i| format!("fx/bomb{i:02}.bin")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    overlap_bomb(&input, &base_files(), &names, 4 << 20);
    // The construction is sound: each name really inflates, CRC included.
    let mut a = zip::ZipArchive::new(fs::File::open(&input).unwrap()).unwrap();
    let mut n = 0u64;
    for i in 0..a.len() {
        let mut f = a.by_index(i).unwrap();
        n += std::io::copy(&mut f, &mut std::io::sink()).unwrap();
    }
    assert!(n > 16 * (4 << 20), "{n}");
    assert!(fs::metadata(&input).unwrap().len() < 64 << 10);
    let e = refused(&input, None);
    assert!(
        e.contains("overlap") && e.contains("fx/bomb00.bin") && e.contains("fx/bomb01.bin"),
        "{e}"
    );
}

/// Rewrites every occurrence of `from` in the file with `to` (same length):
/// names in local headers and the central directory alike.
fn patch(path: &Path, from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut b = fs::read(path).unwrap();
    let mut hits = 0;
    let mut i = 0;
    while i + from.len() <= b.len() {
        if &b[i..i + from.len()] == from {
            b[i..i + from.len()].copy_from_slice(to);
            hits += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(hits > 0, "{:?} not found", String::from_utf8_lossy(from));
    fs::write(path, b).unwrap();
}

/// Item 7: sizes no deflate stream can have (a 1 TB-class claim from a few
/// bytes) are refused from the central directory; an entry that inflates
/// past its declared size is stopped there.
#[test]
fn absurd_declared_sizes_are_refused() {
    let t = tempdir();
    let d = t.path().join("ratio");
    fs::create_dir(&d).unwrap();
    let input = d.join(WHEEL);
    let mut files = base_files();
    files.push(("fx/big.bin", vec![7u8; 4096], Some(0o644)));
    make_wheel(&input, &files);
    // Declared 0xF0000000 bytes (4 GB) for a deflate stream of a few bytes:
    // central directory and local header both say so.
    let crc = {
        let mut c = flate2::Crc::new();
        c.update(&[7u8; 4096]);
        c.sum()
    };
    let mut old = crc.to_le_bytes().to_vec();
    let mut a = zip::ZipArchive::new(fs::File::open(&input).unwrap()).unwrap();
    let csize = a.by_name("fx/big.bin").unwrap().compressed_size();
    old.extend(le32(csize));
    old.extend(le32(4096));
    let mut new = crc.to_le_bytes().to_vec();
    new.extend(le32(csize));
    new.extend(le32(0xF000_0000));
    patch(&input, &old, &new);
    let e = refused(&input, None);
    assert!(
        e.contains("fx/big.bin") && e.contains("deflate cannot expand"),
        "{e}"
    );

    // Declared smaller than it inflates: stopped at the declared size.
    let d = t.path().join("short");
    fs::create_dir(&d).unwrap();
    let input = d.join(WHEEL);
    make_wheel(&input, &files);
    let mut new = crc.to_le_bytes().to_vec();
    new.extend(le32(csize));
    new.extend(le32(100));
    patch(&input, &old, &new);
    let e = refused(&input, None);
    // Stopped by the zip reader or by the extraction loop, whichever sees it first.
    assert!(
        e.contains("fx/big.bin")
            && (e.contains("inflates to more than the 100 bytes")
                || e.contains("larger than its declared uncompressed size")),
        "{e}"
    );
}

/// Item 7: two entries of one name (the zip crate keeps one of them, so the
/// check is made on the central directory itself).
#[test]
fn duplicate_entry_names_are_refused() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    let mut files = base_files();
    files.push(("fx/dupA.py", b"good = 1\n".to_vec(), Some(0o644)));
    files.push(("fx/dupB.py", b"evil = 1\n".to_vec(), Some(0o644)));
    make_wheel(&input, &files);
    patch(&input, b"fx/dupB.py", b"fx/dupA.py");
    let e = refused(&input, None);
    assert!(e.contains("`fx/dupA.py` appears 2 times"), "{e}");
}

/// Item 7: an input RECORD that does not match the files is refused, naming
/// the file, never re-blessed with fresh hashes: a changed file, a file
/// RECORD does not list, a row for a file the wheel lacks, a weak hash.
#[test]
fn record_mismatch_is_refused_naming_the_file() {
    let t = tempdir();
    let rp = "fx_pkg-2.0.dist-info/RECORD";
    type Edit = Box<dyn Fn(&mut Files)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "changed",
            Box::new(|f: &mut Files| {
                let r = record_of(f, "fx_pkg-2.0.dist-info/RECORD");
                f.iter_mut().find(|e| e.0 == "fx/__init__.py").unwrap().1 = b"x = 2\n".to_vec();
                f.iter_mut().find(|e| e.0.ends_with("/RECORD")).unwrap().1 = r;
            }),
            "`fx/__init__.py`: fx_pkg-2.0.dist-info/RECORD line 1 says sha256=",
        ),
        (
            "unlisted",
            Box::new(|f: &mut Files| {
                let r = record_of(f, "fx_pkg-2.0.dist-info/RECORD");
                f.push(("fx/extra.py", b"x=1\n".to_vec(), Some(0o644)));
                f.iter_mut().find(|e| e.0.ends_with("/RECORD")).unwrap().1 = r;
            }),
            "`fx/extra.py` is not listed in fx_pkg-2.0.dist-info/RECORD",
        ),
        (
            "missing",
            Box::new(|f: &mut Files| {
                let mut r = record_of(f, "fx_pkg-2.0.dist-info/RECORD");
                r.extend(b"fx/gone.py,sha256=AAAA,3\n");
                f.iter_mut().find(|e| e.0.ends_with("/RECORD")).unwrap().1 = r;
            }),
            "lists `fx/gone.py`, which is not in the wheel",
        ),
        (
            "md5",
            Box::new(|f: &mut Files| {
                let r = String::from_utf8(record_of(f, "fx_pkg-2.0.dist-info/RECORD")).unwrap();
                let r: String = r
                    .lines()
                    .map(|l| match l.starts_with("other/readme.txt,") {
                        true => "other/readme.txt,md5=XUFAKrxLKna5cZ2REBfFkg,5\n".to_string(),
                        false => format!("{l}\n"),
                    })
                    .collect();
                f.iter_mut().find(|e| e.0.ends_with("/RECORD")).unwrap().1 = r.into_bytes();
            }),
            "hash algorithm `md5` is not accepted",
        ),
        (
            "none",
            Box::new(|f: &mut Files| f.retain(|e| !e.0.ends_with("/RECORD"))),
            "no fx_pkg-2.0.dist-info/RECORD",
        ),
    ];
    for (label, edit, want) in cases {
        let d = t.path().join(label);
        fs::create_dir(&d).unwrap();
        let input = d.join(WHEEL);
        let mut files = base_files();
        files.retain(|e| e.0 != rp);
        files.push((rp, Vec::new(), Some(0o644)));
        edit(&mut files);
        make_wheel(&input, &files);
        let e = refused(&input, None);
        assert!(e.contains(want), "{label}: `{want}` not in: {e}");
    }
    // The same check for an exploded wheel directory.
    let d = t.path().join("dir");
    let w = d.join("in");
    for (n, b, _) in base_files() {
        let p = w.join(n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let b = if n == rp {
            record_of(&base_files(), rp)
        } else {
            b
        };
        fs::write(p, b).unwrap();
    }
    fs::write(w.join("fx/__init__.py"), b"tampered\n").unwrap();
    let e = refused(&w, Some(opts(&w, &d.join("out"))));
    assert!(
        e.contains("`fx/__init__.py`") && e.contains("RECORD"),
        "{e}"
    );
}

/// Item 7: METADATA Version must be PEP 440, and the file name's version the
/// same version (compared as versions: `2.0.0` is `2.0`).
#[test]
fn versions_are_pep440_and_agree_with_the_file_name() {
    let t = tempdir();
    let with_meta = |version: &str| {
        let mut f = base_files();
        let meta = format!("Metadata-Version: 2.1\nName: fx-pkg\nVersion: {version}\n\nLong.\n");
        f.iter_mut().find(|e| e.0.ends_with("/METADATA")).unwrap().1 = meta.into_bytes();
        f
    };
    let d = t.path().join("bad");
    fs::create_dir(&d).unwrap();
    let input = d.join(WHEEL);
    make_wheel(&input, &with_meta("2.0~rc1"));
    let e = refused(&input, None);
    assert!(
        e.contains("Version `2.0~rc1` is not a PEP 440 version"),
        "{e}"
    );

    let d = t.path().join("differs");
    fs::create_dir(&d).unwrap();
    let input = d.join("fx_pkg-2.1-py3-none-linux_x86_64.whl");
    make_wheel(&input, &base_files());
    let e = refused(&input, None);
    assert!(
        e.contains("has version `2.1`") && e.contains("has Version `2.0`"),
        "{e}"
    );

    // Equal versions spelled differently are the same version.
    let d = t.path().join("same");
    fs::create_dir(&d).unwrap();
    let input = d.join("fx_pkg-2.0.0-py3-none-linux_x86_64.whl");
    make_wheel(&input, &base_files());
    let r = split_wheel(&opts(&input, &d.join("out")), &NoProgress).unwrap();
    assert_eq!(r.version, "2.0");
}

/// Item 7: `--device-requires-dist` cannot inject METADATA headers through
/// a newline (or any control character), and must start with a name.
#[test]
fn device_requires_dist_cannot_inject_headers() {
    let t = tempdir();
    let input = t.path().join(WHEEL);
    make_wheel(&input, &base_files());
    for (req, want) in [
        ("rocm-sdk-core\nName: evil", "contains a newline"),
        (
            "rocm-sdk-core\r\nProvides-Extra: x",
            "contains a carriage return",
        ),
        ("rocm\u{7}core", "U+0007"),
        (
            "; python_version > '3'",
            "does not start with a distribution name",
        ),
        ("", "does not start with a distribution name"),
    ] {
        let mut o = opts(&input, &t.path().join("out"));
        o.device_requires_dist = vec!["rocm-sdk-device-@GFXARCH@".into(), req.into()];
        let e = refused(&input, Some(o));
        assert!(
            e.contains("--device-requires-dist") && e.contains(want),
            "{req:?}: {e}"
        );
    }
}

/// An input that already holds the path of a device wheel's `.kpack` (or a
/// directory there): two installed wheels would own one path. Refused.
#[test]
fn paths_the_device_wheels_own_are_refused() {
    let t = tempdir();
    for (label, name) in [
        ("file", "fx/.kpack/fx_pkg_gfx942.kpack"),
        ("dir", "fx/.kpack/fx_pkg_gfx90a:xnack-.kpack/x"),
    ] {
        let input = t.path().join(label).join(WHEEL);
        fs::create_dir_all(input.parent().unwrap()).unwrap();
        let mut files = base_files();
        files.push((name, b"KPAK stale".to_vec(), Some(0o644)));
        make_wheel(&input, &files);
        let e = refused(&input, None);
        let rel = name.trim_end_matches("/x");
        assert!(
            e.contains(&format!(
                "{rel}: the input already holds the path the device wheel of"
            )),
            "{label}: {e}"
        );
    }
    // Another stem below `.kpack/` is no device wheel's path.
    let input = t.path().join("other").join(WHEEL);
    fs::create_dir_all(input.parent().unwrap()).unwrap();
    let mut files = base_files();
    files.push(("fx/.kpack/other_gfx942.kpack", b"x".to_vec(), Some(0o644)));
    make_wheel(&input, &files);
    split_wheel(&opts(&input, &t.path().join("other/out")), &NoProgress).unwrap();
}

/// METADATA already naming an extra the host wheel gains (PEP 685
/// normalised, as pip compares extras), as `Provides-Extra` or in a
/// `Requires-Dist` marker: its own pin would stay beside the new one and
/// `pip install 'fx-pkg[device-gfx942]'` would resolve both. Refused.
#[test]
fn extras_the_host_wheel_gains_are_refused() {
    let t = tempdir();
    let meta = "fx_pkg-2.0.dist-info/METADATA";
    let head = "Metadata-Version: 2.1\nName: fx-pkg\nVersion: 2.0\n";
    for (label, extra, want) in [
        (
            "provides",
            "Provides-Extra: device-gfx942\nRequires-Dist: fx-pkg-device-gfx942==1.0; extra == \"device-gfx942\"\n",
            "already provides the `device-gfx942` extra",
        ),
        (
            "normalised",
            "Provides-Extra: Device_GFX90A\n",
            "already provides the `device-gfx90a` extra",
        ),
        (
            "marker-only",
            "Requires-Dist: somepkg>=1; extra == 'device.gfx942'\n",
            "already has a requirement for the `device-gfx942` extra",
        ),
    ] {
        let input = t.path().join(label).join(WHEEL);
        fs::create_dir_all(input.parent().unwrap()).unwrap();
        let mut files = base_files();
        for f in files.iter_mut().filter(|f| f.0 == meta) {
            f.1 = format!("{head}{extra}\nLong description.\n").into_bytes();
        }
        make_wheel(&input, &files);
        let e = refused(&input, None);
        assert!(e.contains(want), "{label}: {e}");
    }
    // Other extras stay, with their requirements.
    let input = t.path().join("keep").join(WHEEL);
    fs::create_dir_all(input.parent().unwrap()).unwrap();
    let mut files = base_files();
    for f in files.iter_mut().filter(|f| f.0 == meta) {
        f.1 = format!("{head}Provides-Extra: device-tools\nRequires-Dist: tool>=1; extra == \"device-tools\"\n\nd\n").into_bytes();
    }
    make_wheel(&input, &files);
    let out = t.path().join("keep/out");
    split_wheel(&opts(&input, &out), &NoProgress).unwrap();
    let m = text(&read_zip(&out.join(WHEEL))[meta].0);
    assert!(
        m.contains("Requires-Dist: tool>=1; extra == \"device-tools\""),
        "{m}"
    );
}

/// `--selector`: the host gains a `device` extra requiring the selector
/// sdist, which holds the backend and the data it chooses from (read back
/// by `read_selector`, deterministic); a default must have a device wheel;
/// PyTorch-style extras are the bare target names; a selector name taken
/// by the host is refused.
#[test]
fn selector_sdist_and_extra_names() {
    use rocpack_wheel::selector::{self, ExtraNames, SelectorOptions, Source};
    let t = tempdir();
    let input = t.path().join(WHEEL);
    make_wheel(&input, &base_files());
    let with = |out: &str, default: &[&str], names: ExtraNames| {
        let mut o = opts(&input, &t.path().join(out));
        o.selector = Some(SelectorOptions {
            default_targets: default.iter().map(|s| s.to_string()).collect(),
        });
        o.extra_names = names;
        o
    };
    let r = split_wheel(
        &with("a", &["gfx942:sramecc+"], ExtraNames::Rocm),
        &NoProgress,
    )
    .unwrap();
    let s = r.selector.as_ref().unwrap();
    assert_eq!(s.file, "fx_pkg_device-2.0.tar.gz");
    let meta = text(&read_zip(&t.path().join("a").join(WHEEL))["fx_pkg-2.0.dist-info/METADATA"].0);
    assert!(
        meta.contains(
            "Provides-Extra: device\nRequires-Dist: fx-pkg-device==2.0; extra == \"device\"\n"
        ),
        "{meta}"
    );
    let data = selector::read_selector(&t.path().join("a").join(&s.file)).unwrap();
    assert_eq!(data, s.data);
    assert_eq!(data.default, ["gfx942"]);
    assert_eq!(data.targets["gfx90a"], "fx-pkg-device-gfx90a");
    // GPU-less: the default; the order of choice otherwise.
    let none = t.path().join("no-sysfs");
    let e = selector::explain(&data, selector::detect(None, &none, &data.default).unwrap());
    assert_eq!(
        (e.source, e.packages.clone()),
        (Source::Default, vec!["fx-pkg-device-gfx942".to_string()])
    );
    let e = selector::explain(
        &data,
        selector::detect(Some("gfx90a-xnack+"), &none, &data.default).unwrap(),
    );
    assert_eq!(
        (e.source, e.packages),
        (Source::Env, vec!["fx-pkg-device-gfx90a".to_string()])
    );
    // Deterministic: a second split writes the same sdist bytes.
    split_wheel(&with("b", &["gfx942"], ExtraNames::Rocm), &NoProgress).unwrap();
    assert_eq!(
        fs::read(t.path().join("a").join(&s.file)).unwrap(),
        fs::read(t.path().join("b").join(&s.file)).unwrap()
    );
    // A default without a device wheel is refused before anything is written.
    let e = refused(&input, Some(with("c", &["gfx1030"], ExtraNames::Rocm)));
    assert!(
        e.contains("--selector-default: no device wheel for gfx1030"),
        "{e}"
    );
    // PyTorch's extra names.
    split_wheel(&with("d", &[], ExtraNames::Pytorch), &NoProgress).unwrap();
    let meta = text(&read_zip(&t.path().join("d").join(WHEEL))["fx_pkg-2.0.dist-info/METADATA"].0);
    assert!(
        meta.contains("Provides-Extra: gfx942\nRequires-Dist: fx-pkg-device-gfx942==2.0; extra == \"gfx942\"\n"),
        "{meta}"
    );
    assert!(!meta.contains("Provides-Extra: device-gfx"), "{meta}");
    // The selector takes the device prefix's name: the host's is refused.
    let mut o = with("e", &[], ExtraNames::Rocm);
    o.device_package_prefix = Some("FX_pkg".into());
    let e = refused(&input, Some(o));
    assert!(
        e.contains("selector distribution `fx-pkg` collides with the host"),
        "{e}"
    ); // A wheel that already has a `device` extra keeps it only without --selector.
    let t2 = tempdir();
    let input2 = t2.path().join(WHEEL);
    let mut files = base_files();
    for f in files.iter_mut().filter(|f| f.0.ends_with("/METADATA")) {
        f.1 = b"Metadata-Version: 2.1\nName: fx-pkg\nVersion: 2.0\nProvides-Extra: Device\n\n"
            .to_vec();
    }
    make_wheel(&input2, &files);
    let mut o = opts(&input2, &t2.path().join("out"));
    o.selector = Some(SelectorOptions::default());
    let e = refused(&input2, Some(o));
    assert!(e.contains("already provides the `device` extra"), "{e}");
    split_wheel(&opts(&input2, &t2.path().join("plain")), &NoProgress).unwrap();
}
