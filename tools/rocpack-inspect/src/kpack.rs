//! `.kpack` archives described for `kpack inspect`.

use super::*;

/// The reader of a `.kpack` that is bytes `data` of the input (no copy).
pub(super) fn kpack_reader(input: &Input, at: (u64, u64)) -> Result<rocpack_kpack::KpackReader> {
    let map = input
        .map
        .clone()
        .ok_or_else(|| fail("empty input is not a .kpack"))?;
    let (a, n) = (at.0 as usize, at.1 as usize);
    Ok(rocpack_kpack::KpackReader::from_shared_map(map, a..a + n)?)
}

pub(super) fn describe_kpack(input: &Input, data: &[u8]) -> Result<KpackDesc> {
    let at = (
        input
            .offset_of(data)
            .ok_or_else(|| fail("a .kpack outside the input"))?,
        data.len() as u64,
    );
    let r = kpack_reader(input, at)?;
    let kernels = r
        .entries()
        .iter()
        .map(|e| {
            let loc = r.blob_location(e.ordinal);
            KernelDesc {
                key: e.key.clone(),
                target: e.target.clone(),
                ordinal: e.ordinal,
                original_size: e.original_size,
                stored_offset: loc.map(|l| l.offset),
                stored_size: loc.map(|l| l.size),
                sha256: String::new(),
            }
        })
        .collect();
    Ok(KpackDesc {
        format_version: r.format_version(),
        group_name: r.group_name().to_string(),
        gfx_arch_family: r.gfx_arch_family().to_string(),
        gfx_arches: r.gfx_arches().to_vec(),
        compression_scheme: r.scheme().to_string(),
        toc_offset: r.toc_offset(),
        kernels,
        at,
    })
}
