// Shared helpers for the integration tests (included with `mod common;`).
#![allow(dead_code)]

use std::path::PathBuf;

/// The shared fixtures directory (env ROCPACK_SHARED or ../shared beside the checkout).
pub fn shared() -> PathBuf {
    match std::env::var_os("ROCPACK_SHARED") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")),
    }
}

pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// Small deterministic pseudo-random bytes (xorshift), for synthetic code objects.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // compressible but not trivially: runs of text-like bytes
            if i % 7 == 0 {
                (x & 0xff) as u8
            } else {
                b"ELF.text.data"[(x % 13) as usize]
            }
        })
        .collect()
}
