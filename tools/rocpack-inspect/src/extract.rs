//! `kpack unbundle` / extraction: one file per code object.

use super::*;

// ---------------------------------------------------------------------------
// Unbundle: one file per code object.

pub(super) fn sanitize(s: &str) -> String {
    let t: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._:+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match t.as_str() {
        "" | "." | ".." => format!("_{t}"),
        _ => t,
    }
}

/// One file `kpack unbundle` writes.
#[derive(Debug, Clone)]
pub struct Extracted {
    /// Path relative to the output directory.
    pub rel: PathBuf,
    pub target: String,
    pub size: u64,
    pub sha256: String,
}

/// A planned file; bundle entries get their extension from their bytes.
pub(super) struct Planned {
    out: Extracted,
    add_ext: bool,
}

/// Planned output per code object (global number → file), `None` for
/// skipped ones (empty host entries).
pub(super) fn plan_files(
    d: &Desc,
    dir: &Path,
    out: &mut Vec<Option<Planned>>,
    used: &mut std::collections::BTreeSet<PathBuf>,
) {
    for b in &d.bundles {
        for c in &b.code_objects {
            if c.is_host && c.size == 0 {
                out.push(None);
                continue;
            }
            // The extension comes from the content; the name is fixed
            // when the first chunk is seen.
            let name = format!("b{}-e{}-{}", b.index, c.index, sanitize(&c.target));
            out.push(Some(Planned {
                out: Extracted {
                    rel: dir.join(name),
                    target: c.target.clone(),
                    size: c.size,
                    sha256: c.sha256.clone(),
                },
                add_ext: true,
            }));
        }
    }
    if let Some(k) = &d.kpack {
        for e in &k.kernels {
            out.push(Some(Planned {
                out: Extracted {
                    rel: dir.join(rocpack_kpack::unpack_file_name(
                        e.ordinal, &e.key, &e.target,
                    )),
                    target: e.target.clone(),
                    size: e.original_size,
                    sha256: e.sha256.clone(),
                },
                add_ext: false,
            }));
        }
    }
    for m in &d.members {
        let member = m
            .file
            .rsplit_once('(')
            .map(|(_, n)| n.trim_end_matches(')'))
            .unwrap_or(&m.file);
        let base = sanitize(member);
        let mut sub = dir.join(&base);
        let mut n = 1;
        while !used.insert(sub.clone()) {
            n += 1;
            sub = dir.join(format!("{base}.{n}"));
        }
        plan_files(m, &sub, out, used);
    }
}

/// `.hsaco` for AMDGPU ELF, `.bc` for LLVM bitcode, `.bin` otherwise.
pub(super) fn ext(head: &[u8]) -> &'static str {
    if rocpack_image::detect(head).is_elf() {
        "hsaco"
    } else if head.starts_with(b"BC\xc0\xde") || head.starts_with(&[0xde, 0xc0, 0x17, 0x0b]) {
        "bc"
    } else {
        "bin"
    }
}

/// Writes each planned code object into `root` as it streams by.
pub(super) struct Writer<'p> {
    root: &'p Path,
    plan: &'p [Option<Planned>],
    /// Final names (bundle entries get their extension from their bytes).
    names: std::sync::Mutex<BTreeMap<usize, PathBuf>>,
}

pub(super) struct Open {
    file: Option<std::io::BufWriter<File>>,
    path: PathBuf,
    head: Vec<u8>,
    rel: PathBuf,
    needs_ext: bool,
}

impl Writer<'_> {
    fn open(&self, o: &mut Open) -> Result<()> {
        if o.file.is_some() {
            return Ok(());
        }
        if o.needs_ext {
            let name = format!(
                "{}.{}",
                o.rel.file_name().unwrap_or_default().to_string_lossy(),
                ext(&o.head)
            );
            o.rel.set_file_name(name);
        }
        o.path = self.root.join(&o.rel);
        if let Some(p) = o.path.parent() {
            std::fs::create_dir_all(p)
                .map_err(|e| fail(format!("{}: cannot create: {e}", p.display())))?;
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&o.path)
            .map_err(|e| fail(format!("{}: cannot create: {e}", o.path.display())))?;
        let mut w = std::io::BufWriter::with_capacity(CHUNK, f);
        w.write_all(&o.head)
            .map_err(|e| fail(format!("{}: cannot write: {e}", o.path.display())))?;
        o.file = Some(w);
        Ok(())
    }
}

impl CoSink for Writer<'_> {
    type State = Option<Open>;
    fn begin(&self, i: usize) -> Result<Option<Open>> {
        Ok(self.plan[i].as_ref().map(|p| Open {
            file: None,
            path: PathBuf::new(),
            head: Vec::new(),
            rel: p.out.rel.clone(),
            needs_ext: p.add_ext,
        }))
    }
    fn chunk(&self, st: &mut Option<Open>, bytes: &[u8]) -> Result<()> {
        let Some(o) = st else { return Ok(()) };
        if o.file.is_none() {
            o.head.extend_from_slice(bytes);
            if o.head.len() < 4 {
                return Ok(());
            }
            return self.open(o);
        }
        let path = &o.path;
        o.file
            .as_mut()
            .expect("opened")
            .write_all(bytes)
            .map_err(|e| fail(format!("{}: cannot write: {e}", path.display())))
    }
    fn end(&self, i: usize, st: Option<Open>) -> Result<()> {
        let Some(mut o) = st else { return Ok(()) };
        self.open(&mut o)?;
        let path = o.path.clone();
        o.file
            .take()
            .expect("opened")
            .into_inner()
            .map_err(|e| fail(format!("{}: cannot write: {}", path.display(), e.error())))?;
        self.names
            .lock()
            .map_err(|_| fail("internal: name table poisoned"))?
            .insert(i, o.rel);
        Ok(())
    }
}

/// Write one file per code object of `d` (hashed already) under `root`,
/// an empty directory. Bundles whose code objects overlap are refused: the
/// output would repeat shared bytes once per entry. Returns the files in
/// description order.
pub fn extract(input: &Input, d: &Desc, root: &Path) -> Result<Vec<Extracted>> {
    refuse_overlaps(d)?;
    let mut plan = Vec::new();
    plan_files(d, Path::new(""), &mut plan, &mut Default::default());
    let w = Writer {
        root,
        plan: &plan,
        names: Default::default(),
    };
    stream_all(input, d, &w)?;
    let names = w
        .names
        .into_inner()
        .map_err(|_| fail("internal: name table poisoned"))?;
    Ok(plan
        .into_iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let mut p = p?.out;
            if let Some(rel) = names.get(&i) {
                p.rel = rel.clone();
            }
            Some(p)
        })
        .collect())
}

/// `kpack unbundle`: write every code object of the input into `outdir`
/// (created; an existing one must be empty), all or nothing: files go to a
/// temporary directory beside it, renamed into place when all succeeded.
pub fn unbundle(input: &Input, d: &Desc, outdir: &Path) -> Result<Vec<Extracted>> {
    refuse_overlaps(d)?;
    match std::fs::symlink_metadata(outdir) {
        Ok(m) if m.is_dir() => {
            let empty = std::fs::read_dir(outdir)
                .map_err(|e| fail(format!("{}: cannot read: {e}", outdir.display())))?
                .next()
                .is_none();
            if !empty {
                return Err(fail(format!(
                    "output directory {} exists and is not empty",
                    outdir.display()
                )));
            }
        }
        Ok(_) => {
            return Err(fail(format!(
                "output directory {} exists and is not a directory",
                outdir.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(format!("{}: cannot stat: {e}", outdir.display()))),
    }
    let parent = match outdir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)
        .map_err(|e| fail(format!("{}: cannot create: {e}", parent.display())))?;
    let tmp = tempfile::Builder::new()
        .prefix(".kpack-unbundle-")
        .tempdir_in(&parent)
        .map_err(|e| {
            fail(format!(
                "{}: cannot create a temporary directory: {e}",
                parent.display()
            ))
        })?;
    // Errors name the user's output path, not the temporary one.
    let files = extract(input, d, tmp.path()).map_err(|e| {
        let tmp_s = tmp.path().display().to_string();
        fail(e.0.replace(&tmp_s, &outdir.display().to_string()))
    })?;
    if outdir.exists() {
        std::fs::remove_dir(outdir)
            .map_err(|e| fail(format!("{}: cannot replace: {e}", outdir.display())))?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, outdir).map_err(|e| {
        let _ = std::fs::remove_dir_all(&kept);
        fail(format!(
            "cannot move the output into {}: {e}",
            outdir.display()
        ))
    })?;
    Ok(files)
}

pub(super) fn refuse_overlaps(d: &Desc) -> Result<()> {
    for b in &d.bundles {
        if let Some(&(x, y)) = b.overlaps.first() {
            return Err(fail(format!(
                "{}: bundle {} at byte offset {}: code objects of entries {x} and {y} overlap; refusing to write shared bytes once per entry",
                d.file,
                b.index,
                b.file_offset.unwrap_or(0)
            )));
        }
    }
    d.members.iter().try_for_each(refuse_overlaps)
}
