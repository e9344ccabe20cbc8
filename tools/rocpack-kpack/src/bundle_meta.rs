//! The `bundle` key of a `.kpack` entry's free-form `metadata` map: where
//! the code object sat in its original bundle, so `kpack reassemble` can
//! restore every bundle in its original container format and version, with
//! its original entry IDs, order and offsets (docs/formats/split-elf.md).
//!
//! ```text
//! metadata = { target: <entry ID>, source_prefix: <prefix>,
//!              bundle: { format: "uncompressed" | "ccob",
//!                        version: 1|2|3, method: "zlib"|"zstd",   (ccob only)
//!                        size: <uncompressed bundle bytes>,
//!                        count: <entries>, index: <this entry's position>,
//!                        offset: <this code object's offset>,
//!                        host: [[position, ID, offset], ...],  (empty entries
//!                                                              no archive holds)
//!                        hash: <the CCOB header's hash>,      (ccob only; optional,
//!                        packed: <the CCOB's bytes> } }        written since issue 22)
//! ```
//! Readers (ROCm's runtime included) ignore `metadata`; the key is written
//! only when the layout reproduces the original bytes exactly
//! ([`BundleLayout::of`]).

use rmpv::Value;
use rocpack_bundle::{BundleLayout, Format, LayoutEntry, Method};

/// The `bundle` value for entry `index` of `layout`, or `None` when an
/// entry no archive will hold (`is_stored(position)` false: host entries)
/// carries bytes.
pub fn encode(
    layout: &BundleLayout,
    index: usize,
    is_stored: impl Fn(usize) -> bool,
) -> Option<Value> {
    let me = layout.entries.get(index)?;
    let mut host = Vec::new();
    for (i, e) in layout.entries.iter().enumerate() {
        if !is_stored(i) {
            if e.size != 0 {
                return None;
            }
            host.push(Value::Array(vec![
                Value::from(i as u64),
                Value::from(e.id.as_str()),
                Value::from(e.offset),
            ]));
        }
    }
    let mut m = Vec::with_capacity(9);
    match layout.format {
        Format::Uncompressed => m.push((Value::from("format"), Value::from("uncompressed"))),
        Format::Ccob { version, method } => {
            m.push((Value::from("format"), Value::from("ccob")));
            m.push((Value::from("version"), Value::from(version)));
            m.push((Value::from("method"), Value::from(method.name())));
        }
    }
    m.push((Value::from("size"), Value::from(layout.size)));
    m.push((
        Value::from("count"),
        Value::from(layout.entries.len() as u64),
    ));
    m.push((Value::from("index"), Value::from(index as u64)));
    m.push((Value::from("offset"), Value::from(me.offset)));
    m.push((Value::from("host"), Value::Array(host)));
    if let Format::Ccob { .. } = layout.format {
        if let Some(h) = layout.hash {
            m.push((Value::from("hash"), Value::from(h)));
        }
        if let Some(n) = layout.packed {
            m.push((Value::from("packed"), Value::from(n)));
        }
    }
    Some(Value::Map(m))
}

/// What one entry's metadata says about its bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPlace {
    /// The entry ID (`metadata.target`).
    pub id: String,
    /// Container format of the bundle.
    pub format: Format,
    /// Uncompressed bundle size.
    pub size: u64,
    /// Number of entries of the bundle.
    pub count: u64,
    /// Position of this entry.
    pub index: u64,
    /// Offset of this code object.
    pub offset: u64,
    /// Entries held by no archive: (position, ID, offset), all empty.
    pub host: Vec<(u64, String, u64)>,
    /// The original CCOB header's hash (absent in records written before
    /// issue 22, and for uncompressed bundles).
    pub hash: Option<u64>,
    /// The original CCOB's size, header included (as `hash`).
    pub packed: Option<u64>,
}

fn get<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// Decode an entry's metadata; `None` when it has no (valid) `bundle` key.
pub fn decode(metadata: &Value) -> Option<EntryPlace> {
    let id = get(metadata, "target")?.as_str()?.to_string();
    let b = get(metadata, "bundle")?;
    let u = |k: &str| get(b, k).and_then(Value::as_u64);
    let format = match get(b, "format")?.as_str()? {
        "uncompressed" => Format::Uncompressed,
        "ccob" => {
            let version = u16::try_from(u("version")?).ok()?;
            let method = match get(b, "method")?.as_str()? {
                "zstd" => Method::Zstd,
                "zlib" => Method::Zlib,
                _ => return None,
            };
            Format::Ccob { version, method }
        }
        _ => return None,
    };
    let mut host = Vec::new();
    for h in get(b, "host")?.as_array()? {
        let h = h.as_array()?;
        match h.as_slice() {
            [i, id, off] => host.push((i.as_u64()?, id.as_str()?.to_string(), off.as_u64()?)),
            _ => return None,
        }
    }
    Some(EntryPlace {
        id,
        format,
        size: u("size")?,
        count: u("count")?,
        index: u("index")?,
        offset: u("offset")?,
        host,
        hash: match get(b, "hash") {
            None => None,
            Some(h) => Some(h.as_u64()?),
        },
        packed: match get(b, "packed") {
            None => None,
            Some(h) => Some(h.as_u64()?),
        },
    })
}

/// The original layout of a bundle from the places of its stored code
/// objects (`parts`: place and code object size). `Err` says why it
/// cannot be restored exactly (missing or disagreeing entries).
pub fn restore(parts: &[(&EntryPlace, u64)]) -> Result<BundleLayout, String> {
    let (first, _) = parts.first().ok_or("no code objects")?;
    let count = usize::try_from(first.count).map_err(|_| "entry count")?;
    if count > parts.len() + first.host.len() {
        return Err(format!(
            "the bundle had {count} entries, the archives hold {} of them",
            parts.len()
        ));
    }
    let mut entries: Vec<Option<LayoutEntry>> = vec![None; count];
    let mut put = |i: u64, e: LayoutEntry| -> Result<(), String> {
        let slot = usize::try_from(i)
            .ok()
            .and_then(|i| entries.get_mut(i))
            .ok_or_else(|| format!("entry position {i} out of range"))?;
        if slot.as_ref().is_some_and(|old| *old != e) {
            return Err(format!("two different entries at position {i}"));
        }
        *slot = Some(e);
        Ok(())
    };
    for h in &first.host {
        put(
            h.0,
            LayoutEntry {
                id: h.1.clone(),
                offset: h.2,
                size: 0,
            },
        )?;
    }
    for (p, size) in parts {
        if p.format != first.format
            || p.size != first.size
            || p.count != first.count
            || p.host != first.host
            || p.hash != first.hash
            || p.packed != first.packed
        {
            return Err("the archives disagree about the bundle".into());
        }
        put(
            p.index,
            LayoutEntry {
                id: p.id.clone(),
                offset: p.offset,
                size: *size,
            },
        )?;
    }
    let missing = entries.iter().filter(|e| e.is_none()).count();
    if missing > 0 {
        return Err(format!(
            "{missing} of its {count} entries are in none of the archives"
        ));
    }
    Ok(BundleLayout {
        format: first.format,
        size: first.size,
        entries: entries.into_iter().flatten().collect(),
        hash: first.hash,
        packed: first.packed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> BundleLayout {
        BundleLayout {
            format: Format::Ccob {
                version: 3,
                method: Method::Zstd,
            },
            size: 8192,
            entries: vec![
                LayoutEntry {
                    id: "host-x86_64-unknown-linux-gnu-".into(),
                    offset: 4096,
                    size: 0,
                },
                LayoutEntry {
                    id: "hipv4-amdgcn-amd-amdhsa--gfx1100".into(),
                    offset: 4096,
                    size: 10,
                },
                LayoutEntry {
                    id: "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-".into(),
                    offset: 4106,
                    size: 5,
                },
            ],
            hash: Some(0xfedc_ba98_7654_3210),
            packed: Some(4321),
        }
    }

    fn place(l: &BundleLayout, i: usize) -> EntryPlace {
        let v = encode(l, i, |j| j != 0).unwrap();
        let meta = Value::Map(vec![
            (Value::from("target"), Value::from(l.entries[i].id.as_str())),
            (Value::from("bundle"), v),
        ]);
        decode(&meta).unwrap()
    }

    #[test]
    fn round_trip_and_restore() {
        let l = layout();
        let a = place(&l, 1);
        let b = place(&l, 2);
        assert_eq!(restore(&[(&b, 5), (&a, 10)]).unwrap(), l);
        let err = restore(&[(&a, 10)]).unwrap_err();
        assert!(err.contains("hold 1 of them"), "{err}");
        let mut c = b.clone();
        c.size = 1;
        assert!(restore(&[(&a, 10), (&c, 5)]).is_err());
        let mut d = b.clone();
        d.index = 1;
        assert!(restore(&[(&a, 10), (&d, 5)]).is_err());
        let mut e = b.clone();
        e.hash = Some(1);
        assert!(restore(&[(&a, 10), (&e, 5)]).is_err());
    }

    /// Records written before the hash was: no `hash` key, no hash (the
    /// rebuild hashes the payload); a record with a hash keeps it.
    #[test]
    fn hash_is_optional() {
        let mut l = layout();
        assert_eq!(place(&l, 1).hash, Some(0xfedc_ba98_7654_3210));
        assert_eq!(place(&l, 1).packed, Some(4321));
        l.hash = None;
        l.packed = None;
        let a = place(&l, 1);
        assert_eq!((a.hash, a.packed), (None, None));
        let b = place(&l, 2);
        let r = restore(&[(&a, 10), (&b, 5)]).unwrap();
        assert_eq!((r.hash, r.packed), (None, None));
        let mut u = layout();
        u.format = Format::Uncompressed;
        assert_eq!(place(&u, 1).hash, None, "only CCOB records carry one");
        assert_eq!(place(&u, 1).packed, None);
    }

    #[test]
    fn host_entries_with_bytes_are_not_encoded() {
        let mut l = layout();
        l.entries[0].size = 3;
        assert!(encode(&l, 1, |j| j != 0).is_none());
    }
}
