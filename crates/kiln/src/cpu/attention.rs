//! Decode attention on the CPU: 1–8 queries per head over the KV cache in one pass per
//! head (scores, softmax, weighted sum of values), reading keys and values where they lie
//! and as they are stored (f32, bf16 or f16, widened as they are read: a bf16 cache is
//! not copied to f32 every step; grouped heads share them, no repeat). The composed path
//! costs a handful of ops, each with its allocation, per layer and token; here it is one.

use super::gemv::{dot_widened, WeightElem};
use rayon::prelude::*;

/// A `[B, H, S, E]` operand of element `T`: its elements, offset and strides of B, H and S
/// (the last dim is contiguous).
pub struct View<'a, T = f32> {
    pub data: &'a [T],
    pub offset: usize,
    pub strides: [usize; 3],
}

impl<T> View<'_, T> {
    fn row(&self, b: usize, h: usize, s: usize, len: usize) -> &[T] {
        let o = self.offset + b * self.strides[0] + h * self.strides[1] + s * self.strides[2];
        &self.data[o..o + len]
    }
}

/// Sizes of one call: `hq` query heads in groups of `hq / hkv` per key head, `l` queries
/// of `e` against `s` keys, values of `ev`.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
}

/// Below this many multiply-adds the heads run on the calling thread.
const PAR_MIN_WORK: usize = 1 << 16;

/// The contiguous `[B, Hq, L, Ev]` result. Query `i` sees the first `keys` keys, and with
/// `causal` only keys `0..=i` of those (top-left, as the composed path); a query left with
/// none gives 0.
pub fn decode<T: WeightElem>(
    q: &View,
    k: &View<T>,
    v: &View<T>,
    sh: Shape,
    keys: usize,
    causal: bool,
    scale: f32,
) -> Vec<f32> {
    let Shape { b: _, hq, hkv, l, s, e, ev } = sh;
    let mut out = vec![0f32; sh.b * hq * l * ev];
    if out.is_empty() {
        return out;
    }
    let group = hq / hkv;
    let head = |(bh, out): (usize, &mut [f32])| {
        let (b, h) = (bh / hq, bh % hq);
        let (mut p, mut scratch) = (vec![0f32; s], vec![0f32; e]);
        for (i, o) in out.chunks_mut(ev).enumerate() {
            let n = if causal { keys.min(i + 1) } else { keys }.min(s);
            if n == 0 {
                continue;
            }
            let qi = q.row(b, h, i, e);
            for (j, p) in p[..n].iter_mut().enumerate() {
                *p = dot_widened(qi, k.row(b, h / group, j, e), &mut scratch) * scale;
            }
            let max = p[..n].iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut sum = 0f32;
            for p in &mut p[..n] {
                *p = (*p - max).exp();
                sum += *p;
            }
            for (j, &p) in p[..n].iter().enumerate() {
                let w = p / sum;
                o.iter_mut().zip(v.row(b, h / group, j, ev)).for_each(|(o, v)| *o += w * v.to_f32());
            }
        }
    };
    if out.len() / ev * s * (e + ev) >= PAR_MIN_WORK {
        out.par_chunks_mut(l * ev).enumerate().for_each(head);
    } else {
        out.chunks_mut(l * ev).enumerate().for_each(head);
    }
    out
}
