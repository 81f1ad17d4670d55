//! Row-wise neural-network ops on contiguous rows (ops moves the dim last).

use super::CpuBuffer;
use crate::dtype::Elem;
use crate::DType;
use rayon::prelude::*;

/// softmax (or log_softmax) of each row of `r` elements, computed in f64.
pub fn softmax(x: &CpuBuffer, dt: DType, r: usize, log: bool) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        let mut out = vec![T::from_f64(0.0); x.len()];
        if r > 0 {
            out.par_chunks_mut(r).zip(x.par_chunks(r)).for_each(|(o, row)| {
                let max = row.iter().map(|v| v.to_f64()).fold(f64::NEG_INFINITY, |m, v| {
                    if v > m || v.is_nan() {
                        v
                    } else {
                        m
                    }
                });
                // A row of -inf has max -inf: x - max is NaN, as in PyTorch.
                let sum: f64 = row.iter().map(|v| (v.to_f64() - max).exp()).sum();
                for (o, v) in o.iter_mut().zip(row) {
                    let z = v.to_f64() - max;
                    *o = T::from_f64(if log { z - sum.ln() } else { z.exp() / sum });
                }
            });
        }
        CpuBuffer::from_vec(out)
    })
}

/// `x / sqrt(mean(x²) + eps) * weight` over rows of `r`; `weight` has `r` elements.
pub fn rms_norm(x: &CpuBuffer, w: Option<&CpuBuffer>, dt: DType, r: usize, eps: f64) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        let w = w.map(|w| w.as_slice::<T>());
        let mut out = vec![T::from_f64(0.0); x.len()];
        if r > 0 {
            out.par_chunks_mut(r).zip(x.par_chunks(r)).for_each(|(o, row)| {
                let ms = row.iter().map(|v| v.to_f64().powi(2)).sum::<f64>() / r as f64;
                let inv = 1.0 / (ms + eps).sqrt();
                for (i, (o, v)) in o.iter_mut().zip(row).enumerate() {
                    let scale = w.map_or(1.0, |w| w[i].to_f64());
                    *o = T::from_f64(v.to_f64() * inv * scale);
                }
            });
        }
        CpuBuffer::from_vec(out)
    })
}
