//! `ar` archives (GNU/SysV format, as `ar` and `llvm-ar` write them on
//! Linux): member listing, per-member split and reassembly. Member headers
//! are kept verbatim except for the size field, and the symbol table's
//! member offsets are rewritten, so the output is deterministic whenever the
//! input was (`ar D` / `llvm-ar D`).

use crate::analyze::{analyze, FatBinaryInfo, State};
use crate::elf::is_elf;
use crate::error::{Error, Result};
use crate::{BundlesFn, MarkerFn};

const MAGIC: &[u8] = b"!<arch>\n";
const HDR: usize = 60;

/// One archive member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveMember<'a> {
    /// Member name (long names resolved, trailing `/` removed).
    pub name: String,
    /// Offset of the member's 60-byte header.
    pub header_offset: u64,
    /// The member's bytes.
    pub data: &'a [u8],
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
    data: &'a [u8],
    name: String,
}

fn parse(data: &[u8]) -> Result<Vec<Raw<'_>>> {
    if !is_archive(data) {
        return Err(Error::Archive {
            offset: 0,
            what: "missing !<arch> magic".into(),
        });
    }
    let mut out = Vec::new();
    let mut pos = MAGIC.len();
    let mut long_names: &[u8] = &[];
    while pos < data.len() {
        let header = data.get(pos..pos + HDR).ok_or_else(|| Error::Archive {
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
        let body = start
            .checked_add(size)
            .and_then(|end| data.get(start..end))
            .ok_or_else(|| Error::Archive {
                offset: pos as u64 + 48,
                what: format!("member of {size} bytes runs past the end of the archive"),
            })?;
        let raw_name = &header[..16];
        let name_txt = String::from_utf8_lossy(raw_name).trim_end().to_string();
        let (kind, name) = if name_txt == "/" {
            (Kind::SymTab32, name_txt)
        } else if name_txt == "/SYM64/" {
            (Kind::SymTab64, name_txt)
        } else if name_txt == "//" {
            long_names = body;
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
            data: body,
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
            name: r.name,
            header_offset: r.header_offset as u64,
            data: r.data,
        })
        .collect())
}

/// Rebuild the archive with `new_body(member) -> Option<Vec<u8>>` replacing members.
fn rewrite(
    data: &[u8],
    new_body: &mut dyn FnMut(&Raw<'_>) -> Result<Option<Vec<u8>>>,
) -> Result<Vec<u8>> {
    let raws = parse(data)?;
    // No reservation of the input's size: split members shrink by their
    // device code, which is most of a fat archive.
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    let mut offsets: Vec<(u64, u64)> = Vec::new();
    let mut symtabs: Vec<(usize, Kind, usize)> = Vec::new();
    for r in &raws {
        let body: Option<Vec<u8>> = if r.kind == Kind::Member {
            new_body(r).map_err(|e| Error::Member {
                name: r.name.clone(),
                offset: r.header_offset as u64 + HDR as u64,
                source: Box::new(e),
            })?
        } else {
            None
        };
        let body_ref: &[u8] = body.as_deref().unwrap_or(r.data);
        offsets.push((r.header_offset as u64, out.len() as u64));
        let mut header = r.header.to_vec();
        let size = body_ref.len().to_string();
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
            symtabs.push((out.len(), r.kind, body_ref.len()));
        }
        out.extend_from_slice(body_ref);
        if body_ref.len() % 2 == 1 {
            out.push(b'\n');
        }
    }
    // Symbol tables list member header offsets: map them to the new ones.
    for (start, kind, len) in symtabs {
        let w = if kind == Kind::SymTab64 { 8 } else { 4 };
        let read = |b: &[u8]| -> u64 { b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)) };
        let table = out.get(start..start + len).ok_or_else(|| Error::Archive {
            offset: start as u64,
            what: "symbol table truncated".into(),
        })?;
        let count = read(table.get(..w).unwrap_or(&[])) as usize;
        if count
            .checked_mul(w)
            .and_then(|x| x.checked_add(w))
            .is_none_or(|need| need > len)
        {
            return Err(Error::Archive {
                offset: start as u64,
                what: format!("symbol table lists {count} symbols but has {len} bytes"),
            });
        }
        for k in 0..count {
            let at = start + w + k * w;
            let old = read(&out[at..at + w]);
            let new = offsets
                .iter()
                .find(|(o, _)| *o == old)
                .map(|(_, n)| *n)
                .ok_or_else(|| Error::Archive {
                    offset: at as u64,
                    what: format!("symbol table points at {old:#x}, not a member header"),
                })?;
            let bytes = new.to_be_bytes();
            out[at..at + w].copy_from_slice(&bytes[8 - w..]);
        }
    }
    Ok(out)
}

/// Split every member with device code (`marker_for(member name, analysis)`
/// gives its marker); other members are kept byte for byte.
pub fn split_archive(data: &[u8], marker_for: &mut MarkerFn<'_>) -> Result<Vec<u8>> {
    rewrite(data, &mut |r| {
        if !is_elf(r.data) {
            return Ok(None);
        }
        let info = analyze(r.data)?;
        if !info.has_device_code() {
            return Ok(None);
        }
        let marker = marker_for(&r.name, &info)?;
        crate::split_host(r.data, &marker).map(Some)
    })
}

/// Reassemble every split member (`bundles_for(member name, analysis)`).
pub fn reassemble_archive(data: &[u8], bundles_for: &mut BundlesFn<'_>) -> Result<Vec<u8>> {
    rewrite(data, &mut |r| {
        if !is_elf(r.data) {
            return Ok(None);
        }
        let info: FatBinaryInfo = analyze(r.data)?;
        if info.state != State::Split {
            return Ok(None);
        }
        let bundles = bundles_for(&r.name, &info)?;
        crate::reassemble(r.data, &bundles).map(Some)
    })
}
