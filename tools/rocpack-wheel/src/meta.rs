//! The dist-info files: METADATA and WHEEL (RFC 822 style headers, an
//! optional body after the first blank line) and RECORD (CSV of path,
//! `sha256=<urlsafe base64, no padding>`, size): written for outputs,
//! checked against the files of an input ([`InputRecord`]).

use std::collections::BTreeMap;

use sha2::Digest;

/// A METADATA or WHEEL file: header lines (continuations kept with their
/// field) and the body after the first blank line, kept byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Headers {
    fields: Vec<(String, String)>,
    body: Option<String>,
}

impl Headers {
    /// No fields, no body.
    pub fn new() -> Headers {
        Headers {
            fields: Vec::new(),
            body: None,
        }
    }

    /// Parses header text. Fails on a line that is neither `Key: value`
    /// nor a continuation.
    pub fn parse(text: &str) -> Result<Headers, String> {
        let mut fields: Vec<(String, String)> = Vec::new();
        let mut rest = text;
        let mut body = None;
        while !rest.is_empty() {
            let (line, next) = match rest.find('\n') {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, ""),
            };
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.is_empty() {
                body = Some(next.to_string());
                break;
            }
            if line.starts_with([' ', '\t']) {
                match fields.last_mut() {
                    Some((_, v)) => {
                        v.push('\n');
                        v.push_str(line);
                    }
                    None => return Err(format!("continuation line before any field: `{line}`")),
                }
            } else {
                let (k, v) = line
                    .split_once(':')
                    .ok_or_else(|| format!("not a `Key: value` line: `{line}`"))?;
                if k.is_empty() || k.contains(char::is_whitespace) {
                    return Err(format!("bad field name in `{line}`"));
                }
                fields.push((k.to_string(), v.trim_start().to_string()));
            }
            rest = next;
        }
        Ok(Headers { fields, body })
    }

    /// Every value of field `key` (case-insensitive), in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first value of field `key`, trimmed.
    pub fn first(&self, key: &str) -> Option<&str> {
        self.all(key).first().map(|v| v.trim())
    }

    /// Appends a field after the last header.
    pub fn push(&mut self, key: &str, value: impl Into<String>) {
        self.fields.push((key.to_string(), value.into()));
    }

    /// Sets the value of the first `key` field (appends when absent).
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        match self
            .fields
            .iter_mut()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
        {
            Some((_, v)) => *v = value,
            None => self.push(key, value),
        }
    }

    /// Renders with `\n` line ends.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (k, v) in &self.fields {
            s.push_str(k);
            s.push_str(": ");
            s.push_str(v);
            s.push('\n');
        }
        if let Some(b) = &self.body {
            s.push('\n');
            s.push_str(b);
        }
        s
    }
}

/// URL-safe base64 without padding (the RECORD hash encoding).
pub fn b64url(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// One RECORD row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    /// Path inside the wheel.
    pub path: String,
    /// SHA-256 of the content.
    pub sha256: [u8; 32],
    /// Size in bytes.
    pub size: u64,
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Appends one RECORD row for a file to `out`.
pub fn push_record_row(out: &mut String, r: &RecordRow) {
    out.push_str(&format!(
        "{},sha256={},{}\n",
        csv_field(&r.path),
        b64url(&r.sha256),
        r.size
    ));
}

/// Appends the row of the RECORD file itself (empty hash and size).
pub fn push_record_self(out: &mut String, record_path: &str) {
    out.push_str(&format!("{},,\n", csv_field(record_path)));
}

/// RECORD text: one row per file (in the given order), then the RECORD
/// file itself with empty hash and size.
pub fn record(rows: &[RecordRow], record_path: &str) -> String {
    let mut s = String::new();
    for r in rows {
        push_record_row(&mut s, r);
    }
    push_record_self(&mut s, record_path);
    s
}

/// Calls `row` with each CSV row of RECORD text (1-based line, fields):
/// fields may be quoted (`"a,b"`, `""` for a quote), rows end with `\n` or
/// `\r\n`, blank lines are skipped. One row at a time: nothing is kept
/// per row here.
fn csv_rows(
    text: &str,
    mut row: impl FnMut(usize, &[String]) -> Result<(), String>,
) -> Result<(), String> {
    let mut line = 1;
    let mut chars = text.chars().peekable();
    let mut fields: Vec<String> = Vec::new();
    while chars.peek().is_some() {
        let start = line;
        fields.clear();
        fields.push(String::new());
        let mut quoted = false;
        while let Some(c) = chars.next() {
            let f = fields.last_mut().ok_or("internal: no field")?;
            match c {
                '"' if quoted && chars.peek() == Some(&'"') => {
                    chars.next();
                    f.push('"');
                }
                '"' if quoted => quoted = false,
                '"' if f.is_empty() => quoted = true,
                ',' if !quoted => fields.push(String::new()),
                '\n' if !quoted => {
                    line += 1;
                    break;
                }
                '\r' if !quoted && chars.peek() == Some(&'\n') => {}
                c => {
                    if c == '\n' {
                        line += 1;
                    }
                    f.push(c);
                }
            }
        }
        if quoted {
            return Err(format!("line {start}: unterminated quoted field"));
        }
        if !(fields.len() == 1 && fields[0].is_empty()) {
            row(start, &fields)?;
        }
    }
    Ok(())
}

/// A hash algorithm a RECORD may use (PEP 427 forbids md5 and sha1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgo {
    /// `sha256=`
    Sha256,
    /// `sha384=`
    Sha384,
    /// `sha512=`
    Sha512,
}

impl HashAlgo {
    fn parse(s: &str) -> Option<HashAlgo> {
        match s {
            "sha256" => Some(HashAlgo::Sha256),
            "sha384" => Some(HashAlgo::Sha384),
            "sha512" => Some(HashAlgo::Sha512),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            HashAlgo::Sha256 => "sha256",
            HashAlgo::Sha384 => "sha384",
            HashAlgo::Sha512 => "sha512",
        }
    }
}

/// A running hash of one of the [`HashAlgo`]s.
#[derive(Clone)]
pub enum FileHasher {
    /// SHA-256.
    Sha256(sha2::Sha256),
    /// SHA-384.
    Sha384(sha2::Sha384),
    /// SHA-512.
    Sha512(sha2::Sha512),
}

impl FileHasher {
    /// A new hash of `algo`.
    pub fn new(algo: HashAlgo) -> FileHasher {
        match algo {
            HashAlgo::Sha256 => FileHasher::Sha256(sha2::Sha256::new()),
            HashAlgo::Sha384 => FileHasher::Sha384(sha2::Sha384::new()),
            HashAlgo::Sha512 => FileHasher::Sha512(sha2::Sha512::new()),
        }
    }

    /// Adds bytes.
    pub fn update(&mut self, b: &[u8]) {
        match self {
            FileHasher::Sha256(h) => h.update(b),
            FileHasher::Sha384(h) => h.update(b),
            FileHasher::Sha512(h) => h.update(b),
        }
    }

    /// The digest in RECORD's encoding (URL-safe base64, no padding).
    pub fn finish_b64(self) -> String {
        match self {
            FileHasher::Sha256(h) => b64url(&h.finalize()),
            FileHasher::Sha384(h) => b64url(&h.finalize()),
            FileHasher::Sha512(h) => b64url(&h.finalize()),
        }
    }
}

/// One row of an input RECORD (kept for every file until it is checked,
/// so it is small).
#[derive(Debug, Clone)]
struct InputRow {
    line: u32,
    hash: Option<(HashAlgo, Box<str>)>,
    size: Option<u64>,
}

/// The RECORD of an input wheel, checked file by file while the wheel is
/// read: every file listed once with its hash and size, every row a file
/// of the wheel. The output RECORDs are written from the bytes checked
/// here, so a wheel whose RECORD does not match is refused, never
/// re-blessed with fresh hashes.
#[derive(Debug)]
pub struct InputRecord {
    path: String,
    rows: BTreeMap<String, InputRow>,
}

/// Whether `name` (a wheel path) is RECORD itself or one of its signatures,
/// which RECORD lists without a hash (or not at all).
pub fn is_record_file(name: &str, record_path: &str) -> bool {
    name == record_path
        || name
            .strip_prefix(record_path)
            .is_some_and(|s| s == ".jws" || s == ".p7s")
}

impl InputRecord {
    /// Parses the RECORD at wheel path `record_path`.
    pub fn parse(text: &str, record_path: &str) -> Result<InputRecord, String> {
        let mut rows = BTreeMap::new();
        csv_rows(text, |line, f| {
            let at = format!("{record_path} line {line}");
            let [path, hash, size] = f else {
                return Err(format!(
                    "{at}: {} fields; a RECORD row is `path,hash,size`",
                    f.len()
                ));
            };
            let hash = if hash.is_empty() {
                None
            } else {
                let (algo, digest) = hash
                    .split_once('=')
                    .ok_or_else(|| format!("{at}: `{hash}` is not `algorithm=digest`"))?;
                let algo = HashAlgo::parse(algo).ok_or_else(|| {
                    format!(
                        "{at}: hash algorithm `{algo}` is not accepted (sha256, sha384 or sha512)"
                    )
                })?;
                Some((algo, digest.trim_end_matches('=').into()))
            };
            let size = if size.is_empty() {
                None
            } else {
                Some(
                    size.parse::<u64>()
                        .map_err(|_| format!("{at}: size `{size}` is not a byte count"))?,
                )
            };
            if hash.is_none() && !is_record_file(path, record_path) {
                return Err(format!("{at}: `{path}` has no hash"));
            }
            let line = u32::try_from(line).unwrap_or(u32::MAX);
            if rows
                .insert(path.clone(), InputRow { line, hash, size })
                .is_some()
            {
                return Err(format!("{at}: `{path}` is listed twice"));
            }
            Ok(())
        })
        .map_err(|e| match e.strip_prefix("line ") {
            Some(rest) => format!("{record_path}: line {rest}"),
            None => e,
        })?;
        Ok(InputRecord {
            path: record_path.to_string(),
            rows,
        })
    }

    /// The hash to compute for file `name`; `Ok(None)` for RECORD and its
    /// signatures. A file RECORD does not list is an error.
    pub fn algo(&self, name: &str) -> Result<Option<HashAlgo>, String> {
        if is_record_file(name, &self.path) {
            return Ok(None);
        }
        match self.rows.get(name).and_then(|r| r.hash.as_ref()) {
            Some((a, _)) => Ok(Some(*a)),
            None => Err(format!(
                "`{name}` is not listed in {}: the RECORD does not match the files",
                self.path
            )),
        }
    }

    /// Checks file `name` (hashed with [`InputRecord::algo`]) and marks it seen.
    pub fn check(&mut self, name: &str, digest_b64: &str, size: u64) -> Result<(), String> {
        let Some(row) = self.rows.remove(name) else {
            return Err(format!(
                "`{name}` is not listed in {}: the RECORD does not match the files",
                self.path
            ));
        };
        if let Some((algo, want)) = &row.hash {
            if &**want != digest_b64 {
                return Err(format!(
                    "`{name}`: {} line {} says {}={want}, the file has {}={digest_b64}: the RECORD does not match the files",
                    self.path,
                    row.line,
                    algo.name(),
                    algo.name()
                ));
            }
        }
        if let Some(want) = row.size {
            if want != size {
                return Err(format!(
                    "`{name}`: {} line {} says {want} bytes, the file has {size}: the RECORD does not match the files",
                    self.path, row.line
                ));
            }
        }
        Ok(())
    }

    /// After every file was checked: rows left name files the wheel lacks.
    pub fn finish(self) -> Result<(), String> {
        match self
            .rows
            .iter()
            .find(|(p, _)| !is_record_file(p, &self.path))
        {
            Some((p, r)) => Err(format!(
                "{} line {} lists `{p}`, which is not in the wheel: the RECORD does not match the files",
                self.path, r.line
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_roundtrip_and_edit() {
        let t = "Metadata-Version: 2.1\nName: fxpkg\nDescription: a\n  b\nVersion: 1.0\n\nBody: not a header\n";
        let mut h = Headers::parse(t).unwrap();
        assert_eq!(h.first("name"), Some("fxpkg"));
        assert_eq!(h.all("Description"), vec!["a\n  b"]);
        assert_eq!(h.render(), t);
        h.push("Provides-Extra", "device-gfx1100");
        assert!(h
            .render()
            .starts_with("Metadata-Version: 2.1\nName: fxpkg\nDescription: a\n  b\nVersion: 1.0\nProvides-Extra: device-gfx1100\n\nBody"));
        assert!(Headers::parse("no colon\n").is_err());
        assert!(Headers::parse(" cont\n").is_err());
    }

    #[test]
    fn base64_matches_python() {
        // base64.urlsafe_b64encode(hashlib.sha256(b"").digest()).rstrip(b"=")
        use sha2::Digest;
        let h: [u8; 32] = sha2::Sha256::digest(b"").into();
        assert_eq!(b64url(&h), "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
        assert_eq!(b64url(b"f"), "Zg");
        assert_eq!(b64url(b"fo"), "Zm8");
        assert_eq!(b64url(b"foo"), "Zm9v");
        assert_eq!(b64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn record_quotes() {
        let r = record(
            &[RecordRow {
                path: "a,b".into(),
                sha256: [0; 32],
                size: 3,
            }],
            "x-1.dist-info/RECORD",
        );
        assert!(r.starts_with("\"a,b\",sha256=AAAA"));
        assert!(r.ends_with("x-1.dist-info/RECORD,,\n"));
    }

    #[test]
    fn input_record_rows_quotes_and_checks() {
        let h = b64url(&<sha2::Sha256 as sha2::Digest>::digest(b"abc"));
        let text = format!(
            "\"a,b.py\",sha256={h}=,3\r\nplain.py,sha256={h},3\n\nx-1.dist-info/RECORD,,\n"
        );
        let mut r = InputRecord::parse(&text, "x-1.dist-info/RECORD").unwrap();
        assert_eq!(r.algo("a,b.py").unwrap(), Some(HashAlgo::Sha256));
        assert_eq!(r.algo("x-1.dist-info/RECORD").unwrap(), None);
        assert!(r.algo("other.py").unwrap_err().contains("not listed"));
        r.check("a,b.py", &h, 3).unwrap();
        assert!(r
            .check("plain.py", &h, 4)
            .unwrap_err()
            .contains("says 3 bytes"));
        let r = InputRecord::parse(&text, "x-1.dist-info/RECORD").unwrap();
        assert!(r.finish().unwrap_err().contains("line 1 lists `a,b.py`"));
        for (bad, want) in [
            ("a.py,sha256=x\n", "2 fields"),
            ("a.py,,\n", "has no hash"),
            ("a.py,sha1=x,1\n", "`sha1` is not accepted"),
            ("a.py,sha256=x,big\n", "not a byte count"),
            ("\"a.py,sha256=x,1\n", "unterminated"),
            (
                "a.py,sha256=x,1\na.py,sha256=x,1\n",
                "line 2: `a.py` is listed twice",
            ),
        ] {
            let e = InputRecord::parse(bad, "R").unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
    }
}
