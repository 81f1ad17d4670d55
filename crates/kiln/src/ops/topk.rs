//! `topk` along one dim. Values come sorted (descending for `largest`, ascending
//! otherwise); ties keep the lower index first; NaN counts as the largest value, as in
//! PyTorch.

use crate::cpu;
use crate::error::{Error, Result};
use crate::layout::normalize_dim;
use crate::storage::Storage;
use crate::{DType, Tensor};

impl Tensor {
    /// The `k` largest (or smallest) elements along `dim` and their int64 indices.
    pub fn topk(&self, k: usize, dim: isize, largest: bool) -> Result<(Tensor, Tensor)> {
        if !self.dtype.is_float() && !self.dtype.is_int() {
            return Err(Error::DTypeNotSupported { op: "topk", got: self.dtype, expected: "a real dtype" });
        }
        let d = normalize_dim(dim, self.rank())?;
        let size = self.shape().get(d).copied().unwrap_or(1);
        if k > size {
            return Err(Error::invalid("topk", format!("k = {k} is larger than the dim's size {size}")));
        }
        let last = self.rank().saturating_sub(1) as isize;
        let moved = if self.rank() == 0 { self.reshape(&[1])? } else { self.transpose(d as isize, last)? };
        let x = moved.dense()?;
        let outer = x.numel().checked_div(size).unwrap_or(0);
        let (v, i) = match &*x.read() {
            Storage::Cpu(b) => {
                let (v, i) = cpu::topk::topk(b, x.dtype, outer, size, k, largest);
                (Storage::Cpu(v), Storage::Cpu(i))
            }
            Storage::Cuda(_) => {
                return Err(Error::NotImplemented { op: "topk", device: self.device, dtype: self.dtype })
            }
        };
        let mut shape = moved.shape().to_vec();
        if let Some(l) = shape.last_mut() {
            *l = k;
        }
        let back = |s: Storage, dt: DType| -> Result<Tensor> {
            let t = Tensor::from_storage(s, &shape, dt, self.device);
            if self.rank() == 0 {
                t.reshape(&[])
            } else {
                t.transpose(d as isize, last)?.contiguous()
            }
        };
        Ok((back(v, self.dtype)?, back(i, DType::I64)?))
    }
}
