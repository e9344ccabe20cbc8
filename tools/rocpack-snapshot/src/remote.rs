//! `s3://` (read/write) and `http(s)://` (read-only) stores through `object_store`.
//!
//! S3 endpoint, region and credentials come from the standard AWS environment
//! variables (`AWS_ENDPOINT_URL`/`AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`); a plain `http://` endpoint is allowed.

use crate::blob::{BlobState, Listed, PutOutcome, TEMP_PREFIX};
use crate::error::{io_at, Error, Result};
use crate::fsutil::step;
use crate::hash;
use crate::metadata::store_key;
use futures_util::StreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

/// Largest blob sent as a single PUT; larger ones go multipart.
const SINGLE_PUT_MAX: u64 = 64 << 20;
const PART: usize = 16 << 20;

pub struct RemoteStore {
    url: String,
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
    writable: bool,
}

fn store_err(url: &str, e: impl std::fmt::Display) -> Error {
    Error::Store {
        store: url.to_string(),
        msg: e.to_string(),
    }
}

impl RemoteStore {
    pub fn open(url: &str) -> Result<RemoteStore> {
        // TLS for reqwest: rustls with the ring provider (no aws-lc-rs / cmake).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| store_err(url, e))?;
        let (store, writable): (Arc<dyn ObjectStore>, bool) =
            if let Some(rest) = url.strip_prefix("s3://") {
                open_s3(url, rest)?
            } else {
                open_http(url)?
            };
        Ok(RemoteStore {
            url: url.to_string(),
            store,
            rt,
            writable,
        })
    }

    pub fn describe(&self) -> String {
        self.url.clone()
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        store_err(&self.url, e)
    }

    pub fn put_file(&self, src: &Path) -> Result<PutOutcome> {
        if !self.writable {
            return Err(Error::Usage(format!(
                "store {}: http(s) stores are read-only; publish to a directory or s3:// store",
                self.url
            )));
        }
        // Upload from one private, verified copy: the artifact may change
        // while it is hashed or uploaded, the copy does not, so the bytes
        // stored under a digest are always the bytes that hash to it.
        // The copy is an unnamed temp file (O_TMPFILE): a kill -9 cannot leave it behind.
        let label = std::env::temp_dir().join("snapctl-upload-copy");
        let mut copy = tempfile::tempfile()
            .map_err(|e| Error::Usage(format!("cannot create a private upload copy: {e}")))?;
        let digest = hash::copy_hashed_into(src, &mut copy, &label)?;
        let key = store_key(&digest.sha256);
        let path = ObjPath::from(key.as_str());
        let mut already_present = self.rt.block_on(async {
            match self.store.head(&path).await {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(self.err(e)),
            }
        })?;
        if already_present {
            // A content address holds one content: an object whose bytes do
            // not hash to its name (an earlier upload raced a changing
            // artifact) is deleted and uploaded again from the copy.
            let wrong = match self.check(&digest.sha256, Some(digest.size))? {
                BlobState::Corrupt { actual_sha256, .. } => {
                    Some(format!("bytes hashing to {actual_sha256}"))
                }
                BlobState::Oversize { seen, .. } => Some(format!("more than {seen} bytes")),
                _ => None,
            };
            if let Some(wrong) = wrong {
                eprintln!("snapctl: {key} in {} held {wrong}; replacing it", self.url);
                self.rt
                    .block_on(self.store.delete(&path))
                    .map_err(|e| self.err(e))?;
                already_present = false;
            }
        }
        if !already_present {
            step("upload: put blob to remote store (put-if-absent)");
            self.rt
                .block_on(self.upload(&mut copy, &label, &path, digest.size))?;
        }
        step("upload: verify remote blob");
        let state = self.check(&digest.sha256, Some(digest.size))?;
        if !already_present && !matches!(state, BlobState::Ok { size } if size == digest.size) {
            // Never leave a wrong object behind under this name.
            let _ = self.rt.block_on(self.store.delete(&path));
        }
        match state {
            BlobState::Ok { size } if size == digest.size => {}
            BlobState::Ok { size } => {
                return Err(self.err(format!(
                    "blob {key}: size {size} after upload, expected {}",
                    digest.size
                )))
            }
            BlobState::Missing => {
                return Err(self.err(format!("blob {key} missing right after upload")))
            }
            BlobState::Corrupt { actual_sha256, .. } => {
                return Err(Error::Digest {
                    what: format!("blob {key} in {} after upload", self.url),
                    expected: digest.sha256,
                    actual: actual_sha256,
                })
            }
            BlobState::Oversize { seen, expected } => {
                return Err(self.err(format!(
                    "blob {key}: more than {seen} bytes after upload, expected {expected}"
                )))
            }
            BlobState::Unreadable(why) => {
                return Err(self.err(format!("blob {key} unreadable after upload: {why}")))
            }
        }
        Ok(PutOutcome {
            digest,
            key,
            already_present,
        })
    }

    async fn upload(
        &self,
        file: &mut std::fs::File,
        src: &Path,
        path: &ObjPath,
        size: u64,
    ) -> Result<()> {
        use std::io::Seek;
        file.rewind().map_err(io_at(src))?;
        if size <= SINGLE_PUT_MAX {
            let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            file.read_to_end(&mut buf).map_err(io_at(src))?;
            let payload = PutPayload::from(bytes::Bytes::from(buf));
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            return match self.store.put_opts(path, payload.clone(), opts).await {
                Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
                // Servers without conditional PUT: content addressing makes a racing
                // identical write harmless, so a plain PUT after the HEAD check is fine.
                Err(object_store::Error::NotImplemented { .. })
                | Err(object_store::Error::NotSupported { .. }) => self
                    .store
                    .put(path, payload)
                    .await
                    .map(|_| ())
                    .map_err(|e| self.err(e)),
                Err(e) => Err(self.err(e)),
            };
        }
        let upload = self
            .store
            .put_multipart(path)
            .await
            .map_err(|e| self.err(e))?;
        let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, PART);
        let mut buf = vec![0u8; PART];
        loop {
            let n = file.read(&mut buf).map_err(io_at(src))?;
            if n == 0 {
                break;
            }
            w.wait_for_capacity(2).await.map_err(|e| self.err(e))?;
            w.write(buf.get(..n).unwrap_or_default());
        }
        w.finish().await.map(|_| ()).map_err(|e| self.err(e))
    }

    /// Streams the blob, hashing it; optionally writes it to `sink`. With a
    /// `limit`, a store announcing a longer object is refused before reading
    /// and a stream running past it is cut off: `Some(Err(n))`.
    fn stream(
        &self,
        sha256: &str,
        limit: Option<u64>,
        mut sink: Option<(&Path, &mut std::fs::File)>,
    ) -> Result<Option<std::result::Result<(String, u64), u64>>> {
        let path = ObjPath::from(store_key(sha256).as_str());
        self.rt.block_on(async {
            let got = match self.store.get(&path).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(self.err(e)),
            };
            if let Some(l) = limit {
                if got.meta.size > l {
                    return Ok(Some(Err(got.meta.size)));
                }
            }
            let mut stream = got.into_stream();
            let mut h = Sha256::new();
            let mut n = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.err(e))?;
                n = n.saturating_add(chunk.len() as u64);
                if limit.is_some_and(|l| n > l) {
                    return Ok(Some(Err(n)));
                }
                h.update(&chunk);
                if let Some((p, f)) = sink.as_mut() {
                    f.write_all(&chunk).map_err(io_at(p))?;
                }
            }
            Ok(Some(Ok((hex::encode(h.finalize()), n))))
        })
    }

    pub fn check(&self, sha256: &str, expected_size: Option<u64>) -> Result<BlobState> {
        Ok(match self.stream(sha256, expected_size, None) {
            Err(e) => BlobState::Unreadable(e.to_string()),
            Ok(None) => BlobState::Missing,
            Ok(Some(Err(seen))) => BlobState::Oversize {
                expected: expected_size.unwrap_or_default(),
                seen,
            },
            Ok(Some(Ok((a, size)))) if a == sha256 => BlobState::Ok { size },
            Ok(Some(Ok((actual_sha256, size)))) => BlobState::Corrupt {
                actual_sha256,
                size,
            },
        })
    }

    pub fn fetch_to(
        &self,
        sha256: &str,
        tmp: &Path,
        expected_size: Option<u64>,
    ) -> Result<std::result::Result<(String, u64), u64>> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(io_at(tmp))?;
        let got = self.stream(sha256, expected_size, Some((tmp, &mut f)))?;
        f.sync_all().map_err(io_at(tmp))?;
        got.ok_or_else(|| self.err(format!("blob {} not found", store_key(sha256))))
    }

    pub fn list(&self) -> Result<Vec<Listed>> {
        let prefix = ObjPath::from("cas/sha256");
        let metas: Vec<_> = self.rt.block_on(async {
            let mut s = self.store.list(Some(&prefix));
            let mut v = Vec::new();
            while let Some(m) = s.next().await {
                v.push(m.map_err(|e| self.err(e))?);
            }
            Ok::<_, Error>(v)
        })?;
        let mut out: Vec<Listed> = metas
            .into_iter()
            .map(|m| {
                let key = m.location.to_string();
                let name = key.rsplit('/').next().unwrap_or_default();
                Listed {
                    is_temp: name.starts_with(TEMP_PREFIX) || !crate::metadata::is_hex(name, 64),
                    key,
                    size: m.size,
                }
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

#[cfg(feature = "s3")]
fn open_s3(url: &str, rest: &str) -> Result<(Arc<dyn ObjectStore>, bool)> {
    use object_store::aws::AmazonS3Builder;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::Usage(format!(
            "store {url}: expected s3://BUCKET[/PREFIX]"
        )));
    }
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    // The AWS CLI's variable for custom endpoints; object_store reads AWS_ENDPOINT too.
    let endpoint = std::env::var("AWS_ENDPOINT_URL_S3")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .or_else(|_| std::env::var("AWS_ENDPOINT"))
        .ok();
    if let Some(ep) = endpoint {
        if ep.starts_with("http://") {
            b = b.with_allow_http(true);
        }
        b = b.with_endpoint(ep);
    }
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        b = b.with_region("us-east-1");
    } else if let (None, Ok(r)) = (
        std::env::var_os("AWS_REGION"),
        std::env::var("AWS_DEFAULT_REGION"),
    ) {
        b = b.with_region(r);
    }
    let s3 = b.build().map_err(|e| store_err(url, e))?;
    let prefix = prefix.trim_matches('/');
    let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
    };
    Ok((store, true))
}

#[cfg(not(feature = "s3"))]
fn open_s3(url: &str, _rest: &str) -> Result<(Arc<dyn ObjectStore>, bool)> {
    Err(Error::Usage(format!(
        "store {url}: this snapctl was built without the `s3` feature"
    )))
}

#[cfg(feature = "http")]
fn open_http(url: &str) -> Result<(Arc<dyn ObjectStore>, bool)> {
    use object_store::http::HttpBuilder;
    use object_store::ClientOptions;
    let s = HttpBuilder::new()
        .with_url(url.trim_end_matches('/'))
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .build()
        .map_err(|e| store_err(url, e))?;
    Ok((Arc::new(s), false))
}

#[cfg(not(feature = "http"))]
fn open_http(url: &str) -> Result<(Arc<dyn ObjectStore>, bool)> {
    Err(Error::Usage(format!(
        "store {url}: this snapctl was built without the `http` feature"
    )))
}
