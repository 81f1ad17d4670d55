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

/// Strided copy with dtype conversion: the CPU half of `contiguous` and `to_dtype`.
/// float → float goes through f64 (exact, then PyTorch's rounding of the target);
/// integer ↔ integer and bool go through i128 so 64-bit values stay exact.
pub(crate) fn cast(src: &CpuBuffer, layout: &Layout, from: DType, to: DType) -> CpuBuffer {
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
