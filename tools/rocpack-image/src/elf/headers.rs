//! Total reader for ELF64 little-endian files: header, program headers,
//! section headers, names, symbols and relocations are read with
//! `object::read::elf`, after bounds checks that name the byte offset of
//! what is missing; the rest of this file is what the rewrite needs that a
//! reader does not give (encoders, RELR with its word kinds, alignment).

use object::elf;
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::{LittleEndian as LE, ReadRef, U32, U64};

use crate::{Error, Result};

pub(crate) const EHDR_SIZE: u64 = 64;
pub(crate) const PHDR_SIZE: u64 = 56;
pub(crate) const SHDR_SIZE: u64 = 64;
pub(crate) const SYM_SIZE: u64 = 24;
pub(crate) const RELA_SIZE: u64 = 24;
pub(crate) const REL_SIZE: u64 = 16;
/// `SHT_RELR` (not in every `object` release under this name).
pub(crate) const SHT_RELR: u32 = 19;

/// `[offset, offset + len)` of `data` (a slice, or a `SparseView` of the
/// loaded parts of a file): past the end is [`Error::Truncated`], inside
/// the file but not loaded is [`Error::NotLoaded`].
pub(crate) fn get<'a, D: ReadRef<'a>>(
    data: D,
    offset: u64,
    len: u64,
    what: &'static str,
) -> Result<&'a [u8]> {
    let size = data.len().unwrap_or(0);
    match offset.checked_add(len) {
        Some(end) if end <= size => {
            data.read_bytes_at(offset, len)
                .map_err(|()| Error::NotLoaded {
                    what,
                    offset,
                    needed: len,
                })
        }
        _ => Err(Error::Truncated {
            what,
            offset,
            needed: len,
            len: size,
        }),
    }
}

/// Errors like [`get`] when `[offset, offset + len)` is not inside `data`
/// (without reading it: bytes found through positioned reads).
pub(crate) fn within<'a, D: ReadRef<'a>>(
    data: D,
    offset: u64,
    len: u64,
    what: &'static str,
) -> Result<()> {
    let size = data.len().unwrap_or(0);
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::Truncated {
            what,
            offset,
            needed: len,
            len: size,
        }),
    }
}

pub(crate) fn u32_at<'a, D: ReadRef<'a>>(data: D, offset: u64, what: &'static str) -> Result<u32> {
    let b = get(data, offset, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(crate) fn u64_at<'a, D: ReadRef<'a>>(data: D, offset: u64, what: &'static str) -> Result<u64> {
    let b = get(data, offset, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

/// Something the rewrite writes small fields into at known offsets: an
/// output buffer, or an [`crate::Out`] (patches over pieces).
pub(crate) trait Sink {
    /// Write `bytes` at `offset`, inside what the caller already laid out.
    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<()>;
}

impl Sink for [u8] {
    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        put(self, offset, bytes)
    }
}

impl Sink for Vec<u8> {
    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        put(self, offset, bytes)
    }
}

/// Write helpers on an output whose bounds the caller established.
pub(crate) fn put_u16<S: Sink + ?Sized>(buf: &mut S, offset: u64, v: u16) -> Result<()> {
    buf.put(offset, &v.to_le_bytes())
}
pub(crate) fn put_u32<S: Sink + ?Sized>(buf: &mut S, offset: u64, v: u32) -> Result<()> {
    buf.put(offset, &v.to_le_bytes())
}
pub(crate) fn put_u64<S: Sink + ?Sized>(buf: &mut S, offset: u64, v: u64) -> Result<()> {
    buf.put(offset, &v.to_le_bytes())
}
pub(crate) fn put(buf: &mut [u8], offset: u64, bytes: &[u8]) -> Result<()> {
    let end = offset.checked_add(bytes.len() as u64);
    match end {
        Some(end) if end <= buf.len() as u64 => {
            buf[offset as usize..end as usize].copy_from_slice(bytes);
            Ok(())
        }
        _ => Err(Error::layout(
            offset,
            "internal: write outside the output buffer",
        )),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ehdr {
    pub e_type: u16,
    pub e_machine: u16,
    pub e_phoff: u64,
    pub e_shoff: u64,
    pub e_phnum: u16,
    pub e_shnum: u16,
    pub e_shstrndx: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Phdr {
    pub p_type: u32,
    pub p_flags: u32,
    pub p_offset: u64,
    pub p_vaddr: u64,
    pub p_paddr: u64,
    pub p_filesz: u64,
    pub p_memsz: u64,
    pub p_align: u64,
}

impl Phdr {
    /// The on-disk program header (object's `ProgramHeader64`).
    pub fn encode(&self) -> [u8; 56] {
        let h = elf::ProgramHeader64::<LE> {
            p_type: U32::new(LE, self.p_type),
            p_flags: U32::new(LE, self.p_flags),
            p_offset: U64::new(LE, self.p_offset),
            p_vaddr: U64::new(LE, self.p_vaddr),
            p_paddr: U64::new(LE, self.p_paddr),
            p_filesz: U64::new(LE, self.p_filesz),
            p_memsz: U64::new(LE, self.p_memsz),
            p_align: U64::new(LE, self.p_align),
        };
        let mut b = [0u8; 56];
        b.copy_from_slice(object::pod::bytes_of(&h));
        b
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shdr {
    pub sh_name: u32,
    pub sh_type: u32,
    pub sh_flags: u64,
    pub sh_addr: u64,
    pub sh_offset: u64,
    pub sh_size: u64,
    pub sh_link: u32,
    pub sh_info: u32,
    pub sh_addralign: u64,
    pub sh_entsize: u64,
    pub name: Vec<u8>,
}

impl Shdr {
    /// The on-disk section header (object's `SectionHeader64`).
    pub fn encode(&self) -> [u8; 64] {
        let h = elf::SectionHeader64::<LE> {
            sh_name: U32::new(LE, self.sh_name),
            sh_type: U32::new(LE, self.sh_type),
            sh_flags: U64::new(LE, self.sh_flags),
            sh_addr: U64::new(LE, self.sh_addr),
            sh_offset: U64::new(LE, self.sh_offset),
            sh_size: U64::new(LE, self.sh_size),
            sh_link: U32::new(LE, self.sh_link),
            sh_info: U32::new(LE, self.sh_info),
            sh_addralign: U64::new(LE, self.sh_addralign),
            sh_entsize: U64::new(LE, self.sh_entsize),
        };
        let mut b = [0u8; 64];
        b.copy_from_slice(object::pod::bytes_of(&h));
        b
    }
    pub fn is_alloc(&self) -> bool {
        self.sh_flags & u64::from(elf::SHF_ALLOC) != 0
    }
    pub fn has_file_data(&self) -> bool {
        self.sh_type != elf::SHT_NOBITS && self.sh_type != elf::SHT_NULL
    }
    /// File bytes of the section (empty for NOBITS).
    pub fn data<'a, D: ReadRef<'a>>(&self, data: D) -> Result<&'a [u8]> {
        if !self.has_file_data() {
            return Ok(&[]);
        }
        get(data, self.sh_offset, self.sh_size, "section data")
    }
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// A parsed ELF64 little-endian file (borrowing the input: a slice, or a
/// `SparseView` of the loaded parts of a file).
#[derive(Debug, Clone)]
pub(crate) struct Elf<'a, D: ReadRef<'a> = &'a [u8]> {
    pub data: D,
    _bytes: std::marker::PhantomData<&'a [u8]>,
    pub ehdr: Ehdr,
    pub phdrs: Vec<Phdr>,
    pub shdrs: Vec<Shdr>,
    /// Section index of `.shstrtab`.
    pub shstrndx: usize,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Sym {
    pub st_name: u32,
    pub st_info: u8,
    pub st_shndx: u16,
    pub st_value: u64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Reloc {
    /// File offset of the entry.
    pub entry_offset: u64,
    pub r_offset: u64,
    pub r_type: u32,
    pub r_sym: u32,
    /// `None` for SHT_REL (addend in place).
    pub r_addend: Option<i64>,
}

pub(crate) fn is_elf<'a, D: ReadRef<'a>>(data: D) -> bool {
    data.read_bytes_at(0, 4).is_ok_and(|m| m == elf::ELFMAG)
}

impl<'a, D: ReadRef<'a>> Elf<'a, D> {
    /// Parses the headers with `object::read::elf`, after the checks that
    /// give this crate's own errors (not ELF, 32-bit, big-endian, a
    /// truncated table, PN_XNUM): every table is bounds-checked against the
    /// input before `object` reads it.
    pub fn parse(data: D) -> Result<Self> {
        if !is_elf(data) {
            return Err(Error::NotElf);
        }
        let head = get(data, 0, EHDR_SIZE, "ELF header")?;
        if head[4] != elf::ELFCLASS64 {
            return Err(Error::unsupported(
                4,
                format!("ELF class {} (only ELFCLASS64 is handled)", head[4]),
            ));
        }
        if head[5] != elf::ELFDATA2LSB {
            return Err(Error::unsupported(
                5usize as u64,
                "big-endian ELF (only little-endian is handled)",
            ));
        }
        let h = elf::FileHeader64::<LE>::parse(data)
            .map_err(|e| Error::malformed(0, format!("ELF header: {e}")))?;
        let en = LE;
        let (e_phoff, e_shoff) = (h.e_phoff(en), h.e_shoff(en));
        let (e_phnum, e_shnum) = (h.e_phnum(en), h.e_shnum(en));
        let (e_phentsize, e_shentsize) = (h.e_phentsize(en), h.e_shentsize(en));
        if e_phnum != 0 && u64::from(e_phentsize) != PHDR_SIZE {
            return Err(Error::malformed(
                54,
                format!("e_phentsize {e_phentsize}, expected 56"),
            ));
        }
        if e_shoff != 0 && u64::from(e_shentsize) != SHDR_SIZE {
            return Err(Error::malformed(
                58,
                format!("e_shentsize {e_shentsize}, expected 64"),
            ));
        }
        if e_phnum == 0xffff {
            return Err(Error::unsupported(
                56,
                "extended program header numbering (PN_XNUM)",
            ));
        }
        let ehdr = Ehdr {
            e_type: h.e_type(en),
            e_machine: h.e_machine(en),
            e_phoff,
            e_shoff,
            e_phnum,
            e_shnum,
            e_shstrndx: h.e_shstrndx(en),
        };
        // Program headers.
        let table = u64::from(e_phnum) * PHDR_SIZE;
        if e_phnum != 0 {
            get(data, e_phoff, table, "program header table")?;
        }
        let phdrs = h
            .program_headers(en, data)
            .map_err(|e| Error::malformed(32, format!("program headers: {e}")))?
            .iter()
            .map(|p| Phdr {
                p_type: p.p_type(en),
                p_flags: p.p_flags(en),
                p_offset: p.p_offset(en),
                p_vaddr: p.p_vaddr(en),
                p_paddr: p.p_paddr(en),
                p_filesz: p.p_filesz(en),
                p_memsz: p.p_memsz(en),
                p_align: p.p_align(en),
            })
            .collect();
        // Section headers (extended numbering: the count and the name
        // table's index in section 0).
        let mut shdrs = Vec::new();
        let mut shstrndx = usize::from(h.e_shstrndx(en));
        if e_shoff != 0 {
            get(data, e_shoff, SHDR_SIZE, "section header")?;
            let count = match e_shnum {
                0 => u64_at(data, e_shoff + 32, "section 0 sh_size (section count)")?,
                n => u64::from(n),
            };
            // Bound the count by the input size before anything is read.
            let table = count
                .checked_mul(SHDR_SIZE)
                .ok_or_else(|| Error::malformed(60, "section count overflows"))?;
            get(data, e_shoff, table, "section header table")?;
            let sections = h
                .section_headers(en, data)
                .map_err(|e| Error::malformed(40, format!("section headers: {e}")))?;
            shstrndx = h
                .shstrndx(en, data)
                .map_err(|e| Error::malformed(62, format!("e_shstrndx: {e}")))?
                as usize;
            let names = if shstrndx != 0 {
                let strtab = sections.get(shstrndx).ok_or_else(|| {
                    Error::malformed(62, format!("e_shstrndx {shstrndx} out of range"))
                })?;
                get(data, strtab.sh_offset(en), strtab.sh_size(en), ".shstrtab")?
            } else {
                &[]
            };
            shdrs.reserve(sections.len());
            for (i, s) in sections.iter().enumerate() {
                let name = if shstrndx == 0 {
                    Vec::new()
                } else {
                    cstr(names, u64::from(s.sh_name(en))).ok_or_else(|| {
                        Error::malformed(
                            e_shoff + i as u64 * SHDR_SIZE,
                            format!("section name offset {} outside .shstrtab", s.sh_name(en)),
                        )
                    })?
                };
                shdrs.push(Shdr {
                    sh_name: s.sh_name(en),
                    sh_type: s.sh_type(en),
                    sh_flags: s.sh_flags(en),
                    sh_addr: s.sh_addr(en),
                    sh_offset: s.sh_offset(en),
                    sh_size: s.sh_size(en),
                    sh_link: s.sh_link(en),
                    sh_info: s.sh_info(en),
                    sh_addralign: s.sh_addralign(en),
                    sh_entsize: s.sh_entsize(en),
                    name,
                });
            }
        }
        // No section's bytes may lie in the ELF header or the program
        // header table: rewriting such a section (a symbol table's
        // st_shndx, say) would rewrite the headers.
        let heads = [(0, EHDR_SIZE), (e_phoff, table)];
        for (i, sh) in shdrs.iter().enumerate().skip(1) {
            if sh.sh_type == elf::SHT_NULL || sh.sh_type == elf::SHT_NOBITS || sh.sh_size == 0 {
                continue;
            }
            let end = sh.sh_offset.saturating_add(sh.sh_size);
            if let Some(&(at, _)) = heads
                .iter()
                .find(|&&(at, len)| len > 0 && sh.sh_offset < at + len && at < end)
            {
                return Err(Error::malformed(
                    e_shoff + i as u64 * SHDR_SIZE,
                    format!(
                        "section {i} ({}) overlaps the {} at {at}",
                        String::from_utf8_lossy(&sh.name),
                        if at == 0 {
                            "ELF header"
                        } else {
                            "program header table"
                        }
                    ),
                ));
            }
        }
        Ok(Elf {
            data,
            _bytes: std::marker::PhantomData,
            ehdr,
            phdrs,
            shdrs,
            shstrndx,
        })
    }

    pub fn section_by_name(&self, name: &str) -> Option<(usize, &Shdr)> {
        self.shdrs
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name.as_bytes())
    }

    /// File offset of the section header `index`.
    pub fn shdr_offset(&self, index: usize) -> u64 {
        self.ehdr.e_shoff + index as u64 * SHDR_SIZE
    }

    /// Symbols of a SHT_SYMTAB / SHT_DYNSYM section (a partial last
    /// entry is ignored).
    pub fn symbols(&self, index: usize) -> Result<Vec<Sym>> {
        let s = self.shdrs.get(index).ok_or_else(|| {
            Error::malformed(0, format!("symbol table index {index} out of range"))
        })?;
        let bytes = s.data(self.data)?;
        let whole = bytes.len() - bytes.len() % SYM_SIZE as usize;
        let (syms, _) = object::pod::slice_from_bytes::<elf::Sym64<LE>>(
            &bytes[..whole],
            whole / SYM_SIZE as usize,
        )
        .map_err(|()| Error::malformed(s.sh_offset, "symbol table"))?;
        Ok(syms
            .iter()
            .map(|y| Sym {
                st_name: y.st_name.get(LE),
                st_info: y.st_info,
                st_shndx: y.st_shndx.get(LE),
                st_value: y.st_value.get(LE),
            })
            .collect())
    }

    /// Name of symbol `sym` of symbol table `symtab`.
    pub fn symbol_name(&self, symtab: usize, sym: &Sym) -> String {
        let Some(link) = self.shdrs.get(symtab).map(|s| s.sh_link as usize) else {
            return String::new();
        };
        let Some(strtab) = self.shdrs.get(link) else {
            return String::new();
        };
        strtab
            .data(self.data)
            .ok()
            .and_then(|d| cstr(d, u64::from(sym.st_name)))
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_default()
    }

    /// Entries of a SHT_RELA or SHT_REL section (a partial last entry
    /// is ignored), decoded one by one from the file's bytes (a shared
    /// library's `.rela.dyn` can hold hundreds of thousands).
    pub fn relocations(&self, index: usize) -> Result<Box<dyn Iterator<Item = Reloc> + '_>> {
        let s = &self.shdrs[index];
        let rela = s.sh_type == elf::SHT_RELA;
        let size = if rela { RELA_SIZE } else { REL_SIZE };
        let bytes = s.data(self.data)?;
        let n = bytes.len() / size as usize;
        let bad = |()| Error::malformed(s.sh_offset, "relocation table");
        let base = s.sh_offset;
        let at = move |i: usize| base + i as u64 * size;
        // SHT_REL entries are read as RELA ones without an addend.
        if rela {
            let entries = object::pod::slice_from_bytes::<elf::Rela64<LE>>(bytes, n)
                .map_err(bad)?
                .0;
            Ok(Box::new(entries.iter().enumerate().map(move |(i, r)| {
                Reloc {
                    entry_offset: at(i),
                    r_offset: r.r_offset.get(LE),
                    r_type: r.r_type(LE, false),
                    r_sym: r.r_sym(LE, false),
                    r_addend: Some(r.r_addend.get(LE)),
                }
            })))
        } else {
            let entries = object::pod::slice_from_bytes::<elf::Rel64<LE>>(bytes, n)
                .map_err(bad)?
                .0;
            Ok(Box::new(entries.iter().enumerate().map(move |(i, r)| {
                Reloc {
                    entry_offset: at(i),
                    r_offset: r.r_offset.get(LE),
                    r_type: r.r_type(LE),
                    r_sym: r.r_sym(LE),
                    r_addend: None,
                }
            })))
        }
    }

    /// Addresses listed by a SHT_RELR section, each with whether it came
    /// from a bitmap word (`true`) or an address word.
    pub fn relr_addresses(&self, index: usize) -> Result<Vec<(u64, bool)>> {
        let s = &self.shdrs[index];
        let bytes = s.data(self.data)?;
        let mut out = Vec::new();
        let mut base: Option<u64> = None;
        for (i, w) in bytes.chunks_exact(8).enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            let word = u64::from_le_bytes(a);
            if word & 1 == 0 {
                out.push((word, false));
                base = Some(word.wrapping_add(8));
            } else {
                let Some(b) = base else {
                    return Err(Error::malformed(
                        s.sh_offset + i as u64 * 8,
                        "RELR bitmap word before any address word",
                    ));
                };
                let mut bits = word >> 1;
                let mut j = 0u64;
                while bits != 0 {
                    if bits & 1 != 0 {
                        out.push((b.wrapping_add(j * 8), true));
                    }
                    bits >>= 1;
                    j += 1;
                }
                base = Some(b.wrapping_add(63 * 8));
            }
        }
        Ok(out)
    }
}

/// NUL-terminated string at `off` in `table`.
pub(crate) fn cstr(table: &[u8], off: u64) -> Option<Vec<u8>> {
    let rest = table.get(usize::try_from(off).ok()?..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    Some(rest[..end].to_vec())
}

pub(crate) fn align_up(v: u64, a: u64) -> Option<u64> {
    if a <= 1 {
        return Some(v);
    }
    v.checked_add(a - 1).map(|x| x / a * a)
}

pub(crate) fn align_down(v: u64, a: u64) -> u64 {
    if a <= 1 {
        v
    } else {
        v / a * a
    }
}

/// Zero-extend `out` to `to` bytes, refusing to grow past `limit` (outputs
/// are bounded by the input size, so malformed offsets or alignments cannot
/// trigger huge allocations).
pub(crate) fn grow(out: &mut Vec<u8>, to: u64, limit: u64) -> Result<()> {
    if to > limit {
        return Err(Error::layout(
            to,
            format!("output would grow to {to:#x} bytes, more than the input allows ({limit:#x})"),
        ));
    }
    if to > out.len() as u64 {
        out.resize(to as usize, 0);
    }
    Ok(())
}
