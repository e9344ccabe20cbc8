//! The dist-info files: METADATA and WHEEL (RFC 822 style headers, an
//! optional body after the first blank line) and RECORD (CSV of path,
//! `sha256=<urlsafe base64, no padding>`, size): written for outputs,
//! checked against the files of an input ([`InputRecord`]).

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

pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Appends one RECORD row for a file to `out`.
pub fn push_record_row(out: &mut String, r: &RecordRow) {
    out.push_str(&record_row(&r.path, &r.sha256, r.size));
}

/// One RECORD row for a file, line end included.
pub fn record_row(path: &str, sha256: &[u8; 32], size: u64) -> String {
    format!("{},sha256={},{}\n", csv_field(path), b64url(sha256), size)
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

/// Calls `row` with each CSV row of RECORD text read from `text` (1-based
/// line, fields): fields may be quoted (`"a,b"`, `""` for a quote), rows
/// end with `\n` or `\r\n`, blank lines are skipped. One row at a time:
/// nothing is kept per row here, and the text is streamed.
fn csv_rows<R: std::io::BufRead>(
    text: R,
    mut row: impl FnMut(usize, &[String]) -> Result<(), String>,
) -> Result<(), String> {
    let mut line = 1;
    let mut bytes = text.bytes().peekable();
    let next = |b: &mut std::iter::Peekable<std::io::Bytes<R>>| -> Result<Option<u8>, String> {
        b.next().transpose().map_err(|e| format!("read: {e}"))
    };
    let mut raw: Vec<Vec<u8>> = Vec::new();
    let mut fields: Vec<String> = Vec::new();
    loop {
        if bytes.peek().is_none() {
            break;
        }
        let start = line;
        raw.clear();
        raw.push(Vec::new());
        let mut quoted = false;
        while let Some(c) = next(&mut bytes)? {
            let f = raw.last_mut().ok_or("internal: no field")?;
            let peek_quote = matches!(bytes.peek(), Some(Ok(b'"')));
            let peek_nl = matches!(bytes.peek(), Some(Ok(b'\n')));
            match c {
                b'"' if quoted && peek_quote => {
                    next(&mut bytes)?;
                    f.push(b'"');
                }
                b'"' if quoted => quoted = false,
                b'"' if f.is_empty() => quoted = true,
                b',' if !quoted => raw.push(Vec::new()),
                b'\n' if !quoted => {
                    line += 1;
                    break;
                }
                b'\r' if !quoted && peek_nl => {}
                c => {
                    if c == b'\n' {
                        line += 1;
                    }
                    f.push(c);
                }
            }
        }
        if quoted {
            return Err(format!("line {start}: unterminated quoted field"));
        }
        if !(raw.len() == 1 && raw[0].is_empty()) {
            fields.clear();
            for f in raw.drain(..) {
                fields.push(String::from_utf8(f).map_err(|_| format!("line {start}: not UTF-8"))?);
            }
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

    /// The digest.
    pub fn finish(self) -> Vec<u8> {
        match self {
            FileHasher::Sha256(h) => h.finalize().to_vec(),
            FileHasher::Sha384(h) => h.finalize().to_vec(),
            FileHasher::Sha512(h) => h.finalize().to_vec(),
        }
    }

    /// The digest in RECORD's encoding (URL-safe base64, no padding).
    pub fn finish_b64(self) -> String {
        b64url(&self.finish())
    }
}

/// One row of an input RECORD, checked for syntax.
#[derive(Debug, Clone, Copy)]
pub struct InputRow<'a> {
    /// 1-based line.
    pub line: usize,
    /// Path inside the wheel.
    pub path: &'a str,
    /// Algorithm and digest (URL-safe base64, padding removed); `None` only
    /// for RECORD itself and its signatures.
    pub hash: Option<(HashAlgo, &'a str)>,
    /// Declared size.
    pub size: Option<u64>,
}

impl InputRow<'_> {
    /// Compares a file's digest (with the row's algorithm) and size.
    pub fn check(&self, record_path: &str, digest_b64: &str, size: u64) -> Result<(), String> {
        let name = self.path;
        if let Some((algo, want)) = self.hash {
            if want != digest_b64 {
                return Err(format!(
                    "`{name}`: {record_path} line {} says {}={want}, the file has {}={digest_b64}: the RECORD does not match the files",
                    self.line,
                    algo.name(),
                    algo.name()
                ));
            }
        }
        if let Some(want) = self.size {
            if want != size {
                return Err(format!(
                    "`{name}`: {record_path} line {} says {want} bytes, the file has {size}: the RECORD does not match the files",
                    self.line
                ));
            }
        }
        Ok(())
    }
}

/// Whether `name` (a wheel path) is RECORD itself or one of its signatures,
/// which RECORD lists without a hash (or not at all).
pub fn is_record_file(name: &str, record_path: &str) -> bool {
    name == record_path
        || name
            .strip_prefix(record_path)
            .is_some_and(|s| s == ".jws" || s == ".p7s")
}

/// Streams the rows of the RECORD at wheel path `record_path` to `row`,
/// each checked for syntax (three fields, an accepted hash for every file
/// but RECORD and its signatures, a byte count). Nothing is kept per row:
/// the caller checks each row against the wheel's files as it comes
/// (every file listed once, every row a file of the wheel), so a wheel
/// whose RECORD does not match is refused, never re-blessed with fresh
/// hashes.
pub fn input_record_rows<R: std::io::BufRead>(
    text: R,
    record_path: &str,
    mut row: impl FnMut(&InputRow<'_>) -> Result<(), String>,
) -> Result<(), String> {
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
                format!("{at}: hash algorithm `{algo}` is not accepted (sha256, sha384 or sha512)")
            })?;
            Some((algo, digest.trim_end_matches('=')))
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
        row(&InputRow {
            line,
            path,
            hash,
            size,
        })
    })
    .map_err(|e| match e.strip_prefix("line ") {
        Some(rest) => format!("{record_path}: line {rest}"),
        None => e,
    })
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

    /// (line, path, algorithm, size) of each row.
    type Row = (usize, String, Option<HashAlgo>, Option<u64>);

    fn rows(text: &str) -> Result<Vec<Row>, String> {
        let mut v = Vec::new();
        input_record_rows(text.as_bytes(), "x-1.dist-info/RECORD", |r| {
            v.push((r.line, r.path.to_string(), r.hash.map(|h| h.0), r.size));
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn input_record_rows_quotes_and_checks() {
        let h = b64url(&<sha2::Sha256 as sha2::Digest>::digest(b"abc"));
        let text = format!(
            "\"a,b.py\",sha256={h}=,3\r\nplain.py,sha256={h},3\n\"multi\nline\",sha256={h},3\n\nx-1.dist-info/RECORD,,\n"
        );
        let v = rows(&text).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0], (1, "a,b.py".into(), Some(HashAlgo::Sha256), Some(3)));
        assert_eq!(v[2].1, "multi\nline");
        assert_eq!(v[3], (6, "x-1.dist-info/RECORD".into(), None, None));
        let r = InputRow {
            line: 2,
            path: "plain.py",
            hash: Some((HashAlgo::Sha256, &h)),
            size: Some(3),
        };
        r.check("R", &h, 3).unwrap();
        assert!(r.check("R", &h, 4).unwrap_err().contains("says 3 bytes"));
        assert!(r
            .check("R", "x", 3)
            .unwrap_err()
            .contains("R line 2 says sha256="));
        for (bad, want) in [
            ("a.py,sha256=x\n", "2 fields"),
            ("a.py,,\n", "has no hash"),
            ("a.py,sha1=x,1\n", "`sha1` is not accepted"),
            ("a.py,sha256=x,big\n", "not a byte count"),
            ("\"a.py,sha256=x,1\n", "unterminated"),
        ] {
            let e = rows(bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
        let e = input_record_rows(&b"a.py,sha256=x,1\n\xff,sha256=x,1\n"[..], "R", |_| Ok(()))
            .unwrap_err();
        assert!(e.contains("line 2: not UTF-8"), "{e}");
    }
}
