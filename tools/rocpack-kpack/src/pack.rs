//! Building a `.kpack` archive from code object files (`kpack pack`).
//!
//! Inputs are added in this order (it fixes the ordinals): directories, then
//! entries with explicit keys, then `TARGET=FILE` code objects. Plain
//! directories are read in natural name order ([`natural_key`]), so
//! `kpack unbundle`'s `b<bundle>-e<entry>-…` files get per-target indices in
//! bundle order. A directory written by [`unpack_to_dir`] (it has
//! [`UNPACK_MANIFEST`]) is rebuilt exactly: same keys, targets, order,
//! metadata, group, family, arches and scheme. Any other directory
//! contributes its regular files in name order, the target taken from the
//! file name ([`target_from_file_name`]).
//!
//! [`natural_key`]: crate::natural_key
//! [`unpack_to_dir`]: crate::unpack_to_dir
//! [`UNPACK_MANIFEST`]: crate::UNPACK_MANIFEST
//! [`target_from_file_name`]: crate::target_from_file_name

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::{
    normalize_key, read_pack_dir, toc_key, Compression, FileInput, KernelFile, KpackFileWriter,
    PackDir, UnpackManifest, WriteSummary,
};

/// Largest code object [`pack`] takes from one file (the archive format's
/// own limit is far larger; no real code object comes near this).
pub const MAX_CODE_OBJECT: u64 = 4 << 30;

/// What to pack and how.
#[derive(Clone, Debug, Default)]
pub struct PackRequest {
    /// Output `.kpack` file (written atomically).
    pub output: PathBuf,
    /// Directories written by `kpack unpack` or `kpack unbundle`.
    pub input_dirs: Vec<PathBuf>,
    /// Code objects under explicit TOC keys: `(key, target, file)`.
    pub entries: Vec<(String, String, PathBuf)>,
    /// Code objects given as `TARGET=FILE`, keyed `<kernel_name>#<n>`.
    pub code_objects: Vec<String>,
    /// Key stem for code objects and plain directories.
    pub kernel_name: Option<String>,
    /// Scheme (default: the one recorded by `kpack unpack`, else `none`).
    pub compression: Option<Compression>,
    /// zstd frames without content checksums.
    pub no_content_checksum: bool,
    /// TOC `group_name` override.
    pub group_name: Option<String>,
    /// TOC `gfx_arch_family` override.
    pub arch_family: Option<String>,
    /// TOC `gfx_arches` override (empty: keep the default).
    pub arches: Vec<String>,
}

/// What [`pack`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackSummary {
    /// The finished archive.
    pub written: WriteSummary,
    /// The scheme used.
    pub compression: Compression,
}

/// Why [`pack`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// The request names no input.
    #[error("nothing to pack: give --code-object, --entry or --input-dir")]
    Nothing,
    /// A code object spec is not `TARGET=FILE`.
    #[error("--code-object {0:?}: expected TARGET=FILE")]
    BadCodeObject(String),
    /// Keys must be made but no kernel name was given.
    #[error("{0} needs --kernel-name (the TOC key stem)")]
    NeedsKernelName(&'static str),
    /// An input cannot be opened as a regular file.
    #[error("{}: cannot read", .path.display())]
    Open {
        /// The input.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// An input is larger than [`MAX_CODE_OBJECT`].
    #[error("{}: cannot read: file is {len} bytes; at most {MAX_CODE_OBJECT} are accepted", .path.display())]
    TooLarge {
        /// The input.
        path: PathBuf,
        /// Its size.
        len: u64,
    },
    /// An input's size changed while it was packed.
    #[error("{}: changed size while it was read", .0.display())]
    Changed(PathBuf),
    /// Reading a directory or writing the archive failed.
    #[error(transparent)]
    Kpack(#[from] crate::Error),
}

/// Packs the request's inputs into its output. Every input is opened as a
/// regular file of bounded size before anything is written (a FIFO must not
/// hang, a link to `/dev/zero` must not be read forever), and one whose size
/// changed while it was read fails the pack (the output is not committed).
pub fn pack(req: &PackRequest) -> Result<PackSummary, PackError> {
    let (items, manifest) = gather(req)?;
    let opened = items
        .iter()
        .map(|it| open_input(&it.path))
        .collect::<Result<Vec<_>, _>>()?;
    let compression = match (&req.compression, &manifest) {
        (Some(c), _) => *c,
        (None, Some(m)) => m.compression()?,
        (None, None) => Compression::None,
    };
    // Written to a temporary file beside the output and renamed into place.
    let mut fw = KpackFileWriter::create(&req.output, compression)?;
    let w = fw.writer();
    // Keys are final here: `\` was normalised for given keys, and keys from
    // an unpacked manifest are kept verbatim.
    w.normalize_keys(false).content_checksum(true);
    if let Some(m) = &manifest {
        w.like_unpacked(m);
    }
    if req.no_content_checksum {
        w.content_checksum(false);
    }
    if let Some(g) = &req.group_name {
        w.group_name(g.clone());
    }
    if let Some(f) = &req.arch_family {
        w.arch_family(f.clone());
    }
    if !req.arches.is_empty() {
        w.arches(req.arches.iter().cloned());
    }
    // Code objects go from file to file (`none`) or are compressed a few at a
    // time, the large ones streamed (zstd): memory grows with neither the
    // number nor the size of the inputs.
    let spill_dir = match req.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let paths: Vec<PathBuf> = items.iter().map(|it| it.path.clone()).collect();
    let inputs = items
        .into_iter()
        .zip(&opened)
        .zip(&paths)
        .map(|((it, (file, len)), path)| FileInput {
            key: it.key,
            target: it.target,
            file,
            offset: 0,
            len: *len,
            metadata: it.metadata,
            path: Some(path),
        })
        .collect();
    w.add_file_ranges(inputs, &spill_dir)?;
    for (path, (f, len)) in paths.iter().zip(&opened) {
        if f.metadata().map(|m| m.len()).ok() != Some(*len) {
            return Err(PackError::Changed(path.clone()));
        }
    }
    let written = fw.finish()?;
    Ok(PackSummary {
        written,
        compression,
    })
}

/// The request's code objects in ordinal order, and the first unpacked
/// directory's manifest (the defaults for everything not given).
fn gather(req: &PackRequest) -> Result<(Vec<KernelFile>, Option<UnpackManifest>), PackError> {
    if req.code_objects.is_empty() && req.entries.is_empty() && req.input_dirs.is_empty() {
        return Err(PackError::Nothing);
    }
    let mut items: Vec<KernelFile> = Vec::new();
    let mut manifest: Option<UnpackManifest> = None;
    let mut per_target: HashMap<String, u64> = HashMap::new();
    let mut keyed = |target: String, path: PathBuf, what: &'static str| {
        let name = req
            .kernel_name
            .as_ref()
            .ok_or(PackError::NeedsKernelName(what))?;
        let n = per_target.entry(target.clone()).or_insert(0);
        let key = normalize_key(&toc_key(name, *n));
        *n += 1;
        Ok::<_, PackError>(KernelFile {
            key,
            target,
            path,
            metadata: None,
        })
    };
    for dir in &req.input_dirs {
        match read_pack_dir(dir)? {
            PackDir::Unpacked(m, files) => {
                items.extend(files);
                manifest.get_or_insert(m);
            }
            PackDir::Plain(files) => {
                for (target, path) in files {
                    let what = "--input-dir without kpack-unpack.json";
                    items.push(keyed(target, path, what)?);
                }
            }
        }
    }
    for (key, target, path) in &req.entries {
        items.push(KernelFile {
            key: normalize_key(key),
            target: target.clone(),
            path: path.clone(),
            metadata: None,
        });
    }
    for spec in &req.code_objects {
        let (target, file) = spec
            .split_once('=')
            .filter(|(t, f)| !t.is_empty() && !f.is_empty())
            .ok_or_else(|| PackError::BadCodeObject(spec.clone()))?;
        items.push(keyed(target.to_owned(), file.into(), "--code-object")?);
    }
    Ok((items, manifest))
}

/// Opens one input file: regular files only, at most [`MAX_CODE_OBJECT`]
/// bytes; its size.
fn open_input(path: &Path) -> Result<(fs::File, u64), PackError> {
    let (f, meta) =
        rocpack_bundle::fsutil::open_regular(path).map_err(|source| PackError::Open {
            path: path.to_owned(),
            source,
        })?;
    if meta.len() > MAX_CODE_OBJECT {
        return Err(PackError::TooLarge {
            path: path.to_owned(),
            len: meta.len(),
        });
    }
    Ok((f, meta.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KpackReader;

    fn request(dir: &Path) -> PackRequest {
        PackRequest {
            output: dir.join("out.kpack"),
            kernel_name: Some("lib/libx.so".into()),
            ..PackRequest::default()
        }
    }

    #[test]
    fn code_objects_are_keyed_per_target_after_entries() {
        let t = tempfile::tempdir().unwrap();
        for (name, body) in [("a", b"AAAA"), ("b", b"BBBB"), ("c", b"CCCC")] {
            fs::write(t.path().join(name), body).unwrap();
        }
        let mut req = request(t.path());
        req.entries = vec![("k\\e#0".into(), "gfx942".into(), t.path().join("c"))];
        req.code_objects = vec![
            format!("gfx1100={}", t.path().join("a").display()),
            format!("gfx1100={}", t.path().join("b").display()),
            format!("gfx90a={}", t.path().join("a").display()),
        ];
        let s = pack(&req).unwrap();
        assert_eq!(s.written.kernels, 4);
        assert_eq!(s.compression, Compression::None);
        let r = KpackReader::open(&req.output).unwrap();
        let keys: Vec<(String, String)> = r
            .entries_by_ordinal()
            .iter()
            .map(|e| (e.key.clone(), e.target.clone()))
            .collect();
        let want = [
            ("k/e#0", "gfx942"),
            ("lib/libx.so#0", "gfx1100"),
            ("lib/libx.so#1", "gfx1100"),
            ("lib/libx.so#0", "gfx90a"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, t)| (k.to_string(), t.to_string()))
            .collect();
        assert_eq!(keys, want);
        assert_eq!(&*r.get("lib/libx.so#1", "gfx1100").unwrap(), b"BBBB");
    }

    #[test]
    fn refuses_bad_requests_before_writing() {
        let t = tempfile::tempdir().unwrap();
        let mut req = request(t.path());
        let err = pack(&req).unwrap_err().to_string();
        assert_eq!(
            err,
            "nothing to pack: give --code-object, --entry or --input-dir"
        );
        req.code_objects = vec!["gfx1100=".into()];
        let err = pack(&req).unwrap_err().to_string();
        assert_eq!(err, "--code-object \"gfx1100=\": expected TARGET=FILE");
        req.code_objects = vec![format!("gfx1100={}", t.path().display())];
        assert!(matches!(pack(&req), Err(PackError::Open { .. })));
        req.kernel_name = None;
        let err = pack(&req).unwrap_err().to_string();
        assert_eq!(err, "--code-object needs --kernel-name (the TOC key stem)");
        assert!(!req.output.exists());
    }

    #[test]
    fn unpacked_directory_round_trips() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("a"), b"code").unwrap();
        let mut req = request(t.path());
        req.code_objects = vec![format!("gfx1100={}", t.path().join("a").display())];
        req.compression = Some(Compression::zstd());
        req.group_name = Some("grp".into());
        pack(&req).unwrap();
        let first = fs::read(&req.output).unwrap();
        let unpacked = t.path().join("u");
        crate::unpack_to_dir(&KpackReader::open(&req.output).unwrap(), &unpacked).unwrap();
        let again = PackRequest {
            output: t.path().join("again.kpack"),
            input_dirs: vec![unpacked],
            ..PackRequest::default()
        };
        let s = pack(&again).unwrap();
        assert_eq!(s.compression, Compression::zstd());
        assert_eq!(fs::read(&again.output).unwrap(), first);
    }
}
