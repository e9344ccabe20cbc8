//! The images of a file a split rewrites, for callers that walk a mapped
//! file: the file itself (an ELF file or PE image) or each member of an
//! `ar` archive. [`units`] lists them, [`Unit::analyze`] analyses one
//! through positioned reads of the file, and [`crate::split_archive_to`]
//! writes an archive's split; callers never ask which format a unit is.

use rocpack_bundle::{ReadAt, Window};

use crate::{detect, Analysis, Error, Result};

/// An `ar` archive member: its name and where its header is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Member name (long names resolved).
    pub name: String,
    /// Byte offset of its 60-byte header in the archive.
    pub header_offset: u64,
}

/// One image of a file: the file itself, or an archive member.
#[derive(Debug, Clone)]
pub struct Unit<'d> {
    /// The archive member; `None` for the file itself.
    pub member: Option<Member>,
    /// Its bytes (a sub-slice of the file's).
    pub data: &'d [u8],
    /// Byte offset of `data` in the file.
    pub offset: u64,
}

impl Unit<'_> {
    /// The unit's analysis, as [`crate::analyze_in`] gives it (`src` reads
    /// the whole file; the unit's bundle headers are read through it). An
    /// archive member that is not an ELF object (text, a nested archive, a
    /// COFF object) is [`Error::NotAnImage`]: only ELF members are split.
    pub fn analyze(&self, src: &dyn ReadAt) -> Result<Analysis> {
        if self.member.is_none() {
            return crate::analyze_in(self.data, src);
        }
        let body = Window::new(src, self.offset, self.data.len() as u64);
        match crate::elf::analyze_in(self.data, &body) {
            Ok(info) => Ok(Analysis::Elf(info)),
            Err(Error::NotElf) => Err(Error::NotAnImage(detect(self.data).name())),
            Err(e) => Err(e),
        }
    }

    /// `e`, said of this unit: wrapped as [`Error::Member`] for an archive
    /// member, as it is for the file itself.
    pub fn error(&self, e: Error) -> Error {
        match &self.member {
            Some(m) => e.in_member(&m.name, m.header_offset),
            None => e,
        }
    }
}

/// The units of a file (`data`, all of it or a mapping): every member of
/// an `ar` archive, in archive order, or the file itself for any other
/// type ([`Unit::analyze`] says what it is).
pub fn units(data: &[u8]) -> Result<Vec<Unit<'_>>> {
    if !detect(data).has_members() {
        return Ok(vec![Unit {
            member: None,
            data,
            offset: 0,
        }]);
    }
    let base = data.as_ptr() as usize;
    Ok(crate::elf::archive_members(data)?
        .into_iter()
        .map(|m| Unit {
            // A member's bytes are a sub-slice of the archive's.
            offset: (m.data.as_ptr() as usize - base) as u64,
            data: m.data,
            member: Some(Member {
                name: m.name,
                header_offset: m.header_offset,
            }),
        })
        .collect())
}
