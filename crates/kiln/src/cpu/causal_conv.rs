//! The causal depthwise convolution with a carried state (the reference of
//! `kernels/causal_conv.cu`), in f64, one rounding per output.

use super::{at_slice, At};
use crate::dtype::Elem;
use crate::DType;

/// `y` `[B, T, C]` of `x` `[B, T, C]` over the window `[state, x]` (`state` `[B, K−1, C]`,
/// overwritten with the window's last K−1 rows), taps `w` `[C, K]`, `bias` `[C]`: contiguous
/// slices of dtype `dt`, dims `[B, T, C, K]`.
pub fn causal_conv<T: Elem>(
    x: &[T],
    state: &mut [T],
    w: &[T],
    bias: Option<&[T]>,
    [b, t, c, k]: [usize; 4],
    silu: bool,
) -> Vec<T> {
    let mut y = vec![T::from_f64(0.0); b * t * c];
    let keep = k - 1;
    for bi in 0..b {
        let (xb, sb) = (&x[bi * t * c..(bi + 1) * t * c], &mut state[bi * keep * c..(bi + 1) * keep * c]);
        // The window's input at step p of [state, x] (p < K−1: the state).
        let input = |sb: &[T], p: usize, ch: usize| {
            if p < keep {
                sb[p * c + ch].to_f64()
            } else {
                xb[(p - keep) * c + ch].to_f64()
            }
        };
        for s in 0..t {
            for ch in 0..c {
                let mut v = bias.map_or(0.0, |b| b[ch].to_f64());
                for j in 0..k {
                    v += w[ch * k + j].to_f64() * input(sb, s + j, ch);
                }
                if silu {
                    v /= 1.0 + (-v).exp();
                }
                y[(bi * t + s) * c + ch] = T::from_f64(v);
            }
        }
        let next: Vec<T> = (0..keep * c).map(|i| T::from_f64(input(sb, t + i / c, i % c))).collect();
        sb.copy_from_slice(&next);
    }
    y
}

/// Dispatches [`causal_conv`] on `dt` over contiguous views of raw buffers; the state is
/// the `B·(K−1)·C` elements of `state` from element `state_at`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn causal_conv_buffers(
    x: At,
    state: &mut super::CpuBuffer,
    state_at: usize,
    w: At,
    bias: Option<At>,
    dims: [usize; 4],
    silu: bool,
    dt: DType,
) -> super::CpuBuffer {
    let [b, t, c, k] = dims;
    crate::with_dtype!(dt, T, {
        let s = &mut state.as_mut_slice::<T>()[state_at..state_at + b * (k - 1) * c];
        let y = causal_conv(
            at_slice::<T>(x, b * t * c),
            s,
            at_slice::<T>(w, c * k),
            bias.map(|v| at_slice::<T>(v, c)),
            dims,
            silu,
        );
        super::CpuBuffer::from_vec(y)
    })
}
