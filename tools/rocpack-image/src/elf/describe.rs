//! ELF files (fat, split, `-fgpu-rdc` objects) and raw AMDGPU code
//! objects described ([`crate::Description`]): ELF kind, pointer models
//! and sections in words.

use serde::Serialize;

use super::analyze::{
    ElfKind, FatBinaryInfo, PointerModel, FATBIN_SECTION, OFFLOAD_SECTION_PREFIX,
};
use crate::{Description, Error, Headers, OffloadSection, Result, SectionPlacement};

/// `kpack inspect`'s `elf` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ElfHeader {
    /// `EXEC`, `DYN` or `REL`.
    pub elf_type: &'static str,
    /// `e_machine` (62 = x86-64).
    pub machine: u16,
    /// `fat`, `host-only` or `split`.
    pub state: &'static str,
    pub hip_fatbin: Option<SectionPlacement>,
    pub hip_fat_bin_segment: Option<SectionPlacement>,
    /// `__CLANG_OFFLOAD_BUNDLE__*` sections (`-fgpu-rdc` objects).
    pub offload_bundle_sections: Vec<String>,
}

impl ElfHeader {
    /// One line: type, machine, state and `.hip_fatbin`.
    pub(crate) fn summary(&self) -> String {
        let mut s = format!(
            "ELF {} machine {} state {}",
            self.elf_type, self.machine, self.state
        );
        if let Some(f) = &self.hip_fatbin {
            s += &format!(
                "; .hip_fatbin at {} size {}{}",
                f.file_offset,
                f.size,
                if f.nobits { " (NOBITS)" } else { "" }
            );
        }
        s
    }
}

impl ElfKind {
    /// `EXEC`, `DYN` or `REL`.
    pub fn name(self) -> &'static str {
        match self {
            ElfKind::Executable => "EXEC",
            ElfKind::Shared => "DYN",
            ElfKind::Relocatable => "REL",
        }
    }
}

impl PointerModel {
    /// Text form for `kpack inspect` on a file of `e_machine` `machine`
    /// (`none`, `rela:R_X86_64_RELATIVE`, `relr:bitmap`, `object:sym`, …).
    pub fn describe(&self, machine: u16) -> String {
        let (rel, abs) = if machine == object::elf::EM_AARCH64 {
            ("R_AARCH64_RELATIVE", "R_AARCH64_ABS64")
        } else {
            ("R_X86_64_RELATIVE", "R_X86_64_64")
        };
        match self {
            PointerModel::Absolute => "none".into(),
            PointerModel::RelaRelative { .. } => format!("rela:{rel}"),
            PointerModel::RelaSymbol { symbol, .. } => format!("rela:{abs}:{symbol}"),
            PointerModel::Rel { r_type, .. } => format!("rel:{r_type}"),
            PointerModel::Relr { bitmap: true } => "relr:bitmap".into(),
            PointerModel::Relr { bitmap: false } => "relr:address".into(),
            PointerModel::Object { symbol, .. } => format!("object:{symbol}"),
        }
    }
}

/// An ELF file of analysis `info` (of `data`) described.
pub(crate) fn describe<'a>(info: &FatBinaryInfo, data: &'a [u8]) -> Result<Description<'a>> {
    let mut d = Description::new(
        "elf",
        Headers::elf(ElfHeader {
            elf_type: info.kind.name(),
            machine: info.machine,
            state: info.state.name(),
            hip_fatbin: info.fatbin.as_ref().map(SectionPlacement::from),
            hip_fat_bin_segment: info.wrapper_section.as_ref().map(SectionPlacement::from),
            offload_bundle_sections: info.offload_bundle_sections.clone(),
        }),
    );
    d.add_bundles(&info.bundles, FATBIN_SECTION, |i| {
        super::bundle_bytes(data, info, i)
    })?;
    d.wrappers = info
        .wrappers
        .iter()
        .map(|w| w.described(w.pointer.describe(info.machine)))
        .collect();
    d.marker = info.marker.clone();
    if info.fatbin.is_some_and(|f| f.nobits) {
        d.notes
            .push(".hip_fatbin is NOBITS: device code was split out of this binary".into());
    }
    if !info.offload_bundle_sections.is_empty() {
        d.offload_sections = offload_sections(data)?;
    }
    d.look_for_stray_magic = info.fatbin.is_none() && info.offload_bundle_sections.is_empty();
    Ok(d)
}

/// The `__CLANG_OFFLOAD_BUNDLE__<id>` sections of an ELF file, in
/// section header order.
fn offload_sections(data: &[u8]) -> Result<Vec<OffloadSection<'_>>> {
    use object::{Object, ObjectSection};
    let obj = object::File::parse(data)
        .map_err(|e| Error::malformed(0, format!("parsing ELF sections: {e}")))?;
    let mut out = Vec::new();
    for s in obj.sections() {
        let Ok(name) = s.name() else { continue };
        let Some(id) = name.strip_prefix(OFFLOAD_SECTION_PREFIX) else {
            continue;
        };
        let (file_offset, size) = s.file_range().unwrap_or((0, 0));
        let bytes = s.data().map_err(|e| {
            Error::malformed(
                file_offset,
                format!("section {name}: data out of bounds: {e}"),
            )
        })?;
        out.push(OffloadSection {
            name: name.to_string(),
            id: id.to_string(),
            file_offset,
            size,
            bytes,
        });
    }
    Ok(out)
}

/// A raw AMDGPU code object (an ELF file of `e_machine` EM_AMDGPU, no
/// offload bundle): its `e_flags` in a note.
pub(crate) fn describe_code_object(data: &[u8]) -> Description<'_> {
    let flags = data
        .get(48..52)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(0);
    let mut d = Description::new("amdgpu-code-object", Headers::default());
    d.notes.push(format!(
        "raw AMDGPU code object (e_machine EM_AMDGPU, e_flags {flags:#x}), not an offload bundle"
    ));
    d
}
