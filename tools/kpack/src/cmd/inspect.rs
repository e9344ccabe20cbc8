//! `kpack inspect FILE [--json]`: describe a fat binary, static archive, raw
//! bundle, CCOB or `.kpack` file. Also the analysis behind `kpack unbundle`.
//!
//! JSON schema: `docs/cli/inspect-json.md`. Offsets in a description are
//! relative to the bytes it describes (an archive member's bundles are
//! relative to the member; the member's `file_offset` locates it in the
//! archive).

use std::borrow::Cow;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use rayon::prelude::*;
use rocpack_bundle::{EntryData, Format, BUNDLE_MAGIC, CCOB_MAGIC};
use serde::Serialize;
use sha2::{Digest, Sha256};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// ELF fat binary (shared library, executable, object), static archive,
    /// raw bundle, CCOB or `.kpack` file.
    pub file: PathBuf,
    /// Print JSON (schema in docs/cli/inspect-json.md) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InspectArgs) -> Result<ExitCode> {
    let input = Input::open(&args.file)?;
    let mut desc = describe(&input, &args.file.display().to_string())?;
    hash_all(&input, &mut desc)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &desc)?;
        writeln!(out)?;
    } else {
        write_text(&mut out, &desc, 0)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------
// Input: memory-mapped file plus a handle for positioned reads.

/// The inspected file: mapped for parsing (only headers are touched), read
/// with positioned reads for hashing so resident memory stays small.
pub(crate) struct Input {
    file: File,
    map: Option<memmap2::Mmap>,
}

impl Input {
    pub(crate) fn open(path: &Path) -> Result<Self> {
        // Non-blocking open and a check of the open descriptor: a FIFO must
        // not hang, a directory or device is refused with what it is.
        let file = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .with_context(|| format!("{}: cannot open", path.display()))?
        };
        let meta = file
            .metadata()
            .with_context(|| format!("{}: cannot stat", path.display()))?;
        if !meta.is_file() {
            anyhow::bail!(
                "{}: not a regular file ({})",
                path.display(),
                if meta.is_dir() {
                    "a directory"
                } else {
                    "a FIFO, socket or device"
                }
            );
        }
        let len = meta.len();
        let map = if len == 0 {
            None
        } else {
            #[allow(unsafe_code)]
            // SAFETY: read-only private mapping of an input file; we never
            // write through it. Another process truncating the file while we
            // run could fault the mapping — the usual contract of mmap-based
            // readers; inputs are build artifacts that are not modified in place.
            let m = unsafe { memmap2::Mmap::map(&file) }
                .with_context(|| format!("{}: cannot map", path.display()))?;
            // Only headers are read through the mapping: no read-ahead or
            // fault-around, so resident memory stays small on huge inputs.
            let _ = m.advise(memmap2::Advice::Random);
            Some(m)
        };
        Ok(Input { file, map })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Offset of `sub` in the mapped file, if it is a slice of it.
    fn offset_of(&self, sub: &[u8]) -> Option<u64> {
        let base = self.bytes().as_ptr() as usize;
        let p = sub.as_ptr() as usize;
        let off = p.checked_sub(base)?;
        (off.checked_add(sub.len())? <= self.bytes().len()).then_some(off as u64)
    }
}

// ---------------------------------------------------------------------------
// Description model (serialised as JSON in field order).

#[derive(Debug, Serialize)]
pub(crate) struct Desc<'a> {
    /// Path as given, or `archive(member)`.
    pub file: String,
    /// Offset of these bytes in the inspected file (non-zero for members).
    pub file_offset: u64,
    pub size: u64,
    /// `elf`, `archive`, `bundle`, `ccob`, `kpack`, `amdgpu-code-object`, `unknown`.
    pub kind: &'static str,
    pub elf: Option<ElfDesc>,
    pub bundles: Vec<BundleDesc<'a>>,
    pub wrappers: Vec<WrapperDesc>,
    pub marker: Option<MarkerDesc>,
    pub kpack: Option<KpackDesc<'a>>,
    pub members: Vec<Desc<'a>>,
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ElfDesc {
    /// `EXEC`, `DYN` or `REL`.
    pub elf_type: &'static str,
    pub machine: u16,
    /// `fat`, `host-only` or `split`.
    pub state: &'static str,
    pub hip_fatbin: Option<SectionDesc>,
    pub hip_fat_bin_segment: Option<SectionDesc>,
    /// `__CLANG_OFFLOAD_BUNDLE__*` sections (`-fgpu-rdc` objects).
    pub offload_bundle_sections: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SectionDesc {
    pub file_offset: u64,
    pub addr: u64,
    pub size: u64,
    pub nobits: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct BundleDesc<'a> {
    pub index: usize,
    /// `.hip_fatbin`, `file`, or `section:<name>` (RDC objects).
    pub source: String,
    /// Offset of the bundle in the described bytes (`null` for `elf-sections`).
    pub file_offset: Option<u64>,
    pub size: Option<u64>,
    /// `uncompressed`, `ccob` or `elf-sections`.
    pub format: &'static str,
    /// CCOB header version.
    pub version: Option<u16>,
    /// `zlib` or `zstd` for CCOB.
    pub compression: Option<&'static str>,
    pub uncompressed_size: Option<u64>,
    /// Stored truncated MD5 (16 hex digits) for CCOB.
    pub hash: Option<String>,
    pub hash_matches: Option<bool>,
    /// Indices of the wrappers pointing at this bundle.
    pub wrappers: Vec<usize>,
    pub code_objects: Vec<CodeObjectDesc<'a>>,
}

#[derive(Debug, Serialize)]
pub(crate) struct CodeObjectDesc<'a> {
    pub index: usize,
    /// Bundle entry ID, verbatim.
    pub target: String,
    /// Processor and features (`gfx90a:xnack+`); empty for host entries.
    pub target_id: String,
    pub is_host: bool,
    /// Offset within the (decompressed) bundle.
    pub offset: u64,
    /// Offset in the described bytes, when stored uncompressed.
    pub file_offset: Option<u64>,
    pub size: u64,
    pub sha256: String,
    #[serde(skip)]
    pub data: EntryData<'a>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WrapperDesc {
    pub index: usize,
    pub file_offset: u64,
    /// `HIPF` or `HIPK`.
    pub magic: &'static str,
    pub version: u32,
    /// How the bundle pointer is relocated (`none`, `rela:R_X86_64_RELATIVE`, …).
    pub pointer: String,
    /// Link-time pointer value (hex).
    pub target: String,
    pub bundle: Option<usize>,
    pub points_to_marker: bool,
    /// `co_index` of a HIPK wrapper.
    pub co_index: Option<u32>,
}

#[derive(Debug, Serialize)]
pub(crate) struct MarkerDesc {
    pub file_offset: u64,
    pub size: u64,
    pub kpack_search_paths: Vec<String>,
    pub kernel_name: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct KpackDesc<'a> {
    pub format_version: u64,
    pub group_name: String,
    pub gfx_arch_family: String,
    pub gfx_arches: Vec<String>,
    pub compression_scheme: String,
    pub toc_offset: u64,
    pub kernels: Vec<KernelDesc<'a>>,
}

#[derive(Debug, Serialize)]
pub(crate) struct KernelDesc<'a> {
    pub key: String,
    pub target: String,
    pub ordinal: u32,
    pub original_size: u64,
    pub stored_offset: Option<u64>,
    pub stored_size: Option<u64>,
    pub sha256: String,
    #[serde(skip)]
    pub data: Cow<'a, [u8]>,
}

impl<'a> Desc<'a> {
    fn new(file: String, file_offset: u64, size: u64, kind: &'static str) -> Self {
        Desc {
            file,
            file_offset,
            size,
            kind,
            elf: None,
            bundles: Vec::new(),
            wrappers: Vec::new(),
            marker: None,
            kpack: None,
            members: Vec::new(),
            notes: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// Analysis.

const ELF_MAGIC: &[u8] = b"\x7fELF";
const AR_MAGIC: &[u8] = b"!<arch>\n";
const KPAK_MAGIC: &[u8] = b"KPAK";
const EM_AMDGPU: u16 = 0xe0;
const MAX_DEPTH: usize = 4;

/// Describe the whole input (code-object hashes are filled in by [`hash_all`]).
pub(crate) fn describe<'a>(input: &'a Input, name: &str) -> Result<Desc<'a>> {
    describe_bytes(input, input.bytes(), name, 0, 0)
}

fn describe_bytes<'a>(
    input: &'a Input,
    data: &'a [u8],
    name: &str,
    file_offset: u64,
    depth: usize,
) -> Result<Desc<'a>> {
    let size = data.len() as u64;
    if data.starts_with(ELF_MAGIC) {
        let machine = data
            .get(18..20)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .unwrap_or(0);
        if machine == EM_AMDGPU {
            let mut d = Desc::new(name.to_string(), file_offset, size, "amdgpu-code-object");
            let flags = data
                .get(48..52)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .unwrap_or(0);
            d.notes.push(format!(
                "raw AMDGPU code object (e_machine EM_AMDGPU, e_flags {flags:#x}), not an offload bundle"
            ));
            return Ok(d);
        }
        return describe_elf(data, name, file_offset).with_context(|| format!("{name}: ELF"));
    }
    if data.starts_with(AR_MAGIC) {
        let mut d = Desc::new(name.to_string(), file_offset, size, "archive");
        if depth >= MAX_DEPTH {
            d.notes.push("nested archive not descended into".into());
            return Ok(d);
        }
        let members = rocpack_elf::archive_members(data)
            .map_err(|e| anyhow::anyhow!("{name}: archive: {e}"))?;
        for m in members {
            let off = input
                .offset_of(m.data)
                .unwrap_or(file_offset + m.header_offset + 60);
            let member_name = format!("{name}({})", m.name);
            d.members
                .push(describe_bytes(input, m.data, &member_name, off, depth + 1)?);
        }
        return Ok(d);
    }
    if data.starts_with(BUNDLE_MAGIC) || data.starts_with(CCOB_MAGIC) {
        let kind = if data.starts_with(CCOB_MAGIC) {
            "ccob"
        } else {
            "bundle"
        };
        let mut d = Desc::new(name.to_string(), file_offset, size, kind);
        d.bundles =
            describe_section(data, "file", 0).with_context(|| format!("{name}: {kind} file"))?;
        return Ok(d);
    }
    if data.starts_with(KPAK_MAGIC) {
        let mut d = Desc::new(name.to_string(), file_offset, size, "kpack");
        d.kpack = Some(describe_kpack(data).with_context(|| format!("{name}: .kpack"))?);
        return Ok(d);
    }
    let mut d = Desc::new(name.to_string(), file_offset, size, "unknown");
    d.notes
        .push("not an ELF file, archive, offload bundle, CCOB or .kpack".into());
    note_stray_magic(&mut d, data);
    Ok(d)
}

/// Note occurrences of the bundle magic outside any bundle section (a
/// string constant in a bundle-parsing library is not a fat binary).
fn note_stray_magic(d: &mut Desc<'_>, data: &[u8]) {
    let hits: Vec<usize> = memchr::memmem::find_iter(data, BUNDLE_MAGIC)
        .take(5)
        .collect();
    if let Some(first) = hits.first() {
        d.notes.push(format!(
            "contains the string __CLANG_OFFLOAD_BUNDLE__ outside any bundle section ({}{} occurrence(s), first at byte offset {first}); ignored",
            hits.len(),
            if hits.len() == 5 { "+" } else { "" }
        ));
    }
}

fn describe_section<'a>(bytes: &'a [u8], source: &str, base: u64) -> Result<Vec<BundleDesc<'a>>> {
    let spans = rocpack_bundle::find_bundles(bytes)
        .map_err(|e| anyhow::anyhow!("{source} at byte offset {base}: {}", e.shifted(base)))?;
    let mut out = Vec::with_capacity(spans.len());
    for (i, sp) in spans.iter().enumerate() {
        let start = sp.offset as usize;
        let bytes_here = &bytes[start..start + sp.len as usize];
        let abs = base + sp.offset;
        out.push(describe_bundle(i, source, bytes_here, abs)?);
    }
    Ok(out)
}

fn describe_bundle<'a>(
    index: usize,
    source: &str,
    bytes: &'a [u8],
    abs: u64,
) -> Result<BundleDesc<'a>> {
    let b = rocpack_bundle::parse_bundle(bytes)
        .map_err(|e| anyhow::anyhow!("bundle {index} at byte offset {abs}: {}", e.shifted(abs)))?;
    let (format, version, compression) = match b.format {
        Format::Uncompressed => ("uncompressed", None, None),
        Format::Ccob { version, method } => ("ccob", Some(version), Some(method.name())),
    };
    let (uncompressed_size, hash, hash_matches) = match (&b.ccob, &b.decompressed) {
        (Some(h), Some(payload)) => (
            Some(h.uncompressed_size),
            Some(format!("{:016x}", h.hash)),
            Some(rocpack_bundle::ccob_hash(payload) == h.hash),
        ),
        _ => (None, None, None),
    };
    let compressed = b.ccob.is_some();
    let code_objects = b
        .entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| CodeObjectDesc {
            index: i,
            target: e.id.to_string(),
            target_id: e.id.target_id().to_string(),
            is_host: e.id.is_host(),
            offset: e.offset,
            file_offset: (!compressed).then_some(abs + e.offset),
            size: e.size,
            sha256: String::new(),
            data: e.data,
        })
        .collect();
    Ok(BundleDesc {
        index,
        source: source.to_string(),
        file_offset: Some(abs),
        size: Some(b.len),
        format,
        version,
        compression,
        uncompressed_size,
        hash,
        hash_matches,
        wrappers: Vec::new(),
        code_objects,
    })
}

fn elf_type(k: rocpack_elf::ElfKind) -> &'static str {
    match k {
        rocpack_elf::ElfKind::Executable => "EXEC",
        rocpack_elf::ElfKind::Shared => "DYN",
        rocpack_elf::ElfKind::Relocatable => "REL",
    }
}

fn section(s: &rocpack_elf::SectionRange) -> SectionDesc {
    SectionDesc {
        file_offset: s.file_offset,
        addr: s.addr,
        size: s.size,
        nobits: s.nobits,
    }
}

fn pointer_model(m: &rocpack_elf::PointerModel, machine: u16) -> String {
    use rocpack_elf::PointerModel as P;
    let (rel, abs) = if machine == 183 {
        ("R_AARCH64_RELATIVE", "R_AARCH64_ABS64")
    } else {
        ("R_X86_64_RELATIVE", "R_X86_64_64")
    };
    match m {
        P::Absolute => "none".into(),
        P::RelaRelative { .. } => format!("rela:{rel}"),
        P::RelaSymbol { symbol, .. } => format!("rela:{abs}:{symbol}"),
        P::Rel { r_type, .. } => format!("rel:{r_type}"),
        P::Relr { bitmap } => if *bitmap {
            "relr:bitmap"
        } else {
            "relr:address"
        }
        .into(),
        P::Object { symbol, .. } => format!("object:{symbol}"),
    }
}

fn describe_elf<'a>(data: &'a [u8], name: &str, file_offset: u64) -> Result<Desc<'a>> {
    let info = rocpack_elf::analyze(data).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut d = Desc::new(name.to_string(), file_offset, data.len() as u64, "elf");
    d.elf = Some(ElfDesc {
        elf_type: elf_type(info.kind),
        machine: info.machine,
        state: match info.state {
            rocpack_elf::State::HostOnly => "host-only",
            rocpack_elf::State::Fat => "fat",
            rocpack_elf::State::Split => "split",
        },
        hip_fatbin: info.fatbin.as_ref().map(section),
        hip_fat_bin_segment: info.wrapper_section.as_ref().map(section),
        offload_bundle_sections: info.offload_bundle_sections.clone(),
    });
    for b in &info.bundles {
        let bytes = rocpack_elf::bundle_bytes(data, &info, b.index)
            .map_err(|e| anyhow::anyhow!("bundle {}: {e}", b.index))?;
        let mut bd = describe_bundle(b.index, rocpack_elf::FATBIN_SECTION, bytes, b.file_offset)?;
        bd.wrappers = b.wrappers.clone();
        d.bundles.push(bd);
    }
    for w in &info.wrappers {
        d.wrappers.push(WrapperDesc {
            index: w.index,
            file_offset: w.file_offset,
            magic: if w.magic == rocpack_elf::HIPK_MAGIC {
                "HIPK"
            } else {
                "HIPF"
            },
            version: w.version,
            pointer: pointer_model(&w.model, info.machine),
            target: format!("{:#x}", w.target),
            bundle: w.bundle,
            points_to_marker: w.points_to_marker,
            co_index: (w.magic == rocpack_elf::HIPK_MAGIC).then(|| w.co_index()),
        });
    }
    if let Some(m) = &info.marker {
        let (paths, kernel, error) = match rocpack_kpack::Marker::decode(&m.bytes) {
            Ok(mk) => (mk.kpack_search_paths, Some(mk.kernel_name), None),
            Err(e) => (Vec::new(), None, Some(e.to_string())),
        };
        d.marker = Some(MarkerDesc {
            file_offset: m.section.file_offset,
            size: m.section.size,
            kpack_search_paths: paths,
            kernel_name: kernel,
            error,
        });
    }
    if let Some(fb) = &info.fatbin {
        if fb.nobits {
            d.notes
                .push(".hip_fatbin is NOBITS: device code was split out of this binary".into());
        }
    }
    // -fgpu-rdc objects: each __CLANG_OFFLOAD_BUNDLE__<id> section is one entry.
    if !info.offload_bundle_sections.is_empty() {
        d.bundles
            .push(describe_rdc_sections(data, d.bundles.len())?);
    }
    if info.fatbin.is_none() && info.offload_bundle_sections.is_empty() {
        note_stray_magic(&mut d, data);
    }
    Ok(d)
}

fn describe_rdc_sections(data: &[u8], index: usize) -> Result<BundleDesc<'_>> {
    use object::{Object, ObjectSection};
    let obj = object::File::parse(data).context("parsing ELF sections")?;
    let mut code_objects = Vec::new();
    for s in obj.sections() {
        let Ok(name) = s.name() else { continue };
        let Some(id) = name.strip_prefix("__CLANG_OFFLOAD_BUNDLE__") else {
            continue;
        };
        let (off, size) = s.file_range().unwrap_or((0, 0));
        let bytes = s
            .data()
            .with_context(|| format!("section {name}: data out of bounds"))?;
        let tid = rocpack_bundle::TargetId::parse(id)
            .with_context(|| format!("section {name} at byte offset {off}"))?;
        code_objects.push(CodeObjectDesc {
            index: code_objects.len(),
            target: id.to_string(),
            target_id: tid.target_id().to_string(),
            is_host: tid.is_host(),
            offset: 0,
            file_offset: Some(off),
            size,
            sha256: String::new(),
            data: EntryData::Borrowed(bytes),
        });
    }
    Ok(BundleDesc {
        index,
        source: "sections:__CLANG_OFFLOAD_BUNDLE__*".into(),
        file_offset: None,
        size: None,
        format: "elf-sections",
        version: None,
        compression: None,
        uncompressed_size: None,
        hash: None,
        hash_matches: None,
        wrappers: Vec::new(),
        code_objects,
    })
}

fn describe_kpack(data: &[u8]) -> Result<KpackDesc<'static>> {
    let r = rocpack_kpack::KpackReader::from_bytes(data).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Hash each kernel as it is decoded (in parallel), never holding more
    // than one decoded kernel per worker: memory stays flat however large
    // the archive or however its blobs overlap.
    let kernels = r
        .entries()
        .par_iter()
        .map(|e| -> Result<KernelDesc<'static>> {
            let bytes = r.get_entry(e).map_err(|err| anyhow::anyhow!("{err}"))?;
            let loc = r.blob_location(e.ordinal);
            Ok(KernelDesc {
                key: e.key.clone(),
                target: e.target.clone(),
                ordinal: e.ordinal,
                original_size: e.original_size,
                stored_offset: loc.map(|l| l.offset),
                stored_size: loc.map(|l| l.size),
                sha256: hex::encode(Sha256::digest(&bytes)),
                data: Cow::Borrowed(&[]),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(KpackDesc {
        format_version: r.format_version(),
        group_name: r.group_name().to_string(),
        gfx_arch_family: r.gfx_arch_family().to_string(),
        gfx_arches: r.gfx_arches().to_vec(),
        compression_scheme: r.scheme().to_string(),
        toc_offset: r.toc_offset(),
        kernels,
    })
}

// ---------------------------------------------------------------------------
// Hashing (parallel; file-backed data is read with positioned reads).

fn sha256_of(input: &Input, data: &[u8]) -> Result<String> {
    const CHUNK: usize = 1 << 20;
    let mut h = Sha256::new();
    match input.offset_of(data) {
        // File-backed: positioned reads into a small buffer, so the mapping's
        // pages never become resident (peak RSS stays flat for huge inputs).
        Some(off) if !data.is_empty() => {
            use std::os::unix::fs::FileExt;
            let mut buf = vec![0u8; CHUNK.min(data.len())];
            let mut done = 0usize;
            while done < data.len() {
                let n = buf.len().min(data.len() - done);
                input
                    .file
                    .read_exact_at(&mut buf[..n], off + done as u64)
                    .context("reading the input")?;
                h.update(&buf[..n]);
                done += n;
            }
        }
        _ => h.update(data),
    }
    Ok(hex::encode(h.finalize()))
}

fn collect_slots<'d, 'a>(d: &'d mut Desc<'a>, out: &mut Vec<(&'d [u8], &'d mut String)>) {
    for b in &mut d.bundles {
        for c in &mut b.code_objects {
            out.push((&c.data, &mut c.sha256));
        }
    }
    // .kpack kernels are hashed while they are decoded (describe_kpack).
    for m in &mut d.members {
        collect_slots(m, out);
    }
}

/// Fill in every sha256 field, hashing code objects in parallel.
pub(crate) fn hash_all(input: &Input, d: &mut Desc<'_>) -> Result<()> {
    let mut slots = Vec::new();
    collect_slots(d, &mut slots);
    // Largest first keeps both cores busy to the end.
    slots.sort_by_key(|(data, _)| std::cmp::Reverse(data.len()));
    slots
        .into_par_iter()
        .try_for_each(|(data, slot)| -> Result<()> {
            *slot = sha256_of(input, data)?;
            Ok(())
        })
}

// ---------------------------------------------------------------------------
// Text output.

fn write_text(out: &mut dyn Write, d: &Desc<'_>, indent: usize) -> Result<()> {
    let pad = "  ".repeat(indent);
    write!(out, "{pad}{}: {} ({} bytes", d.file, d.kind, d.size)?;
    if d.file_offset != 0 {
        write!(out, " at file offset {}", d.file_offset)?;
    }
    writeln!(out, ")")?;
    if let Some(e) = &d.elf {
        write!(
            out,
            "{pad}  ELF {} machine {} state {}",
            e.elf_type, e.machine, e.state
        )?;
        if let Some(f) = &e.hip_fatbin {
            write!(
                out,
                "; .hip_fatbin at {} size {}{}",
                f.file_offset,
                f.size,
                if f.nobits { " (NOBITS)" } else { "" }
            )?;
        }
        writeln!(out)?;
    }
    for b in &d.bundles {
        write!(out, "{pad}  bundle {} [{}]", b.index, b.source)?;
        if let (Some(o), Some(s)) = (b.file_offset, b.size) {
            write!(out, " at {o} size {s}")?;
        }
        write!(out, " {}", b.format)?;
        if let (Some(v), Some(c)) = (b.version, b.compression) {
            write!(out, " v{v} {c}")?;
            if let (Some(u), Some(h), Some(ok)) = (b.uncompressed_size, &b.hash, b.hash_matches) {
                write!(
                    out,
                    " uncompressed {u} hash {h} ({})",
                    if ok { "ok" } else { "MISMATCH" }
                )?;
            }
        }
        if !b.wrappers.is_empty() {
            write!(out, " wrappers {:?}", b.wrappers)?;
        }
        writeln!(out)?;
        for c in &b.code_objects {
            writeln!(
                out,
                "{pad}    {:<50} {:>10}  {}",
                c.target, c.size, c.sha256
            )?;
        }
    }
    for w in &d.wrappers {
        writeln!(
            out,
            "{pad}  wrapper {} at {}: {} v{} pointer {} -> {}{}",
            w.index,
            w.file_offset,
            w.magic,
            w.version,
            w.pointer,
            w.target,
            match (w.bundle, w.co_index) {
                (Some(b), _) => format!(" (bundle {b})"),
                (None, Some(i)) => format!(" (marker, co_index {i})"),
                _ => String::new(),
            }
        )?;
    }
    if let Some(m) = &d.marker {
        writeln!(
            out,
            "{pad}  marker at {} size {}: kernel_name {:?} paths {:?}{}",
            m.file_offset,
            m.size,
            m.kernel_name.as_deref().unwrap_or(""),
            m.kpack_search_paths,
            m.error
                .as_deref()
                .map(|e| format!(" error: {e}"))
                .unwrap_or_default()
        )?;
    }
    if let Some(k) = &d.kpack {
        writeln!(
            out,
            "{pad}  kpack v{} group {} family {} arches {:?} scheme {} toc at {}",
            k.format_version,
            k.group_name,
            k.gfx_arch_family,
            k.gfx_arches,
            k.compression_scheme,
            k.toc_offset
        )?;
        for e in &k.kernels {
            writeln!(
                out,
                "{pad}    #{:<4} {} [{}] {:>10}  {}",
                e.ordinal, e.key, e.target, e.original_size, e.sha256
            )?;
        }
    }
    for n in &d.notes {
        writeln!(out, "{pad}  note: {n}")?;
    }
    for m in &d.members {
        write_text(out, m, indent + 1)?;
    }
    Ok(())
}
