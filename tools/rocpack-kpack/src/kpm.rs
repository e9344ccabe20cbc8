//! The retired `.kpm` manifest (read for compatibility; encoded only so the
//! golden files can be checked byte for byte).
//!
//! One MessagePack map, key order `format_version`, `component_name`,
//! `prefix`, `kpack_files` (map arch -> `{file, size, kernel_count}`).

use std::path::Path;

use crate::error::{Error, ErrorKind, Result};
use crate::msgpack::{enc, q, Cursor};

/// One `kpack_files[arch]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KpmFile {
    /// The arch key.
    pub arch: String,
    /// Basename of the `.kpack` file (same directory as the manifest).
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Kernels for this arch.
    pub kernel_count: u64,
}

/// A decoded `.kpm` manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kpm {
    /// `format_version` (1).
    pub format_version: u64,
    /// `component_name`.
    pub component_name: String,
    /// `prefix`.
    pub prefix: String,
    /// `kpack_files`, in file order.
    pub kpack_files: Vec<KpmFile>,
}

impl Kpm {
    /// Read and decode a `.kpm` file.
    pub fn open(path: impl AsRef<Path>) -> Result<Kpm> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::from(e).with_path(path))?;
        Kpm::decode(&bytes).map_err(|e| e.with_path(path))
    }

    /// Decode strictly (all four keys, right types, nothing after the map).
    pub fn decode(bytes: &[u8]) -> Result<Kpm> {
        let mut c = Cursor::new(bytes, 0, 0);
        let n = c.read_map_len(&|| "kpm".into())?;
        let (mut fv, mut comp, mut prefix, mut files) = (None, None, None, None);
        for _ in 0..n {
            let at = c.offset();
            match c.read_str(&|| "kpm key".into())? {
                "format_version" if fv.is_none() => {
                    fv = Some(c.read_uint(&|| "format_version".into())?)
                }
                "component_name" if comp.is_none() => {
                    comp = Some(c.read_str(&|| "component_name".into())?.to_owned())
                }
                "prefix" if prefix.is_none() => {
                    prefix = Some(c.read_str(&|| "prefix".into())?.to_owned())
                }
                "kpack_files" if files.is_none() => {
                    let m = c.read_map_len(&|| "kpack_files".into())?;
                    let mut v = Vec::with_capacity(m);
                    for _ in 0..m {
                        let arch = c.read_str(&|| "kpack_files key".into())?.to_owned();
                        let eat = c.offset();
                        let f = |leaf: &str| format!("kpack_files{}{leaf}", q(&arch));
                        let k = c.read_map_len(&|| f(""))?;
                        let (mut file, mut size, mut count) = (None, None, None);
                        for _ in 0..k {
                            let kat = c.offset();
                            match c.read_str(&|| f(" key"))? {
                                "file" if file.is_none() => {
                                    file = Some(c.read_str(&|| f(".file"))?.to_owned())
                                }
                                "size" if size.is_none() => {
                                    size = Some(c.read_uint(&|| f(".size"))?)
                                }
                                "kernel_count" if count.is_none() => {
                                    count = Some(c.read_uint(&|| f(".kernel_count"))?)
                                }
                                other => {
                                    return Err(Error::at(
                                        kat,
                                        ErrorKind::Unexpected {
                                            field: f(&format!(".{other}")),
                                        },
                                    ))
                                }
                            }
                        }
                        let miss =
                            |leaf: &str| Error::at(eat, ErrorKind::Missing { field: f(leaf) });
                        v.push(KpmFile {
                            file: file.ok_or_else(|| miss(".file"))?,
                            size: size.ok_or_else(|| miss(".size"))?,
                            kernel_count: count.ok_or_else(|| miss(".kernel_count"))?,
                            arch,
                        });
                    }
                    files = Some(v);
                }
                other => {
                    return Err(Error::at(
                        at,
                        ErrorKind::Unexpected {
                            field: format!("kpm.{other}"),
                        },
                    ))
                }
            }
        }
        if c.remaining() != 0 {
            return Err(Error::at(
                c.offset(),
                ErrorKind::TrailingData {
                    what: "the .kpm map",
                    count: c.remaining() as u64,
                },
            ));
        }
        let miss = |f: &str| {
            Error::at(
                0,
                ErrorKind::Missing {
                    field: f.to_owned(),
                },
            )
        };
        Ok(Kpm {
            format_version: fv.ok_or_else(|| miss("format_version"))?,
            component_name: comp.ok_or_else(|| miss("component_name"))?,
            prefix: prefix.ok_or_else(|| miss("prefix"))?,
            kpack_files: files.ok_or_else(|| miss("kpack_files"))?,
        })
    }

    /// Encode in the reference's key order and integer/str encodings.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut b = Vec::new();
        enc::map(&mut b, 4)?;
        enc::str(&mut b, "format_version")?;
        enc::uint(&mut b, self.format_version)?;
        enc::str(&mut b, "component_name")?;
        enc::str(&mut b, &self.component_name)?;
        enc::str(&mut b, "prefix")?;
        enc::str(&mut b, &self.prefix)?;
        enc::str(&mut b, "kpack_files")?;
        enc::map(&mut b, self.kpack_files.len())?;
        for f in &self.kpack_files {
            enc::str(&mut b, &f.arch)?;
            enc::map(&mut b, 3)?;
            enc::str(&mut b, "file")?;
            enc::str(&mut b, &f.file)?;
            enc::str(&mut b, "size")?;
            enc::uint(&mut b, f.size)?;
            enc::str(&mut b, "kernel_count")?;
            enc::uint(&mut b, f.kernel_count)?;
        }
        Ok(b)
    }
}
