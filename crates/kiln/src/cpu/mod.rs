//! The CPU backend: the reference implementation of every op. Kernels take typed slices
//! plus layouts and return fresh contiguous buffers; validation happened in `ops/`.
//! Only [`gemv`] is public (benchmarks, tests and the CLI query it directly); the rest is
//! reached through the `Tensor` ops.

pub(crate) mod attention;
mod backend;
mod buffer;
pub(crate) mod causal_conv;
pub(crate) mod elementwise;
mod experts;
pub(crate) mod gated_delta;
pub mod gemv;
pub(crate) mod histogram;
pub(crate) mod index;
pub(crate) mod interpolate;
pub(crate) mod loss;
pub(crate) mod matmul;
pub(crate) mod nn;
mod random;
pub(crate) mod reduce;
pub(crate) mod rotary;
pub(crate) mod scaled_mm;
pub(crate) mod topk;

pub(crate) use backend::Cpu;
pub(crate) use buffer::CpuBuffer;

/// A buffer and the element its contiguous view starts at.
pub(crate) type At<'a> = (&'a CpuBuffer, usize);

/// The `n` elements of `T` from an [`At`]'s start.
pub(crate) fn at_slice<T: Elem>((buf, at): At<'_>, n: usize) -> &[T] {
    &buf.as_slice::<T>()[at..at + n]
}

use crate::dtype::Elem;
use crate::layout::Layout;
use crate::DType;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// Below this many elements a loop is not worth splitting across threads.
pub(crate) const PAR_MIN: usize = 1 << 15;

/// Copies the elements `layout` selects, in row-major order, converting each with `f`.
pub(crate) fn map_strided<A: Elem, O: Elem>(src: &[A], layout: &Layout, f: impl Fn(A) -> O + Sync) -> Vec<O> {
    let n = layout.numel();
    if layout.is_contiguous() {
        let s = &src[layout.offset..layout.offset + n];
        if n >= PAR_MIN {
            return s.par_iter().map(|&v| f(v)).collect();
        }
        return s.iter().map(|&v| f(v)).collect();
    }
    layout.offsets().map(|o| f(src[o])).collect()
}

/// `s` widened to f32 by `convert` (one chunk at a time, chunks over rayon).
fn widen<H: Sync>(s: &[H], convert: impl Fn(&[H], &mut [f32]) + Sync) -> CpuBuffer {
    let mut out = vec![0f32; s.len()];
    out.par_chunks_mut(PAR_MIN).zip(s.par_chunks(PAR_MIN)).for_each(|(d, s)| convert(s, d));
    CpuBuffer::from_vec(out)
}

/// `l` of `src` as f32 and the layout to read the result with. A view whose elements fill a
/// storage range in some order (a transposed weight, as `linear` multiplies it) is
/// widened as that range and keeps its strides: walked element by element, the
/// transposed bf16 weights cost a CPU prompt most of its time. Any other view is copied
/// contiguous.
pub(crate) fn to_f32_view(src: &CpuBuffer, l: &Layout, from: DType) -> (CpuBuffer, Layout) {
    if !l.is_dense() {
        return (cast(src, l, from, DType::F32), Layout::contiguous(&l.shape));
    }
    let range = Layout { offset: l.offset, ..Layout::contiguous(&[l.numel()]) };
    (cast(src, &range, from, DType::F32), Layout { offset: 0, ..l.clone() })
}

/// Strided copy with dtype conversion: the CPU half of `contiguous` and `to_dtype`.
/// float → float goes through f64 (exact, then PyTorch's rounding of the target);
/// integer ↔ integer and bool go through i128 so 64-bit values stay exact.
pub(crate) fn cast(src: &CpuBuffer, layout: &Layout, from: DType, to: DType) -> CpuBuffer {
    // bf16 / f16 → f32 is exact: `half`'s slice conversion, not each element through f64.
    // A prompt's matmuls widen every 16-bit weight this way, so this is their cost.
    if to == DType::F32 && layout.is_contiguous() {
        let r = layout.offset..layout.offset + layout.numel();
        match from {
            DType::BF16 => return widen(&src.as_slice::<half::bf16>()[r], |s, d| s.convert_to_f32_slice(d)),
            DType::F16 => return widen(&src.as_slice::<half::f16>()[r], |s, d| s.convert_to_f32_slice(d)),
            _ => {}
        }
    }
    crate::with_dtype!(from, A, {
        let s = src.as_slice::<A>();
        crate::with_dtype!(to, B, {
            let v: Vec<B> = if from == to {
                map_strided(s, layout, bytemuck::cast::<A, B>)
            } else if from.is_complex() || to.is_complex() {
                map_strided(s, layout, |x| B::from_complex(x.to_f64(), x.im()))
            } else if from.is_float() {
                map_strided(s, layout, |x| B::from_f64(x.to_f64()))
            } else {
                map_strided(s, layout, |x| B::from_i128(x.to_i128()))
            };
            CpuBuffer::from_vec(v)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 16-bit → f32 fast path gives every code's exact value (NaN stays NaN), at a
    /// length that spans several parallel chunks, from an offset view; a strided view
    /// (the general path) gives the same.
    #[test]
    fn widening_casts_are_exact() {
        let codes: Vec<u16> = (0..=u16::MAX).chain(0..PAR_MIN as u16).collect();
        let n = codes.len() - 3;
        let contiguous = Layout { offset: 3, ..Layout::contiguous(&[n]) };
        let strided = Layout { shape: vec![n / 2], strides: vec![2], offset: 3 };
        for dt in [DType::BF16, DType::F16] {
            let buf = CpuBuffer::from_vec(codes.clone());
            let want = |i: usize| match dt {
                DType::BF16 => half::bf16::from_bits(codes[i]).to_f32(),
                _ => half::f16::from_bits(codes[i]).to_f32(),
            };
            let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            let got = cast(&buf, &contiguous, dt, DType::F32);
            for (i, &v) in got.as_slice::<f32>().iter().enumerate() {
                assert!(same(v, want(i + 3)), "{dt:?} code {:#06x}: {v}", codes[i + 3]);
            }
            let got = cast(&buf, &strided, dt, DType::F32);
            for (i, &v) in got.as_slice::<f32>().iter().enumerate() {
                assert!(same(v, want(3 + 2 * i)), "{dt:?} strided code {:#06x}: {v}", codes[3 + 2 * i]);
            }
        }
    }

    /// A transposed (and a permuted 3-D) view keeps its strides and reads the same values
    /// as the contiguous copy; a view with gaps or a broadcast dim is copied.
    #[test]
    fn f32_views_of_dense_permutations_keep_strides() {
        let vals: Vec<half::bf16> = (0..60).map(|i| half::bf16::from_f32(i as f32 * 0.5 - 7.0)).collect();
        let buf = CpuBuffer::from_vec(vals);
        let transposed = Layout::contiguous(&[6, 10]).permute(&[1, 0]);
        let permuted = Layout::contiguous(&[3, 4, 5]).permute(&[2, 0, 1]);
        let gappy = Layout { shape: vec![5, 3], strides: vec![1, 10], offset: 2 };
        let broadcast = Layout { shape: vec![4, 5], strides: vec![0, 1], offset: 5 };
        for (l, keeps) in [(transposed, true), (permuted, true), (gappy, false), (broadcast, false)] {
            let (v, vl) = to_f32_view(&buf, &l, DType::BF16);
            assert_eq!(vl.strides == l.strides, keeps, "{l:?}");
            let got: Vec<f32> = vl.offsets().map(|o| v.as_slice::<f32>()[o]).collect();
            let want = cast(&buf, &l, DType::BF16, DType::F32);
            assert_eq!(got, want.as_slice::<f32>(), "{l:?}");
        }
    }
}
