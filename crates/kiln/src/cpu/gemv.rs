//! Decode-time `x @ w.T` on the CPU: a few rows of `x` against a contiguous `[N, K]`
//! weight stored as f32, bf16 or f16, computed in f32. Memory-bound (every weight byte is
//! read once per call), so it splits the weight's rows into a few long runs per rayon
//! thread (each run one sequential stream for the prefetcher) and reads 16-bit weights as
//! stored.
//!
//! Three kernels, picked at run time ([`Simd`]):
//! - AVX-512 (x86-64 with `avx512f`) and AVX2 (`avx2`, `fma`, `f16c`): the widening is
//!   fused into the dot product (bf16 is a zero-extend and a shift, f16 `vcvtph2ps`), 32
//!   weights per step in explicit FMAs over independent accumulators (enough to hide the
//!   FMA latency at memory speed), no scratch row; they stream at the memory's rate where
//!   the portable kernel did not.
//! - portable: 16-bit rows widened into an L1-resident scratch row, then a dot product
//!   with 16 partial sums (a shape LLVM vectorises).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

/// At most this many rows of `x` take this path (decode and short prompts); more go to
/// the blocked GEMM, which reuses each weight tile across rows.
pub const MAX_ROWS: usize = 8;

/// Runs of weight rows per rayon thread: several, so a thread that starts late (woken from
/// sleep) can leave some to the other, few, so each run is a long sequential stream.
const TASKS_PER_THREAD: usize = 4;

/// Partial sums per portable dot product.
const LANES: usize = 16;

/// A weight element type this path reads as stored.
pub trait WeightElem: Copy + Send + Sync {
    /// `src` widened to f32 into `dst` (same length); f32 weights skip the copy.
    fn widen<'a>(src: &'a [Self], dst: &'a mut [f32]) -> &'a [f32];
    /// One element as f32 (the SIMD kernels' tail).
    fn to_f32(self) -> f32;
    /// 8 elements from `p` widened to f32.
    ///
    /// # Safety
    /// `p..p + 8` must be readable and the CPU must support AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    /// 16 elements from `p` widened to f32.
    ///
    /// # Safety
    /// `p..p + 16` must be readable and the CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
}

impl WeightElem for f32 {
    fn widen<'a>(src: &'a [f32], _dst: &'a mut [f32]) -> &'a [f32] {
        src
    }
    fn to_f32(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller's contract (8 readable elements, AVX).
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: the caller's contract (16 readable elements, AVX-512F).
        unsafe { std::arch::x86_64::_mm512_loadu_ps(p) }
    }
}

impl WeightElem for bf16 {
    fn widen<'a>(src: &'a [bf16], dst: &'a mut [f32]) -> &'a [f32] {
        src.convert_to_f32_slice(dst);
        dst
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const bf16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract; a bf16 is the top half of the f32 it stands for.
        unsafe {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()))))
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const bf16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract; a bf16 is the top half of the f32 it stands for.
        unsafe {
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast()))))
        }
    }
}

impl WeightElem for f16 {
    fn widen<'a>(src: &'a [f16], dst: &'a mut [f32]) -> &'a [f32] {
        src.convert_to_f32_slice(dst);
        dst
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract (vcvtph2ps on 256 bits is F16C).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: the caller's contract (vcvtph2ps on 512 bits is AVX-512F).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
}

/// `a · b` over equal-length slices (the portable kernel).
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
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

/// `x · w` with `w` widened on the fly: 32 elements per step in two 16-wide accumulators,
/// the tail in scalar.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot_avx512<W: WeightElem>(x: &[f32], w: &[W]) -> f32 {
    use std::arch::x86_64::*;
    debug_assert_eq!(x.len(), w.len());
    let full = x.len() / 32 * 32;
    let (xp, wp) = (x.as_ptr(), w.as_ptr());
    let (mut a0, mut a1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    for c in (0..full).step_by(32) {
        // SAFETY: c + 32 <= full <= len of both slices; AVX-512F is this function's feature.
        unsafe {
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(c)), W::load16(wp.add(c)), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(c + 16)), W::load16(wp.add(c + 16)), a1);
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(a0, a1)) + tail_dot(&x[full..], &w[full..])
}

/// `x · w` with `w` widened on the fly: 32 elements per step in four 8-wide accumulators
/// (FMA latency 4 cycles, two per cycle), the tail in scalar.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2<W: WeightElem>(x: &[f32], w: &[W]) -> f32 {
    use std::arch::x86_64::*;
    debug_assert_eq!(x.len(), w.len());
    let full = x.len() / 32 * 32;
    let (xp, wp) = (x.as_ptr(), w.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    for c in (0..full).step_by(32) {
        for (i, a) in acc.iter_mut().enumerate() {
            let o = c + 8 * i;
            // SAFETY: o + 8 <= full <= len of both slices; AVX2, FMA and F16C are this
            // function's features.
            *a = unsafe { _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(o)), W::load8(wp.add(o)), *a) };
        }
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s))) + tail_dot(&x[full..], &w[full..])
}

fn tail_dot<W: WeightElem>(x: &[f32], w: &[W]) -> f32 {
    x.iter().zip(w).map(|(a, b)| a * b.to_f32()).sum()
}

/// The dot-product kernel this CPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    /// `avx512f`: 16 lanes, widening fused.
    Avx512,
    /// `avx2` + `fma` + `f16c`: 8 lanes, widening fused.
    Avx2,
    /// Widened into a scratch row, then a vectorisable dot product.
    Portable,
}

/// The fastest kernel this CPU supports (std caches the feature tests).
pub fn simd() -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx512f") {
            return Simd::Avx512;
        }
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            return Simd::Avx2;
        }
    }
    Simd::Portable
}

/// Whether 16-bit weights stream at the memory's rate here (a fused kernel), so that bf16
/// weights decode faster than f32 ones: half the bytes. The portable kernel's widening
/// pass makes bf16 slower than f32 (SmolLM2-135M on a 2-core Xeon: 19 vs 26 tokens/s;
/// fused AVX-512: 41–42 vs 28; fused AVX2 on a 2-core EPYC: 28–35 vs 20–22).
pub fn fast_16bit_weights() -> bool {
    simd() != Simd::Portable
}

/// `x · w` for f32 `x` and `w` as stored with `kernel` (from [`simd`]): widened on the fly
/// by the SIMD kernels, else through `scratch` (at least `w.len()` long).
fn dot_with<W: WeightElem>(kernel: Simd, x: &[f32], w: &[W], scratch: &mut [f32]) -> f32 {
    match kernel {
        // SAFETY: `simd()` detected AVX-512F; `x` and `w` have the same length.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx512 => unsafe { dot_avx512(x, w) },
        // SAFETY: `simd()` detected AVX2, FMA and F16C; `x` and `w` have the same length.
        #[cfg(target_arch = "x86_64")]
        Simd::Avx2 => unsafe { dot_avx2(x, w) },
        _ => dot(x, W::widen(w, &mut scratch[..w.len()])),
    }
}

/// `x · w` for f32 `x` and `w` as stored, with the fastest kernel here; `scratch` (at least
/// `w.len()` long) serves the portable one.
pub(crate) fn dot_widened<W: WeightElem>(x: &[f32], w: &[W], scratch: &mut [f32]) -> f32 {
    dot_with(simd(), x, w, scratch)
}

/// `out[i * rows + r] = x[r, :] · w[j0 + i, :]` for the weight rows `j0..` that `out`
/// covers (`out` column-major, `rows` per weight row).
fn rows_into<W: WeightElem>(x: &[f32], rows: usize, k: usize, w: &[W], j0: usize, out: &mut [f32]) {
    let kernel = simd();
    // The portable kernel widens a weight row once into `scratch`, for every row of x.
    let mut scratch = if kernel == Simd::Portable { vec![0f32; k] } else { Vec::new() };
    for (o, wr) in out.chunks_mut(rows).zip(w[j0 * k..].chunks_exact(k)) {
        if kernel == Simd::Portable {
            let wr = W::widen(wr, &mut scratch);
            for (r, o) in o.iter_mut().enumerate() {
                *o = dot(&x[r * k..(r + 1) * k], wr);
            }
        } else {
            for (r, o) in o.iter_mut().enumerate() {
                *o = dot_with(kernel, &x[r * k..(r + 1) * k], wr, &mut []);
            }
        }
    }
}

/// [`linear`] with the weight `[n, k]` at element `at` of a contiguous f32 / bf16 / f16
/// buffer of dtype `dt`, read as stored.
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_of(
    x: &[f32],
    rows: usize,
    k: usize,
    (w, at): super::At,
    n: usize,
    dt: crate::DType,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    match dt {
        crate::DType::BF16 => linear(x, rows, k, &w.as_slice::<bf16>()[at..at + n * k], n, bias),
        crate::DType::F16 => linear(x, rows, k, &w.as_slice::<f16>()[at..at + n * k], n, bias),
        _ => linear(x, rows, k, &w.as_slice::<f32>()[at..at + n * k], n, bias),
    }
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
        let per_task = n.div_ceil(rayon::current_num_threads() * TASKS_PER_THREAD).max(1);
        yt.par_chunks_mut(per_task * rows)
            .enumerate()
            .for_each(|(t, out)| rows_into(x, rows, k, w, t * per_task, out));
    }
    if rows == 1 {
        if let Some(b) = bias {
            yt.iter_mut().zip(b).for_each(|(y, b)| *y += b);
        }
        return yt;
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

/// SwiGLU of `y` `[rows, 2·I]` (gate, then up, per row): `[rows, I]` of
/// `silu(gate) · up`, in f32.
pub(crate) fn swiglu_rows(y: &[f32], rows: usize, n: usize) -> Vec<f32> {
    let i = n / 2;
    let mut out = Vec::with_capacity(rows * i);
    for r in y.chunks_exact(n).take(rows) {
        let (gate, up) = r.split_at(i);
        out.extend(gate.iter().zip(up).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel this CPU has against an f64 dot product, at lengths around the 8-, 16-
    /// and 32-wide steps, for f32, bf16 and f16 weights.
    #[test]
    fn kernels_agree_with_f64() {
        let mut kernels = vec![Simd::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if simd() != Simd::Portable {
                kernels.push(Simd::Avx2);
            }
            if simd() == Simd::Avx512 {
                kernels.push(Simd::Avx512);
            }
        }
        fn want<W: WeightElem>(x: &[f32], w: &[W]) -> f64 {
            x.iter().zip(w).map(|(a, b)| *a as f64 * b.to_f32() as f64).sum()
        }
        for k in [1, 7, 8, 15, 16, 31, 33, 47, 64, 577] {
            let x: Vec<f32> = (0..k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
            let w: Vec<f32> = (0..k).map(|i| ((i * 11 % 17) as f32 - 8.0) / 8.0).collect();
            let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v * 1.01)).collect();
            let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v * 0.99)).collect();
            let mut scratch = vec![0f32; k];
            for &kernel in &kernels {
                let close = |got: f32, want: f64| (got as f64 - want).abs() <= 1e-5 * (1.0 + want.abs());
                let got = dot_with(kernel, &x, &w, &mut scratch);
                assert!(close(got, want(&x, &w)), "{kernel:?} f32 k={k}: {got}");
                let got = dot_with(kernel, &x, &wb, &mut scratch);
                assert!(close(got, want(&x, &wb)), "{kernel:?} bf16 k={k}: {got}");
                let got = dot_with(kernel, &x, &wh, &mut scratch);
                assert!(close(got, want(&x, &wh)), "{kernel:?} f16 k={k}: {got}");
            }
        }
    }
}
