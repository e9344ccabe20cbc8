#![no_main]
//! librocm_kpack: the metadata reader (first msgpack object, bounded) and the
//! archive functions of the C ABI on arbitrary files never panic, never read
//! out of bounds, and agree with each other.

use std::ffi::{c_char, CString};
use std::io::Write;

use rocm_kpack::*;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = parse_metadata(data);

    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(data).unwrap();
    let path = CString::new(f.path().as_os_str().as_encoded_bytes()).unwrap();
    let mut a: *mut KpackArchive = std::ptr::null_mut();
    // SAFETY: valid pointers; the handle is closed below.
    unsafe {
        if kpack_open(path.as_ptr(), &mut a) != kpack_error_t::KPACK_SUCCESS {
            return;
        }
        let (mut na, mut nb) = (0usize, 0usize);
        assert_eq!(kpack_get_architecture_count(a, &mut na), kpack_error_t::KPACK_SUCCESS);
        assert_eq!(kpack_get_binary_count(a, &mut nb), kpack_error_t::KPACK_SUCCESS);
        for i in 0..na.min(8) {
            let mut arch: *const c_char = std::ptr::null();
            assert_eq!(kpack_get_architecture(a, i, &mut arch), kpack_error_t::KPACK_SUCCESS);
            for j in 0..nb.min(8) {
                let mut bin: *const c_char = std::ptr::null();
                assert_eq!(kpack_get_binary(a, j, &mut bin), kpack_error_t::KPACK_SUCCESS);
                let mut k = std::ptr::null_mut();
                let mut ks = 0usize;
                if kpack_get_kernel(a, bin, arch, &mut k, &mut ks) == kpack_error_t::KPACK_SUCCESS {
                    kpack_free_kernel(k);
                }
            }
        }
        kpack_close(a);
    }
});
