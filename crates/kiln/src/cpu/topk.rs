//! Row-wise top-k and the fused routers on contiguous rows.

use super::CpuBuffer;
use crate::dtype::Elem;
use crate::DType;
use rayon::prelude::*;
use std::cmp::Ordering;

/// Order of two values for top-k: NaN above every number (NaNs equal), -0 == +0; floats
/// compared as f64, integers exactly.
fn value_order<T: Elem>(a: T, b: T, float: bool) -> Ordering {
    if !float {
        return a.to_i128().cmp(&b.to_i128());
    }
    let (a, b) = (a.to_f64(), b.to_f64());
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Indices of the `k` best of `vals` under `order`, best first; ties keep the lower index.
fn best_k<T: Copy>(vals: &[T], k: usize, order: impl Fn(T, T) -> Ordering) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..vals.len()).collect();
    idx.sort_by(|&a, &b| order(vals[b], vals[a])); // stable: equal values keep index order
    idx.truncate(k);
    idx
}

/// For each of `outer` rows of `r` elements: the `k` extreme values, sorted, and their
/// indices. `largest`: descending, NaN first; else ascending, NaN last (as in PyTorch).
pub fn topk(
    x: &CpuBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    k: usize,
    largest: bool,
) -> (CpuBuffer, CpuBuffer) {
    let float = dt.is_float();
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        let picked: Vec<(Vec<T>, Vec<i64>)> = (0..outer)
            .into_par_iter()
            .map(|row| {
                let vals = &x[row * r..(row + 1) * r];
                // NaN is the largest value, so it ranks last when the smallest are wanted.
                let idx = best_k(vals, k, |a, b| {
                    let o = value_order(a, b, float);
                    if largest {
                        o
                    } else {
                        o.reverse()
                    }
                });
                (idx.iter().map(|&i| vals[i]).collect(), idx.iter().map(|&i| i as i64).collect())
            })
            .collect();
        let v: Vec<T> = picked.iter().flat_map(|p| p.0.iter().copied()).collect();
        let i: Vec<i64> = picked.iter().flat_map(|p| p.1.iter().copied()).collect();
        (CpuBuffer::from_vec(v), CpuBuffer::from_vec(i))
    })
}

/// The router reference: per row of `r` logits, f32 scores (softmax, or sigmoid when
/// `sigmoid`), the k best by score (+ `bias`), their unbiased scores (divided by
/// their sum plus eps when `norm_eps`) and indices. Scores are computed in f64 and rounded to f32 before
/// selection, as the kernel selects on f32 scores.
#[allow(clippy::too_many_arguments)]
pub fn router_topk(
    x: &CpuBuffer,
    dt: DType,
    bias: Option<&[f32]>,
    outer: usize,
    r: usize,
    k: usize,
    sigmoid: bool,
    norm_eps: Option<f64>,
) -> (CpuBuffer, CpuBuffer) {
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        let picked: Vec<(Vec<f32>, Vec<i64>)> = (0..outer)
            .into_par_iter()
            .map(|row| {
                let logits: Vec<f64> = x[row * r..(row + 1) * r].iter().map(|v| v.to_f64()).collect();
                let scores: Vec<f32> = if sigmoid {
                    logits.iter().map(|&v| (1.0 / (1.0 + (-v).exp())) as f32).collect()
                } else {
                    let m = logits
                        .iter()
                        .fold(f64::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m });
                    let s: f64 = logits.iter().map(|&v| (v - m).exp()).sum();
                    logits.iter().map(|&v| ((v - m).exp() / s) as f32).collect()
                };
                let keys: Vec<f32> = match bias {
                    Some(b) => scores.iter().zip(b).map(|(s, b)| s + b).collect(),
                    None => scores.clone(),
                };
                let idx = best_k(&keys, k, |a, b| value_order(a, b, true));
                let w: Vec<f32> = idx.iter().map(|&i| scores[i]).collect();
                let w = match norm_eps {
                    Some(eps) => {
                        let total: f32 = w.iter().sum();
                        w.iter().map(|v| v / (total + eps as f32)).collect()
                    }
                    None => w,
                };
                (w, idx.iter().map(|&i| i as i64).collect())
            })
            .collect();
        let w: Vec<f32> = picked.iter().flat_map(|p| p.0.iter().copied()).collect();
        let i: Vec<i64> = picked.iter().flat_map(|p| p.1.iter().copied()).collect();
        (CpuBuffer::from_vec(w), CpuBuffer::from_vec(i))
    })
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Router, Tensor};

    fn t(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_slice(v, shape, Device::Cpu).unwrap()
    }

    #[test]
    fn ties_nan_and_zeros() {
        let x = t(&[1.0, f32::NAN, 3.0, 3.0, -0.0, 0.0, f32::NAN, -1.0], &[8]);
        let (v, i) = x.topk(4, 0, true).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), [1, 6, 2, 3]);
        assert!(v.to_vec::<f32>().unwrap()[..2].iter().all(|v| v.is_nan()));
        // Smallest: NaN last; -0 and +0 tie, lower index first.
        let (v, i) = x.topk(4, 0, false).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), [7, 4, 5, 0]);
        assert_eq!(v.to_vec::<f32>().unwrap(), [-1.0, -0.0, 0.0, 1.0]);
        let (_, i) = x.topk(8, 0, false).unwrap();
        assert_eq!(&i.to_vec::<i64>().unwrap()[6..], [1, 6]);
    }

    #[test]
    fn integers_compare_exactly() {
        let big = 1i64 << 60;
        let x = Tensor::from_slice(&[big, big + 1, big - 1, big + 1], &[4], Device::Cpu).unwrap();
        let (v, i) = x.topk(2, 0, true).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), [1, 3]);
        assert_eq!(v.to_vec::<i64>().unwrap(), [big + 1, big + 1]);
    }

    #[test]
    fn other_dims() {
        let x = Tensor::randn(&[5, 7, 3], 1, DType::F32, Device::Cpu).unwrap();
        let (v, i) = x.topk(2, 1, true).unwrap();
        assert_eq!(v.shape(), [5, 2, 3]);
        let xs = x.to_vec::<f32>().unwrap();
        let (vs, is) = (v.to_vec::<f32>().unwrap(), i.to_vec::<i64>().unwrap());
        for a in 0..5 {
            for c in 0..3 {
                let col: Vec<f32> = (0..7).map(|b| xs[a * 21 + b * 3 + c]).collect();
                let mut sorted = col.clone();
                sorted.sort_by(|p, q| q.total_cmp(p));
                for k in 0..2 {
                    assert_eq!(vs[a * 6 + k * 3 + c], sorted[k]);
                    assert_eq!(col[is[a * 6 + k * 3 + c] as usize], sorted[k]);
                }
            }
        }
    }

    #[test]
    fn softmax_router_is_softmax_then_topk() {
        let x = Tensor::randn(&[3, 64], 2, DType::F32, Device::Cpu).unwrap();
        let (w, i) = x.router_topk(8, Router::Softmax, None).unwrap();
        let (pv, pi) = x.softmax(-1).unwrap().topk(8, -1, true).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), pi.to_vec::<i64>().unwrap());
        for (a, b) in w.to_vec::<f32>().unwrap().iter().zip(pv.to_vec::<f32>().unwrap()) {
            assert!((a - b).abs() <= 1e-7, "{a} vs {b}");
        }
        let (w, _) = x.router_topk(8, Router::Softmax, Some(0.0)).unwrap();
        for row in w.to_vec::<f32>().unwrap().chunks(8) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn sigmoid_router_selects_by_bias_weights_without() {
        let x = t(&[0.0, 1.0, 2.0, 3.0], &[1, 4]);
        let bias = t(&[5.0, 0.0, 0.0, 0.0], &[4]);
        let (w, i) = x.router_topk(2, Router::Sigmoid { bias: Some(&bias) }, None).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), [0, 3]);
        let s = |v: f64| (1.0 / (1.0 + (-v).exp())) as f32;
        assert_eq!(w.to_vec::<f32>().unwrap(), [s(0.0), s(3.0)]);
        let (w, i) = x.router_topk(2, Router::Sigmoid { bias: None }, Some(1e-6)).unwrap();
        assert_eq!(i.to_vec::<i64>().unwrap(), [3, 2]);
        let total = s(3.0) + s(2.0);
        assert_eq!(w.to_vec::<f32>().unwrap(), [s(3.0) / (total + 1e-6), s(2.0) / (total + 1e-6)]);
        assert!(x.router_topk(5, Router::Softmax, None).is_err());
        assert!(x.router_topk(2, Router::Sigmoid { bias: Some(&t(&[1.0], &[1])) }, None).is_err());
    }
}
