//! PE32+ images and COFF objects described ([`crate::Description`]): the
//! same bundles / wrappers / marker as ELF, with the PE/COFF headers in
//! [`PeHeader`]; PE32 images are recognised, not analysed.

use serde::Serialize;

use super::analyze::{bundle_bytes, PeInfo, PeKind};
use crate::{Description, Headers, Result, SectionPlacement};

/// `kpack inspect`'s `pe` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeHeader {
    /// `DLL`, `EXE` or `OBJ`.
    pub pe_type: &'static str,
    /// COFF machine (34404 = x86-64).
    pub machine: u16,
    /// `fat`, `host-only` or `split`.
    pub state: &'static str,
    /// Preferred image base (0 for objects).
    pub image_base: u64,
    /// Name of the bundle section (`.hip_fat` or `.hip_fatbin`).
    pub fatbin_section: Option<String>,
    /// `file_offset` = PointerToRawData, `addr` = RVA, `size` = VirtualSize
    /// (SizeOfRawData in objects), `nobits` = no data in the file.
    pub hip_fatbin: Option<SectionPlacement>,
    /// Name of the wrapper section (`.hipFatB` or `.hipFatBinSegment`).
    pub wrapper_section: Option<String>,
    pub hip_fat_bin_segment: Option<SectionPlacement>,
    /// An Authenticode certificate table is present.
    pub signed: bool,
    /// Bytes after the last section's data (COFF symbol table, overlay).
    pub trailing_bytes: u64,
}

impl PeHeader {
    /// One line: type, machine, state, image base, bundle section and
    /// trailing bytes.
    pub(crate) fn summary(&self) -> String {
        let mut s = format!(
            "PE {} machine {:#x} state {}",
            self.pe_type, self.machine, self.state
        );
        if self.image_base != 0 {
            s += &format!(" image base {:#x}", self.image_base);
        }
        if let (Some(n), Some(f)) = (&self.fatbin_section, &self.hip_fatbin) {
            s += &format!(
                "; {n} at {} RVA {:#x} size {}{}",
                f.file_offset,
                f.addr,
                f.size,
                if f.nobits { " (no file data)" } else { "" }
            );
        }
        if self.trailing_bytes != 0 {
            s += &format!("; {} bytes after the last section", self.trailing_bytes);
        }
        s
    }
}

/// A PE32+ image or COFF object of analysis `info` (of `data`) described.
pub(crate) fn describe<'a>(info: &PeInfo, data: &'a [u8]) -> Result<Description<'a>> {
    let kind = if info.kind == PeKind::Object {
        "coff"
    } else {
        "pe"
    };
    let fat_name = info.fatbin.map(|f| info.section_name(f.index).to_string());
    let mut d = Description::new(
        kind,
        Headers::pe(PeHeader {
            pe_type: info.kind_name(),
            machine: info.machine,
            state: info.state.name(),
            image_base: info.headers.as_ref().map_or(0, |h| h.image_base),
            fatbin_section: fat_name.clone(),
            hip_fatbin: info.fatbin.as_ref().map(SectionPlacement::from),
            wrapper_section: info
                .wrapper_section
                .map(|w| info.section_name(w.index).to_string()),
            hip_fat_bin_segment: info.wrapper_section.as_ref().map(SectionPlacement::from),
            signed: info.signed,
            trailing_bytes: info.trailing,
        }),
    );
    d.add_bundles(&info.bundles, &fat_name.unwrap_or_default(), |i| {
        bundle_bytes(data, info, i)
    })?;
    d.wrappers = info
        .wrappers
        .iter()
        .map(|w| w.described(w.pointer.describe()))
        .collect();
    d.marker = info.marker.clone();
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
    d.look_for_stray_magic = info.fatbin.is_none();
    Ok(d)
}

/// A PE32 (32-bit) image: no HIP host is one, so it is not analysed.
pub(crate) fn describe_pe32() -> Description<'static> {
    let mut d = Description::new("pe", Headers::default());
    d.notes
        .push("PE32 (32-bit) image: HIP device code is only read from PE32+ images".into());
    d.look_for_stray_magic = true;
    d
}
