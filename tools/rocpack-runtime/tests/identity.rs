//! Cache identity (docs/runtime.md, "Cache identity"): once a cache has
//! opened an archive it serves that file for the cache's life, for both
//! schemes: replaced by rename (dpkg, rpm) or deleted, the old contents
//! are served, as by ROCm; truncated or rewritten in place, lookups fail
//! with IO_ERROR — never a crash (`SIGBUS`), never bytes of the new file at
//! the old table of contents' offsets. Checked under concurrent load: every
//! result of every thread is counted and must be the old kernel or, after
//! an in-place change, IO_ERROR.

// The C entry points are called directly: raw pointers, each use sound as commented.
#![allow(unsafe_code)]

use std::ffi::{c_void, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rocm_kpack::{
    kpack_cache_create, kpack_cache_destroy, kpack_close, kpack_error_t, kpack_free_code_object,
    kpack_free_kernel, kpack_get_kernel, kpack_load_code_object, kpack_open, KpackArchive,
    KpackCache,
};
use rocpack_kpack::{Compression, KpackWriter, Marker};
use rocpack_testsupport::{pseudo_random, tempdir};

const ARCH: &str = "gfx1100";

/// Archive "A": kernels `lib/libhip.so#0..4`, 96 KiB each (incompressible,
/// so a zstd archive is as large as a `none` one).
fn kernel_a(i: u32) -> Vec<u8> {
    pseudo_random(100 + u64::from(i), 96 << 10)
}

fn archive(comp: Compression, kernels: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut w = KpackWriter::new(comp);
    w.group_name("x").arch_family("gfx110X").arches([ARCH]);
    for (k, d) in kernels {
        w.add(k, ARCH, d.clone()).unwrap();
    }
    w.to_vec().unwrap()
}

fn archive_a(comp: Compression) -> Vec<u8> {
    let ks: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("lib/libhip.so#{i}"), kernel_a(i)))
        .collect();
    archive(comp, &ks)
}

/// Archive "B": a small, different layout (an extra kernel first), the
/// same keys with other bytes.
fn archive_b(comp: Compression) -> Vec<u8> {
    let mut ks = vec![("lib/other.so#0".to_string(), vec![7u8; 3000])];
    for i in 0..4 {
        ks.push((
            format!("lib/libhip.so#{i}"),
            vec![b'B' + i as u8; 1000 + i as usize],
        ));
    }
    archive(comp, &ks)
}

struct Tree {
    _tmp: tempfile::TempDir,
    binary: CString,
    archive: PathBuf,
    marker: Vec<u8>,
}

fn tree(comp: Compression) -> Tree {
    let tmp = tempdir();
    let lib = tmp.path().join("lib");
    std::fs::create_dir_all(lib.join(".kpack")).unwrap();
    std::fs::write(lib.join("libhip.so"), b"host").unwrap();
    let archive = lib.join(".kpack/x_gfx1100.kpack");
    std::fs::write(&archive, archive_a(comp)).unwrap();
    let marker = Marker::new([".kpack/x_@GFXARCH@.kpack"], "lib/libhip.so").encode();
    let binary = CString::new(lib.join("libhip.so").to_str().unwrap()).unwrap();
    Tree {
        _tmp: tmp,
        binary,
        archive,
        marker,
    }
}

struct Cache(*mut KpackCache);
// SAFETY: the library's cache is thread-safe (its contract and tests).
unsafe impl Send for Cache {}
unsafe impl Sync for Cache {}

impl Cache {
    fn new() -> Cache {
        let mut c = std::ptr::null_mut();
        // SAFETY: valid out pointer.
        assert_eq!(
            unsafe { kpack_cache_create(&mut c) },
            kpack_error_t::KPACK_SUCCESS
        );
        Cache(c)
    }

    fn load(&self, t: &Tree, co: u32) -> Result<Vec<u8>, kpack_error_t> {
        let arch = CString::new(ARCH).unwrap();
        let archs = [arch.as_ptr()];
        let (mut p, mut n) = (std::ptr::null_mut::<c_void>(), 0usize);
        // SAFETY: every pointer is valid for the call.
        let rc = unsafe {
            kpack_load_code_object(
                self.0,
                t.marker.as_ptr().cast(),
                t.binary.as_ptr(),
                co,
                archs.as_ptr(),
                1,
                &mut p,
                &mut n,
            )
        };
        if rc != kpack_error_t::KPACK_SUCCESS {
            return Err(rc);
        }
        // SAFETY: the library returned `n` bytes at `p`, freed once here.
        let v = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec();
        unsafe { kpack_free_code_object(p) };
        Ok(v)
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        // SAFETY: created by kpack_cache_create, no call in progress.
        unsafe { kpack_cache_destroy(self.0) }
    }
}

fn schemes() -> [Compression; 2] {
    [Compression::None, Compression::Zstd { level: 3 }]
}

fn replace_by_rename(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// `cp new old`: truncate, then write, in place.
fn rewrite_in_place(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
}

/// Item 1 and 2 of issue 20: after replace-by-rename the cache keeps
/// serving the archive it opened, for both schemes (main returned the old
/// file's bytes at the new TOC's offsets for `none`, and the new file for
/// zstd); a fresh cache sees the new archive.
#[test]
fn replaced_by_rename_keeps_serving_the_opened_archive() {
    for comp in schemes() {
        let t = tree(comp);
        let c = Cache::new();
        assert_eq!(c.load(&t, 0).unwrap(), kernel_a(0), "{comp:?}");
        replace_by_rename(&t.archive, &archive_b(comp));
        for i in 0..4 {
            assert_eq!(c.load(&t, i).unwrap(), kernel_a(i), "{comp:?} #{i}");
        }
        assert_eq!(
            Cache::new().load(&t, 1).unwrap(),
            vec![b'C'; 1001],
            "{comp:?}"
        );
    }
}

/// Issue 22: a code object above `STREAM_THRESHOLD` written from a file
/// gets a streamed zstd frame past the window (multi-segment, 2 MiB window
/// at level 3); the runtime loads it and the neighbours unchanged.
#[test]
fn streamed_frame_past_the_window_loads() {
    let t = tree(Compression::None);
    let big: Vec<u8> = (0..9u64).flat_map(|i| pseudo_random(i, 4 << 20)).collect();
    assert!(big.len() as u64 > rocpack_kpack::STREAM_THRESHOLD);
    let src = t._tmp.path().join("big.bin");
    std::fs::write(&src, &big).unwrap();
    let f = std::fs::File::open(&src).unwrap();
    let mut w = rocpack_kpack::KpackFileWriter::create(&t.archive, Compression::zstd()).unwrap();
    let s = w.writer();
    s.group_name("x").arch_family("gfx110X").arches([ARCH]);
    s.add("lib/libhip.so#0", ARCH, &kernel_a(0)).unwrap();
    s.add_file_range("lib/libhip.so#1", ARCH, &f, 0, big.len() as u64, None)
        .unwrap();
    s.add("lib/libhip.so#2", ARCH, &kernel_a(2)).unwrap();
    w.finish().unwrap();
    let r = rocpack_kpack::KpackReader::open(&t.archive).unwrap();
    let frame = r.stored_bytes(1).unwrap();
    assert_eq!(
        frame[4] & 0x20,
        0,
        "multi-segment (window smaller than the content)"
    );
    let c = Cache::new();
    assert_eq!(c.load(&t, 0).unwrap(), kernel_a(0));
    assert!(c.load(&t, 1).unwrap() == big, "streamed frame");
    assert_eq!(c.load(&t, 2).unwrap(), kernel_a(2));
}

/// A deleted archive is still served by a cache that opened it (main: 13).
#[test]
fn deleted_archive_keeps_being_served() {
    for comp in schemes() {
        let t = tree(comp);
        let c = Cache::new();
        assert_eq!(c.load(&t, 0).unwrap(), kernel_a(0));
        std::fs::remove_file(&t.archive).unwrap();
        for i in 0..4 {
            assert_eq!(c.load(&t, i).unwrap(), kernel_a(i), "{comp:?} #{i}");
        }
        assert_eq!(
            Cache::new().load(&t, 0).unwrap_err(),
            kpack_error_t::KPACK_ERROR_ARCHIVE_NOT_FOUND
        );
    }
}

/// Item 10: truncated (and rewritten smaller) in place after the cache
/// opened it: IO_ERROR for every kernel, including frames never located
/// before; main died of SIGBUS reading the zstd frames from the mapping.
/// Rewritten in place with the same size: IO_ERROR too, never B's bytes.
#[test]
fn changed_in_place_is_io_error_never_sigbus_or_mixed_bytes() {
    for comp in schemes() {
        for same_size in [false, true] {
            let t = tree(comp);
            let c = Cache::new();
            assert_eq!(c.load(&t, 0).unwrap(), kernel_a(0));
            // Past the file system's timestamp granularity.
            std::thread::sleep(std::time::Duration::from_millis(30));
            let mut b = archive_b(comp);
            if same_size {
                let a = archive_a(comp);
                // B's bytes, padded to A's size in its zero blob gap is not
                // a valid archive; what matters is the bytes A's TOC reads.
                b.resize(a.len(), 0);
            }
            rewrite_in_place(&t.archive, &b);
            for i in 0..4 {
                assert_eq!(
                    c.load(&t, i).unwrap_err(),
                    kpack_error_t::KPACK_ERROR_IO_ERROR,
                    "{comp:?} same_size={same_size} #{i}"
                );
            }
        }
    }
}

/// The archive API (`kpack_open` + `kpack_get_kernel`) on a file truncated
/// after opening: an error, not a signal.
#[test]
fn open_archive_truncated_is_an_error() {
    for comp in schemes() {
        let t = tree(comp);
        let path = CString::new(t.archive.to_str().unwrap()).unwrap();
        let mut a: *mut KpackArchive = std::ptr::null_mut();
        // SAFETY: valid pointers.
        assert_eq!(
            unsafe { kpack_open(path.as_ptr(), &mut a) },
            kpack_error_t::KPACK_SUCCESS
        );
        std::fs::OpenOptions::new()
            .write(true)
            .open(&t.archive)
            .unwrap()
            .set_len(100)
            .unwrap();
        let key = CString::new("lib/libhip.so#3").unwrap();
        let arch = CString::new(ARCH).unwrap();
        let (mut p, mut n) = (std::ptr::null_mut::<c_void>(), 0usize);
        // SAFETY: valid pointers; `a` is open.
        let rc = unsafe { kpack_get_kernel(a, key.as_ptr(), arch.as_ptr(), &mut p, &mut n) };
        assert!(
            matches!(
                rc,
                kpack_error_t::KPACK_ERROR_IO_ERROR | kpack_error_t::KPACK_ERROR_INVALID_FORMAT
            ),
            "{comp:?}: {rc:?}"
        );
        unsafe { kpack_free_kernel(p) };
        unsafe { kpack_close(a) };
    }
}

/// Replace, delete and truncate in place while 4 threads load through one
/// cache: every result is counted; each is A's kernel (rename, delete) or,
/// once the file changed in place, A's kernel or IO_ERROR. Nothing else,
/// and the process survives.
#[test]
fn identity_holds_under_concurrent_load() {
    type Change = fn(&Path, Compression);
    let changes: [(&str, Change, bool); 3] = [
        ("rename", |p, c| replace_by_rename(p, &archive_b(c)), false),
        ("delete", |p, _| std::fs::remove_file(p).unwrap(), false),
        ("truncate", |p, c| rewrite_in_place(p, &archive_b(c)), true),
    ];
    for comp in schemes() {
        for (name, change, in_place) in changes {
            let t = Arc::new(tree(comp));
            let c = Arc::new(Cache::new());
            assert_eq!(c.load(&t, 0).unwrap(), kernel_a(0));
            let stop = Arc::new(AtomicBool::new(false));
            let workers: Vec<_> = (0..4u32)
                .map(|w| {
                    let (t, c, stop) = (Arc::clone(&t), Arc::clone(&c), Arc::clone(&stop));
                    std::thread::spawn(move || {
                        let (mut ok, mut io, mut n) = (0u32, 0u32, 0u32);
                        while !stop.load(Ordering::Relaxed) || n < 50 {
                            let i = (n + w) % 4;
                            match c.load(&t, i) {
                                Ok(v) => {
                                    assert!(v == kernel_a(i), "{name}: wrong bytes for #{i}");
                                    ok += 1;
                                }
                                Err(kpack_error_t::KPACK_ERROR_IO_ERROR) if in_place => io += 1,
                                Err(e) => panic!("{name}: #{i}: {e:?}"),
                            }
                            n += 1;
                        }
                        (ok, io)
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(40));
            change(&t.archive, comp);
            std::thread::sleep(std::time::Duration::from_millis(40));
            stop.store(true, Ordering::Relaxed);
            let (mut ok, mut io) = (0, 0);
            for h in workers {
                let (a, b) = h.join().expect("a loader thread failed");
                ok += a;
                io += b;
            }
            eprintln!("{comp:?} {name}: {ok} old kernels, {io} IO_ERROR");
            assert!(ok > 0);
            if in_place {
                assert!(io > 0, "{name}: no lookup saw the change");
                assert_eq!(
                    c.load(&t, 2).unwrap_err(),
                    kpack_error_t::KPACK_ERROR_IO_ERROR
                );
            } else {
                assert_eq!(c.load(&t, 2).unwrap(), kernel_a(2));
            }
        }
    }
}
