//! Host images (ELF files, PE32+ images, COFF objects, raw AMDGPU code
//! objects) described for `kpack inspect`: what `rocpack-image`'s one
//! `describe_in` says (headers through the mapping, bundle headers
//! through positioned reads), with each bundle's code objects listed.

use super::*;

/// An image of any format, `data` being its bytes in the input.
pub(super) fn describe_image(
    input: &Input,
    data: &[u8],
    name: &str,
    file_offset: u64,
) -> Result<Desc> {
    let image =
        rocpack_image::describe_in(data, &input.source(data)).map_err(|e| fail(e.to_string()))?;
    let mut d = Desc::new(name.to_string(), file_offset, data.len() as u64, image.kind);
    d.headers = image.headers;
    for b in &image.bundles {
        let mut bd = describe_bundle(input, b.index, &b.section, b.bytes, b.file_offset)?;
        bd.wrappers = b.wrappers.clone();
        d.bundles.push(bd);
    }
    note_overlaps(&mut d);
    d.wrappers = image
        .wrappers
        .iter()
        .map(|w| WrapperDesc {
            index: w.index,
            file_offset: w.file_offset,
            magic: w.magic,
            version: w.version,
            pointer: w.pointer.clone(),
            target: format!("{:#x}", w.target),
            bundle: w.bundle,
            points_to_marker: w.points_to_marker,
            co_index: w.co_index,
        })
        .collect();
    d.marker = image.marker.as_ref().map(marker_desc);
    d.notes.extend(image.notes);
    if !image.offload_sections.is_empty() {
        let index = d.bundles.len();
        d.bundles.push(describe_offload_sections(
            input,
            &image.offload_sections,
            index,
        )?);
    }
    if image.look_for_stray_magic {
        note_stray_magic(&mut d, data);
    }
    Ok(d)
}

/// The `__CLANG_OFFLOAD_BUNDLE__<id>` sections of an `-fgpu-rdc` object
/// as one bundle (`elf-sections`), one code object per section.
fn describe_offload_sections(
    input: &Input,
    sections: &[rocpack_image::OffloadSection<'_>],
    index: usize,
) -> Result<BundleDesc> {
    let mut code_objects = Vec::with_capacity(sections.len());
    for s in sections {
        let tid = rocpack_bundle::TargetId::parse(&s.id).map_err(|e| {
            fail(format!(
                "section {} at byte offset {}: {e}",
                s.name, s.file_offset
            ))
        })?;
        code_objects.push(CodeObjectDesc {
            index: code_objects.len(),
            target: s.id.clone(),
            target_id: tid.target_id().to_string(),
            is_host: tid.is_host(),
            offset: 0,
            file_offset: Some(s.file_offset),
            size: s.size,
            sha256: String::new(),
            stored_at: input.offset_of(s.bytes),
        });
    }
    Ok(BundleDesc {
        index,
        source: "sections:__CLANG_OFFLOAD_BUNDLE__*".into(),
        file_offset: None,
        size: None,
        format: "elf-sections",
        version: None,
        compression: None,
        uncompressed_size: None,
        hash: None,
        hash_matches: None,
        wrappers: Vec::new(),
        code_objects,
        at: None,
        overlaps: Vec::new(),
    })
}
