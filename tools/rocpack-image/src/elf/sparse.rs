//! The ELF loaders of a [`Sparse`] map ([`crate::sparse`]):
//! [`Sparse::load_elf`] and [`Sparse::load_archive`] load, with positioned
//! reads of the file, exactly the bytes [`crate::elf::analyze_in`] looks
//! at: the ELF header, the program and section header tables, the section
//! names, the wrapper and marker sections, and the relocation sections the
//! wrapper resolver indexes with their symbol and string tables (for an
//! archive: member headers, the long-name table and that much of each ELF
//! member). Host code, data and debug sections are never read;
//! `analyze_in(sparse.bytes(), &file)` finds the bundles through the file.
//!
//! Keep [`Sparse::load_elf`] in step with `analyze_elf` (the test
//! `sparse_analysis_equals_whole` compares both on every fixture).

use std::io;

use object::elf;
use rocpack_bundle::ReadAt;

use crate::elf::analyze::{MARKER_SECTION, WRAPPER_SECTION};
use crate::elf::headers::{Elf, EHDR_SIZE, PHDR_SIZE, SHDR_SIZE, SHT_RELR};
use crate::sparse::{le64, Sparse, SparseView};

impl Sparse {
    /// Loads what analysing the ELF file at `[base, base + len)` of the
    /// file reads (`src` reads the whole file). Stops, without error, where
    /// the file is not an ELF64 little-endian file or its headers are
    /// malformed: the analysis refuses it the same way.
    pub fn load_elf(&mut self, src: &dyn ReadAt, base: u64, len: u64) -> io::Result<()> {
        let mut sub = Sub {
            sp: self,
            src,
            base,
            len,
        };
        sub.load(0, EHDR_SIZE)?;
        let Some(h) = sub.view().get(0, EHDR_SIZE) else {
            return Ok(());
        };
        if !h.starts_with(&elf::ELFMAG) || h[4] != elf::ELFCLASS64 || h[5] != elf::ELFDATA2LSB {
            return Ok(());
        }
        let (phoff, shoff) = (le64(h, 0x20), le64(h, 0x28));
        let (phnum, shnum, shstrndx) = (le16(h, 0x38), le16(h, 0x3c), le16(h, 0x3e));
        sub.load(phoff, u64::from(phnum) * PHDR_SIZE)?;
        if shoff != 0 {
            sub.load(shoff, SHDR_SIZE)?;
            let count = match shnum {
                0 => sub.view().u64_at(shoff + 32),
                n => u64::from(n),
            };
            sub.load(shoff, count.saturating_mul(SHDR_SIZE))?;
            let names = match shstrndx {
                0xffff => u64::from(sub.view().u32_at(shoff + 40)),
                n => u64::from(n),
            };
            if names != 0 && names < count {
                let at = shoff.saturating_add(names * SHDR_SIZE);
                let (off, size) = (sub.view().u64_at(at + 24), sub.view().u64_at(at + 32));
                sub.load(off, size)?;
            }
        }
        let view = sub.view();
        let Ok(e) = Elf::parse(view) else {
            return Ok(());
        };
        let object = e.ehdr.e_type == elf::ET_REL;
        let wrapper = e.section_by_name(WRAPPER_SECTION).map(|(i, _)| i);
        let mut want = std::collections::BTreeSet::new();
        let tables = |i: usize, want: &mut std::collections::BTreeSet<usize>| {
            want.insert(i);
            // The symbol table of a relocation section and its names.
            if let Some(t) = e.shdrs.get(i).map(|s| s.sh_link as usize) {
                want.insert(t);
                if let Some(s) = e.shdrs.get(t).map(|s| s.sh_link as usize) {
                    want.insert(s);
                }
            }
        };
        for (i, s) in e.shdrs.iter().enumerate() {
            let is_rel = s.sh_type == elf::SHT_RELA || s.sh_type == elf::SHT_REL;
            if s.name == WRAPPER_SECTION.as_bytes() || s.name == MARKER_SECTION.as_bytes() {
                want.insert(i);
            } else if object {
                if is_rel && Some(s.sh_info as usize) == wrapper {
                    tables(i, &mut want);
                }
            } else if is_rel && s.is_alloc() {
                tables(i, &mut want);
            } else if s.sh_type == SHT_RELR && s.is_alloc() {
                want.insert(i);
            }
        }
        let ranges: Vec<(u64, u64)> = want
            .iter()
            .filter_map(|&i| e.shdrs.get(i))
            .filter(|s| s.has_file_data())
            .map(|s| (s.sh_offset, s.sh_size))
            .collect();
        for (off, size) in ranges {
            sub.load(off, size)?;
        }
        Ok(())
    }

    /// Loads what listing an `ar` archive's members and analysing each ELF
    /// member reads. Stops, without error, at a malformed header (listing
    /// the members refuses it the same way).
    pub fn load_archive(&mut self, src: &dyn ReadAt) -> io::Result<()> {
        const HDR: u64 = 60;
        let size = self.len;
        self.load(src, 0, 8)?;
        if !self.bytes().get(0, 8).is_some_and(crate::elf::is_archive) {
            return Ok(());
        }
        let mut pos = 8u64;
        while pos < size {
            self.load(src, pos, HDR)?;
            let Some(h) = self.bytes().get(pos, HDR) else {
                return Ok(());
            };
            if &h[58..60] != b"`\n" {
                return Ok(());
            }
            let Ok(n) = std::str::from_utf8(&h[48..58])
                .unwrap_or("")
                .trim()
                .parse::<u64>()
            else {
                return Ok(());
            };
            let long_names = h[..16].trim_ascii_end() == b"//";
            let body = pos + HDR;
            if long_names {
                self.load(src, body, n)?;
            } else {
                // Symbol tables and non-ELF members: their first 64 bytes.
                self.load_elf(src, body, n.min(size.saturating_sub(body)))?;
            }
            pos = body.saturating_add(n).saturating_add(n & 1);
        }
        Ok(())
    }
}

/// `[base, base + len)` of a [`Sparse`] file, loaded from the same range
/// of its source.
struct Sub<'a> {
    sp: &'a mut Sparse,
    src: &'a dyn ReadAt,
    base: u64,
    len: u64,
}

impl Sub<'_> {
    fn load(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let end = offset.saturating_add(len).min(self.len);
        if offset >= end {
            return Ok(());
        }
        self.sp
            .load(self.src, self.base.saturating_add(offset), end - offset)
    }
    fn view(&self) -> SparseView<'_> {
        self.sp.bytes().sub(self.base, self.len)
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
