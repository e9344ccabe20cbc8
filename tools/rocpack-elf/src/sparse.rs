//! Analysing a file without reading it whole. A [`Sparse`] buffer has the
//! size of the file and reads as zeros (an anonymous mapping: pages never
//! written cost no memory); [`Sparse::load_elf`] and
//! [`Sparse::load_archive`] fill in, with positioned reads of the file,
//! exactly the bytes [`crate::analyze_in`] looks at: the ELF header, the
//! program and section header tables, the section names, the wrapper and
//! marker sections, and the relocation sections the wrapper resolver
//! indexes with their symbol and string tables (for an archive: member
//! headers, the long-name table and that much of each ELF member). Host
//! code, data and debug sections are never read; `analyze_in(bytes,
//! &file)` finds the bundles through the file. A 1 GiB library is analysed
//! with a few MiB resident, and since the file is never mapped, a file
//! truncated under us is a read error, never `SIGBUS`.
//!
//! Keep [`Sparse::load_elf`] in step with `analyze_elf` (the test
//! `sparse_analysis_equals_whole` compares both on every fixture).

use std::collections::BTreeSet;
use std::io;

use object::elf;
use rocpack_bundle::ReadAt;

use crate::analyze::{MARKER_SECTION, WRAPPER_SECTION};
use crate::elf::{Elf, EHDR_SIZE, PHDR_SIZE, SHDR_SIZE, SHT_RELR};

/// A file-sized buffer holding only the bytes loaded into it.
pub struct Sparse {
    map: Option<memmap2::MmapMut>,
    /// Bytes read from the file so far.
    loaded: u64,
}

impl Sparse {
    /// A zero buffer of `len` bytes (nothing is allocated for pages never
    /// written).
    pub fn new(len: u64) -> io::Result<Sparse> {
        let n = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        let map = if n == 0 {
            None
        } else {
            Some(memmap2::MmapMut::map_anon(n)?)
        };
        Ok(Sparse { map, loaded: 0 })
    }

    /// The buffer: loaded bytes where loaded, zeros elsewhere.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or_default()
    }

    /// Bytes read from the source so far (a page may be read twice).
    pub fn loaded(&self) -> u64 {
        self.loaded
    }

    /// Reads `[offset, offset + len)` of `src` (clamped to the buffer)
    /// into the same place of the buffer. A source shorter than the buffer
    /// (a file truncated under us) is an error.
    pub fn load(&mut self, src: &dyn ReadAt, offset: u64, len: u64) -> io::Result<()> {
        let size = self.bytes().len() as u64;
        let start = offset.min(size);
        let end = offset.saturating_add(len).min(size);
        let Some(map) = self.map.as_deref_mut() else {
            return Ok(());
        };
        let mut at = start;
        while at < end {
            let buf = &mut map[at as usize..end as usize];
            let n = src.read_at(at, buf)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("file ended at offset {at:#x} while it was read (changed under us?)"),
                ));
            }
            at += n as u64;
        }
        self.loaded += end - start;
        Ok(())
    }

    /// Loads what analysing the ELF file at `[base, base + len)` of the
    /// buffer reads (`src` reads the whole buffer's source). Stops, without
    /// error, where the file is not an ELF64 little-endian file or its
    /// headers are malformed: the analysis refuses it the same way.
    pub fn load_elf(&mut self, src: &dyn ReadAt, base: u64, len: u64) -> io::Result<()> {
        let mut sub = Sub {
            sp: self,
            src,
            base,
            len,
        };
        sub.load(0, EHDR_SIZE)?;
        let h = sub.bytes();
        if h.len() < EHDR_SIZE as usize
            || !h.starts_with(&elf::ELFMAG)
            || h[4] != elf::ELFCLASS64
            || h[5] != elf::ELFDATA2LSB
        {
            return Ok(());
        }
        let (phoff, shoff) = (le64(h, 0x20), le64(h, 0x28));
        let (phnum, shnum, shstrndx) = (le16(h, 0x38), le16(h, 0x3c), le16(h, 0x3e));
        sub.load(phoff, u64::from(phnum) * PHDR_SIZE)?;
        if shoff != 0 {
            sub.load(shoff, SHDR_SIZE)?;
            let count = match shnum {
                0 => sub.u64_at(shoff + 32),
                n => u64::from(n),
            };
            sub.load(shoff, count.saturating_mul(SHDR_SIZE))?;
            let names = match shstrndx {
                0xffff => u64::from(sub.u32_at(shoff + 40)),
                n => u64::from(n),
            };
            if names != 0 && names < count {
                let at = shoff.saturating_add(names * SHDR_SIZE);
                let (off, size) = (sub.u64_at(at + 24), sub.u64_at(at + 32));
                sub.load(off, size)?;
            }
        }
        let Ok(e) = Elf::parse(sub.bytes()) else {
            return Ok(());
        };
        let object = e.ehdr.e_type == elf::ET_REL;
        let wrapper = e.section_by_name(WRAPPER_SECTION).map(|(i, _)| i);
        let mut want = BTreeSet::new();
        let tables = |i: usize, want: &mut BTreeSet<usize>| {
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
        let size = self.bytes().len() as u64;
        self.load(src, 0, 8)?;
        if !crate::is_archive(self.bytes()) {
            return Ok(());
        }
        let mut pos = 8u64;
        while pos < size {
            self.load(src, pos, HDR)?;
            let Some(h) = self.bytes().get(pos as usize..(pos + HDR) as usize) else {
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
            let name = h[..16].to_vec();
            let body = pos + HDR;
            if name.trim_ascii_end() == b"//" {
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

/// `[base, base + len)` of a [`Sparse`] buffer, loaded from the same
/// range of its source.
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
    fn bytes(&self) -> &[u8] {
        let b = self.sp.bytes();
        let start = (self.base as usize).min(b.len());
        let end = (self.base.saturating_add(self.len) as usize).min(b.len());
        &b[start..end]
    }
    fn u64_at(&self, at: u64) -> u64 {
        crate::elf::u64_at(self.bytes(), at, "").unwrap_or(0)
    }
    fn u32_at(&self, at: u64) -> u32 {
        crate::elf::u32_at(self.bytes(), at, "").unwrap_or(0)
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
