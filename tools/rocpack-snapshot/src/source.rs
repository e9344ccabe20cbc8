//! Source snapshots: a subtree of a git repository at one commit, kept in
//! `<root>/stable/` and `<root>/last-stable/` (reference §2.2, §4.3), with
//! metadata that records where it came from and a [tree digest](crate::tree)
//! of what it holds.
//!
//! ```text
//! <root>/stable/metadata.txt            this module's format (era-2a/2b files are read too)
//! <root>/stable/<subtree>/…             the `git archive` of <subtree> at source_commit
//! <root>/last-stable/…                  the previous stable, copied as a tree (patches kept)
//! <root>/archives/<YYYYMMDD_HHMMSS>/    replaced channel directories (unless --no-archive)
//! <root>/.snapctl/…                     lock, journal, staging (shared with prebuilt)
//! ```
//!
//! Every change goes through [`crate::txn`]'s journal: each channel directory
//! is staged whole and swapped in with one `renameat2(RENAME_EXCHANGE)`.

use crate::error::{io_at, Error, Result};
use crate::fsutil;
use crate::repo::{now_utc, Channel, Repo};
use crate::tree;
use crate::txn::{self, Plan, Recovery, Source, TreePlan};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Which writer produced a metadata file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// Reference §3.2 (`commit:` …).
    Era2a,
    /// Reference §3.3 (`source_commit:` + `fbsource_revision:`).
    Era2b,
    /// This module's format (has `tree_digest:`).
    Snapctl,
}

/// A deliberate in-tree edit recorded by `snapctl record-patch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patch {
    /// `YYYY-MM-DDTHH:MM:SSZ`.
    pub date: String,
    /// Tree digest after the patch.
    pub digest: String,
    pub who: String,
    pub why: String,
}

impl Patch {
    fn render(&self) -> String {
        format!(
            "{} {} by {}: {}",
            self.date, self.digest, self.who, self.why
        )
    }

    fn parse(v: &str) -> Option<Patch> {
        let (date, rest) = v.split_once(' ')?;
        let (digest, rest) = rest.split_once(' ')?;
        let rest = rest.strip_prefix("by ")?;
        let (who, why) = rest.split_once(": ")?;
        is_tree_digest(digest).then(|| Patch {
            date: date.into(),
            digest: digest.into(),
            who: who.into(),
            why: why.into(),
        })
    }
}

/// One parsed source-snapshot `metadata.txt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceMeta {
    pub era: Era,
    pub source_commit: String,
    pub source_commit_date: Option<String>,
    pub source_commit_description: Option<String>,
    /// HEAD of the repository the snapshot was cut in (era 2b: `fbsource_revision`).
    pub repo_revision: Option<String>,
    pub repo_revision_date: Option<String>,
    pub subtree: Option<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub created: Option<String>,
    pub created_by: Option<String>,
    /// Digest of the tree as cut (before any patch).
    pub cut_tree_digest: Option<String>,
    /// Digest the tree must have now (the cut, or the last patch).
    pub tree_digest: Option<String>,
    pub rotated_from: Option<String>,
    pub patches: Vec<Patch>,
    /// Keys this reader does not know, kept in order (era 2b allows extras).
    pub extras: Vec<(String, String)>,
}

/// `sha256:<64 lowercase hex>`.
pub fn is_tree_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| crate::metadata::is_hex(h, 64) && h == h.to_ascii_lowercase())
}

fn one_line(what: &str, v: &str) -> Result<()> {
    if v.contains(['\n', '\r']) || v.trim() != v || v.is_empty() {
        return Err(Error::Usage(format!(
            "{what} {v:?}: expected one non-empty line without surrounding spaces"
        )));
    }
    Ok(())
}

impl SourceMeta {
    /// Parses era-2a, era-2b and snapctl files. Blank and `#` lines are
    /// skipped; each line splits on its first `:`; an empty value is absent.
    pub fn parse(path: &Path, text: &str) -> Result<SourceMeta> {
        let mut m = SourceMeta {
            era: Era::Era2a,
            source_commit: String::new(),
            source_commit_date: None,
            source_commit_description: None,
            repo_revision: None,
            repo_revision_date: None,
            subtree: None,
            include: Vec::new(),
            exclude: Vec::new(),
            created: None,
            created_by: None,
            cut_tree_digest: None,
            tree_digest: None,
            rotated_from: None,
            patches: Vec::new(),
            extras: Vec::new(),
        };
        let mut seen = std::collections::BTreeSet::new();
        let (mut has_commit, mut legacy_commit, mut era2b) = (false, false, false);
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |msg: String| Error::input(path, Some(i + 1), msg);
            let Some((k, v)) = line.split_once(':') else {
                return Err(bad(format!("expected `key: value`, found {line:?}")));
            };
            let (k, v) = (k.trim(), v.trim());
            if v.is_empty() {
                continue;
            }
            let repeatable = matches!(k, "include" | "exclude" | "patch");
            if !repeatable && !seen.insert(k.to_string()) {
                return Err(bad(format!("`{k}` appears twice")));
            }
            let val = Some(v.to_string());
            match k {
                "source_commit" | "commit" => {
                    if has_commit {
                        return Err(bad("both `source_commit` and `commit`".into()));
                    }
                    has_commit = true;
                    legacy_commit = k == "commit";
                    m.source_commit = v.to_string();
                }
                "source_commit_date" | "commit_date" => m.source_commit_date = val,
                "source_commit_description" | "commit_description" => {
                    m.source_commit_description = val
                }
                "repo_revision" | "fbsource_revision" => {
                    era2b |= k == "fbsource_revision";
                    m.repo_revision = val
                }
                "repo_revision_date" | "fbsource_revision_date" => m.repo_revision_date = val,
                "subtree" => m.subtree = val,
                "include" => m.include.push(v.to_string()),
                "exclude" => m.exclude.push(v.to_string()),
                "snapshot_created" => m.created = val,
                "created_by" => m.created_by = val,
                "cut_tree_digest" | "tree_digest" => {
                    if !is_tree_digest(v) {
                        return Err(bad(format!("{k}: expected sha256:<64 hex>, found {v:?}")));
                    }
                    if k == "tree_digest" {
                        m.tree_digest = val
                    } else {
                        m.cut_tree_digest = val
                    }
                }
                "rotated_from" => m.rotated_from = val,
                "patch" => m.patches.push(Patch::parse(v).ok_or_else(|| {
                    bad(format!(
                        "patch: expected `<date> sha256:<hex> by <who>: <why>`, found {v:?}"
                    ))
                })?),
                _ => m.extras.push((k.to_string(), v.to_string())),
            }
        }
        if !has_commit {
            return Err(Error::input(
                path,
                None,
                "no source_commit (or era-2a commit) line",
            ));
        }
        m.era = if m.tree_digest.is_some() {
            Era::Snapctl
        } else if era2b || !legacy_commit {
            Era::Era2b
        } else {
            Era::Era2a
        };
        Ok(m)
    }

    pub fn read(path: &Path) -> Result<SourceMeta> {
        let text = fsutil::read_text_bounded(path, crate::metadata::MAX_METADATA_BYTES)?;
        SourceMeta::parse(path, &text)
    }

    /// This module's format (always; era-2 files are rewritten in it when
    /// a patch is recorded or they are rotated).
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("# Source snapshot metadata, written by snapctl (docs/formats/snapshot-metadata.md §5).\n");
        s.push_str(
            "# source_commit: the commit whose subtree this directory holds (git archive).\n",
        );
        s.push_str("# repo_revision: HEAD of that repository when the snapshot was cut.\n");
        s.push_str(
            "# tree_digest: digest of this directory = sha256 of manifest.txt; `snapctl check`\n",
        );
        s.push_str(
            "# verifies it, `snapctl record-patch` records deliberate edits (patch: lines).\n\n",
        );
        let mut kv = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                let _ = writeln!(s, "{k}: {v}");
            }
        };
        kv("source_commit", &Some(self.source_commit.clone()));
        kv("source_commit_date", &self.source_commit_date);
        kv("source_commit_description", &self.source_commit_description);
        kv("repo_revision", &self.repo_revision);
        kv("repo_revision_date", &self.repo_revision_date);
        kv("subtree", &self.subtree);
        for g in &self.include {
            kv("include", &Some(g.clone()));
        }
        for g in &self.exclude {
            kv("exclude", &Some(g.clone()));
        }
        kv("snapshot_created", &self.created);
        kv("created_by", &self.created_by);
        kv("cut_tree_digest", &self.cut_tree_digest);
        kv("tree_digest", &self.tree_digest);
        kv("rotated_from", &self.rotated_from);
        for p in &self.patches {
            kv("patch", &Some(p.render()));
        }
        for (k, v) in &self.extras {
            kv(k, &Some(v.clone()));
        }
        s
    }

    /// Why the recorded digests cannot be trusted on their own, if they cannot.
    fn record_problem(&self) -> Option<String> {
        let Some(td) = &self.tree_digest else {
            return Some(format!(
                "no tree_digest recorded ({:?} metadata): its contents were never verified",
                self.era
            ));
        };
        let expect = match self.patches.last() {
            Some(p) => Some(&p.digest),
            None => self.cut_tree_digest.as_ref(),
        };
        match expect {
            Some(e) if e != td => Some(format!(
                "tree_digest {td} is not the digest of the cut or of the last recorded patch ({e}): metadata.txt was edited by hand"
            )),
            _ => None,
        }
    }
}

/// `true` when `root` holds source snapshots (a channel directory with its
/// own `metadata.txt`) rather than prebuilt ones (`<channel>/<ver>/`).
pub fn is_source_root(root: &Path) -> bool {
    Channel::ALL.iter().any(|c| {
        std::fs::symlink_metadata(root.join(c.dir()).join(tree::METADATA))
            .is_ok_and(|m| m.is_file())
    })
}

// ---------------------------------------------------------------- git

fn git(repo: &Path, args: &[&str]) -> Result<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Usage(format!("cannot run git: {e}")))?;
    if !o.status.success() {
        return Err(Error::input(
            repo,
            None,
            format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim_end().to_string())
}

/// A commit with its committer date (strict ISO 8601) and subject.
#[derive(Clone, Debug)]
pub struct CommitInfo {
    pub id: String,
    pub date: String,
    pub subject: String,
}

/// Resolves `rev` to a commit (never a draft working copy: only what git has).
pub fn commit_info(repo: &Path, rev: &str) -> Result<CommitInfo> {
    if rev.starts_with('-') || rev.is_empty() {
        return Err(Error::Usage(format!("--rev {rev:?}: not a revision")));
    }
    let id = git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .map_err(|_| Error::Usage(format!("--rev {rev}: no such commit in {}", repo.display())))?;
    let log = git(repo, &["log", "-1", "--format=%cI%n%s", &id])?;
    let (date, subject) = log.split_once('\n').unwrap_or((&log, ""));
    Ok(CommitInfo {
        id,
        date: date.to_string(),
        subject: subject.trim().to_string(),
    })
}

/// A subtree path: relative, `/`-separated, no `.`/`..`, no leading `-` or `:`.
pub fn validate_subtree(p: &str) -> Result<String> {
    let t = p.trim_end_matches('/');
    let ok = !t.is_empty()
        && !t.starts_with(['/', '-', ':'])
        && t.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && !t.contains(['\n', '\\', '*', '?', '[']);
    if ok {
        Ok(t.to_string())
    } else {
        Err(Error::Usage(format!(
            "--subtree {p:?}: expected a relative path inside the repository (e.g. comms/rcclx)"
        )))
    }
}

fn validate_glob(g: &str) -> Result<()> {
    one_line("glob", g)?;
    if g.starts_with('/') || g.split('/').any(|c| c == "..") {
        return Err(Error::Usage(format!(
            "glob {g:?}: must be relative to the subtree, without `..`"
        )));
    }
    Ok(())
}

/// The pathspecs `git archive` gets: the subtree (or each include glob
/// inside it) and each exclude glob inside it (git's `glob` magic: `**`
/// matches any number of directories).
fn pathspecs(subtree: &str, include: &[String], exclude: &[String]) -> Vec<String> {
    let mut v = Vec::new();
    if include.is_empty() {
        v.push(format!(":(literal){subtree}"));
    }
    for g in include {
        v.push(format!(":(glob){subtree}/{g}"));
    }
    for g in exclude {
        v.push(format!(":(exclude,glob){subtree}/{g}"));
    }
    v
}

/// Runs `git archive` of the pathspecs at `commit` and extracts it into the
/// new directory `dst` (streamed: memory does not grow with the tree).
pub fn archive_into(
    repo: &Path,
    commit: &str,
    subtree: &str,
    include: &[String],
    exclude: &[String],
    dst: &Path,
) -> Result<usize> {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(repo)
        .args(["archive", "--format=tar", commit, "--"])
        .args(pathspecs(subtree, include, exclude))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| Error::Usage(format!("cannot run git: {e}")))?;
    let mut err_pipe = child.stderr.take();
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err_pipe.as_mut() {
            let _ = e.take(64 << 10).read_to_string(&mut s);
        }
        s
    });
    let out = child.stdout.take();
    let res = match out {
        Some(o) => tree::extract_tar(o, dst),
        None => Err(Error::Usage("git archive: no stdout".into())),
    };
    if res.is_err() {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| Error::Usage(format!("git: {e}")))?;
    let err = err_thread.join().unwrap_or_default();
    // Killed because the extraction refused the tree: that refusal is the answer.
    if res.is_err() && std::os::unix::process::ExitStatusExt::signal(&status) == Some(libc::SIGKILL)
    {
        return res;
    }
    if !status.success() {
        return Err(Error::input(
            repo,
            None,
            format!(
                "git archive {commit} -- {subtree}: {}",
                if err.trim().is_empty() {
                    status.to_string()
                } else {
                    err.trim().to_string()
                }
            ),
        ));
    }
    let n = res?;
    if n == 0 {
        return Err(Error::Usage(format!(
            "git archive {commit}: nothing matches --subtree {subtree} with these include/exclude globs"
        )));
    }
    Ok(n)
}

// ---------------------------------------------------------------- create / rotate

/// Inputs of [`create`].
#[derive(Clone, Debug)]
pub struct SourceCreate {
    pub repo: PathBuf,
    pub rev: String,
    pub subtree: String,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// Channel cut into; a cut into stable rotates stable → last-stable first
    /// unless `no_rotate`.
    pub channel: Channel,
    pub no_rotate: bool,
    /// Delete replaced channel directories instead of moving them to `archives/`.
    pub no_archive: bool,
    pub lock_timeout: Option<Duration>,
}

/// What [`create`] / [`rotate`] did.
#[derive(Clone, Debug)]
pub struct SourceOutcome {
    pub recovered: Recovery,
    /// (channel dir, its new metadata)
    pub installed: Vec<(String, SourceMeta)>,
    pub archived: Vec<String>,
    /// `true`: the channel already held this cut; nothing changed.
    pub unchanged: bool,
}

fn meta_path(repo: &Repo, ch: Channel) -> PathBuf {
    repo.root.join(ch.dir()).join(tree::METADATA)
}

/// Metadata of a channel, `None` when the channel has none.
pub fn read_channel(repo: &Repo, ch: Channel) -> Result<Option<SourceMeta>> {
    let p = meta_path(repo, ch);
    if std::fs::symlink_metadata(repo.root.join(ch.dir())).is_err() {
        return Ok(None);
    }
    if std::fs::symlink_metadata(&p).is_err() {
        return Err(Error::input(
            &p,
            None,
            format!("{} exists but has no metadata.txt", ch.dir()),
        ));
    }
    SourceMeta::read(&p).map(Some)
}

/// A channel's tree against its metadata (see [`verify_channel`]).
#[derive(Clone, Debug)]
pub struct Verdict {
    /// Digest of the tree now.
    pub actual: String,
    /// Why the tree or its record cannot be trusted, if it cannot.
    pub problem: Option<String>,
    /// With a problem: each added, removed or changed entry against the
    /// recorded `manifest.txt`, or one line saying why they cannot be named.
    pub details: Vec<String>,
}

impl Verdict {
    /// The problem and its details on one line (for errors).
    fn summary(&self) -> Option<String> {
        let p = self.problem.as_ref()?;
        Some(if self.details.is_empty() {
            p.clone()
        } else {
            format!("{p} ({})", self.details.join("; "))
        })
    }
}

/// Names each entry that differs between a channel's recorded manifest
/// (which must be the manifest of `recorded`) and `now`.
fn name_changes(dir: &Path, recorded: &str, now: &str) -> Vec<String> {
    match tree::recorded_manifest(dir, recorded) {
        Ok(old) => tree::diff(&old, now)
            .iter()
            .map(|c| c.to_string())
            .collect(),
        Err(why) => vec![why],
    }
}

/// The tree of a channel against what its metadata records: the digest
/// now and, when it does not match, why and which entries differ.
pub fn verify_channel(repo: &Repo, ch: Channel, m: &SourceMeta) -> Result<Verdict> {
    let dir = repo.root.join(ch.dir());
    let now = tree::manifest(&dir)?;
    let actual = tree::digest_of(&now);
    if let Some(p) = m.record_problem() {
        return Ok(Verdict {
            actual,
            problem: Some(p),
            details: Vec::new(),
        });
    }
    let recorded = m.tree_digest.as_deref().unwrap_or_default();
    if actual != recorded {
        let details = name_changes(&dir, recorded, &now);
        return Ok(Verdict {
            problem: Some(format!(
                "tree digest {actual} differs from the recorded {recorded}: the tree was edited without being recorded"
            )),
            actual,
            details,
        });
    }
    Ok(Verdict {
        actual,
        problem: None,
        details: Vec::new(),
    })
}

/// Archive name for a replaced channel directory: now, moved past the newest
/// existing one (names never collide and sort in rotation order). Under the lock.
fn archive_dest(
    repo: &Repo,
    now: &chrono::DateTime<chrono::Utc>,
    ch: Channel,
    taken: &mut Vec<String>,
) -> Result<String> {
    use chrono::Timelike;
    let mut t = now.with_nanosecond(0).unwrap_or(*now);
    let mut names = crate::repo::sorted_entries(&repo.root.join("archives"))?;
    names.extend(taken.iter().cloned());
    names.sort();
    if let Some(last) = names.iter().rev().find_map(|n| n.get(..15)) {
        if let Ok(lt) = chrono::NaiveDateTime::parse_from_str(last, "%Y%m%d_%H%M%S") {
            let lt = lt.and_utc();
            if lt >= t {
                t = lt + chrono::Duration::seconds(1);
            }
        }
    }
    let name = format!("{}_{}", t.format("%Y%m%d_%H%M%S"), ch.dir());
    taken.push(name.clone());
    Ok(format!("archives/{name}"))
}

fn created_by() -> Option<String> {
    Some(format!("snapctl {}", env!("CARGO_PKG_VERSION")))
}

/// Adds "last-stable ← copy of stable" to `plan` (stable must verify).
fn plan_rotation(
    repo: &Repo,
    plan: &mut Plan,
    stable: &SourceMeta,
    last_exists: bool,
    archive: bool,
    now: &chrono::DateTime<chrono::Utc>,
    taken: &mut Vec<String>,
) -> Result<SourceMeta> {
    if let Some(p) = verify_channel(repo, Channel::Stable, stable)?.summary() {
        return Err(Error::input(
            meta_path(repo, Channel::Stable),
            None,
            format!(
                "refusing to rotate stable: {p}. Record a deliberate edit with `snapctl record-patch --snapshots-root {} --channel stable --who NAME --why TEXT`, or restore the tree",
                repo.root.display()
            ),
        ));
    }
    let mut m = stable.clone();
    m.rotated_from = Some("stable".into());
    let want = stable.tree_digest.clone().unwrap_or_default();
    let text = m.render();
    let src = repo.root.join(Channel::Stable.dir());
    let old_to = if last_exists && archive {
        Some(archive_dest(repo, now, Channel::LastStable, taken)?)
    } else {
        None
    };
    plan.trees.push(TreePlan {
        fill: Box::new(move |p: &Path| {
            let manifest = tree::copy_tree(&src, p)?;
            let got = tree::digest_of(&manifest);
            if got != want {
                return Err(Error::Digest {
                    what: format!(
                        "{} changed while it was copied to last-stable",
                        src.display()
                    ),
                    expected: want,
                    actual: got,
                });
            }
            tree::write_manifest(p, &manifest)?;
            fsutil::write_durable(&p.join(tree::METADATA), text.as_bytes())
        }),
        dest: Channel::LastStable.dir().into(),
        old_to,
    });
    Ok(m)
}

/// `snapctl create --kind source`: cut `subtree` at `rev` into a channel
/// (rotating stable → last-stable first for a cut into stable).
pub fn create(repo: &Repo, req: &SourceCreate) -> Result<SourceOutcome> {
    let subtree = validate_subtree(&req.subtree)?;
    for g in req.include.iter().chain(&req.exclude) {
        validate_glob(g)?;
    }
    if !req.repo.is_dir() {
        return Err(Error::input(&req.repo, None, "--repo: not a directory"));
    }
    let info = commit_info(&req.repo, &req.rev)?;
    let head = git(&req.repo, &["rev-parse", "--verify", "--quiet", "HEAD"]).ok();
    let head_date = match &head {
        Some(h) => git(&req.repo, &["log", "-1", "--format=%cI", h]).ok(),
        None => None,
    };

    let _lock = repo.lock(true, req.lock_timeout)?;
    let recovered = txn::recover_locked(repo)?;
    let stable = read_channel(repo, Channel::Stable)?;
    let last = read_channel(repo, Channel::LastStable)?;
    let now = now_utc()?;
    let target = match req.channel {
        Channel::Stable => &stable,
        Channel::LastStable => &last,
    };
    if let Some(cur) = target {
        let same_cut = cur.source_commit == info.id
            && cur.subtree.as_deref() == Some(subtree.as_str())
            && cur.include == req.include
            && cur.exclude == req.exclude
            && cur.patches.is_empty();
        if same_cut && verify_channel(repo, req.channel, cur)?.problem.is_none() {
            return Ok(SourceOutcome {
                recovered,
                installed: vec![(req.channel.dir().into(), cur.clone())],
                archived: Vec::new(),
                unchanged: true,
            });
        }
    }
    let mut plan = Plan::new("create-source", req.channel.dir(), &now);
    let mut taken = Vec::new();
    let mut installed = Vec::new();
    let rotate = req.channel == Channel::Stable && !req.no_rotate;
    if rotate {
        if let Some(s) = &stable {
            let m = plan_rotation(
                repo,
                &mut plan,
                s,
                last.is_some(),
                !req.no_archive,
                &now,
                &mut taken,
            )?;
            installed.push((Channel::LastStable.dir().to_string(), m));
        }
    }
    let replaced_elsewhere = rotate && stable.is_some();
    let old_to = if target.is_some() && !replaced_elsewhere && !req.no_archive {
        Some(archive_dest(repo, &now, req.channel, &mut taken)?)
    } else {
        None
    };
    let meta = SourceMeta {
        era: Era::Snapctl,
        source_commit: info.id.clone(),
        source_commit_date: Some(info.date.clone()),
        source_commit_description: (!info.subject.is_empty()).then(|| info.subject.clone()),
        repo_revision: head,
        repo_revision_date: head_date,
        subtree: Some(subtree.clone()),
        include: req.include.clone(),
        exclude: req.exclude.clone(),
        created: Some(now.format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        created_by: created_by(),
        cut_tree_digest: None,
        tree_digest: None,
        rotated_from: None,
        patches: Vec::new(),
        extras: Vec::new(),
    };
    let cell = std::rc::Rc::new(std::cell::RefCell::new(meta));
    let cell2 = cell.clone();
    let (gitrepo, commit, inc, exc) = (
        req.repo.clone(),
        info.id.clone(),
        req.include.clone(),
        req.exclude.clone(),
    );
    plan.trees.push(TreePlan {
        fill: Box::new(move |p: &Path| {
            archive_into(&gitrepo, &commit, &subtree, &inc, &exc, p)?;
            let manifest = tree::manifest(p)?;
            let d = tree::digest_of(&manifest);
            tree::write_manifest(p, &manifest)?;
            let mut m = cell2.borrow_mut();
            m.cut_tree_digest = Some(d.clone());
            m.tree_digest = Some(d);
            fsutil::write_durable(&p.join(tree::METADATA), m.render().as_bytes())
        }),
        dest: req.channel.dir().into(),
        old_to,
    });
    plan.run(repo)?;
    let meta = cell.borrow().clone();
    installed.push((req.channel.dir().to_string(), meta));
    Ok(SourceOutcome {
        recovered,
        installed,
        archived: taken.into_iter().map(|n| format!("archives/{n}")).collect(),
        unchanged: false,
    })
}

/// `snapctl rotate`: last-stable ← copy of stable (stable untouched).
pub fn rotate(
    repo: &Repo,
    no_archive: bool,
    lock_timeout: Option<Duration>,
) -> Result<SourceOutcome> {
    let _lock = repo.lock(true, lock_timeout)?;
    let recovered = txn::recover_locked(repo)?;
    let Some(stable) = read_channel(repo, Channel::Stable)? else {
        return Err(Error::Usage(format!(
            "{}: no stable source snapshot to rotate",
            repo.root.display()
        )));
    };
    let last = read_channel(repo, Channel::LastStable)?;
    let now = now_utc()?;
    let mut plan = Plan::new("rotate-source", "stable", &now);
    let mut taken = Vec::new();
    let m = plan_rotation(
        repo,
        &mut plan,
        &stable,
        last.is_some(),
        !no_archive,
        &now,
        &mut taken,
    )?;
    plan.run(repo)?;
    Ok(SourceOutcome {
        recovered,
        installed: vec![(Channel::LastStable.dir().into(), m)],
        archived: taken.into_iter().map(|n| format!("archives/{n}")).collect(),
        unchanged: false,
    })
}

/// `snapctl record-patch`: records the channel's current tree as a deliberate
/// patch (who, why, digest). Refuses when the tree is unchanged.
pub fn record_patch(
    repo: &Repo,
    ch: Channel,
    who: &str,
    why: &str,
    lock_timeout: Option<Duration>,
) -> Result<(SourceMeta, Recovery)> {
    one_line("--who", who)?;
    one_line("--why", why)?;
    if who.contains(": ") {
        return Err(Error::Usage(format!(
            "--who {who:?}: must not contain \": \""
        )));
    }
    let _lock = repo.lock(true, lock_timeout)?;
    let recovered = txn::recover_locked(repo)?;
    let Some(mut m) = read_channel(repo, ch)? else {
        return Err(Error::Usage(format!(
            "{}: no {} source snapshot",
            repo.root.display(),
            ch.dir()
        )));
    };
    let manifest = tree::manifest(&repo.root.join(ch.dir()))?;
    let actual = tree::digest_of(&manifest);
    if m.tree_digest.as_deref() == Some(actual.as_str()) && m.record_problem().is_none() {
        return Err(Error::Usage(format!(
            "{}: the tree is unchanged ({actual}); nothing to record",
            ch.dir()
        )));
    }
    let now = now_utc()?;
    m.patches.push(Patch {
        date: now.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        digest: actual.clone(),
        who: who.into(),
        why: why.into(),
    });
    m.tree_digest = Some(actual);
    m.era = Era::Snapctl;
    let mut plan = Plan::new("record-patch", ch.dir(), &now);
    plan.install(
        Source::Bytes(manifest.into_bytes()),
        format!("{}/{}", ch.dir(), tree::MANIFEST),
    );
    plan.install(
        Source::Bytes(m.render().into_bytes()),
        format!("{}/{}", ch.dir(), tree::METADATA),
    );
    plan.run(repo)?;
    Ok((m, recovered))
}

// ---------------------------------------------------------------- commands

macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err(|e| Error::io("<stdout>", e))?
    };
}

fn short(s: &str) -> &str {
    s.get(..12).unwrap_or(s)
}

fn note(r: &Recovery) {
    if *r != Recovery::Nothing {
        eprintln!("snapctl: recovery: {r}");
    }
}

/// Prints a [`SourceOutcome`].
pub fn report(o: &SourceOutcome, out: &mut dyn Write) -> Result<()> {
    note(&o.recovered);
    for (ch, m) in &o.installed {
        if o.unchanged {
            say!(
                out,
                "{ch} already is {} ({}); nothing to do",
                short(&m.source_commit),
                m.tree_digest.as_deref().unwrap_or("?")
            );
        } else {
            say!(
                out,
                "{ch} <- {} {} ({}){}",
                short(&m.source_commit),
                m.tree_digest.as_deref().unwrap_or("?"),
                m.source_commit_description.as_deref().unwrap_or(""),
                m.rotated_from
                    .as_ref()
                    .map_or(String::new(), |r| format!(" rotated from {r}"))
            );
        }
    }
    for a in &o.archived {
        say!(out, "archived {a}");
    }
    Ok(())
}

/// `snapctl check` on a source root: every channel's tree against its
/// recorded digest; with `repo`, also the recorded commit against the cut.
/// Exit 1 naming each problem.
pub fn check(
    root: &Path,
    git_repo: Option<&Path>,
    lock_timeout: Option<Duration>,
    out: &mut dyn Write,
) -> Result<u8> {
    let repo = Repo::open(root)?;
    if txn::journal_pending(&repo) {
        note(&txn::recover(&repo, lock_timeout)?);
    }
    let _l = repo.lock(false, lock_timeout)?;
    let mut bad = 0usize;
    let mut seen = 0usize;
    for ch in Channel::ALL {
        let Some(m) = read_channel(&repo, ch)? else {
            continue;
        };
        seen += 1;
        let dir = repo.root.join(ch.dir());
        let v = verify_channel(&repo, ch, &m)?;
        let mut problems: Vec<(String, Vec<String>)> = v
            .problem
            .into_iter()
            .map(|p| (p, v.details.clone()))
            .collect();
        if let (Some(g), Some(cut)) = (git_repo, &m.cut_tree_digest) {
            let tmp = tempfile::tempdir().map_err(io_at(Path::new("$TMPDIR")))?;
            let d = tmp.path().join("t");
            let sub = m.subtree.clone().unwrap_or_default();
            match archive_into(g, &m.source_commit, &sub, &m.include, &m.exclude, &d)
                .and_then(|_| tree::manifest(&d))
            {
                Ok(fresh) if &tree::digest_of(&fresh) == cut => {}
                Ok(fresh) => {
                    // The recorded manifest is the cut's only while no patch was recorded.
                    let details = if m.tree_digest.as_ref() == Some(cut) {
                        name_changes(&dir, cut, &fresh)
                    } else {
                        Vec::new()
                    };
                    problems.push((
                        format!(
                            "source_commit {} cuts to {}, but the snapshot was recorded as {cut}: the recorded commit is not what this tree came from",
                            short(&m.source_commit),
                            tree::digest_of(&fresh)
                        ),
                        details,
                    ))
                }
                Err(e) => problems.push((
                    format!(
                        "cannot re-cut source_commit {}: {e}",
                        short(&m.source_commit)
                    ),
                    Vec::new(),
                )),
            }
        }
        if problems.is_empty() {
            say!(
                out,
                "OK {} {} source_commit {} patches {}",
                ch.dir(),
                v.actual,
                short(&m.source_commit),
                m.patches.len()
            );
        } else {
            for (p, details) in problems {
                bad += 1;
                say!(out, "BAD {}: {p}", ch.dir());
                for d in details {
                    say!(out, "    {d}");
                }
            }
        }
    }
    if seen == 0 {
        return Err(Error::Usage(format!(
            "{}: no source snapshot (stable/metadata.txt, last-stable/metadata.txt)",
            root.display()
        )));
    }
    if bad > 0 {
        eprintln!(
            "snapctl: {bad} problem(s). A deliberate edit: snapctl record-patch --snapshots-root {} --channel CHANNEL --who NAME --why TEXT; an accident: restore the tree from version control",
            root.display()
        );
        return Ok(1);
    }
    Ok(0)
}

/// `snapctl status` on a source root.
pub fn status(root: &Path, as_json: bool, out: &mut dyn Write) -> Result<u8> {
    let repo = Repo::open(root)?;
    let mut rows = Vec::new();
    for ch in Channel::ALL {
        if let Some(m) = read_channel(&repo, ch)? {
            rows.push((ch, m));
        }
    }
    if as_json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(ch, m)| {
                serde_json::json!({
                    "channel": ch.key(),
                    "source_commit": m.source_commit,
                    "source_commit_date": m.source_commit_date,
                    "source_commit_description": m.source_commit_description,
                    "repo_revision": m.repo_revision,
                    "subtree": m.subtree,
                    "created": m.created,
                    "tree_digest": m.tree_digest,
                    "rotated_from": m.rotated_from,
                    "patches": m.patches.iter().map(|p| serde_json::json!({"date": p.date, "digest": p.digest, "who": p.who, "why": p.why})).collect::<Vec<_>>(),
                })
            })
            .collect();
        say!(
            out,
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::Usage(e.to_string()))?
        );
    } else {
        for (ch, m) in rows {
            say!(
                out,
                "{:<12} {} {} {} patches={} {}",
                ch.dir(),
                short(&m.source_commit),
                m.created.as_deref().unwrap_or("?"),
                m.tree_digest.as_deref().map_or("(no digest)", short),
                m.patches.len(),
                m.source_commit_description.as_deref().unwrap_or("")
            );
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ERA2A: &str = "# RCCLX Snapshot Metadata\n# c\n# c\n\ncommit: 6f840ba5d808aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\ncommit_date: 2026-01-30 10:00 -0800\ncommit_description: DDA nranks check patch\nsnapshot_created: 2026-02-01T16:26:17.476463\ncreated_by: create_snapshot.py\n";
    const ERA2B: &str = "# RCCLX Snapshot Metadata\n# The rcclx/ directory mirrors the stable snapshot as of fbsource_revision\n#\n# a\n# b\n# c\n# d\n# e\n# f\n\nsource_commit: 6f840ba5d808aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\nsource_commit_date: 2026-01-30 10:00 -0800\nsource_commit_description: DDA nranks check patch\n\nfbsource_revision: 34f53cfe1715bbbbbbbbbbbbbbbbbbbbbbbbbbbb\nfbsource_revision_date: 2026-08-20 09:00 -0700\n\nsnapshot_created: 2026-08-21T11:00:00.000001\ncreated_by: create_snapshot.py\nrotated_from: stable\n";

    #[test]
    fn reads_era2a_and_era2b() {
        let a = SourceMeta::parse(Path::new("a"), ERA2A).unwrap();
        assert_eq!(a.era, Era::Era2a);
        assert_eq!(
            a.source_commit,
            "6f840ba5d808aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        );
        assert_eq!(
            a.source_commit_description.as_deref(),
            Some("DDA nranks check patch")
        );
        assert!(a.record_problem().is_some());
        let b = SourceMeta::parse(Path::new("b"), ERA2B).unwrap();
        assert_eq!(b.era, Era::Era2b);
        assert_eq!(
            b.repo_revision.as_deref(),
            Some("34f53cfe1715bbbbbbbbbbbbbbbbbbbbbbbbbbbb")
        );
        assert_eq!(b.rotated_from.as_deref(), Some("stable"));
        // Rendered in snapctl's format and read back: same values.
        let mut c = b.clone();
        let d = format!("sha256:{}", "ab".repeat(32));
        c.tree_digest = Some(d.clone());
        c.patches.push(Patch {
            date: "2026-11-27T10:00:00Z".into(),
            digest: d,
            who: "a@b".into(),
            why: "fix: hang".into(),
        });
        let back = SourceMeta::parse(Path::new("c"), &c.render()).unwrap();
        assert_eq!(back.era, Era::Snapctl);
        assert_eq!(back.patches, c.patches);
        assert_eq!(back.repo_revision, c.repo_revision);
        assert!(back.record_problem().is_none());
    }

    #[test]
    fn rejects_bad_files() {
        assert!(SourceMeta::parse(Path::new("x"), "snapshot_created: x\n").is_err());
        let e =
            SourceMeta::parse(Path::new("x"), "source_commit: a\nsource_commit: b\n").unwrap_err();
        assert!(e.to_string().contains("x:2"), "{e}");
        assert!(
            SourceMeta::parse(Path::new("x"), "source_commit: a\ntree_digest: md5:1\n").is_err()
        );
        assert!(SourceMeta::parse(Path::new("x"), "source_commit: a\ncommit: b\n").is_err());
    }

    #[test]
    fn subtree_and_pathspecs() {
        assert_eq!(validate_subtree("comms/rcclx/").unwrap(), "comms/rcclx");
        for bad in ["", "/abs", "a/../b", "-x", ":(top)", "a/*"] {
            assert!(validate_subtree(bad).is_err(), "{bad}");
        }
        assert_eq!(
            pathspecs("c/r", &["src/**".into()], &["**/tests/**".into()]),
            vec![":(glob)c/r/src/**", ":(exclude,glob)c/r/**/tests/**"]
        );
    }
}
