//! softmax, log_softmax and rms_norm: row ops over one dim (or the trailing dims).

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
}
