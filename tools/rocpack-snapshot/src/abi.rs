//! ABI-drift guard for prebuilt snapshots.
//!
//! A prebuilt `.a` freezes the ABI of everything it was compiled against
//! (reference §2.1: the reason rcclx gave up prebuilt snapshots). `snapctl
//! create --abi-input FILE…` records the sha256 of those files (headers and
//! libraries of the dependencies) in `metadata.txt` (`ABI inputs:` section)
//! and in the generated checksums dict; at build time the rules run
//! [`check`] (`snapctl abi-check`) on the dependency files the build would
//! use now, before the archive can reach a link.

use crate::error::{Error, Result};
use crate::hash;
use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Largest ABI input hashed (headers and static libraries of dependencies).
pub const MAX_ABI_INPUT_BYTES: u64 = 4 << 30;

/// Normalises a recorded ABI-input path: relative, `/`-separated, no `.`/`..`.
pub fn normalize_path(p: &str) -> std::result::Result<String, String> {
    let mut parts = Vec::new();
    for c in Path::new(p).components() {
        match c {
            Component::Normal(s) => parts.push(
                s.to_str()
                    .ok_or_else(|| format!("{p:?}: not valid UTF-8"))?
                    .to_string(),
            ),
            Component::CurDir => {}
            _ => {
                return Err(format!(
                    "ABI input {p:?}: expected a path relative to the workspace (no `..`, not absolute)"
                ))
            }
        }
    }
    let s = parts.join("/");
    if s.is_empty() || s.contains(['\n', '\r']) || s.ends_with(':') {
        return Err(format!("ABI input {p:?}: not a usable path"));
    }
    Ok(s)
}

/// `--abi-input FILE` values → (recorded path, file to hash). The recorded
/// path is `FILE` relative to `base` (the workspace root; default: the
/// working directory), which is how the rules name the dependency's files.
/// `PATH=FILE` (when no file is named like the whole value) records `FILE`
/// as `PATH`: a generated header lives in the build's output tree, not at
/// its path under the workspace.
pub fn resolve_inputs(files: &[PathBuf], base: Option<&Path>) -> Result<Vec<(String, PathBuf)>> {
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    let base = base.map_or(cwd.clone(), |b| {
        if b.is_absolute() {
            b.to_path_buf()
        } else {
            cwd.join(b)
        }
    });
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for f in files {
        if let Some((path, file)) = f
            .to_str()
            .filter(|_| std::fs::symlink_metadata(f).is_err())
            .and_then(|v| v.split_once('='))
            .filter(|(a, b)| !a.is_empty() && !b.is_empty())
        {
            let name = normalize_path(path).map_err(Error::Usage)?;
            if out.iter().any(|(n, _)| *n == name) {
                return Err(Error::Usage(format!("--abi-input {name} is given twice")));
            }
            out.push((name, cwd.join(file)));
            continue;
        }
        let abs = if f.is_absolute() {
            f.clone()
        } else {
            cwd.join(f)
        };
        let rel = abs.strip_prefix(&base).map_err(|_| {
            Error::Usage(format!(
                "--abi-input {}: not under the ABI base {} (pass --abi-base WORKSPACE_ROOT)",
                f.display(),
                base.display()
            ))
        })?;
        let name = normalize_path(&rel.to_string_lossy()).map_err(Error::Usage)?;
        if out.iter().any(|(n, _)| *n == name) {
            return Err(Error::Usage(format!("--abi-input {name} is given twice")));
        }
        out.push((name, abs));
    }
    Ok(out)
}

/// sha256 of each input (regular files only, bounded).
pub fn digests(inputs: &[(String, PathBuf)]) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (name, p) in inputs {
        let d = match hash::sha256_file_limited(p, Some(MAX_ABI_INPUT_BYTES))? {
            Ok((d, _)) => d,
            Err(_) => {
                return Err(Error::input(
                    p,
                    None,
                    format!("ABI input larger than {MAX_ABI_INPUT_BYTES} bytes"),
                ))
            }
        };
        out.insert(name.clone(), d);
    }
    Ok(out)
}

/// What the message of a failed check says about the snapshot.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub library: String,
    pub channel: String,
    pub version: String,
    /// Command that re-cuts the snapshot.
    pub recut: String,
    /// What to rebuild before the re-cut (e.g. `bazel build //libs:mylib_source`).
    pub rebuild: String,
    /// Command going back to the previous snapshot (stable only), or empty.
    pub rollback: String,
    /// How to build from source instead (e.g. `--//libs:mylib_channel=dev`).
    pub dev: String,
    /// The commits the snapshot records (its metadata's `Commit Hashes:`).
    pub commits: Vec<(String, String)>,
    /// Where the recovery is documented, or empty.
    pub docs: String,
}

impl Context {
    /// The ways out of a drift, numbered, one per line.
    fn ways_out(&self) -> String {
        let lib = if self.library.is_empty() {
            "the library"
        } else {
            &self.library
        };
        let mut w = vec![
            "re-cut this snapshot against the current dependencies (its headers and commits are kept):"
                .to_string(),
        ];
        let from = if self.commits.is_empty() {
            "the source it was built from".to_string()
        } else {
            format!(
                "the source of the commits it records ({})",
                self.commits
                    .iter()
                    .map(|(n, h)| format!("{n}={h}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        w[0].push_str(&format!(
            "\n       first rebuild {lib} from {from}, against the current dependencies{}",
            if self.rebuild.is_empty() {
                String::new()
            } else {
                format!(": {}", self.rebuild)
            }
        ));
        w[0].push_str(&format!(
            "\n       then: {}",
            if self.recut.is_empty() {
                "snapctl recut --snapshots-root ROOT --channel CHANNEL --version VERSION --artifact REBUILT_ARCHIVE --abi-base WORKSPACE_ROOT"
            } else {
                &self.recut
            }
        ));
        w.push(format!(
            "build {lib} from source: {}",
            if self.dev.is_empty() {
                "select the dev channel"
            } else {
                &self.dev
            }
        ));
        if !self.rollback.is_empty() {
            w.push(format!(
                "go back to the last-stable snapshot: {}",
                self.rollback
            ));
        }
        let mut out = String::from("Ways out");
        if !self.docs.is_empty() {
            out.push_str(&format!(" (documented in {})", self.docs));
        }
        out.push(':');
        for (i, l) in w.iter().enumerate() {
            out.push_str(&format!("\n  {}. {l}", i + 1));
        }
        out
    }
}

/// Compares the recorded digests with the files the build uses now. `Ok(None)`:
/// all equal. `Ok(Some(message))`: every changed, missing and unrecorded file,
/// then the two ways out.
pub fn check(
    expected: &BTreeMap<String, String>,
    actual: &[(String, PathBuf)],
    ctx: &Context,
) -> Result<Option<String>> {
    let now = digests(actual)?;
    let mut lines = Vec::new();
    for (name, want) in expected {
        match now.get(name) {
            Some(got) if got == want => {}
            Some(got) => lines.push(format!(
                "  changed: {name} (snapshot built against sha256 {want}, now {got})"
            )),
            None => lines.push(format!(
                "  missing: {name} (snapshot built against sha256 {want}; the dependency no longer provides it)"
            )),
        }
    }
    for (name, got) in &now {
        if !expected.contains_key(name) {
            lines.push(format!(
                "  new: {name} (sha256 {got}; not recorded when the snapshot was cut)"
            ));
        }
    }
    if lines.is_empty() {
        return Ok(None);
    }
    let what = [ctx.library.as_str(), ctx.channel.as_str()]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Some(format!(
        "ABI drift: the {what} snapshot{} was compiled against dependency files that have changed since; linking it could silently compute wrong results:\n{}\n{}",
        if ctx.version.is_empty() {
            String::new()
        } else {
            format!(" of ROCm {}", ctx.version)
        },
        lines.join("\n"),
        ctx.ways_out(),
    )))
}

fn pair<'a>(flag: &str, v: &'a str) -> Result<(&'a str, &'a str)> {
    v.rsplit_once('=')
        .filter(|(a, b)| !a.is_empty() && !b.is_empty())
        .ok_or_else(|| Error::Usage(format!("{flag} {v:?}: expected PATH=VALUE")))
}

/// A path given twice is refused: which value would count is not the
/// caller's to guess (and the answer must not depend on argument order).
fn twice(flag: &str, name: &str) -> Error {
    Error::Usage(format!(
        "{flag} {name} is given twice (paths are compared after normalisation); give each path once"
    ))
}

/// `snapctl abi-check`: parses `--expect PATH=SHA256` / `--input PATH=FILE`,
/// prints the drift message on stderr and returns 1 when anything differs;
/// writes `stamp` when nothing does. With `report`, the verdict (`OK …` or
/// the message) goes to that file and the exit is 0 either way.
pub fn run_check(
    expect: &[String],
    inputs: &[String],
    ctx: &Context,
    stamp: Option<&Path>,
    report: Option<&Path>,
) -> Result<u8> {
    let mut expected = BTreeMap::new();
    for e in expect {
        let (p, d) = pair("--expect", e)?;
        if !crate::metadata::is_hex(d, 64) {
            return Err(Error::Usage(format!(
                "--expect {e:?}: expected PATH=<64 hex sha256>"
            )));
        }
        let name = normalize_path(p).map_err(Error::Usage)?;
        if expected
            .insert(name.clone(), d.to_ascii_lowercase())
            .is_some()
        {
            return Err(twice("--expect", &name));
        }
    }
    let mut actual = Vec::new();
    for i in inputs {
        // PATH=FILE: FILE may contain '=' less often than PATH; split on the first.
        let (p, f) = i
            .split_once('=')
            .filter(|(a, b)| !a.is_empty() && !b.is_empty())
            .ok_or_else(|| Error::Usage(format!("--input {i:?}: expected PATH=FILE")))?;
        let name = normalize_path(p).map_err(Error::Usage)?;
        if actual.iter().any(|(n, _)| *n == name) {
            return Err(twice("--input", &name));
        }
        actual.push((name, PathBuf::from(f)));
    }
    let verdict = check(&expected, &actual, ctx)?;
    if let Some(r) = report {
        let text = match &verdict {
            Some(msg) => format!("{msg}\n"),
            None => format!("OK {} ABI inputs unchanged\n", expected.len()),
        };
        crate::fsutil::atomic_write(r, text.as_bytes(), "abi report")?;
        return Ok(0);
    }
    if let Some(msg) = verdict {
        eprintln!("snapctl: error: {msg}");
        return Ok(1);
    }
    if let Some(s) = stamp {
        crate::fsutil::atomic_write(
            s,
            format!("{} ABI inputs unchanged\n", expected.len()).as_bytes(),
            "abi stamp",
        )?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            normalize_path("./dep/include/p.h").unwrap(),
            "dep/include/p.h"
        );
        assert!(normalize_path("../x.h").is_err());
        assert!(normalize_path("/abs.h").is_err());
    }

    #[test]
    fn names_each_changed_missing_and_new_file() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a.h");
        let b = t.path().join("b.h");
        std::fs::write(&a, "struct p { int x; };\n").unwrap();
        std::fs::write(&b, "int y;\n").unwrap();
        let inputs = vec![("dep/a.h".to_string(), a.clone())];
        let exp = digests(&inputs).unwrap();
        let ctx = Context {
            library: "mylib".into(),
            channel: "stable".into(),
            ..Default::default()
        };
        assert!(check(&exp, &inputs, &ctx).unwrap().is_none());
        std::fs::write(&a, "struct p { long pad; int x; };\n").unwrap();
        let mut exp2 = exp.clone();
        exp2.insert("dep/gone.h".into(), "00".repeat(32));
        let m = check(&exp2, &[("dep/a.h".into(), a), ("dep/b.h".into(), b)], &ctx)
            .unwrap()
            .unwrap();
        assert!(m.contains("changed: dep/a.h"), "{m}");
        assert!(m.contains("missing: dep/gone.h"), "{m}");
        assert!(m.contains("new: dep/b.h"), "{m}");
        assert!(m.contains("re-cut") && m.contains("from source"), "{m}");
    }
}
