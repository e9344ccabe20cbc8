//! ROCm's `librocm_kpack` semantics (issue 20, items 3–8 and 11), as read
//! in its source (shared/kpack/runtime/src/loader.cpp, toc_parser.cpp,
//! compression.cpp of ROCm/rocm-systems; see docs/runtime.md), encoded as
//! tests of this library through its C entry points (in-process).

// The C entry points are called directly: raw pointers, each use sound as commented.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::path::Path;

use rocm_kpack::{
    kpack_cache_create, kpack_cache_destroy, kpack_close, kpack_error_t, kpack_free_code_object,
    kpack_free_kernel, kpack_get_kernel, kpack_load_code_object, kpack_open, KpackArchive,
    KpackCache,
};
use rocpack_kpack::{Compression, KpackReader, KpackWriter, Marker};
use rocpack_testsupport::tempdir;

use kpack_error_t::*;

fn zstd_archive(kernels: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("x").arch_family("gfx110X").arches(["gfx1100"]);
    for (k, d) in kernels {
        w.add(k, "gfx1100", d.to_vec()).unwrap();
    }
    w.to_vec().unwrap()
}

fn open_code(path: &Path) -> kpack_error_t {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    let mut a: *mut KpackArchive = std::ptr::null_mut();
    // SAFETY: valid pointers.
    let rc = unsafe { kpack_open(p.as_ptr(), &mut a) };
    unsafe { kpack_close(a) };
    rc
}

fn get_kernel_code(path: &Path, key: &str) -> kpack_error_t {
    let p = CString::new(path.to_str().unwrap()).unwrap();
    let mut a: *mut KpackArchive = std::ptr::null_mut();
    // SAFETY: valid pointers.
    assert_eq!(unsafe { kpack_open(p.as_ptr(), &mut a) }, KPACK_SUCCESS);
    let (k, arch) = (CString::new(key).unwrap(), CString::new("gfx1100").unwrap());
    let (mut d, mut n) = (std::ptr::null_mut::<c_void>(), 0usize);
    // SAFETY: valid pointers, `a` open.
    let rc = unsafe { kpack_get_kernel(a, k.as_ptr(), arch.as_ptr(), &mut d, &mut n) };
    unsafe {
        kpack_free_kernel(d);
        kpack_close(a);
    }
    rc
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle")
}

/// Item 6: the codes ROCm returns for damaged input (archive.cpp,
/// toc_parser.cpp, compression.cpp).
#[test]
fn damaged_input_error_codes_are_rocms() {
    let tmp = tempdir();
    let (k0, k1) = (
        rocpack_testsupport::pseudo_random(1, 5000),
        rocpack_testsupport::pseudo_random(2, 7000),
    );
    let good = zstd_archive(&[("k#0", &k0), ("k#1", &k1)]);
    let r = KpackReader::from_bytes(&good).unwrap();
    let toc = r.toc_offset() as usize;
    let z = r.zstd_region().unwrap();
    let w = |name: &str, b: &[u8]| {
        let p = tmp.path().join(name);
        std::fs::write(&p, b).unwrap();
        p
    };
    // Truncated TOC: msgpack unpack throws -> MSGPACK_PARSE_FAILED (10).
    let p = w("toc.kpack", &good[..good.len() - 3]);
    assert_eq!(open_code(&p), KPACK_ERROR_MSGPACK_PARSE_FAILED);
    // Trailing bytes after the TOC: also 10 here (item 7: ROCm's unpack
    // of the whole TOC region throws on them too).
    let mut t = good.clone();
    t.push(0xc0);
    assert_eq!(
        open_code(&w("trail.kpack", &t)),
        KPACK_ERROR_MSGPACK_PARSE_FAILED
    );
    // A directory: ROCm's fopen succeeds and the header read fails (3).
    std::fs::create_dir(tmp.path().join("dir.kpack")).unwrap();
    assert_eq!(
        open_code(&tmp.path().join("dir.kpack")),
        KPACK_ERROR_INVALID_FORMAT
    );
    // zstd_size past the end of the file: ROCm's fread of the blob comes
    // up short (IO_ERROR, 9).
    let mut b = good.clone();
    let at = toc + find(&good[toc..], b"\xa9zstd_size") + 10;
    assert_eq!(b[at], 0xcd, "zstd_size is a uint16 here");
    b[at + 1..at + 3].copy_from_slice(&0xfff0u16.to_be_bytes());
    assert_eq!(open_code(&w("zsize.kpack", &b)), KPACK_ERROR_IO_ERROR);
    // A frame count that cannot fit: INVALID_FORMAT (3).
    let mut b = good.clone();
    let zc = z.offset as usize;
    b[zc..zc + 4].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    assert_eq!(open_code(&w("count.kpack", &b)), KPACK_ERROR_INVALID_FORMAT);
    // A damaged frame: DECOMPRESSION_FAILED (6), at the lookup.
    let loc = r
        .blob_location(r.entry("k#1", "gfx1100").unwrap().ordinal)
        .unwrap();
    let mut b = good.clone();
    b[loc.offset as usize] ^= 0xff; // the frame's magic
    assert_eq!(
        get_kernel_code(&w("frame.kpack", &b), "k#1"),
        KPACK_ERROR_DECOMPRESSION_FAILED
    );
    let mut b = good.clone();
    b[(loc.offset + loc.size) as usize - 6] ^= 0x10; // inside the block / checksum
    assert_eq!(
        get_kernel_code(&w("frame2.kpack", &b), "k#1"),
        KPACK_ERROR_DECOMPRESSION_FAILED
    );
    assert_eq!(
        get_kernel_code(&w("frame2.kpack", &b), "k#0"),
        KPACK_SUCCESS
    );
}

struct Setup {
    _tmp: tempfile::TempDir,
    binary: CString,
}

/// lib/libhip.so with lib/.kpack/x_gfx1100.kpack holding `lib/libhip.so#0`.
fn setup() -> Setup {
    let tmp = tempdir();
    let lib = tmp.path().join("lib");
    std::fs::create_dir_all(lib.join(".kpack")).unwrap();
    std::fs::write(lib.join("libhip.so"), b"host").unwrap();
    std::fs::write(
        lib.join(".kpack/x_gfx1100.kpack"),
        zstd_archive(&[("lib/libhip.so#0", b"code object")]),
    )
    .unwrap();
    let binary = CString::new(lib.join("libhip.so").to_str().unwrap()).unwrap();
    Setup { _tmp: tmp, binary }
}

fn marker() -> Vec<u8> {
    Marker::new([".kpack/x_@GFXARCH@.kpack"], "lib/libhip.so").encode()
}

/// `kpack_load_code_object` with `arch_list` as given (NULLs allowed).
///
/// # Safety
/// `meta` points to readable marker memory (or memory the library must
/// refuse without reading past its mapping).
unsafe fn load(
    s: &Setup,
    meta: *const u8,
    archs: &[*const c_char],
) -> Result<Vec<u8>, kpack_error_t> {
    let mut c: *mut KpackCache = std::ptr::null_mut();
    assert_eq!(kpack_cache_create(&mut c), KPACK_SUCCESS);
    let (mut p, mut n) = (std::ptr::null_mut::<c_void>(), 0usize);
    let rc = kpack_load_code_object(
        c,
        meta.cast(),
        s.binary.as_ptr(),
        0,
        archs.as_ptr(),
        archs.len(),
        &mut p,
        &mut n,
    );
    let out = if rc == KPACK_SUCCESS {
        let v = std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec();
        kpack_free_code_object(p);
        Ok(v)
    } else {
        Err(rc)
    };
    kpack_cache_destroy(c);
    out
}

/// Item 5: a NULL entry of `arch_list` is skipped (loader.cpp: `if
/// (!arch_list[i]) continue;`); only NULLs: nothing to expand, so
/// ARCHIVE_NOT_FOUND, as ROCm. Main answered INVALID_ARGUMENT.
#[test]
fn null_arch_entries_are_skipped() {
    let s = setup();
    let m = marker();
    let gfx = CString::new("gfx1100").unwrap();
    // SAFETY: `m` is a valid marker.
    unsafe {
        assert_eq!(
            load(&s, m.as_ptr(), &[std::ptr::null(), gfx.as_ptr()]).unwrap(),
            b"code object"
        );
        assert_eq!(
            load(&s, m.as_ptr(), &[std::ptr::null()]).unwrap_err(),
            KPACK_ERROR_ARCHIVE_NOT_FOUND
        );
    }
}

/// Two pages: the first read-write, the second inaccessible.
struct Pages {
    base: *mut u8,
    page: usize,
}

impl Pages {
    fn new(second_readable: bool) -> Pages {
        // SAFETY: plain anonymous mapping, checked below.
        unsafe {
            let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap();
            let base = libc::mmap(
                std::ptr::null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(base, libc::MAP_FAILED);
            if !second_readable {
                assert_eq!(
                    libc::mprotect(base.cast::<u8>().add(page).cast(), page, libc::PROT_NONE),
                    0
                );
            }
            Pages {
                base: base.cast(),
                page,
            }
        }
    }

    /// Put `bytes` `start_before_end` bytes before the end of the first
    /// page (what does not fit there is left out); their address.
    fn place(&self, bytes: &[u8], start_before_end: usize) -> *const u8 {
        assert!(start_before_end <= self.page);
        // SAFETY: inside the first (read-write) page.
        unsafe {
            let at = self.base.add(self.page - start_before_end);
            let n = bytes.len().min(start_before_end);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, n);
            at
        }
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`.
        unsafe { libc::munmap(self.base.cast(), 2 * self.page) };
    }
}

/// Item 11: a marker whose str32 / array32 / map32 header claims more
/// bytes than the mapping holds is INVALID_METADATA; main read past the
/// mapping (SIGSEGV). A valid marker that crosses into a readable page is
/// still read.
#[test]
fn marker_reads_are_bounded_by_the_mapping() {
    let s = setup();
    let gfx = CString::new("gfx1100").unwrap();
    let archs = [gfx.as_ptr()];
    let lying: [&[u8]; 3] = [
        &[0x81, 0xdb, 0x00, 0x00, 0xf0, 0x00], // map{str32 of 61440 bytes: ..}
        &[0x81, 0xa1, b'k', 0xdd, 0x00, 0x00, 0x10, 0x00], // map{"k": array32 of 4096}
        &[0xdf, 0x00, 0x00, 0x10, 0x00],       // map32 of 4096 entries
    ];
    let pages = Pages::new(false);
    for l in lying {
        let p = pages.place(l, l.len());
        // SAFETY: `p` is readable up to the end of the first page.
        let got = unsafe { load(&s, p, &archs) };
        assert_eq!(got.unwrap_err(), KPACK_ERROR_INVALID_METADATA, "{l:02x?}");
    }
    // A real marker split across two readable pages.
    let m = marker();
    let pages = Pages::new(true);
    let p = pages.place(&m, m.len() / 2);
    // SAFETY: both pages are readable.
    unsafe {
        std::ptr::copy_nonoverlapping(m.as_ptr(), p.cast_mut(), m.len());
        assert_eq!(load(&s, p, &archs).unwrap(), b"code object");
    }
}
