//! Loss functions (PyTorch `torch.nn.functional` names and semantics).

use crate::backend::{buf, on_backend, Backend};
use crate::error::{Error, Result};
use crate::layout::broadcast_shapes;
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
        let yg = b.read();
        let storage = on_backend!(&*a.read(), |B, x| {
            B::wrap(B::mse(x, buf::<B>(&yg, "mse_loss")?, a.dtype, n, reduction)?)
        });
        let out_shape: &[usize] = if reduction == Reduction::None { &shape } else { &[] };
        Ok(Tensor::from_storage(storage, out_shape, self.dtype, self.device))
    }
}
