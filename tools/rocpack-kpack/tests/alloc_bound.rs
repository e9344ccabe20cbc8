//! No input makes the reader allocate much more than the input's size:
//! a counting allocator records the largest single allocation while hostile
//! archives (huge counts, huge lengths, huge claimed sizes) are parsed and read.

use rocpack_testsupport::CountingAlloc;

use rocpack_kpack::{Compression, KpackReader, KpackStreamWriter};

#[global_allocator]
static A: CountingAlloc = CountingAlloc::new();

fn header(toc: &[u8]) -> Vec<u8> {
    let mut v = b"KPAK".to_vec();
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&64u64.to_le_bytes());
    v.resize(64, 0);
    v.extend_from_slice(toc);
    v
}

#[test]
fn hostile_inputs_allocate_little() {
    let mut inputs: Vec<Vec<u8>> = vec![
        header(&[0xdf, 0xff, 0xff, 0xff, 0xff]),
        header(&[
            0x81, 0xaa, b'g', b'f', b'x', b'_', b'a', b'r', b'c', b'h', b'e', b's', 0xdd, 0xff,
            0xff, 0xff, 0xff,
        ]),
        header(&[0x81, 0xdb, 0xff, 0xff, 0xff, 0xff]),
        header(&[0x81, 0xa3, b't', b'o', b'c', 0xdf, 0x7f, 0xff, 0xff, 0xff]),
    ];
    // A zstd archive whose single entry claims 2 GiB from a 100 KB frame
    // without content size (within zstd's ratio bound, wrong on decode).
    let mut x: u32 = 1;
    let noise: Vec<u8> = (0..100_000)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect();
    let mut c = zstd::bulk::Compressor::new(3).unwrap();
    c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
        .unwrap();
    let frame = c.compress(&noise).unwrap();
    let mut s =
        KpackStreamWriter::new(std::io::Cursor::new(Vec::new()), Compression::zstd()).unwrap();
    s.add_frame("k#0", "gfx900", 2 << 30, &frame, None).unwrap();
    let archive = s.finish().unwrap().0.into_inner();
    assert!(
        KpackReader::from_bytes(&archive).is_ok(),
        "the claim passes open()"
    );
    inputs.push(archive);

    A.start();
    for d in &inputs {
        if let Ok(r) = KpackReader::from_bytes(d) {
            for e in r.entries() {
                assert!(r.get_entry(e).is_err());
            }
        }
    }
    let largest = A.largest();
    // Bounded by the zstd decoder's own workspace plus the 100 KB of real output
    // (plus growth), nowhere near the claimed sizes.
    assert!(
        largest < 4 << 20,
        "largest single allocation {largest} bytes"
    );
}
