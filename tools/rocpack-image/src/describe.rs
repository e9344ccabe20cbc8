//! What a host image holds, said the same way whatever its format: the
//! one `describe` operation behind `kpack inspect` ([`describe_in`],
//! [`Analysis::describe`]), its format-neutral result ([`Description`]:
//! bundles, wrappers, marker, notes) and the format's own header facts
//! ([`Headers`], serialised as inspect's `elf` / `pe` objects). The ELF
//! and PE/COFF halves are [`crate::elf`]'s and [`crate::pe`]'s `describe`
//! modules; this is the one dispatch over them.

use rocpack_bundle::ReadAt;
use serde::Serialize;

use crate::elf::ElfHeader;
use crate::pe::PeHeader;
use crate::{
    analyze_as, detect, Analysis, BundleInfo, FileType, MarkerInfo, Result, SectionRange,
    HIPK_MAGIC,
};

/// One host image described: what `kpack inspect` prints about an ELF
/// file, PE image, COFF object or raw AMDGPU code object, in terms every
/// format shares. Offsets are relative to the described bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description<'a> {
    /// `elf`, `pe`, `coff` or `amdgpu-code-object` ([`FileType::name`];
    /// a COFF object analysed as PE/COFF is `coff`).
    pub kind: &'static str,
    /// The format's own header facts (none for a raw code object or a
    /// PE32 image).
    pub headers: Headers,
    /// Bundles of the bundle section, by `co_index`.
    pub bundles: Vec<DescribedBundle<'a>>,
    /// Every wrapper of the wrapper section, in order.
    pub wrappers: Vec<DescribedWrapper>,
    /// The marker section of a split image.
    pub marker: Option<MarkerInfo>,
    /// `-fgpu-rdc` objects: each `__CLANG_OFFLOAD_BUNDLE__<id>` section,
    /// one bundle entry each.
    pub offload_sections: Vec<OffloadSection<'a>>,
    /// Facts worth knowing, in words (a bundle section without data in
    /// the file, a signed image, a raw code object's flags, …).
    pub notes: Vec<String>,
    /// No bundle section at all: a bundle magic found in the bytes is a
    /// look-alike (a string constant), worth a note.
    pub look_for_stray_magic: bool,
}

impl<'a> Description<'a> {
    /// A description of kind `kind` with nothing found yet.
    pub(crate) fn new(kind: &'static str, headers: Headers) -> Self {
        Description {
            kind,
            headers,
            bundles: Vec::new(),
            wrappers: Vec::new(),
            marker: None,
            offload_sections: Vec::new(),
            notes: Vec::new(),
            look_for_stray_magic: false,
        }
    }

    /// The `bundles` of an analysed image, all in section `section`, each
    /// with its bytes (`bytes_of(index)`): the one way both formats list
    /// them.
    pub(crate) fn add_bundles(
        &mut self,
        bundles: &[BundleInfo],
        section: &str,
        bytes_of: impl Fn(usize) -> Result<&'a [u8]>,
    ) -> Result<()> {
        for b in bundles {
            self.bundles.push(DescribedBundle {
                index: b.index,
                section: section.to_string(),
                bytes: bytes_of(b.index)?,
                file_offset: b.file_offset,
                wrappers: b.wrappers.clone(),
            });
        }
        Ok(())
    }
}

/// The header facts of one format. Serialises as the `elf` and `pe` keys
/// of `kpack inspect --json` (`elf` always present, `null` unless ELF;
/// `pe` only for PE images and COFF objects); [`Headers::default`] is
/// none (any file that is not an analysed host image).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Headers {
    elf: Option<ElfHeader>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pe: Option<PeHeader>,
}

impl Headers {
    pub(crate) fn elf(h: ElfHeader) -> Self {
        Headers {
            elf: Some(h),
            pe: None,
        }
    }

    pub(crate) fn pe(h: PeHeader) -> Self {
        Headers {
            elf: None,
            pe: Some(h),
        }
    }

    /// Host-only, fat or split (`None` when there are no header facts).
    pub fn state(&self) -> Option<&'static str> {
        match (&self.elf, &self.pe) {
            (Some(e), _) => Some(e.state),
            (_, Some(p)) => Some(p.state),
            _ => None,
        }
    }

    /// The facts on one line, as `kpack inspect` prints them (`ELF DYN
    /// machine 62 state fat; .hip_fatbin at …`, `PE DLL machine 0x8664
    /// …`); `None` when there are none.
    pub fn summary(&self) -> Option<String> {
        match (&self.elf, &self.pe) {
            (Some(e), _) => Some(e.summary()),
            (_, Some(p)) => Some(p.summary()),
            _ => None,
        }
    }
}

/// Where a section is (`kpack inspect`'s `{file_offset, addr, size,
/// nobits}`): [`SectionRange`] without the section index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SectionPlacement {
    pub file_offset: u64,
    /// Link-time address (ELF `sh_addr`, PE RVA).
    pub addr: u64,
    pub size: u64,
    /// No bytes in the file.
    pub nobits: bool,
}

impl From<&SectionRange> for SectionPlacement {
    fn from(s: &SectionRange) -> Self {
        SectionPlacement {
            file_offset: s.file_offset,
            addr: s.addr,
            size: s.size,
            nobits: s.nobits,
        }
    }
}

/// One bundle of the bundle section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedBundle<'a> {
    /// Position in the bundle section (`co_index` after a split).
    pub index: usize,
    /// Name of the section holding it (`.hip_fatbin`, `.hip_fat`).
    pub section: String,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// Offset of its first byte in the described bytes.
    pub file_offset: u64,
    /// Indices of the wrappers pointing at it.
    pub wrappers: Vec<usize>,
}

/// One `__CudaFatBinaryWrapper`, its pointer model said in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedWrapper {
    pub index: usize,
    pub file_offset: u64,
    /// `HIPF` or `HIPK` ([`magic_name`]).
    pub magic: &'static str,
    pub version: u32,
    /// How the pointer gets its run-time value (`none`,
    /// `rela:R_X86_64_RELATIVE`, `basereloc:DIR64`, `object:…:<symbol>`, …).
    pub pointer: String,
    /// Link-time value of the pointer (address, RVA, or section offset in
    /// objects).
    pub target: u64,
    /// Bundle it points at (fat images).
    pub bundle: Option<usize>,
    /// It points into the marker section (split images).
    pub points_to_marker: bool,
    /// `co_index` of a HIPK wrapper ([`hipk_co_index`]).
    pub co_index: Option<u32>,
}

/// One `__CLANG_OFFLOAD_BUNDLE__<id>` section of an `-fgpu-rdc` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffloadSection<'a> {
    /// Section name.
    pub name: String,
    /// The bundle entry ID after the prefix, verbatim.
    pub id: String,
    /// Where its bytes are (`0, 0` for a section without file data).
    pub file_offset: u64,
    pub size: u64,
    pub bytes: &'a [u8],
}

/// A wrapper magic as `kpack inspect` prints it (an analysis accepts only
/// these two).
pub fn magic_name(magic: u32) -> &'static str {
    if magic == HIPK_MAGIC {
        "HIPK"
    } else {
        "HIPF"
    }
}

/// The `co_index` a wrapper of `magic` carries (`co_index` is the low
/// u32 of its `reserved1`): HIPK wrappers only.
pub fn hipk_co_index(magic: u32, co_index: u32) -> Option<u32> {
    (magic == HIPK_MAGIC).then_some(co_index)
}

/// Describe an ELF file, PE image, COFF object or raw AMDGPU code object
/// without reading it whole: `data` is its bytes as a mapping (only
/// headers and tables are read through it), `src` the same bytes through
/// positioned reads (the bundle headers; see [`crate::analyze_in`]). A
/// raw code object and a PE32 image are described, not analysed; any
/// other file type is [`crate::Error::NotAnImage`].
pub fn describe_in<'a>(data: &'a [u8], src: &dyn ReadAt) -> Result<Description<'a>> {
    match detect(data) {
        FileType::AmdgpuCodeObject => Ok(crate::elf::describe_code_object(data)),
        FileType::Pe { pe32_plus: false } => Ok(crate::pe::describe_pe32()),
        kind => analyze_as(data, src, kind)?.describe(data),
    }
}

impl Analysis {
    /// This analysis of `data` described ([`Description`]): the bundles'
    /// bytes are slices of `data`.
    pub fn describe<'a>(&self, data: &'a [u8]) -> Result<Description<'a>> {
        match self {
            Analysis::Elf(i) => crate::elf::describe(i, data),
            Analysis::Pe(i) => crate::pe::describe(i, data),
        }
    }
}
