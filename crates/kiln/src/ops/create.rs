//! Creation ops. Random tensors use a counter-based generator (element i's value is a
//! hash of (seed, i)), so the CPU and the GPU produce the same numbers for a seed.

use crate::cpu::CpuBuffer;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::{DType, Device, Elem, Tensor};

/// Distribution of `Tensor::rand` / `randn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RandKind {
    /// U[0, 1)
    Uniform,
    /// N(0, 1)
    Normal,
}

/// splitmix64 of (seed, counter): the generator shared with `kernels/fill.cu`.
pub fn hash_u64(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_add(0x632B_E59B_D9B4_E019);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) from the top 24 bits, as f32 (exactly representable).
pub fn uniform_f32(seed: u64, i: u64) -> f32 {
    (hash_u64(seed, i) >> 40) as f32 * (1.0 / 16_777_216.0)
}

/// Standard normal by Box–Muller on two uniforms, computed in f32.
pub fn normal_f32(seed: u64, i: u64) -> f32 {
    let u1 = 1.0 - uniform_f32(seed, 2 * i); // (0, 1]
    let u2 = uniform_f32(seed, 2 * i + 1);
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
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
        let storage = match device {
            Device::Cpu => {
                Storage::Cpu(crate::with_dtype!(dtype, T, CpuBuffer::from_vec(vec![T::from_f64(value); n])))
            }
            Device::Cuda(_) => Storage::Cuda(crate::cuda::ops::fill(device, n, dtype, value)?),
        };
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
        if let Device::Cuda(_) = device {
            crate::alloc_check::check_output("arange", &[n], dtype, device)?;
            let buf = crate::cuda::ops::arange(device, n, dtype, start, step)?;
            return Ok(Tensor::from_storage(Storage::Cuda(buf), &[n], dtype, device));
        }
        Self::from_f64_fn(n, dtype, device, |i| start + i as f64 * step)
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
        let storage = match device {
            Device::Cpu => {
                let gen = |i: usize| match kind {
                    RandKind::Uniform => uniform_f32(seed, i as u64),
                    RandKind::Normal => normal_f32(seed, i as u64),
                };
                Storage::Cpu(crate::with_dtype!(
                    dtype,
                    T,
                    CpuBuffer::from_vec((0..n).map(|i| T::from_f64(gen(i) as f64)).collect::<Vec<T>>())
                ))
            }
            Device::Cuda(_) => Storage::Cuda(crate::cuda::ops::rand(device, n, dtype, seed, kind)?),
        };
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
    fn randn_has_unit_moments() {
        let v: Vec<f64> = (0..100_000).map(|i| normal_f32(7, i) as f64).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.02, "mean {mean} var {var}");
    }

    #[test]
    fn linspace_hits_both_ends() {
        let t = Tensor::linspace(-1.0, 1.0, 7, DType::F32, Device::Cpu).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(t.first(), Some(&-1.0));
        assert_eq!(t.last(), Some(&1.0));
        assert_eq!(t[3], 0.0);
    }
}
