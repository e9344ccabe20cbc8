#![no_main]
//! librocm_kpack on arbitrary bytes, through the C ABI:
//! - metadata path: the input as `hipk_metadata` (the raw-pointer reader,
//!   bounded to 64 KiB and to the first msgpack object) agrees with the safe
//!   `parse_metadata`: what that rejects, `kpack_load_code_object` reports as
//!   `KPACK_ERROR_INVALID_METADATA`;
//! - TOC path: the input as an archive, opened with `kpack_open` (every
//!   getter and kernel fetch must keep its promises) and found by a valid
//!   marker through a cache (`kpack_load_code_object`).
//! Never a panic, never a read out of bounds, never an unbounded allocation.

use std::ffi::{c_char, c_void, CString};

use rocm_kpack::*;

const OK: kpack_error_t = kpack_error_t::KPACK_SUCCESS;

/// `{"kpack_search_paths": [".kpack/f_@GFXARCH@.kpack"], "kernel_name": "x"}`
fn marker() -> Vec<u8> {
    let mut m = vec![0x82, 0xb2];
    m.extend_from_slice(b"kpack_search_paths");
    m.extend_from_slice(&[0x91, 0xb8]);
    m.extend_from_slice(b".kpack/f_@GFXARCH@.kpack");
    m.push(0xab);
    m.extend_from_slice(b"kernel_name");
    m.extend_from_slice(&[0xa1, b'x']);
    m
}

/// One directory for the whole run (`<dir>/.kpack/`): making and removing a
/// temporary tree per input cost more than the input itself.
fn dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(".kpack")).unwrap();
        d
    })
    .path()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = dir();
    let archive = dir.join(".kpack/f_gfx942.kpack");
    std::fs::write(&archive, data).unwrap();
    let bin = CString::new(dir.join("lib.so").as_os_str().as_encoded_bytes()).unwrap();
    let path = CString::new(archive.as_os_str().as_encoded_bytes()).unwrap();
    let arch = CString::new("gfx942:sramecc+:xnack-").unwrap();
    let archs = [arch.as_ptr()];
    // The marker lives in mapped memory in a real process; here the input is
    // followed by 64 KiB of zeros so a read up to the limit stays in bounds.
    let mut padded = data.to_vec();
    padded.resize(data.len() + MAX_METADATA, 0);
    let co_index = u32::from(data.first().copied().unwrap_or(0) & 3);

    // SAFETY: valid pointers throughout; every handle is released.
    unsafe {
        let mut cache: *mut KpackCache = std::ptr::null_mut();
        assert_eq!(kpack_cache_create(&mut cache), OK);
        let (mut co, mut size): (*mut c_void, usize) = (std::ptr::null_mut(), 0);
        let e = kpack_load_code_object(
            cache,
            padded.as_ptr().cast(),
            bin.as_ptr(),
            co_index,
            archs.as_ptr(),
            1,
            &mut co,
            &mut size,
        );
        if parse_metadata(&padded).is_none() {
            assert_eq!(e, kpack_error_t::KPACK_ERROR_INVALID_METADATA);
        }
        if e == OK {
            kpack_free_code_object(co);
        }
        // A valid marker finding the input as gfx942's archive.
        let m = marker();
        let e = kpack_load_code_object(
            cache,
            m.as_ptr().cast(),
            bin.as_ptr(),
            co_index,
            archs.as_ptr(),
            1,
            &mut co,
            &mut size,
        );
        assert_ne!(e, kpack_error_t::KPACK_ERROR_INVALID_METADATA);
        if e == OK {
            kpack_free_code_object(co);
        }
        kpack_cache_destroy(cache);

        let mut a: *mut KpackArchive = std::ptr::null_mut();
        if kpack_open(path.as_ptr(), &mut a) != OK {
            return;
        }
        let (mut na, mut nb) = (0usize, 0usize);
        assert_eq!(kpack_get_architecture_count(a, &mut na), OK);
        assert_eq!(kpack_get_binary_count(a, &mut nb), OK);
        let mut out: *const c_char = std::ptr::null();
        assert_ne!(kpack_get_architecture(a, na, &mut out), OK);
        assert_ne!(kpack_get_binary(a, nb, &mut out), OK);
        for i in 0..na.min(8) {
            let mut arch: *const c_char = std::ptr::null();
            assert_eq!(kpack_get_architecture(a, i, &mut arch), OK);
            for j in 0..nb.min(8) {
                let mut bin: *const c_char = std::ptr::null();
                assert_eq!(kpack_get_binary(a, j, &mut bin), OK);
                let mut k = std::ptr::null_mut();
                let mut ks = 0usize;
                if kpack_get_kernel(a, bin, arch, &mut k, &mut ks) == OK {
                    kpack_free_kernel(k);
                }
            }
        }
        kpack_close(a);
    }
});
