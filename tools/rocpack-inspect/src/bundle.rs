//! Offload bundles (uncompressed, CCOB) described for `kpack inspect`.

use super::*;

pub(super) fn describe_section(
    input: &Input,
    bytes: &[u8],
    source: &str,
    base: u64,
) -> Result<Vec<BundleDesc>> {
    let spans = rocpack_bundle::find_bundles_in(&input.source(bytes)).map_err(|e| {
        fail(format!(
            "{source} at byte offset {base}: {}",
            e.shifted(base)
        ))
    })?;
    let mut out = Vec::with_capacity(spans.len());
    for (i, sp) in spans.iter().enumerate() {
        let start = sp.offset as usize;
        let bytes_here = &bytes[start..start + sp.len as usize];
        let abs = base + sp.offset;
        out.push(describe_bundle(input, i, source, bytes_here, abs)?);
    }
    Ok(out)
}

pub(super) fn describe_bundle(
    input: &Input,
    index: usize,
    source: &str,
    bytes: &[u8],
    abs: u64,
) -> Result<BundleDesc> {
    let b = rocpack_bundle::index_bundle_in(&input.source(bytes), &ParseOptions::default())
        .map_err(|e| {
            fail(format!(
                "bundle {index} at byte offset {abs}: {}",
                e.shifted(abs)
            ))
        })?;
    let (format, version, compression) = match b.format {
        Format::Uncompressed => ("uncompressed", None, None),
        Format::Ccob { version, method } => ("ccob", Some(version), Some(method.name())),
    };
    let compressed = b.ccob.is_some();
    let in_file = input.offset_of(bytes);
    let overlaps = b.overlaps();
    let code_objects = b
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| CodeObjectDesc {
            index: i,
            target: e.id.to_string(),
            target_id: e.id.target_id().to_string(),
            is_host: e.id.is_host(),
            offset: e.offset,
            file_offset: (!compressed).then_some(abs + e.offset),
            size: e.size,
            sha256: String::new(),
            stored_at: if compressed {
                None
            } else {
                in_file.map(|f| f + e.offset)
            },
        })
        .collect();
    Ok(BundleDesc {
        index,
        source: source.to_string(),
        file_offset: Some(abs),
        size: Some(b.len),
        format,
        version,
        compression,
        uncompressed_size: b.ccob.map(|h| h.uncompressed_size),
        hash: b.ccob.map(|h| format!("{:016x}", h.hash)),
        hash_matches: None,
        wrappers: Vec::new(),
        code_objects,
        at: in_file.map(|f| (f, b.len)),
        overlaps,
    })
}
