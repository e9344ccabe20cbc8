//! "Open touches only the header and the TOC; a lookup touches only its own
//! kernel's bytes", observed through the page cache: the archive is written
//! to a disk file system, evicted (`posix_fadvise(DONTNEED)`), then opened
//! and read through the C ABI while `mincore` on a separate mapping reports
//! which pages the library made the kernel read. Kernels are 32 MiB apart so
//! that readahead (up to 8 MiB on this machine's disk) cannot blur the
//! picture.

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

#[test]
fn open_and_lookup_touch_only_their_bytes() {
    // A disk file system (target/tmp), not tmpfs: eviction must be possible.
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("lazy.kpack");
    let mut w = KpackWriter::new(Compression::None);
    w.group_name("lazy")
        .arch_family("gfx942")
        .arches(["gfx942"]);
    for i in 0..3u8 {
        w.add(&format!("k{i}#0"), "gfx942", vec![i + 1; KSIZE])
            .unwrap();
    }
    let f = std::fs::File::create(&path).unwrap();
    w.write_to(std::io::BufWriter::new(f)).unwrap();
    // Where each kernel is, from our reader (the ABI does not expose it).
    let r = KpackReader::open(&path).unwrap();
    let at: Vec<usize> = (0..3)
        .map(|i| {
            let e = r.entry(&format!("k{i}#0"), "gfx942").unwrap();
            r.blob_location(e.ordinal).unwrap().offset as usize
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
    let mid = |i: usize| (at[i] + KSIZE / 2) / 4096;
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
    // SAFETY: as above; the kernel is freed with kpack_free_kernel.
    unsafe {
        assert_eq!(
            kpack_get_kernel(a, key.as_ptr(), arch.as_ptr(), &mut k, &mut ks),
            kpack_error_t::KPACK_SUCCESS
        );
        assert_eq!(ks, KSIZE);
        assert_eq!(*k.cast::<u8>().add(KSIZE - 1), 2);
        kpack_free_kernel(k);
        kpack_close(a);
    }
    let after = resident(&path);
    assert!(after[mid(1)], "the looked-up kernel was not read");
    assert!(!after[mid(0)], "the lookup of k1 read k0");
    assert!(!after[mid(2)], "the lookup of k1 read k2");
}
