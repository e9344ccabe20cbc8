//! Durable file operations (temp file + fsync + rename) and the fault-injection hook.

use crate::error::{io_at, Error, Result};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Environment variable: abort the process (exit code [`FAULT_EXIT_CODE`]) when the
/// N-th durable step (write, rename, remove, upload) is about to run. Test hook.
pub const FAULT_ENV: &str = "SNAPCTL_FAIL_AT";
/// Environment variable: print every durable step to stderr as `snapctl-step N LABEL`.
pub const TRACE_ENV: &str = "SNAPCTL_TRACE_STEPS";
/// Exit code of a process stopped by [`FAULT_ENV`].
pub const FAULT_EXIT_CODE: i32 = 86;

static STEP: AtomicUsize = AtomicUsize::new(0);

fn fail_at() -> Option<usize> {
    static FAIL: OnceLock<Option<usize>> = OnceLock::new();
    *FAIL.get_or_init(|| std::env::var(FAULT_ENV).ok().and_then(|v| v.parse().ok()))
}

fn trace() -> Option<std::time::Instant> {
    static TRACE: OnceLock<Option<std::time::Instant>> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os(TRACE_ENV).map(|_| std::time::Instant::now()))
}

/// Marks one durable step. Under [`FAULT_ENV`]=N the process exits abruptly
/// (no destructors, no cleanup) right before the N-th step, simulating a crash.
pub fn step(label: &str) {
    let n = STEP.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(t0) = trace() {
        eprintln!(
            "snapctl-step {n} {label} [+{} ms]",
            t0.elapsed().as_millis()
        );
    }
    if fail_at() == Some(n) {
        eprintln!("snapctl: {FAULT_ENV}={n}: simulated crash before step `{label}`");
        std::process::exit(FAULT_EXIT_CODE);
    }
}

/// fsync a directory so that renames/creations inside it are durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let d = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(d).and_then(|f| f.sync_all()).map_err(io_at(d))
}

/// Parent directory of `path` ("." when it has none).
pub fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Create `dir` and its missing parents, fsyncing each parent whose entry list changed.
pub fn create_dir_all_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = parent_of(dir);
    if dir.parent().is_some() {
        create_dir_all_durable(&parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => fsync_dir(&parent),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(Error::io(dir, e)),
    }
}

/// This host's name, as it appears in temporary file names ("host" when
/// it has none usable).
fn host_name() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for its whole length; gethostname writes
        // at most that many bytes.
        #[allow(unsafe_code)]
        let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let h = String::from_utf8_lossy(buf.get(..end).unwrap_or_default()).into_owned();
        if r != 0 || h.is_empty() || h.contains(['/', '\0']) {
            "host".to_string()
        } else {
            h
        }
    })
}

/// `.NAME.tmp-` for `path` named `NAME`.
fn temp_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".{name}.tmp-")
}

/// A new temporary file beside `path`, named
/// `.NAME.tmp-<pid>-<host>-<random>` (see [`sweep_stale_temps`]); removed
/// when dropped unless persisted.
pub fn temp_beside(path: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = parent_of(path);
    tempfile::Builder::new()
        .prefix(&format!(
            "{}{}-{}-",
            temp_prefix(path),
            std::process::id(),
            host_name()
        ))
        .rand_bytes(6)
        .tempfile_in(&dir)
        .map_err(io_at(&dir))
}

/// Removes the temporary files beside `path` that a killed process left
/// (a `kill -9` runs no cleanup): `.NAME.tmp-<pid>-<host>-<random>` of this
/// host and `.NAME.tmp-<pid>` of older snapctl versions, whose process is
/// gone. Another host's files (a root shared over NFS) and those of live
/// processes are left alone. Returns how many were removed.
pub fn sweep_stale_temps(path: &Path) -> usize {
    let dir = parent_of(path);
    let prefix = temp_prefix(path);
    let host = format!("-{}-", host_name());
    if !Path::new("/proc/self").exists() {
        return 0;
    }
    let Ok(rd) = fs::read_dir(&dir) else { return 0 };
    let mut n = 0;
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (pid, tail) = rest.split_at(digits);
        let ours = tail.is_empty() || tail.starts_with(&host);
        if pid.is_empty() || !ours || Path::new("/proc").join(pid).exists() {
            continue;
        }
        if ent.file_type().is_ok_and(|t| t.is_file()) && fs::remove_file(ent.path()).is_ok() {
            n += 1;
        }
    }
    n
}

/// Write `bytes` to `path` atomically: temp file in the same directory, fsync, rename, fsync dir.
///
/// The temp file is removed on every error; one a killed process left
/// behind is removed by the next write of the same file.
pub fn atomic_write(path: &Path, bytes: &[u8], label: &str) -> Result<()> {
    let dir = parent_of(path);
    create_dir_all_durable(&dir)?;
    sweep_stale_temps(path);
    step(&format!("write {label} (temp)"));
    let mut tmp = temp_beside(path)?;
    let written = tmp.write_all(bytes).and_then(|()| tmp.as_file().sync_all());
    if let Err(e) = written {
        // ENOSPC and friends leave no temp file behind (dropped: removed).
        return Err(Error::io(tmp.path(), e));
    }
    step(&format!("rename {label}"));
    tmp.persist(path).map_err(|e| Error::io(path, e.error))?;
    fsync_dir(&dir)
}

/// Copy `src` to `dst` (which must not be visible half-written: callers use staging
/// names) and fsync it.
pub fn copy_durable(src: &Path, dst: &Path) -> Result<()> {
    // Regular files only, opened without blocking (a FIFO swapped in is refused).
    let mut from = open_regular(src)?;
    let mut to = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(dst)
        .map_err(io_at(dst))?;
    std::io::copy(&mut from, &mut to).map_err(io_at(dst))?;
    to.sync_all().map_err(io_at(dst))
}

/// Write `bytes` to a new file `dst` and fsync it (no rename; for staging areas).
pub fn write_durable(dst: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = File::create(dst).map_err(io_at(dst))?;
    f.write_all(bytes).map_err(io_at(dst))?;
    f.sync_all().map_err(io_at(dst))
}

/// An error of `rocpack_bundle::fsutil` about `path`: what the file is
/// (not regular, too large) is the input's fault, the rest is I/O.
fn input_or_io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| match e.kind() {
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
            Error::input(path, None, e.to_string())
        }
        _ => io_at(path)(e),
    }
}

/// Opens `path` for reading without blocking on a FIFO and refuses anything
/// but a regular file (`rocpack_bundle::fsutil::open_regular_with`, with
/// `extra` open flags such as `libc::O_NOFOLLOW`).
pub fn open_regular_with(path: &Path, extra: libc::c_int) -> Result<File> {
    rocpack_bundle::fsutil::open_regular_with(path, extra)
        .map(|(f, _)| f)
        .map_err(input_or_io(path))
}

/// [`open_regular_with`] without extra flags.
pub fn open_regular(path: &Path) -> Result<File> {
    open_regular_with(path, 0)
}

/// Read a whole regular file of at most `limit` bytes
/// (`rocpack_bundle::fsutil::read_bounded`).
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    rocpack_bundle::fsutil::read_bounded(path, limit).map_err(input_or_io(path))
}

pub use rocpack_bundle::fsutil::file_kind;

/// Read a whole text file of at most `limit` bytes (see [`read_bounded`]).
pub fn read_text_bounded(path: &Path, limit: u64) -> Result<String> {
    let bytes = read_bounded(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        Error::input(
            path,
            None,
            format!(
                "byte offset {}: not valid UTF-8",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}
