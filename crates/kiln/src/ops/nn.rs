//! softmax, log_softmax and rms_norm: row ops over one dim (or the trailing dims); group_norm,
//! composed of kiln ops.

use crate::cpu;
use crate::error::{Error, Result};
use crate::layout::normalize_dim;
use crate::storage::Storage;
use crate::Tensor;

impl Tensor {
    fn softmax_impl(&self, dim: isize, log: bool) -> Result<Tensor> {
        let op = if log { "log_softmax" } else { "softmax" };
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported { op, got: self.dtype, expected: "a floating dtype" });
        }
        let d = normalize_dim(dim, self.rank())?;
        if self.rank() == 0 {
            return self.softmax_impl_rows(1, log).map(|t| t.reshape(&[]))?;
        }
        let last = self.rank() - 1;
        let moved = self.transpose(d as isize, last as isize)?;
        let r = moved.shape()[last];
        let out = moved.softmax_impl_rows(r, log)?.reshape(moved.shape())?;
        out.transpose(d as isize, last as isize)?.contiguous()
    }

    /// softmax over contiguous rows of `r` elements.
    fn softmax_impl_rows(&self, r: usize, log: bool) -> Result<Tensor> {
        let x = self.dense()?;
        let outer = x.numel().checked_div(r).unwrap_or(0);
        let storage = match &*x.read() {
            Storage::Cpu(b) => Storage::Cpu(cpu::nn::softmax(b, x.dtype, r, log)),
            Storage::Cuda(b) => Storage::Cuda(crate::cuda::ops::softmax(b, x.dtype, outer, r, log)?),
        };
        Ok(Tensor::from_storage(storage, &[x.numel()], x.dtype, x.device))
    }

    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, false)
    }

    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, true)
    }

    /// `F.rms_norm(x, normalized_shape, weight, eps)`; `eps = None` uses the dtype's
    /// machine epsilon, as PyTorch does.
    pub fn rms_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: Option<f64>,
    ) -> Result<Tensor> {
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported {
                op: "rms_norm",
                got: self.dtype,
                expected: "a floating dtype",
            });
        }
        let k = normalized_shape.len();
        if k > self.rank() || self.shape()[self.rank() - k..] != *normalized_shape {
            return Err(Error::ShapeMismatch {
                op: "rms_norm",
                lhs: self.shape().to_vec(),
                rhs: normalized_shape.to_vec(),
            });
        }
        if let Some(w) = weight {
            self.check_same_device(w, "rms_norm")?;
            if w.shape() != normalized_shape {
                return Err(Error::ShapeMismatch {
                    op: "rms_norm",
                    lhs: w.shape().to_vec(),
                    rhs: normalized_shape.to_vec(),
                });
            }
        }
        let eps = eps.unwrap_or(match self.dtype {
            crate::DType::F64 => f64::EPSILON,
            crate::DType::F16 => 0.0009765625,
            crate::DType::BF16 => 0.0078125,
            _ => f32::EPSILON as f64,
        });
        let r: usize = normalized_shape.iter().product();
        let x = self.dense()?;
        let w = weight.map(|w| w.to_dtype(self.dtype).and_then(|w| w.dense())).transpose()?;
        let wg = w.as_ref().map(|w| w.read());
        let storage = match (&*x.read(), wg.as_deref()) {
            (Storage::Cpu(b), None) => Storage::Cpu(cpu::nn::rms_norm(b, None, x.dtype, r, eps)),
            (Storage::Cpu(b), Some(Storage::Cpu(wb))) => {
                Storage::Cpu(cpu::nn::rms_norm(b, Some(wb), x.dtype, r, eps))
            }
            (Storage::Cuda(b), None) => {
                Storage::Cuda(crate::cuda::ops::rms_norm(b, None, x.dtype, x.numel() / r.max(1), r, eps)?)
            }
            (Storage::Cuda(b), Some(Storage::Cuda(wb))) => {
                Storage::Cuda(crate::cuda::ops::rms_norm(b, Some(wb), x.dtype, x.numel() / r.max(1), r, eps)?)
            }
            _ => unreachable!("devices checked above"),
        };
        Ok(Tensor::from_storage(storage, self.shape(), self.dtype, self.device))
    }

    /// `F.group_norm(x, num_groups, weight, bias, eps)` for `x` `[N, C, *]`: each sample's
    /// channels in `num_groups` consecutive groups, normalised by the group's mean and biased
    /// variance, then `· weight[c] + bias[c]`. Computed in f32 (f64 for f64 inputs), output
    /// in `x`'s dtype; composed of kiln ops.
    pub fn group_norm(
        &self,
        num_groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        const OP: &str = "group_norm";
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported { op: OP, got: self.dtype, expected: "a floating dtype" });
        }
        if self.rank() < 2 {
            return Err(Error::bad_shape(OP, format!("x must be [N, C, *], got {:?}", self.shape())));
        }
        let (n, c) = (self.shape()[0], self.shape()[1]);
        if num_groups == 0 || !c.is_multiple_of(num_groups) {
            return Err(Error::invalid(OP, format!("{num_groups} groups do not divide {c} channels")));
        }
        let mut per_channel = vec![c];
        per_channel.resize(self.rank() - 1, 1);
        let work = if self.dtype == crate::DType::F64 { crate::DType::F64 } else { crate::DType::F32 };
        let affine = |t: Option<&Tensor>| -> Result<Option<Tensor>> {
            let Some(t) = t else { return Ok(None) };
            self.check_same_device(t, OP)?;
            if t.shape() != [c] {
                return Err(Error::ShapeMismatch { op: OP, lhs: t.shape().to_vec(), rhs: vec![c] });
            }
            Ok(Some(t.to_dtype(work)?.reshape(&per_channel)?))
        };
        let (w, b) = (affine(weight)?, affine(bias)?);
        let per_group = c / num_groups * self.shape()[2..].iter().product::<usize>();
        let x = self.to_dtype(work)?.reshape(&[n, num_groups, per_group])?;
        let (var, mean) = x.var_mean(&[-1], 0.0, true)?;
        let mut y = x.sub(&mean)?.mul(&var.add_scalar(eps)?.rsqrt()?)?.reshape(self.shape())?;
        if let Some(w) = w {
            y = y.mul(&w)?;
        }
        if let Some(b) = b {
            y = y.add(&b)?;
        }
        y.to_dtype(self.dtype)
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    #[test]
    fn group_norm_normalises_each_group_then_scales_each_channel() {
        // [1, 4, 2]: groups {c0, c1} = 1 2 3 4 and {c2, c3} = 10 10 10 10 (zero variance).
        let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0], &[1, 4, 2], Device::Cpu)
            .unwrap();
        let w = Tensor::from_slice(&[1f32, 2.0, 1.0, 1.0], &[4], Device::Cpu).unwrap();
        let b = Tensor::from_slice(&[0f32, 0.0, 0.0, 5.0], &[4], Device::Cpu).unwrap();
        let y = x.group_norm(2, Some(&w), Some(&b), 0.0).unwrap().to_f64_vec().unwrap();
        let z = |v: f64| (v - 2.5) / 1.25f64.sqrt();
        let want = [z(1.0), z(2.0), 2.0 * z(3.0), 2.0 * z(4.0)];
        for (a, w) in y[..4].iter().zip(want) {
            assert!((a - w).abs() < 1e-6, "{a} vs {w}");
        }
        // 0 / sqrt(0 + eps) with eps = 0 is NaN in PyTorch too; with eps it is 0 (+ bias).
        let y = x.group_norm(2, None, Some(&b), 1e-5).unwrap().to_f64_vec().unwrap();
        assert_eq!(&y[4..], &[0.0, 0.0, 5.0, 5.0]);
    }

    #[test]
    fn group_norm_refuses_bad_groups_shapes_and_dtypes() {
        let x = Tensor::zeros(&[2, 6, 3], DType::F32, Device::Cpu).unwrap();
        let msg = |r: crate::Result<Tensor>| r.expect_err("must be refused").to_string();
        assert!(msg(x.group_norm(4, None, None, 1e-5)).contains("do not divide"));
        assert!(msg(x.group_norm(0, None, None, 1e-5)).contains("do not divide"));
        let w = Tensor::ones(&[3], DType::F32, Device::Cpu).unwrap();
        assert!(x.group_norm(3, Some(&w), None, 1e-5).is_err());
        assert!(msg(x.reshape(&[36]).unwrap().group_norm(1, None, None, 1e-5)).contains("[N, C, *]"));
        assert!(Tensor::zeros(&[2, 6], DType::I32, Device::Cpu)
            .unwrap()
            .group_norm(2, None, None, 1e-5)
            .is_err());
    }
}
