//! Decode-time `x @ w.T` on the CPU: a few rows of `x` against a contiguous `[N, K]`
//! weight stored as f32, bf16 or f16, computed in f32. Memory-bound (every weight byte is
//! read once per call), so it splits the weight's rows across the rayon pool and reads
//! 16-bit weights as stored, widening one row at a time into an L1-resident scratch row.
//! The dot products keep 16 partial sums, a shape LLVM vectorises; on x86-64 with AVX2 and
//! FMA (checked at run time) the same loop is compiled for them.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

/// At most this many rows of `x` take this path (decode and short prompts); more go to
/// the blocked GEMM, which reuses each weight tile across rows.
pub const MAX_ROWS: usize = 8;

/// Weight rows per parallel task: enough work to amortise the task, few enough that both
/// cores stay busy on small layers.
const ROWS_PER_TASK: usize = 32;

/// Partial sums per dot product.
const LANES: usize = 16;

/// A weight element type this path reads as stored.
pub trait WeightElem: Copy + Send + Sync {
    /// `src` widened to f32 into `dst` (same length); f32 weights skip the copy.
    fn widen<'a>(src: &'a [Self], dst: &'a mut [f32]) -> &'a [f32];
}

impl WeightElem for f32 {
    fn widen<'a>(src: &'a [f32], _dst: &'a mut [f32]) -> &'a [f32] {
        src
    }
}

impl WeightElem for bf16 {
    fn widen<'a>(src: &'a [bf16], dst: &'a mut [f32]) -> &'a [f32] {
        src.convert_to_f32_slice(dst);
        dst
    }
}

impl WeightElem for f16 {
    fn widen<'a>(src: &'a [f16], dst: &'a mut [f32]) -> &'a [f32] {
        src.convert_to_f32_slice(dst);
        dst
    }
}

#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_lanes(a, b)
}

/// `a · b` over equal-length slices.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above), the only
        // precondition of calling a function compiled with those target features.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

/// `y[r, j] = x[r, :] · w[j, :] (+ bias[j])` for `x` `[rows, k]` (f32, contiguous) and `w`
/// `[n, k]` (contiguous): the `[rows, n]` f32 result.
pub fn linear<W: WeightElem>(
    x: &[f32],
    rows: usize,
    k: usize,
    w: &[W],
    n: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    debug_assert!(x.len() == rows * k && w.len() == n * k);
    // Column-major while computing (each task owns a run of weight rows), transposed after.
    let mut yt = vec![0f32; n * rows];
    if rows > 0 && k > 0 {
        yt.par_chunks_mut(ROWS_PER_TASK * rows).enumerate().for_each(|(t, out)| {
            let mut scratch = vec![0f32; k];
            for (i, o) in out.chunks_mut(rows).enumerate() {
                let j = t * ROWS_PER_TASK + i;
                let wr = W::widen(&w[j * k..(j + 1) * k], &mut scratch);
                for (r, o) in o.iter_mut().enumerate() {
                    *o = dot(&x[r * k..(r + 1) * k], wr);
                }
            }
        });
    }
    let mut y = vec![0f32; rows * n];
    for (j, col) in yt.chunks(rows.max(1)).enumerate().take(n) {
        let b = bias.map_or(0.0, |b| b[j]);
        for (r, v) in col.iter().enumerate() {
            y[r * n + j] = v + b;
        }
    }
    y
}
