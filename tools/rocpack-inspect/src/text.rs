//! The text form of a description (`kpack inspect` without `--json`): one
//! line per file, bundle, code object, wrapper, marker and kernel; archive
//! members indented under their archive.

use std::io::{Result, Write};

use crate::Desc;

/// Writes `d` (and its members, indented) as text.
pub fn write_text(out: &mut dyn Write, d: &Desc) -> Result<()> {
    write_at(out, d, 0)
}

fn write_at(out: &mut dyn Write, d: &Desc, indent: usize) -> Result<()> {
    let pad = "  ".repeat(indent);
    write!(out, "{pad}{}: {} ({} bytes", d.file, d.kind, d.size)?;
    if d.file_offset != 0 {
        write!(out, " at file offset {}", d.file_offset)?;
    }
    writeln!(out, ")")?;
    if let Some(line) = d.headers.summary() {
        writeln!(out, "{pad}  {line}")?;
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
        write_at(out, m, indent + 1)?;
    }
    Ok(())
}
