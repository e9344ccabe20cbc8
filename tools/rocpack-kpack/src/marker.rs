//! The `.rocm_kpack_ref` marker payload.
//!
//! One MessagePack map, exactly as msgpack-python's
//! `packb({...}, use_bin_type=True)` writes it:
//! `{"kpack_search_paths": [str, ...], "kernel_name": str}` in that key order.

use crate::error::{Error, ErrorKind, Result};
use crate::format::{marker_search_path, toc_key};
use crate::msgpack::{enc, Cursor};

/// ELF section name of the marker.
pub const MARKER_SECTION: &str = ".rocm_kpack_ref";
/// PE/COFF section name of the marker (8-character limit).
pub const MARKER_SECTION_PE: &str = ".kpackrf";
/// The runtime reads at most this many bytes of marker metadata.
pub const MARKER_MAX_LEN: usize = 64 * 1024;

/// Decoded marker: where the runtime looks for `.kpack` files and which TOC
/// key stem it looks up.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Marker {
    /// `.kpack` paths, relative to the binary's directory or absolute; may
    /// contain `@GFXARCH@`.
    pub kpack_search_paths: Vec<String>,
    /// TOC key stem; the runtime looks up `"<kernel_name>#<co_index>"`.
    pub kernel_name: String,
}

impl Marker {
    /// A marker with the given paths and kernel name.
    pub fn new<I, S>(kpack_search_paths: I, kernel_name: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Marker {
            kpack_search_paths: kpack_search_paths.into_iter().map(Into::into).collect(),
            kernel_name: kernel_name.into(),
        }
    }

    /// The marker the splitter writes for a binary `depth` directories below
    /// the artifact prefix root: one path
    /// `"../" * depth + ".kpack/<prefix>_@GFXARCH@.kpack"`.
    pub fn for_split(artifact_prefix: &str, depth: usize, kernel_name: impl Into<String>) -> Self {
        Marker::new([marker_search_path(artifact_prefix, depth)], kernel_name)
    }

    /// The TOC key the runtime looks up for wrapper `co_index`.
    pub fn lookup_key(&self, co_index: u64) -> String {
        toc_key(&self.kernel_name, co_index)
    }

    /// Encode exactly as the reference does.
    ///
    /// Strings must be shorter than 4 GiB (MessagePack's limit).
    pub fn encode(&self) -> Vec<u8> {
        self.try_encode().unwrap_or_default()
    }

    /// Encode, reporting strings too long for MessagePack.
    pub fn try_encode(&self) -> Result<Vec<u8>> {
        let mut b = Vec::with_capacity(
            40 + self.kernel_name.len()
                + self
                    .kpack_search_paths
                    .iter()
                    .map(|p| p.len() + 5)
                    .sum::<usize>(),
        );
        enc::map(&mut b, 2)?;
        enc::str(&mut b, "kpack_search_paths")?;
        enc::array(&mut b, self.kpack_search_paths.len())?;
        for p in &self.kpack_search_paths {
            enc::str(&mut b, p)?;
        }
        enc::str(&mut b, "kernel_name")?;
        enc::str(&mut b, &self.kernel_name)?;
        Ok(b)
    }

    /// Decode as the runtime does: only the first MessagePack object within
    /// the first 64 KiB counts (trailing bytes, e.g. PE section padding, are
    /// ignored); other keys are ignored; non-str elements of
    /// `kpack_search_paths` are skipped; `kernel_name` must be a str and at
    /// least one search path must remain — else an error (the runtime's
    /// `KPACK_ERROR_INVALID_METADATA`).
    pub fn decode(bytes: &[u8]) -> Result<Marker> {
        let bytes = bytes.get(..MARKER_MAX_LEN).unwrap_or(bytes);
        Self::decode_inner(bytes, false).map(|(m, _)| m)
    }

    /// Decode strictly: exactly the two keys, every path a str, nothing
    /// after the map. This is what our own tools write.
    pub fn decode_strict(bytes: &[u8]) -> Result<Marker> {
        let (m, end) = Self::decode_inner(bytes, true)?;
        if end != bytes.len() {
            return Err(Error::at(
                end as u64,
                ErrorKind::TrailingData {
                    what: "the marker map",
                    count: (bytes.len() - end) as u64,
                },
            ));
        }
        Ok(m)
    }

    fn decode_inner(bytes: &[u8], strict: bool) -> Result<(Marker, usize)> {
        let mut c = Cursor::new(bytes, 0, 0);
        let n = c.read_map_len(&|| "marker".into())?;
        let mut paths: Option<Vec<String>> = None;
        let mut name: Option<String> = None;
        for _ in 0..n {
            let at = c.offset();
            let key = if strict {
                c.read_str(&|| "marker key".into())?
            } else {
                // The runtime only matches str keys; skip anything else.
                let pos = c.pos();
                match c.read_str(&|| "marker key".into()) {
                    Ok(k) => k,
                    Err(_) => {
                        c = Cursor::new(bytes, pos, 0);
                        c.read_value(&|| "marker key".into())?;
                        c.read_value(&|| "marker value".into())?;
                        continue;
                    }
                }
            };
            match key {
                "kpack_search_paths" if paths.is_none() => {
                    let m = c.read_array_len(&|| "kpack_search_paths".into())?;
                    let mut v = Vec::with_capacity(m);
                    for i in 0..m {
                        let f = || format!("kpack_search_paths[{i}]");
                        if strict {
                            v.push(c.read_str(&f)?.to_owned());
                        } else {
                            let pos = c.pos();
                            match c.read_str(&f) {
                                Ok(s) => v.push(s.to_owned()),
                                Err(_) => {
                                    c = Cursor::new(bytes, pos, 0);
                                    c.read_value(&f)?;
                                }
                            }
                        }
                    }
                    paths = Some(v);
                }
                "kernel_name" if name.is_none() => {
                    name = Some(c.read_str(&|| "kernel_name".into())?.to_owned());
                }
                other => {
                    if strict {
                        return Err(Error::at(
                            at,
                            ErrorKind::Unexpected {
                                field: format!("marker.{other}"),
                            },
                        ));
                    }
                    c.read_value(&|| format!("marker.{other}"))?;
                }
            }
        }
        let kernel_name = name.ok_or_else(|| {
            Error::at(
                0,
                ErrorKind::Missing {
                    field: "marker.kernel_name".into(),
                },
            )
        })?;
        let kpack_search_paths = paths.ok_or_else(|| {
            Error::at(
                0,
                ErrorKind::Missing {
                    field: "marker.kpack_search_paths".into(),
                },
            )
        })?;
        if kpack_search_paths.is_empty() {
            return Err(Error::at(
                0,
                ErrorKind::Invalid {
                    field: "marker.kpack_search_paths".into(),
                    message: "no str path (the runtime needs at least one)".into(),
                },
            ));
        }
        Ok((
            Marker {
                kpack_search_paths,
                kernel_name,
            },
            c.pos(),
        ))
    }
}
