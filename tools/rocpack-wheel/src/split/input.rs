//! Phases 1–3 of a wheel split: the input loaded and checked against its
//! RECORD, its METADATA and WHEEL read, the overlay root checked.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::str::FromStr;

use rocpack_artifacts::fsutil;
use rocpack_artifacts::walk::{self, EntryKind};

use super::{ioerr, usage, WheelSplitOptions, MAX_META};
use crate::meta::{FileHasher, HashAlgo, Headers};
use crate::names::{self, WheelName};
use crate::zip::central::Table;
use crate::zip::{self, Content, InputWheel};
use crate::WheelError;

/// The loaded input.
pub(super) struct Loaded {
    /// The wheel; `None` for a directory.
    pub(super) input: Option<InputWheel>,
    /// The files of a directory input (all copied below the work root).
    pub(super) dir_files: Table,
    /// The wheel's file name; `None` for a directory.
    pub(super) name: Option<String>,
    /// Its size (sum of file sizes for a directory).
    pub(super) bytes: u64,
    /// Its `.dist-info` directory.
    pub(super) dist_info: String,
}

impl Loaded {
    /// Its files, sorted by name: 16 bytes per file plus its name.
    pub(super) fn files(&self) -> &Table {
        match &self.input {
            Some(w) => &w.table,
            None => &self.dir_files,
        }
    }

    /// Whether file `i` is below the work root.
    pub(super) fn extracted(&self, i: usize) -> bool {
        self.files().rec(i).bits & zip::EXTRACTED != 0
    }

    /// The bytes of file `i` as an output entry's content: copied
    /// compressed from the input wheel, or the file below `root`.
    pub(super) fn content(&self, i: usize, root: &Path) -> Content {
        match &self.input {
            Some(_) => Content::Input(i),
            None => Content::Disk(zip::join(root, self.files().name(i))),
        }
    }

    /// A small text file of the input (METADATA, WHEEL).
    fn read_text(&self, root: &Path, name: &str, limit: u64) -> Result<String, WheelError> {
        let b = match &self.input {
            Some(w) => w
                .read_entry(name, limit)?
                .ok_or_else(|| usage(format!("{name}: missing")))?,
            None => {
                let p = zip::join(root, name);
                fsutil::read_bounded(&p, limit).map_err(|e| ioerr(&p, "read", e))?
            }
        };
        String::from_utf8(b).map_err(|_| usage(format!("{name}: not UTF-8")))
    }
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
pub(super) fn below_overlay<'a>(k: &'a str, overlay: &str) -> Option<&'a str> {
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
pub(super) fn load_input(
    opts: &WheelSplitOptions,
    root: &Path,
    tmp: &Path,
    digests: &zip::Digests,
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
                    let dst = zip::join(root, &e.rel);
                    if let Some(p) = dst.parent() {
                        fs::create_dir_all(p).map_err(|er| ioerr(p, "create directory", er))?;
                    }
                    fsutil::copy_file(&e.path(&opts.input), &dst)?;
                    zip::set_mode(&dst, mode)?;
                    total += size;
                    files
                        .push(&e.rel, u64::MAX, (mode & 0o777) as u16 | zip::EXTRACTED)
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
        let rp = zip::join(root, &record_path);
        let size = fs::metadata(&rp).map_err(|e| ioerr(&rp, "stat", e))?.len();
        if size > zip::MAX_RECORD {
            return Err(usage(format!(
                "{}: {record_path} is {size} bytes; at most {} are read",
                opts.input.display(),
                zip::MAX_RECORD
            )));
        }
        let text = std::io::BufReader::new(fs::File::open(&rp).map_err(|e| ioerr(&rp, "open", e))?);
        zip::check_record(&mut files, text, &record_path, &opts.input, |t, i, row| {
            let (digest, n) = hash_file(
                &zip::join(root, t.name(i)),
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
        if rocpack_image::detect(head).is_splittable() {
            return true;
        }
        below_overlay(k, &overlay)
            .is_some_and(|rel| rocpack_artifacts::databases::classify(&databases, rel).is_some())
    };
    zip::verify(
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
    rocpack_image::ImageFile::open(path)
        .and_then(|f| f.splits_device_code())
        .map_err(|e| ioerr(path, "read", e))
}

/// The input's checked METADATA and WHEEL (phase 2).
pub(super) struct InputMeta {
    /// `<dist-info>/METADATA`.
    pub(super) meta_path: String,
    /// Its mode in the input.
    pub(super) meta_mode: u32,
    /// METADATA, to gain the host wheel's extras.
    pub(super) metadata: Headers,
    /// WHEEL.
    pub(super) wheel_meta: Headers,
    /// METADATA `Name`.
    pub(super) name: String,
    /// METADATA `Version`.
    pub(super) version: String,
    /// The host wheel's name: the input's, or made from WHEEL's tags.
    pub(super) host_name: WheelName,
}

/// Phase 2: reads and checks METADATA and WHEEL, and the wheel file
/// name against them.
pub(super) fn read_meta(loaded: &Loaded, root: &Path) -> Result<InputMeta, WheelError> {
    let files = loaded.files();
    let dist_info = &loaded.dist_info;
    let meta_path = format!("{dist_info}/METADATA");
    let wheel_path = format!("{dist_info}/WHEEL");
    let meta_mode = files
        .find(&meta_path)
        .map(|i| files.rec(i).mode())
        .ok_or_else(|| usage(format!("{meta_path}: missing")))?;
    if files.find(&wheel_path).is_none() {
        return Err(usage(format!("{wheel_path}: missing")));
    }
    let metadata = Headers::parse(&loaded.read_text(root, &meta_path, MAX_META)?)
        .map_err(|e| usage(format!("{meta_path}: {e}")))?;
    let wheel_meta = Headers::parse(&loaded.read_text(root, &wheel_path, MAX_META)?)
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
    let host_name = match &loaded.name {
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
    if loaded.name.is_some() {
        check_file_version(&host_name, &parsed_version, &meta_path, &version)?;
    }
    Ok(InputMeta {
        meta_path,
        meta_mode,
        metadata,
        wheel_meta,
        name,
        version,
        host_name,
    })
}

/// The wheel file name's version must equal METADATA's (PEP 440).
fn check_file_version(
    host_name: &WheelName,
    parsed_version: &pep440_rs::Version,
    meta_path: &str,
    version: &str,
) -> Result<(), WheelError> {
    let fv = &host_name.version;
    match pep440_rs::Version::from_str(fv) {
        Ok(v) if v == *parsed_version => Ok(()),
        Ok(_) => Err(usage(format!(
            "wheel file name `{}` has version `{fv}`, {meta_path} has Version `{version}`",
            host_name.file_name()
        ))),
        Err(e) => Err(usage(format!(
            "wheel file name `{}`: version `{fv}` is not a PEP 440 version ({e})",
            host_name.file_name()
        ))),
    }
}

/// Phase 3: the overlay root, checked: a plain relative directory of the
/// wheel, not the `.dist-info`, with every fat binary below it. Empty for
/// the wheel root.
pub(super) fn check_overlay(
    opts: &WheelSplitOptions,
    loaded: &Loaded,
    root: &Path,
) -> Result<String, WheelError> {
    let overlay = overlay_of(opts);
    if overlay.is_empty() {
        return Ok(overlay);
    }
    let files = loaded.files();
    if !zip::is_plain_rel(&overlay) {
        return Err(usage(format!(
            "--overlay-root `{overlay}` is not a plain relative path"
        )));
    }
    if overlay.split('/').next() == Some(loaded.dist_info.as_str()) {
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
        if !k.starts_with(&pre) && has_device_code(&zip::join(root, k))? {
            return Err(usage(format!(
                "{k}: fat binary outside --overlay-root `{overlay}` (its device code would stay in the host wheel)"
            )));
        }
    }
    Ok(overlay)
}
