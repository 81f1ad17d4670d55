//! Loss functions on contiguous operands of one shape.

use super::CpuBuffer;
use crate::dtype::Elem;
use crate::ops::Reduction;
use crate::DType;

/// `(a - b)²` of `n` elements per element, or its sum / mean, in f64.
pub fn mse(a: &CpuBuffer, b: &CpuBuffer, dt: DType, n: usize, red: Reduction) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let (a, b) = (&a.as_slice::<T>()[..n], &b.as_slice::<T>()[..n]);
        let sq = a.iter().zip(b).map(|(x, y)| (x.to_f64() - y.to_f64()).powi(2));
        let v: Vec<T> = match red {
            Reduction::None => sq.map(T::from_f64).collect(),
            Reduction::Sum => vec![T::from_f64(sq.sum())],
            Reduction::Mean => vec![T::from_f64(sq.sum::<f64>() / n as f64)],
        };
        CpuBuffer::from_vec(v)
    })
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Reduction, Tensor};

    #[test]
    fn mse_reductions_and_shapes() {
        let a = Tensor::from_slice(&[1.0f32, 2.0, 4.0, 0.0], &[2, 2], Device::Cpu).unwrap();
        let b = Tensor::from_slice(&[0.0f32, 2.0], &[2], Device::Cpu).unwrap();
        let none = a.mse_loss(&b, Reduction::None).unwrap();
        assert_eq!(none.shape(), [2, 2]);
        assert_eq!(none.to_vec::<f32>().unwrap(), [1.0, 0.0, 16.0, 4.0]);
        let sum = a.mse_loss(&b, Reduction::Sum).unwrap();
        assert_eq!(sum.shape(), [] as [usize; 0]);
        assert_eq!(sum.item().unwrap(), 21.0);
        assert_eq!(a.mse_loss(&b, Reduction::Mean).unwrap().item().unwrap(), 5.25);
        let e = Tensor::zeros(&[0], DType::F32, Device::Cpu).unwrap();
        assert!(e.mse_loss(&e, Reduction::Mean).unwrap().item().unwrap().is_nan());
        assert!(a.mse_loss(&b.to_dtype(DType::F64).unwrap(), Reduction::Sum).is_err());
        assert!(a
            .to_dtype(DType::I32)
            .unwrap()
            .mse_loss(&a.to_dtype(DType::I32).unwrap(), Reduction::Sum)
            .is_err());
    }
}
