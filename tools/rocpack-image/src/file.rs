//! Analysing a file without reading it whole: [`ImageFile`] is the one
//! entry point for file-backed analysis (`kpack verify --installed-tree`,
//! `kpack split-wheel --overlay-root`). The bytes an analysis reads are
//! loaded with positioned reads into a [`crate::elf::Sparse`] map of
//! pieces (ELF files, `ar` members, PE images, COFF objects), which the
//! parsers read through a [`SparseView`]; bundles are found through the
//! file. Memory and address space follow the tables loaded, never the
//! file's size (`installed_memory.rs` analyses a 1 GiB library under a
//! 192 MiB `ulimit -v`).
//! The file is never mapped, so one truncated under us is a read error (or
//! a changed-size error from [`ImageFile::check_unchanged`]), never
//! `SIGBUS`.

use std::fs::File;
use std::io;
use std::path::Path;

use crate::elf::{ArchiveMember, FatBinaryInfo};
use crate::{Sparse, SparseView};
use rocpack_bundle::{FileIdent, FileRange, Window};

use crate::{detect, Analysis, FileType, Result, HEAD_LEN};

/// One image of an [`ImageFile`] ([`ImageFile::units`]).
#[derive(Debug)]
pub struct FileUnit {
    /// The archive member's name; `None` for the file itself.
    pub member: Option<String>,
    /// Byte offset and size of the unit's bytes in the file.
    pub range: (u64, u64),
    /// Its analysis.
    pub analysis: Result<Analysis>,
}

/// An open regular file with what its analysis reads loaded.
pub struct ImageFile {
    file: File,
    len: u64,
    /// The file's identity when opened.
    ident: FileIdent,
    kind: FileType,
    sparse: Sparse,
}

fn changed(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl ImageFile {
    /// Opens `path` (refusing what is not a regular file without waiting on
    /// it: a FIFO is opened non-blocking and refused) and loads what its
    /// analysis reads.
    pub fn open(path: &Path) -> io::Result<ImageFile> {
        let file = rocpack_bundle::fsutil::open_nonblocking(path, 0)?;
        Self::of(file).map_err(|e| {
            if e.kind() == io::ErrorKind::InvalidInput {
                io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            } else {
                e
            }
        })
    }

    /// [`ImageFile::open`] of an open file.
    pub fn of(file: File) -> io::Result<ImageFile> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        let len = meta.len();
        let src = FileRange::new(&file, 0, len);
        // The head is read apart: the map holds only what the loaders load
        // (so a loader that misses a table shows in the tests).
        let mut head = vec![0u8; HEAD_LEN.min(usize::try_from(len).unwrap_or(HEAD_LEN))];
        let n = rocpack_bundle::ReadAt::read_at(&src, 0, &mut head)?;
        head.truncate(n);
        let kind = detect(&head);
        let image = kind.is_host_image() || kind == FileType::Archive;
        let mut sparse = Sparse::new(if image { len } else { 0 })?;
        match kind {
            FileType::Elf { .. } => sparse.load_elf(&src, 0, len)?,
            FileType::Archive => sparse.load_archive(&src)?,
            FileType::Pe { .. } | FileType::Coff { .. } => {
                crate::pe::sparse::load(&mut sparse, &src, kind)?
            }
            _ => {}
        }
        let f = ImageFile {
            file,
            len,
            ident: FileIdent::of(&meta),
            kind,
            sparse,
        };
        f.check_unchanged()?;
        Ok(f)
    }

    /// What the file is ([`detect`] of its head).
    pub fn file_type(&self) -> FileType {
        self.kind
    }

    /// The file's size when opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes read from the file to load the analysis (not the bundle
    /// headers the analysis reads itself).
    pub fn loaded(&self) -> u64 {
        self.sparse.loaded()
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file through positioned reads.
    pub fn source(&self) -> FileRange<'_> {
        FileRange::new(&self.file, 0, self.len)
    }

    /// Errors when the open file's size or times differ from when it was
    /// opened ([`FileIdent`]: rewritten while read, its analysis may mix
    /// versions).
    pub fn check_unchanged(&self) -> io::Result<()> {
        let now = FileIdent::of(&self.file.metadata()?);
        if !now.same_content(&self.ident) {
            return Err(changed(format!(
                "file changed while it was read ({} bytes when opened, {} now)",
                self.len, now.size
            )));
        }
        Ok(())
    }

    /// Analysis of an ELF file, PE32+ image or COFF object, as
    /// [`crate::analyze`] of the whole file gives it (the inner result).
    /// The outer error: the file changed while it was analysed.
    pub fn analyze(&self) -> io::Result<Result<Analysis>> {
        let data = self.sparse.bytes();
        let src = self.source();
        let a = crate::analyze_as(data, &src, self.kind);
        self.check_unchanged()?;
        Ok(a)
    }

    /// The images a split of the file rewrites, each with its analysis:
    /// the file itself for an ELF file or PE image
    /// ([`FileType::is_whole_image`]), the ELF members of an `ar` archive
    /// (analysed as [`Analysis`] values too); none for any other type.
    /// The inner error: the archive's member list cannot be read. The
    /// outer: the file changed while it was read.
    pub fn units(&self) -> io::Result<Result<Vec<FileUnit>>> {
        if self.kind.is_whole_image() {
            let analysis = self.analyze()?;
            return Ok(Ok(vec![FileUnit {
                member: None,
                range: (0, self.len),
                analysis,
            }]));
        }
        if !self.kind.has_members() {
            return Ok(Ok(Vec::new()));
        }
        Ok(self.members()?.map(|ms| {
            ms.into_iter()
                .map(|(m, info)| FileUnit {
                    range: (m.header_offset + 60, m.data.len() as u64),
                    member: Some(m.name),
                    analysis: info.map(Analysis::Elf),
                })
                .collect()
        }))
    }

    /// Whether a split of the file would remove device code: one of its
    /// [`ImageFile::units`] has device code (COFF objects, and what
    /// cannot be analysed, have none to remove). One call for every
    /// [`FileType::is_splittable`] type. The error: the file changed while
    /// it was read.
    pub fn splits_device_code(&self) -> io::Result<bool> {
        Ok(self.units()?.is_ok_and(|us| {
            us.iter()
                .any(|u| u.analysis.as_ref().is_ok_and(|a| a.has_device_code()))
        }))
    }

    /// The COFF object members of an `ar` archive (a Windows `.lib`):
    /// `(name, offset of the body in the file, body size)`, in archive
    /// order (none for any other type). Their analysis is not loaded: a caller judges them by their
    /// bytes (`rocpack_image` splits no COFF object). The outer error: the
    /// file changed while it was read.
    pub fn coff_members(&self) -> io::Result<Result<Vec<(String, u64, u64)>>> {
        if !self.kind.has_members() {
            return Ok(Ok(Vec::new()));
        }
        let members = match crate::elf::archive_members_in(self.sparse.bytes()) {
            Ok(ms) => ms,
            Err(e) => return Ok(Err(e)),
        };
        let src = self.source();
        let mut list = Vec::new();
        for m in members {
            // A member's head, read apart (the loader loaded 64 bytes of
            // each: too few to tell a COFF object's section table).
            let (at, len) = (m.header_offset + 60, m.data.len() as u64);
            let mut head = vec![0u8; HEAD_LEN.min(usize::try_from(len).unwrap_or(HEAD_LEN))];
            let n = rocpack_bundle::ReadAt::read_at(&Window::new(&src, at, len), 0, &mut head)?;
            if matches!(detect(&head[..n]), FileType::Coff { .. }) {
                list.push((m.name, at, len));
            }
        }
        self.check_unchanged()?;
        Ok(Ok(list))
    }

    /// The ELF members of an `ar` archive, each with its analysis (the
    /// inner result: the member list, as `crate::elf::archive_members` of
    /// the whole file gives it; each member's `data` is a view of its range,
    /// `data.len()` its size). The outer error: the file changed while it
    /// was analysed.
    #[allow(clippy::type_complexity)]
    pub fn members(
        &self,
    ) -> io::Result<
        crate::elf::Result<
            Vec<(
                ArchiveMember<'_, SparseView<'_>>,
                crate::elf::Result<FatBinaryInfo>,
            )>,
        >,
    > {
        let data = self.sparse.bytes();
        let src = self.source();
        let list = crate::elf::archive_members_in(data).map(|ms| {
            ms.into_iter()
                // The loader loaded the first 64 bytes of every member:
                // enough to tell an ELF member.
                .filter(|m| {
                    m.data
                        .head(64)
                        .is_some_and(|h| matches!(detect(h), FileType::Elf { .. }))
                })
                .map(|m| {
                    let body = Window::new(&src, m.header_offset + 60, m.data.len() as u64);
                    let info = crate::elf::analyze_in(m.data, &body);
                    (m, info)
                })
                .collect()
        });
        self.check_unchanged()?;
        Ok(list)
    }
}
