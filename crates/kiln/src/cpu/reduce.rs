//! Row reductions. `ops` moves the reduced dims last and makes the input contiguous, so
//! each kernel sees `outer` rows of `r` elements. Floats accumulate in f64, integers in
//! i128.

use super::CpuBuffer;
use crate::dtype::Elem;
use crate::ops::ReduceOp;
use crate::DType;
use rayon::prelude::*;

fn rows<T: Elem, O: Send>(x: &[T], r: usize, outer: usize, f: impl Fn(&[T]) -> O + Sync + Send) -> Vec<O> {
    if r == 0 {
        return (0..outer).map(|_| f(&[])).collect();
    }
    x[..outer * r].par_chunks(r).map(f).collect()
}

/// NaN-propagating max/min for floats (PyTorch semantics); first index wins ties.
fn arg_extreme(vals: impl Iterator<Item = f64>, want_max: bool) -> (usize, f64) {
    let mut best = (0usize, f64::NAN);
    for (i, v) in vals.enumerate() {
        if i == 0 || best.1.is_nan() {
            if i == 0 {
                best = (i, v);
            }
            continue;
        }
        if v.is_nan() || (want_max && v > best.1) || (!want_max && v < best.1) {
            best = (i, v);
        }
    }
    best
}

fn arg_extreme_int(vals: impl Iterator<Item = i128>, want_max: bool) -> (usize, i128) {
    let mut best = (0usize, 0i128);
    for (i, v) in vals.enumerate() {
        if i == 0 || (want_max && v > best.1) || (!want_max && v < best.1) {
            best = (i, v);
        }
    }
    best
}

/// Reduces rows of `x` (dtype `dt`) into one value each, of dtype `out`.
pub fn reduce(op: ReduceOp, x: &CpuBuffer, dt: DType, outer: usize, r: usize, out: DType) -> CpuBuffer {
    use ReduceOp::*;
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        crate::with_dtype!(out, O, {
            let v: Vec<O> = if dt.is_float() || dt.is_complex() {
                rows(x, r, outer, |row| {
                    let it = row.iter().map(|v| v.to_f64());
                    match op {
                        // fold from +0.0: Rust's f64 `sum` starts at -0.0, PyTorch's empty sum is 0.
                        Sum => O::from_complex(
                            it.fold(0.0, |a, b| a + b),
                            row.iter().fold(0.0, |a, v| a + v.im()),
                        ),
                        Prod => O::from_f64(it.product()),
                        Mean => O::from_f64(it.sum::<f64>() / r as f64),
                        Max => O::from_f64(arg_extreme(it, true).1),
                        Min => O::from_f64(arg_extreme(it, false).1),
                        ArgMax => O::from_i128(arg_extreme(it, true).0 as i128),
                        ArgMin => O::from_i128(arg_extreme(it, false).0 as i128),
                    }
                })
            } else {
                rows(x, r, outer, |row| {
                    let it = row.iter().map(|v| v.to_i128());
                    match op {
                        Sum => O::from_i128(it.fold(0i128, |a, b| a.wrapping_add(b))),
                        Prod => O::from_i128(it.fold(1i128, |a, b| a.wrapping_mul(b))),
                        Mean => O::from_f64(it.map(|v| v as f64).sum::<f64>() / r as f64),
                        Max => O::from_i128(arg_extreme_int(it, true).1),
                        Min => O::from_i128(arg_extreme_int(it, false).1),
                        ArgMax => O::from_i128(arg_extreme_int(it, true).0 as i128),
                        ArgMin => O::from_i128(arg_extreme_int(it, false).0 as i128),
                    }
                })
            };
            CpuBuffer::from_vec(v)
        })
    })
}

/// Per-row (variance with `correction`, mean), both in dtype `dt`, by a two-pass f64 sum.
pub fn var_mean(x: &CpuBuffer, dt: DType, outer: usize, r: usize, correction: f64) -> (CpuBuffer, CpuBuffer) {
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        let stats: Vec<[f64; 2]> = rows(x, r, outer, |row| {
            let mean = row.iter().map(|v| v.to_f64()).sum::<f64>() / r as f64;
            let ss: f64 = row.iter().map(|v| (v.to_f64() - mean).powi(2)).sum();
            let dof = r as f64 - correction;
            [if dof > 0.0 { ss / dof } else { f64::NAN }, mean]
        });
        let var: Vec<T> = stats.iter().map(|s| T::from_f64(s[0])).collect();
        let mean: Vec<T> = stats.iter().map(|s| T::from_f64(s[1])).collect();
        (CpuBuffer::from_vec(var), CpuBuffer::from_vec(mean))
    })
}
