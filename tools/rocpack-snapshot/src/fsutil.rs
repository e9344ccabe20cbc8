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

/// Write `bytes` to `path` atomically: temp file in the same directory, fsync, rename, fsync dir.
pub fn atomic_write(path: &Path, bytes: &[u8], label: &str) -> Result<()> {
    let dir = parent_of(path);
    create_dir_all_durable(&dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    step(&format!("write {label} (temp)"));
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        });
    if let Err(e) = written {
        // ENOSPC and friends leave no temp file behind.
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(&tmp, e));
    }
    step(&format!("rename {label}"));
    fs::rename(&tmp, path).map_err(io_at(path))?;
    fsync_dir(&dir)
}

/// Copy `src` to `dst` (which must not be visible half-written: callers use staging
/// names) and fsync it.
pub fn copy_durable(src: &Path, dst: &Path) -> Result<()> {
    // Regular files only, opened without blocking (a FIFO swapped in is refused).
    let mut from = crate::hash::open_regular(src)?;
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

/// Read a whole regular file of at most `limit` bytes.
///
/// Snapshot trees are repository content, so a pull request controls them:
/// a symlink to `/dev/zero` must not be read forever and a FIFO must not
/// hang. The file is opened non-blocking, checked with `fstat` on the open
/// descriptor (no race with a rename), and read through `take(limit + 1)`.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io_at(path))?;
    let meta = f.metadata().map_err(io_at(path))?;
    if !meta.is_file() {
        return Err(Error::input(
            path,
            None,
            format!("not a regular file ({})", file_kind(&meta)),
        ));
    }
    if meta.len() > limit {
        return Err(Error::input(
            path,
            None,
            format!("file is {} bytes; expected at most {limit}", meta.len()),
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io_at(path))?;
    if bytes.len() as u64 > limit {
        return Err(Error::input(
            path,
            None,
            format!("file grew past {limit} bytes while being read"),
        ));
    }
    Ok(bytes)
}

/// What kind of non-regular file `meta` describes, for messages.
pub fn file_kind(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

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
