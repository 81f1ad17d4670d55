//! Row-wise top-k on contiguous rows.

use super::CpuBuffer;
use crate::dtype::Elem;
use crate::DType;
use rayon::prelude::*;

/// For each of `outer` rows of `r` elements: the `k` extreme values, sorted, and their
/// indices (ties: lower index first; NaN above every number).
pub fn topk(
    x: &CpuBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    k: usize,
    largest: bool,
) -> (CpuBuffer, CpuBuffer) {
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        let picked: Vec<(Vec<T>, Vec<i64>)> = (0..outer)
            .into_par_iter()
            .map(|row| {
                let vals = &x[row * r..(row + 1) * r];
                let key = |v: &T| if largest { v.to_f64() } else { -v.to_f64() };
                let mut idx: Vec<usize> = (0..r).collect();
                // Stable sort by descending key keeps lower indices first among ties;
                // NaN sorts first for `largest` (and, as in PyTorch, last otherwise).
                idx.sort_by(|&a, &b| {
                    let (ka, kb) = (key(&vals[a]), key(&vals[b]));
                    let nan = |v: &T| v.to_f64().is_nan();
                    match (nan(&vals[a]), nan(&vals[b])) {
                        (true, false) => {
                            if largest {
                                std::cmp::Ordering::Less
                            } else {
                                std::cmp::Ordering::Greater
                            }
                        }
                        (false, true) => {
                            if largest {
                                std::cmp::Ordering::Greater
                            } else {
                                std::cmp::Ordering::Less
                            }
                        }
                        _ => kb.total_cmp(&ka),
                    }
                });
                idx.truncate(k);
                (idx.iter().map(|&i| vals[i]).collect(), idx.iter().map(|&i| i as i64).collect())
            })
            .collect();
        let v: Vec<T> = picked.iter().flat_map(|p| p.0.iter().copied()).collect();
        let i: Vec<i64> = picked.iter().flat_map(|p| p.1.iter().copied()).collect();
        (CpuBuffer::from_vec(v), CpuBuffer::from_vec(i))
    })
}
