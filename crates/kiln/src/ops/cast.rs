//! Dtype and device conversion, and the strided copy both are built on.

use crate::backend::{buf, on_backend, Backend};
use crate::error::Result;
use crate::{DType, Device, Tensor};

impl Tensor {
    /// A contiguous copy converted to `dtype` (PyTorch's rounding for bf16 / float8).
    pub(crate) fn copy_as(&self, dtype: DType) -> Result<Tensor> {
        let storage =
            on_backend!(&*self.read(), |B, b| B::wrap(B::cast(b, &self.layout, self.dtype, dtype)?));
        Ok(Tensor::from_storage(storage, self.shape(), dtype, self.device))
    }

    /// PyTorch's `.to(dtype)`: returns `self` when the dtype already matches.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        self.copy_as(dtype)
    }

    /// PyTorch's `.to(device)`; copying to or from a GPU synchronises with it.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        if device == self.device {
            return Ok(self.clone());
        }
        let t = self.contiguous()?;
        let start = t.layout.offset * t.dtype.size();
        let bytes = on_backend!(&*t.read(), |B, b| B::read_bytes(b, start, t.nbytes())?);
        Tensor::from_raw_bytes(&bytes, self.shape(), self.dtype, device)
    }

    /// Writes `src` (broadcast to this shape, converted to this dtype) into this view.
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        self.check_same_device(src, "copy_")?;
        let src = src.to_dtype(self.dtype)?.broadcast_to(self.shape())?;
        // A source that shares storage is materialised first so the write cannot race
        // with its own reads (and so the two locks below never alias).
        let src = if src.same_storage(self) { src.copy_as(self.dtype)? } else { src };
        let s = src.read();
        let mut d = self.write("copy_")?;
        on_backend!(&mut *d, |B, d| B::copy_into(
            d,
            &self.layout,
            buf::<B>(&s, "copy_")?,
            &src.layout,
            self.dtype
        ))
    }
}
