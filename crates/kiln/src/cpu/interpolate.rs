//! Resampling along one dim by per-output taps (`ops::interpolate` computes the taps):
//! the forward pass gathers, the backward pass scatter-adds the same weights (its
//! adjoint). Values are f64 throughout, so a multi-dim resample is a chain of these with
//! one rounding at the end.

use rayon::prelude::*;

/// The input positions and weights one output position along a dim reads: one tap for
/// the nearest modes (a copy, so ±inf stays), two for linear (PyTorch's `l0·x0 + l1·x1`).
pub type Taps = Vec<(usize, f64)>;

/// (outer, inner) element counts around `dim` of `shape`.
fn around(shape: &[usize], dim: usize) -> (usize, usize) {
    (shape[..dim].iter().product(), shape[dim + 1..].iter().product())
}

/// `x` of `shape` (row-major) resampled along `dim` to `taps.len()` positions:
/// `y[o, j, i] = Σ_t w_t · x[o, idx_t, i]` over `taps[j]`.
pub fn resample(x: &[f64], shape: &[usize], dim: usize, taps: &[Taps]) -> Vec<f64> {
    let (outer, inner) = around(shape, dim);
    let (n_in, n_out) = (shape[dim], taps.len());
    let mut y = vec![0.0; outer * n_out * inner];
    if inner == 0 {
        return y;
    }
    y.par_chunks_mut(n_out * inner).enumerate().for_each(|(o, yo)| {
        let xo = &x[o * n_in * inner..(o + 1) * n_in * inner];
        for (yj, t) in yo.chunks_mut(inner).zip(taps) {
            for (k, &(idx, w)) in t.iter().enumerate() {
                for (y, x) in yj.iter_mut().zip(&xo[idx * inner..][..inner]) {
                    *y = if k == 0 { w * x } else { *y + w * x };
                }
            }
        }
    });
    y
}

/// The adjoint of [`resample`]: `g` of the output's shape (`shape` with `taps.len()` at
/// `dim`) scatter-added back to `n_in` positions along `dim`.
pub fn resample_adjoint(g: &[f64], shape: &[usize], dim: usize, taps: &[Taps], n_in: usize) -> Vec<f64> {
    let (outer, inner) = around(shape, dim);
    let n_out = taps.len();
    let mut x = vec![0.0; outer * n_in * inner];
    if inner == 0 {
        return x;
    }
    x.par_chunks_mut(n_in * inner).enumerate().for_each(|(o, xo)| {
        let go = &g[o * n_out * inner..(o + 1) * n_out * inner];
        for (gj, t) in go.chunks(inner).zip(taps) {
            for &(idx, w) in t.iter() {
                for (x, g) in xo[idx * inner..][..inner].iter_mut().zip(gj) {
                    *x += w * g;
                }
            }
        }
    });
    x
}
