//! Phases 4–8 of a wheel split: the overlay split by the artifact
//! splitter, the targets and distribution names, the device and family
//! wheels planned, the host METADATA given its extras.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rocpack_artifacts::fsutil;
use rocpack_artifacts::manifest::ArtifactManifest;
use rocpack_artifacts::split::{self as asplit, FatBinarySummary, Progress, SplitOptions};
use rocpack_artifacts::walk::{self, EntryKind};
use rocpack_kpack::Compression;

use super::input::{InputMeta, Loaded};
use super::{
    usage, DeviceWheel, FamilyWheel, FatBinary, WheelFile, WheelSplitOptions, GFXARCH, ROOT_NAME,
};
use crate::meta::Headers;
use crate::names::{self, WheelName};
use crate::selector::{self, SelectorData};
use crate::zip::central::Table;
use crate::zip::{Content, OutEntry};
use crate::WheelError;

/// One wheel to write.
pub(super) struct Planned {
    pub(super) file: String,
    pub(super) dist_info: String,
    pub(super) entries: Vec<OutEntry>,
}

pub(super) fn wheel_rel(prefix_rel: &str, overlay: &str) -> String {
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

pub(super) fn bytes_entry(name: String, text: String) -> OutEntry {
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

/// The artifact split of the overlay (phase 4).
pub(super) struct OverlaySplit {
    /// Its report.
    pub(super) report: asplit::SplitReport,
    /// The split's manifest prefix: the overlay below [`ROOT_NAME`].
    pub(super) prefix: String,
    /// The split's output directory.
    pub(super) out: PathBuf,
    /// The fat binaries rewritten host-only, at their wheel paths.
    pub(super) fat_binaries: Vec<FatBinary>,
}

/// The device targets and the distribution names taken (phase 5).
pub(super) struct Targets<'r> {
    /// Archives written, by base arch.
    pub(super) by_target: BTreeMap<String, Vec<&'r asplit::ArchArtifact>>,
    /// `--device-package-prefix`, or `<name>-device`.
    pub(super) dev_prefix: String,
    /// The host distribution, normalized.
    pub(super) host_norm: String,
    /// Normalized distribution names taken, and by what.
    pub(super) seen_names: BTreeMap<String, String>,
    /// The version every wheel pins.
    pub(super) version: String,
}

impl Targets<'_> {
    /// The normalized device distribution `<prefix>-<suffix>`.
    fn dev_name(&self, suffix: &str) -> String {
        names::normalize(&format!("{}-{suffix}", self.dev_prefix))
    }

    /// `dist==version`.
    fn pin(&self, dist: &str) -> String {
        format!("{dist}=={}", self.version)
    }
}

/// Phase 4: splits the overlay below `art` with the artifact splitter,
/// into `<work>/split`.
pub(super) fn split_overlay(
    opts: &WheelSplitOptions,
    work: &Path,
    art: &Path,
    overlay: &str,
    name: &str,
    progress: &dyn Progress,
) -> Result<OverlaySplit, WheelError> {
    let prefix = if overlay.is_empty() {
        ROOT_NAME.to_string()
    } else {
        format!("{ROOT_NAME}/{overlay}")
    };
    ArtifactManifest::from_prefixes([prefix.as_str()])?.write_dir(art)?;
    let stem = names::kpack_stem(name);
    let split_out = work.join("split");
    let sopts = SplitOptions {
        artifact_dir: art.to_path_buf(),
        artifact_prefix: stem,
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
    Ok(OverlaySplit {
        report,
        prefix,
        out: split_out,
        fat_binaries,
    })
}

/// Phase 5: the targets (base arch of each architecture written) and
/// their device distribution names, checked for collisions.
pub(super) fn find_targets<'r>(
    opts: &WheelSplitOptions,
    report: &'r asplit::SplitReport,
    meta: &InputMeta,
) -> Result<Targets<'r>, WheelError> {
    let mut by_target: BTreeMap<String, Vec<&asplit::ArchArtifact>> = BTreeMap::new();
    for a in &report.arch_artifacts {
        let t = rocpack_bundle::base_arch(&a.arch).unwrap_or_else(|| a.arch.clone());
        by_target.entry(t).or_default().push(a);
    }
    let dev_prefix = opts
        .device_package_prefix
        .clone()
        .unwrap_or_else(|| format!("{}-device", meta.name));
    if !names::is_valid_name(&dev_prefix) {
        return Err(usage(format!(
            "--device-package-prefix `{dev_prefix}` is not a valid distribution name"
        )));
    }
    let host_norm = names::normalize(&meta.name);
    let mut targets = Targets {
        by_target,
        dev_prefix,
        host_norm: host_norm.clone(),
        seen_names: BTreeMap::new(),
        version: meta.version.clone(),
    };
    targets.seen_names.insert(host_norm, "the host".to_string());
    for t in targets.by_target.keys() {
        let n = targets.dev_name(t);
        if !names::is_valid_name(&n) {
            return Err(usage(format!(
                "device distribution `{n}` is not a valid name"
            )));
        }
        if let Some(other) = targets.seen_names.insert(n.clone(), format!("target {t}")) {
            return Err(usage(format!(
                "distribution `{n}` of target {t} collides with {other}"
            )));
        }
    }
    Ok(targets)
}

/// Phase 6: the device wheel of one target: its archives and database
/// files at their wheel paths.
pub(super) fn plan_device_wheel(
    opts: &WheelSplitOptions,
    loaded: &Loaded,
    targets: &Targets<'_>,
    split: &OverlaySplit,
    overlay: &str,
    wheel_info: &WheelInfo<'_>,
    (target, arts): (&String, &Vec<&asplit::ArchArtifact>),
) -> Result<(Planned, DeviceWheel), WheelError> {
    let files = loaded.files();
    let dist = targets.dev_name(target);
    let mut entries: BTreeMap<String, OutEntry> = BTreeMap::new();
    let mut kpacks = Vec::new();
    let mut dbs = Vec::new();
    let mut archs = Vec::new();
    for a in arts {
        archs.push(a.arch.clone());
        let proot = fsutil::join_rel(&split.out.join(&a.name), &split.prefix);
        if !proot.is_dir() {
            continue;
        }
        for e in walk::walk(&proot)? {
            let EntryKind::File { mode, .. } = e.kind else {
                continue;
            };
            let rel = wheel_rel(&e.rel, overlay);
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
    let mut requires = vec![targets.pin(&targets.host_norm)];
    requires.extend(
        opts.device_requires_dist
            .iter()
            .map(|r| r.replace(GFXARCH, target)),
    );
    let summary = format!(
        "GPU device code of {} {} for {target}",
        wheel_info.dist_name, wheel_info.version
    );
    let w = wheel_info.plan(&dist, &summary, &requires, entries.into_values().collect());
    let d = DeviceWheel {
        target: target.clone(),
        architectures: archs,
        wheel: WheelFile {
            file: w.file.clone(),
            distribution: dist,
            bytes: 0,
            files: 0,
            requires,
        },
        kpacks,
        database_files: dbs,
    };
    Ok((w, d))
}

/// Phase 7: the family wheels of the config's architecture groups that
/// have a target in this wheel, and the groups skipped.
pub(super) fn plan_family_wheels(
    opts: &WheelSplitOptions,
    targets: &mut Targets<'_>,
    wheel_info: &WheelInfo<'_>,
    planned: &mut Vec<Planned>,
) -> Result<(Vec<FamilyWheel>, Vec<String>), WheelError> {
    let mut family_wheels = Vec::new();
    let mut skipped_groups = Vec::new();
    let Some(cfg) = &opts.config else {
        return Ok((family_wheels, skipped_groups));
    };
    for g in &cfg.architecture_groups {
        let mut members: Vec<String> = Vec::new();
        let mut absent = Vec::new();
        for a in &g.architectures {
            let t = rocpack_bundle::base_arch(a).unwrap_or_else(|| a.clone());
            if targets.by_target.contains_key(&t) {
                if !members.contains(&t) {
                    members.push(t);
                }
            } else {
                absent.push(a.clone());
            }
        }
        let dist = targets.dev_name(&g.name);
        if members.is_empty() {
            skipped_groups.push(g.name.clone());
            continue;
        }
        if let Some(other) = targets.seen_names.get(&dist) {
            if other.starts_with("target ")
                && members.len() == 1
                && dist == targets.dev_name(&members[0])
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
        targets
            .seen_names
            .insert(dist.clone(), format!("group {}", g.name));
        let mut requires = vec![targets.pin(&targets.host_norm)];
        requires.extend(members.iter().map(|t| targets.pin(&targets.dev_name(t))));
        requires.extend(
            opts.device_requires_dist
                .iter()
                .filter(|r| !r.contains(GFXARCH))
                .cloned(),
        );
        let summary = format!(
            "GPU device code of {} {} for {} ({})",
            wheel_info.dist_name,
            wheel_info.version,
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
    Ok((family_wheels, skipped_groups))
}

/// Phase 8: adds the host's `device-<target>`, `device-<group>` and
/// `device-all` extras with exact pins to its METADATA (and, with
/// `--selector`, the `device` extra naming the selector sdist); returns the
/// `Requires-Dist` lines added and what the selector chooses from.
pub(super) fn add_extras(
    opts: &WheelSplitOptions,
    meta: &mut InputMeta,
    targets: &Targets<'_>,
    family_wheels: &[FamilyWheel],
) -> Result<(Vec<String>, Option<SelectorData>), WheelError> {
    let mut extras: Vec<String> = targets
        .by_target
        .keys()
        .chain(family_wheels.iter().map(|f| &f.group))
        .map(|n| opts.extra_names.extra(&names::normalize(n)))
        .collect();
    extras.push("device-all".into());
    let selector_data = match &opts.selector {
        Some(so) => {
            let sname = names::normalize(&targets.dev_prefix);
            if let Some(other) = targets.seen_names.get(&sname) {
                return Err(usage(format!(
                    "selector distribution `{sname}` collides with {other}"
                )));
            }
            let choices = targets
                .by_target
                .keys()
                .map(|t| (t.clone(), targets.dev_name(t)))
                .collect();
            extras.push("device".into());
            Some(selector::selector_data(
                &sname,
                &meta.version,
                &targets.host_norm,
                choices,
                so,
            )?)
        }
        None => None,
    };
    refuse_taken_extras(&meta.metadata, &meta.meta_path, &extras)?;
    let mut host_requires = Vec::new();
    let mut extra = |metadata: &mut Headers, extra: &str, dists: &[String]| {
        metadata.push("Provides-Extra", extra);
        for d in dists {
            let r = format!("{}; extra == \"{extra}\"", targets.pin(d));
            host_requires.push(r.clone());
            metadata.push("Requires-Dist", r);
        }
    };
    let metadata = &mut meta.metadata;
    for t in targets.by_target.keys() {
        extra(
            metadata,
            &opts.extra_names.extra(&names::normalize(t)),
            &[targets.dev_name(t)],
        );
    }
    for f in family_wheels {
        extra(
            metadata,
            &opts.extra_names.extra(&names::normalize(&f.group)),
            std::slice::from_ref(&f.wheel.distribution),
        );
    }
    let all: Vec<String> = targets
        .by_target
        .keys()
        .map(|t| targets.dev_name(t))
        .collect();
    extra(metadata, "device-all", &all);
    if let Some(d) = &selector_data {
        extra(metadata, "device", std::slice::from_ref(&d.name));
    }
    Ok((host_requires, selector_data))
}

pub(super) struct WheelInfo<'a> {
    /// The host distribution (METADATA `Name`).
    pub(super) dist_name: &'a str,
    pub(super) host_name: &'a WheelName,
    pub(super) wheel_meta: &'a Headers,
    pub(super) version: &'a str,
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
