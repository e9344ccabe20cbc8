//! `librocm_kpack`: ROCm's kpack runtime C ABI, implemented over
//! `rocpack-kpack`.
//!
//! The fourteen `kpack_*` functions have the signatures, ownership rules and
//! error codes of ROCm's `rocm_kpack/kpack.h` (see `docs/runtime.md`). The
//! lookup itself is [`rocpack_kpack::Loader`], the same code `kpack verify`
//! uses, so what verify promises is what the runtime does.
//!
//! Differences by design: archives are memory-mapped; `none` kernels are
//! copied once, straight from the mapping into the caller's buffer; zstd
//! frames are decoded outside any lock, with a per-thread context; the
//! cache lock is held only while candidates are resolved. Every entry point
//! checks its pointers and catches panics, so no Rust panic crosses the C
//! boundary (a caught panic is reported as `KPACK_ERROR_OUT_OF_MEMORY`,
//! the only code the C++ library uses for "internal failure").

// The C ABI needs raw pointers; every `unsafe` block states why it is sound.
#![allow(unsafe_code)]
#![deny(missing_docs)]

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString, OsStr};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rocpack_kpack::{ErrorKind, KpackReader, LoadError, Loader, Marker, Scheme};

mod discover;
mod env;

pub use env::{flag_is_on, RuntimeEnv};

/// Largest marker (`hipk_metadata`) the loader reads, as ROCm's runtime.
pub const MAX_METADATA: usize = 64 << 10;

/// `kpack_error_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types, missing_docs)]
pub enum kpack_error_t {
    KPACK_SUCCESS = 0,
    KPACK_ERROR_INVALID_ARGUMENT = 1,
    KPACK_ERROR_FILE_NOT_FOUND = 2,
    KPACK_ERROR_INVALID_FORMAT = 3,
    KPACK_ERROR_UNSUPPORTED_VERSION = 4,
    KPACK_ERROR_KERNEL_NOT_FOUND = 5,
    KPACK_ERROR_DECOMPRESSION_FAILED = 6,
    KPACK_ERROR_OUT_OF_MEMORY = 7,
    KPACK_ERROR_NOT_IMPLEMENTED = 8,
    KPACK_ERROR_IO_ERROR = 9,
    KPACK_ERROR_MSGPACK_PARSE_FAILED = 10,
    KPACK_ERROR_PATH_DISCOVERY_FAILED = 11,
    KPACK_ERROR_INVALID_METADATA = 12,
    KPACK_ERROR_ARCHIVE_NOT_FOUND = 13,
    KPACK_ERROR_ARCH_NOT_FOUND = 14,
}
use kpack_error_t::*;

/// An open archive (`kpack_archive_t` is a pointer to it).
pub struct KpackArchive {
    reader: KpackReader,
    /// The same file, for `pread` of `none` kernels straight into the
    /// caller's buffer (no page-fault walk over the mapping).
    file: File,
    arches: Vec<CString>,
    binaries: Vec<CString>,
}

/// A lookup cache (`kpack_cache_t` is a pointer to it).
pub struct KpackCache {
    env: RuntimeEnv,
    /// Resolution (candidate archives, opened once per canonical path by
    /// the shared [`Loader`]); held only while the candidates are listed,
    /// never while a kernel is copied or decompressed.
    loader: Mutex<Loader>,
    /// File handles for `pread` of `none` kernels, by archive path.
    files: Mutex<HashMap<PathBuf, Arc<File>>>,
}

impl KpackCache {
    /// A `pread` handle for the archive `reader` was opened from.
    fn file(&self, reader: &KpackReader) -> Result<Arc<File>, kpack_error_t> {
        let path = reader.path().ok_or(KPACK_ERROR_IO_ERROR)?;
        let mut map = self.files.lock().map_err(|_| KPACK_ERROR_OUT_OF_MEMORY)?;
        if let Some(f) = map.get(path) {
            return Ok(Arc::clone(f));
        }
        let f = Arc::new(File::open(path).map_err(|_| KPACK_ERROR_IO_ERROR)?);
        map.insert(path.to_path_buf(), Arc::clone(&f));
        Ok(f)
    }
}

/// Map a reader error to the C++ library's code for the same failure.
fn open_error_code(kind: &ErrorKind) -> kpack_error_t {
    match kind {
        ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound => KPACK_ERROR_FILE_NOT_FOUND,
        ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
            KPACK_ERROR_OUT_OF_MEMORY
        }
        ErrorKind::Io(_) => KPACK_ERROR_IO_ERROR,
        ErrorKind::UnsupportedVersion(_) => KPACK_ERROR_UNSUPPORTED_VERSION,
        ErrorKind::BadMagic { .. }
        | ErrorKind::Truncated { .. }
        | ErrorKind::OutOfBounds { .. } => KPACK_ERROR_INVALID_FORMAT,
        ErrorKind::Zstd(_) => KPACK_ERROR_DECOMPRESSION_FAILED,
        _ => KPACK_ERROR_MSGPACK_PARSE_FAILED,
    }
}

/// Run `f`, turning a panic into an error code.
fn guard(f: impl FnOnce() -> kpack_error_t) -> kpack_error_t {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(KPACK_ERROR_OUT_OF_MEMORY)
}

/// Run `f` for its effect, swallowing a panic (for `void` functions).
fn guard_void(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// A path from a C string (bytes, not necessarily UTF-8).
///
/// # Safety
/// `p` is non-null and points to a NUL-terminated string.
unsafe fn c_path<'a>(p: *const c_char) -> &'a Path {
    Path::new(OsStr::from_bytes(CStr::from_ptr(p).to_bytes()))
}

fn cstrings<'a>(it: impl Iterator<Item = &'a str>) -> Vec<CString> {
    // TOC keys never hold NUL (the reader takes them from msgpack strings,
    // which could); a key with NUL cannot be asked for from C, so drop it.
    it.filter_map(|s| CString::new(s).ok()).collect()
}

impl KpackArchive {
    fn open(path: &Path) -> Result<KpackArchive, kpack_error_t> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(KPACK_ERROR_FILE_NOT_FOUND)
            }
            Err(_) => return Err(KPACK_ERROR_IO_ERROR),
            Ok(m) if !m.is_file() => return Err(KPACK_ERROR_IO_ERROR),
            Ok(m) if m.len() == 0 => return Err(KPACK_ERROR_IO_ERROR),
            Ok(_) => {}
        }
        let file = File::open(path).map_err(|_| KPACK_ERROR_IO_ERROR)?;
        let reader = KpackReader::open(path).map_err(|e| open_error_code(e.kind()))?;
        let arches = cstrings(reader.gfx_arches().iter().map(String::as_str));
        let mut keys: Vec<&str> = reader.binary_keys().collect();
        keys.sort_unstable();
        keys.dedup();
        let binaries = cstrings(keys.into_iter());
        Ok(KpackArchive {
            reader,
            file,
            arches,
            binaries,
        })
    }
}

/// The code object of `(key, target)` in a fresh `malloc` block: `none`
/// kernels are read with `pread` from `file` into it, zstd frames decoded
/// from the mapping into it. One copy, no intermediate buffer, no lock.
/// An archive with more zstd frames than the runtime limit
/// ([`rocpack_kpack::ZSTD_MAX_KERNELS`]) is refused.
fn fetch(
    reader: &KpackReader,
    file: &File,
    key: &str,
    target: &str,
) -> Result<(*mut c_void, usize), kpack_error_t> {
    use std::os::unix::fs::FileExt;
    let e = reader
        .entry(key, target)
        .ok_or(KPACK_ERROR_KERNEL_NOT_FOUND)?;
    let loc = reader
        .blob_location(e.ordinal)
        .ok_or(KPACK_ERROR_INVALID_FORMAT)?;
    let (len, scheme_none) = match reader.scheme() {
        Scheme::None => (loc.size, true),
        Scheme::ZstdPerKernel => {
            if reader.len() as u64 > rocpack_kpack::ZSTD_MAX_KERNELS {
                return Err(KPACK_ERROR_INVALID_FORMAT);
            }
            (e.original_size, false)
        }
    };
    let len = usize::try_from(len).map_err(|_| KPACK_ERROR_OUT_OF_MEMORY)?;
    let mut buf = MallocBuf::new(len).ok_or(KPACK_ERROR_OUT_OF_MEMORY)?;
    if scheme_none {
        file.read_exact_at(buf.as_mut_slice(), loc.offset)
            .map_err(|_| KPACK_ERROR_IO_ERROR)?;
    } else {
        let frame = reader
            .stored_bytes(e.ordinal)
            .ok_or(KPACK_ERROR_INVALID_FORMAT)?;
        match decompress_into(frame, buf.as_mut_slice()) {
            Some(n) if n == len => {}
            _ => return Err(KPACK_ERROR_DECOMPRESSION_FAILED),
        }
    }
    Ok((buf.into_raw(), len))
}

thread_local! {
    /// This thread's zstd decompression context, created on first use and
    /// reused by every later lookup on the thread (no lock, no sharing).
    static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decode one zstd frame into `out` with this thread's context; the
/// decoded length, or `None` when the frame does not decode into `out`.
fn decompress_into(frame: &[u8], out: &mut [u8]) -> Option<usize> {
    DCTX.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().ok()?);
        }
        let d = slot.as_mut()?;
        d.decompress_to_buffer(frame, out).ok()
    })
}

/// A `malloc` block that is freed unless handed out with `into_raw`.
struct MallocBuf {
    ptr: *mut u8,
    len: usize,
}

impl MallocBuf {
    fn new(len: usize) -> Option<MallocBuf> {
        // SAFETY: plain allocation (at least one byte: malloc(0) may be NULL).
        let ptr = unsafe { libc::malloc(len.max(1)) }.cast::<u8>();
        (!ptr.is_null()).then_some(MallocBuf { ptr, len })
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` owns `len` bytes (uninitialised bytes are only
        // written to before being read).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    fn into_raw(self) -> *mut c_void {
        let p = self.ptr.cast::<c_void>();
        std::mem::forget(self);
        p
    }
}

impl Drop for MallocBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by libc::malloc in `new`, not handed out.
        unsafe { libc::free(self.ptr.cast::<c_void>()) }
    }
}

/// One of an archive's name lists (architectures, binary names).
type NameList = fn(&KpackArchive) -> &[CString];

/// `*count` = the length of `list` of `archive` (the `kpack_get_*_count`
/// functions).
///
/// # Safety
/// `archive` is NULL or an open handle; `count` is NULL or writable.
unsafe fn list_count(
    archive: *const KpackArchive,
    count: *mut usize,
    list: NameList,
) -> kpack_error_t {
    guard(|| {
        if archive.is_null() || count.is_null() {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        *count = list(&*archive).len();
        KPACK_SUCCESS
    })
}

/// `*out` = entry `index` of `list` of `archive`, a string that lives
/// until `kpack_close` (the `kpack_get_architecture`/`_binary` functions).
///
/// # Safety
/// `archive` is NULL or an open handle; `out` is NULL or writable.
unsafe fn list_item(
    archive: *const KpackArchive,
    index: usize,
    out: *mut *const c_char,
    list: NameList,
) -> kpack_error_t {
    guard(|| {
        if archive.is_null() || out.is_null() {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        match list(&*archive).get(index) {
            Some(s) => {
                *out = s.as_ptr();
                KPACK_SUCCESS
            }
            None => KPACK_ERROR_INVALID_ARGUMENT,
        }
    })
}

/// Open the archive at `path`; on success `*archive` owns it (`kpack_close`).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `archive` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_open(
    path: *const c_char,
    archive: *mut *mut KpackArchive,
) -> kpack_error_t {
    guard(|| {
        if path.is_null() || archive.is_null() {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        match KpackArchive::open(c_path(path)) {
            Ok(a) => {
                *archive = Box::into_raw(Box::new(a));
                KPACK_SUCCESS
            }
            Err(code) => code,
        }
    })
}

/// Close an archive; NULL is a no-op.
///
/// # Safety
/// `archive` is NULL or a handle from `kpack_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn kpack_close(archive: *mut KpackArchive) {
    guard_void(|| {
        if !archive.is_null() {
            drop(Box::from_raw(archive));
        }
    })
}

/// Number of architectures the archive lists.
///
/// # Safety
/// `archive` is NULL or an open handle; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_architecture_count(
    archive: *const KpackArchive,
    count: *mut usize,
) -> kpack_error_t {
    list_count(archive, count, |a| &a.arches)
}

/// Architecture `index`; the string lives until `kpack_close`.
///
/// # Safety
/// `archive` is NULL or an open handle; `arch` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_architecture(
    archive: *const KpackArchive,
    index: usize,
    arch: *mut *const c_char,
) -> kpack_error_t {
    list_item(archive, index, arch, |a| &a.arches)
}

/// Number of distinct binary names in the TOC.
///
/// # Safety
/// `archive` is NULL or an open handle; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_binary_count(
    archive: *const KpackArchive,
    count: *mut usize,
) -> kpack_error_t {
    list_count(archive, count, |a| &a.binaries)
}

/// Binary name `index` (sorted order); the string lives until `kpack_close`.
///
/// # Safety
/// `archive` is NULL or an open handle; `binary` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_binary(
    archive: *const KpackArchive,
    index: usize,
    binary: *mut *const c_char,
) -> kpack_error_t {
    list_item(archive, index, binary, |a| &a.binaries)
}

/// The code object of (`binary_name`, `arch`): a `malloc` copy the caller
/// frees with `kpack_free_kernel`; it stays valid after other calls.
///
/// # Safety
/// Pointers are NULL or valid: `archive` open, strings NUL-terminated, outputs writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_get_kernel(
    archive: *const KpackArchive,
    binary_name: *const c_char,
    arch: *const c_char,
    kernel_data: *mut *mut c_void,
    kernel_size: *mut usize,
) -> kpack_error_t {
    guard(|| {
        if archive.is_null()
            || binary_name.is_null()
            || arch.is_null()
            || kernel_data.is_null()
            || kernel_size.is_null()
        {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        let (Ok(key), Ok(arch)) = (
            CStr::from_ptr(binary_name).to_str(),
            CStr::from_ptr(arch).to_str(),
        ) else {
            return KPACK_ERROR_KERNEL_NOT_FOUND;
        };
        let a = &*archive;
        match fetch(&a.reader, &a.file, key, arch) {
            Ok((p, n)) => {
                *kernel_data = p;
                *kernel_size = n;
                KPACK_SUCCESS
            }
            Err(code) => code,
        }
    })
}

/// Free a kernel returned by `kpack_get_kernel`; NULL is a no-op.
///
/// # Safety
/// `kernel_data` is NULL or a pointer from `kpack_get_kernel`, freed once.
#[no_mangle]
pub unsafe extern "C" fn kpack_free_kernel(kernel_data: *mut c_void) {
    // SAFETY: allocated by `MallocBuf` (libc malloc) and handed out once.
    guard_void(|| libc::free(kernel_data))
}

/// Create a lookup cache; reads the `ROCM_KPACK_*` environment once.
///
/// # Safety
/// `cache` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_cache_create(cache: *mut *mut KpackCache) -> kpack_error_t {
    guard(|| {
        if cache.is_null() {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        let env = RuntimeEnv::from_process();
        let loader = Loader::new(env.loader_env());
        *cache = Box::into_raw(Box::new(KpackCache {
            env,
            loader: Mutex::new(loader),
            files: Mutex::new(HashMap::new()),
        }));
        KPACK_SUCCESS
    })
}

/// Destroy a cache and close its archives; NULL is a no-op.
///
/// # Safety
/// `cache` is NULL or a handle from `kpack_cache_create` not yet destroyed,
/// with no call using it in progress.
#[no_mangle]
pub unsafe extern "C" fn kpack_cache_destroy(cache: *mut KpackCache) {
    guard_void(|| {
        if !cache.is_null() {
            drop(Box::from_raw(cache));
        }
    })
}

/// Find the file mapped at `address_in_binary` (`/proc/self/maps`); writes
/// its path (NUL-terminated) and the address's offset in that file.
///
/// # Safety
/// `path_out` is NULL or has `path_out_size` writable bytes; `offset_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_discover_binary_path(
    address_in_binary: *const c_void,
    path_out: *mut c_char,
    path_out_size: usize,
    offset_out: *mut usize,
) -> kpack_error_t {
    guard(|| {
        if address_in_binary.is_null() || path_out.is_null() || path_out_size == 0 {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        let Some((path, offset)) = discover::mapped_file(address_in_binary as usize) else {
            return KPACK_ERROR_PATH_DISCOVERY_FAILED;
        };
        let bytes = path.as_os_str().as_bytes();
        if bytes.len() >= path_out_size {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), path_out.cast::<u8>(), bytes.len());
        *path_out.add(bytes.len()) = 0;
        if !offset_out.is_null() {
            *offset_out = offset;
        }
        KPACK_SUCCESS
    })
}

/// A reader over raw marker memory that never reads past what the msgpack
/// decoder asks for, bounded by [`MAX_METADATA`].
struct RawMarker {
    base: *const u8,
    pos: usize,
}

impl std::io::Read for RawMarker {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(MAX_METADATA - self.pos);
        if n == 0 && !buf.is_empty() {
            return Err(std::io::Error::other("marker exceeds 64 KiB"));
        }
        // SAFETY: the caller promises a well-formed msgpack object at `base`;
        // the decoder asks only for the bytes that object's encoding says it
        // holds (exact reads), so this stays inside it.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(self.pos), buf.as_mut_ptr(), n) };
        self.pos += n;
        Ok(n)
    }
}

/// Deepest msgpack nesting the metadata reader accepts.
const MAX_DEPTH: usize = 32;

/// Decode the marker map at `p` (its length is the first msgpack object's).
///
/// # Safety
/// `p` points to a msgpack object (the HIPK wrapper's metadata pointer).
unsafe fn decode_marker(p: *const u8) -> Option<Marker> {
    let mut r = RawMarker { base: p, pos: 0 };
    rmpv::decode::read_value_with_max_depth(&mut r, MAX_DEPTH).ok()?;
    Marker::decode(std::slice::from_raw_parts(p, r.pos)).ok()
}

/// The marker `kpack_load_code_object` would decode from `bytes` (the first
/// msgpack object, at most [`MAX_METADATA`] bytes; what follows is ignored).
/// The safe twin of the raw-pointer path, for tests and fuzzing.
pub fn parse_metadata(bytes: &[u8]) -> Option<Marker> {
    let mut cur = std::io::Cursor::new(&bytes[..bytes.len().min(MAX_METADATA)]);
    rmpv::decode::read_value_with_max_depth(&mut cur, MAX_DEPTH).ok()?;
    let end = usize::try_from(cur.position()).ok()?;
    Marker::decode(&bytes[..end]).ok()
}

fn load_error_code(e: &LoadError) -> kpack_error_t {
    match e.code() {
        1 => KPACK_ERROR_INVALID_ARGUMENT,
        5 => KPACK_ERROR_KERNEL_NOT_FOUND,
        12 => KPACK_ERROR_INVALID_METADATA,
        13 => KPACK_ERROR_ARCHIVE_NOT_FOUND,
        14 => KPACK_ERROR_ARCH_NOT_FOUND,
        _ => KPACK_ERROR_DECOMPRESSION_FAILED,
    }
}

/// Resolve wrapper `co_index` of the binary at `binary_path` (marker bytes at
/// `hipk_metadata`) for the first of `arch_list` some archive can serve.
/// The code object is a `malloc` copy freed with `kpack_free_code_object`.
///
/// # Safety
/// `cache` is a live cache; `hipk_metadata` points to a marker; strings are
/// NUL-terminated; `arch_list` has `arch_count` string pointers; outputs writable.
#[no_mangle]
pub unsafe extern "C" fn kpack_load_code_object(
    cache: *mut KpackCache,
    hipk_metadata: *const c_void,
    binary_path: *const c_char,
    co_index: u32,
    arch_list: *const *const c_char,
    arch_count: usize,
    code_object_out: *mut *mut c_void,
    code_object_size_out: *mut usize,
) -> kpack_error_t {
    guard(|| {
        if cache.is_null()
            || hipk_metadata.is_null()
            || binary_path.is_null()
            || arch_list.is_null()
            || arch_count == 0
            || code_object_out.is_null()
            || code_object_size_out.is_null()
        {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        let cache = &*cache;
        if cache.env.disable {
            return KPACK_ERROR_NOT_IMPLEMENTED;
        }
        let mut archs = Vec::with_capacity(arch_count.min(64));
        for i in 0..arch_count {
            let a = *arch_list.add(i);
            if a.is_null() {
                return KPACK_ERROR_INVALID_ARGUMENT;
            }
            match CStr::from_ptr(a).to_str() {
                Ok(s) => archs.push(s),
                Err(_) => return KPACK_ERROR_INVALID_ARGUMENT,
            }
        }
        let Some(marker) = decode_marker(hipk_metadata.cast::<u8>()) else {
            return KPACK_ERROR_INVALID_METADATA;
        };
        let binary = c_path(binary_path);
        let dir = binary
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let lookup = match cache.loader.lock() {
            Ok(mut l) => l.lookup(&marker, &dir, u64::from(co_index), &archs),
            Err(_) => return KPACK_ERROR_OUT_OF_MEMORY,
        };
        let lookup = match lookup {
            Ok(l) => l,
            Err(e) => {
                if cache.env.debug {
                    eprintln!("kpack: {}#{co_index}: {e}", marker.kernel_name);
                }
                return load_error_code(&e);
            }
        };
        // Fall-through (rocpack_kpack::fall_through, shared with `kpack
        // verify`): every (archive, target) candidate in order; any
        // per-archive failure moves on, the last one is returned.
        let got = rocpack_kpack::fall_through(&lookup.candidates, |c| {
            let got = cache
                .file(&c.reader)
                .and_then(|f| fetch(&c.reader, &f, &lookup.key, &c.target));
            if let (Err(code), true) = (&got, cache.env.debug) {
                eprintln!(
                    "kpack: {}: {} [{}]: {code:?}, trying the next archive",
                    lookup.key,
                    c.archive.display(),
                    c.target
                );
            }
            got
        });
        match got {
            Ok((c, (p, n))) => {
                if cache.env.debug {
                    eprintln!(
                        "kpack: {} -> {} [{}] ({n} bytes)",
                        lookup.key,
                        c.archive.display(),
                        c.target
                    );
                }
                *code_object_out = p;
                *code_object_size_out = n;
                KPACK_SUCCESS
            }
            Err(Some((_, code))) => code,
            Err(None) => KPACK_ERROR_ARCH_NOT_FOUND,
        }
    })
}

/// Free a code object from `kpack_load_code_object`; NULL is a no-op.
///
/// # Safety
/// `code_object` is NULL or a pointer from `kpack_load_code_object`, freed once.
#[no_mangle]
pub unsafe extern "C" fn kpack_free_code_object(code_object: *mut c_void) {
    // SAFETY: allocated by `MallocBuf` (libc malloc) and handed out once.
    guard_void(|| libc::free(code_object))
}

/// Call `callback(arch, user_data)` for each architecture of the archive at
/// `archive_path` until it returns false.
///
/// # Safety
/// `archive_path` is NULL or NUL-terminated; `callback` is NULL or a valid function.
#[no_mangle]
pub unsafe extern "C" fn kpack_enumerate_architectures(
    archive_path: *const c_char,
    callback: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> bool>,
    user_data: *mut c_void,
) -> kpack_error_t {
    guard(|| {
        let Some(cb) = callback else {
            return KPACK_ERROR_INVALID_ARGUMENT;
        };
        if archive_path.is_null() {
            return KPACK_ERROR_INVALID_ARGUMENT;
        }
        match KpackArchive::open(c_path(archive_path)) {
            Ok(a) => {
                for arch in &a.arches {
                    if !cb(arch.as_ptr(), user_data) {
                        break;
                    }
                }
                KPACK_SUCCESS
            }
            Err(code) => code,
        }
    })
}
