//! Constants and plain data types of the KPAK v1 format.

use std::fmt;
use std::str::FromStr;

/// File magic, bytes 0..4.
pub const MAGIC: [u8; 4] = *b"KPAK";
/// The only archive version there is.
pub const VERSION: u32 = 1;
/// Size of the fixed header (magic, version, toc_offset).
pub const HEADER_SIZE: u64 = 16;
/// The blob region starts here (header padded with zeros up to this).
pub const BLOB_ALIGNMENT: u64 = 64;
/// `compression_scheme` value of the uncompressed scheme.
pub const SCHEME_NONE: &str = "none";
/// `compression_scheme` value of the per-kernel zstd scheme.
pub const SCHEME_ZSTD: &str = "zstd-per-kernel";
/// zstd level rocm-kpack's `ZstdCompressor` uses by default.
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;
/// Largest frame count the C++ runtime accepts in a zstd blob.
pub const ZSTD_MAX_KERNELS: u64 = 1_048_576;
/// Largest zstd blob the C++ runtime accepts (4 GiB).
pub const ZSTD_MAX_BLOB: u64 = 1 << 32;
/// Upper bound of zstd's compression ratio: every block decodes to at most
/// 128 KiB and takes at least 4 bytes (3-byte header + 1), so a frame of `n`
/// bytes never decodes to more than `n * 32768` bytes.
pub const ZSTD_MAX_RATIO: u64 = 32_768;
/// The per-kernel `type` the reference writes.
pub const KERNEL_TYPE_HSACO: &str = "hsaco";

/// How the writer stores kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Scheme `none`: raw bytes, back to back.
    None,
    /// Scheme `zstd-per-kernel`: one independent zstd frame per kernel.
    ///
    /// The level is *not* recorded in the archive (rocm-kpack does not record
    /// it either); level 3 is the reference default and reproduces its bytes.
    Zstd {
        /// zstd compression level (1..=22; negative = fast levels).
        level: i32,
    },
}

impl Compression {
    /// `zstd-per-kernel` at the reference's default level 3.
    pub const fn zstd() -> Self {
        Compression::Zstd {
            level: ZSTD_DEFAULT_LEVEL,
        }
    }

    /// The scheme this compression writes.
    pub const fn scheme(self) -> Scheme {
        match self {
            Compression::None => Scheme::None,
            Compression::Zstd { .. } => Scheme::ZstdPerKernel,
        }
    }

    /// This compression at zstd `level` when one is given (rocm-kpack's
    /// `--compression-level`); `None` stays uncompressed.
    pub const fn with_level(self, level: Option<i32>) -> Self {
        match (self, level) {
            (Compression::Zstd { .. }, Some(level)) => Compression::Zstd { level },
            _ => self,
        }
    }
}

impl FromStr for Compression {
    type Err = String;

    /// Accepts `none`, `zstd`, `zstd-per-kernel`, and `zstd:LEVEL` / `zstd-per-kernel:LEVEL`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, level) = match s.split_once(':') {
            Some((n, l)) => (
                n,
                Some(
                    l.parse::<i32>()
                        .map_err(|e| format!("bad zstd level {l:?}: {e}"))?,
                ),
            ),
            None => (s, None),
        };
        match (name, level) {
            ("none", None) => Ok(Compression::None),
            ("zstd" | SCHEME_ZSTD, l) => Ok(Compression::Zstd {
                level: l.unwrap_or(ZSTD_DEFAULT_LEVEL),
            }),
            _ => Err(format!(
                "unknown compression {s:?}: expected none, zstd or zstd:LEVEL"
            )),
        }
    }
}

/// The compression scheme recorded in an archive's TOC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// `none`
    None,
    /// `zstd-per-kernel`
    ZstdPerKernel,
}

impl Scheme {
    /// The TOC string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scheme::None => SCHEME_NONE,
            Scheme::ZstdPerKernel => SCHEME_ZSTD,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `toc[binary_key][arch]` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelEntry {
    /// The binary key (`<kernel_name>#<co_index>`).
    pub key: String,
    /// The arch key (`gfx1100`, `gfx90a:xnack+`, ...).
    pub target: String,
    /// The `type` field (always `hsaco` from the reference writer).
    pub kind: String,
    /// Index into the blob list / zstd frame list.
    pub ordinal: u32,
    /// Uncompressed size in bytes.
    pub original_size: u64,
    /// Optional free-form `metadata` map, kept as decoded.
    pub metadata: Option<rmpv::Value>,
}

/// Where a kernel's stored bytes (raw, or one zstd frame) are in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobLocation {
    /// Absolute file offset.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

/// Split a TOC binary key `name#N` into `(name, N)`.
pub fn split_toc_key(key: &str) -> Option<(&str, u64)> {
    let (name, idx) = key.rsplit_once('#')?;
    if idx.is_empty() || !idx.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((name, idx.parse().ok()?))
}

/// The TOC binary key for code object `co_index` of `kernel_name`:
/// `"<kernel_name>#<co_index>"` (the runtime's lookup key).
pub fn toc_key(kernel_name: &str, co_index: u64) -> String {
    format!("{kernel_name}#{co_index}")
}

/// Normalise a binary key as the reference writer does (`\` becomes `/`).
pub fn normalize_key(key: &str) -> String {
    key.replace('\\', "/")
}

/// Directory (relative to the artifact prefix root) that holds `.kpack` files.
pub const KPACK_DIR: &str = ".kpack";

/// The placeholder the runtime replaces with each candidate arch.
pub const GFXARCH_PLACEHOLDER: &str = "@GFXARCH@";

/// Canonical file name of the split output for one arch:
/// `<artifact_prefix>_<arch>.kpack` (arch verbatim, features included,
/// e.g. `hip_lib_gfx942:sramecc+:xnack-.kpack`), as rocm-kpack's splitter
/// names it and as the runtime's `@GFXARCH@` expansion expects.
pub fn kpack_file_name(prefix: &str, arch: &str) -> String {
    format!("{prefix}_{arch}.kpack")
}

/// File name of the older `pack_tree` layout: `<group>-<family>.kpack`.
pub fn pack_tree_file_name(group: &str, family: &str) -> String {
    format!("{group}-{family}.kpack")
}

/// The marker search path the splitter embeds for a binary `depth`
/// directories below the prefix root:
/// `"../" * depth + ".kpack/<prefix>_@GFXARCH@.kpack"`.
pub fn marker_search_path(prefix: &str, depth: usize) -> String {
    let mut s = "../".repeat(depth);
    s.push_str(KPACK_DIR);
    s.push('/');
    s.push_str(&kpack_file_name(prefix, GFXARCH_PLACEHOLDER));
    s
}

#[cfg(test)]
mod tests {
    use super::Compression;

    #[test]
    fn with_level_sets_zstd_only() {
        let z = Compression::zstd();
        assert_eq!(z.with_level(None), z);
        assert_eq!(z.with_level(Some(19)), Compression::Zstd { level: 19 });
        assert_eq!(Compression::None.with_level(Some(19)), Compression::None);
    }
}
