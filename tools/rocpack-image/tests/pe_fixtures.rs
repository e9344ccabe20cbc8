//! PE32+/COFF fixtures (tests/fixtures/make-winfatbins.sh) against
//! independent oracles: clang-offload-bundler (expected-unbundle-win.tsv),
//! pefile (tests/pe_oracle.py) and llvm-readobj.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocpack_image::pe::{self, PeKind};
use rocpack_image::{detect, Analysis, FileType};
use rocpack_testsupport as ts;

const IMAGES: [&str; 7] = [
    "fx_win_lld.dll",
    "fx_win_full.dll",
    "fx_win_gnu.dll",
    "fx_win_ccob.dll",
    "fx_win_app.exe",
    "fx_win_msvc.dll",
    "fx_win_overlay.dll",
];
const MARKER: &[u8] = b"\x82\xa5hello-marker-payload-for-tests";

/// `file -> {(target, sha256)}` from the bundler-made TSV.
fn expected() -> std::collections::BTreeMap<String, BTreeSet<(String, String)>> {
    let tsv =
        std::fs::read_to_string(ts::win_fixtures().join("expected-unbundle-win.tsv")).unwrap();
    let mut m = std::collections::BTreeMap::<String, BTreeSet<(String, String)>>::new();
    for line in tsv.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        let file = f[0].trim_start_matches("fatbins-win/").to_string();
        m.entry(file)
            .or_default()
            .insert((format!("{}#{}", f[2], f[4]), f[5].to_string()));
    }
    m
}

/// `{(bundle#target, sha256)}` of the non-host code objects rocpack reads.
fn ours(data: &[u8], info: &pe::PeInfo) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for b in &info.bundles {
        let bytes = pe::bundle_bytes(data, info, b.index).unwrap();
        let parsed = rocpack_bundle::parse_bundle(bytes).unwrap();
        for e in &parsed.entries {
            if e.id.is_host() {
                continue;
            }
            out.insert((format!("{}#{}", b.index, e.id), ts::sha256_hex(&e.data)));
        }
    }
    out
}

#[test]
fn every_fixture_unbundles_like_clang_offload_bundler() {
    let exp = expected();
    assert_eq!(exp.len(), 8, "fixtures listed: {:?}", exp.keys());
    for (file, want) in &exp {
        let data = std::fs::read(ts::win_fatbin(file)).unwrap();
        let t = detect(&data);
        let info = pe::analyze(&data).unwrap_or_else(|e| panic!("{file}: {e}"));
        if file.ends_with(".obj") {
            assert_eq!(t, FileType::Coff { bigobj: false }, "{file}");
            assert_eq!(info.kind, PeKind::Object);
        } else {
            assert_eq!(t, FileType::Pe { pe32_plus: true }, "{file}");
        }
        assert!(info.has_device_code(), "{file}");
        assert_eq!(&ours(&data, &info), want, "{file}");
        // Every wrapper points at a bundle, every bundle has a wrapper.
        assert!(!info.wrappers.is_empty(), "{file}");
        assert!(info.wrappers.iter().all(|w| w.bundle.is_some()), "{file}");
        assert!(
            info.bundles.iter().all(|b| !b.wrappers.is_empty()),
            "{file}"
        );
    }
}

#[test]
fn truncated_names_long_names_and_pointer_models() {
    let lld = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    let i = pe::analyze(&lld).unwrap();
    assert_eq!(i.section_name(i.fatbin.unwrap().index), ".hip_fat");
    assert_eq!(i.section_name(i.wrapper_section.unwrap().index), ".hipFatB");
    assert_eq!(i.kind, PeKind::Dll);
    assert_eq!(i.bundles.len(), 2);
    assert!(i
        .wrappers
        .iter()
        .all(|w| w.pointer == pe::PePointer::BaseRelocDir64));
    let gnu = std::fs::read(ts::win_fatbin("fx_win_gnu.dll")).unwrap();
    let g = pe::analyze(&gnu).unwrap();
    assert_eq!(g.section_name(g.fatbin.unwrap().index), ".hip_fatbin");
    assert_eq!(
        g.section_name(g.wrapper_section.unwrap().index),
        ".hipFatBinSegment"
    );
    assert!(
        g.symbol_table != 0 && g.trailing > 0,
        "GNU ld keeps a COFF symbol table"
    );
    let obj = std::fs::read(ts::win_fatbin("fx_win_kern.obj")).unwrap();
    let o = pe::analyze(&obj).unwrap();
    assert!(matches!(
        &o.wrappers[0].pointer,
        pe::PePointer::Object { reloc_type: 1, .. }
    ));
    let exe = std::fs::read(ts::win_fatbin("fx_win_app.exe")).unwrap();
    assert_eq!(pe::analyze(&exe).unwrap().kind, PeKind::Exe);
    let ov = std::fs::read(ts::win_fatbin("fx_win_overlay.dll")).unwrap();
    assert_eq!(pe::analyze(&ov).unwrap().trailing, i.trailing + 4096);
}

fn oracle(fat: &Path, split: &Path) {
    let out = Command::new("python3")
        .arg(ts::repo_root().join("tools/rocpack-image/tests/pe_oracle.py"))
        .arg(fat)
        .arg(split)
        .arg(hex::encode(MARKER))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "pefile check of {} failed:\n{}{}",
        split.display(),
        ts::stdout(&out),
        ts::stderr(&out)
    );
    eprint!("{}", ts::stdout(&out));
    let ro = Command::new("llvm-readobj-19")
        .args([
            "--file-headers",
            "--sections",
            "--coff-basereloc",
            "--coff-debug-directory",
        ])
        .arg(split)
        .output()
        .expect("llvm-readobj-19");
    let text = ts::stdout(&ro) + &ts::stderr(&ro);
    assert!(
        ro.status.success(),
        "llvm-readobj {}: {text}",
        split.display()
    );
    assert!(
        !text.contains("warning"),
        "llvm-readobj {}: {text}",
        split.display()
    );
    assert!(text.contains("Name: .kpackrf"), "{text}");
    let fat_ro = Command::new("llvm-readobj-19")
        .args(["--coff-basereloc", "--coff-debug-directory"])
        .arg(fat)
        .output()
        .unwrap();
    // Base relocations identical; debug directory identical but for the
    // file offsets of the data it points at.
    let relocs = |s: &str| {
        s.lines()
            .skip_while(|l| *l != "BaseReloc [")
            .take_while(|l| !l.starts_with("DebugDirectory"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(relocs(&ts::stdout(&ro)), relocs(&ts::stdout(&fat_ro)));
    let dbg = |s: &str| {
        s.lines()
            .skip_while(|l| !l.starts_with("DebugDirectory"))
            .filter(|l| !l.contains("PointerToRawData"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(dbg(&ts::stdout(&ro)), dbg(&ts::stdout(&fat_ro)));
}

fn split_one(name: &str, dir: &Path) -> (Vec<u8>, Vec<u8>, PathBuf, PathBuf) {
    let fat_path = ts::win_fatbin(name);
    let fat = std::fs::read(&fat_path).unwrap();
    let host = pe::split_host(&fat, MARKER).unwrap_or_else(|e| panic!("{name}: {e}"));
    let out = dir.join(name);
    std::fs::write(&out, &host).unwrap();
    (fat, host, fat_path, out)
}

#[test]
fn split_images_pass_pefile_and_llvm_readobj_and_reassemble_exactly() {
    let dir = ts::tempdir();
    for name in IMAGES {
        let (fat, host, fat_path, out) = split_one(name, dir.path());
        let fi = pe::analyze(&fat).unwrap();
        let hi = pe::analyze(&host).unwrap();
        assert_eq!(hi.state, rocpack_image::elf::State::Split, "{name}");
        assert!(hi.bundles.is_empty(), "{name}: no bundle bytes left");
        let removed: u64 = fi.bundles.iter().map(|b| b.len).sum();
        assert!(
            host.len() as u64 + removed <= fat.len() as u64 + 4096,
            "{name}: {} -> {} bytes, device code {removed}",
            fat.len(),
            host.len()
        );
        for w in &hi.wrappers {
            assert!(w.points_to_marker, "{name} wrapper {}", w.index);
            assert_eq!(w.marker_bytes(&hi).unwrap(), MARKER);
            assert_eq!(Some(w.co_index() as usize), fi.wrappers[w.index].bundle);
        }
        oracle(&fat_path, &out);
        // Reassembly is the exact inverse.
        let bundles: Vec<Vec<u8>> = fi
            .bundles
            .iter()
            .map(|b| pe::bundle_bytes(&fat, &fi, b.index).unwrap().to_vec())
            .collect();
        let back = pe::reassemble(&host, &bundles).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            back == fat,
            "{name}: reassembled image differs from the original"
        );
        // Through the seam as well.
        let via_seam = rocpack_image::split_file(&fat, &mut |m, a: &Analysis| {
            assert_eq!(m, "");
            assert!(a.has_device_code());
            Ok(MARKER.to_vec())
        })
        .unwrap();
        assert!(via_seam == host, "{name}: seam and direct split differ");
    }
}

#[test]
fn split_changes_nothing_in_host_only_and_refuses_objects() {
    let hip = std::fs::read(ts::win_fatbin("amdhip64.dll")).unwrap();
    assert_eq!(
        pe::analyze(&hip).unwrap().state,
        rocpack_image::elf::State::HostOnly
    );
    assert!(pe::split_host(&hip, MARKER).unwrap() == hip);
    let obj = std::fs::read(ts::win_fatbin("fx_win_kern.obj")).unwrap();
    let e = pe::split_host(&obj, MARKER).unwrap_err().to_string();
    assert!(e.contains("COFF objects are not split"), "{e}");
}

/// Optional-header offset and data directory 4 (security) of a PE32+ image.
fn security_dir(data: &[u8]) -> usize {
    let lfanew = u32::from_le_bytes(data[0x3c..0x40].try_into().unwrap()) as usize;
    lfanew + 24 + 112 + 8 * 4
}

#[test]
fn signed_image_is_refused_with_what_to_do() {
    let mut fat = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    // A WIN_CERTIFICATE after the last section, as signtool appends it.
    let at = fat.len() as u32;
    fat.extend_from_slice(&[16, 0, 0, 0, 0, 2, 2, 0, 0x30, 0x82, 0, 0, 0, 0, 0, 0]);
    let d = security_dir(&fat);
    fat[d..d + 4].copy_from_slice(&at.to_le_bytes());
    fat[d + 4..d + 8].copy_from_slice(&16u32.to_le_bytes());
    let e = pe::split_host(&fat, MARKER).unwrap_err().to_string();
    assert!(
        e.contains("Authenticode-signed") && e.contains("re-sign"),
        "{e}"
    );
}

#[test]
fn a_full_header_area_grows_by_one_file_alignment_block() {
    // fx_win_full.dll: the section table ends 24 bytes before SizeOfHeaders.
    let fat = std::fs::read(ts::win_fatbin("fx_win_full.dll")).unwrap();
    let fi = pe::analyze(&fat).unwrap();
    let h = fi.headers.as_ref().unwrap();
    let table_end = fi.sections.last().unwrap().header_offset + 40;
    assert!(
        table_end + 40 > u64::from(h.size_of_headers),
        "{table_end:#x}"
    );
    let host = pe::split_host(&fat, MARKER).unwrap();
    let hi = pe::analyze(&host).unwrap();
    let hh = hi.headers.as_ref().unwrap();
    assert_eq!(hh.size_of_headers, h.size_of_headers + h.file_alignment);
    let first = |i: &pe::PeInfo| {
        i.sections
            .iter()
            .filter(|s| s.raw_size > 0)
            .map(|s| s.raw_offset)
            .min()
    };
    assert_eq!(first(&hi), Some(hh.size_of_headers));
    assert_eq!(first(&fi).unwrap() + h.file_alignment, first(&hi).unwrap());
    // (pefile, llvm-readobj and exact reassembly: split_images_pass_pefile_…)
}

#[test]
fn image_without_a_free_header_slot_is_refused_by_name() {
    // Something lives behind the table.
    let mut fat = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    let i = pe::analyze(&fat).unwrap();
    let slot = i.sections.last().unwrap().header_offset as usize + 40;
    fat[slot + 9] = 1;
    let e = pe::split_host(&fat, MARKER).unwrap_err().to_string();
    assert!(
        e.contains("no free section header slot") && e.contains("in use"),
        "{e}"
    );
    // The table fills the headers and they cannot grow: the first section
    // is mapped right behind them (moved there for the test).
    let mut fat = std::fs::read(ts::win_fatbin("fx_win_full.dll")).unwrap();
    let i = pe::analyze(&fat).unwrap();
    let first = i.sections.iter().min_by_key(|s| s.virtual_address).unwrap();
    let at = first.header_offset as usize + 12;
    let soh = i.headers.as_ref().unwrap().size_of_headers;
    fat[at..at + 4].copy_from_slice(&soh.to_le_bytes());
    let e = pe::split_host(&fat, MARKER).unwrap_err().to_string();
    assert!(
        e.contains("no free section header slot")
            && e.contains(&format!("the first section is mapped at RVA {soh:#x}")),
        "{e}"
    );
}

#[test]
fn checksum_is_recomputed_when_set() {
    // lld and GNU ld leave CheckSum 0; give the image a valid one first.
    let mut fat = std::fs::read(ts::win_fatbin("fx_win_gnu.dll")).unwrap();
    let lfanew = u32::from_le_bytes(fat[0x3c..0x40].try_into().unwrap()) as u64;
    let field = lfanew + 24 + 64;
    let c = pe::pe_checksum(&fat, field);
    fat[field as usize..field as usize + 4].copy_from_slice(&c.to_le_bytes());
    let dir = ts::tempdir();
    let fat_path = dir.path().join("sum.dll");
    std::fs::write(&fat_path, &fat).unwrap();
    let host = pe::split_host(&fat, MARKER).unwrap();
    let out = dir.path().join("sum.split.dll");
    std::fs::write(&out, &host).unwrap();
    oracle(&fat_path, &out); // pefile: CheckSum == generate_checksum()
    let i = pe::analyze(&fat).unwrap();
    let bundles: Vec<Vec<u8>> = i
        .bundles
        .iter()
        .map(|b| pe::bundle_bytes(&fat, &i, b.index).unwrap().to_vec())
        .collect();
    assert!(pe::reassemble(&host, &bundles).unwrap() == fat);
}

#[test]
fn mutated_images_never_panic() {
    let fat = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    let hdr_end = 0x400.min(fat.len());
    for seed in 0..400u64 {
        let mut m = fat.clone();
        let r = ts::pseudo_random(seed, 8);
        let at = (u32::from_le_bytes(r[..4].try_into().unwrap()) as usize) % hdr_end;
        m[at] ^= r[4] | 1;
        let _ = pe::analyze(&m);
        let _ = pe::split_host(&m, MARKER);
        let _ = rocpack_image::analyze(&m[..at]);
    }
}

/// Section header field of `name` at `+field` (VirtualSize is +8).
fn section_field(data: &[u8], name: &str, field: u64) -> usize {
    let i = pe::analyze(data).unwrap();
    let s = i.sections.iter().find(|s| s.name == name).unwrap();
    (s.header_offset + field) as usize
}

#[test]
fn reassembly_refuses_a_bundle_section_larger_than_its_bundles() {
    // A split image whose `.hip_fat` claims 1.75 GiB: reassembly used to
    // allocate all of it.
    let fat = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    let fi = pe::analyze(&fat).unwrap();
    let bundles: Vec<Vec<u8>> = fi
        .bundles
        .iter()
        .map(|b| pe::bundle_bytes(&fat, &fi, b.index).unwrap().to_vec())
        .collect();
    let mut host = pe::split_host(&fat, MARKER).unwrap();
    let at = section_field(&host, ".hip_fat", 8);
    host[at..at + 4].copy_from_slice(&0x7000_0000u32.to_le_bytes());
    let e = pe::reassemble(&host, &bundles).unwrap_err().to_string();
    assert!(e.contains("VirtualSize 0x70000000"), "{e}");
}

/// Both sides of the image seam walk wrappers with one helper
/// (`rocpack_image::elf::wrapper_table`) and report its faults with one error:
/// the same words and offset for an ELF file, a PE image and a COFF object.
#[test]
fn a_bad_wrapper_magic_reads_the_same_in_elf_pe_and_coff() {
    let files = [
        ts::fatbins().join("fx_app"),
        ts::fatbins().join("libfx_two_tu.so"),
        ts::win_fatbin("fx_win_lld.dll"),
        ts::win_fatbin("fx_win_kern.obj"),
    ];
    let mut beyond_first = false;
    for path in files {
        let mut data = std::fs::read(&path).unwrap();
        // The last wrapper: its offset is the table's plus index * 24.
        let (n, ws) = match rocpack_image::analyze(&data).unwrap() {
            Analysis::Elf(i) => (i.wrappers.len(), i.wrappers.last().unwrap().file_offset),
            Analysis::Pe(i) => (i.wrappers.len(), i.wrappers.last().unwrap().file_offset),
        };
        let last = n - 1;
        beyond_first |= last > 0;
        data[ws as usize..ws as usize + 4].copy_from_slice(&0xdead_beef_u32.to_le_bytes());
        let e = rocpack_image::analyze(&data).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("wrapper {last} at offset {ws:#x}: magic 0xdeadbeef is neither HIPF nor HIPK"),
            "{}",
            path.display()
        );
        assert_eq!(e.offset(), Some(ws), "{}", path.display());
        assert!(
            matches!(
                e,
                rocpack_image::Error::Wrapper { index, .. } if index == last
            ),
            "{e:?}"
        );
    }
    assert!(beyond_first, "no fixture with a second wrapper");
}

/// Images whose layout reassembly cannot give back are refused by the
/// split, not split into something that reassembles differently or not
/// at all: `SectionAlignment` 0 (reassembly would recompute `SizeOfImage`
/// unaligned), a `SizeOfImage` that is not what the sections make it, a
/// bundle section with `VirtualSize` 0 (the loader reads `SizeOfRawData`;
/// reassembly would find no room for the bundles).
#[test]
fn layouts_reassembly_cannot_give_back_are_refused() {
    let fat = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    let fi = pe::analyze(&fat).unwrap();
    let h = fi.headers.clone().unwrap();
    let opt = h.optional_offset as usize;
    let vsize = section_field(&fat, ".hip_fat", 8);
    let cases: [(&str, usize, u32, &str); 4] = [
        (
            "SectionAlignment 0",
            opt + 32,
            0,
            "SectionAlignment 0x0 is not",
        ),
        (
            "SectionAlignment below FileAlignment",
            opt + 32,
            h.file_alignment / 2,
            "is not a power of two of at least FileAlignment",
        ),
        (
            "SizeOfImage",
            opt + 56,
            h.size_of_image + 0x1000,
            "reassembly could not give it back",
        ),
        ("VirtualSize 0", vsize, 0, "has VirtualSize 0x0"),
    ];
    for (label, at, v, want) in cases {
        let mut m = fat.clone();
        m[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let e = pe::split_host(&m, MARKER).unwrap_err().to_string();
        assert!(e.contains(want), "{label}: {e}");
    }
}

/// A fat DLL whose headers cannot be found (`e_lfanew` past the end of the
/// file) or that has no sections is not a host-only file: it is detected as
/// an image and its analysis fails, so `kpack split` refuses it and
/// `kpack verify` flags the device code it carries.
#[test]
fn images_without_findable_headers_or_sections_do_not_read_as_host_only() {
    let fat = std::fs::read(ts::win_fatbin("fx_win_lld.dll")).unwrap();
    let mut past = fat.clone();
    let beyond = (fat.len() as u32 + 16).to_le_bytes();
    past[0x3c..0x40].copy_from_slice(&beyond);
    assert_eq!(detect(&past[..4096]), FileType::Pe { pe32_plus: true });
    assert!(rocpack_image::analyze(&past).is_err());
    assert!(pe::split_host(&past, MARKER).is_err());

    let fi = pe::analyze(&fat).unwrap();
    let nt = fi.headers.as_ref().unwrap().nt_offset as usize;
    let mut none = fat.clone();
    none[nt + 6..nt + 8].copy_from_slice(&0u16.to_le_bytes());
    let e = pe::analyze(&none).unwrap_err().to_string();
    assert!(e.contains("NumberOfSections 0"), "{e}");
    assert!(pe::split_host(&none, MARKER).is_err());
}
