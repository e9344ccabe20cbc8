//! Phase 9 of a wheel split: every wheel written into the staging
//! directory.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use rocpack_artifacts::fsutil;
use rocpack_artifacts::walk::{self, EntryKind};
use rocpack_kpack::commit::StagingDir;

use super::input::{below_overlay, InputMeta, Loaded};
use super::plan::{bytes_entry, wheel_rel, OverlaySplit, Planned};
use super::{ioerr, usage, OutputFormat, SelectorFile, WheelSplitOptions};
use crate::selector::{self, SelectorData};
use crate::zip::{self, Content, OutEntry, WriteOptions};
use crate::WheelError;

/// Where phase 9 writes: the staging directory, the input and the scratch
/// space.
pub(super) struct WriteCtx<'a> {
    pub(super) opts: &'a WheelSplitOptions,
    pub(super) staging: &'a StagingDir,
    pub(super) loaded: &'a Loaded,
    pub(super) digests: &'a zip::Digests,
    /// Scratch directory of the zip layer.
    pub(super) tmp: &'a Path,
    /// The extracted files.
    pub(super) root: &'a Path,
}

impl WriteCtx<'_> {
    /// The output's name of wheel `file`.
    fn out_name(&self, file: &str) -> String {
        match self.opts.output_format {
            OutputFormat::Wheel => file.to_string(),
            OutputFormat::Directory => file.trim_end_matches(".whl").to_string(),
        }
    }

    /// A sink writing `n` into the staging directory.
    fn sink(&self, n: &str, dist_info: &str) -> Result<Box<dyn zip::Sink + '_>, WheelError> {
        let wopts = WriteOptions {
            time: zip::zip_time(self.opts.source_date_epoch),
            level: self.opts.zip_level.clamp(0, 9),
        };
        let inref = self.loaded.input.as_ref().map(|w| zip::InputRef {
            wheel: w,
            digests: self.digests,
        });
        zip::sink(
            self.opts.output_format == OutputFormat::Directory,
            &self.staging.path().join(n),
            dist_info,
            inref,
            wopts,
            self.tmp,
        )
    }
}

/// Each written wheel's output name and sizes, host first.
pub(super) type WrittenWheels = Vec<(String, zip::Written)>;

/// Phase 9: writes every wheel into the staging directory, host first,
/// and checks the input did not change and no output exists. Returns each
/// wheel's output name and sizes, in order.
pub(super) fn write_wheels(
    cx: &WriteCtx<'_>,
    meta: &InputMeta,
    split: &OverlaySplit,
    overlay: &str,
    host_file: &str,
    planned: Vec<Planned>,
    selector: Option<SelectorData>,
) -> Result<(WrittenWheels, Option<SelectorFile>), WheelError> {
    let mut written = Vec::new();
    let mut out_names = Vec::new();
    let n = cx.out_name(host_file);
    let w = write_host(cx, &n, meta, split, overlay)?;
    out_names.push(std::ffi::OsString::from(&n));
    written.push((n, w));
    for p in planned {
        let n = cx.out_name(&p.file);
        let sink = cx.sink(&n, &p.dist_info)?;
        let w = zip::write_all(sink, p.entries, &p.dist_info)?;
        out_names.push(std::ffi::OsString::from(&n));
        written.push((n, w));
    }
    let selector = match selector {
        Some(data) => {
            let mtime = cx.opts.source_date_epoch.unwrap_or(315_532_800);
            let (file, bytes) = selector::write_sdist(&data, cx.staging.path(), mtime)?;
            out_names.push(std::ffi::OsString::from(&file));
            Some(SelectorFile { file, bytes, data })
        }
        None => None,
    };
    if let Some(w) = &cx.loaded.input {
        w.check_unchanged()?;
    }
    if let Some(c) = cx.staging.conflicts(&out_names).into_iter().next() {
        return Err(usage(format!("{}: already exists", c.display())));
    }
    Ok((written, selector))
}

/// The host wheel, written straight from the input's table: files outside
/// the overlay and unchanged files are copied compressed from the input;
/// rewritten binaries come from the split; database files moved to device
/// wheels are left out; METADATA is the one with the extras.
fn write_host(
    cx: &WriteCtx<'_>,
    n: &str,
    meta: &InputMeta,
    split: &OverlaySplit,
    overlay: &str,
) -> Result<zip::Written, WheelError> {
    let (loaded, files) = (cx.loaded, cx.loaded.files());
    let dist_info = &loaded.dist_info;
    let mut sink = cx.sink(n, dist_info)?;
    let groot = fsutil::join_rel(&split.out.join(&split.report.generic), &split.prefix);
    // Every file the split left in the generic tree is an extracted input file.
    for e in walk::walk(&groot)? {
        if let EntryKind::File { .. } = e.kind {
            let rel = wheel_rel(&e.rel, overlay);
            if !files.find(&rel).is_some_and(|i| loaded.extracted(i)) {
                return Err(usage(format!(
                    "{rel}: left by the split but not a file of the input (internal error)"
                )));
            }
        }
    }
    let rewritten: BTreeSet<&str> = split.fat_binaries.iter().map(|f| f.path.as_str()).collect();
    let di = files.range_with_prefix(&format!("{dist_info}/"));
    let order = (0..di.start).chain(di.end..files.len()).chain(di.clone());
    for i in order {
        let k = files.name(i);
        if ["RECORD", "RECORD.jws", "RECORD.p7s"].iter().any(|n| {
            k.strip_prefix(dist_info.as_str())
                .and_then(|r| r.strip_prefix('/'))
                == Some(*n)
        }) {
            continue;
        }
        if k == meta.meta_path {
            sink.add(OutEntry {
                mode: meta.meta_mode,
                ..bytes_entry(meta.meta_path.clone(), meta.metadata.render())
            })?;
            continue;
        }
        let (content, mode) = match below_overlay(k, overlay) {
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
                    (loaded.content(i, cx.root), mode)
                }
            }
            _ => (loaded.content(i, cx.root), files.rec(i).mode()),
        };
        sink.add(OutEntry {
            name: k.to_string(),
            content,
            mode,
            store: false,
        })?;
    }
    sink.finish()
}
