//! Windows PE32+/COFF end to end: `kpack inspect`/`unbundle` against
//! clang-offload-bundler (expected-unbundle-win.tsv), `kpack split` of a
//! TheRock-style `bin/*.dll` artifact, and the split images loaded for real
//! under Wine (Debian's wine64): a stub `amdhip64.dll` receives every wrapper
//! after the Windows loader mapped and rebased the image, follows its
//! pointer into `.kpackrf`, and each (wrapper, arch) is resolved through
//! rocpack's lookup (`rocpack_kpack::Loader`) to the original code object.
//! Also after `llvm-strip --strip-debug` / `llvm-objcopy` of the split
//! images and with the preferred image base taken (forced rebase).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use rocpack_testsupport as ts;
use serde_json::Value;

mod common;
use common::{assert_ok, kpack, split};

const DLLS: [&str; 6] = [
    "fx_win_full.dll",
    "fx_win_msvc.dll",
    "fx_win_lld.dll",
    "fx_win_gnu.dll",
    "fx_win_ccob.dll",
    "fx_win_overlay.dll",
];

/// `file -> (bundle, target) -> sha256` (device entries, bundler's word).
fn expected() -> BTreeMap<String, BTreeMap<(u32, String), String>> {
    let tsv =
        std::fs::read_to_string(ts::win_fixtures().join("expected-unbundle-win.tsv")).unwrap();
    let mut m: BTreeMap<String, BTreeMap<(u32, String), String>> = BTreeMap::new();
    for line in tsv.lines().skip(1) {
        let c: Vec<&str> = line.split('\t').collect();
        m.entry(c[0].trim_start_matches("fatbins-win/").to_string())
            .or_default()
            .insert((c[2].parse().unwrap(), c[4].to_string()), c[5].to_string());
    }
    m
}

#[test]
fn inspect_and_unbundle_pe_and_coff_like_clang_offload_bundler() {
    let exp = expected();
    let tmp = ts::tempdir();
    for (file, want) in &exp {
        let path = ts::win_fatbin(file);
        let out = kpack(&["inspect".as_ref(), "--json".as_ref(), path.as_os_str()]);
        assert_ok(&out);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let kind = if file.ends_with(".obj") { "coff" } else { "pe" };
        assert_eq!(v["kind"], kind, "{file}");
        assert_eq!(v["pe"]["state"], "fat", "{file}");
        let mut got = BTreeMap::new();
        for b in v["bundles"].as_array().unwrap() {
            for c in b["code_objects"].as_array().unwrap() {
                if !c["is_host"].as_bool().unwrap() {
                    got.insert(
                        (
                            b["index"].as_u64().unwrap() as u32,
                            c["target"].as_str().unwrap().to_string(),
                        ),
                        c["sha256"].as_str().unwrap().to_string(),
                    );
                }
            }
        }
        assert_eq!(&got, want, "{file}: inspect --json");
        let text = ts::stdout(&kpack(&["inspect".as_ref(), path.as_os_str()]));
        assert!(text.contains("state fat"), "{text}");
        // unbundle: one file per code object, same bytes as the bundler's.
        let dir = tmp.path().join(file);
        assert_ok(&kpack(&[
            "unbundle".as_ref(),
            path.as_os_str(),
            "-o".as_ref(),
            dir.as_os_str(),
        ]));
        let mut shas: BTreeSet<String> = BTreeSet::new();
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if !p.file_name().unwrap().to_string_lossy().contains("host") {
                shas.insert(ts::sha256_file(&p));
            }
        }
        let want_shas: BTreeSet<String> = want.values().cloned().collect();
        assert_eq!(shas, want_shas, "{file}: unbundle");
    }
}

/// Wine, when installed (in CI its absence is a failure).
fn wine() -> Option<PathBuf> {
    for w in ["/usr/lib/wine/wine64", "/usr/bin/wine64", "/usr/bin/wine"] {
        if Path::new(w).is_file() {
            return Some(PathBuf::from(w));
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "wine64 is not installed (apt-get install wine64)"
    );
    eprintln!("note: wine64 not installed, skipping");
    None
}

fn mingw(args: &[&str], src: &str, out: &Path) {
    let o = Command::new("x86_64-w64-mingw32-gcc")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/wine")
                .join(src),
        )
        .output()
        .expect("x86_64-w64-mingw32-gcc (gcc-mingw-w64-x86-64)");
    assert_ok(&o);
}

/// One wrapper registration reported by the stub.
#[derive(Debug)]
struct Reg {
    base: u64,
    preferred: u64,
    magic: u32,
    version: u32,
    co_index: u32,
    in_kpackrf: bool,
    data: Vec<u8>,
}

fn hexnum(s: &str) -> u64 {
    u64::from_str_radix(s, 16).unwrap()
}

/// The Wine prefix, kept between runs (a fresh one costs ~30 s) and kept out
/// of the checkout: its `dosdevices/z:` links to `/`, and Buck2's file watcher
/// follows links below the project root (into `/proc`, where it fails).
fn wine_prefix() -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ts::repo_root().hash(&mut h);
    let prefix = std::env::temp_dir().join(format!("rocpack-wineprefix-{:016x}", h.finish()));
    std::fs::create_dir_all(&prefix).unwrap();
    prefix
}

/// Run `load_dlls.exe args…` under Wine in `dir`: registrations per DLL.
fn run_wine(wine: &Path, dir: &Path, args: &[&str]) -> BTreeMap<String, Vec<Reg>> {
    let prefix = wine_prefix();
    let out = Command::new(wine)
        .arg("load_dlls.exe")
        .args(args)
        .current_dir(dir)
        .env("WINEPREFIX", &prefix)
        .env("WINEDEBUG", "-all")
        .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
        .output()
        .expect("wine");
    let text = ts::stdout(&out);
    assert!(
        out.status.success(),
        "wine load_dlls.exe {args:?}: {text}{}",
        ts::stderr(&out)
    );
    let mut by_dll = BTreeMap::new();
    let mut pending = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("reg ") {
            let kv: BTreeMap<&str, &str> =
                rest.split(' ').filter_map(|f| f.split_once('=')).collect();
            pending.push(Reg {
                base: hexnum(kv["base"]),
                preferred: hexnum(kv["preferred"]),
                magic: hexnum(kv["magic"]) as u32,
                version: kv["version"].parse().unwrap(),
                co_index: kv["co_index"].parse().unwrap(),
                in_kpackrf: kv["in_kpackrf"] == "1",
                data: hex::decode(kv["data"]).unwrap(),
            });
        } else if let Some(rest) = line.strip_prefix("loaded ") {
            let name = rest.split(' ').next().unwrap().to_string();
            by_dll.insert(name, std::mem::take(&mut pending));
        }
    }
    assert!(
        pending.is_empty(),
        "registrations outside any LoadLibrary: {text}"
    );
    by_dll
}

/// Every HIPK wrapper of every DLL resolves, for every arch, to the code
/// object clang-offload-bundler extracted from the fat original.
fn check_resolves(
    regs: &BTreeMap<String, Vec<Reg>>,
    bin: &Path,
    exp: &BTreeMap<String, BTreeMap<(u32, String), String>>,
    rebased: bool,
) -> usize {
    let mut n = 0;
    for dll in DLLS {
        let r = &regs[dll];
        let want = &exp[dll];
        let wrappers: BTreeSet<u32> = want.keys().map(|(b, _)| *b).collect();
        assert_eq!(r.len(), wrappers.len(), "{dll}: registrations {r:?}");
        for reg in r {
            assert_eq!(reg.magic, 0x4B50_4948, "{dll}: magic {:#x}", reg.magic);
            assert_eq!(reg.version, 1);
            assert!(
                reg.in_kpackrf,
                "{dll}: pointer not in .kpackrf after loading"
            );
            if rebased {
                assert_ne!(reg.base, reg.preferred, "{dll}: expected a rebase");
            }
            let marker = rocpack_kpack::Marker::decode(&reg.data).unwrap();
            let mut loader = rocpack_kpack::Loader::new(rocpack_kpack::LoaderEnv::none());
            for ((co, target), sha) in want.iter().filter(|((b, _), _)| *b == reg.co_index) {
                let arch = target.rsplit("--").next().unwrap();
                let (_, bytes) = loader
                    .load(&marker, bin, u64::from(*co), &[arch])
                    .unwrap_or_else(|e| panic!("{dll}#{co} [{arch}]: {e}"));
                assert_eq!(&ts::sha256_hex(&bytes), sha, "{dll}#{co} [{arch}]");
                n += 1;
            }
        }
    }
    n
}

/// A TheRock-style Windows artifact `tmp/art/fx_win` holding `files` (Windows
/// fixtures) in `bin/`.
fn win_artifact(tmp: &Path, files: &[&str]) -> PathBuf {
    let art = tmp.join("art/fx_win");
    std::fs::create_dir_all(art.join("bin")).unwrap();
    for f in files {
        std::fs::copy(ts::win_fatbin(f), art.join("bin").join(f)).unwrap();
    }
    ts::write(&art.join("artifact_manifest.txt"), b"bin\n");
    art
}

/// `kpack split` of a TheRock-style Windows artifact (`bin/*.dll`, an EXE);
/// returns the output directory.
fn split_artifact(tmp: &Path) -> PathBuf {
    let art = win_artifact(tmp, &[&DLLS[..], &["fx_win_app.exe"]].concat());
    let out = tmp.join("out");
    assert_ok(&split(&art, "fx_win", &out, &[]));
    out
}

#[test]
fn split_windows_artifact_verifies_and_reassembles() {
    let tmp = ts::tempdir();
    let out = split_artifact(tmp.path());
    let host_dir = out.join("fx_win_generic/bin");
    for f in DLLS.iter().chain(&["fx_win_app.exe"]) {
        let v: Value = serde_json::from_slice(
            &kpack(&[
                "inspect".as_ref(),
                "--json".as_ref(),
                host_dir.join(f).as_os_str(),
            ])
            .stdout,
        )
        .unwrap();
        assert_eq!(v["pe"]["state"], "split", "{f}");
        assert!(v["bundles"].as_array().unwrap().is_empty(), "{f}");
        // Reassembly: byte-identical for uncompressed bundles; CCOB bundles
        // are recompressed, so their code objects are compared.
        let re = tmp.path().join(format!("re_{f}"));
        assert_ok(&kpack(&[
            "reassemble".as_ref(),
            "--host".as_ref(),
            host_dir.join(f).as_os_str(),
            "--kpack-dir".as_ref(),
            out.as_os_str(),
            "-o".as_ref(),
            re.as_os_str(),
        ]));
        let orig = std::fs::read(ts::win_fatbin(f)).unwrap();
        let back = std::fs::read(&re).unwrap();
        if f.contains("ccob") {
            let cos = |p: &Path| {
                let v: Value = serde_json::from_slice(
                    &kpack(&["inspect".as_ref(), "--json".as_ref(), p.as_os_str()]).stdout,
                )
                .unwrap();
                v["bundles"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|b| b["code_objects"].as_array().unwrap().clone())
                    .map(|c| (c["target"].to_string(), c["sha256"].to_string()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(cos(&re), cos(&ts::win_fatbin(f)), "{f}");
        } else {
            assert!(back == orig, "{f}: reassembled image is not the original");
        }
    }
    // verify: both install models resolve every PE marker.
    let o = verify_artifacts(&out);
    assert_ok(&o);
    let text = ts::stdout(&o) + &ts::stderr(&o);
    assert!(
        text.contains("7 split host binaries") && text.contains("44/44 lookups resolved"),
        "{text}"
    );
    // A fat DLL left in the generic package is a violation.
    std::fs::copy(
        ts::win_fatbin("fx_win_lld.dll"),
        host_dir.join("fx_win_lld.dll"),
    )
    .unwrap();
    let o = verify_artifacts(&out);
    assert_eq!(o.status.code(), Some(1), "{}", ts::stdout(&o));
    assert!(ts::stdout(&o).contains("fat_binary"), "{}", ts::stdout(&o));
}

#[test]
fn split_dlls_load_under_wine_and_resolve_to_the_original_code_objects() {
    let Some(wine) = wine() else { return };
    let exp = expected();
    let tmp = ts::tempdir();
    let out = split_artifact(tmp.path());
    // Overlay install of every package's bin/ (TheRock's Windows layout).
    let bin = tmp.path().join("root/bin");
    std::fs::create_dir_all(&bin).unwrap();
    for pkg in std::fs::read_dir(&out).unwrap() {
        let p = pkg.unwrap().path().join("bin");
        if p.is_dir() {
            assert_ok(
                &Command::new("cp")
                    .arg("-a")
                    .arg(format!("{}/.", p.display()))
                    .arg(&bin)
                    .output()
                    .unwrap(),
            );
        }
    }
    for dll in DLLS {
        let fat = std::fs::metadata(ts::win_fatbin(dll)).unwrap().len();
        let host = std::fs::metadata(bin.join(dll)).unwrap().len();
        assert!(host < fat, "{dll}: {fat} -> {host} bytes");
    }
    mingw(
        &["-O1", "-shared"],
        "hip_stub_win.c",
        &bin.join("amdhip64.dll"),
    );
    mingw(&["-O1"], "load_dlls.c", &bin.join("load_dlls.exe"));

    // 1. As split. 2. Preferred base taken by a reservation: every DLL rebased.
    let regs = run_wine(&wine, &bin, &DLLS);
    let n1 = check_resolves(&regs, &bin, &exp, false);
    let preferred = regs["fx_win_lld.dll"][0].preferred;
    let mut args = vec!["--reserve".to_string(), format!("{preferred:x}")];
    args.extend(DLLS.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let n2 = check_resolves(&run_wine(&wine, &bin, &argv), &bin, &exp, true);

    // 3. After llvm-strip --strip-debug and an llvm-objcopy rewrite.
    for dll in DLLS {
        let p = bin.join(dll);
        assert_ok(
            &Command::new("llvm-strip-19")
                .arg("--strip-debug")
                .arg(&p)
                .output()
                .unwrap(),
        );
        assert_ok(
            &Command::new("llvm-objcopy-19")
                .arg(&p)
                .arg(&p)
                .output()
                .unwrap(),
        );
    }
    let n3 = check_resolves(&run_wine(&wine, &bin, &DLLS), &bin, &exp, false);

    // 4. The split EXE registers its own wrapper when run.
    let o = Command::new(&wine)
        .arg("fx_win_app.exe")
        .current_dir(&bin)
        .env("WINEPREFIX", wine_prefix())
        .env("WINEDEBUG", "-all")
        .output()
        .unwrap();
    let text = ts::stdout(&o);
    assert!(
        o.status.success() && text.contains("magic=4b504948") && text.contains("in_kpackrf=1"),
        "{text}"
    );
    eprintln!("wine: {n1} + {n2} (rebased) + {n3} (stripped) code objects resolved");
    assert_eq!(n1, 20);
    assert_eq!(n1, n2);
    assert_eq!(n1, n3);
}

/// Builds a win_amd64 wheel (`.pyd` + DLL + RECORD) from a directory, and
/// checks every RECORD of the wheels given: both written by Python's
/// zipfile/hashlib, not by rocpack.
const WHEEL_PY: &str = r#"
import base64, hashlib, os, sys, zipfile
def h(d): return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
if sys.argv[1] == "make":
    src, out = sys.argv[2], sys.argv[3]
    files = sorted(os.path.relpath(os.path.join(r, f), src) for r, _, fs in os.walk(src) for f in fs)
    rec = [f"{p},{h(open(os.path.join(src, p), 'rb').read())},{os.path.getsize(os.path.join(src, p))}" for p in files]
    dist = [p for p in files if p.endswith(".dist-info/WHEEL")][0].split("/")[0]
    rec.append(f"{dist}/RECORD,,")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for p in files:
            z.write(os.path.join(src, p), p)
        z.writestr(f"{dist}/RECORD", "\n".join(rec) + "\n")
else:
    for w in sys.argv[2:]:
        z = zipfile.ZipFile(w)
        names = set(z.namelist())
        rec = [n for n in names if n.endswith(".dist-info/RECORD")]
        assert len(rec) == 1, (w, rec)
        seen = set()
        for line in z.read(rec[0]).decode().splitlines():
            p, dig, size = line.rsplit(",", 2)
            seen.add(p)
            if p == rec[0]:
                continue
            d = z.read(p)
            assert dig == h(d) and int(size) == len(d), (w, p)
        assert seen == names, (w, names ^ seen)
        tag = [l for l in z.read(rec[0].replace("RECORD", "WHEEL")).decode().splitlines() if l.startswith("Tag:")]
        assert tag == ["Tag: cp311-cp311-win_amd64"], (w, tag)
        assert w.endswith("-cp311-cp311-win_amd64.whl"), w
    print("records ok")
"#;

#[test]
fn split_wheel_of_a_win_amd64_wheel_installs_with_pip_and_resolves() {
    let py = |args: &[&std::ffi::OsStr]| {
        let o = Command::new("python3")
            .arg("-c")
            .arg(WHEEL_PY)
            .args(args)
            .output()
            .unwrap();
        assert_ok(&o);
    };
    let tmp = ts::tempdir();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("fxwin")).unwrap();
    std::fs::create_dir_all(src.join("fxwin-0.1.dist-info")).unwrap();
    std::fs::copy(
        ts::win_fatbin("fx_win_lld.dll"),
        src.join("fxwin/_kern.cp311-win_amd64.pyd"),
    )
    .unwrap();
    std::fs::copy(
        ts::win_fatbin("fx_win_ccob.dll"),
        src.join("fxwin/fx_win_ccob.dll"),
    )
    .unwrap();
    std::fs::write(src.join("fxwin/__init__.py"), "").unwrap();
    std::fs::write(
        src.join("fxwin-0.1.dist-info/METADATA"),
        "Metadata-Version: 2.1\nName: fxwin\nVersion: 0.1\n",
    )
    .unwrap();
    std::fs::write(
        src.join("fxwin-0.1.dist-info/WHEEL"),
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp311-cp311-win_amd64\n",
    )
    .unwrap();
    let whl = tmp.path().join("fxwin-0.1-cp311-cp311-win_amd64.whl");
    py(&["make".as_ref(), src.as_os_str(), whl.as_os_str()]);
    let out = tmp.path().join("out");
    assert_ok(&kpack(&[
        "split-wheel".as_ref(),
        whl.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]));
    let mut wheels: Vec<PathBuf> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    wheels.sort();
    let names: Vec<String> = wheels
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "fxwin-0.1-cp311-cp311-win_amd64.whl",
            "fxwin_device_gfx1100-0.1-cp311-cp311-win_amd64.whl",
            "fxwin_device_gfx906-0.1-cp311-cp311-win_amd64.whl"
        ]
    );
    let mut args: Vec<&std::ffi::OsStr> = vec!["check".as_ref()];
    args.extend(wheels.iter().map(|p| p.as_os_str()));
    py(&args);
    // Real pip, for a Windows target, into a directory.
    let site = tmp.path().join("site");
    let o = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-index",
        ])
        .args([
            "--only-binary=:all:",
            "--platform",
            "win_amd64",
            "--python-version",
            "3.11",
        ])
        .args(["--implementation", "cp", "--abi", "cp311", "--target"])
        .arg(&site)
        .args(&wheels)
        .output()
        .expect("python3 -m pip");
    assert_ok(&o);
    let pyd = std::fs::read(site.join("fxwin/_kern.cp311-win_amd64.pyd")).unwrap();
    assert!(
        pyd.len()
            < std::fs::metadata(ts::win_fatbin("fx_win_lld.dll"))
                .unwrap()
                .len() as usize
    );
    for arch in ["gfx1100", "gfx906"] {
        let o = kpack(&[
            "verify".as_ref(),
            "--installed-tree".as_ref(),
            site.as_os_str(),
            "--gpu-target".as_ref(),
            arch.as_ref(),
        ]);
        assert_ok(&o);
        assert!(
            ts::stdout(&o).contains("2 split host binaries, 3/3 lookups resolved"),
            "{}",
            ts::stdout(&o)
        );
    }
}

#[test]
fn windows_shards_recombine_and_verify() {
    // Two build shards of one Windows artifact (TheRock's bin/*.dll layout),
    // each keeping one target, recombined into one package per group.
    let tmp = ts::tempdir();
    let art = win_artifact(tmp.path(), &DLLS);
    let shards = tmp.path().join("shards");
    for (shard, arch) in [("win-a", "gfx1100"), ("win-b", "gfx906")] {
        assert_ok(&split(
            &art,
            "fx_win",
            &shards.join(shard),
            &["--gpu-targets", arch],
        ));
    }
    let config = tmp.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"primary_shard": "win-a",
            "architecture_groups": {"gfx110X": {"display_name": "RDNA3", "architectures": ["gfx1100"]},
                                    "gfx90X": {"display_name": "Vega", "architectures": ["gfx906"]}},
            "validation": {"error_on_duplicate_device_code": true, "verify_generic_artifacts_match": true,
                           "error_on_missing_architecture": true}}"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = kpack(&[
        "recombine".as_ref(),
        "--input-shards-dir".as_ref(),
        shards.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
        "--output-dir".as_ref(),
        out.as_os_str(),
    ]);
    assert_ok(&o);
    let o = kpack(&[
        "verify".as_ref(),
        "--artifacts-dir".as_ref(),
        out.as_os_str(),
        "--config".as_ref(),
        config.as_os_str(),
    ]);
    assert_ok(&o);
    let text = ts::stdout(&o);
    assert!(text.contains("6 split host binaries"), "{text}");
    assert!(
        text.contains("lookups resolved") && !text.contains("FAIL"),
        "{text}"
    );
}

#[test]
fn host_only_signed_and_32_bit_images_are_described_not_split() {
    let tmp = ts::tempdir();
    // Host-only DLL: kind pe, state host-only, no bundles.
    let o = kpack(&[
        "inspect".as_ref(),
        "--json".as_ref(),
        ts::win_fatbin("amdhip64.dll").as_os_str(),
    ]);
    assert_ok(&o);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["pe"]["state"], "host-only");
    assert!(v["bundles"].as_array().unwrap().is_empty());
    // A PE32 image (optional-header magic 0x10b): described with a note.
    let mut img = std::fs::read(ts::win_fatbin("amdhip64.dll")).unwrap();
    let lfanew = u32::from_le_bytes(img[0x3c..0x40].try_into().unwrap()) as usize;
    img[lfanew + 24..lfanew + 26].copy_from_slice(&0x10bu16.to_le_bytes());
    let p32 = tmp.path().join("x86.dll");
    std::fs::write(&p32, &img).unwrap();
    let o = kpack(&["inspect".as_ref(), "--json".as_ref(), p32.as_os_str()]);
    assert_ok(&o);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["kind"], "pe");
    assert!(
        v["notes"][0].as_str().unwrap().contains("PE32 (32-bit)"),
        "{v}"
    );
    // A signed fat DLL in an artifact: split fails naming the file and why.
    let mut fat = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    let at = fat.len() as u32;
    fat.extend_from_slice(&[16, 0, 0, 0, 0, 2, 2, 0, 0x30, 0x82, 0, 0, 0, 0, 0, 0]);
    let lfanew = u32::from_le_bytes(fat[0x3c..0x40].try_into().unwrap()) as usize;
    let d = lfanew + 24 + 112 + 8 * 4;
    fat[d..d + 4].copy_from_slice(&at.to_le_bytes());
    fat[d + 4..d + 8].copy_from_slice(&16u32.to_le_bytes());
    let art = tmp.path().join("art/signed");
    ts::write(&art.join("artifact_manifest.txt"), b"bin\n");
    ts::write(&art.join("bin/signed.dll"), &fat);
    let o = split(&art, "signed", &tmp.path().join("out"), &[]);
    let err = ts::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("signed.dll")
            && err.contains("Authenticode-signed")
            && err.contains("re-sign"),
        "{err}"
    );
    assert!(!tmp.path().join("out").exists(), "no partial output");
    let o = kpack(&["inspect".as_ref(), art.join("bin/signed.dll").as_os_str()]);
    assert!(
        ts::stdout(&o).contains("Authenticode"),
        "{}",
        ts::stdout(&o)
    );
}

/// A COFF object with device code in an artifact is not split (the image
/// it is linked into is): split copies it fat into the generic artifact
/// and says so (text and JSON), and verify reports it without failing.
#[test]
fn a_fat_coff_object_is_left_fat_with_a_warning_and_verify_reports_it() {
    let tmp = ts::tempdir();
    let art = tmp.path().join("art/obj");
    std::fs::create_dir_all(art.join("lib")).unwrap();
    std::fs::write(art.join("artifact_manifest.txt"), "lib\n").unwrap();
    std::fs::copy(ts::win_fatbin("fx_win_kern.obj"), art.join("lib/kern.obj")).unwrap();
    std::fs::copy(ts::win_fatbin("fx_win_lld.dll"), art.join("lib/k.dll")).unwrap();
    let split = |out: &Path, json: bool| {
        let mut args = vec![
            "split".as_ref(),
            "--artifact-prefix".as_ref(),
            "obj".as_ref(),
            "--artifact-dir".as_ref(),
            art.as_os_str(),
            "--output-dir".as_ref(),
            out.as_os_str(),
        ];
        if json {
            args.push("--json".as_ref());
        }
        let o = kpack(&args);
        assert_ok(&o);
        o
    };
    let want = "lib/kern.obj: COFF object with HIP device code (1 bundle(s)) copied fat";
    let out = tmp.path().join("out");
    let o = split(&out, false);
    let text = ts::stdout(&o) + &ts::stderr(&o);
    assert!(text.contains(want), "{text}");
    let o = split(&tmp.path().join("out-json"), true);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let warnings = v.to_string();
    assert!(warnings.contains(want), "{v}");
    let kept = std::fs::read(out.join("obj_generic/lib/kern.obj")).unwrap();
    assert!(kept == std::fs::read(ts::win_fatbin("fx_win_kern.obj")).unwrap());
    let o = verify_artifacts(&out);
    assert_ok(&o);
    let text = ts::stdout(&o) + &ts::stderr(&o);
    assert!(
        text.contains("obj_generic/lib/kern.obj: fat COFF object (1 bundle(s) of HIP device code) in a generic package"),
        "{text}"
    );
}

/// `kpack verify --artifacts-dir OUT`.
fn verify_artifacts(out: &Path) -> std::process::Output {
    kpack(&[
        "verify".as_ref(),
        "--artifacts-dir".as_ref(),
        out.as_os_str(),
    ])
}
