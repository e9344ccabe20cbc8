//! Helpers shared by rocpack's integration tests: where the fixtures are
//! (`$ROCPACK_SHARED`), running a CLI, temporary and copied trees, file
//! hashes. A dev-dependency only; it depends on no rocpack crate, so any of
//! them can use it without an import cycle.
//!
//! Helpers panic with a message on failure: they are for tests.

#![allow(clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

// ---------------------------------------------------------------- fixtures

/// The repository root (this crate lives in `tools/rocpack-testsupport`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `$ROCPACK_SHARED`; else `target/rocpack-shared` when the fixtures were
/// built there (`tests/ci/lib.sh` builds them from `tests/fixtures`); else
/// `../shared` beside the checkout.
pub fn shared() -> PathBuf {
    if let Some(p) = std::env::var_os("ROCPACK_SHARED") {
        return PathBuf::from(p);
    }
    let built = repo_root().join("target/rocpack-shared");
    if built.join("fixtures").is_dir() {
        built
    } else {
        repo_root().join("../shared")
    }
}

/// `$ROCPACK_SHARED_DIR`, else `../shared` beside the checkout: the
/// reference material (ROCm's own runtime and tests under `oracles/`,
/// `tools/`) that CI lays beside the clone.
pub fn shared_dir() -> PathBuf {
    std::env::var_os("ROCPACK_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared"))
}

/// The directory of the running test executable (`target/<profile>/deps`):
/// `cargo test` builds every crate type of the library under test there
/// (it uplifts them to `target/<profile>` only on `cargo build`).
pub fn test_exe_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test executable");
    exe.parent()
        .expect("test executable's directory")
        .to_path_buf()
}

/// `<shared>/fixtures`.
pub fn fixtures() -> PathBuf {
    shared().join("fixtures")
}

/// `<shared>/fixtures/artifacts` (the TheRock artifact shards).
pub fn artifacts() -> PathBuf {
    fixtures().join("artifacts")
}

/// `<shared>/fixtures/fatbins` (fat binaries, archives, raw bundles).
pub fn fatbins() -> PathBuf {
    fixtures().join("fatbins")
}

/// `<shared>/fixtures/kpack-golden/<name>`.
pub fn golden(name: &str) -> PathBuf {
    fixtures().join("kpack-golden").join(name)
}

/// Directory of the Windows (PE/COFF) fixtures, `fatbins-win/` and
/// `expected-unbundle-win.tsv`: `$ROCPACK_WIN_FIXTURES`, else
/// `target/rocpack-win/fixtures`, built there by
/// `tests/fixtures/make-winfatbins.sh` when missing (about 5 s; `tests/ci/lib.sh`
/// builds them in CI). Panics when they cannot be built (clang-19, lld-19 and
/// gcc-mingw-w64-x86-64 are needed).
pub fn win_fixtures() -> PathBuf {
    if let Some(p) = std::env::var_os("ROCPACK_WIN_FIXTURES") {
        return PathBuf::from(p);
    }
    let dest = repo_root().join("target/rocpack-win/fixtures");
    if dest.join("expected-unbundle-win.tsv").is_file() {
        return dest;
    }
    let parent = dest.parent().expect("parent").to_path_buf();
    std::fs::create_dir_all(&parent).expect("create target/rocpack-win");
    // Build beside and rename: concurrent test binaries never see half a tree.
    let tmp = tempfile::tempdir_in(&parent).expect("temp dir");
    let out = Command::new("bash")
        .arg(repo_root().join("tests/fixtures/make-winfatbins.sh"))
        .arg(tmp.path())
        .arg(fixtures().join("src"))
        .output()
        .expect("run make-winfatbins.sh");
    assert!(
        out.status.success(),
        "building the Windows fixtures failed (apt-get install clang-19 lld-19 gcc-mingw-w64-x86-64):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = tmp.keep();
    if std::fs::rename(&built, &dest).is_err() {
        // Another test built them first.
        let _ = std::fs::remove_dir_all(&built);
    }
    assert!(dest.join("expected-unbundle-win.tsv").is_file());
    dest
}

/// `<win_fixtures>/fatbins-win/<name>`.
pub fn win_fatbin(name: &str) -> PathBuf {
    win_fixtures().join("fatbins-win").join(name)
}

/// Panics with a hint when the fixtures are not there.
pub fn require_fixtures() {
    assert!(
        artifacts().is_dir() && fatbins().is_dir(),
        "fixtures not found at {} (set ROCPACK_SHARED; tests/ci/lib.sh builds them)",
        fixtures().display()
    );
}

/// Whether the fixtures exist; in CI (env `CI` set) their absence is a failure.
pub fn have_fixtures() -> bool {
    if fatbins().is_dir() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("fixtures missing at {}", fixtures().display());
    }
    eprintln!(
        "note: fixtures not found at {}, skipping",
        fixtures().display()
    );
    false
}

/// Whether `tool --version` runs; in CI a missing tool is a failure, else
/// the caller skips.
pub fn have_tool(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .output()
        .map(|o| o.status.success() || !o.stdout.is_empty() || !o.stderr.is_empty())
        .unwrap_or(false);
    if !ok {
        if std::env::var_os("CI").is_some() {
            panic!("required tool `{tool}` is missing (CI is set)");
        }
        eprintln!("note: `{tool}` not found, skipping");
    }
    ok
}

/// Messages of `eu-elflint --gnu-ld FILE` (stdout and stderr, one per line,
/// "No errors" dropped). elflint exits non-zero when it has something to say,
/// so only its text is used.
pub fn elflint_messages(file: &Path) -> std::collections::BTreeSet<String> {
    let o = Command::new("eu-elflint")
        .arg("--gnu-ld")
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("eu-elflint {}: {e}", file.display()));
    let name = file.to_string_lossy();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&o.stderr).lines())
        .filter(|l| !l.contains("No errors") && !l.trim().is_empty())
        // elflint may prefix a message with the file name; compare messages.
        .map(|l| l.replace(name.as_ref(), "FILE"))
        .collect()
}

/// Panics unless `eu-elflint --gnu-ld` says nothing about `rewritten` that it
/// does not already say about `original` (lld outputs carry a few complaints
/// of their own). Every rewritten ELF in the tests goes through this.
pub fn assert_no_new_elflint_messages(original: &Path, rewritten: &Path) {
    let before = elflint_messages(original);
    let after = elflint_messages(rewritten);
    let new: Vec<_> = after.difference(&before).collect();
    assert!(
        new.is_empty(),
        "{}: new eu-elflint --gnu-ld messages vs {}: {new:?}",
        rewritten.display(),
        original.display()
    );
}

// --------------------------------------------------------------------- CLI

/// Runs `bin` with `args`, capturing its output.
pub fn run<S: AsRef<OsStr>>(bin: impl AsRef<OsStr>, args: &[S]) -> Output {
    let bin = bin.as_ref();
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.to_string_lossy()))
}

/// A command for `bin` that runs under an address-space ceiling of
/// `vmem_kib` KiB (`ulimit -v` in a `sh` that then `exec`s it), so a test
/// can assert a memory bound without timing anything.
pub fn under_vmem_limit(bin: impl AsRef<OsStr>, vmem_kib: u64) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -v {vmem_kib}; exec \"$0\" \"$@\""))
        .arg(bin.as_ref());
    c
}

/// Runs `cmd` capturing its output; panics (naming `what`) when it is still
/// running after `limit`: for inputs that must be refused at once, such as a
/// FIFO that would hang a reader.
pub fn output_within(mut cmd: Command, limit: std::time::Duration, what: &str) -> Output {
    use std::process::Stdio;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} hangs (still running after {limit:?})");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Runs `sh -c cmd` in `dir`; panics with its stderr unless it succeeds.
pub fn sh(dir: &Path, cmd: &str) -> Output {
    let o = Command::new("sh")
        .current_dir(dir)
        .args(["-c", cmd])
        .output()
        .unwrap_or_else(|e| panic!("sh -c {cmd}: {e}"));
    assert!(o.status.success(), "{cmd}: {}", stderr(&o));
    o
}

// --------------------------------------------------------------------- git

/// Runs `git args` in `dir` isolated from the user's and the system's git
/// configuration (`HOME` is `dir`); panics unless it succeeds. Returns its
/// stdout without the trailing newline.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
    assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
    stdout(&o).trim_end().to_string()
}

/// A new git repository at `dir` (created), on branch `main`, with a test
/// author, so commits work on a machine without any git configuration.
pub fn git_init(dir: &Path) {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.email", "t@example.com"]);
    git(dir, &["config", "user.name", "T"]);
}

/// `git add -A` and a commit with `message`; returns the new commit's id.
pub fn git_commit_all(dir: &Path, message: &str) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", message]);
    git(dir, &["rev-parse", "HEAD"])
}

/// Lowercase hex SHA-256 of the git object `blob` (read with `git cat-file`).
pub fn git_blob_sha256(repo: &Path, blob: &str) -> String {
    let o = Command::new("git")
        .current_dir(repo)
        .args(["cat-file", "blob", blob])
        .output()
        .unwrap_or_else(|e| panic!("git cat-file {blob}: {e}"));
    assert!(o.status.success(), "git cat-file {blob}: {}", stderr(&o));
    sha256_hex(&o.stdout)
}

/// A path as `&str` (test paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// Standard output, lossily decoded.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error, lossily decoded.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Panics with the exit code, stdout and stderr unless the run succeeded.
pub fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "command failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    );
}

/// Asserts the run exited with `code`; returns its stderr.
pub fn assert_exit(o: &Output, code: i32) -> String {
    assert_eq!(
        o.status.code(),
        Some(code),
        "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
    stderr(o)
}

// ------------------------------------------------------------------ hashes

/// Lowercase hex SHA-256 of `b`.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// Lowercase hex SHA-256 of a file's content (read in pieces: files of
/// any size).
pub fn sha256_file(p: &Path) -> String {
    use sha2::Digest;
    let mut f = fs::File::open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    hex::encode(h.finalize())
}

/// Writes `mib` MiB to `path` that compress like code (zstd level 1..3
/// keeps about half) with no repeat within zstd's default windows: a
/// 4 MiB [`pseudo_random`] block repeated, each MiB stamped with its index.
/// Cheap (one 4 MiB block generated), for tests of large inputs.
pub fn write_large_code_like(path: &Path, mib: u64) {
    use std::io::Write;
    let block = pseudo_random(22, 4 << 20);
    let mut f = std::io::BufWriter::with_capacity(
        1 << 20,
        fs::File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display())),
    );
    for i in 0..mib {
        let at = ((i % 4) << 20) as usize;
        f.write_all(&i.to_le_bytes()).unwrap();
        f.write_all(&block[at + 8..at + (1 << 20)]).unwrap();
    }
    f.flush().unwrap();
}

/// Whether `needle` (non-empty) occurs in `hay`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Small deterministic pseudo-random bytes (xorshift), compressible but
/// not trivially, for synthetic code objects.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 7 == 0 {
                (x & 0xff) as u8
            } else {
                b"ELF.text.data"[(x % 13) as usize]
            }
        })
        .collect()
}

// ------------------------------------------------------------------- trees

/// A fresh temporary directory (removed when dropped).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temporary directory")
}

/// Writes `data` to `p`, creating its parent directories.
pub fn write(p: &Path, data: &[u8]) {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
    }
    fs::write(p, data).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
}

/// Makes a FIFO at `p` (with `mkfifo`), for inputs that would hang a reader.
pub fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", p.display()))
        .success();
    assert!(ok, "mkfifo {} failed", p.display());
}

/// Inverts the bits of the byte at `at` (clamped to the last byte) of file
/// `p`, writing a NEW file: split outputs may be hard links to the shared
/// fixtures, so an existing inode is never written through.
pub fn flip_byte(p: &Path, at: usize) {
    let mut d = fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    let i = at.min(d.len().saturating_sub(1));
    d[i] ^= 0xff;
    fs::remove_file(p).unwrap();
    fs::write(p, d).unwrap();
}

/// Recursively copies a tree in sorted order, recreating symlinks as they
/// are; copied files are made writable by their owner.
pub fn copy_tree(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    let mut names: Vec<_> = fs::read_dir(src)
        .unwrap_or_else(|e| panic!("read {}: {e}", src.display()))
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for n in names {
        let (a, b) = (src.join(&n), dst.join(&n));
        let m = fs::symlink_metadata(&a).unwrap();
        if m.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&a).unwrap(), &b).unwrap();
        } else if m.is_dir() {
            copy_tree(&a, &b);
        } else {
            fs::copy(&a, &b).unwrap();
            let mode = fs::metadata(&b).unwrap().permissions().mode();
            fs::set_permissions(&b, fs::Permissions::from_mode(mode | 0o200)).unwrap();
        }
    }
}

/// One path of a [`snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A regular file: permission bits and content hash.
    File {
        /// `mode & 0o777`.
        mode: u32,
        /// SHA-256 of the content.
        sha: String,
    },
    /// A symlink and its target.
    Link(PathBuf),
}

/// Every path below `root` (relative, `/`-separated) with its kind, mode
/// and content hash: two trees are byte-identical iff their snapshots are.
pub fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    fn go(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_string();
            let m = fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                out.insert(rel, Node::Link(fs::read_link(&p).unwrap()));
            } else if m.is_dir() {
                out.insert(rel, Node::Dir);
                go(root, &p, out);
            } else {
                out.insert(
                    rel,
                    Node::File {
                        mode: m.permissions().mode() & 0o777,
                        sha: sha256_file(&p),
                    },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    go(root, root, &mut out);
    out
}

/// The names of the entries of directory `dir` (not recursive), sorted.
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .into_string()
                .expect("UTF-8 file name")
        })
        .collect();
    names.sort();
    names
}

/// Files and symlinks below `root` (relative paths, sorted).
pub fn list_files(root: &Path) -> Vec<String> {
    snapshot(root)
        .into_iter()
        .filter(|(_, n)| !matches!(n, Node::Dir))
        .map(|(k, _)| k)
        .collect()
}

/// A private copy of one fixture shard (`<artifacts>/<name>`), with the
/// symlinks `artifacts-inventory.tsv` records restored (file syncs may have
/// turned them into plain files holding the target text). Made once per
/// test binary and kept for its whole run.
pub fn fixture_shard(name: &str) -> PathBuf {
    use std::sync::{Mutex, OnceLock};
    static COPIES: OnceLock<tempfile::TempDir> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    require_fixtures();
    let root = COPIES.get_or_init(tempdir).path().to_path_buf();
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dst = root.join(name);
    if !dst.exists() {
        let tmp = root.join(format!(".{name}.tmp"));
        copy_tree(&artifacts().join(name), &tmp);
        let inv = fs::read_to_string(fixtures().join("artifacts-inventory.tsv")).unwrap();
        let want = format!("artifacts/{name}/");
        for l in inv.lines() {
            let c: Vec<&str> = l.split('\t').collect();
            if let (Some(rel), Some(target)) = (
                c.first().and_then(|r| r.strip_prefix(&want)),
                c.get(1).and_then(|t| t.strip_prefix("symlink->")),
            ) {
                let p = tmp.join(rel);
                let _ = fs::remove_file(&p);
                std::os::unix::fs::symlink(target, &p).unwrap();
            }
        }
        fs::rename(&tmp, &dst).unwrap();
    }
    dst
}

/// Resident KiB of this process's mapping that contains address `addr`, as
/// the kernel reports it in `/proc/self/smaps` (`None` if no mapping holds
/// it). An observer independent of the code under test: it counts the
/// pages a parser really faulted in, not what the parser says it read.
pub fn mapped_rss_kib(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = a <= addr && addr < b;
                continue;
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("Rss:") {
                return v.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    None
}

// ------------------------------------------------------- large inputs

/// Writes an uncompressed offload bundle: a host entry and one code object
/// of `co_size` bytes (a multiple of 1 MiB: a 1 MiB pseudo-random block
/// repeated, varied per target) per target, each at a 4 KiB-aligned offset.
pub fn write_big_bundle(path: &Path, targets: &[&str], co_size: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    write_big_bundle_to(&mut f, targets, co_size);
    f.flush().unwrap();
}

/// [`write_big_bundle`] into any writer (e.g. a compressing one).
pub fn write_big_bundle_to(f: &mut dyn std::io::Write, targets: &[&str], co_size: u64) {
    let ids: Vec<String> = std::iter::once("host-x86_64-unknown-linux-gnu".to_string())
        .chain(
            targets
                .iter()
                .map(|t| format!("hipv4-amdgcn-amd-amdhsa--{t}")),
        )
        .collect();
    let header_len: u64 = 24 + 8 + ids.iter().map(|i| 24 + i.len() as u64).sum::<u64>();
    let mut off = header_len.div_ceil(4096) * 4096;
    let mut header = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    header.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    let mut offsets = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let size = if n == 0 { 0 } else { co_size };
        header.extend_from_slice(&off.to_le_bytes());
        header.extend_from_slice(&size.to_le_bytes());
        header.extend_from_slice(&(id.len() as u64).to_le_bytes());
        header.extend_from_slice(id.as_bytes());
        offsets.push(off);
        off += size.div_ceil(4096) * 4096;
    }
    f.write_all(&header).unwrap();
    let mut pos = header.len() as u64;
    let block = pseudo_random(22, 1 << 20);
    for (n, &o) in offsets.iter().enumerate().skip(1) {
        f.write_all(&vec![0u8; (o - pos) as usize]).unwrap();
        let mut b = block.clone();
        b[..8].copy_from_slice(&(n as u64).to_le_bytes());
        for _ in 0..(co_size >> 20) {
            f.write_all(&b).unwrap();
        }
        pos = o + co_size;
    }
}

fn run_tool(mut c: Command, what: &str) {
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// C source of the one HIP fat-binary wrapper of the large test inputs
/// ([`big_fat_library`]): it points at `_binary_blob_bin_start`, the
/// `.hip_fatbin` contents `ld -r -b binary blob.bin` names.
pub const BIG_WRAPPER_C: &str = "extern const char _binary_blob_bin_start[];\n\
     struct w { unsigned magic, version; const void *binary; void *reserved; };\n\
     __attribute__((section(\".hipFatBinSegment\"), used, aligned(8)))\n\
     struct w rocpack_wrapper = { 0x48495046, 1, _binary_blob_bin_start, 0 };\n";

/// Builds a large fat shared library cheaply (`ld -r -b binary` of the
/// blobs, objcopy, `gcc -shared`; needs gcc, ld and objcopy), for memory
/// tests: `dir/art/big/lib/libbig.so` around a bundle of `co_size`-byte
/// code objects for `targets` and, when `host_mib` > 0, a `.rodata` blob of
/// that many MiB of host data; returns the artifact dir.
pub fn big_fat_library(
    dir: &Path,
    targets: &[&str],
    co_size: u64,
    host_mib: u64,
) -> std::path::PathBuf {
    big_fat_library_from(dir, host_mib, |blob| {
        write_big_bundle(blob, targets, co_size)
    })
}

/// [`big_fat_library`] around the `.hip_fatbin` contents `write_blob`
/// writes to the path it is given (e.g. a compressed bundle).
pub fn big_fat_library_from(
    dir: &Path,
    host_mib: u64,
    write_blob: impl FnOnce(&Path),
) -> std::path::PathBuf {
    write_blob(&dir.join("blob.bin"));
    let mut c = Command::new("ld");
    c.current_dir(dir)
        .args(["-r", "-b", "binary", "blob.bin", "-o", "blob.o"]);
    run_tool(c, "ld -r -b binary");
    std::fs::remove_file(dir.join("blob.bin")).unwrap();
    let mut c = Command::new("objcopy");
    c.current_dir(dir).args([
        "--rename-section",
        ".data=.hip_fatbin,alloc,load,readonly,data,contents",
        "--set-section-alignment",
        ".hip_fatbin=4096",
        "blob.o",
    ]);
    run_tool(c, "objcopy");
    let mut objs = vec!["wrapper.c", "blob.o"];
    if host_mib > 0 {
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("host.bin")).unwrap());
        let block = pseudo_random(23, 1 << 20);
        for _ in 0..host_mib {
            f.write_all(&block).unwrap();
        }
        f.flush().unwrap();
        drop(f);
        let mut c = Command::new("ld");
        c.current_dir(dir)
            .args(["-r", "-b", "binary", "host.bin", "-o", "host.o"]);
        run_tool(c, "ld -r -b binary (host)");
        std::fs::remove_file(dir.join("host.bin")).unwrap();
        let mut c = Command::new("objcopy");
        c.current_dir(dir).args([
            "--rename-section",
            ".data=.rodata.big,alloc,load,readonly,data,contents",
            "host.o",
        ]);
        run_tool(c, "objcopy (host)");
        objs.push("host.o");
    }
    std::fs::write(dir.join("wrapper.c"), BIG_WRAPPER_C).unwrap();
    let art = dir.join("art");
    let lib = art.join("big/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(art.join("big/artifact_manifest.txt"), "lib\n").unwrap();
    let mut c = Command::new("gcc");
    c.current_dir(dir)
        .args(["-shared", "-fPIC", "-Wl,-z,noexecstack"])
        .args(&objs)
        .arg("-o")
        .arg(lib.join("libbig.so"));
    run_tool(c, "gcc -shared");
    std::fs::remove_file(dir.join("blob.o")).unwrap();
    let _ = std::fs::remove_file(dir.join("host.o"));
    art
}

// ------------------------------------------------------------------ memory

/// A global allocator that forwards to the system allocator and counts:
/// the bytes live now, the most live at once, and the largest single
/// request. An observer independent of the code under test, for memory
/// bounds. Install it in a test binary with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc::new();`.
#[derive(Debug, Default)]
pub struct CountingAlloc {
    live: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
    largest: std::sync::atomic::AtomicUsize,
}

impl CountingAlloc {
    /// All counters at zero.
    pub const fn new() -> Self {
        use std::sync::atomic::AtomicUsize;
        Self {
            live: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            largest: AtomicUsize::new(0),
        }
    }

    /// Starts a measurement: the peak and the largest request restart from
    /// now. Returns the bytes live now, the base for [`Self::peak_since`].
    pub fn start(&self) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let base = self.live.load(Relaxed);
        self.peak.store(base, Relaxed);
        self.largest.store(0, Relaxed);
        base
    }

    /// The most bytes live at once since [`Self::start`], above its `base`.
    pub fn peak_since(&self, base: usize) -> usize {
        self.peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(base)
    }

    /// The largest single allocation or reallocation since [`Self::start`].
    pub fn largest(&self) -> usize {
        self.largest.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn grew(&self, n: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.live.fetch_add(n, Relaxed) + n;
        self.peak.fetch_max(now, Relaxed);
        self.largest.fetch_max(n, Relaxed);
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        self.grew(l.size());
        std::alloc::System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        self.live
            .fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        std::alloc::System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        self.live
            .fetch_sub(l.size(), std::sync::atomic::Ordering::Relaxed);
        self.grew(n);
        std::alloc::System.realloc(p, l, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_abc() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn copied_trees_snapshot_alike() {
        let d = tempdir();
        write(&d.path().join("a/b/c.txt"), b"x");
        std::os::unix::fs::symlink("b/c.txt", d.path().join("a/l")).unwrap();
        copy_tree(&d.path().join("a"), &d.path().join("copy"));
        assert_eq!(
            snapshot(&d.path().join("a")),
            snapshot(&d.path().join("copy"))
        );
        assert_eq!(list_files(&d.path().join("a")), ["b/c.txt", "l"]);
        assert_eq!(dir_names(&d.path().join("a")), ["b", "l"]);
        flip_byte(&d.path().join("copy/b/c.txt"), 0);
        assert_ne!(
            snapshot(&d.path().join("a")),
            snapshot(&d.path().join("copy"))
        );
    }
}

/// What a child process used (from `wait4`).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Peak resident set size, KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
    /// User CPU seconds.
    pub user: f64,
    /// System CPU seconds.
    pub sys: f64,
    /// Wall-clock seconds.
    pub wall: f64,
    /// Bytes the child passed to write-like system calls (`write`,
    /// `pwrite`, `copy_file_range`…: `wchar` of `/proc/<pid>/io`, read
    /// once it has exited and before it is reaped).
    pub written: u64,
}

/// Runs `program args…` to completion and returns its output and its own
/// resource usage. The child is started by a small Python parent that
/// forks, execs and `wait4`s it: Linux carries the parent's high-water RSS
/// into a child's `ru_maxrss` across exec, so a child started straight
/// from a test process would report the test's peak (which grows with
/// whatever the test built in memory). The Python parent's own peak (`VmHWM`,
/// which a forked child starts from) is checked to be below the child's,
/// so a reading is never the parent's.
pub fn run_measured<S: AsRef<OsStr>>(program: impl AsRef<OsStr>, args: &[S]) -> (Output, Usage) {
    measure(program, args, true)
}

/// [`run_measured`] for upper bounds: the reading is never below the
/// child's own peak (a forked child's `ru_maxrss` may start from its
/// parent's), so `max_rss_kib <= LIMIT` is sound even for a child that
/// uses less memory than its small Python parent, which `run_measured`
/// refuses to tell apart.
pub fn run_measured_peak<S: AsRef<OsStr>>(
    program: impl AsRef<OsStr>,
    args: &[S],
) -> (Output, Usage) {
    measure(program, args, false)
}

/// [`run_measured_peak`] of a prepared command: its program, arguments and
/// environment changes (run through `env`; a working directory is not
/// supported).
pub fn run_measured_peak_cmd(cmd: &Command) -> (Output, Usage) {
    assert!(
        cmd.get_current_dir().is_none(),
        "run_measured_peak_cmd: set no working directory"
    );
    let mut argv: Vec<std::ffi::OsString> = Vec::new();
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => {
                let mut kv = k.to_os_string();
                kv.push("=");
                kv.push(v);
                argv.push(kv);
            }
            None => argv.extend(["-u".into(), k.to_os_string()]),
        }
    }
    argv.push(cmd.get_program().to_os_string());
    argv.extend(cmd.get_args().map(OsStr::to_os_string));
    measure("env", &argv, false)
}

fn measure<S: AsRef<OsStr>>(
    program: impl AsRef<OsStr>,
    args: &[S],
    distinct: bool,
) -> (Output, Usage) {
    const PY: &str = r#"import json, os, sys
# This process's own high-water RSS (its getrusage also holds its parent's).
me = int([l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1])
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
io = dict(l.split(": ") for l in open(f"/proc/{pid}/io").read().splitlines())
_, st, ru = os.wait4(pid, 0)
json.dump([ru.ru_maxrss, ru.ru_utime, ru.ru_stime, me, int(io["wchar"])], open(sys.argv[1], "w"))
sys.exit(os.waitstatus_to_exitcode(st) % 256)
"#;
    let report = tempfile::NamedTempFile::new().unwrap();
    let t0 = std::time::Instant::now();
    let out = Command::new("python3")
        .arg("-c")
        .arg(PY)
        .arg(report.path())
        .arg(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let wall = t0.elapsed().as_secs_f64();
    let text = fs::read_to_string(report.path()).unwrap();
    let v: Vec<f64> = text
        .trim_matches(|c| c == '[' || c == ']' || char::is_whitespace(c))
        .split(',')
        .map(|x| x.trim().parse().unwrap())
        .collect();
    let (rss, user, sys, parent, written) = (v[0] as u64, v[1], v[2], v[3] as u64, v[4] as u64);
    assert!(
        !distinct || rss > parent,
        "the child's peak RSS ({rss} KiB) is not above its Python parent's ({parent} KiB): it cannot be told apart"
    );
    (
        out,
        Usage {
            max_rss_kib: rss,
            user,
            sys,
            wall,
            written,
        },
    )
}
