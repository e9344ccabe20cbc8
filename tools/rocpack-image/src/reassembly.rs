//! Streaming reassembly of a split host file, one dispatch for ELF files,
//! `ar` archives and PE32+ images: [`Reassembly::open`] detects and
//! analyses the host once; callers then ask whether bundles of given sizes
//! fit ([`Reassembly::fits`]), place them straight into the output
//! ([`Reassembly::place`]) or write the whole file from bundles held in a
//! spill file ([`Reassembly::write`]), without ever branching on the
//! format themselves. "Does not fit" is the typed answer [`Fit::DoesNotFit`]
//! of [`Reassembly::fits`], never an error to retry on.

use std::fs::File;
use std::io::Write;

use crate::elf::{Bundles, FatBinaryInfo};
use crate::{Fit, State};
use rocpack_bundle::ReadAt;

use crate::{detect, pe, Analysis, Error, FileType, Result};

/// What a host file needs to be reassembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Not split: reassembly copies it ([`Reassembly::copy_to`]).
    Unchanged,
    /// A split ELF file or PE32+ image: its bundles are rebuilt from the
    /// marker of [`Reassembly::analysis`].
    Split,
    /// An `ar` archive: [`Reassembly::write_archive`] asks for each split
    /// member's bundles.
    Archive,
}

/// Callback of [`Reassembly::write_archive`]: the bundles (by `co_index`)
/// of one split archive member, given its name and analysis.
pub type MemberBundlesFn<'a, E> =
    dyn FnMut(&str, &Analysis) -> std::result::Result<Vec<Vec<u8>>, E> + 'a;

/// A failure of [`Reassembly::write_archive`]: the host's, or the one the
/// caller's callback returned (passed through unchanged).
#[derive(Debug)]
pub enum ArchiveError<E> {
    /// The archive could not be reassembled.
    Image(Error),
    /// The caller's callback failed.
    Caller(E),
}

enum Host {
    Elf(FatBinaryInfo),
    Pe(pe::PeInfo),
    Archive,
}

/// A split host file opened for reassembly (detected and analysed once).
pub struct Reassembly<'a> {
    host: &'a [u8],
    src: &'a (dyn ReadAt + Sync),
    kind: Host,
    analysis: Option<Analysis>,
}

/// Read buffer of [`Reassembly::copy_to`].
const CHUNK: usize = 1 << 20;

impl<'a> Reassembly<'a> {
    /// Detects and analyses `host` (its headers: a mapping is fine) whose
    /// bytes `src` reads with positioned reads (what is copied).
    pub fn open(host: &'a [u8], src: &'a (dyn ReadAt + Sync)) -> Result<Self> {
        let kind = match detect(host) {
            FileType::Archive => Host::Archive,
            FileType::Elf { .. } => Host::Elf(crate::elf::analyze_in(host, src)?),
            t @ (FileType::Pe { .. } | FileType::Coff { .. }) => {
                Host::Pe(pe::analyze_as(host, src, t)?)
            }
            t => return Err(Error::NotAnImage(t.name())),
        };
        let analysis = match &kind {
            Host::Elf(i) => Some(Analysis::Elf(i.clone())),
            Host::Pe(i) => Some(Analysis::Pe(i.clone())),
            Host::Archive => None,
        };
        Ok(Reassembly {
            host,
            src,
            kind,
            analysis,
        })
    }

    /// What reassembly of this host does.
    pub fn form(&self) -> Form {
        match &self.analysis {
            None => Form::Archive,
            Some(a) if a.state() == State::Split => Form::Split,
            Some(_) => Form::Unchanged,
        }
    }

    /// The analysis of an ELF file or PE image (none for an archive).
    pub fn analysis(&self) -> Option<&Analysis> {
        self.analysis.as_ref()
    }

    /// Whether [`Reassembly::place`] may place bundles (a split linked
    /// ELF file; [`Reassembly::place`] still says `None` when the split
    /// left no room to place them in).
    pub fn may_place(&self) -> bool {
        matches!(&self.kind, Host::Elf(i) if i.state == State::Split)
    }

    /// Whether bundles of sizes `lens` (by `co_index`) fit a split host.
    pub fn fits(&self, lens: &[u64]) -> Result<Fit> {
        match &self.kind {
            Host::Elf(_) => Ok(crate::elf::reassembly_fits(self.host, lens)?),
            Host::Pe(i) => pe::reassembly_fits(self.host, i, lens),
            Host::Archive => Ok(Fit::Fits),
        }
    }

    /// The host part written into `dst` (empty) with positioned writes,
    /// the bundles' places (`lens` bytes each, by `co_index`) left for the
    /// caller: the file size and each bundle's offset. `None` (nothing
    /// written) where bundles cannot be placed that way
    /// ([`Reassembly::write`] then writes them).
    pub fn place(&self, lens: &[u64], dst: &File) -> Result<Option<(u64, Vec<u64>)>> {
        if !self.may_place() {
            return Ok(None);
        }
        crate::elf::reassemble_placed(self.host, self.src, lens, dst)
    }

    /// The reassembled file written to `dst` (empty, opened for reading
    /// and writing: a PE image's checksum is computed from what was
    /// written), range by range: the host part from the host's source, the
    /// bundles from theirs. Call [`Reassembly::fits`] first: bundles that
    /// do not fit are an error here. Returns the bytes written.
    pub fn write(&self, bundles: &Bundles<'_>, dst: &File) -> Result<u64> {
        match &self.kind {
            Host::Elf(_) => crate::elf::reassemble_into(self.host, self.src, bundles, dst),
            Host::Pe(i) => pe::reassemble_analyzed_to(self.host, self.src, i, bundles, dst),
            Host::Archive => Err(Error::unsupported(
                0,
                "an archive is reassembled member by member",
            )),
        }
    }

    /// The host copied into `dst` unchanged (a file that is not split).
    pub fn copy_to(&self, dst: &File) -> Result<u64> {
        let mut w = std::io::BufWriter::with_capacity(1 << 16, dst);
        let size = self.src.size();
        let mut buf = vec![0u8; CHUNK];
        let mut pos = 0u64;
        while pos < size {
            let k = (size - pos).min(CHUNK as u64) as usize;
            let n = self.src.read_at(pos, &mut buf[..k]).map_err(read_error)?;
            if n == 0 {
                return Err(read_error(std::io::ErrorKind::UnexpectedEof.into()));
            }
            w.write_all(&buf[..n]).map_err(write_error)?;
            pos += n as u64;
        }
        w.flush().map_err(write_error)?;
        Ok(size)
    }

    /// An `ar` archive reassembled into `dst` (empty) with memory bounded
    /// by its largest member: `bundles_for(member, analysis)` gives each
    /// split member's bundles (by `co_index`); rebuilt members go through
    /// `spill`. Members are relocatable objects, whose bundles always fit.
    pub fn write_archive<E>(
        &self,
        bundles_for: &mut MemberBundlesFn<'_, E>,
        spill: &File,
        dst: &File,
    ) -> std::result::Result<u64, ArchiveError<E>> {
        let mut failed = None;
        let mut w = std::io::BufWriter::with_capacity(1 << 16, dst);
        let r = crate::elf::reassemble_archive_to(
            self.host,
            self.src,
            &mut |member, info| {
                bundles_for(member, &Analysis::Elf(info.clone())).map_err(|e| {
                    failed = Some(e);
                    // Stops the archive; the caller's error is returned.
                    crate::elf::Error::Layout {
                        offset: 0,
                        what: "stopped by the caller".into(),
                    }
                })
            },
            spill,
            &mut w,
        );
        if let Some(e) = failed {
            return Err(ArchiveError::Caller(e));
        }
        let n = r.map_err(|e| ArchiveError::Image(e))?;
        w.flush().map_err(|e| ArchiveError::Image(write_error(e)))?;
        Ok(n)
    }
}

fn write_error(source: std::io::Error) -> Error {
    Error::Io {
        what: "writing the reassembled file",
        source,
    }
}

fn read_error(source: std::io::Error) -> Error {
    Error::Io {
        what: "reading the host file",
        source,
    }
}
