//! Creation ops. Random tensors use a counter-based generator (element i's value is a
//! hash of (seed, i)), so the CPU and the GPU produce the same numbers for a seed.

use crate::backend::{on_backend, Backend};
use crate::cpu::CpuBuffer;
use crate::error::{Error, Result};
use crate::{DType, Device, Elem, Tensor};

/// Distribution of `Tensor::rand` / `randn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RandKind {
    /// U[0, 1)
    Uniform,
    /// N(0, 1)
    Normal,
}

fn check_creatable(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_complex() {
        return Err(Error::DTypeNotSupported { op, got: dtype, expected: "a real dtype" });
    }
    Ok(())
}

impl Tensor {
    /// A tensor of `shape` filled with `value` (converted to `dtype` as PyTorch would).
    pub fn full(shape: &[usize], value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        crate::alloc_check::check_output("full", shape, dtype, device)?;
        let n = crate::layout::numel(shape);
        let storage = on_backend!(device: device, |B| B::wrap(B::fill(device, n, dtype, value)?));
        Ok(Tensor::from_storage(storage, shape, dtype, device))
    }

    /// A tensor of `shape` filled with zeros.
    pub fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Self::full(shape, 0.0, dtype, device)
    }

    /// A tensor of `shape` filled with ones.
    pub fn ones(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
        Self::full(shape, 1.0, dtype, device)
    }

    /// Zeros of this tensor's shape, dtype and device.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Self::zeros(self.shape(), self.dtype, self.device)
    }

    /// `value` in this tensor's shape, dtype and device.
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Self::full(self.shape(), value, self.dtype, self.device)
    }

    /// A 0-dim tensor.
    pub fn scalar(value: f64, dtype: DType, device: Device) -> Result<Tensor> {
        Self::full(&[], value, dtype, device)
    }

    /// `start, start+step, …` up to but excluding `end`.
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType, device: Device) -> Result<Tensor> {
        check_creatable("arange", dtype)?;
        if step == 0.0 || !step.is_finite() || (end - start) / step < 0.0 {
            return Err(Error::invalid("arange", format!("bad range {start}..{end} step {step}")));
        }
        let n = ((end - start) / step).ceil() as usize;
        crate::alloc_check::check_output("arange", &[n], dtype, device)?;
        let storage = on_backend!(device: device, |B| B::wrap(B::arange(device, n, dtype, start, step)?));
        Ok(Tensor::from_storage(storage, &[n], dtype, device))
    }

    /// `steps` values evenly spaced from `start` to `end` inclusive (PyTorch's formula:
    /// the first half counts up from `start`, the second half down from `end`).
    pub fn linspace(start: f64, end: f64, steps: usize, dtype: DType, device: Device) -> Result<Tensor> {
        check_creatable("linspace", dtype)?;
        let step = if steps > 1 { (end - start) / (steps - 1) as f64 } else { 0.0 };
        let half = steps / 2;
        Self::from_f64_fn(steps, dtype, device, |i| {
            if i < half {
                start + step * i as f64
            } else {
                end - step * (steps - 1 - i) as f64
            }
        })
    }

    /// `base ** linspace(start, end, steps)`.
    pub fn logspace(
        start: f64,
        end: f64,
        steps: usize,
        base: f64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        check_creatable("logspace", dtype)?;
        let step = if steps > 1 { (end - start) / (steps - 1) as f64 } else { 0.0 };
        let half = steps / 2;
        Self::from_f64_fn(steps, dtype, device, |i| {
            let e = if i < half { start + step * i as f64 } else { end - step * (steps - 1 - i) as f64 };
            base.powf(e)
        })
    }

    fn from_f64_fn(n: usize, dtype: DType, device: Device, f: impl Fn(usize) -> f64) -> Result<Tensor> {
        crate::alloc_check::check_output("range", &[n], dtype, Device::Cpu)?;
        let buf = crate::with_dtype!(
            dtype,
            T,
            CpuBuffer::from_vec((0..n).map(|i| T::from_f64(f(i))).collect::<Vec<T>>())
        );
        Tensor::from_cpu(buf, &[n], dtype).to_device(device)
    }

    /// Seeded random values (`RandKind::Uniform` = U[0,1), `Normal` = N(0,1)), generated
    /// where the tensor lives; the same seed gives the same values on every device.
    pub fn rand_with(
        shape: &[usize],
        kind: RandKind,
        seed: u64,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        if !dtype.is_float() {
            return Err(Error::DTypeNotSupported { op: "rand", got: dtype, expected: "a floating dtype" });
        }
        crate::alloc_check::check_output("rand", shape, dtype, device)?;
        let n = crate::layout::numel(shape);
        let storage = on_backend!(device: device, |B| B::wrap(B::rand(device, n, dtype, seed, kind)?));
        Ok(Tensor::from_storage(storage, shape, dtype, device))
    }

    /// Uniform values in [0, 1) from `seed` ([`Tensor::rand_with`]).
    pub fn rand(shape: &[usize], seed: u64, dtype: DType, device: Device) -> Result<Tensor> {
        Self::rand_with(shape, RandKind::Uniform, seed, dtype, device)
    }

    /// Standard normal values from `seed` ([`Tensor::rand_with`]).
    pub fn randn(shape: &[usize], seed: u64, dtype: DType, device: Device) -> Result<Tensor> {
        Self::rand_with(shape, RandKind::Normal, seed, dtype, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_hits_both_ends() {
        let t = Tensor::linspace(-1.0, 1.0, 7, DType::F32, Device::Cpu).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(t.first(), Some(&-1.0));
        assert_eq!(t.last(), Some(&1.0));
        assert_eq!(t[3], 0.0);
    }
}
