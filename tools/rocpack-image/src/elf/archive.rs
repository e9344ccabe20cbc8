//! `ar` archives (GNU/SysV format, as `ar` and `llvm-ar` write them on
//! Linux): member listing, per-member split and reassembly. Member headers
//! are kept verbatim except for the size field, and the symbol table's
//! member offsets are rewritten, so the output is deterministic whenever the
//! input was (`ar D` / `llvm-ar D`).

use rocpack_bundle::ReadAt;

use crate::elf::analyze::{analyze, FatBinaryInfo};
use crate::elf::headers::is_elf;
use crate::elf::{BundlesFn, MarkerFn};
use crate::Out;
use crate::State;
use crate::{Error, Result};

const MAGIC: &[u8] = b"!<arch>\n";
const HDR: usize = 60;

/// One archive member (its bytes: a slice of the archive, or a
/// [`crate::elf::SparseView`] of the parts of a file that were loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveMember<'a, D = &'a [u8]> {
    /// Member name (long names resolved, trailing `/` removed).
    pub name: String,
    /// Offset of the member's 60-byte header.
    pub header_offset: u64,
    /// The member's bytes.
    pub data: D,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

/// Whether `data` starts with the `!<arch>\n` magic.
pub fn is_archive(data: &[u8]) -> bool {
    data.starts_with(MAGIC)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SymTab32,
    SymTab64,
    LongNames,
    Member,
}

struct Raw<'a> {
    kind: Kind,
    header_offset: usize,
    header: &'a [u8],
    /// Size of the body (after the header).
    size: usize,
    name: String,
}

impl Raw<'_> {
    fn body(&self) -> std::ops::Range<usize> {
        self.header_offset + HDR..self.header_offset + HDR + self.size
    }
}

/// The entries of an archive: `data` is the whole archive, or a
/// [`crate::elf::SparseView`] with its headers and long-name table loaded.
fn parse<'a, D: object::ReadRef<'a>>(data: D) -> Result<Vec<Raw<'a>>> {
    let total = usize::try_from(data.len().unwrap_or(0)).unwrap_or(usize::MAX);
    if !data
        .read_bytes_at(0, MAGIC.len() as u64)
        .is_ok_and(is_archive)
    {
        return Err(Error::Archive {
            offset: 0,
            what: "missing !<arch> magic".into(),
        });
    }
    let mut out = Vec::new();
    let mut pos = MAGIC.len();
    let mut long_names: &[u8] = &[];
    while pos < total {
        let header = data
            .read_bytes_at(pos as u64, HDR as u64)
            .map_err(|()| Error::Archive {
                offset: pos as u64,
                what: "truncated member header (60 bytes expected)".into(),
            })?;
        if &header[58..60] != b"`\n" {
            return Err(Error::Archive {
                offset: pos as u64 + 58,
                what: "bad member header terminator (expected \"`\\n\")".into(),
            });
        }
        let size_txt = std::str::from_utf8(&header[48..58]).unwrap_or("").trim();
        let size: usize = size_txt.parse().map_err(|_| Error::Archive {
            offset: pos as u64 + 48,
            what: format!("bad member size {size_txt:?}"),
        })?;
        let start = pos + HDR;
        if start.checked_add(size).is_none_or(|end| end > total) {
            return Err(Error::Archive {
                offset: pos as u64 + 48,
                what: format!("member of {size} bytes runs past the end of the archive"),
            });
        }
        let raw_name = &header[..16];
        let name_txt = String::from_utf8_lossy(raw_name).trim_end().to_string();
        let (kind, name) = if name_txt == "/" {
            (Kind::SymTab32, name_txt)
        } else if name_txt == "/SYM64/" {
            (Kind::SymTab64, name_txt)
        } else if name_txt == "//" {
            long_names = data
                .read_bytes_at(start as u64, size as u64)
                .map_err(|()| Error::Archive {
                    offset: start as u64,
                    what: "long-name table not loaded".into(),
                })?;
            (Kind::LongNames, name_txt)
        } else if let Some(num) = name_txt.strip_prefix('/') {
            let off: usize = num.parse().map_err(|_| Error::Archive {
                offset: pos as u64,
                what: format!("bad long-name reference {name_txt:?}"),
            })?;
            let rest = long_names.get(off..).ok_or_else(|| Error::Archive {
                offset: pos as u64,
                what: format!("long-name offset {off} outside the name table"),
            })?;
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            let n = String::from_utf8_lossy(&rest[..end]);
            (Kind::Member, n.trim_end_matches('/').to_string())
        } else if name_txt.starts_with("#1/") {
            return Err(Error::Archive {
                offset: pos as u64,
                what: "BSD-style archive names are not supported".into(),
            });
        } else {
            (Kind::Member, name_txt.trim_end_matches('/').to_string())
        };
        out.push(Raw {
            kind,
            header_offset: pos,
            header,
            size,
            name,
        });
        pos = start + size + (size & 1);
    }
    Ok(out)
}

/// List the members (not the symbol table or long-name table).
pub fn archive_members(data: &[u8]) -> Result<Vec<ArchiveMember<'_>>> {
    Ok(parse(data)?
        .into_iter()
        .filter(|r| r.kind == Kind::Member)
        .map(|r| ArchiveMember {
            data: &data[r.body()],
            name: r.name,
            header_offset: r.header_offset as u64,
            _bytes: std::marker::PhantomData,
        })
        .collect())
}

/// [`archive_members`] of an archive read through a [`crate::elf::SparseView`]
/// ([`crate::elf::Sparse::load_archive`] loaded its headers and long-name
/// table): each member's bytes are a view of its range.
pub fn archive_members_in(
    data: crate::elf::SparseView<'_>,
) -> Result<Vec<ArchiveMember<'_, crate::elf::SparseView<'_>>>> {
    Ok(parse(data)?
        .into_iter()
        .filter(|r| r.kind == Kind::Member)
        .map(|r| ArchiveMember {
            data: data.sub(r.body().start as u64, r.size as u64),
            name: r.name,
            header_offset: r.header_offset as u64,
            _bytes: std::marker::PhantomData,
        })
        .collect())
}

/// Where rewritten member bodies go while the archive is laid out: each
/// is appended and given back as the offset it starts at.
type AuxFn<'a> = dyn FnMut(&[u8]) -> Result<u64> + 'a;
/// A member's new body (`None`: kept as it is), given its bytes.
type BodyFn<'a> = dyn FnMut(&Raw<'_>, &[u8]) -> Result<Option<Vec<u8>>> + 'a;

/// The archive rebuilt with `new_body(member, bytes)` replacing members, as
/// pieces: member headers as new bytes (the size field rewritten), kept
/// bodies as input ranges, new bodies as ranges of the auxiliary source
/// `aux` appends them to (one at a time: nothing but the member being
/// rewritten is in memory), the symbol tables' member offsets patched.
/// Member bodies are read from `src` (positioned reads), never through
/// `data`, which only headers and symbol tables are read from.
fn rewrite_plan(
    data: &[u8],
    src: &dyn ReadAt,
    new_body: &mut BodyFn<'_>,
    aux: &mut AuxFn<'_>,
) -> Result<Out> {
    let raws = parse(data)?;
    let mut out = Out::default();
    out.extend_from_slice(MAGIC);
    let mut offsets: Vec<(u64, u64)> = Vec::new();
    let mut symtabs: Vec<(u64, usize, Kind, usize)> = Vec::new();
    for r in &raws {
        let body_at = (r.header_offset + HDR) as u64;
        let body: Option<Vec<u8>> = if r.kind == Kind::Member {
            let mut bytes = vec![0u8; r.size];
            read_exact_at(src, body_at, &mut bytes)?;
            new_body(r, &bytes).map_err(|e| Error::Member {
                name: r.name.clone(),
                offset: r.header_offset as u64 + HDR as u64,
                source: Box::new(e),
            })?
        } else {
            None
        };
        let len = body.as_ref().map_or(r.size, Vec::len);
        offsets.push((r.header_offset as u64, out.len()));
        let mut header = r.header.to_vec();
        let size = len.to_string();
        if size.len() > 10 {
            return Err(Error::Archive {
                offset: r.header_offset as u64,
                what: "member too large for the ar size field".into(),
            });
        }
        header[48..58].fill(b' ');
        header[48..48 + size.len()].copy_from_slice(size.as_bytes());
        out.extend_from_slice(&header);
        if matches!(r.kind, Kind::SymTab32 | Kind::SymTab64) {
            symtabs.push((out.len(), r.header_offset + HDR, r.kind, len));
        }
        match body {
            Some(b) => {
                let at = aux(&b)?;
                out.push_aux(at, b.len() as u64);
            }
            None => out.push_src(body_at, len as u64),
        }
        if len % 2 == 1 {
            out.extend_from_slice(b"\n");
        }
    }
    // Symbol tables list member header offsets: map them to the new ones.
    for (start, input_at, kind, len) in symtabs {
        let w = if kind == Kind::SymTab64 { 8 } else { 4 };
        let read = |b: &[u8]| -> u64 { b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)) };
        let table = data
            .get(input_at..input_at + len)
            .ok_or_else(|| Error::Archive {
                offset: input_at as u64,
                what: "symbol table truncated".into(),
            })?;
        let count = read(table.get(..w).unwrap_or(&[])) as usize;
        if count
            .checked_mul(w)
            .and_then(|x| x.checked_add(w))
            .is_none_or(|need| need > len)
        {
            return Err(Error::Archive {
                offset: start,
                what: format!("symbol table lists {count} symbols but has {len} bytes"),
            });
        }
        for k in 0..count {
            let at = w + k * w;
            let old = read(&table[at..at + w]);
            let new = offsets
                .iter()
                .find(|(o, _)| *o == old)
                .map(|(_, n)| *n)
                .ok_or_else(|| Error::Archive {
                    offset: start + at as u64,
                    what: format!("symbol table points at {old:#x}, not a member header"),
                })?;
            let bytes = new.to_be_bytes();
            out.put(start + at as u64, &bytes[8 - w..])?;
        }
    }
    Ok(out)
}

/// Fill `buf` from `src` at `offset` (a short source is an error).
fn read_exact_at(src: &dyn ReadAt, mut offset: u64, mut buf: &mut [u8]) -> Result<()> {
    let io = |source| Error::Io {
        what: "reading an archive member",
        source,
    };
    while !buf.is_empty() {
        let n = src.read_at(offset, buf).map_err(io)?;
        if n == 0 {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "archive ended at offset {offset:#x} while it was read (changed under us?)"
                ),
            )));
        }
        offset += n as u64;
        buf = &mut buf[n..];
    }
    Ok(())
}

/// Rebuild the archive in memory.
fn rewrite(data: &[u8], new_body: &mut BodyFn<'_>) -> Result<Vec<u8>> {
    let mut bodies = Vec::new();
    let out = rewrite_plan(data, &data, new_body, &mut |b| {
        let at = bodies.len() as u64;
        bodies.extend_from_slice(b);
        Ok(at)
    })?;
    out.to_vec(&data, &bodies.as_slice())
}

/// Rebuild the archive into `dst`, new member bodies going through
/// `spill` (an empty file opened for reading and writing) first.
fn rewrite_to(
    data: &[u8],
    src: &dyn ReadAt,
    new_body: &mut BodyFn<'_>,
    spill: &std::fs::File,
    dst: &mut dyn std::io::Write,
) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut end = 0u64;
    let out = rewrite_plan(data, src, new_body, &mut |b| {
        let at = end;
        spill.write_all_at(b, at).map_err(|source| Error::Io {
            what: "writing the member spill file",
            source,
        })?;
        end += b.len() as u64;
        Ok(at)
    })?;
    let aux = rocpack_bundle::FileRange::new(spill, 0, end);
    out.write_to(src, &aux, dst).map_err(|source| Error::Io {
        what: "writing the archive",
        source,
    })
}

fn split_member<'a, 'b>(
    marker_for: &'a mut MarkerFn<'b>,
) -> impl FnMut(&Raw<'_>, &[u8]) -> Result<Option<Vec<u8>>> + use<'a, 'b> {
    move |r, bytes| {
        if !is_elf(bytes) {
            return Ok(None);
        }
        let info = analyze(bytes)?;
        if !info.has_device_code() {
            return Ok(None);
        }
        let marker = marker_for(&r.name, &info)?;
        crate::elf::split_host(bytes, &marker).map(Some)
    }
}

fn reassemble_member<'a, 'b>(
    bundles_for: &'a mut BundlesFn<'b>,
) -> impl FnMut(&Raw<'_>, &[u8]) -> Result<Option<Vec<u8>>> + use<'a, 'b> {
    move |r, bytes| {
        if !is_elf(bytes) {
            return Ok(None);
        }
        let info: FatBinaryInfo = analyze(bytes)?;
        if info.state != State::Split {
            return Ok(None);
        }
        let bundles = bundles_for(&r.name, &info)?;
        crate::elf::reassemble(bytes, &bundles).map(Some)
    }
}

/// Split every member with device code (`marker_for(member name, analysis)`
/// gives its marker); other members are kept byte for byte.
pub fn split_archive(data: &[u8], marker_for: &mut MarkerFn<'_>) -> Result<Vec<u8>> {
    rewrite(data, &mut split_member(marker_for))
}

/// [`split_archive`] written to `dst` with memory bounded by the largest
/// member: members are read one at a time from `src` (a source of the same
/// bytes as `data`, which only member headers and symbol tables are read
/// from), split members go through `spill` (an empty file opened for
/// reading and writing), kept members are copied range by range. Returns
/// the bytes written.
pub fn split_archive_to(
    data: &[u8],
    src: &dyn ReadAt,
    marker_for: &mut MarkerFn<'_>,
    spill: &std::fs::File,
    dst: &mut dyn std::io::Write,
) -> Result<u64> {
    rewrite_to(data, src, &mut split_member(marker_for), spill, dst)
}

/// Reassemble every split member (`bundles_for(member name, analysis)`).
pub fn reassemble_archive(data: &[u8], bundles_for: &mut BundlesFn<'_>) -> Result<Vec<u8>> {
    rewrite(data, &mut reassemble_member(bundles_for))
}

/// [`reassemble_archive`] written to `dst`, as [`split_archive_to`] writes
/// a split.
pub fn reassemble_archive_to(
    data: &[u8],
    src: &dyn ReadAt,
    bundles_for: &mut BundlesFn<'_>,
    spill: &std::fs::File,
    dst: &mut dyn std::io::Write,
) -> Result<u64> {
    rewrite_to(data, src, &mut reassemble_member(bundles_for), spill, dst)
}
