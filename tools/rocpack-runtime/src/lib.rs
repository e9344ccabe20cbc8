//! `librocm_kpack`: ROCm's kpack runtime C ABI, implemented over
//! `rocpack-kpack`.
//!
//! The fourteen `kpack_*` functions have the signatures, ownership rules and
//! error codes of ROCm's `rocm_kpack/kpack.h` (see `docs/runtime.md`). The
//! lookup itself is [`rocpack_kpack::Loader`], the same code `kpack verify`
//! uses, so what verify promises is what the runtime does.
//!
//! Differences by design: archives are never mapped (header and TOC are
//! read at open, kernels with one `pread` each, so a file truncated under
//! us is an error, never `SIGBUS`); `none` kernels are read straight into
//! the caller's buffer; zstd frames are decoded outside any lock, with a
//! per-thread context; the cache lock is held only while candidates are
//! resolved. Every entry point
//! checks its pointers and catches panics, so no Rust panic crosses the C
//! boundary (a caught panic is reported as `KPACK_ERROR_OUT_OF_MEMORY`,
//! the only code the C++ library uses for "internal failure").

// The C ABI needs raw pointers; every `unsafe` block states why it is sound.
#![allow(unsafe_code)]
#![deny(missing_docs)]

use std::ffi::{c_char, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
    /// Holds the file open; reads it with `pread` (never mapped).
    reader: KpackReader,
    arches: Vec<CString>,
    binaries: Vec<CString>,
}

/// A lookup cache (`kpack_cache_t` is a pointer to it).
pub struct KpackCache {
    env: RuntimeEnv,
    /// Resolution (candidate archives, opened once and then served for the
    /// cache's life by the shared [`Loader`]; see docs/runtime.md, "Cache
    /// identity"); held only while the candidates are listed, never while
    /// a kernel is read or decompressed.
    loader: Mutex<Loader>,
}

/// Map an error of `kpack_open` to the C++ library's code for the same
/// failure (shared/kpack/runtime/src/archive.cpp and toc_parser.cpp):
/// header problems and `toc_offset` past the end are `INVALID_FORMAT`, a
/// TOC that does not decode (truncated, wrong types, unknown keys) is
/// `MSGPACK_PARSE_FAILED`, a zstd blob that is not in the file is
/// `IO_ERROR` (ROCm reads it whole at open), a bad frame count
/// `INVALID_FORMAT`.
fn open_error_code(kind: &ErrorKind) -> kpack_error_t {
    match kind {
        ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound => KPACK_ERROR_FILE_NOT_FOUND,
        ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
            KPACK_ERROR_OUT_OF_MEMORY
        }
        ErrorKind::Io(_) => KPACK_ERROR_IO_ERROR,
        ErrorKind::UnsupportedVersion(_) => KPACK_ERROR_UNSUPPORTED_VERSION,
        ErrorKind::BadMagic { .. } => KPACK_ERROR_INVALID_FORMAT,
        ErrorKind::Truncated {
            what: "KPAK header" | "version" | "toc_offset" | "zstd frame count",
            ..
        } => KPACK_ERROR_INVALID_FORMAT,
        ErrorKind::Truncated { .. } => KPACK_ERROR_MSGPACK_PARSE_FAILED,
        ErrorKind::OutOfBounds { field, .. } if field == "zstd_offset" => KPACK_ERROR_IO_ERROR,
        ErrorKind::OutOfBounds { .. } => KPACK_ERROR_INVALID_FORMAT,
        ErrorKind::Invalid { field, .. } if field == "zstd blob frame count" => {
            KPACK_ERROR_INVALID_FORMAT
        }
        ErrorKind::Zstd(_) => KPACK_ERROR_DECOMPRESSION_FAILED,
        _ => KPACK_ERROR_MSGPACK_PARSE_FAILED,
    }
}

/// Map an error of reading one kernel to ROCm's code: a file that became
/// shorter or changed is `IO_ERROR`; a frame that is not the zstd frame
/// its TOC entry describes (does not parse, wrong length or content size,
/// checksum) is `DECOMPRESSION_FAILED`, as ROCm's decode failure; size
/// prefixes out of the blob are `INVALID_FORMAT` (ROCm's open-time check).
fn read_error_code(kind: &ErrorKind) -> kpack_error_t {
    match kind {
        ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
            KPACK_ERROR_OUT_OF_MEMORY
        }
        ErrorKind::Io(_) => KPACK_ERROR_IO_ERROR,
        ErrorKind::Zstd(_) | ErrorKind::Mismatch { .. } | ErrorKind::Invalid { .. } => {
            KPACK_ERROR_DECOMPRESSION_FAILED
        }
        _ => KPACK_ERROR_INVALID_FORMAT,
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
            // ROCm opens a directory and fails reading its header.
            Ok(m) if m.is_dir() => return Err(KPACK_ERROR_INVALID_FORMAT),
            Ok(m) if !m.is_file() => return Err(KPACK_ERROR_IO_ERROR),
            Ok(m) if m.len() == 0 => return Err(KPACK_ERROR_IO_ERROR),
            Ok(_) => {}
        }
        let reader = KpackReader::open_file(path).map_err(|e| open_error_code(e.kind()))?;
        let arches = cstrings(reader.gfx_arches().iter().map(String::as_str));
        let mut keys: Vec<&str> = reader.binary_keys().collect();
        keys.sort_unstable();
        keys.dedup();
        let binaries = cstrings(keys.into_iter());
        Ok(KpackArchive {
            reader,
            arches,
            binaries,
        })
    }
}

/// The code object of `(key, target)` in a fresh `malloc` block: a `none`
/// kernel is read with one `pread` into it; a zstd frame is read with one
/// `pread` into this thread's scratch buffer and decoded into it. Then one
/// `fstat` checks that the file is still the one opened (else
/// `IO_ERROR`: bytes of a file rewritten in place are never returned).
/// No lock, no mapping. An archive with more zstd frames than the runtime
/// limit ([`rocpack_kpack::ZSTD_MAX_KERNELS`]) is refused.
fn fetch(
    reader: &KpackReader,
    key: &str,
    target: &str,
) -> Result<(*mut c_void, usize), kpack_error_t> {
    let e = reader
        .entry(key, target)
        .ok_or(KPACK_ERROR_KERNEL_NOT_FOUND)?;
    // A read that failed on a file changed in place is IO_ERROR whatever
    // the bytes it saw looked like.
    let code = |e: rocpack_kpack::Error| {
        if reader.check_unchanged().is_err() {
            KPACK_ERROR_IO_ERROR
        } else {
            read_error_code(e.kind())
        }
    };
    let out = match reader.scheme() {
        Scheme::None => {
            let loc = reader.checked_location(e.ordinal).map_err(code)?;
            let len = usize::try_from(loc.size).map_err(|_| KPACK_ERROR_OUT_OF_MEMORY)?;
            let mut buf = MallocBuf::new(len).ok_or(KPACK_ERROR_OUT_OF_MEMORY)?;
            reader
                .read_exact_at(loc.offset, buf.as_mut_slice())
                .map_err(code)?;
            reader.check_unchanged().map_err(|_| KPACK_ERROR_IO_ERROR)?;
            (buf, len)
        }
        Scheme::ZstdPerKernel => {
            if reader.len() as u64 > rocpack_kpack::ZSTD_MAX_KERNELS {
                return Err(KPACK_ERROR_INVALID_FORMAT);
            }
            let len = usize::try_from(e.original_size).map_err(|_| KPACK_ERROR_OUT_OF_MEMORY)?;
            let buf = SCRATCH.with(|cell| {
                let mut frame = cell
                    .try_borrow_mut()
                    .map_err(|_| KPACK_ERROR_OUT_OF_MEMORY)?;
                // The frame is read and checked against the entry (content
                // size, ratio) before anything is allocated for its output.
                reader
                    .read_frame_into(e.ordinal, &mut frame)
                    .map_err(code)?;
                reader.check_unchanged().map_err(|_| KPACK_ERROR_IO_ERROR)?;
                let got = decode_frame(&frame, len);
                if frame.capacity() > SCRATCH_KEEP {
                    *frame = Vec::new();
                }
                got
            })?;
            (buf, len)
        }
    };
    Ok((out.0.into_raw(), out.1))
}

/// Largest scratch buffer a thread keeps between lookups.
const SCRATCH_KEEP: usize = 1 << 20;

thread_local! {
    /// This thread's zstd decompression context, created on first use and
    /// reused by every later lookup on the thread (no lock, no sharing).
    static DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    /// This thread's buffer for the compressed frame being decoded.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The code object of one checked zstd frame that must decode to `len`
/// bytes, in a `malloc` block of exactly `len` bytes. No allocation is
/// larger than what the frame holds: a frame that declares its content size
/// (the reader checked it equals `len`) is decoded straight into the
/// block; one that does not is decoded by streaming, its output growing
/// with what the frame really yields and stopping one byte past `len`.
fn decode_frame(frame: &[u8], len: usize) -> Result<MallocBuf, kpack_error_t> {
    let declared = zstd::zstd_safe::get_frame_content_size(frame)
        .map_err(|_| KPACK_ERROR_DECOMPRESSION_FAILED)?;
    let mut buf;
    match declared {
        Some(n) if n == len as u64 => {
            buf = MallocBuf::new(len).ok_or(KPACK_ERROR_OUT_OF_MEMORY)?;
            if decompress_into(frame, buf.as_mut_slice()) != Some(len) {
                return Err(KPACK_ERROR_DECOMPRESSION_FAILED);
            }
        }
        Some(_) => return Err(KPACK_ERROR_DECOMPRESSION_FAILED),
        None => {
            let mut out = Vec::new();
            let decoder = zstd::stream::read::Decoder::with_buffer(frame)
                .map_err(|_| KPACK_ERROR_OUT_OF_MEMORY)?
                .single_frame();
            std::io::Read::read_to_end(&mut std::io::Read::take(decoder, len as u64 + 1), &mut out)
                .map_err(|_| KPACK_ERROR_DECOMPRESSION_FAILED)?;
            if out.len() != len {
                return Err(KPACK_ERROR_DECOMPRESSION_FAILED);
            }
            buf = MallocBuf::new(len).ok_or(KPACK_ERROR_OUT_OF_MEMORY)?;
            buf.as_mut_slice().copy_from_slice(&out);
        }
    }
    Ok(buf)
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
        match fetch(&a.reader, key, arch) {
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
/// decoder asks for, bounded by [`MAX_METADATA`] and by the memory mapped
/// there: the page holding the marker's first byte is read directly; bytes
/// past it (a header that claims more than follows, at the end of a
/// mapping) are copied with `process_vm_readv` on this process, which
/// fails instead of faulting, so a lying marker is `INVALID_METADATA`,
/// never `SIGSEGV`/`SIGBUS`. Markers are a few hundred bytes: the common
/// lookup makes no system call here.
struct RawMarker {
    base: *const u8,
    pos: usize,
    /// Bytes from `base` known to be readable (the rest of its page, then
    /// whatever a checked copy proved).
    safe: usize,
}

/// The system page size (at least 4096).
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| {
        usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(4096)
    })
}

impl RawMarker {
    fn new(base: *const u8) -> RawMarker {
        let page = page_size();
        let safe = page - (base as usize % page);
        RawMarker { base, pos: 0, safe }
    }
}

/// Copy `out.len()` bytes at `addr` of this process without faulting:
/// `process_vm_readv`, or where that is not permitted, only when
/// `/proc/self/maps` shows them readable. False when they are not all there.
fn checked_copy(addr: usize, out: &mut [u8]) -> bool {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast::<c_void>(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` is our writable buffer of iov_len bytes; the kernel
    // validates `remote` and returns an error instead of faulting.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n >= 0 {
        return usize::try_from(n).is_ok_and(|n| n == out.len());
    }
    let err = std::io::Error::last_os_error().raw_os_error();
    if !matches!(err, Some(libc::ENOSYS | libc::EPERM)) {
        return false;
    }
    if discover::readable_len(addr, out.len()) < out.len() {
        return false;
    }
    // SAFETY: the bytes lie in readable mappings (checked just above).
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
    true
}

impl std::io::Read for RawMarker {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(MAX_METADATA - self.pos);
        if n == 0 && !buf.is_empty() {
            return Err(std::io::Error::other("marker exceeds 64 KiB"));
        }
        let out = &mut buf[..n];
        if self.pos + n <= self.safe {
            // SAFETY: [base, base + safe) is readable: the rest of the page
            // holding the marker's first byte (the caller's pointer), or
            // bytes a checked copy already read.
            unsafe { std::ptr::copy_nonoverlapping(self.base.add(self.pos), out.as_mut_ptr(), n) };
        } else {
            let addr = (self.base as usize).wrapping_add(self.pos);
            if !checked_copy(addr, out) {
                return Err(std::io::Error::other("the marker runs past mapped memory"));
            }
            self.safe = self.safe.max(self.pos + n);
        }
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
    let mut r = RawMarker::new(p);
    rmpv::decode::read_value_with_max_depth(&mut r, MAX_DEPTH).ok()?;
    // Every byte of [p, p + pos) was read above, so it is readable.
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
        // NULL entries are skipped, as ROCm does (loader.cpp: `if
        // (!arch_list[i]) continue;` in expansion and search).
        let mut archs = Vec::with_capacity(arch_count.min(64));
        for i in 0..arch_count {
            let a = *arch_list.add(i);
            if a.is_null() {
                continue;
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
        match find_code_object(cache, &marker, &dir, co_index, &archs) {
            Ok((p, n)) => {
                *code_object_out = p;
                *code_object_size_out = n;
                KPACK_SUCCESS
            }
            Err(code) => code,
        }
    })
}

/// Steps 3–6 of the lookup (docs/runtime.md): the candidates under the
/// cache lock, then the fetches outside it, falling through (the shared
/// `rocpack_kpack::fall_through`). A walk that stopped early at the archive
/// holding the key is completed when that archive's kernel does not read.
fn find_code_object(
    cache: &KpackCache,
    marker: &Marker,
    dir: &Path,
    co_index: u32,
    archs: &[&str],
) -> Result<(*mut c_void, usize), kpack_error_t> {
    let name = &marker.kernel_name;
    let mut all = false;
    loop {
        let lookup = {
            let mut l = cache.loader.lock().map_err(|_| KPACK_ERROR_OUT_OF_MEMORY)?;
            let co = u64::from(co_index);
            if all {
                l.lookup_all(marker, dir, co, archs)
            } else {
                l.lookup(marker, dir, co, archs)
            }
        };
        let lookup = lookup.map_err(|e| {
            if cache.env.debug {
                eprintln!("kpack: {name}#{co_index}: {e}");
            }
            load_error_code(&e)
        })?;
        let got = rocpack_kpack::fall_through(&lookup.candidates, |c| {
            let got = fetch(&c.reader, &lookup.key, &c.target);
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
                return Ok((p, n));
            }
            Err(_) if !lookup.complete => all = true,
            Err(Some((_, code))) => return Err(code),
            Err(None) => return Err(KPACK_ERROR_ARCH_NOT_FOUND),
        }
    }
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
