//! `kpack split-wheel`: one fat wheel in; a host wheel (same file name),
//! one device wheel per GPU target and optional family wheels out
//! (`kpack-reference.md` §12.5).
//!
//! 1. The input (a `.whl`, or an exploded wheel directory) is checked
//!    entry by entry against its RECORD (plain relative paths, no
//!    symlinks, sizes, CRCs, hashes). Of a wheel only the files the split
//!    may change (ELF, PE and `ar` files; database files below the overlay)
//!    are extracted into a private temporary directory; a directory is
//!    copied there whole.
//! 2. That tree is split by `rocpack_artifacts::split` with one manifest
//!    prefix: the overlay root (`--overlay-root`, default the wheel root).
//!    The `.kpack` stem is the distribution name lower-cased, `-` → `_`, so
//!    each host binary's marker points at
//!    `../…/.kpack/<dist>_@GFXARCH@.kpack` below the overlay root.
//! 3. Host wheel: files outside the overlay and unchanged files are copied
//!    compressed as they are, straight from the input wheel; rewritten
//!    binaries are compressed again; database files are gone; METADATA
//!    gains `device-<target>`, `device-<group>` and `device-all` extras
//!    with exact pins; RECORD is regenerated. Written in one pass over the
//!    input's name table, so memory does not grow with the entry count
//!    beyond the table (16 bytes per entry plus its name).
//! 4. Device wheel per target (base arch: `gfx90a:xnack-` and
//!    `gfx90a:xnack+` archives share the `gfx90a` wheel), named
//!    `<prefix>-<target>` (PEP 503), holding the archives and database
//!    files at their wheel paths, pinned to the host version, WHEEL tags
//!    copied from the host.
//! 5. Family wheels (packaging config `architecture_groups`) require the
//!    device wheels of the group's targets that exist, and only those.
//!
//! Everything is written into a staging directory and moved into the
//! output directory only when every wheel was written: never a partial set.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rocpack_artifacts::config::PackagingConfig;
use rocpack_artifacts::databases::DatabaseKind;
use rocpack_artifacts::fsutil::{self, FsError};
use rocpack_artifacts::manifest::ArtifactManifest;
use rocpack_artifacts::split::{self as asplit, FatBinarySummary, Progress, SplitOptions};
use rocpack_artifacts::walk::{self, EntryKind};
use rocpack_kpack::commit::StagingDir;
use rocpack_kpack::Compression;
use serde::Serialize;

use crate::central::Table;
use crate::meta::{FileHasher, HashAlgo, Headers};
use crate::names::{self, WheelName};
use crate::selector::{self, ExtraNames, SelectorData, SelectorOptions};
use crate::zipio::{self, Content, InputWheel, OutEntry, WriteOptions};
use crate::WheelError;

/// Directory name the wheel's files are extracted into, below the private
/// artifact directory (it becomes the first component of TOC keys).
const ROOT_NAME: &str = "site-packages";
/// Largest METADATA / WHEEL file read.
const MAX_META: u64 = 16 << 20;
/// The `@GFXARCH@` placeholder of `--device-requires-dist`.
pub const GFXARCH: &str = "@GFXARCH@";

/// Wheel files or exploded directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// `.whl` files.
    #[default]
    Wheel,
    /// One directory per wheel (its files as installed, RECORD included).
    Directory,
}

/// What to split and how.
#[derive(Debug, Clone)]
pub struct WheelSplitOptions {
    /// A `.whl` file or an exploded wheel directory.
    pub input: PathBuf,
    /// Output directory (created; existing wheels are never overwritten).
    pub output_dir: PathBuf,
    /// Device distribution prefix (default `<host distribution>-device`).
    pub device_package_prefix: Option<String>,
    /// Directory (wheel-relative) whose fat binaries are split and where
    /// `.kpack/` goes; `None` or empty: the wheel root.
    pub overlay_root: Option<String>,
    /// Extra `Requires-Dist` of device wheels; `@GFXARCH@` is replaced by
    /// the target (such entries go to target wheels only).
    pub device_requires_dist: Vec<String>,
    /// Database handlers, in priority order.
    pub databases: Vec<DatabaseKind>,
    /// Keep only these targets (base-arch match; see `kpack split`).
    pub gpu_targets: Vec<String>,
    /// `.kpack` compression.
    pub compression: Compression,
    /// Wheels or directories.
    pub output_format: OutputFormat,
    /// Worker threads (`None`: one per CPU). Output does not depend on it.
    pub jobs: Option<usize>,
    /// Packaging config whose `architecture_groups` become family wheels.
    pub config: Option<PackagingConfig>,
    /// Deflate level of wheel entries (0 = store).
    pub zip_level: i64,
    /// `SOURCE_DATE_EPOCH`: timestamp of every entry (default 1980-01-01).
    pub source_date_epoch: Option<u64>,
    /// Also write the device selector sdist (and the host's `device` extra).
    pub selector: Option<SelectorOptions>,
    /// Names of the host's per-target and per-group extras.
    pub extra_names: ExtraNames,
}

impl WheelSplitOptions {
    /// Options with defaults for everything but input and output.
    pub fn new(input: impl Into<PathBuf>, output_dir: impl Into<PathBuf>) -> Self {
        WheelSplitOptions {
            input: input.into(),
            output_dir: output_dir.into(),
            device_package_prefix: None,
            overlay_root: None,
            device_requires_dist: Vec::new(),
            databases: Vec::new(),
            gpu_targets: Vec::new(),
            compression: Compression::Zstd { level: 3 },
            output_format: OutputFormat::Wheel,
            jobs: None,
            config: None,
            zip_level: 6,
            source_date_epoch: None,
            selector: None,
            extra_names: ExtraNames::Rocm,
        }
    }
}

/// One written wheel.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WheelFile {
    /// File (or directory) name in the output directory.
    pub file: String,
    /// Distribution name (PEP 503 normalised for generated wheels).
    pub distribution: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Files in it, RECORD included.
    pub files: usize,
    /// `Requires-Dist` added (device and family wheels: all of them).
    pub requires: Vec<String>,
}

/// One device wheel.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeviceWheel {
    /// Target (base arch) it serves.
    pub target: String,
    /// Architectures (target IDs) whose code it holds.
    pub architectures: Vec<String>,
    /// The wheel.
    pub wheel: WheelFile,
    /// `.kpack` archives (wheel paths).
    pub kpacks: Vec<String>,
    /// Database files (wheel paths).
    pub database_files: Vec<String>,
}

/// One family wheel.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FamilyWheel {
    /// Architecture group name.
    pub group: String,
    /// Targets whose device wheels it requires.
    pub members: Vec<String>,
    /// Group architectures with no device wheel (not required).
    pub absent: Vec<String>,
    /// The wheel.
    pub wheel: WheelFile,
}

/// One split fat binary, by wheel path.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FatBinary {
    /// Path inside the wheel.
    pub path: String,
    /// Architectures found in it.
    pub architectures: Vec<String>,
    /// Code objects found.
    pub code_objects: u64,
    /// Size before.
    pub input_bytes: u64,
    /// Size of the host-only rewrite.
    pub output_bytes: u64,
}

/// Result of a wheel split.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WheelSplitReport {
    /// The input wheel (file name).
    pub input: String,
    /// Its size in bytes (sum of file sizes for a directory).
    pub input_bytes: u64,
    /// Host distribution name (as in METADATA).
    pub distribution: String,
    /// Host version.
    pub version: String,
    /// Overlay root (`""`: wheel root).
    pub overlay_root: String,
    /// The host wheel.
    pub host: WheelFile,
    /// Fat binaries rewritten host-only.
    pub fat_binaries: Vec<FatBinary>,
    /// Targets with a device wheel, sorted.
    pub targets: Vec<String>,
    /// Device wheels, by target.
    pub device_wheels: Vec<DeviceWheel>,
    /// Family wheels, in config order.
    pub family_wheels: Vec<FamilyWheel>,
    /// Config groups without any target of this wheel (no family wheel).
    pub skipped_groups: Vec<String>,
    /// `.kpack` compression.
    pub compression: String,
    /// Output format (`wheel` or `directory`).
    pub output_format: String,
    /// The selector sdist (`--selector`).
    pub selector: Option<SelectorFile>,
}

/// The written selector sdist.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SelectorFile {
    /// File name in the output directory.
    pub file: String,
    /// Size in bytes.
    pub bytes: u64,
    /// What its backend chooses from.
    pub data: SelectorData,
}

/// The loaded input.
struct Loaded {
    /// The wheel; `None` for a directory.
    input: Option<InputWheel>,
    /// The files of a directory input (all copied below the work root).
    dir_files: Table,
    /// The wheel's file name; `None` for a directory.
    name: Option<String>,
    /// Its size (sum of file sizes for a directory).
    bytes: u64,
    /// Its `.dist-info` directory.
    dist_info: String,
}

impl Loaded {
    /// Its files, sorted by name: 16 bytes per file plus its name.
    fn files(&self) -> &Table {
        match &self.input {
            Some(w) => &w.table,
            None => &self.dir_files,
        }
    }

    /// Whether file `i` is below the work root.
    fn extracted(&self, i: usize) -> bool {
        self.files().rec(i).bits & zipio::EXTRACTED != 0
    }

    /// The bytes of file `i` as an output entry's content: copied
    /// compressed from the input wheel, or the file below `root`.
    fn content(&self, i: usize, root: &Path) -> Content {
        match &self.input {
            Some(_) => Content::Input(i),
            None => Content::Disk(zipio::join(root, self.files().name(i))),
        }
    }

    /// A small text file of the input (METADATA, WHEEL).
    fn read_text(&self, root: &Path, name: &str, limit: u64) -> Result<String, WheelError> {
        let b = match &self.input {
            Some(w) => w
                .read_entry(name, limit)?
                .ok_or_else(|| usage(format!("{name}: missing")))?,
            None => {
                let p = zipio::join(root, name);
                fsutil::read_bounded(&p, limit).map_err(|e| ioerr(&p, "read", e))?
            }
        };
        String::from_utf8(b).map_err(|_| usage(format!("{name}: not UTF-8")))
    }
}

/// One wheel to write.
struct Planned {
    file: String,
    dist_info: String,
    entries: Vec<OutEntry>,
}

fn usage(msg: impl Into<String>) -> WheelError {
    WheelError::Usage(msg.into())
}

fn ioerr(path: &Path, what: &'static str, e: std::io::Error) -> WheelError {
    WheelError::Io {
        path: path.to_path_buf(),
        what,
        error: e,
    }
}

/// Splits one wheel. Nothing appears in the output directory unless every
/// wheel was written.
pub fn split_wheel(
    opts: &WheelSplitOptions,
    progress: &dyn Progress,
) -> Result<WheelSplitReport, WheelError> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = opts.jobs {
        b = b.num_threads(n.max(1));
    }
    let pool = b
        .build()
        .map_err(|e| usage(format!("cannot start worker threads: {e}")))?;
    pool.install(|| split_inner(opts, progress))
}

fn check_output(opts: &WheelSplitOptions) -> Result<(), WheelError> {
    let inp =
        fsutil::absolute_lexical(&opts.input).map_err(|e| ioerr(&opts.input, "resolve", e))?;
    let out = fsutil::absolute_lexical(&opts.output_dir)
        .map_err(|e| ioerr(&opts.output_dir, "resolve", e))?;
    let inp_real = fs::canonicalize(&inp).unwrap_or(inp.clone());
    let out_real = rocpack_kpack::weakly_canonical(&out);
    if inp.is_dir() && (out.starts_with(&inp) || out_real.starts_with(&inp_real)) {
        return Err(usage(format!(
            "output directory {} is inside the input wheel directory {}",
            opts.output_dir.display(),
            opts.input.display()
        )));
    }
    Ok(())
}

/// The one `.dist-info` directory of a wheel with these file names.
fn find_dist_info<'a>(names: impl Iterator<Item = &'a str>) -> Result<String, WheelError> {
    let dist_infos: BTreeSet<&str> = names
        .filter_map(|k| k.split('/').next())
        .filter(|c| c.ends_with(".dist-info"))
        .collect();
    let mut it = dist_infos.iter();
    match (it.next(), it.next()) {
        (Some(d), None) => Ok(d.to_string()),
        (None, _) => Err(usage("the wheel has no .dist-info directory")),
        _ => Err(usage(format!(
            "the wheel has several .dist-info directories: {}",
            dist_infos.iter().cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Bytes free for an unprivileged user on the file system of `dir`.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` points to writable
    // memory of the right size; the result is read only when the call succeeded.
    #[allow(unsafe_code)]
    let st = unsafe {
        if libc::statvfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
            return None;
        }
        st.assume_init()
    };
    // u64 on 64-bit Linux, u32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let (avail, frsize) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    Some(avail.saturating_mul(frsize))
}

/// Hashes a file with `algo` for the RECORD check: (digest, size).
fn hash_file(path: &Path, algo: HashAlgo) -> Result<(String, u64), WheelError> {
    use std::io::Read;
    let mut f = fs::File::open(path).map_err(|e| ioerr(path, "open", e))?;
    let mut h = FileHasher::new(algo);
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).map_err(|e| ioerr(path, "read", e))?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((h.finish_b64(), n))
}

/// The overlay root of `opts` as a wheel path (`""`: the wheel root);
/// checked against the wheel's files later.
fn overlay_of(opts: &WheelSplitOptions) -> String {
    let overlay = opts
        .overlay_root
        .as_deref()
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    if overlay == "." {
        String::new()
    } else {
        overlay
    }
}

/// The path of wheel file `k` below the overlay, when it is there.
fn below_overlay<'a>(k: &'a str, overlay: &str) -> Option<&'a str> {
    if overlay.is_empty() {
        Some(k)
    } else {
        k.strip_prefix(overlay)?.strip_prefix('/')
    }
}

/// Loads the input, checking its RECORD file by file. A directory is
/// copied below `root`; of a wheel only the files the split may change are
/// extracted there: ELF, PE and `ar` files (fat binaries, or checked to
/// carry no device code) and, below the overlay, the files a database
/// handler claims. Every other file stays in the wheel and is copied into
/// the host wheel compressed as it is.
fn load_input(
    opts: &WheelSplitOptions,
    root: &Path,
    tmp: &Path,
    digests: &zipio::Digests,
) -> Result<Loaded, WheelError> {
    let meta = fs::metadata(&opts.input).map_err(|e| ioerr(&opts.input, "stat", e))?;
    fs::create_dir_all(root).map_err(|e| ioerr(root, "create directory", e))?;
    if meta.is_dir() {
        let mut files = Table::new();
        let mut total = 0u64;
        for e in walk::walk(&opts.input)? {
            match e.kind {
                EntryKind::Dir => {}
                EntryKind::Symlink { .. } => {
                    return Err(usage(format!(
                        "{}: symlinks cannot be installed from a wheel",
                        e.path(&opts.input).display()
                    )))
                }
                EntryKind::File { size, mode } => {
                    let dst = zipio::join(root, &e.rel);
                    if let Some(p) = dst.parent() {
                        fs::create_dir_all(p).map_err(|er| ioerr(p, "create directory", er))?;
                    }
                    fsutil::copy_file(&e.path(&opts.input), &dst)?;
                    zipio::set_mode(&dst, mode)?;
                    total += size;
                    files
                        .push(&e.rel, u64::MAX, (mode & 0o777) as u16 | zipio::EXTRACTED)
                        .map_err(|m| usage(format!("{}: {m}", opts.input.display())))?;
                }
            }
        }
        files
            .sort()
            .map_err(|m| usage(format!("{}: {m}", opts.input.display())))?;
        let dist_info = find_dist_info((0..files.len()).map(|i| files.name(i)))?;
        let record_path = format!("{dist_info}/RECORD");
        if files.find(&record_path).is_none() {
            return Err(usage(format!(
                "{}: no {record_path} (every wheel lists its files there)",
                opts.input.display()
            )));
        }
        let rp = zipio::join(root, &record_path);
        let size = fs::metadata(&rp).map_err(|e| ioerr(&rp, "stat", e))?.len();
        if size > zipio::MAX_RECORD {
            return Err(usage(format!(
                "{}: {record_path} is {size} bytes; at most {} are read",
                opts.input.display(),
                zipio::MAX_RECORD
            )));
        }
        let text = std::io::BufReader::new(fs::File::open(&rp).map_err(|e| ioerr(&rp, "open", e))?);
        zipio::check_record(&mut files, text, &record_path, &opts.input, |t, i, row| {
            let (digest, n) = hash_file(
                &zipio::join(root, t.name(i)),
                row.hash.map_or(HashAlgo::Sha256, |h| h.0),
            )?;
            row.check(&record_path, &digest, n)
                .map_err(|m| usage(format!("{}: {m}", opts.input.display())))
        })?;
        return Ok(Loaded {
            input: None,
            dir_files: files,
            name: None,
            bytes: total,
            dist_info,
        });
    }
    let name = opts
        .input
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_string)
        .ok_or_else(|| usage(format!("{}: no file name", opts.input.display())))?;
    if WheelName::parse(&name).is_none() {
        return Err(usage(format!(
            "{name}: not a wheel file name (name-version[-build]-python-abi-platform.whl)"
        )));
    }
    let mut w = InputWheel::open(&opts.input)?;
    let dist_info = find_dist_info((0..w.table.len()).map(|i| w.table.name(i)))?;
    if let Some(free) = free_bytes(root) {
        if w.expanded > free {
            return Err(usage(format!(
                "{}: expands to {} bytes, only {free} are free in {}: nothing was extracted",
                opts.input.display(),
                w.expanded,
                root.display()
            )));
        }
    }
    let overlay = overlay_of(opts);
    let databases = opts.databases.clone();
    let extract = move |k: &str, head: &[u8]| {
        use rocpack_image::FileType;
        if matches!(
            rocpack_image::detect(head),
            FileType::Elf { .. } | FileType::Pe { .. } | FileType::Archive
        ) {
            return true;
        }
        below_overlay(k, &overlay)
            .is_some_and(|rel| rocpack_artifacts::databases::classify(&databases, rel).is_some())
    };
    zipio::verify(
        &mut w,
        &format!("{dist_info}/RECORD"),
        root,
        tmp,
        digests,
        &extract,
    )?;
    Ok(Loaded {
        input: Some(w),
        dir_files: Table::new(),
        name: Some(name),
        bytes: meta.len(),
        dist_info,
    })
}

/// Whether the file holds HIP device code (ELF, PE32+ image or archive
/// members). Only headers, tables and wrappers are read, never the whole
/// file or a mapping of it.
fn has_device_code(path: &Path) -> Result<bool, WheelError> {
    use rocpack_image::FileType;
    let f = rocpack_image::ImageFile::open(path).map_err(|e| ioerr(path, "read", e))?;
    match f.file_type() {
        FileType::Archive => Ok(f
            .members()
            .map_err(|e| ioerr(path, "read", e))?
            .is_ok_and(|ms| {
                ms.iter()
                    .any(|(_, i)| i.as_ref().is_ok_and(|i| i.has_device_code()))
            })),
        FileType::Elf { .. } | FileType::Pe { .. } => Ok(f
            .analyze()
            .map_err(|e| ioerr(path, "read", e))?
            .is_ok_and(|i| i.has_device_code())),
        _ => Ok(false),
    }
}

fn wheel_rel(prefix_rel: &str, overlay: &str) -> String {
    if overlay.is_empty() {
        prefix_rel.to_string()
    } else {
        format!("{overlay}/{prefix_rel}")
    }
}

fn generator() -> String {
    format!("kpack split-wheel (rocpack {})", env!("CARGO_PKG_VERSION"))
}

fn wheel_file_text(host_wheel: &Headers) -> String {
    let mut h = Headers::new();
    h.push("Wheel-Version", "1.0");
    h.push("Generator", generator());
    h.push("Root-Is-Purelib", "false");
    if let Some(b) = host_wheel.first("Build") {
        h.push("Build", b);
    }
    for t in host_wheel.all("Tag") {
        h.push("Tag", t.trim());
    }
    h.render()
}

fn metadata_text(name: &str, version: &str, summary: &str, requires: &[String]) -> String {
    let mut h = Headers::new();
    h.push("Metadata-Version", "2.1");
    h.push("Name", name);
    h.push("Version", version);
    h.push("Summary", summary);
    for r in requires {
        h.push("Requires-Dist", r.as_str());
    }
    h.render()
}

fn bytes_entry(name: String, text: String) -> OutEntry {
    OutEntry {
        name,
        content: Content::Bytes(text.into_bytes()),
        mode: 0o644,
        store: false,
    }
}

/// An input file at (or below) `rel`, the path of a `.kpack` the device
/// wheel of `target` installs: two installed wheels would own one path (the
/// host's bytes win, and uninstalling the host deletes the device wheel's
/// archive).
fn refuse_owned_path(files: &Table, rel: &str, target: &str) -> Result<(), WheelError> {
    if files.find(rel).is_some() || !files.range_with_prefix(&format!("{rel}/")).is_empty() {
        return Err(usage(format!(
            "{rel}: the input already holds the path the device wheel of {target} installs (is this a split host wheel?)"
        )));
    }
    Ok(())
}

/// METADATA that already names one of the `extras` the host wheel gains
/// (`device-<target>`, `device-<group>`, `device-all`), as a
/// `Provides-Extra` or in a `Requires-Dist` marker: its own requirements
/// would stay next to the new pin, and `pip install 'pkg[device-<target>]'`
/// would resolve both. Names compare normalized (PEP 685), as pip compares
/// them; a marker is matched by its quoted strings.
fn refuse_taken_extras(
    metadata: &Headers,
    meta_path: &str,
    extras: &[String],
) -> Result<(), WheelError> {
    let ours = |v: &str| {
        let n = names::normalize(v.trim());
        extras.iter().find(|e| **e == n).cloned()
    };
    let taken = |what: &str, extra: String| {
        Err(usage(format!(
            "{meta_path}: already {what} the `{extra}` extra the host wheel gains (is this a split host wheel?)"
        )))
    };
    for e in metadata.all("Provides-Extra") {
        if let Some(x) = ours(e) {
            return taken("provides", x);
        }
    }
    for r in metadata.all("Requires-Dist") {
        let Some((_, marker)) = r.split_once(';') else {
            continue;
        };
        let quoted = marker.split(['"', '\'']).skip(1).step_by(2).find_map(ours);
        if let Some(x) = quoted {
            return taken("has a requirement for", x);
        }
    }
    Ok(())
}

/// Each `--device-requires-dist` becomes one `Requires-Dist:` line of a
/// METADATA file: it must be one line (a newline would add headers of its
/// own) and start with a distribution name.
fn check_requires(reqs: &[String]) -> Result<(), WheelError> {
    for r in reqs {
        let bad = |why: String| usage(format!("--device-requires-dist {r:?}: {why}"));
        if let Some(c) = r.chars().find(|c| c.is_control()) {
            return Err(bad(format!(
                "contains {} (a METADATA field is one line: it would add headers of its own)",
                match c {
                    '\n' => "a newline".to_string(),
                    '\r' => "a carriage return".to_string(),
                    c => format!("the control character U+{:04X}", u32::from(c)),
                }
            )));
        }
        let t = r.trim().replace(GFXARCH, "gfx");
        let name: String = t
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            .collect();
        if !names::is_valid_name(&name) {
            return Err(bad(
                "does not start with a distribution name (PEP 508: `name[extras] (version specifiers); markers`)"
                    .into(),
            ));
        }
    }
    Ok(())
}

fn split_inner(
    opts: &WheelSplitOptions,
    progress: &dyn Progress,
) -> Result<WheelSplitReport, WheelError> {
    check_requires(&opts.device_requires_dist)?;
    check_output(opts)?;
    let staging = StagingDir::new(&opts.output_dir).map_err(FsError::from)?;
    let parent = staging
        .dest()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let work = tempfile::Builder::new()
        .prefix(".kpack-split-wheel-")
        .tempdir_in(&parent)
        .map_err(|e| ioerr(&parent, "create temporary directory", e))?;
    let art = work.path().join("art");
    let root = art.join(ROOT_NAME);
    let tmp = work.path().join("zip");
    fs::create_dir_all(&tmp).map_err(|e| ioerr(&tmp, "create directory", e))?;
    let digests = zipio::Digests::new(&tmp)?;

    // 1. Input.
    let loaded = load_input(opts, &root, &tmp, &digests)?;
    let files = loaded.files();
    let (input_name, input_bytes, dist_info) =
        (loaded.name.clone(), loaded.bytes, loaded.dist_info.clone());

    // 2. dist-info, METADATA, WHEEL.
    let meta_path = format!("{dist_info}/METADATA");
    let wheel_path = format!("{dist_info}/WHEEL");
    let meta_mode = files
        .find(&meta_path)
        .map(|i| files.rec(i).mode())
        .ok_or_else(|| usage(format!("{meta_path}: missing")))?;
    if files.find(&wheel_path).is_none() {
        return Err(usage(format!("{wheel_path}: missing")));
    }
    let mut metadata = Headers::parse(&loaded.read_text(&root, &meta_path, MAX_META)?)
        .map_err(|e| usage(format!("{meta_path}: {e}")))?;
    let wheel_meta = Headers::parse(&loaded.read_text(&root, &wheel_path, MAX_META)?)
        .map_err(|e| usage(format!("{wheel_path}: {e}")))?;
    let name = metadata
        .first("Name")
        .ok_or_else(|| usage(format!("{meta_path}: no Name")))?
        .to_string();
    let version = metadata
        .first("Version")
        .ok_or_else(|| usage(format!("{meta_path}: no Version")))?
        .to_string();
    if !names::is_valid_name(&name) {
        return Err(usage(format!(
            "{meta_path}: `{name}` is not a valid distribution name"
        )));
    }
    let parsed_version = pep440_rs::Version::from_str(&version).map_err(|e| {
        usage(format!(
            "{meta_path}: Version `{version}` is not a PEP 440 version ({e})"
        ))
    })?;
    if metadata
        .all("Provides-Extra")
        .iter()
        .any(|e| e.trim() == "device-all")
    {
        return Err(usage(format!(
            "{meta_path}: already has a `device-all` extra (is this a split host wheel?)"
        )));
    }
    let tags: Vec<String> = wheel_meta
        .all("Tag")
        .iter()
        .map(|t| t.trim().to_string())
        .collect();
    let host_name = match &input_name {
        Some(n) => WheelName::parse(n).ok_or_else(|| usage(format!("{n}: bad wheel file name")))?,
        None => WheelName::from_tags(&name, &version, wheel_meta.first("Build"), &tags)
            .ok_or_else(|| usage(format!("{wheel_path}: no usable Tag lines")))?,
    };
    if names::normalize(&host_name.name) != names::normalize(&name) {
        return Err(usage(format!(
            "wheel file name `{}` does not match METADATA Name `{name}`",
            host_name.file_name()
        )));
    }
    if input_name.is_some() {
        let fv = &host_name.version;
        match pep440_rs::Version::from_str(fv) {
            Ok(v) if v == parsed_version => {}
            Ok(_) => {
                return Err(usage(format!(
                    "wheel file name `{}` has version `{fv}`, {meta_path} has Version `{version}`",
                    host_name.file_name()
                )))
            }
            Err(e) => {
                return Err(usage(format!(
                    "wheel file name `{}`: version `{fv}` is not a PEP 440 version ({e})",
                    host_name.file_name()
                )))
            }
        }
    }

    // 3. Overlay root.
    let overlay = overlay_of(opts);
    if !overlay.is_empty() {
        if !zipio::is_plain_rel(&overlay) {
            return Err(usage(format!(
                "--overlay-root `{overlay}` is not a plain relative path"
            )));
        }
        if overlay.split('/').next() == Some(dist_info.as_str()) {
            return Err(usage("--overlay-root must not be the .dist-info directory"));
        }
        let pre = format!("{overlay}/");
        if files.range_with_prefix(&pre).is_empty() {
            return Err(usage(format!(
                "--overlay-root `{overlay}`: no such directory in the wheel"
            )));
        }
        // Files that are not ELF, PE or `ar` were not extracted: they carry no device code.
        for i in (0..files.len()).filter(|&i| loaded.extracted(i)) {
            let k = files.name(i);
            if !k.starts_with(&pre) && has_device_code(&zipio::join(&root, k))? {
                return Err(usage(format!(
                    "{k}: fat binary outside --overlay-root `{overlay}` (its device code would stay in the host wheel)"
                )));
            }
        }
    }

    // 4. Split the overlay with the artifact splitter.
    let prefix = if overlay.is_empty() {
        ROOT_NAME.to_string()
    } else {
        format!("{ROOT_NAME}/{overlay}")
    };
    ArtifactManifest::from_prefixes([prefix.as_str()])?.write_dir(&art)?;
    let stem = names::kpack_stem(&name);
    let split_out = work.path().join("split");
    let sopts = SplitOptions {
        artifact_dir: art.clone(),
        artifact_prefix: stem.clone(),
        output_dir: split_out.clone(),
        databases: opts.databases.clone(),
        compression: opts.compression,
        exclude_arch: Vec::new(),
        gpu_targets: opts.gpu_targets.clone(),
        jobs: opts.jobs,
        staging_roots: Vec::new(),
    };
    let report = asplit::split_artifact(&sopts, progress)?;
    if report.arch_artifacts.is_empty() {
        return Err(usage(format!(
            "no device code found{} (no fat binary{}): nothing to split",
            if overlay.is_empty() {
                String::new()
            } else {
                format!(" below `{overlay}`")
            },
            if opts.databases.is_empty() {
                String::new()
            } else {
                " and no database file".to_string()
            }
        )));
    }
    let strip_root = |p: &str| -> String {
        p.strip_prefix(&format!("{ROOT_NAME}/"))
            .unwrap_or(p)
            .to_string()
    };
    let fat_binaries: Vec<FatBinary> = report
        .fat_binaries
        .iter()
        .map(|f: &FatBinarySummary| FatBinary {
            path: strip_root(&f.path),
            architectures: f.architectures.clone(),
            code_objects: f.code_objects,
            input_bytes: f.input_bytes,
            output_bytes: f.output_bytes,
        })
        .collect();
    let rewritten: BTreeSet<&str> = fat_binaries.iter().map(|f| f.path.as_str()).collect();

    // 5. Targets: base arch of each architecture written.
    let mut by_target: BTreeMap<String, Vec<&asplit::ArchArtifact>> = BTreeMap::new();
    for a in &report.arch_artifacts {
        let t = rocpack_bundle::base_arch(&a.arch).unwrap_or_else(|| a.arch.clone());
        by_target.entry(t).or_default().push(a);
    }
    let dev_prefix = opts
        .device_package_prefix
        .clone()
        .unwrap_or_else(|| format!("{name}-device"));
    if !names::is_valid_name(&dev_prefix) {
        return Err(usage(format!(
            "--device-package-prefix `{dev_prefix}` is not a valid distribution name"
        )));
    }
    let host_norm = names::normalize(&name);
    let dev_name = |suffix: &str| names::normalize(&format!("{dev_prefix}-{suffix}"));
    let mut seen_names: BTreeMap<String, String> = BTreeMap::new();
    seen_names.insert(host_norm.clone(), "the host".to_string());
    for t in by_target.keys() {
        let n = dev_name(t);
        if !names::is_valid_name(&n) {
            return Err(usage(format!(
                "device distribution `{n}` is not a valid name"
            )));
        }
        if let Some(other) = seen_names.insert(n.clone(), format!("target {t}")) {
            return Err(usage(format!(
                "distribution `{n}` of target {t} collides with {other}"
            )));
        }
    }
    let pin = |dist: &str| format!("{dist}=={version}");
    let wheel_info = WheelInfo {
        host_name: &host_name,
        wheel_meta: &wheel_meta,
        version: &version,
    };

    // 6. Device wheels.
    let mut planned: Vec<Planned> = Vec::new();
    let mut device_wheels = Vec::new();
    for (target, arts) in &by_target {
        let dist = dev_name(target);
        let mut entries: BTreeMap<String, OutEntry> = BTreeMap::new();
        let mut kpacks = Vec::new();
        let mut dbs = Vec::new();
        let mut archs = Vec::new();
        for a in arts {
            archs.push(a.arch.clone());
            let proot = fsutil::join_rel(&split_out.join(&a.name), &prefix);
            if !proot.is_dir() {
                continue;
            }
            for e in walk::walk(&proot)? {
                let EntryKind::File { mode, .. } = e.kind else {
                    continue;
                };
                let rel = wheel_rel(&e.rel, &overlay);
                let is_kpack = e.rel.starts_with(&format!("{}/", rocpack_kpack::KPACK_DIR))
                    && e.rel.ends_with(".kpack");
                if is_kpack {
                    refuse_owned_path(files, &rel, target)?;
                    kpacks.push(rel.clone());
                } else {
                    dbs.push(rel.clone());
                }
                let content = match (is_kpack, &loaded.input, files.find(&rel)) {
                    (false, Some(_), Some(i)) => Content::Input(i),
                    _ => Content::Disk(e.path(&proot)),
                };
                let entry = OutEntry {
                    name: rel.clone(),
                    content,
                    mode: mode & 0o777,
                    store: is_kpack && opts.compression != Compression::None,
                };
                if entries.insert(rel.clone(), entry).is_some() {
                    return Err(usage(format!(
                        "{rel}: written for two architectures of {target}"
                    )));
                }
            }
        }
        let mut requires = vec![pin(&host_norm)];
        requires.extend(
            opts.device_requires_dist
                .iter()
                .map(|r| r.replace(GFXARCH, target)),
        );
        let summary = format!("GPU device code of {name} {version} for {target}");
        let w = wheel_info.plan(&dist, &summary, &requires, entries.into_values().collect());
        device_wheels.push(DeviceWheel {
            target: target.clone(),
            architectures: archs,
            wheel: WheelFile {
                file: w.file.clone(),
                distribution: dist.clone(),
                bytes: 0,
                files: 0,
                requires,
            },
            kpacks,
            database_files: dbs,
        });
        planned.push(w);
    }

    // 7. Family wheels.
    let mut family_wheels = Vec::new();
    let mut skipped_groups = Vec::new();
    if let Some(cfg) = &opts.config {
        for g in &cfg.architecture_groups {
            let mut members: Vec<String> = Vec::new();
            let mut absent = Vec::new();
            for a in &g.architectures {
                let t = rocpack_bundle::base_arch(a).unwrap_or_else(|| a.clone());
                if by_target.contains_key(&t) {
                    if !members.contains(&t) {
                        members.push(t);
                    }
                } else {
                    absent.push(a.clone());
                }
            }
            let dist = dev_name(&g.name);
            if members.is_empty() {
                skipped_groups.push(g.name.clone());
                continue;
            }
            if let Some(other) = seen_names.get(&dist) {
                if other.starts_with("target ")
                    && members.len() == 1
                    && dist == dev_name(&members[0])
                {
                    // A group named like its only target: that wheel already serves it.
                    skipped_groups.push(g.name.clone());
                    continue;
                }
                return Err(usage(format!(
                    "family distribution `{dist}` of group {} collides with {other}",
                    g.name
                )));
            }
            seen_names.insert(dist.clone(), format!("group {}", g.name));
            let mut requires = vec![pin(&host_norm)];
            requires.extend(members.iter().map(|t| pin(&dev_name(t))));
            requires.extend(
                opts.device_requires_dist
                    .iter()
                    .filter(|r| !r.contains(GFXARCH))
                    .cloned(),
            );
            let summary = format!(
                "GPU device code of {name} {version} for {} ({})",
                g.name,
                members.join(", ")
            );
            let w = wheel_info.plan(&dist, &summary, &requires, Vec::new());
            family_wheels.push(FamilyWheel {
                group: g.name.clone(),
                members,
                absent,
                wheel: WheelFile {
                    file: w.file.clone(),
                    distribution: dist,
                    bytes: 0,
                    files: 0,
                    requires,
                },
            });
            planned.push(w);
        }
    }

    // 8. Host wheel.
    let mut extras: Vec<String> = by_target
        .keys()
        .chain(family_wheels.iter().map(|f| &f.group))
        .map(|n| opts.extra_names.extra(&names::normalize(n)))
        .collect();
    extras.push("device-all".into());
    let selector_data = match &opts.selector {
        Some(so) => {
            let sname = names::normalize(&dev_prefix);
            if let Some(other) = seen_names.get(&sname) {
                return Err(usage(format!(
                    "selector distribution `{sname}` collides with {other}"
                )));
            }
            let targets = by_target.keys().map(|t| (t.clone(), dev_name(t))).collect();
            extras.push("device".into());
            Some(selector::selector_data(
                &sname, &version, &host_norm, targets, so,
            )?)
        }
        None => None,
    };
    refuse_taken_extras(&metadata, &meta_path, &extras)?;
    let mut host_requires = Vec::new();
    let mut extra = |metadata: &mut Headers, extra: &str, dists: &[String]| {
        metadata.push("Provides-Extra", extra);
        for d in dists {
            let r = format!("{}; extra == \"{extra}\"", pin(d));
            host_requires.push(r.clone());
            metadata.push("Requires-Dist", r);
        }
    };
    for t in by_target.keys() {
        extra(
            &mut metadata,
            &opts.extra_names.extra(&names::normalize(t)),
            &[dev_name(t)],
        );
    }
    for f in &family_wheels {
        extra(
            &mut metadata,
            &opts.extra_names.extra(&names::normalize(&f.group)),
            std::slice::from_ref(&f.wheel.distribution),
        );
    }
    let all: Vec<String> = by_target.keys().map(|t| dev_name(t)).collect();
    extra(&mut metadata, "device-all", &all);
    if let Some(d) = &selector_data {
        extra(&mut metadata, "device", std::slice::from_ref(&d.name));
    }
    let host_file = host_name.file_name();

    // 9. Write every wheel into the staging directory, then commit. The
    //    host wheel is written straight from the input's table: files
    //    outside the overlay and unchanged files are copied compressed
    //    from the input; rewritten binaries come from the split; database
    //    files moved to device wheels are left out.
    let wopts = WriteOptions {
        time: zipio::zip_time(opts.source_date_epoch),
        level: opts.zip_level.clamp(0, 9),
    };
    let directory = opts.output_format == OutputFormat::Directory;
    let out_name = |file: &str| match opts.output_format {
        OutputFormat::Wheel => file.to_string(),
        OutputFormat::Directory => file.trim_end_matches(".whl").to_string(),
    };
    let inref = loaded.input.as_ref().map(|w| zipio::InputRef {
        wheel: w,
        digests: &digests,
    });
    let mut written = Vec::new();
    let mut out_names = Vec::new();
    {
        let n = out_name(&host_file);
        let mut sink = zipio::sink(
            directory,
            &staging.path().join(&n),
            &dist_info,
            inref,
            wopts,
            &tmp,
        )?;
        let groot = fsutil::join_rel(&split_out.join(&report.generic), &prefix);
        // Every file the split left in the generic tree is an extracted input file.
        for e in walk::walk(&groot)? {
            if let EntryKind::File { .. } = e.kind {
                let rel = wheel_rel(&e.rel, &overlay);
                if !files.find(&rel).is_some_and(|i| loaded.extracted(i)) {
                    return Err(usage(format!(
                        "{rel}: left by the split but not a file of the input (internal error)"
                    )));
                }
            }
        }
        let di = files.range_with_prefix(&format!("{dist_info}/"));
        let order = (0..di.start).chain(di.end..files.len()).chain(di.clone());
        for i in order {
            let k = files.name(i);
            if ["RECORD", "RECORD.jws", "RECORD.p7s"]
                .iter()
                .any(|n| k.strip_prefix(&dist_info).and_then(|r| r.strip_prefix('/')) == Some(*n))
            {
                continue;
            }
            if k == meta_path {
                sink.add(OutEntry {
                    mode: meta_mode,
                    ..bytes_entry(meta_path.clone(), metadata.render())
                })?;
                continue;
            }
            let below = below_overlay(k, &overlay);
            let (content, mode) = match below {
                Some(rel) if loaded.extracted(i) => {
                    let g = fsutil::join_rel(&groot, rel);
                    let m = match fs::symlink_metadata(&g) {
                        Ok(m) => m,
                        // Claimed by a database handler: in the device wheels.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(ioerr(&g, "stat", e)),
                    };
                    use std::os::unix::fs::PermissionsExt;
                    let mode = m.permissions().mode() & 0o777;
                    if rewritten.contains(k) || loaded.input.is_none() {
                        (Content::Disk(g), mode)
                    } else {
                        (loaded.content(i, &root), mode)
                    }
                }
                _ => (loaded.content(i, &root), files.rec(i).mode()),
            };
            sink.add(OutEntry {
                name: k.to_string(),
                content,
                mode,
                store: false,
            })?;
        }
        out_names.push(std::ffi::OsString::from(&n));
        written.push((n, sink.finish()?));
    }
    for p in planned {
        let n = out_name(&p.file);
        let sink = zipio::sink(
            directory,
            &staging.path().join(&n),
            &p.dist_info,
            inref,
            wopts,
            &tmp,
        )?;
        let w = zipio::write_all(sink, p.entries, &p.dist_info)?;
        out_names.push(std::ffi::OsString::from(&n));
        written.push((n, w));
    }
    let selector = match selector_data {
        Some(data) => {
            let mtime = opts.source_date_epoch.unwrap_or(315_532_800);
            let (file, bytes) = selector::write_sdist(&data, staging.path(), mtime)?;
            out_names.push(std::ffi::OsString::from(&file));
            Some(SelectorFile { file, bytes, data })
        }
        None => None,
    };
    if let Some(w) = &loaded.input {
        w.check_unchanged()?;
    }
    if let Some(c) = staging.conflicts(&out_names).into_iter().next() {
        return Err(usage(format!("{}: already exists", c.display())));
    }
    staging.commit().map_err(FsError::from)?;
    drop(loaded);
    drop(digests);
    drop(work);

    let mut it = written.into_iter();
    let mut fill = |w: &mut WheelFile| {
        if let Some((n, x)) = it.next() {
            w.file = n;
            w.bytes = x.bytes;
            w.files = x.files;
        }
    };
    let mut host = WheelFile {
        file: host_file,
        distribution: name.clone(),
        bytes: 0,
        files: 0,
        requires: host_requires,
    };
    fill(&mut host);
    for d in &mut device_wheels {
        fill(&mut d.wheel);
    }
    for f in &mut family_wheels {
        fill(&mut f.wheel);
    }
    Ok(WheelSplitReport {
        input: input_name.unwrap_or_else(|| opts.input.display().to_string()),
        input_bytes,
        distribution: name,
        version,
        overlay_root: overlay,
        host,
        fat_binaries,
        targets: by_target.keys().cloned().collect(),
        device_wheels,
        family_wheels,
        skipped_groups,
        compression: report.compression,
        output_format: match opts.output_format {
            OutputFormat::Wheel => "wheel".into(),
            OutputFormat::Directory => "directory".into(),
        },
        selector,
    })
}

struct WheelInfo<'a> {
    host_name: &'a WheelName,
    wheel_meta: &'a Headers,
    version: &'a str,
}

impl WheelInfo<'_> {
    /// A generated wheel: its files plus METADATA and WHEEL.
    fn plan(
        &self,
        dist: &str,
        summary: &str,
        requires: &[String],
        mut entries: Vec<OutEntry>,
    ) -> Planned {
        let wn = self.host_name.with_dist(dist, self.version);
        let dist_info = format!(
            "{}-{}.dist-info",
            names::file_component(dist),
            names::file_version(self.version)
        );
        entries.push(bytes_entry(
            format!("{dist_info}/METADATA"),
            metadata_text(dist, self.version, summary, requires),
        ));
        entries.push(bytes_entry(
            format!("{dist_info}/WHEEL"),
            wheel_file_text(self.wheel_meta),
        ));
        Planned {
            file: wn.file_name(),
            dist_info,
            entries,
        }
    }
}
