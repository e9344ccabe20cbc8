#![no_main]
//! KPAK v1 reader: any input parses to an error or a reader whose every
//! kernel can be fetched (or fails cleanly); a valid archive re-written with
//! our writer reads back to the same contents.

use rocpack_kpack::{Compression, KpackReader, Kpm, Scheme};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = Kpm::decode(data);
    let Ok(r) = KpackReader::from_bytes(data) else {
        return;
    };
    let mut objects = Vec::new();
    for e in r.entries() {
        match r.get_entry(e) {
            Ok(d) => {
                assert_eq!(d.len() as u64, e.original_size);
                objects.push(d.into_owned());
            }
            Err(_) => return,
        }
    }
    let comp = match r.scheme() {
        Scheme::None => Compression::None,
        Scheme::ZstdPerKernel => Compression::Zstd { level: 1 },
    };
    let rebuilt = r
        .to_writer(comp)
        .and_then(|w| w.to_vec())
        .expect("rewrite a valid archive");
    let r2 = KpackReader::from_bytes(&rebuilt).expect("our output reads back");
    let shape = |r: &KpackReader| -> Vec<(String, String, u32, u64)> {
        r.entries()
            .iter()
            .map(|e| (e.key.clone(), e.target.clone(), e.ordinal, e.original_size))
            .collect()
    };
    assert_eq!(shape(&r2), shape(&r));
    assert_eq!(r2.gfx_arches(), r.gfx_arches());
    for (e, d) in r2.entries().iter().zip(&objects) {
        assert_eq!(&*r2.get_entry(e).unwrap(), &d[..]);
    }
});
