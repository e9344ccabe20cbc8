//! Finding and indexing bundles through positioned reads of a file never
//! faults the file's mapping in: the kernel's own count of resident pages
//! of a mapping (smaps) stays at zero, while the same scan through the
//! mapped slice makes every bundle header's page resident.

use rocpack_bundle::*;
use rocpack_testsupport as common;

#[test]
#[allow(unsafe_code)]
fn positioned_reads_leave_the_mapping_untouched() {
    // 48 uncompressed bundles, each one 1 MiB code object, back to back at
    // 4 KiB alignment; the code objects are holes of a sparse file.
    const N: u64 = 48;
    const CO: usize = 1 << 20;
    let header = write_uncompressed(&[("hipv4-amdgcn-amd-amdhsa--gfx1100", &[1u8][..])]);
    let table_len = 4096u64; // entries start at the first 4 KiB boundary
    let mut file = tempfile::tempfile().unwrap();
    let mut at = 0u64;
    let mut starts = Vec::new();
    for _ in 0..N {
        // the one-byte entry's table, with its size patched to 1 MiB
        let mut h = header[..table_len as usize].to_vec();
        let size_at = 32 + 8;
        h[size_at..size_at + 8].copy_from_slice(&(CO as u64).to_le_bytes());
        std::os::unix::fs::FileExt::write_all_at(&file, &h, at).unwrap();
        starts.push(at);
        at += table_len + CO as u64;
    }
    file.set_len(at).unwrap();
    std::io::Write::flush(&mut file).unwrap();

    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let addr = map.as_ptr() as usize;
    assert_eq!(common::mapped_rss_kib(addr), Some(0), "fresh mapping");

    let src = FileRange::new(&file, 0, at);
    let spans = find_bundles_in(&src).unwrap();
    assert_eq!(
        spans.iter().map(|s| s.offset).collect::<Vec<_>>(),
        starts,
        "every bundle found"
    );
    for s in &spans {
        let w = Window::new(&src, s.offset, s.len);
        let index = index_bundle_in(&w, &Default::default()).unwrap();
        assert_eq!(index.entries[0].size, CO as u64);
    }
    assert_eq!(
        common::mapped_rss_kib(addr),
        Some(0),
        "positioned reads must not fault the mapping in"
    );

    // The oracle can see faults: the slice scan makes pages resident.
    let via_map = find_bundles(&map).unwrap();
    assert_eq!(via_map, spans);
    let rss = common::mapped_rss_kib(addr).unwrap();
    assert!(rss >= N * 4, "slice scan faulted only {rss} KiB");
}
