//! Check an installed tree (a `site-packages` directory after `pip
//! install`) for one GPU target: every split host binary's marker lookup
//! (each wrapper `co_index`) resolves to a code object the way the runtime
//! resolves it (`rocpack_kpack::Loader`: search paths relative to the
//! binary, `@GFXARCH@` expanded with the target's compatible targets), and
//! no ELF file with device code is left (a fat binary in a host wheel).

use std::collections::BTreeSet;
use std::path::Path;

use rocpack_artifacts::walk::{self, EntryKind};
use rocpack_kpack::{Loader, LoaderEnv};
use serde::Serialize;

use crate::WheelError;

/// Result of [`verify_installed`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InstalledReport {
    /// Every check passed and at least one lookup was made.
    pub ok: bool,
    /// The device arch checked.
    pub target: String,
    /// Regular files looked at.
    pub files: usize,
    /// Split host binaries found.
    pub host_binaries: usize,
    /// Lookups made (binary × `co_index`).
    pub lookups: usize,
    /// Lookups that found a code object.
    pub resolved: usize,
    /// `.kpack` files in the tree.
    pub kpack_files: usize,
    /// One line per failure.
    pub failures: Vec<String>,
}

/// Checks `root` for `target` (a device arch, e.g. `gfx1100` or
/// `gfx90a:xnack-`).
pub fn verify_installed(root: &Path, target: &str) -> Result<InstalledReport, WheelError> {
    rocpack_bundle::parse_gpu_target(target).map_err(WheelError::Usage)?;
    let mut r = InstalledReport {
        ok: false,
        target: target.to_string(),
        files: 0,
        host_binaries: 0,
        lookups: 0,
        resolved: 0,
        kpack_files: 0,
        failures: Vec::new(),
    };
    let mut loader = Loader::new(LoaderEnv::none());
    for e in walk::walk(root)? {
        let EntryKind::File { .. } = e.kind else {
            continue;
        };
        r.files += 1;
        if e.rel.ends_with(".kpack") {
            r.kpack_files += 1;
            continue;
        }
        let path = e.path(root);
        // Only headers, tables, wrappers and the marker are read (a 1 GiB
        // library costs a few MiB), never a mapping of the file.
        let io = |er| WheelError::Io {
            path: path.clone(),
            what: "read",
            error: er,
        };
        let image = rocpack_image::ImageFile::open(&path).map_err(io)?;
        // What the runtime loads: ELF files and PE images (not archives).
        if !image.file_type().is_whole_image() {
            continue;
        }
        let Ok(info) = image.analyze().map_err(io)? else {
            continue;
        };
        match info.state() {
            rocpack_image::State::Fat if info.has_device_code() => {
                r.failures
                    .push(format!("{}: fat binary with device code", e.rel));
            }
            rocpack_image::State::Split => {
                r.host_binaries += 1;
                let Some(m) = info.marker() else {
                    r.failures
                        .push(format!("{}: HIPK wrappers but no marker", e.rel));
                    continue;
                };
                let dir = path.parent().unwrap_or(root);
                let indices: BTreeSet<u64> = info
                    .wrapper_markers()
                    .iter()
                    .map(|w| u64::from(w.co_index))
                    .collect();
                for i in indices {
                    r.lookups += 1;
                    match loader.resolve_bytes(&m.bytes, dir, i, &[target]) {
                        Ok(_) => r.resolved += 1,
                        Err(er) => r.failures.push(format!(
                            "{}: co_index {i}: {er} (error {})",
                            e.rel,
                            er.code()
                        )),
                    }
                }
            }
            _ => {}
        }
    }
    if r.lookups == 0 {
        r.failures
            .push("no split host binary found: nothing was checked".to_string());
    }
    r.ok = r.failures.is_empty();
    Ok(r)
}
