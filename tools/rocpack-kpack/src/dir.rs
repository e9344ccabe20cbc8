//! Unpacked archive directories (`kpack unpack` output, `kpack pack` input).
//!
//! One file per code object, named
//! `<ordinal, 4+ digits>_<key>_<target>.hsaco` with every byte outside
//! `[A-Za-z0-9._+#-]` replaced by `_` (so names never contain `/` or `:`),
//! plus [`UNPACK_MANIFEST`], a JSON file that records everything needed to
//! rebuild the archive byte for byte: group, family, arch list, scheme, and
//! per kernel (ordinal order) key, target, file, size, sha256 and the exact
//! MessagePack bytes of its `metadata` (hex), if any.

use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result};
use crate::format::{Compression, Scheme, ZSTD_DEFAULT_LEVEL};
use crate::reader::KpackReader;
use crate::writer::KpackWriter;

/// Name of the manifest file in an unpacked directory.
pub const UNPACK_MANIFEST: &str = "kpack-unpack.json";
/// Value of the manifest's `format` field.
pub const UNPACK_FORMAT: &str = "rocpack-kpack-unpack/1";

/// One code object of an unpacked directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnpackedKernel {
    /// Ordinal in the archive.
    pub ordinal: u32,
    /// TOC binary key.
    pub key: String,
    /// Arch key.
    pub target: String,
    /// File name in the directory.
    pub file: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the file, lowercase hex.
    pub sha256: String,
    /// Exact MessagePack encoding of the entry's `metadata`, lowercase hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_msgpack: Option<String>,
}

impl UnpackedKernel {
    fn of(e: &crate::KernelEntry, size: u64, sha256: String) -> Result<Self> {
        let metadata_msgpack = match &e.metadata {
            Some(v) => {
                let mut b = Vec::new();
                crate::msgpack::enc::value(&mut b, v)?;
                Some(hex::encode(b))
            }
            None => None,
        };
        Ok(UnpackedKernel {
            ordinal: e.ordinal,
            key: e.key.clone(),
            target: e.target.clone(),
            file: unpack_file_name(e.ordinal, &e.key, &e.target),
            size,
            sha256,
            metadata_msgpack,
        })
    }
}

/// Hand entry `e`'s code object to `sink` piece by piece (never whole);
/// its size and sha256 (lowercase hex).
fn stream_hashed(
    reader: &KpackReader,
    e: &crate::KernelEntry,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<(u64, String)> {
    let mut h = Sha256::new();
    let mut n = 0u64;
    reader.stream_entry::<Error>(e, &mut |b| {
        h.update(b);
        n += b.len() as u64;
        sink(b)
    })?;
    Ok((n, hex::encode(h.finalize())))
}

/// The manifest of an unpacked directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnpackManifest {
    /// Always [`UNPACK_FORMAT`].
    pub format: String,
    /// `group_name` of the archive.
    pub group_name: String,
    /// `gfx_arch_family` of the archive.
    pub gfx_arch_family: String,
    /// `gfx_arches` of the archive.
    pub gfx_arches: Vec<String>,
    /// `compression_scheme` of the archive.
    pub compression_scheme: String,
    /// Whether the archive's zstd frames carry content checksums (absent for
    /// `none` archives; absent means rocpack's default, with checksums), so
    /// `kpack pack` rebuilds the archive byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zstd_checksum: Option<bool>,
    /// Code objects in ordinal order.
    pub kernels: Vec<UnpackedKernel>,
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '#' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The file name `kpack unpack` gives a code object.
pub fn unpack_file_name(ordinal: u32, key: &str, target: &str) -> String {
    format!("{ordinal:04}_{}_{}.hsaco", sanitize(key), sanitize(target))
}

impl UnpackManifest {
    /// Describe `reader` (files named by [`unpack_file_name`]).
    pub fn for_archive(reader: &KpackReader) -> Result<Self> {
        let entries = reader.entries_by_ordinal();
        let kernels = crate::ordered::try_map_ordered(&entries, |e| {
            let (size, sha256) = stream_hashed(reader, e, &mut |_| Ok(()))?;
            UnpackedKernel::of(e, size, sha256)
        })?;
        Ok(Self::with_kernels(reader, kernels))
    }

    fn with_kernels(reader: &KpackReader, kernels: Vec<UnpackedKernel>) -> Self {
        UnpackManifest {
            format: UNPACK_FORMAT.into(),
            group_name: reader.group_name().into(),
            gfx_arch_family: reader.gfx_arch_family().into(),
            gfx_arches: reader.gfx_arches().to_vec(),
            compression_scheme: reader.scheme().as_str().into(),
            zstd_checksum: (reader.scheme() == Scheme::ZstdPerKernel)
                .then(|| reader.zstd_checksums()),
            kernels,
        }
    }

    /// Whether rebuilt zstd frames carry content checksums (as the
    /// unpacked archive's did; rocpack's default when not recorded).
    pub fn content_checksum(&self) -> bool {
        self.zstd_checksum.unwrap_or(true)
    }

    /// The compression matching `compression_scheme` (zstd at level 3).
    pub fn compression(&self) -> Result<Compression> {
        match self.compression_scheme.as_str() {
            s if s == Scheme::None.as_str() => Ok(Compression::None),
            s if s == Scheme::ZstdPerKernel.as_str() => Ok(Compression::Zstd {
                level: ZSTD_DEFAULT_LEVEL,
            }),
            other => Err(Error::new(ErrorKind::UnknownScheme(other.into()))),
        }
    }

    /// Read `dir/kpack-unpack.json`.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(UNPACK_MANIFEST);
        let text = fs::read(&path).map_err(|e| Error::from(e).with_path(&path))?;
        let m: UnpackManifest = serde_json::from_slice(&text).map_err(|e| {
            Error::new(ErrorKind::Invalid {
                field: format!("line {} column {}", e.line(), e.column()),
                message: e.to_string(),
            })
            .with_path(&path)
        })?;
        if m.format != UNPACK_FORMAT {
            return Err(Error::new(ErrorKind::Invalid {
                field: "format".into(),
                message: format!("expected {UNPACK_FORMAT:?}, found {:?}", m.format),
            })
            .with_path(&path));
        }
        for k in &m.kernels {
            let p = Path::new(&k.file);
            let plain = p.components().count() == 1
                && matches!(p.components().next(), Some(std::path::Component::Normal(_)));
            if !plain {
                return Err(Error::new(ErrorKind::Invalid {
                    field: format!("kernels[{}].file", k.ordinal),
                    message: format!("{:?} is not a plain file name", k.file),
                })
                .with_path(&path));
            }
        }
        Ok(m)
    }

    /// The directory's code objects in ordinal order, by file (not read):
    /// key, target, path and metadata.
    pub fn kernel_files(&self, dir: &Path) -> Result<Vec<KernelFile>> {
        let mut ks: Vec<&UnpackedKernel> = self.kernels.iter().collect();
        ks.sort_by_key(|k| k.ordinal);
        let mut out = Vec::with_capacity(ks.len());
        for k in ks {
            let field = || format!("kernels[{}].metadata_msgpack", k.ordinal);
            let metadata = match &k.metadata_msgpack {
                Some(h) => {
                    let bytes = hex::decode(h).map_err(|e| {
                        Error::new(ErrorKind::Invalid {
                            field: field(),
                            message: e.to_string(),
                        })
                    })?;
                    let mut c = crate::msgpack::Cursor::new(&bytes, 0, 0);
                    Some(c.read_value(&field)?)
                }
                None => None,
            };
            out.push(KernelFile {
                key: k.key.clone(),
                target: k.target.clone(),
                path: dir.join(&k.file),
                metadata,
            });
        }
        Ok(out)
    }

    /// Read the directory's code objects in ordinal order: `(key, target,
    /// bytes, metadata)`. Files are taken as they are (an edited code
    /// object is fine; its size comes from the file).
    pub fn load_kernels(&self, dir: &Path) -> Result<Vec<LoadedKernel>> {
        self.kernel_files(dir)?
            .into_iter()
            .map(|k| {
                let data = fs::read(&k.path).map_err(|e| Error::from(e).with_path(&k.path))?;
                Ok(LoadedKernel {
                    key: k.key,
                    target: k.target,
                    data,
                    metadata: k.metadata,
                })
            })
            .collect()
    }

    /// A writer holding the directory's code objects in ordinal order, with
    /// the manifest's group, family, arches and metadata.
    pub fn to_writer(&self, dir: &Path, compression: Compression) -> Result<KpackWriter<'static>> {
        let mut w = KpackWriter::new(compression);
        w.like_unpacked(self);
        for k in self.load_kernels(dir)? {
            w.add_with_metadata(&k.key, &k.target, k.data, k.metadata)?;
        }
        Ok(w)
    }
}

/// What `kpack pack --input-dir` takes from a directory.
#[derive(Clone, Debug, PartialEq)]
pub enum PackDir {
    /// A directory written by [`unpack_to_dir`] (it has [`UNPACK_MANIFEST`]):
    /// its manifest and its code objects in ordinal order, rebuilt exactly
    /// (a writer's `like_unpacked` takes the rest from the manifest).
    Unpacked(UnpackManifest, Vec<KernelFile>),
    /// Any other directory: its regular files in natural name order
    /// ([`natural_key`]), each with the target its name gives
    /// ([`target_from_file_name`]); the caller gives them keys.
    Plain(Vec<(String, std::path::PathBuf)>),
}

/// Reads what `dir` gives `kpack pack` (the inverse of [`unpack_to_dir`]
/// for an unpacked directory).
pub fn read_pack_dir(dir: &Path) -> Result<PackDir> {
    if dir.join(UNPACK_MANIFEST).is_file() {
        let m = UnpackManifest::read(dir)?;
        let files = m.kernel_files(dir)?;
        return Ok(PackDir::Unpacked(m, files));
    }
    let invalid = |message: String| {
        Error::new(ErrorKind::Invalid {
            field: "input directory".into(),
            message,
        })
        .with_path(dir)
    };
    let mut files: Vec<std::path::PathBuf> = fs::read_dir(dir)
        .and_then(|rd| rd.map(|e| e.map(|e| e.path())).collect())
        .map_err(|e| invalid(format!("cannot list directory: {e}")))?;
    files.retain(|p| p.is_file());
    files.sort_by_key(|p| natural_key(p));
    if files.is_empty() {
        return Err(invalid("no code object files".into()));
    }
    files
        .into_iter()
        .map(|f| match target_from_file_name(&f) {
            Some(t) => Ok((t, f)),
            None => Err(invalid(format!(
                "{}: cannot tell the target from the file name (expected …--gfxNNN.hsaco or gfxNNN.hsaco)",
                f.display()
            ))),
        })
        .collect::<Result<Vec<_>>>()
        .map(PackDir::Plain)
}

/// A code object of an unpacked directory, by file.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelFile {
    /// TOC binary key.
    pub key: String,
    /// Arch key.
    pub target: String,
    /// The code object's file.
    pub path: std::path::PathBuf,
    /// Entry `metadata`, if any.
    pub metadata: Option<rmpv::Value>,
}

/// A code object read back from an unpacked directory.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedKernel {
    /// TOC binary key.
    pub key: String,
    /// Arch key.
    pub target: String,
    /// The code object.
    pub data: Vec<u8>,
    /// Entry `metadata`, if any.
    pub metadata: Option<rmpv::Value>,
}

/// Write every code object of `reader` into `dir` plus the manifest.
///
/// When `dir` does not exist, everything is written to a sibling staging
/// directory that is renamed into place at the end; otherwise files are
/// staged inside `dir` and renamed one by one, the manifest last. On error
/// nothing partial is left behind.
pub fn unpack_to_dir(reader: &KpackReader, dir: &Path) -> Result<UnpackManifest> {
    let entries = reader.entries_by_ordinal();
    // All or nothing, also into an existing directory: files are staged
    // beside it and committed in one journaled step (see `commit`); names
    // that already exist there are refused before anything moves.
    let commit_err = |e: crate::commit::CommitError| Error::from(e.error).with_path(&e.path);
    let stage = crate::commit::StagingDir::new(dir).map_err(commit_err)?;
    let names: Vec<std::ffi::OsString> = entries
        .iter()
        .map(|e| unpack_file_name(e.ordinal, &e.key, &e.target).into())
        .chain(std::iter::once(UNPACK_MANIFEST.into()))
        .collect();
    if let Some(c) = stage.conflicts(&names).into_iter().next() {
        return Err(Error::from(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "already exists (unpack never overwrites)",
        ))
        .with_path(c));
    }
    // Each code object is streamed into its file (256 KiB at a time) and
    // hashed on the way: none is held whole, whatever its size.
    let kernels = crate::ordered::try_map_ordered(&entries, |e| -> Result<UnpackedKernel> {
        let p = stage
            .path()
            .join(unpack_file_name(e.ordinal, &e.key, &e.target));
        let io = |err: std::io::Error| Error::from(err).with_path(&p);
        let mut f = std::io::BufWriter::with_capacity(1 << 18, fs::File::create(&p).map_err(io)?);
        let (size, sha256) = stream_hashed(reader, e, &mut |b| {
            std::io::Write::write_all(&mut f, b).map_err(io)
        })?;
        std::io::Write::flush(&mut f).map_err(io)?;
        UnpackedKernel::of(e, size, sha256)
    })?;
    let manifest = UnpackManifest::with_kernels(reader, kernels);
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| {
        Error::new(ErrorKind::Invalid {
            field: "manifest".into(),
            message: e.to_string(),
        })
    })?;
    let mpath = stage.path().join(UNPACK_MANIFEST);
    fs::write(&mpath, &json).map_err(|e| Error::from(e).with_path(&mpath))?;
    stage.commit().map_err(commit_err)?;
    Ok(manifest)
}

/// The target of a code object file written by an unbundler (`kpack
/// pack` of a plain directory): the text after the last `--` of its stem
/// (`x-hipv4-amdgcn-amd-amdhsa--gfx1100.hsaco`), or a stem that starts
/// with `gfx`; `None` otherwise.
pub fn target_from_file_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let stem = match name.rsplit_once('.') {
        Some((s, "hsaco" | "co" | "elf" | "o" | "bin")) => s,
        _ => name,
    };
    if let Some((_, t)) = stem.rsplit_once("--") {
        if !t.is_empty() {
            return Some(t.to_owned());
        }
    }
    stem.starts_with("gfx").then(|| stem.to_owned())
}

/// Sort key that orders digit runs numerically (`b2-…` before `b10-…`),
/// so per-target indices follow bundle order for `kpack unbundle` output.
pub fn natural_key(p: &Path) -> Vec<(u8, u128, String)> {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut chars = name.chars().peekable();
    while let Some(&c) = chars.peek() {
        let mut run = String::new();
        let digit = c.is_ascii_digit();
        while let Some(&d) = chars.peek() {
            if d.is_ascii_digit() != digit {
                break;
            }
            run.push(d);
            chars.next();
        }
        if digit {
            let n = run.parse::<u128>().unwrap_or(u128::MAX);
            out.push((0, n, run));
        } else {
            out.push((1, 0, run));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_directory_names() {
        let t = |n: &str| target_from_file_name(Path::new(n));
        assert_eq!(
            t("b0-e1-hipv4-amdgcn-amd-amdhsa--gfx1100.hsaco").as_deref(),
            Some("gfx1100")
        );
        assert_eq!(t("x--gfx90a:xnack+").as_deref(), Some("gfx90a:xnack+"));
        assert_eq!(t("gfx942.co").as_deref(), Some("gfx942"));
        assert_eq!(t("readme.txt"), None);
        assert_eq!(t("x--.hsaco"), None);
        let mut v = vec!["b10-e0", "b2-e1", "b2-e0", "a"];
        v.sort_by_key(|n| natural_key(Path::new(n)));
        assert_eq!(v, ["a", "b2-e0", "b2-e1", "b10-e0"]);
    }

    #[test]
    fn a_pack_dir_is_an_unpacked_archive_or_plain_files() {
        let tmp = tempfile::tempdir().unwrap();
        // Unpacked: the archive's code objects come back in ordinal order.
        let mut w = KpackWriter::new(Compression::None);
        w.group_name("g");
        w.add("lib/a#0", "gfx1100", vec![1, 2]).unwrap();
        w.add("lib/a#1", "gfx1100", vec![3]).unwrap();
        let archive = tmp.path().join("a.kpack");
        w.write_to_path(&archive).unwrap();
        let unpacked = tmp.path().join("u");
        unpack_to_dir(&KpackReader::open_file(&archive).unwrap(), &unpacked).unwrap();
        let PackDir::Unpacked(m, files) = read_pack_dir(&unpacked).unwrap() else {
            panic!("not read as unpacked");
        };
        assert_eq!(m.group_name, "g");
        let keys: Vec<&str> = files.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["lib/a#0", "lib/a#1"]);
        // Plain: regular files in natural order with their targets.
        let plain = tmp.path().join("p");
        fs::create_dir_all(plain.join("sub")).unwrap();
        for n in ["b10-e0--gfx906.hsaco", "b2-e0--gfx1100.hsaco"] {
            fs::write(plain.join(n), b"x").unwrap();
        }
        let PackDir::Plain(files) = read_pack_dir(&plain).unwrap() else {
            panic!("not read as plain");
        };
        let targets: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(targets, ["gfx1100", "gfx906"]);
        fs::write(plain.join("readme.txt"), b"x").unwrap();
        let e = read_pack_dir(&plain).unwrap_err().to_string();
        assert!(e.contains("readme.txt: cannot tell the target"), "{e}");
        assert!(read_pack_dir(&plain.join("sub")).is_err());
    }
}
