//! The device selector of a split wheel (`kpack split-wheel --selector`)
//! and the detection behind `kpack select-family --detect`.
//!
//! The selector is a source distribution named like the device prefix
//! (`fxpkg-device`, file `fxpkg_device-1.0.tar.gz`) whose in-tree PEP 517
//! backend (`rocpack_selector.py`, standard library only, `requires = []`)
//! computes `Requires-Dist` when pip or uv prepare its metadata: the device
//! wheels of the machine's GPUs. The host wheel's `device` extra requires
//! it. The order of choice, the sysfs parsing and the choice of wheels are
//! implemented twice, here and in the backend (`selector_backend.py`), and
//! tested on the same trees (`tests/selector.rs`); the data both read is
//! `selector.json`, written here.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::names;
use crate::WheelError;

/// The backend, written into every selector as `rocpack_selector.py`.
pub const BACKEND_PY: &str = include_str!("selector_backend.py");
/// Environment variable naming the targets (comma-separated).
pub const ENV_TARGETS: &str = "ROCPACK_GPU_TARGETS";
/// Environment variable replacing `/sys` (tests).
pub const ENV_SYSFS_ROOT: &str = "ROCPACK_SYSFS_ROOT";
/// kfd topology nodes, below the sysfs root.
pub const NODES_DIR: &str = "class/kfd/kfd/topology/nodes";
/// Most nodes read (a machine has a few dozen at most).
const MAX_NODES: usize = 4096;
/// Most bytes of a `properties` file read.
const MAX_PROPERTIES: u64 = 1 << 16;
/// Largest `selector.json` read.
const MAX_DATA: u64 = 1 << 20;
/// Largest selector sdist read.
const MAX_SDIST: u64 = 64 << 20;

/// How the host wheel names its per-target extras.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExtraNames {
    /// ROCm's: `device-gfx1100`, `device-<group>`.
    #[default]
    Rocm,
    /// PyTorch's: `gfx1100`, `<group>`.
    Pytorch,
}

impl ExtraNames {
    /// The extra of a target or group (already normalised).
    pub fn extra(self, name: &str) -> String {
        match self {
            ExtraNames::Rocm => format!("device-{name}"),
            ExtraNames::Pytorch => name.to_string(),
        }
    }
}

/// `--selector` options of a split.
#[derive(Debug, Clone, Default)]
pub struct SelectorOptions {
    /// Targets chosen when neither the environment nor sysfs names any
    /// (each must have a device wheel); empty: such an install fails.
    pub default_targets: Vec<String>,
}

/// `selector.json`: what the backend chooses from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SelectorData {
    /// Format version (1).
    pub selector: u32,
    /// Selector distribution (normalised).
    pub name: String,
    /// Its version (the host's).
    pub version: String,
    /// Host distribution (normalised).
    pub host: String,
    /// METADATA summary.
    pub summary: String,
    /// Target → device distribution.
    pub targets: BTreeMap<String, String>,
    /// Processor → generic target with a device wheel it falls back to.
    pub generic: BTreeMap<String, String>,
    /// Default targets.
    pub default: Vec<String>,
}

/// Where detected targets came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Source {
    /// `ROCPACK_GPU_TARGETS`.
    #[serde(rename = "ROCPACK_GPU_TARGETS")]
    Env,
    /// The kfd topology.
    #[serde(rename = "sysfs")]
    Sysfs,
    /// The selector's default.
    #[serde(rename = "default")]
    Default,
}

/// What detection found and, with selector data, what it picks (the JSON
/// of `kpack select-family --detect --json` and of the backend's
/// `--detect --json`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Explanation {
    /// Targets found and each has a device wheel.
    pub ok: bool,
    /// Where the targets came from.
    pub source: Source,
    /// Targets (base processors), in order, each once.
    pub targets: Vec<String>,
    /// Nodes skipped, and why.
    pub notes: Vec<String>,
    /// Device distributions picked.
    pub packages: Vec<String>,
    /// Targets without a device wheel.
    pub missing: Vec<String>,
    /// Targets with a device wheel.
    pub available: Vec<String>,
}

/// `gfx_target_version` (major·10000 + minor·100 + stepping) → target:
/// `110000` → `gfx1100`, `90010` → `gfx90a`.
pub fn target_of_version(v: u64) -> Option<String> {
    let (major, minor, step) = (v / 10000, (v / 100) % 100, v % 100);
    (v > 0 && minor <= 15 && step <= 15).then(|| format!("gfx{major}{minor:x}{step:x}"))
}

/// GPU targets of the kfd topology below `root` (a sysfs mount) in node
/// order (numeric names by number first), each once, and notes about
/// nodes that were skipped. No topology: none.
pub fn sysfs_targets(root: &Path) -> (Vec<String>, Vec<String>) {
    let dir = root.join(NODES_DIR);
    let (mut targets, mut notes) = (Vec::new(), Vec::new());
    let Ok(rd) = fs::read_dir(&dir) else {
        return (targets, notes);
    };
    let mut nodes: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    nodes.sort_by_cached_key(|n| match n.parse::<u64>() {
        Ok(x) if n.len() <= 18 && n.bytes().all(|b| b.is_ascii_digit()) => (0, x, String::new()),
        _ => (1, 0, n.clone()),
    });
    nodes.truncate(MAX_NODES);
    for n in nodes {
        let Some(text) = read_properties(&dir.join(&n).join("properties")) else {
            notes.push(format!("node {n}: cannot read properties"));
            continue;
        };
        let value = text
            .lines()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                ["gfx_target_version", v] => Some(v.to_string()),
                _ => None,
            })
            .next_back();
        let Some(value) = value else { continue };
        let number = (value.len() <= 9 && value.bytes().all(|b| b.is_ascii_digit()))
            .then(|| value.parse::<u64>().ok())
            .flatten();
        if number == Some(0) {
            continue; // a CPU node
        }
        match number.and_then(target_of_version) {
            None => notes.push(format!(
                "node {n}: gfx_target_version {value} is not a target"
            )),
            Some(t) if !targets.contains(&t) => targets.push(t),
            Some(_) => {}
        }
    }
    (targets, notes)
}

/// A regular file's first [`MAX_PROPERTIES`] bytes, as text.
fn read_properties(path: &Path) -> Option<String> {
    if !fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut b = Vec::new();
    fs::File::open(path)
        .ok()?
        .take(MAX_PROPERTIES)
        .read_to_end(&mut b)
        .ok()?;
    Some(String::from_utf8_lossy(&b).into_owned())
}

/// The order of choice: `env_targets` (the value of
/// `ROCPACK_GPU_TARGETS`) if not blank, else the kfd topology below
/// `sysfs_root`, else `default`. A bad spelling is an error.
pub fn detect(
    env_targets: Option<&str>,
    sysfs_root: &Path,
    default: &[String],
) -> Result<(Source, Vec<String>, Vec<String>), String> {
    if let Some(env) = env_targets.filter(|e| !e.trim().is_empty()) {
        let mut out: Vec<String> = Vec::new();
        for s in env.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let b = rocpack_bundle::base_arch(s).ok_or_else(|| {
                format!("{ENV_TARGETS}: `{s}` is not a GPU target (e.g. gfx1100, gfx90a:xnack-)")
            })?;
            if !out.contains(&b) {
                out.push(b);
            }
        }
        return Ok((Source::Env, out, Vec::new()));
    }
    let (found, notes) = sysfs_targets(sysfs_root);
    if found.is_empty() {
        Ok((Source::Default, default.to_vec(), notes))
    } else {
        Ok((Source::Sysfs, found, notes))
    }
}

/// [`detect`] with this process's environment.
pub fn detect_env(default: &[String]) -> Result<(Source, Vec<String>, Vec<String>), String> {
    let env = std::env::var(ENV_TARGETS).ok();
    let root = std::env::var_os(ENV_SYSFS_ROOT)
        .filter(|r| !r.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/sys"));
    detect(env.as_deref(), &root, default)
}

impl Source {
    /// How `kpack select-family --detect` names it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Env => ENV_TARGETS,
            Source::Sysfs => "sysfs",
            Source::Default => "default",
        }
    }
}

/// What detection finds in this process's environment and, with selector
/// data, what it picks (`kpack select-family --detect`).
pub fn explain_detected(data: Option<&SelectorData>) -> Result<Explanation, String> {
    let default = data.map(|d| d.default.clone()).unwrap_or_default();
    let found = detect_env(&default)?;
    Ok(match data {
        Some(d) => explain(d, found),
        None => Explanation {
            ok: !found.1.is_empty(),
            source: found.0,
            targets: found.1,
            notes: found.2,
            packages: Vec::new(),
            missing: Vec::new(),
            available: Vec::new(),
        },
    })
}

impl Explanation {
    /// Why this explanation is not `ok`, in one line (`None` when it is).
    pub fn failure(&self, with_selector: bool) -> Option<String> {
        if self.targets.is_empty() {
            let root = std::env::var(ENV_SYSFS_ROOT).unwrap_or_else(|_| "/sys".into());
            let default = if with_selector {
                ", and the selector has no default"
            } else {
                ""
            };
            Some(format!(
                "no GPU target: {ENV_TARGETS} is unset and no GPU node under {root}/{NODES_DIR}{default}"
            ))
        } else if !self.missing.is_empty() {
            Some(format!(
                "no device wheel for {}; device wheels exist for: {}",
                self.missing.join(", "),
                self.available.join(", ")
            ))
        } else {
            None
        }
    }
}

/// The device wheels for `targets`: each target's own, else its generic
/// target's; the rest are `missing`.
pub fn explain(
    data: &SelectorData,
    (source, targets, notes): (Source, Vec<String>, Vec<String>),
) -> Explanation {
    let mut packages: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    for t in &targets {
        let own = data.targets.get(t);
        let generic = data.generic.get(t).and_then(|g| data.targets.get(g));
        match own.or(generic) {
            Some(d) if !packages.contains(d) => packages.push(d.clone()),
            Some(_) => {}
            None => missing.push(t.clone()),
        }
    }
    Explanation {
        ok: !targets.is_empty() && missing.is_empty(),
        source,
        targets,
        notes,
        packages,
        missing,
        available: data.targets.keys().cloned().collect(),
    }
}

/// The selector data of a split: `targets` maps each target with a device
/// wheel to its distribution. Default targets must have a wheel (their own
/// or a generic one).
pub fn selector_data(
    name: &str,
    version: &str,
    host: &str,
    targets: BTreeMap<String, String>,
    opts: &SelectorOptions,
) -> Result<SelectorData, WheelError> {
    let mut generic = BTreeMap::new();
    for t in targets.keys() {
        for p in rocpack_bundle::generic_covers(t) {
            if !targets.contains_key(*p) {
                generic.insert(p.to_string(), t.clone());
            }
        }
    }
    let mut data = SelectorData {
        selector: 1,
        name: name.to_string(),
        version: version.to_string(),
        host: host.to_string(),
        summary: format!("Selects the GPU device wheels of {host} {version} for this machine"),
        targets,
        generic,
        default: Vec::new(),
    };
    let mut default = Vec::new();
    for s in &opts.default_targets {
        let b = rocpack_bundle::base_arch(s).ok_or_else(|| {
            WheelError::Usage(format!("--selector-default `{s}` is not a GPU target"))
        })?;
        if !default.contains(&b) {
            default.push(b);
        }
    }
    let e = explain(&data, (Source::Default, default.clone(), Vec::new()));
    if !e.missing.is_empty() {
        return Err(WheelError::Usage(format!(
            "--selector-default: no device wheel for {} (device wheels: {})",
            e.missing.join(", "),
            e.available.join(", ")
        )));
    }
    data.default = default;
    Ok(data)
}

/// The sdist's file name: `<name with _>-<version>.tar.gz` (PEP 625).
pub fn sdist_file_name(data: &SelectorData) -> String {
    format!(
        "{}-{}.tar.gz",
        names::file_component(&data.name),
        names::file_version(&data.version)
    )
}

/// The sdist's files: PKG-INFO, pyproject.toml, the backend, the data.
fn sdist_files(data: &SelectorData) -> Result<Vec<(&'static str, String)>, WheelError> {
    let pkg_info = format!(
        "Metadata-Version: 2.2\nName: {}\nVersion: {}\nSummary: {}\nDynamic: Requires-Dist\n\n",
        data.name, data.version, data.summary
    );
    let pyproject = "# rocpack device selector: the backend picks the device wheels of this\n\
                     # machine's GPUs when the metadata is prepared (no build requirements).\n\
                     [build-system]\nrequires = []\nbuild-backend = \"rocpack_selector\"\nbackend-path = [\".\"]\n";
    let json = serde_json::to_string_pretty(data)
        .map_err(|e| WheelError::Usage(format!("selector.json: {e}")))?;
    Ok(vec![
        ("PKG-INFO", pkg_info),
        ("pyproject.toml", pyproject.to_string()),
        ("rocpack_selector.py", BACKEND_PY.to_string()),
        ("selector.json", json + "\n"),
    ])
}

/// Writes the selector sdist into `dir`; returns its file name and size.
/// Deterministic: sorted entries, mode 0644, owner 0, time `mtime`, gzip
/// header without time or name.
pub fn write_sdist(
    data: &SelectorData,
    dir: &Path,
    mtime: u64,
) -> Result<(String, u64), WheelError> {
    let file = sdist_file_name(data);
    let path = dir.join(&file);
    let io = |what, e| WheelError::Io {
        path: path.clone(),
        what,
        error: e,
    };
    let out = fs::File::create_new(&path).map_err(|e| io("create", e))?;
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(out, flate2::Compression::new(9));
    let mut tar = tar::Builder::new(gz);
    let base = file.trim_end_matches(".tar.gz");
    for (name, text) in sdist_files(data)? {
        let mut h = tar::Header::new_ustar();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(mtime);
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, format!("{base}/{name}"), text.as_bytes())
            .map_err(|e| io("write", e))?;
    }
    let gz = tar.into_inner().map_err(|e| io("write", e))?;
    let mut f = gz.finish().map_err(|e| io("write", e))?;
    f.flush().map_err(|e| io("write", e))?;
    f.sync_all().map_err(|e| io("sync", e))?;
    let bytes = f.metadata().map_err(|e| io("stat", e))?.len();
    Ok((file, bytes))
}

/// Reads selector data from a selector sdist (`.tar.gz`), an unpacked one
/// (a directory holding `selector.json`) or a `selector.json`.
pub fn read_selector(path: &Path) -> Result<SelectorData, WheelError> {
    let io = |what, e| WheelError::Io {
        path: path.to_path_buf(),
        what,
        error: e,
    };
    let bad = |why: String| WheelError::Usage(format!("{}: {why}", path.display()));
    let meta = fs::metadata(path).map_err(|e| io("stat", e))?;
    let text = if meta.is_dir() {
        return read_selector(&path.join("selector.json"));
    } else if !meta.is_file() {
        return Err(bad("not a regular file or directory".into()));
    } else if path.to_string_lossy().ends_with(".tar.gz") {
        if meta.len() > MAX_SDIST {
            return Err(bad(format!("larger than {MAX_SDIST} bytes")));
        }
        let f = fs::File::open(path).map_err(|e| io("open", e))?;
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f.take(MAX_SDIST)));
        let mut found = None;
        for e in ar.entries().map_err(|e| io("read", e))? {
            let e = e.map_err(|e| io("read", e))?;
            let p = e.path().map_err(|e| io("read", e))?.into_owned();
            if p.components().count() == 2 && p.ends_with("selector.json") {
                let mut s = String::new();
                e.take(MAX_DATA)
                    .read_to_string(&mut s)
                    .map_err(|e| io("read", e))?;
                found = Some(s);
                break;
            }
        }
        found.ok_or_else(|| {
            bad("no <name>-<version>/selector.json: not a rocpack selector".into())
        })?
    } else {
        if meta.len() > MAX_DATA {
            return Err(bad(format!("larger than {MAX_DATA} bytes")));
        }
        fs::read_to_string(path).map_err(|e| io("read", e))?
    };
    let data: SelectorData =
        serde_json::from_str(&text).map_err(|e| bad(format!("selector.json: {e}")))?;
    if data.selector != 1 {
        return Err(bad(format!(
            "selector format {} (this kpack reads 1)",
            data.selector
        )));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_decode_as_the_driver_encodes() {
        assert_eq!(target_of_version(110000).as_deref(), Some("gfx1100"));
        assert_eq!(target_of_version(90402).as_deref(), Some("gfx942"));
        assert_eq!(target_of_version(90010).as_deref(), Some("gfx90a"));
        assert_eq!(target_of_version(110501).as_deref(), Some("gfx1151"));
        assert_eq!(target_of_version(0), None);
        assert_eq!(target_of_version(91600), None);
    }

    #[test]
    fn sysfs_nodes_in_numeric_order_cpu_and_bad_nodes_skipped() {
        let t = tempfile::tempdir().unwrap();
        let nodes = t.path().join(NODES_DIR);
        let node = |n: &str, text: Option<&str>| {
            fs::create_dir_all(nodes.join(n)).unwrap();
            if let Some(text) = text {
                fs::write(nodes.join(n).join("properties"), text).unwrap();
            }
        };
        node("10", Some("gfx_target_version 110000\n"));
        node("9", Some("gfx_target_version 90010\n"));
        node("0", Some("cpu_cores_count 8\ngfx_target_version 0\n"));
        node("1", None);
        node("2", Some("gfx_target_version 9x\n"));
        node("3", Some("gfx_target_version 90010\n"));
        let (targets, notes) = sysfs_targets(t.path());
        assert_eq!(targets, ["gfx90a", "gfx1100"]);
        assert_eq!(
            notes,
            [
                "node 1: cannot read properties",
                "node 2: gfx_target_version 9x is not a target"
            ]
        );
        assert_eq!(sysfs_targets(&t.path().join("absent")), (vec![], vec![]));
    }

    #[test]
    fn pytorch_extra_names_are_bare() {
        assert_eq!(ExtraNames::Rocm.extra("gfx1100"), "device-gfx1100");
        assert_eq!(ExtraNames::Pytorch.extra("gfx1100"), "gfx1100");
    }
}
