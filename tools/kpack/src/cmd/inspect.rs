//! `kpack inspect FILE [--json]`: describe a fat binary, static archive, raw
//! bundle, CCOB or `.kpack` file. The analysis lives in
//! `rocpack_artifacts::inspect`; this file is the command line and the text
//! rendering.
//!
//! JSON schema: `docs/cli/inspect-json.md`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use rocpack_artifacts::inspect::{self, Desc, Input};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// ELF fat binary (shared library, executable, object), PE32+ image
    /// (DLL, EXE, .pyd), COFF object (.obj), static archive, raw bundle,
    /// CCOB or `.kpack` file.
    pub file: PathBuf,
    /// Print JSON (schema in docs/cli/inspect-json.md) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also check each compressed bundle's stored hash (the truncated MD5
    /// of its payload; `hash_matches` true or false instead of null). Off
    /// by default, as in clang-offload-bundler, which computes it only
    /// with `-verbose`: it is one sequential MD5 of the whole payload, the
    /// slowest part of inspecting a large CCOB. Without it code objects are
    /// still decompressed, size-checked and SHA-256-hashed, and a damaged
    /// stream still fails to decompress.
    #[arg(long, conflicts_with = "no_hash_check")]
    pub check_hash: bool,
    /// The default (no MD5 of CCOB payloads); kept for scripts written when
    /// checking was the default.
    #[arg(long, hide = true)]
    pub no_hash_check: bool,
}

pub fn run(args: InspectArgs) -> Result<ExitCode> {
    let mut input = Input::open(&args.file)?;
    if !args.check_hash {
        input = input.without_ccob_hash();
    }
    let desc = inspect::inspect(&input, &args.file.display().to_string())?;
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
// Text output.

fn write_text(out: &mut dyn Write, d: &Desc, indent: usize) -> Result<()> {
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
    if let Some(p) = &d.pe {
        write!(
            out,
            "{pad}  PE {} machine {:#x} state {}",
            p.pe_type, p.machine, p.state
        )?;
        if p.image_base != 0 {
            write!(out, " image base {:#x}", p.image_base)?;
        }
        if let (Some(n), Some(f)) = (&p.fatbin_section, &p.hip_fatbin) {
            write!(
                out,
                "; {n} at {} RVA {:#x} size {}{}",
                f.file_offset,
                f.addr,
                f.size,
                if f.nobits { " (no file data)" } else { "" }
            )?;
        }
        if p.trailing_bytes != 0 {
            write!(out, "; {} bytes after the last section", p.trailing_bytes)?;
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
