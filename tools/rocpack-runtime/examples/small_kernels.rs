//! `bench/runtime-small.sh`'s input: an install tree of one host binary and
//! one zstd-per-kernel archive of N small code objects (as a HIP runtime
//! meets them: thousands of few-KB kernels).
//!
//! usage: small_kernels OUT_DIR N SIZE [--no-checksum]
//! Writes OUT_DIR/lib/libsmall.so (placeholder host), OUT_DIR/marker.bin
//! (its `.rocm_kpack_ref` bytes) and OUT_DIR/lib/.kpack/small_gfx1100.kpack
//! with keys `lib/libsmall.so#0..N-1`. Kernels are text-like
//! (about 3.5x compressible, as real code objects), deterministic.

use std::process::ExitCode;

use rocpack_kpack::{Compression, KpackWriter, Marker};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: small_kernels OUT_DIR N SIZE [--no-checksum]");
        return ExitCode::from(2);
    }
    let out = std::path::PathBuf::from(&args[1]);
    let (Ok(n), Ok(size)) = (args[2].parse::<u32>(), args[3].parse::<usize>()) else {
        eprintln!("N and SIZE are numbers");
        return ExitCode::from(2);
    };
    let checksum = !args.iter().any(|a| a == "--no-checksum");
    let lib = out.join("lib");
    std::fs::create_dir_all(lib.join(".kpack")).expect("create OUT_DIR/lib/.kpack");
    std::fs::write(lib.join("libsmall.so"), b"host").expect("write host");
    let marker = Marker::new([".kpack/small_@GFXARCH@.kpack"], "lib/libsmall.so");
    std::fs::write(out.join("marker.bin"), marker.encode()).expect("write marker");
    let mut w = KpackWriter::new(Compression::Zstd { level: 3 });
    w.content_checksum(checksum);
    w.group_name("small")
        .arch_family("gfx110X")
        .arches(["gfx1100"]);
    let words: [&[u8]; 8] = [
        b"s_load_dwordx2 ",
        b"v_mov_b32 ",
        b"s_waitcnt lgkmcnt(0) ",
        b"global_store_dword ",
        b"v_add_co_u32 ",
        b"s_endpgm ",
        b"v0, v1 ",
        b"s[4:5] ",
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..n {
        let mut k = Vec::with_capacity(size);
        while k.len() < size {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let word = words[(x % 8) as usize];
            k.extend_from_slice(word);
            k.push((x >> 8) as u8);
        }
        k.truncate(size);
        w.add(&format!("lib/libsmall.so#{i}"), "gfx1100", k)
            .expect("add kernel");
    }
    w.write_to_path(lib.join(".kpack/small_gfx1100.kpack"))
        .expect("write archive");
    ExitCode::SUCCESS
}
