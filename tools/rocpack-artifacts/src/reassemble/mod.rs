//! Reassembly: rebuild the fat binary (ELF, static archive or PE32+ image)
//! from a split host binary and its `.kpack` files (`kpack reassemble`).
//!
//! For every wrapper `co_index` *i* the code objects stored under
//! `<kernel_name>#<i>` (kernel name from the marker) in all `.kpack` files
//! become one bundle ([`code_objects`]). When the split recorded the
//! bundle's layout (`metadata.bundle`, docs/formats/split-elf.md) and every
//! entry is found, the bundle is rebuilt exactly: same container format and
//! version (CCOB v1/v2/v3, same method), same entry IDs, order and offsets,
//! so its uncompressed bytes equal the input's; a compressed one is
//! recompressed ([`effort`]), so the file's bytes differ there
//! ([`Notes::recompressed`]). Otherwise (older splits, a subset of the
//! archives) it is rebuilt as clang writes one: host entry first, device
//! entries sorted by ID, 4096-aligned, as CCOB v2 (zstd) if the
//! uncompressed bundles do not fit where `.hip_fatbin` was
//! ([`Notes::canonical`]).
//!
//! Memory stays bounded ([`engine`]): bundles are rebuilt one per worker
//! into spill files, and the file is written range by range through the
//! one reassembly dispatch of `rocpack-image` ([`rocpack_image::Reassembly`]);
//! archives are rebuilt member by member.

pub mod code_objects;
pub mod effort;
pub mod engine;

use std::fs::File;
use std::path::{Path, PathBuf};

use rocpack_image::{ArchiveError, Form, Reassembly};
use rocpack_kpack::{KpackReader, Marker};

use code_objects::{bundle_for, bundle_weights, Archives, RebuiltBundle};
use engine::{place_uncompressed, SpillPass};

/// Largest host file reassembly takes (real fat libraries stay well below).
pub const MAX_HOST_FILE: u64 = 64 << 30;

/// Why a reassembly failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReassembleError {
    /// The inputs do not make a file: no `.kpack` files, code objects
    /// missing or differing between archives, a bad output path.
    #[error("{0}")]
    Input(String),
    /// Reading or writing a file failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A `.kpack` archive could not be read.
    #[error("failed to read `{}`", path.display())]
    Kpack {
        /// The archive.
        path: PathBuf,
        #[source]
        source: rocpack_kpack::Error,
    },
    /// A bundle could not be written.
    #[error("{what}")]
    Bundle {
        /// The file (and bundle) being rebuilt.
        what: String,
        #[source]
        source: rocpack_bundle::Error,
    },
    /// The host file could not be analysed or written.
    #[error("failed to reassemble `{name}`")]
    Image {
        /// The host file (and archive member).
        name: String,
        #[source]
        source: rocpack_image::Error,
    },
}

impl ReassembleError {
    pub(crate) fn io(what: String, source: std::io::Error) -> Self {
        ReassembleError::Io { what, source }
    }

    pub(crate) fn bundle(what: &str, source: rocpack_bundle::Error) -> Self {
        ReassembleError::Bundle {
            what: what.to_string(),
            source,
        }
    }

    /// A `.kpack` read error without its archive gets `path`.
    pub(crate) fn in_archive(self, path: &Path) -> Self {
        match self {
            ReassembleError::Kpack { path: p, source } if p.as_os_str().is_empty() => {
                ReassembleError::Kpack {
                    path: path.to_path_buf(),
                    source,
                }
            }
            other => other,
        }
    }
}

impl From<rocpack_kpack::Error> for ReassembleError {
    fn from(source: rocpack_kpack::Error) -> Self {
        ReassembleError::Kpack {
            path: PathBuf::new(),
            source,
        }
    }
}

/// How the reassembled file differs from the original, bundle by bundle
/// (labels: `bundle <co_index>`, `<member> bundle <co_index>` in archives),
/// in file order whatever order the workers finished in.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Notes {
    /// (member index, `co_index`) -> (label, canonical form's reason, recompressed).
    bundles: std::collections::BTreeMap<(usize, usize), (String, Option<String>, bool)>,
}

impl Notes {
    /// Records how bundle `co` of member `member` (0 outside archives) was
    /// rebuilt.
    fn note(
        &mut self,
        (member, co): (usize, usize),
        label: String,
        canonical: Option<String>,
        recompressed: bool,
    ) {
        if canonical.is_some() || recompressed {
            self.bundles
                .insert((member, co), (label, canonical, recompressed));
        }
    }

    /// Bundles rebuilt in clang's canonical form, not their original
    /// layout (the split did not record it, or code objects are missing):
    /// (label, reason).
    pub fn canonical(&self) -> Vec<(&str, &str)> {
        self.bundles
            .values()
            .filter_map(|(l, why, _)| Some((l.as_str(), why.as_deref()?)))
            .collect()
    }

    /// Compressed bundles rebuilt in their original layout and
    /// recompressed: their decompressed bytes are the original's, their
    /// compressed bytes are kpack's.
    pub fn recompressed(&self) -> Vec<&str> {
        self.bundles
            .values()
            .filter(|(_, why, r)| why.is_none() && *r)
            .map(|(l, _, _)| l.as_str())
            .collect()
    }

    /// Whether no bundle was rebuilt in canonical form or recompressed
    /// (the file is then the original byte for byte).
    pub fn is_exact(&self) -> bool {
        self.bundles.is_empty()
    }
}

/// What a reassembly wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassembleReport {
    /// Bytes written.
    pub bytes: u64,
    /// How it differs from the original.
    pub notes: Notes,
    /// The compression effort of the pass whose bundles fit, when they
    /// went through spill files (0 first, rising while they do not fit:
    /// [`effort::params`]; single bundles may have been squeezed harder on
    /// their own, [`engine::SpillPass::reassemble`]); `None` when they did
    /// not (an unchanged file, an archive, uncompressed bundles placed
    /// directly).
    pub effort: Option<u8>,
}

/// The `.kpack` files under `dir` (recursively, sorted).
pub fn find_kpacks(dir: &Path) -> Result<Vec<PathBuf>, ReassembleError> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReassembleError> {
        let ctx = |e| ReassembleError::io(format!("failed to read `{}`", dir.display()), e);
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .map_err(ctx)?
            .collect::<Result<_, _>>()
            .map_err(ctx)?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            if e.file_type().map_err(ctx)?.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|x| x == "kpack") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    Ok(out)
}

/// Opens the `.kpack` files under `dir` for positioned reads (never
/// mapped: code objects are read one bundle at a time and leave nothing
/// resident behind).
pub fn open_archives(dir: &Path) -> Result<Vec<(PathBuf, KpackReader)>, ReassembleError> {
    let paths = find_kpacks(dir)?;
    if paths.is_empty() {
        return Err(ReassembleError::Input(format!(
            "no .kpack files under `{}`",
            dir.display()
        )));
    }
    paths
        .into_iter()
        .map(|p| match KpackReader::open_file(&p) {
            Ok(r) => Ok((p, r)),
            Err(source) => Err(ReassembleError::Io {
                what: format!("failed to open `{}`", p.display()),
                source: std::io::Error::other(source),
            }),
        })
        .collect()
}

/// Reassembles `host` (a split ELF file, `ar` archive or PE32+ image)
/// from the `.kpack` files under `kpack_dir` into `output`, written
/// atomically beside it with the host file's mode.
pub fn reassemble(
    host: &Path,
    kpack_dir: &Path,
    output: &Path,
) -> Result<ReassembleReport, ReassembleError> {
    // Regular files only (a FIFO must not hang, a link to /dev/zero must
    // not be read forever), mapped for their headers; the host part is
    // copied through positioned reads.
    let mapped = crate::fsutil::Mapped::open(host)
        .map_err(|e| ReassembleError::io(format!("failed to read `{}`", host.display()), e))?;
    if mapped.bytes().len() as u64 > MAX_HOST_FILE {
        return Err(ReassembleError::Input(format!(
            "`{}` is larger than {MAX_HOST_FILE} bytes",
            host.display()
        )));
    }
    let archives = open_archives(kpack_dir)?;
    let dir = output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = output
        .file_name()
        .ok_or_else(|| ReassembleError::Input(format!("bad output path `{}`", output.display())))?;
    let tmp = dir.join(format!(
        ".{}.kpack-reassemble.tmp",
        file_name.to_string_lossy()
    ));
    let ctx = |e| ReassembleError::io(format!("failed to write `{}`", output.display()), e);
    let written = (|| {
        // Readable too: a PE image's checksum is computed from what was written.
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(ctx)?;
        let src = mapped.source();
        let name = host.display().to_string();
        let report = reassemble_into(mapped.bytes(), &src, &archives, &name, dir, &f)?;
        f.sync_all().map_err(ctx)?;
        let perm = std::fs::metadata(host).map_err(ctx)?.permissions();
        std::fs::set_permissions(&tmp, perm).map_err(ctx)?;
        std::fs::rename(&tmp, output).map_err(ctx)?;
        Ok(report)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reassembles the host file `host` (its bytes, headers read from a
/// mapping; `src` reads the same bytes with positioned reads) into `dst`
/// (empty, opened for reading and writing), with spill files in
/// `spill_dir`. `name` names the host in messages.
pub fn reassemble_into(
    host: &[u8],
    src: &(dyn rocpack_bundle::ReadAt + Sync),
    archives: &Archives,
    name: &str,
    spill_dir: &Path,
    dst: &File,
) -> Result<ReassembleReport, ReassembleError> {
    let failed = |source| ReassembleError::Image {
        name: name.to_string(),
        source,
    };
    let image = Reassembly::open(host, src).map_err(failed)?;
    let mut notes = Notes::default();
    let mut effort = None;
    let bytes = match image.form() {
        Form::Unchanged => image.copy_to(dst).map_err(failed)?,
        Form::Archive => reassemble_archive(&image, archives, name, spill_dir, dst, &mut notes)?,
        Form::Split => {
            let analysis = image.analysis().expect("a split image has an analysis");
            let (marker, count) = marker_of(analysis, name)?;
            match place_uncompressed(&image, &marker, count, archives, name, dst)? {
                Some(n) => n,
                None => {
                    let weights = bundle_weights(&marker, count, archives);
                    let pass = SpillPass {
                        host: &image,
                        marker: &marker,
                        count,
                        archives,
                        what: name,
                        dir: spill_dir,
                        weights: &weights,
                    };
                    let (n, e) = pass.reassemble(dst, &mut notes)?;
                    effort = Some(e);
                    n
                }
            }
        }
    };
    Ok(ReassembleReport {
        bytes,
        notes,
        effort,
    })
}

/// An `ar` archive, member by member: each split member's bundles built in
/// memory (members are relocatable objects: their bundles always fit).
fn reassemble_archive(
    image: &Reassembly<'_>,
    archives: &Archives,
    name: &str,
    spill_dir: &Path,
    dst: &File,
    notes: &mut Notes,
) -> Result<u64, ReassembleError> {
    let spill = tempfile::tempfile_in(spill_dir).map_err(|e| {
        ReassembleError::io(
            format!("failed to create a spill file in `{}`", spill_dir.display()),
            e,
        )
    })?;
    let mut members = 0usize;
    let r = image.write_archive(
        &mut |member, analysis| {
            let what = format!("{name}({member})");
            let (marker, count) = marker_of(analysis, &what)?;
            let mut bundles = Vec::with_capacity(count);
            for co in 0..count {
                let RebuiltBundle::InMemory {
                    bytes,
                    canonical,
                    recompressed,
                } = bundle_for(&marker, co, archives, &what, 0, false)?
                else {
                    unreachable!("not asked to stream");
                };
                notes.note(
                    (members, co),
                    format!("{member} bundle {co}"),
                    canonical,
                    recompressed,
                );
                bundles.push(bytes);
            }
            members += 1;
            Ok(bundles)
        },
        &spill,
        dst,
    );
    r.map_err(|e| match e {
        ArchiveError::Caller(e) => e,
        ArchiveError::Image(source) => ReassembleError::Image {
            name: name.to_string(),
            source,
        },
    })
}

/// The marker of a split file (from its first wrapper) and its bundle count.
fn marker_of(
    info: &rocpack_image::Analysis,
    what: &str,
) -> Result<(Marker, usize), ReassembleError> {
    let err = |msg: String| ReassembleError::Input(format!("{what}: {msg}"));
    let wrappers = info.wrapper_markers();
    let w0 = wrappers
        .first()
        .ok_or_else(|| err("split binary without wrappers".into()))?;
    let bytes = w0
        .marker
        .ok_or_else(|| err("wrapper 0 does not point at a marker".into()))?;
    let marker = Marker::decode(bytes).map_err(|e| err(format!("bad marker: {e}")))?;
    let count = wrappers
        .iter()
        .map(|w| w.co_index as usize + 1)
        .max()
        .unwrap_or(0);
    Ok((marker, count))
}
