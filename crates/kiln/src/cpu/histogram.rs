//! bincount on contiguous int64 values.

use super::CpuBuffer;
use crate::DType;

/// Counts (int64) of each value in `0..nbins`, or sums of the f32 / f64 `weights` (same
/// dtype out); values outside the bins are dropped.
pub fn bincount(x: &CpuBuffer, weights: Option<(&CpuBuffer, DType)>, n: usize, nbins: usize) -> CpuBuffer {
    let x = &x.as_slice::<i64>()[..n];
    let bins = || {
        x.iter()
            .enumerate()
            .filter_map(|(i, &v)| usize::try_from(v).ok().filter(|&b| b < nbins).map(|b| (i, b)))
    };
    match weights {
        None => {
            let mut out = vec![0i64; nbins];
            bins().for_each(|(_, b)| out[b] += 1);
            CpuBuffer::from_vec(out)
        }
        Some((w, DType::F32)) => {
            // Summed in f64, rounded once.
            let w = w.as_slice::<f32>();
            let mut acc = vec![0f64; nbins];
            bins().for_each(|(i, b)| acc[b] += w[i] as f64);
            CpuBuffer::from_vec(acc.into_iter().map(|v| v as f32).collect::<Vec<f32>>())
        }
        Some((w, _)) => {
            let w = w.as_slice::<f64>();
            let mut out = vec![0f64; nbins];
            bins().for_each(|(i, b)| out[b] += w[i]);
            CpuBuffer::from_vec(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    fn ints(v: &[i64]) -> Tensor {
        Tensor::from_slice(v, &[v.len()], Device::Cpu).unwrap()
    }

    #[test]
    fn counts_and_lengths() {
        let x = ints(&[1, 1, 4, 0, 1]);
        assert_eq!(x.bincount(None, 0).unwrap().to_vec::<i64>().unwrap(), [1, 3, 0, 0, 1]);
        assert_eq!(x.bincount(None, 7).unwrap().to_vec::<i64>().unwrap(), [1, 3, 0, 0, 1, 0, 0]);
        assert_eq!(ints(&[]).bincount(None, 3).unwrap().to_vec::<i64>().unwrap(), [0, 0, 0]);
        assert!(ints(&[2, -1]).bincount(None, 0).is_err());
        // Bounded: values outside the bins are dropped.
        let b = ints(&[2, -1, 9, 0, 2]).bincount_bounded(None, 3).unwrap();
        assert_eq!(b.to_vec::<i64>().unwrap(), [1, 0, 2]);
        let i32s = x.to_dtype(DType::I32).unwrap().bincount(None, 0).unwrap();
        assert_eq!(i32s.dtype(), DType::I64);
    }

    #[test]
    fn weights_follow_pytorch_dtypes() {
        let x = ints(&[0, 2, 2]);
        let w = Tensor::from_slice(&[0.5f32, 1.25, 2.0], &[3], Device::Cpu).unwrap();
        let out = x.bincount(Some(&w), 0).unwrap();
        assert_eq!(out.dtype(), DType::F32);
        assert_eq!(out.to_vec::<f32>().unwrap(), [0.5, 0.0, 3.25]);
        let out = x.bincount(Some(&w.to_dtype(DType::F16).unwrap()), 0).unwrap();
        assert_eq!(out.dtype(), DType::F64);
        assert_eq!(out.to_vec::<f64>().unwrap(), [0.5, 0.0, 3.25]);
        assert!(x.bincount(Some(&w.narrow(0, 0, 2).unwrap()), 0).is_err());
    }
}
