//! `kpack inspect` does not check a CCOB's stored MD5 by default (as
//! clang-offload-bundler without `-verbose`; `hash_matches` null, even when
//! it is wrong, `--no-hash-check` the same), while every code object is
//! still decompressed and hashed exactly as with `--check-hash`, which
//! reports a wrong stored hash as a mismatch.

use serde_json::Value;

mod common;
use common::{inspect_json, sha256_hex};

#[test]
fn only_check_hash_computes_the_payload_md5() {
    let tmp = tempfile::tempdir().unwrap();
    let objs: Vec<(String, Vec<u8>)> = (0..4u64)
        .map(|i| {
            let data = rocpack_testsupport::pseudo_random(i + 7, 3000 + 1000 * i as usize);
            (format!("hipv4-amdgcn-amd-amdhsa--gfx90{i}"), data)
        })
        .collect();
    let raw = rocpack_bundle::write_uncompressed(&objs);
    let mut ccob = rocpack_bundle::write_ccob(&raw, 3, rocpack_bundle::Method::Zstd).unwrap();
    let good = tmp.path().join("good.ccob");
    std::fs::write(&good, &ccob).unwrap();
    // v3 header: magic, version, method, total size, uncompressed size, hash.
    ccob[24] ^= 0xff;
    let bad = tmp.path().join("bad.ccob");
    std::fs::write(&bad, &ccob).unwrap();

    let sha_of = |v: &Value| -> Vec<String> {
        v["bundles"][0]["code_objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["sha256"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let want: Vec<String> = objs.iter().map(|(_, d)| sha256_hex(d)).collect();

    let checked = inspect_json(&good, &["--check-hash"]);
    assert_eq!(checked["bundles"][0]["hash_matches"], true);
    assert_eq!(sha_of(&checked), want);
    let wrong = inspect_json(&bad, &["--check-hash"]);
    assert_eq!(wrong["bundles"][0]["hash_matches"], false);

    for p in [&good, &bad] {
        for flags in [&[][..], &["--no-hash-check"][..]] {
            let fast = inspect_json(p, flags);
            assert_eq!(
                fast["bundles"][0]["hash_matches"],
                Value::Null,
                "{p:?} {flags:?}"
            );
            assert_eq!(sha_of(&fast), want, "{p:?} {flags:?}");
        }
    }
}
