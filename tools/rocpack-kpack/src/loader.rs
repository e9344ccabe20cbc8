//! The runtime's code-object lookup (`kpack_load_code_object`), reproduced
//! so tools can check that every (binary, wrapper index, device arch) a split
//! tree promises resolves — and to which archive, target and TOC key.
//!
//! Algorithm (rocm-kpack runtime at e3483286e751):
//! 1. `lookup_key = kernel_name + "#" + co_index`.
//! 2. Candidate archives: if `ROCM_KPACK_PATH` is set, exactly its entries
//!    (no `@GFXARCH@` expansion). Otherwise the entries of
//!    `ROCM_KPACK_PATH_PREFIX` first, then each marker search path, resolved
//!    against the binary's directory unless absolute (weakly canonical);
//!    a path containing `@GFXARCH@` expands (first occurrence) for each
//!    requested arch in order, for each of its compatible targets
//!    ([`compatible_targets`] order), else is used as is.
//! 3. Each candidate that is an existing regular file and opens becomes a
//!    valid archive (see "Cache identity" below); failures are skipped
//!    and looked for again on the next lookup.
//!    None valid → `ARCHIVE_NOT_FOUND`.
//! 4. For each requested arch, for each compatible target, for each valid
//!    archive in candidate order that lists the target in `gfx_arches`: the
//!    kernel `(lookup_key, target)` if the archive has it, else the lookup
//!    **falls through** to the next archive (the 2026 runtime; before, the
//!    first archive listing the target ended the search).
//! 5. Error precedence: no valid archive → `ARCHIVE_NOT_FOUND`; archives
//!    listed a compatible target but none held the key → the last of those
//!    misses (`KERNEL_NOT_FOUND`); no archive listed any compatible target →
//!    `ARCH_NOT_FOUND`.
//!
//! Limits: at most [`MAX_SEARCH_PATHS`] marker paths (more → invalid
//! metadata). Candidates are never listed: they are generated one at a
//! time in the runtime's order (most specific target first) and each is
//! looked at once, so memory does not grow with their number (an ISA with
//! 16 features and 32 `@GFXARCH@` paths makes 2,097,152 of them; ROCm
//! builds that list, 251 MB). Every valid archive among them is searched
//! (ROCm's current loader; no per-lookup archive cap). The walk stops early
//! only where that cannot change the answer: at the first archive that
//! lists the first arch's most specific target and holds the key (the
//! first pair step 4 tries; no later candidate can come before it). If
//! that archive's kernel then fails to read, the lookup walks the rest.
//!
//! Cache identity (one rule for both schemes): an archive is cached under
//! the candidate path it was opened from (marker paths weakly canonical,
//! environment paths as given) and, for paths naming the same file
//! (device and inode), opened once. Once open, the cache serves the file
//! it opened (the reader holds it open and reads it with `pread`) for the
//! cache's life: replacing the path by rename or deleting it changes
//! nothing, as in ROCm. A path looked up again costs no system call, and
//! each marker path is made weakly canonical once per cache (ROCm
//! resolves it on every lookup; a directory symlink retargeted while the
//! process runs is therefore not followed for archives not yet opened). A
//! missing archive is looked for again on every lookup (one `stat`).
//!
//! One difference by design: archives are opened with this crate's strict
//! reader, so an archive the C++ reader would half-accept (unknown scheme,
//! missing `original_size`) is reported among the rejected candidates.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::ops::ControlFlow;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::format::GFXARCH_PLACEHOLDER;
use crate::marker::Marker;
use crate::reader::KpackReader;

/// Environment variable: explicit archive list (disables marker paths).
pub const ENV_KPACK_PATH: &str = "ROCM_KPACK_PATH";
/// Environment variable: archives searched before the marker paths.
pub const ENV_KPACK_PATH_PREFIX: &str = "ROCM_KPACK_PATH_PREFIX";
/// The prefix HSA agent ISA names carry (owned by `rocpack_bundle`).
pub use rocpack_bundle::AMDHSA_PREFIX;
/// Most marker search paths a lookup accepts.
pub const MAX_SEARCH_PATHS: usize = 32;
/// Most rejected candidates (exist, do not open) an `ArchiveNotFound`
/// error names; the rest are counted.
const MAX_REJECTED_LISTED: usize = 16;
/// Separator of the environment path lists on this platform.
pub const ENV_PATH_SEPARATOR: char = if cfg!(windows) { ';' } else { ':' };

/// Remove a leading `amdgcn-amd-amdhsa--` (only when something follows it).
/// Re-exported from `rocpack_bundle`, which owns target-ID handling.
pub use rocpack_bundle::strip_target_prefix;

/// The targets an agent ISA can load, most specific first, exactly in the
/// runtime's order: for `n` features, bitmask `2^n-1` down to `0`, bit
/// `n-1-i` selecting feature `i` (given order). `gfx942:sramecc+:xnack-` →
/// `gfx942:sramecc+:xnack-`, `gfx942:sramecc+`, `gfx942:xnack-`, `gfx942`.
/// The `amdgcn-amd-amdhsa--` prefix is stripped; empty features are dropped;
/// no generic fallback (the caller lists the generic ISA as its own arch).
/// Delegates to [`rocpack_bundle::runtime_compatible_targets`] (features
/// beyond the first 16 are ignored).
pub fn compatible_targets(isa: &str) -> Vec<String> {
    rocpack_bundle::runtime_compatible_targets(isa)
}

/// The loader's environment (`ROCM_KPACK_PATH`, `ROCM_KPACK_PATH_PREFIX`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoaderEnv {
    /// `ROCM_KPACK_PATH` entries when set (then marker paths are not used).
    pub kpack_path: Option<Vec<PathBuf>>,
    /// `ROCM_KPACK_PATH_PREFIX` entries, searched first.
    pub kpack_path_prefix: Vec<PathBuf>,
}

fn split_list(s: &str) -> Vec<PathBuf> {
    s.split(ENV_PATH_SEPARATOR)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .collect()
}

impl LoaderEnv {
    /// No overrides: only marker paths are searched.
    pub fn none() -> Self {
        LoaderEnv::default()
    }

    /// From raw variable values; an unset or empty variable counts as unset.
    pub fn from_values(kpack_path: Option<&str>, kpack_path_prefix: Option<&str>) -> Self {
        LoaderEnv {
            // A list of separators only is unset (ROCm: an empty override
            // list means "use the marker's paths").
            kpack_path: kpack_path
                .map(split_list)
                .filter(|v: &Vec<PathBuf>| !v.is_empty()),
            kpack_path_prefix: kpack_path_prefix.map(split_list).unwrap_or_default(),
        }
    }

    /// From this process's environment.
    pub fn from_process_env() -> Self {
        let get = |k: &str| std::env::var(k).ok();
        Self::from_values(
            get(ENV_KPACK_PATH).as_deref(),
            get(ENV_KPACK_PATH_PREFIX).as_deref(),
        )
    }
}

/// `std::filesystem::weakly_canonical`: canonicalise the longest existing
/// prefix, append the rest, normalise `.` and `..` lexically.
pub fn weakly_canonical(p: &Path) -> PathBuf {
    let comps: Vec<Component<'_>> = p.components().collect();
    for split in (0..=comps.len()).rev() {
        let head: PathBuf = comps.iter().take(split).collect();
        if head.as_os_str().is_empty() {
            continue;
        }
        if let Ok(c) = head.canonicalize() {
            let mut out = c;
            for comp in comps.iter().skip(split) {
                out.push(comp.as_os_str());
            }
            return lexically_normal(&out);
        }
    }
    lexically_normal(p)
}

fn lexically_normal(p: &Path) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) | Some(Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            other => out.push(other),
        }
    }
    out.iter().collect()
}

/// One marker search path as the runtime expands it: a path containing
/// `@GFXARCH@` becomes one path per requested arch × compatible target
/// (first occurrence replaced, [`compatible_targets`] order); any other
/// path is used as is. Not yet joined to the binary's directory.
pub fn expand_search_path(rel: &str, arch_list: &[&str]) -> Vec<String> {
    if rel.contains(GFXARCH_PLACEHOLDER) {
        arch_list
            .iter()
            .flat_map(|a| compatible_targets(a))
            .map(|t| rel.replacen(GFXARCH_PLACEHOLDER, &t, 1))
            .collect()
    } else {
        vec![rel.to_owned()]
    }
}

/// Step 4's order over archives that opened (`archives`, in candidate
/// order): for each requested arch, each of its compatible targets (most
/// specific first), each archive whose `gfx_arches` lists the target:
/// `(archive index, target, arch_list index)`. A lookup fetches the key from
/// these in turn and moves on after any per-archive failure. Used by
/// [`Loader::lookup`] (so by the runtime library and `kpack verify
/// --installed-tree`) and by `kpack verify` on split trees.
pub fn match_order(arch_list: &[&str], archives: &[&KpackReader]) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    for (ai, arch) in arch_list.iter().enumerate() {
        for target in compatible_targets(arch) {
            for (i, r) in archives.iter().enumerate() {
                if r.gfx_arches().contains(&target) {
                    out.push((i, target.clone(), ai));
                }
            }
        }
    }
    out
}

/// [`compatible_targets`] of `isa`, one at a time, in the same order,
/// without building the list (16 features make 65,536 targets).
fn for_each_target(isa: &str, f: &mut dyn FnMut(&str) -> ControlFlow<()>) -> ControlFlow<()> {
    let t = strip_target_prefix(isa);
    let mut parts = t.split(':');
    let processor = parts.next().unwrap_or("");
    let features: Vec<&str> = parts
        .filter(|f| !f.is_empty())
        .take(rocpack_bundle::RUNTIME_MAX_FEATURES)
        .collect();
    let n = features.len();
    let mut s = String::new();
    for mask in (0..(1u32 << n)).rev() {
        s.clear();
        s.push_str(processor);
        for (i, feat) in features.iter().enumerate() {
            if mask & (1 << (n - 1 - i)) != 0 {
                s.push(':');
                s.push_str(feat);
            }
        }
        f(&s)?;
    }
    ControlFlow::Continue(())
}

/// `path` split around its first `@GFXARCH@` (ROCm looks for it in the
/// resolved path, after joining and normalising).
fn split_placeholder(path: &Path) -> Option<(OsString, OsString)> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let b = path.as_os_str().as_bytes();
        let ph = GFXARCH_PLACEHOLDER.as_bytes();
        let at = b.windows(ph.len()).position(|w| w == ph)?;
        Some((
            OsString::from_vec(b[..at].to_vec()),
            OsString::from_vec(b[at + ph.len()..].to_vec()),
        ))
    }
    #[cfg(not(unix))]
    {
        let s = path.to_str()?;
        let (head, tail) = s.split_once(GFXARCH_PLACEHOLDER)?;
        Some((head.into(), tail.into()))
    }
}

/// Step 2: hand every candidate archive path to `visit`, one at a time, in
/// the runtime's order (ROCm's `kpack_load_code_object`): the
/// `ROCM_KPACK_PATH` entries when set; else the `ROCM_KPACK_PATH_PREFIX`
/// entries, then each marker path joined to `binary_dir` and resolved by
/// `canon`, its first `@GFXARCH@` replaced by each compatible target of
/// each requested arch (most specific first). Nothing is collected, so
/// memory does not depend on the number of candidates. An arch repeated
/// in `arch_list` is expanded once (the same paths again cannot change a
/// result). Stops when `visit` breaks.
fn walk_candidates(
    marker: &Marker,
    binary_dir: &Path,
    arch_list: &[&str],
    env: &LoaderEnv,
    canon: &mut dyn FnMut(&Path) -> PathBuf,
    visit: &mut dyn FnMut(&Path) -> ControlFlow<()>,
) -> ControlFlow<()> {
    if let Some(list) = &env.kpack_path {
        for p in list {
            visit(p)?;
        }
        return ControlFlow::Continue(());
    }
    for p in &env.kpack_path_prefix {
        visit(p)?;
    }
    let mut buf = OsString::new();
    for rel in &marker.kpack_search_paths {
        let p = Path::new(rel);
        let resolved = if p.is_absolute() {
            canon(p)
        } else {
            canon(&binary_dir.join(p))
        };
        let Some((head, tail)) = split_placeholder(&resolved) else {
            visit(&resolved)?;
            continue;
        };
        for (ai, arch) in arch_list.iter().enumerate() {
            if arch_list[..ai].contains(arch) {
                continue;
            }
            for_each_target(arch, &mut |t| {
                buf.clear();
                buf.push(&head);
                buf.push(t);
                buf.push(&tail);
                visit(Path::new(&buf))
            })?;
        }
    }
    ControlFlow::Continue(())
}

/// Candidate archive paths, in the runtime's order (step 2 above), with
/// repeats removed (first occurrence kept). This builds the whole list: for
/// diagnostics and tests; a lookup walks the candidates without it.
/// `arch_list` holds agent ISA names (with or without the
/// `amdgcn-amd-amdhsa--` prefix), highest priority first.
pub fn candidate_paths(
    marker: &Marker,
    binary_dir: &Path,
    arch_list: &[&str],
    env: &LoaderEnv,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let _ = walk_candidates(
        marker,
        binary_dir,
        arch_list,
        env,
        &mut weakly_canonical,
        &mut |p| {
            if seen.insert(p.to_path_buf()) {
                out.push(p.to_path_buf());
            }
            ControlFlow::Continue(())
        },
    );
    out
}

/// A successful lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The archive the kernel comes from (as listed among the candidates).
    pub archive: PathBuf,
    /// The matched target (arch key in the archive's TOC).
    pub target: String,
    /// The TOC binary key looked up.
    pub key: String,
    /// The requested arch (element of `arch_list`) that matched.
    pub requested_arch: String,
}

/// One (archive, target) pair a lookup tries (see [`Loader::lookup`]).
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The archive (as listed among the candidate paths).
    pub archive: PathBuf,
    /// The open archive (shared with the loader's cache).
    pub reader: Arc<KpackReader>,
    /// The target: a `gfx_arches` entry of the archive.
    pub target: String,
    /// The requested arch (element of `arch_list`) the target came from.
    pub requested_arch: String,
}

/// The archives a lookup tries, in order (see [`Loader::lookup`]).
#[derive(Clone, Debug)]
pub struct Lookup {
    /// The TOC key (`kernel_name#co_index`).
    pub key: String,
    /// Every (archive, target) pair, in the runtime's order; never empty.
    pub candidates: Vec<Candidate>,
    /// The valid archives, in candidate order.
    pub archives: Vec<PathBuf>,
    /// False when the candidate walk stopped early, at the first archive
    /// that lists the first arch's most specific target and holds the key
    /// (the first candidate then holds it). Should every candidate fail,
    /// ask [`Loader::lookup_all`] for the rest before reporting an error.
    pub complete: bool,
}

/// Step 5 of the runtime's lookup, the one fall-through loop of the
/// project: try `fetch` on every candidate in order; the first success wins
/// and any per-archive failure moves on to the next candidate. `Ok` holds the
/// candidate `fetch` accepted, `Err(Some(..))` the last candidate and its
/// failure (the runtime returns the last archive's error), `Err(None)` means
/// there was no candidate (`ARCH_NOT_FOUND`). [`Loader::resolve`], the
/// runtime library's `kpack_load_code_object` and `kpack verify` (which
/// resolves paths in a tree as installed, not on this machine, hence the
/// generic candidate) all go through it.
pub fn fall_through<C, T, E>(
    candidates: &[C],
    mut fetch: impl FnMut(&C) -> Result<T, E>,
) -> Result<(&C, T), Option<(&C, E)>> {
    let mut last = None;
    for c in candidates {
        match fetch(c) {
            Ok(v) => return Ok((c, v)),
            Err(e) => last = Some((c, e)),
        }
    }
    Err(last)
}

/// Why a lookup fails; [`LoadError::code`] gives the runtime's error number.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No arch requested (`KPACK_ERROR_INVALID_ARGUMENT` = 1).
    #[error("no device arch given")]
    NoArch,
    /// Marker unusable (`KPACK_ERROR_INVALID_METADATA` = 12).
    #[error("invalid marker: {0}")]
    InvalidMetadata(crate::Error),
    /// No candidate archive exists/opens (`KPACK_ERROR_ARCHIVE_NOT_FOUND` = 13).
    #[error(
        "no archive found among {candidates} candidates{}",
        fmt_rejected(rejected)
    )]
    ArchiveNotFound {
        /// How many candidate paths were tried.
        candidates: usize,
        /// Candidates that exist but did not open, with the reason (the
        /// first 16).
        rejected: Vec<(PathBuf, String)>,
    },
    /// No valid archive lists a compatible target (`KPACK_ERROR_ARCH_NOT_FOUND` = 14).
    #[error("no archive lists a target compatible with {requested:?} (archives: {archives:?})")]
    ArchNotFound {
        /// The requested arches.
        requested: Vec<String>,
        /// The valid archives that were searched.
        archives: Vec<PathBuf>,
    },
    /// The matched archive lacks the key (`KPACK_ERROR_KERNEL_NOT_FOUND` = 5).
    #[error("{}: no kernel {key:?} for target {target:?}", archive.display())]
    KernelNotFound {
        /// The archive that matched the arch.
        archive: PathBuf,
        /// The TOC key looked up.
        key: String,
        /// The matched target.
        target: String,
    },
    /// Reading the kernel failed (`KPACK_ERROR_DECOMPRESSION_FAILED` = 6).
    #[error("{0}")]
    Read(crate::Error),
}

fn fmt_rejected(r: &[(PathBuf, String)]) -> String {
    if r.is_empty() {
        String::new()
    } else {
        let v: Vec<String> = r
            .iter()
            .map(|(p, e)| format!("{}: {e}", p.display()))
            .collect();
        format!(" (rejected: {})", v.join("; "))
    }
}

impl LoadError {
    /// The runtime's `kpack_error_t` value for this failure.
    pub fn code(&self) -> i32 {
        match self {
            LoadError::NoArch => 1,
            LoadError::KernelNotFound { .. } => 5,
            LoadError::Read(_) => 6,
            LoadError::InvalidMetadata(_) => 12,
            LoadError::ArchiveNotFound { .. } => 13,
            LoadError::ArchNotFound { .. } => 14,
        }
    }
}

/// A lookup cache like the runtime's `kpack_cache`: opened archives are
/// kept per file (device and inode; failures are not cached, as in the runtime).
#[derive(Default)]
pub struct Loader {
    env: LoaderEnv,
    /// Open archives by the candidate path they were opened from (a hit
    /// costs no system call) and by file, so two paths to one file share
    /// a reader.
    opened: Opened,
    /// Marker paths (joined to the binary's directory) already made weakly
    /// canonical: resolved once per cache, so a steady-state lookup makes
    /// no `readlink`. Cleared when it holds [`MAX_RESOLVED`] paths.
    resolved: HashMap<PathBuf, PathBuf>,
}

/// Most remembered path resolutions per [`Loader`].
const MAX_RESOLVED: usize = 1 << 16;

/// The open archives of a [`Loader`], by candidate path and by file.
#[derive(Default)]
struct Opened {
    by_path: HashMap<PathBuf, Arc<KpackReader>>,
    by_file: HashMap<FileKey, Arc<KpackReader>>,
}

impl Opened {
    /// The archive at `p`: cached (no system call), or opened now when `p`
    /// is a regular file (`Ok(None)` when it is not there; a failure is
    /// not remembered, so the next lookup looks again, as in ROCm).
    fn open(&mut self, p: &Path) -> Result<Option<Arc<KpackReader>>, String> {
        if let Some(r) = self.by_path.get(p) {
            return Ok(Some(Arc::clone(r)));
        }
        let Ok(meta) = std::fs::metadata(p) else {
            return Ok(None);
        };
        if !meta.is_file() {
            return Ok(None);
        }
        let key = file_key(p, &meta);
        let r = match self.by_file.get(&key) {
            Some(r) => Arc::clone(r),
            None => {
                let r = Arc::new(KpackReader::open_file(p).map_err(|e| e.to_string())?);
                self.by_file.insert(key, Arc::clone(&r));
                r
            }
        };
        self.by_path.insert(p.to_path_buf(), Arc::clone(&r));
        Ok(Some(r))
    }
}

/// Which file an archive is: on Unix its device and inode (one `stat`, the
/// same file through any path, symlink or `..`, with none of the `readlink`
/// calls of `canonicalize`), elsewhere its canonical path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileKey {
    #[cfg_attr(not(unix), allow(dead_code))]
    Inode(u64, u64),
    #[cfg_attr(unix, allow(dead_code))]
    Path(PathBuf),
}

#[cfg(unix)]
fn file_key(_p: &Path, meta: &std::fs::Metadata) -> FileKey {
    use std::os::unix::fs::MetadataExt;
    FileKey::Inode(meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn file_key(p: &Path, _meta: &std::fs::Metadata) -> FileKey {
    FileKey::Path(p.canonicalize().unwrap_or_else(|_| p.to_path_buf()))
}

impl Loader {
    /// A loader with the given environment.
    pub fn new(env: LoaderEnv) -> Self {
        Loader {
            env,
            opened: Opened::default(),
            resolved: HashMap::new(),
        }
    }

    /// The environment in use.
    pub fn env(&self) -> &LoaderEnv {
        &self.env
    }

    /// Which archive, target and key the runtime would use for wrapper
    /// `co_index` of a binary in `binary_dir` with this marker, on a device
    /// whose arch list (priority order, e.g. `[isa, generic]`) is `arch_list`.
    pub fn resolve(
        &mut self,
        marker: &Marker,
        binary_dir: &Path,
        co_index: u64,
        arch_list: &[&str],
    ) -> Result<Resolved, LoadError> {
        self.resolve_inner(marker, binary_dir, co_index, arch_list, |_, _, _| Ok(()))
            .map(|(r, ())| r)
    }

    /// Like [`Loader::resolve`], taking the raw marker bytes (decoded as the runtime does).
    pub fn resolve_bytes(
        &mut self,
        marker: &[u8],
        binary_dir: &Path,
        co_index: u64,
        arch_list: &[&str],
    ) -> Result<Resolved, LoadError> {
        let m = Marker::decode(marker).map_err(LoadError::InvalidMetadata)?;
        self.resolve(&m, binary_dir, co_index, arch_list)
    }

    /// Resolve and return the code object bytes (an archive whose kernel
    /// does not read falls through to the next, as in the runtime).
    pub fn load(
        &mut self,
        marker: &Marker,
        binary_dir: &Path,
        co_index: u64,
        arch_list: &[&str],
    ) -> Result<(Resolved, Vec<u8>), LoadError> {
        self.resolve_inner(marker, binary_dir, co_index, arch_list, |r, key, target| {
            r.get(key, target)
                .map(std::borrow::Cow::into_owned)
                .map_err(LoadError::Read)
        })
    }

    /// Steps 1–5: [`Loader::lookup`], then [`fall_through`] the candidates
    /// with `fetch` (called only on archives holding the key); when they all
    /// fail after a walk that stopped early, again over every candidate.
    fn resolve_inner<T>(
        &mut self,
        marker: &Marker,
        binary_dir: &Path,
        co_index: u64,
        arch_list: &[&str],
        fetch: impl Fn(&KpackReader, &str, &str) -> Result<T, LoadError>,
    ) -> Result<(Resolved, T), LoadError> {
        let mut lookup = self.lookup(marker, binary_dir, co_index, arch_list)?;
        if !lookup.complete && Self::try_all(&lookup, &fetch).is_err() {
            lookup = self.lookup_all(marker, binary_dir, co_index, arch_list)?;
        }
        let key = lookup.key.clone();
        let (c, v) = Self::try_all(&lookup, &fetch).map_err(|e| match e {
            Some(e) => e,
            None => LoadError::ArchNotFound {
                requested: arch_list.iter().map(|s| (*s).to_owned()).collect(),
                archives: lookup.archives.clone(),
            },
        })?;
        Ok((
            Resolved {
                archive: c.archive.clone(),
                target: c.target.clone(),
                key,
                requested_arch: c.requested_arch.clone(),
            },
            v,
        ))
    }

    /// [`fall_through`] `lookup`'s candidates with `fetch` (a missing key is
    /// `KernelNotFound`); `Err(None)` when there is no candidate.
    fn try_all<'a, T>(
        lookup: &'a Lookup,
        fetch: &impl Fn(&KpackReader, &str, &str) -> Result<T, LoadError>,
    ) -> Result<(&'a Candidate, T), Option<LoadError>> {
        let key = &lookup.key;
        fall_through(&lookup.candidates, |c| {
            if c.reader.entry(key, &c.target).is_none() {
                return Err(LoadError::KernelNotFound {
                    archive: c.archive.clone(),
                    key: key.clone(),
                    target: c.target.clone(),
                });
            }
            fetch(&c.reader, key, &c.target)
        })
        .map_err(|e| e.map(|(_, e)| e))
    }

    /// Steps 1–4 without fetching: the lookup key and every (archive,
    /// target) pair the runtime tries for it, in its order (each requested
    /// arch, each compatible target, each valid archive listing the target).
    /// The caller tries them in turn and moves on after any per-archive
    /// failure; `candidates` is never empty (`ARCH_NOT_FOUND` otherwise).
    /// The candidate walk stops at the first archive that lists the first
    /// arch's most specific target and holds the key (`complete` false):
    /// should every pair fail then, [`Loader::lookup_all`] gives the rest.
    /// [`Loader::resolve`] is this plus "the first archive holding the key".
    pub fn lookup(
        &mut self,
        marker: &Marker,
        binary_dir: &Path,
        co_index: u64,
        arch_list: &[&str],
    ) -> Result<Lookup, LoadError> {
        self.lookup_walk(marker, binary_dir, co_index, arch_list, true)
    }

    /// [`Loader::lookup`] over every candidate (never stops early).
    pub fn lookup_all(
        &mut self,
        marker: &Marker,
        binary_dir: &Path,
        co_index: u64,
        arch_list: &[&str],
    ) -> Result<Lookup, LoadError> {
        self.lookup_walk(marker, binary_dir, co_index, arch_list, false)
    }

    fn lookup_walk(
        &mut self,
        marker: &Marker,
        binary_dir: &Path,
        co_index: u64,
        arch_list: &[&str],
        stop_early: bool,
    ) -> Result<Lookup, LoadError> {
        // An empty arch list is not an error here (ROCm skips NULL arch
        // entries, so a list of only NULLs searches the paths without
        // `@GFXARCH@` and answers ARCHIVE_NOT_FOUND or ARCH_NOT_FOUND);
        // the C ABI refuses `arch_count == 0` itself.
        if marker.kpack_search_paths.len() > MAX_SEARCH_PATHS {
            return Err(LoadError::InvalidMetadata(crate::Error::new(
                crate::ErrorKind::Invalid {
                    field: "kpack_search_paths".into(),
                    message: format!(
                        "{} paths, at most {MAX_SEARCH_PATHS} are accepted",
                        marker.kpack_search_paths.len()
                    ),
                },
            )));
        }
        let key = marker.lookup_key(co_index);
        // The pair step 4 tries first: the first arch's most specific target.
        let mut first = None;
        if let (true, Some(a)) = (stop_early, arch_list.first()) {
            let _ = for_each_target(a, &mut |t| {
                first = Some(t.to_owned());
                ControlFlow::Break(())
            });
        }
        let Loader {
            env,
            opened,
            resolved,
        } = self;
        let mut canon = |p: &Path| {
            if let Some(c) = resolved.get(p) {
                return c.clone();
            }
            if resolved.len() >= MAX_RESOLVED {
                resolved.clear();
            }
            let c = weakly_canonical(p);
            resolved.insert(p.to_path_buf(), c.clone());
            c
        };
        let mut valid: Vec<(PathBuf, Arc<KpackReader>)> = Vec::new();
        let mut seen: HashSet<*const KpackReader> = HashSet::new();
        let mut rejected = Vec::new();
        let mut tried = 0usize;
        let flow = walk_candidates(marker, binary_dir, arch_list, env, &mut canon, &mut |c| {
            tried += 1;
            match opened.open(c) {
                // The same file through another path adds nothing.
                Ok(Some(r)) if seen.insert(Arc::as_ptr(&r)) => {
                    let hit = first.as_deref().is_some_and(|t| {
                        r.gfx_arches().iter().any(|a| a == t) && r.entry(&key, t).is_some()
                    });
                    valid.push((c.to_path_buf(), r));
                    if hit {
                        return ControlFlow::Break(());
                    }
                }
                Ok(_) => {}
                Err(e) if rejected.len() < MAX_REJECTED_LISTED => {
                    rejected.push((c.to_path_buf(), e));
                }
                Err(_) => {}
            }
            ControlFlow::Continue(())
        });
        if valid.is_empty() {
            return Err(LoadError::ArchiveNotFound {
                candidates: tried,
                rejected,
            });
        }
        let readers: Vec<&KpackReader> = valid.iter().map(|(_, r)| r.as_ref()).collect();
        let out: Vec<Candidate> = match_order(arch_list, &readers)
            .into_iter()
            .map(|(i, target, ai)| Candidate {
                archive: valid[i].0.clone(),
                reader: Arc::clone(&valid[i].1),
                target,
                requested_arch: arch_list[ai].to_owned(),
            })
            .collect();
        if out.is_empty() {
            return Err(LoadError::ArchNotFound {
                requested: arch_list.iter().map(|s| (*s).to_owned()).collect(),
                archives: valid.into_iter().map(|(p, _)| p).collect(),
            });
        }
        Ok(Lookup {
            key,
            candidates: out,
            archives: valid.into_iter().map(|(p, _)| p).collect(),
            complete: flow.is_continue(),
        })
    }
}
