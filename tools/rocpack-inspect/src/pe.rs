//! PE32+ images and COFF objects described for `kpack inspect`.

use super::*;

/// A PE32+ image or COFF object: the same bundles / wrappers / marker model
/// as ELF, with PE/COFF headers in `pe`.
pub(super) fn describe_pe(
    input: &Input,
    data: &[u8],
    info: &rocpack_image::pe::PeInfo,
    name: &str,
    file_offset: u64,
) -> Result<Desc> {
    use rocpack_image::pe;
    let kind = if info.kind == pe::PeKind::Object {
        "coff"
    } else {
        "pe"
    };
    let mut d = Desc::new(name.to_string(), file_offset, data.len() as u64, kind);
    let fat_name = info.fatbin.map(|f| info.section_name(f.index).to_string());
    d.pe = Some(PeDesc {
        pe_type: info.kind_name(),
        machine: info.machine,
        state: state_name(info.state),
        image_base: info.headers.as_ref().map_or(0, |h| h.image_base),
        fatbin_section: fat_name.clone(),
        hip_fatbin: info.fatbin.as_ref().map(section),
        wrapper_section: info
            .wrapper_section
            .map(|w| info.section_name(w.index).to_string()),
        hip_fat_bin_segment: info.wrapper_section.as_ref().map(section),
        signed: info.signed,
        trailing_bytes: info.trailing,
    });
    let source = fat_name.clone().unwrap_or_default();
    for b in &info.bundles {
        let bytes = pe::bundle_bytes(data, info, b.index)
            .map_err(|e| fail(format!("bundle {}: {e}", b.index)))?;
        let mut bd = describe_bundle(input, b.index, &source, bytes, b.file_offset)?;
        bd.wrappers = b.wrappers.clone();
        d.bundles.push(bd);
    }
    note_overlaps(&mut d);
    for w in &info.wrappers {
        d.wrappers.push(WrapperDesc {
            index: w.index,
            file_offset: w.file_offset,
            magic: magic_name(w.magic),
            version: w.version,
            pointer: w.pointer.describe(),
            target: format!("{:#x}", w.target),
            bundle: w.bundle,
            points_to_marker: w.points_to_marker,
            co_index: (w.magic == rocpack_image::HIPK_MAGIC).then(|| w.co_index()),
        });
    }
    if let Some(m) = &info.marker {
        d.marker = Some(marker_desc(m));
    }
    if let Some(f) = info.fatbin.filter(|f| f.nobits) {
        d.notes.push(format!(
            "{} has no data in the file: device code was split out of this image",
            info.section_name(f.index)
        ));
    }
    if info.signed {
        d.notes
            .push("Authenticode certificate table present (signed image)".into());
    }
    if info.fatbin.is_none() {
        note_stray_magic(&mut d, data);
    }
    Ok(d)
}
