//! The one file-type detection function of rocpack: what a file is, from
//! its first bytes. Every crate that must tell an ELF file from a PE image,
//! a COFF object, an `ar` archive, an offload bundle, a CCOB or a `.kpack`
//! asks [`detect`] (or [`detect_file`]); nothing else compares magics.

use std::io::Read;

/// How many leading bytes [`detect`] looks at (a PE image's `e_lfanew`
/// may point anywhere in them; linkers put the `PE\0\0` signature within
/// the first few hundred bytes).
pub const HEAD_LEN: usize = 4096;

const EM_AMDGPU: u16 = 0xe0;
/// COFF machines of HIP hosts (x86-64, ARM64, ARM64EC/X) and x86.
const COFF_MACHINES: [u16; 5] = [0x8664, 0xaa64, 0xa641, 0xa64e, 0x014c];
/// `ClassID` of a `/bigobj` COFF object (`ANON_OBJECT_HEADER_BIGOBJ`).
const BIGOBJ_CLASS_ID: [u8; 16] = [
    0xc7, 0xa1, 0xba, 0xd1, 0xee, 0xba, 0xa9, 0x4b, 0xaf, 0x20, 0xfa, 0xf6, 0x6a, 0xa4, 0xdc, 0xb8,
];

/// What a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// ELF host file (executable, shared object, relocatable object).
    Elf {
        /// ELFCLASS64 little-endian (the only kind rocpack rewrites).
        elf64_le: bool,
    },
    /// A raw AMDGPU code object (ELF with `e_machine` EM_AMDGPU).
    AmdgpuCodeObject,
    /// A PE image (`MZ` … `PE\0\0`): DLL, EXE, `.pyd`.
    Pe {
        /// PE32+ (64-bit optional header); PE32 otherwise.
        pe32_plus: bool,
    },
    /// A COFF relocatable object (`.obj`), regular or `/bigobj`.
    Coff {
        /// `ANON_OBJECT_HEADER_BIGOBJ` layout.
        bigobj: bool,
    },
    /// An `ar` archive (`!<arch>\n`: static libraries, MSVC `.lib`).
    Archive,
    /// An uncompressed clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`).
    Bundle,
    /// A compressed clang offload bundle (`CCOB`).
    Ccob,
    /// A `.kpack` archive (`KPAK`).
    Kpack,
    /// None of the above.
    Unknown,
}

impl FileType {
    /// Short name used in messages and `kpack inspect` (`elf`, `pe`, `coff`, …).
    pub fn name(self) -> &'static str {
        match self {
            FileType::Elf { .. } => "elf",
            FileType::AmdgpuCodeObject => "amdgpu-code-object",
            FileType::Pe { .. } => "pe",
            FileType::Coff { .. } => "coff",
            FileType::Archive => "archive",
            FileType::Bundle => "bundle",
            FileType::Ccob => "ccob",
            FileType::Kpack => "kpack",
            FileType::Unknown => "unknown",
        }
    }

    /// What a split rewrites: ELF files, PE images and `ar` archives (of
    /// ELF objects). COFF objects are never split (the image they are
    /// linked into is); 32-bit ELF and PE32 files are refused by the
    /// analysis.
    pub fn is_splittable(self) -> bool {
        matches!(
            self,
            FileType::Elf { .. } | FileType::Pe { .. } | FileType::Archive
        )
    }

    /// A file whose units are its members (an `ar` archive: a split
    /// rewrites each member that has device code, inside the archive).
    pub fn has_members(self) -> bool {
        self == FileType::Archive
    }

    /// A file a split rewrites as a whole: an ELF file or a PE image (an
    /// `ar` archive's members are rewritten inside it; COFF objects are
    /// not split).
    pub fn is_whole_image(self) -> bool {
        matches!(self, FileType::Elf { .. } | FileType::Pe { .. })
    }

    /// What a split rewrites and can: [`FileType::is_splittable`] but for
    /// the flavours no HIP host has ([`FileType::refused_flavour`]).
    pub fn is_rewritable(self) -> bool {
        matches!(
            self,
            FileType::Elf { elf64_le: true } | FileType::Archive | FileType::Pe { pe32_plus: true }
        )
    }

    /// For an ELF file that is not ELFCLASS64 little-endian, or a PE32
    /// image, its flavour in words (`ELFCLASS32 little-endian ELF`, `PE32
    /// (32-bit)`): HIP binaries are neither, so one with device code cannot
    /// be split. `head` is the file's head ([`detect`]'s input). `None`
    /// for every other type.
    pub fn refused_flavour(self, head: &[u8]) -> Option<String> {
        match self {
            FileType::Elf { elf64_le: false } => Some(format!("{} ELF", elf_flavour(head))),
            FileType::Pe { pe32_plus: false } => Some("PE32 (32-bit)".to_string()),
            _ => None,
        }
    }

    /// A host file that may carry device code but that a split never
    /// rewrites: a COFF object (the image it is linked into is split).
    pub fn is_unsplit_object(self) -> bool {
        matches!(self, FileType::Coff { .. })
    }

    /// What an `ar` archive member of this type that carries device code
    /// is, in words, for a split's refusal (only ELF members are split).
    pub fn unsplit_member(self) -> &'static str {
        match self {
            FileType::Archive => "a nested `ar` archive",
            FileType::Coff { .. } => {
                "a COFF object, as in a Windows `.lib`: split the DLL/EXE it is linked into"
            }
            _ => "`.hip_fatbin` or an offload bundle",
        }
    }

    /// A raw AMDGPU code object (what a `.kpack` archive holds per kernel).
    pub fn is_code_object(self) -> bool {
        self == FileType::AmdgpuCodeObject
    }

    /// An ELF file of any machine: a host file or a raw AMDGPU code object.
    pub fn is_elf(self) -> bool {
        matches!(self, FileType::Elf { .. } | FileType::AmdgpuCodeObject)
    }

    /// A host file that may carry HIP device code (ELF, PE or COFF; not an
    /// archive: its members are files of their own).
    pub fn is_host_image(self) -> bool {
        matches!(
            self,
            FileType::Elf { .. } | FileType::Pe { .. } | FileType::Coff { .. }
        )
    }
}

/// `ELFCLASS32 little-endian`, `ELFCLASS64 big-endian`, … from `e_ident`.
fn elf_flavour(head: &[u8]) -> String {
    let class = match head.get(4) {
        Some(1) => "ELFCLASS32".to_string(),
        Some(2) => "ELFCLASS64".to_string(),
        c => format!("ELF class {c:?}"),
    };
    let data = match head.get(5) {
        Some(1) => "little-endian",
        Some(2) => "big-endian",
        _ => "unknown byte order",
    };
    format!("{class} {data}")
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// What `head` (the first [`HEAD_LEN`] bytes of a file, or all of it when
/// shorter) is. Total: any input gives an answer, never a panic.
pub fn detect(head: &[u8]) -> FileType {
    if head.starts_with(b"\x7fELF") {
        let machine = u16_at(head, 18).unwrap_or(0);
        if machine == EM_AMDGPU && head.get(5) == Some(&1) {
            return FileType::AmdgpuCodeObject;
        }
        return FileType::Elf {
            elf64_le: head.get(4) == Some(&2) && head.get(5) == Some(&1),
        };
    }
    if head.starts_with(b"!<arch>\n") {
        return FileType::Archive;
    }
    if head.starts_with(rocpack_bundle::BUNDLE_MAGIC) {
        return FileType::Bundle;
    }
    if head.starts_with(rocpack_bundle::CCOB_MAGIC) {
        return FileType::Ccob;
    }
    if head.starts_with(b"KPAK") {
        return FileType::Kpack;
    }
    if head.starts_with(b"MZ") {
        if let Some(lfanew) = u32_at(head, 0x3c) {
            let at = lfanew as usize;
            if head.get(at..at.saturating_add(4)) == Some(b"PE\0\0") {
                // Optional header magic: 0x20b PE32+, 0x10b PE32.
                let magic = u16_at(head, at + 24).unwrap_or(0);
                return FileType::Pe {
                    pe32_plus: magic == 0x20b,
                };
            }
            if at.saturating_add(4) > head.len() {
                // `e_lfanew` past what was read (past the end of the file,
                // or beyond the first HEAD_LEN bytes): an image to analyse,
                // which finds its headers or says why not, never a file
                // passed on unexamined.
                return FileType::Pe { pe32_plus: true };
            }
        }
        return FileType::Unknown;
    }
    if is_bigobj(head) {
        return FileType::Coff { bigobj: true };
    }
    if is_coff_object(head) {
        return FileType::Coff { bigobj: false };
    }
    FileType::Unknown
}

/// `IMAGE_FILE_HEADER` of an object: a HIP host machine, no optional
/// header, 1..=65279 sections whose table fits in the head when the head is
/// the whole file, and a symbol table pointer behind the section table.
fn is_coff_object(head: &[u8]) -> bool {
    let (Some(machine), Some(nsec), Some(symptr), Some(opt)) = (
        u16_at(head, 0),
        u16_at(head, 2),
        u32_at(head, 8),
        u16_at(head, 16),
    ) else {
        return false;
    };
    let table_end = 20 + usize::from(nsec) * 40;
    COFF_MACHINES.contains(&machine)
        && opt == 0
        && (1..=65279).contains(&nsec)
        && (symptr == 0 || symptr as usize >= table_end)
        && (head.len() >= HEAD_LEN || table_end <= head.len())
}

/// `ANON_OBJECT_HEADER_BIGOBJ`: Sig1 0, Sig2 0xffff, Version ≥ 2, bigobj ClassID.
fn is_bigobj(head: &[u8]) -> bool {
    u16_at(head, 0) == Some(0)
        && u16_at(head, 2) == Some(0xffff)
        && u16_at(head, 4).is_some_and(|v| v >= 2)
        && head.get(12..28) == Some(&BIGOBJ_CLASS_ID[..])
}

/// [`detect`] on the first [`HEAD_LEN`] bytes of `path`. Refuses what is not
/// a regular file (a FIFO would block, a device never end) with what it is.
pub fn detect_file(path: &std::path::Path) -> std::io::Result<FileType> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a regular file", path.display()),
        ));
    }
    let mut head = Vec::with_capacity(HEAD_LEN.min(meta.len() as usize));
    std::fs::File::open(path)?
        .take(HEAD_LEN as u64)
        .read_to_end(&mut head)?;
    Ok(detect(&head))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each type is to a split: rewritten, refused by flavour (with
    /// its words), never split (COFF objects), or a member's refusal note.
    #[test]
    fn split_roles() {
        let elf32 = b"\x7fELF\x01\x01\x01\0";
        let elf64_be = b"\x7fELF\x02\x02\x01\0";
        let cases = [
            (FileType::Elf { elf64_le: true }, true, true, None),
            (FileType::Archive, true, false, None),
            (FileType::Pe { pe32_plus: true }, true, true, None),
            (
                FileType::Pe { pe32_plus: false },
                false,
                true,
                Some("PE32 (32-bit)"),
            ),
            (FileType::Coff { bigobj: false }, false, false, None),
            (FileType::Bundle, false, false, None),
        ];
        for (t, rewritable, whole, flavour) in cases {
            assert_eq!(t.is_rewritable(), rewritable, "{t:?}");
            assert_eq!(t.is_whole_image(), whole, "{t:?}");
            assert_eq!(t.refused_flavour(b"").as_deref(), flavour, "{t:?}");
            assert_eq!(t.is_unsplit_object(), matches!(t, FileType::Coff { .. }));
            assert_eq!(t.has_members(), t == FileType::Archive);
        }
        let elf = FileType::Elf { elf64_le: false };
        assert_eq!(
            elf.refused_flavour(elf32).unwrap(),
            "ELFCLASS32 little-endian ELF"
        );
        assert_eq!(
            elf.refused_flavour(elf64_be).unwrap(),
            "ELFCLASS64 big-endian ELF"
        );
        assert_eq!(FileType::Archive.unsplit_member(), "a nested `ar` archive");
        assert!(FileType::Coff { bigobj: true }
            .unsplit_member()
            .starts_with("a COFF object"));
        assert_eq!(
            FileType::Unknown.unsplit_member(),
            "`.hip_fatbin` or an offload bundle"
        );
    }

    #[test]
    fn magics() {
        assert_eq!(detect(b""), FileType::Unknown);
        assert_eq!(
            detect(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\x3e\0"),
            FileType::Elf { elf64_le: true }
        );
        assert_eq!(
            detect(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\xe0\0"),
            FileType::AmdgpuCodeObject
        );
        assert_eq!(detect(b"!<arch>\nfoo"), FileType::Archive);
        assert_eq!(detect(b"__CLANG_OFFLOAD_BUNDLE__\0"), FileType::Bundle);
        assert_eq!(detect(b"CCOB\x03\0"), FileType::Ccob);
        assert_eq!(detect(b"KPAK\x01"), FileType::Kpack);
        let mut pe = vec![0u8; 0x100];
        pe[..2].copy_from_slice(b"MZ");
        pe[0x3c] = 0x80;
        pe[0x80..0x84].copy_from_slice(b"PE\0\0");
        pe[0x98..0x9a].copy_from_slice(&0x20bu16.to_le_bytes());
        assert_eq!(detect(&pe), FileType::Pe { pe32_plus: true });
        pe[0x98] = 0x0b;
        pe[0x99] = 0x01;
        assert_eq!(detect(&pe), FileType::Pe { pe32_plus: false });
        // e_lfanew past the head (here: past the end of the file): an image
        // whose analysis must say why it is not one, never a plain file.
        pe[0x3c] = 0xfe;
        assert_eq!(detect(&pe), FileType::Pe { pe32_plus: true });
        // Inside the head but not at `PE\0\0`: a DOS program.
        pe[0x3c] = 0x40;
        assert_eq!(detect(&pe), FileType::Unknown);
        // A plain DOS/MZ file is not a PE image.
        assert_eq!(detect(b"MZ\x90\0"), FileType::Unknown);
        let mut obj = vec![0u8; 20 + 40];
        obj[..2].copy_from_slice(&0x8664u16.to_le_bytes());
        obj[2] = 1;
        assert_eq!(detect(&obj), FileType::Coff { bigobj: false });
        obj[2] = 2; // section table past the end of a whole (short) file
        assert_eq!(detect(&obj), FileType::Unknown);
        let mut big = vec![0u8; 64];
        big[2..4].copy_from_slice(&0xffffu16.to_le_bytes());
        big[4] = 2;
        big[12..28].copy_from_slice(&BIGOBJ_CLASS_ID);
        assert_eq!(detect(&big), FileType::Coff { bigobj: true });
        // Text that happens to start like a machine number is not an object.
        assert_eq!(detect(b"hello world, this is text"), FileType::Unknown);
    }
}
