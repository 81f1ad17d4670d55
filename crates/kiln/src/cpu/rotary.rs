//! Rotary position embedding (the reference of `kernels/rotary.cu`), in f64 with one
//! rounding.

use super::CpuBuffer;
use crate::dtype::Elem;
use crate::DType;

/// Contiguous `x` `[rows · t, d]` (token `i` of a row at position `start + i`) turned by
/// the contiguous tables `cos` / `sin` `[positions, r]`; `start + t <= positions`.
#[allow(clippy::too_many_arguments)]
pub fn rotary(
    x: &CpuBuffer,
    cos: &CpuBuffer,
    sin: &CpuBuffer,
    r: usize,
    t: usize,
    d: usize,
    start: usize,
    dt: DType,
) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let (x, cos, sin) = (x.as_slice::<T>(), cos.as_slice::<T>(), sin.as_slice::<T>());
        let half = r / 2;
        let mut out = Vec::with_capacity(x.len());
        for (row, v) in x.chunks(d).enumerate() {
            let p = start + row % t;
            let (c, s) = (&cos[p * r..(p + 1) * r], &sin[p * r..(p + 1) * r]);
            out.extend((0..d).map(|j| {
                if j >= r {
                    return v[j];
                }
                let turned = if j < half { -v[j + half].to_f64() } else { v[j - half].to_f64() };
                T::from_f64(v[j].to_f64() * c[j].to_f64() + turned * s[j].to_f64())
            }));
        }
        CpuBuffer::from_vec(out)
    })
}
