//! Loss functions (PyTorch `torch.nn.functional` names and semantics).

use crate::cpu;
use crate::error::{Error, Result};
use crate::layout::broadcast_shapes;
use crate::storage::Storage;
use crate::Tensor;

/// How a loss reduces its per-element terms, as PyTorch's `reduction=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The per-element terms, in the broadcast shape.
    None,
    /// Their mean, a 0-dim tensor (NaN for no elements).
    Mean,
    /// Their sum, a 0-dim tensor.
    Sum,
}

impl Tensor {
    /// `F.mse_loss(self, target, reduction)`: `(self - target)²`, reduced. Both float of
    /// one dtype; shapes broadcast. Accumulates in f64 (CPU) / f64 per block (GPU); one
    /// launch on the GPU.
    pub fn mse_loss(&self, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported {
                op: "mse_loss",
                got: self.dtype,
                expected: "a floating dtype",
            });
        }
        if self.dtype != target.dtype {
            return Err(Error::DTypeMismatch { op: "mse_loss", lhs: self.dtype, rhs: target.dtype });
        }
        self.check_same_device(target, "mse_loss")?;
        let shape = broadcast_shapes(self.shape(), target.shape())?;
        let (a, b) = (self.broadcast_to(&shape)?.dense()?, target.broadcast_to(&shape)?.dense()?);
        let n = a.numel();
        let storage = match (&*a.read(), &*b.read()) {
            (Storage::Cpu(x), Storage::Cpu(y)) => Storage::Cpu(cpu::loss::mse(x, y, a.dtype, n, reduction)),
            (Storage::Cuda(x), Storage::Cuda(y)) => {
                Storage::Cuda(crate::cuda::ops::mse_loss(x, y, a.dtype, n, reduction)?)
            }
            _ => unreachable!("devices checked above"),
        };
        let out_shape: &[usize] = if reduction == Reduction::None { &shape } else { &[] };
        Ok(Tensor::from_storage(storage, out_shape, self.dtype, self.device))
    }
}
