//! ELF files (fat, split, `-fgpu-rdc` objects) described for `kpack inspect`.

use super::*;

pub(super) fn elf_type(k: rocpack_image::elf::ElfKind) -> &'static str {
    match k {
        rocpack_image::elf::ElfKind::Executable => "EXEC",
        rocpack_image::elf::ElfKind::Shared => "DYN",
        rocpack_image::elf::ElfKind::Relocatable => "REL",
    }
}

pub(super) fn pointer_model(m: &rocpack_image::elf::PointerModel, machine: u16) -> String {
    use rocpack_image::elf::PointerModel as P;
    let (rel, abs) = if machine == 183 {
        ("R_AARCH64_RELATIVE", "R_AARCH64_ABS64")
    } else {
        ("R_X86_64_RELATIVE", "R_X86_64_64")
    };
    match m {
        P::Absolute => "none".into(),
        P::RelaRelative { .. } => format!("rela:{rel}"),
        P::RelaSymbol { symbol, .. } => format!("rela:{abs}:{symbol}"),
        P::Rel { r_type, .. } => format!("rel:{r_type}"),
        P::Relr { bitmap } => if *bitmap {
            "relr:bitmap"
        } else {
            "relr:address"
        }
        .into(),
        P::Object { symbol, .. } => format!("object:{symbol}"),
    }
}

/// An ELF file of analysis `info` ([`rocpack_image::analyze_in`] of `data`).
pub(super) fn describe_elf(
    input: &Input,
    data: &[u8],
    info: &rocpack_image::elf::FatBinaryInfo,
    name: &str,
    file_offset: u64,
) -> Result<Desc> {
    let mut d = Desc::new(name.to_string(), file_offset, data.len() as u64, "elf");
    d.elf = Some(ElfDesc {
        elf_type: elf_type(info.kind),
        machine: info.machine,
        state: state_name(info.state),
        hip_fatbin: info.fatbin.as_ref().map(section),
        hip_fat_bin_segment: info.wrapper_section.as_ref().map(section),
        offload_bundle_sections: info.offload_bundle_sections.clone(),
    });
    for b in &info.bundles {
        let bytes = rocpack_image::elf::bundle_bytes(data, info, b.index)
            .map_err(|e| fail(format!("bundle {}: {e}", b.index)))?;
        let mut bd = describe_bundle(
            input,
            b.index,
            rocpack_image::elf::FATBIN_SECTION,
            bytes,
            b.file_offset,
        )?;
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
            pointer: pointer_model(&w.model, info.machine),
            target: format!("{:#x}", w.target),
            bundle: w.bundle,
            points_to_marker: w.points_to_marker,
            co_index: (w.magic == rocpack_image::HIPK_MAGIC).then(|| w.co_index()),
        });
    }
    if let Some(m) = &info.marker {
        d.marker = Some(marker_desc(m));
    }
    if let Some(fb) = &info.fatbin {
        if fb.nobits {
            d.notes
                .push(".hip_fatbin is NOBITS: device code was split out of this binary".into());
        }
    }
    // -fgpu-rdc objects: each __CLANG_OFFLOAD_BUNDLE__<id> section is one entry.
    if !info.offload_bundle_sections.is_empty() {
        d.bundles
            .push(describe_rdc_sections(input, data, d.bundles.len())?);
    }
    if info.fatbin.is_none() && info.offload_bundle_sections.is_empty() {
        note_stray_magic(&mut d, data);
    }
    Ok(d)
}

pub(super) fn describe_rdc_sections(
    input: &Input,
    data: &[u8],
    index: usize,
) -> Result<BundleDesc> {
    use object::{Object, ObjectSection};
    let obj = object::File::parse(data).map_err(|e| fail(format!("parsing ELF sections: {e}")))?;
    let mut code_objects = Vec::new();
    for s in obj.sections() {
        let Ok(name) = s.name() else { continue };
        let Some(id) = name.strip_prefix("__CLANG_OFFLOAD_BUNDLE__") else {
            continue;
        };
        let (off, size) = s.file_range().unwrap_or((0, 0));
        let bytes = s
            .data()
            .map_err(|e| fail(format!("section {name}: data out of bounds: {e}")))?;
        let tid = rocpack_bundle::TargetId::parse(id)
            .map_err(|e| fail(format!("section {name} at byte offset {off}: {e}")))?;
        code_objects.push(CodeObjectDesc {
            index: code_objects.len(),
            target: id.to_string(),
            target_id: tid.target_id().to_string(),
            is_host: tid.is_host(),
            offset: 0,
            file_offset: Some(off),
            size,
            sha256: String::new(),
            stored_at: input.offset_of(bytes),
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
