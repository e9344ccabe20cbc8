//! Cheap in-tree fuzzing: deterministic byte mutations of fixture files must
//! never panic analysis, split or reassembly (the cargo-fuzz target `elf`
//! explores further).

mod common;

use common::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn exercise(d: &[u8]) {
    let _ = rocpack_elf::archive_members(d);
    if let Ok(info) = rocpack_elf::analyze(d) {
        let bundles: Vec<Vec<u8>> = (0..info.bundles.len())
            .filter_map(|i| {
                rocpack_elf::bundle_bytes(d, &info, i)
                    .ok()
                    .map(<[u8]>::to_vec)
            })
            .collect();
        if let Ok(s) = rocpack_elf::split_host(d, b"mutant-marker") {
            let _ = rocpack_elf::reassemble(&s, &bundles);
        }
        let _ = rocpack_elf::reassemble(d, &bundles);
    }
    let _ = rocpack_elf::split_file(d, &mut |_, _| Ok(b"m".to_vec()));
}

#[test]
fn mutated_fixtures_never_panic() {
    if !have_fixtures() {
        return;
    }
    // ROCPACK_MUTATE_SEED / ROCPACK_MUTATE_ROUNDS explore further by hand.
    let seed = std::env::var("ROCPACK_MUTATE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15u64);
    let rounds: usize = std::env::var("ROCPACK_MUTATE_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut rng = Rng(seed | 1);
    let dir = fixtures().join("fatbins");
    for name in [
        "libfx_mixed.so",
        "fx_app_nopie",
        "libfx_relr.so",
        "libfx_rdc.so",
        "libfx_static.a",
    ] {
        let orig = std::fs::read(dir.join(name)).unwrap();
        let split = rocpack_elf::split_file(&orig, &mut |_, _| Ok(b"m".to_vec())).unwrap();
        for base in [&orig, &split] {
            for _ in 0..rounds {
                let mut d = base.clone();
                // Mutate headers and tables more than payload bytes.
                let n = 1 + (rng.next() % 4) as usize;
                for _ in 0..n {
                    let hot = rng.next().is_multiple_of(2);
                    let pos = if hot {
                        (rng.next() % 0x400) as usize % d.len()
                    } else {
                        (rng.next() as usize) % d.len()
                    };
                    d[pos] = rng.next() as u8;
                }
                exercise(&d);
                // Also section header table region.
                let mut d2 = base.clone();
                let len = d2.len();
                let pos = len - 1 - (rng.next() as usize % 0x600).min(len - 1);
                d2[pos] = rng.next() as u8;
                exercise(&d2);
            }
        }
    }
}
