//! A compressed bundle costs its decompressed payload once, however many
//! entries it has and however they overlap: a counting allocator tracks the
//! bytes live at once while a CCOB whose 64 entries all cover the same
//! 4 MiB is parsed and every entry is read (before: one copy per entry,
//! 256 MiB for this 4 MiB payload).

use rocpack_testsupport::CountingAlloc;

use rocpack_bundle::{parse_bundle, write_ccob, Compression, BUNDLE_MAGIC};

#[global_allocator]
static A: CountingAlloc = CountingAlloc::new();

/// An uncompressed bundle with `n` device entries that all cover the same
/// `size` bytes (hand-built: our writer never produces overlaps).
fn overlapping_bundle(n: usize, size: usize) -> Vec<u8> {
    let ids: Vec<String> = (0..n)
        .map(|i| format!("hipv4-amdgcn-amd-amdhsa--gfx{}", 1100 + i))
        .collect();
    let table: usize = 24 + 8 + ids.iter().map(|id| 24 + id.len()).sum::<usize>();
    let data_at = table.div_ceil(4096) * 4096;
    let mut b = BUNDLE_MAGIC.to_vec();
    b.extend_from_slice(&(n as u64).to_le_bytes());
    for id in &ids {
        b.extend_from_slice(&(data_at as u64).to_le_bytes());
        b.extend_from_slice(&(size as u64).to_le_bytes());
        b.extend_from_slice(&(id.len() as u64).to_le_bytes());
        b.extend_from_slice(id.as_bytes());
    }
    b.resize(data_at, 0);
    b.extend((0..size).map(|i| (i * 7 % 251) as u8));
    b
}

#[test]
fn overlapping_ccob_entries_cost_the_payload_once() {
    let size = 4 << 20;
    let raw = overlapping_bundle(64, size);
    let ccob = write_ccob(&raw, 2, Compression::Zstd).unwrap();
    drop(raw);
    let base = A.start();
    let parsed = parse_bundle(&ccob).unwrap();
    let mut total = 0usize;
    for e in &parsed.entries {
        total += e.data.len();
    }
    assert_eq!(total, 64 * size);
    let peak = A.peak_since(base);
    drop(parsed);
    // The payload, plus decoder state and the entry table.
    assert!(
        peak < 3 * size,
        "peak {peak} bytes live for a {size}-byte payload"
    );
}
