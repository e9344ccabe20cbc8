//! The dist-info files: METADATA and WHEEL (RFC 822 style headers, an
//! optional body after the first blank line) and RECORD (CSV of path,
//! `sha256=<urlsafe base64, no padding>`, size).

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

/// RECORD text: one row per file (in the given order), then the RECORD
/// file itself with empty hash and size.
pub fn record(rows: &[RecordRow], record_path: &str) -> String {
    let mut s = String::new();
    for r in rows {
        s.push_str(&format!(
            "{},sha256={},{}\n",
            csv_field(&r.path),
            b64url(&r.sha256),
            r.size
        ));
    }
    s.push_str(&format!("{},,\n", csv_field(record_path)));
    s
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
}
