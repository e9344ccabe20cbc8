//! "Open touches only the header and the TOC; a lookup touches only its own
//! kernel's bytes", observed through the page cache: the archive is written
//! to a disk file system, evicted (`posix_fadvise(DONTNEED)`), then opened
//! and read through the C ABI while `mincore` on a separate mapping reports
//! which pages the library made the kernel read. Kernels are 32 MiB apart so
//! that readahead (up to 8 MiB on this machine's disk) cannot blur the
//! picture. The zstd case uses incompressible kernels, so its frames are
//! 32 MiB apart too.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use rocm_kpack::{
    kpack_close, kpack_error_t, kpack_free_kernel, kpack_get_kernel, kpack_open, KpackArchive,
};
use rocpack_kpack::{Compression, KpackReader, KpackWriter};

const MIB: usize = 1 << 20;
const KSIZE: usize = 32 * MIB;

/// Resident flag of every page of `path` (via a private read-only mapping).
fn resident(path: &Path) -> Vec<bool> {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let page = 4096usize;
    let n = len.div_ceil(page);
    let mut v = vec![0u8; n];
    // SAFETY: a fresh read-only mapping of `len` bytes, unmapped below;
    // mincore only inspects the page cache and does not fault pages in.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(libc::mincore(p, len, v.as_mut_ptr()), 0);
        libc::munmap(p, len);
    }
    v.into_iter().map(|b| b & 1 == 1).collect()
}

fn evict(path: &Path) -> bool {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    rc == 0 && resident(path).iter().filter(|r| **r).count() <= 2
}

/// Kernel `i` of the archive: constant bytes, or (for zstd, so that the
/// frames stay 32 MiB apart) incompressible xorshift noise.
fn kernel(i: u8, noise: bool) -> Vec<u8> {
    if !noise {
        return vec![i + 1; KSIZE];
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(i);
    let mut v = Vec::with_capacity(KSIZE);
    while v.len() < KSIZE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(KSIZE);
    v
}

fn write_archive(path: &Path, compression: Compression, noise: bool) {
    let mut w = KpackWriter::new(compression);
    w.group_name("lazy")
        .arch_family("gfx942")
        .arches(["gfx942"]);
    for i in 0..3u8 {
        w.add(&format!("k{i}#0"), "gfx942", kernel(i, noise))
            .unwrap();
    }
    let f = std::fs::File::create(path).unwrap();
    w.write_to(std::io::BufWriter::new(f)).unwrap();
}

fn touch_only_their_bytes(compression: Compression, noise: bool) {
    // A disk file system (target/tmp), not tmpfs: eviction must be possible.
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("lazy.kpack");
    write_archive(&path, compression, noise);
    // Where each kernel's stored bytes are, from our reader (the ABI does
    // not expose it); for zstd each frame must stay well over 2 × readahead.
    let r = KpackReader::open(&path).unwrap();
    let at: Vec<(usize, usize)> = (0..3)
        .map(|i| {
            let e = r.entry(&format!("k{i}#0"), "gfx942").unwrap();
            let l = r.blob_location(e.ordinal).unwrap();
            assert!(
                l.size as usize >= KSIZE - MIB,
                "frame {i} is {} bytes",
                l.size
            );
            (l.offset as usize, l.size as usize)
        })
        .collect();
    let toc = r.toc_offset() as usize;
    drop(r);
    if !evict(&path) {
        eprintln!(
            "SKIPPED: this file system keeps {} in the page cache",
            path.display()
        );
        return;
    }
    let mid = |i: usize| (at[i].0 + at[i].1 / 2) / 4096;
    let c = CString::new(path.to_str().unwrap()).unwrap();
    let mut a: *mut KpackArchive = std::ptr::null_mut();
    // SAFETY: valid pointers; the archive is closed below.
    unsafe {
        assert_eq!(kpack_open(c.as_ptr(), &mut a), kpack_error_t::KPACK_SUCCESS);
    }
    let after_open = resident(&path);
    assert!(after_open[0], "the header was not read");
    assert!(after_open[toc / 4096], "the TOC was not read");
    for i in 0..3 {
        assert!(!after_open[mid(i)], "open read kernel {i}'s bytes");
    }
    let key = CString::new("k1#0").unwrap();
    let arch = CString::new("gfx942").unwrap();
    let mut k = std::ptr::null_mut();
    let mut ks = 0usize;
    let want = kernel(1, noise);
    // SAFETY: as above; the kernel is freed with kpack_free_kernel.
    unsafe {
        assert_eq!(
            kpack_get_kernel(a, key.as_ptr(), arch.as_ptr(), &mut k, &mut ks),
            kpack_error_t::KPACK_SUCCESS
        );
        assert_eq!(ks, KSIZE);
        assert!(std::slice::from_raw_parts(k.cast::<u8>(), ks) == want.as_slice());
        kpack_free_kernel(k);
        kpack_close(a);
    }
    let after = resident(&path);
    assert!(after[mid(1)], "the looked-up kernel was not read");
    assert!(!after[mid(0)], "the lookup of k1 read k0");
    assert!(!after[mid(2)], "the lookup of k1 read k2");
}

#[test]
fn open_and_lookup_touch_only_their_bytes() {
    touch_only_their_bytes(Compression::None, false);
}

/// zstd: open reads no frame (the frame index is built on lookup), and a
/// lookup reads its own frame plus the 4-byte size prefixes before it.
#[test]
fn zstd_open_and_lookup_touch_only_their_bytes() {
    touch_only_their_bytes(Compression::Zstd { level: 1 }, true);
}

/// A damaged zstd frame is found at lookup time, as cleanly as at open
/// before: open succeeds, the intact kernel is served, the damaged one is
/// `INVALID_FORMAT` (structure) and the eager readers refuse the archive.
#[test]
fn damaged_zstd_frame_fails_its_lookup_only() {
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("dmg").arch_family("gfx942").arches(["gfx942"]);
    for i in 0..3u8 {
        w.add(&format!("k{i}#0"), "gfx942", vec![i + 1; 4096])
            .unwrap();
    }
    let (cur, _) = w.write_to(std::io::Cursor::new(Vec::new())).unwrap();
    let good = cur.into_inner();
    let r = KpackReader::from_bytes(&good).unwrap();
    let e = r.entry("k2#0", "gfx942").unwrap().clone();
    let loc = r.blob_location(e.ordinal).unwrap();
    drop(r);
    let dir = rocpack_testsupport::tempdir();
    let f0 = loc.offset as usize;
    let cases = [
        // The size prefix of k2's frame points past the zstd blob.
        (
            "prefix",
            f0 - 4,
            u32::MAX.to_le_bytes().to_vec(),
            "zstd frame",
            kpack_error_t::KPACK_ERROR_INVALID_FORMAT,
        ),
        // k2's frame is no longer a zstd frame: ROCm's decode failure.
        (
            "magic",
            f0,
            vec![!good[f0]],
            "not one valid zstd frame",
            kpack_error_t::KPACK_ERROR_DECOMPRESSION_FAILED,
        ),
    ];
    for (name, at, patch, msg, code) in cases {
        let mut d = good.clone();
        d[at..at + patch.len()].copy_from_slice(&patch);
        let err = KpackReader::from_bytes(&d).unwrap_err();
        assert!(err.to_string().contains(msg), "{name}: {err}");
        let path = dir.path().join(format!("{name}.kpack"));
        std::fs::write(&path, &d).unwrap();
        let r = KpackReader::open(&path).unwrap();
        let err = r.checked_location(e.ordinal).unwrap_err();
        assert!(err.to_string().contains(msg), "{name}: {err}");
        assert!(r.get("k2#0", "gfx942").is_err(), "{name}");
        assert!(r.check_frames().is_err(), "{name}");
        // k0's frame precedes the damage: it is served.
        assert_eq!(&*r.get("k0#0", "gfx942").unwrap(), &[1u8; 4096][..]);
        drop(r);
        let c = CString::new(path.to_str().unwrap()).unwrap();
        let mut a: *mut KpackArchive = std::ptr::null_mut();
        let arch = CString::new("gfx942").unwrap();
        // SAFETY: valid pointers; kernels freed, archive closed.
        unsafe {
            assert_eq!(kpack_open(c.as_ptr(), &mut a), kpack_error_t::KPACK_SUCCESS);
            for (k, want) in [
                ("k0#0", kpack_error_t::KPACK_SUCCESS),
                ("k2#0", code),
                ("k2#0", code),
            ] {
                let key = CString::new(k).unwrap();
                let mut p = std::ptr::null_mut();
                let mut n = 0usize;
                let rc = kpack_get_kernel(a, key.as_ptr(), arch.as_ptr(), &mut p, &mut n);
                assert_eq!(rc, want, "{name}: {k}");
                if rc == kpack_error_t::KPACK_SUCCESS {
                    kpack_free_kernel(p);
                }
            }
            kpack_close(a);
        }
    }
}

/// Frames located and checked lazily by many threads at once on one shared
/// reader (each thread walks the kernels in its own order, so the size
/// prefix walks race): every kernel decodes to what was written.
#[test]
fn lazy_zstd_index_is_shared_across_threads() {
    const N: usize = 64;
    let body = |i: usize| -> Vec<u8> { (0..1000 + i * 37).map(|j| (j * (i + 3)) as u8).collect() };
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.group_name("mt").arch_family("gfx942").arches(["gfx942"]);
    for i in 0..N {
        w.add(&format!("k{i}#0"), "gfx942", body(i)).unwrap();
    }
    let dir = rocpack_testsupport::tempdir();
    let path = dir.path().join("mt.kpack");
    let f = std::fs::File::create(&path).unwrap();
    w.write_to(std::io::BufWriter::new(f)).unwrap();
    for _round in 0..4 {
        let r = std::sync::Arc::new(KpackReader::open(&path).unwrap());
        let hs: Vec<_> = (0..8usize)
            .map(|t| {
                let r = std::sync::Arc::clone(&r);
                std::thread::spawn(move || {
                    for n in 0..N {
                        // Thread t starts at a different kernel, half go backwards.
                        let i = if t % 2 == 0 {
                            (n + t * 8) % N
                        } else {
                            N - 1 - (n + t * 8) % N
                        };
                        let got = r.get(&format!("k{i}#0"), "gfx942").unwrap();
                        assert!(*got == *body(i), "kernel {i} in thread {t}");
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        r.check_frames().unwrap();
    }
}
