//! ggml's storage types and their dequantisation to f32, block by block, as llama.cpp's
//! `dequantize_row_*` (`ggml-quants.c`) computes them. A block holds `block_len` values
//! in `block_bytes` bytes: a 32-value block (Q4_0, Q4_1, Q8_0) or a 256-value super-block
//! of 8 (Q4_K, Q5_K) or 16 (Q6_K) sub-blocks with their own 6- or 8-bit scales.

use half::{bf16, f16};
use rayon::prelude::*;

/// A ggml tensor storage type kiln can dequantise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 4-bit values in 32-value blocks with an f16 scale.
    Q4_0,
    /// 4-bit values in 32-value blocks with an f16 scale and minimum.
    Q4_1,
    /// 8-bit values in 32-value blocks with an f16 scale.
    Q8_0,
    /// K-quant: 4-bit values in 256-value super-blocks of 8 sub-blocks with 6-bit scales and mins.
    Q4K,
    /// K-quant: 5-bit values, laid out as Q4_K plus a plane of high bits.
    Q5K,
    /// K-quant: 6-bit values in 256-value super-blocks of 16 sub-blocks with 8-bit scales.
    Q6K,
}

/// Values per K-quant super-block.
const QK_K: usize = 256;

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The 6-bit scale and min of sub-block `j` of a Q4_K / Q5_K super-block's 12 packed bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (d, m) = if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    };
    (d as f32, m as f32)
}

impl GgmlType {
    pub(crate) const SUPPORTED: &'static str = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K";

    /// The type of ggml's `enum ggml_type` value `code`, if kiln reads it.
    pub fn from_code(code: u32) -> Option<GgmlType> {
        Some(match code {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            8 => GgmlType::Q8_0,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            30 => GgmlType::BF16,
            _ => return None,
        })
    }

    pub(crate) fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => 32,
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => QK_K,
        }
    }

    pub(crate) fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
        }
    }

    /// Bytes of `n` values (`n` a multiple of the block length).
    pub fn bytes_for(self, n: usize) -> usize {
        n / self.block_len() * self.block_bytes()
    }

    /// The values of whole blocks `src` into `dst` (`dst.len()` values), in parallel over
    /// runs of blocks.
    pub fn dequantize(self, src: &[u8], dst: &mut [f32]) {
        const BLOCKS_PER_TASK: usize = 256;
        let (bl, bb) = (self.block_len(), self.block_bytes());
        dst.par_chunks_mut(bl * BLOCKS_PER_TASK).zip(src.par_chunks(bb * BLOCKS_PER_TASK)).for_each(
            |(d, s)| d.chunks_exact_mut(bl).zip(s.chunks_exact(bb)).for_each(|(y, b)| self.block(b, y)),
        );
    }

    /// One block `b` into its `y` values.
    fn block(self, b: &[u8], y: &mut [f32]) {
        match self {
            GgmlType::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            GgmlType::F16 => y[0] = f16_at(b, 0),
            GgmlType::BF16 => y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32(),
            GgmlType::Q4_0 => {
                let d = f16_at(b, 0);
                for (j, &q) in b[2..18].iter().enumerate() {
                    y[j] = ((q & 0xF) as i32 - 8) as f32 * d;
                    y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
            GgmlType::Q4_1 => {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                for (j, &q) in b[4..20].iter().enumerate() {
                    y[j] = (q & 0xF) as f32 * d + m;
                    y[j + 16] = (q >> 4) as f32 * d + m;
                }
            }
            GgmlType::Q8_0 => {
                let d = f16_at(b, 0);
                for (v, &q) in y.iter_mut().zip(&b[2..34]) {
                    *v = q as i8 as f32 * d;
                }
            }
            GgmlType::Q4K | GgmlType::Q5K => {
                let (d, min) = (f16_at(b, 0), f16_at(b, 2));
                let scales = &b[4..16];
                let (qh, qs) =
                    if self == GgmlType::Q5K { (&b[16..48], &b[48..176]) } else { (&[][..], &b[16..144]) };
                // Each 64 values: 32 low nibbles then 32 high nibbles of the same 32 bytes,
                // each half with its own scale and min; Q5_K adds a fifth bit from qh.
                for (c, (ql, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
                    let (s1, m1) = scale_min_k4(2 * c, scales);
                    let (s2, m2) = scale_min_k4(2 * c + 1, scales);
                    for l in 0..32 {
                        let hi = |bit: usize| {
                            qh.get(l).map_or(0.0, |&h| if h & (1 << bit) != 0 { 16.0 } else { 0.0 })
                        };
                        y[l] = d * s1 * ((ql[l] & 0xF) as f32 + hi(2 * c)) - min * m1;
                        y[l + 32] = d * s2 * ((ql[l] >> 4) as f32 + hi(2 * c + 1)) - min * m2;
                    }
                }
            }
            GgmlType::Q6K => {
                let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
                let d = f16_at(b, 208);
                // Two halves of 128 values: 64 bytes of low nibbles, 32 of 2-bit highs and
                // 8 signed 8-bit scales (one per 16 values) each.
                for h in 0..2 {
                    let (ql, qh, sc, y) = (&ql[64 * h..], &qh[32 * h..], &sc[8 * h..], &mut y[128 * h..]);
                    for l in 0..32 {
                        let is = l / 16;
                        let q =
                            |low: u8, shift: u32| ((low | (((qh[l] >> shift) & 3) << 4)) as i32 - 32) as f32;
                        y[l] = d * sc[is] as i8 as f32 * q(ql[l] & 0xF, 0);
                        y[l + 32] = d * sc[is + 2] as i8 as f32 * q(ql[l + 32] & 0xF, 2);
                        y[l + 64] = d * sc[is + 4] as i8 as f32 * q(ql[l] >> 4, 4);
                        y[l + 96] = d * sc[is + 6] as i8 as f32 * q(ql[l + 32] >> 4, 6);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deq(t: GgmlType, b: &[u8]) -> Vec<f32> {
        let mut y = vec![f32::NAN; b.len() / t.block_bytes() * t.block_len()];
        t.dequantize(b, &mut y);
        y
    }

    fn h(v: f32) -> [u8; 2] {
        f16::from_f32(v).to_le_bytes()
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn plain_floats() {
        assert_eq!(deq(GgmlType::F32, &2.5f32.to_le_bytes()), [2.5]);
        assert_eq!(deq(GgmlType::F16, &h(-0.5)), [-0.5]);
        assert_eq!(deq(GgmlType::BF16, &bf16::from_f32(3.0).to_le_bytes()), [3.0]);
    }

    /// 32-value blocks: byte j holds value j (low nibble) and value j + 16 (high nibble).
    #[test]
    fn q4_0_q4_1_q8_0_blocks() {
        let qs: Vec<u8> = (0..16u8).map(|j| j | ((15 - j) << 4)).collect();
        let y = deq(GgmlType::Q4_0, &cat(&[&h(0.5), &qs]));
        assert_eq!((y[0], y[3], y[16], y[31]), (-4.0, -2.5, 3.5, -4.0));
        let y = deq(GgmlType::Q4_1, &cat(&[&h(2.0), &h(-1.0), &qs]));
        assert_eq!((y[0], y[5], y[16], y[31]), (-1.0, 9.0, 29.0, -1.0));
        let q8: Vec<u8> = (0..32).map(|j| (j as i8 - 16) as u8).collect();
        let y = deq(GgmlType::Q8_0, &cat(&[&h(0.25), &q8]));
        assert_eq!((y[0], y[16], y[31]), (-4.0, 0.0, 3.75));
    }

    /// Sub-block scales: 0–3 from the low 6 bits of bytes 0–3 (mins 4–7); 4–7 from the
    /// nibbles of bytes 8–11 with the top 2 bits of bytes 0–3 (mins: of bytes 4–7).
    #[test]
    fn q4_k_and_q5_k_blocks() {
        let mut scales = [0u8; 12];
        scales[0] = 3; // sub-block 0: scale 3
        scales[4] = 2; // sub-block 0: min 2
        scales[1] = 1 | (1 << 6); // sub-block 1: scale 1; sub-block 5's scale gets 16
        scales[9] = 0x45; // sub-block 5: scale 5 | 16 = 21, min 4
        let mut qs = [0u8; 128];
        qs[0] = 0x27; // value 0: 7 (sub-block 0), value 32: 2 (sub-block 1)
        qs[64 + 1] = 0x30; // value 128 + 32 + 1 (sub-block 5): 3
        let block = cat(&[&h(0.5), &h(0.25), &scales, &qs]);
        let y = deq(GgmlType::Q4K, &block);
        assert_eq!(y[0], 0.5 * 3.0 * 7.0 - 0.25 * 2.0);
        assert_eq!(y[1], -0.25 * 2.0);
        assert_eq!(y[32], 0.5 * 1.0 * 2.0);
        assert_eq!(y[161], 0.5 * 21.0 * 3.0 - 0.25 * 4.0);
        // Q5_K: qh byte l, bit 2c / 2c + 1 adds 16 to value l of the 64-value chunk c.
        let mut qh = [0u8; 32];
        qh[0] = 0b10; // value 32 (chunk 0, high half)
        qh[1] = 1 << 5; // value 128 + 32 + 1 (chunk 2, high half)
        let y = deq(GgmlType::Q5K, &cat(&[&h(0.5), &h(0.25), &scales, &qh, &qs]));
        assert_eq!(y[0], 0.5 * 3.0 * 7.0 - 0.25 * 2.0);
        assert_eq!(y[32], 0.5 * 1.0 * 18.0);
        assert_eq!(y[161], 0.5 * 21.0 * 19.0 - 0.25 * 4.0);
    }

    /// Q6_K: value l of each 128 = low nibble of ql[l] | 2 bits of qh[l], minus 32.
    #[test]
    fn q6_k_block() {
        let (mut ql, mut qh, mut sc) = ([0u8; 128], [0u8; 64], [1u8; 16]);
        ql[0] = 0x5A; // value 0: low 0xA; value 64: low 0x5
        qh[0] = 0b11_00_01_10; // value 0: +2<<4, 32: +1<<4, 64: +0, 96: +3<<4
        ql[64 + 40] = 0x0C; // second half, value 128 + 32 + 8: low 0xC
        sc[2] = (-3i8) as u8; // values 32..48
        sc[8 + 2] = 2; // second half, values 128 + 32..48
        let y = deq(GgmlType::Q6K, &cat(&[&ql, &qh, &sc, &h(0.5)]));
        assert_eq!(y[0], 0.5 * ((0xA | 0x20) - 32) as f32);
        assert_eq!(y[32], 0.5 * -3.0 * (16 - 32) as f32);
        assert_eq!(y[64], 0.5 * (5 - 32) as f32);
        assert_eq!(y[96], 0.5 * (0x30 - 32) as f32);
        assert_eq!(y[128 + 40], 0.5 * 2.0 * (0xC - 32) as f32);
    }
}
