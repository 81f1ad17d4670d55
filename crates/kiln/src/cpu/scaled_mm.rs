//! `scaled_mm` reference: both float8 operands dequantised to f32 (value × scale, as
//! PyTorch's CPU `_scaled_mm` does), one f32 GEMM, bias, one rounding to the output dtype.

use super::{map_strided, CpuBuffer};
use crate::convert::{e4m3_to_f32, e5m2_to_f32};
use crate::dtype::{Elem, F8E4M3, F8E5M2};
use crate::layout::Layout;
use crate::DType;

/// A float8 operand: buffer, layout and dtype (float8_e4m3fn or float8_e5m2).
pub type Fp8Operand<'a> = (&'a CpuBuffer, &'a Layout, DType);

/// Row-major f32 values of `op`, each times `scale(row, col)`.
fn dequantise((buf, l, dt): Fp8Operand<'_>, scale: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let mut v = match dt {
        DType::F8E4M3 => map_strided(buf.as_slice::<F8E4M3>(), l, |x| e4m3_to_f32(x.0)),
        _ => map_strided(buf.as_slice::<F8E5M2>(), l, |x| e5m2_to_f32(x.0)),
    };
    let cols = l.shape[1];
    for (r, row) in v.chunks_mut(cols.max(1)).enumerate() {
        row.iter_mut().enumerate().for_each(|(c, x)| *x *= scale(r, c));
    }
    v
}

/// `a` `[M, K]`, `b` `[K, N]`; `sa` has 1 or M values, `sb` 1 or N (ops/scaled_mm.rs checked it);
/// `bias` N values or none.
pub fn scaled_mm(
    a: Fp8Operand<'_>,
    b: Fp8Operand<'_>,
    sa: &[f32],
    sb: &[f32],
    bias: Option<&[f32]>,
    out: DType,
) -> CpuBuffer {
    let (m, k, n) = (a.1.shape[0], a.1.shape[1], b.1.shape[1]);
    let pick = |s: &[f32], i: usize| if s.len() == 1 { s[0] } else { s[i] };
    let af = dequantise(a, |r, _| pick(sa, r));
    let bf = dequantise(b, |_, c| pick(sb, c));
    let mut y = super::matmul::matmul(&af, &Layout::contiguous(&[m, k]), &bf, &Layout::contiguous(&[k, n]));
    if let Some(bias) = bias {
        for row in y.chunks_mut(n.max(1)) {
            row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
        }
    }
    crate::with_dtype!(
        out,
        T,
        CpuBuffer::from_vec(y.into_iter().map(|v| T::from_f64(v as f64)).collect::<Vec<T>>())
    )
}
