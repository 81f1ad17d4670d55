//! One decode token of a Gated DeltaNet layer (the reference of `kernels/gated_delta.cu`),
//! in f32, the (batch, value head) pairs in parallel.

use super::{at_slice, At, CpuBuffer};
use crate::dtype::Elem;
use crate::DType;
use rayon::prelude::*;

/// The contiguous views of `ops/gated_delta.rs` (its docs give the shapes), dims
/// `[batch, hk, hv, dk, dv]` → `y [B, hv·dv]` in dt; the f32 state `[B, hv, dk, dv]` (from
/// element `state.1` of `state.0`) is updated in place.
pub fn gated_delta_step(
    [qkv, b, a, z]: [At; 4],
    state: (&mut CpuBuffer, usize),
    [neg_a, dt_bias, norm]: [At; 3],
    [batch, hk, hv, dk, dv]: [usize; 5],
    eps: f64,
    dt: DType,
) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let f = |x: T| x.to_f64() as f32;
        let channels = 2 * hk * dk + hv * dv;
        let (rows, heads) = (batch * hv, batch * hv * dv);
        let (qkv, b, a, z) = (
            at_slice::<T>(qkv, batch * channels),
            at_slice::<T>(b, rows),
            at_slice::<T>(a, rows),
            at_slice::<T>(z, heads),
        );
        let (neg_a, dt_bias, w) =
            (at_slice::<f32>(neg_a, hv), at_slice::<f32>(dt_bias, hv), at_slice::<f32>(norm, dv));
        let q_scale = 1.0 / (dk as f32).sqrt();
        let (buf, at) = state;
        let new_state = &mut buf.as_mut_slice::<f32>()[at..at + batch * hv * dk * dv];
        let mut y = vec![T::from_f64(0.0); batch * hv * dv];
        new_state.par_chunks_mut(dk * dv).zip(y.par_chunks_mut(dv)).enumerate().for_each(|(bh, (s, y))| {
            let (batch, h) = (bh / hv, bh % hv);
            let kh = h / (hv / hk);
            let row = &qkv[batch * channels..(batch + 1) * channels];
            let unit = |at: usize, scale: f32| -> Vec<f32> {
                let x: Vec<f32> = row[at..at + dk].iter().map(|&v| f(v)).collect();
                let r = 1.0 / (x.iter().map(|v| v * v).sum::<f32>() + 1e-6).sqrt() * scale;
                x.into_iter().map(|v| v * r).collect()
            };
            let (q, k) = (unit(kh * dk, q_scale), unit((hk + kh) * dk, 1.0));
            let av = f(a[bh]) + dt_bias[h];
            let decay = ((av.max(0.0) + (1.0 + (-av.abs()).exp()).ln()) * neg_a[h]).exp();
            let beta = 1.0 / (1.0 + (-f(b[bh])).exp());
            s.iter_mut().for_each(|v| *v *= decay);
            let v = &row[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
            let mut o = vec![0f32; dv];
            for j in 0..dv {
                let remembered: f32 = (0..dk).map(|i| k[i] * s[i * dv + j]).sum();
                let delta = (f(v[j]) - remembered) * beta;
                for i in 0..dk {
                    s[i * dv + j] += k[i] * delta;
                    o[j] += q[i] * s[i * dv + j];
                }
            }
            let inv = 1.0 / (o.iter().map(|v| v * v).sum::<f32>() / dv as f32 + eps as f32).sqrt();
            let zs = &z[bh * dv..(bh + 1) * dv];
            for j in 0..dv {
                let zv = f(zs[j]);
                y[j] = T::from_f64((o[j] * inv * w[j] * (zv / (1.0 + (-zv).exp()))) as f64);
            }
        });
        CpuBuffer::from_vec(y)
    })
}
