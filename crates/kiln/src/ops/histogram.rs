//! `bincount`: histograms of non-negative integers.

use crate::backend::{buf, on_backend, Backend};
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::{DType, Tensor};

impl Tensor {
    /// `torch.bincount(self, weights, minlength)`: for a 1-D tensor of non-negative
    /// integers, how often each value occurs (int64), or the sum of `weights` per value
    /// (f32 weights give f32, any other dtype f64, as in PyTorch). The length is
    /// `max(max(self) + 1, minlength)`: like PyTorch, this reads the input's min and max
    /// back to the host (one sync; negative values are an error). `bincount_bounded`
    /// avoids the sync when the number of bins is known.
    pub fn bincount(&self, weights: Option<&Tensor>, minlength: usize) -> Result<Tensor> {
        self.check_bincount(weights)?;
        // Converted once: the range and the counting read the same int64 values.
        let x = self.to_dtype(DType::I64)?.dense()?;
        let nbins = if x.numel() == 0 {
            minlength
        } else {
            let (lo, hi) = x.value_range()?;
            if lo < 0 {
                return Err(Error::invalid("bincount", format!("input holds a negative value ({lo})")));
            }
            (hi as usize).saturating_add(1).max(minlength)
        };
        x.bincount_bounded(weights, nbins)
    }

    /// `bincount` with exactly `nbins` bins, no host sync (capturable in a CUDA graph):
    /// values outside `0..nbins` are not counted (PyTorch would error or grow the output).
    pub fn bincount_bounded(&self, weights: Option<&Tensor>, nbins: usize) -> Result<Tensor> {
        self.check_bincount(weights)?;
        let x = self.to_dtype(DType::I64)?.dense()?;
        let w = match weights {
            Some(w) if w.dtype == DType::F32 => Some(w.dense()?),
            Some(w) => Some(w.to_dtype(DType::F64)?.dense()?),
            None => None,
        };
        let out_dt = w.as_ref().map_or(DType::I64, |w| w.dtype);
        crate::alloc_check::check_output("bincount", &[nbins], out_dt, self.device)?;
        let wg = w.as_ref().map(|w| (w.read(), w.dtype));
        let n = x.numel();
        let storage = on_backend!(&*x.read(), |B, b| {
            let w = wg.as_ref().map(|(g, dt)| buf::<B>(g, "bincount").map(|w| (w, *dt))).transpose()?;
            B::wrap(B::bincount(b, w, n, nbins)?)
        });
        Ok(Tensor::from_storage(storage, &[nbins], out_dt, self.device))
    }

    /// (min, max) of a non-empty dense int64 tensor, read back to the host (the one sync
    /// of the eager `bincount`). On the GPU one whole-GPU launch finds both.
    fn value_range(&self) -> Result<(i64, i64)> {
        if !self.device.is_cuda() {
            let (lo, hi) = (self.min(&[], false)?, self.max(&[], false)?);
            return Ok((lo.to_vec::<i64>()?[0], hi.to_vec::<i64>()?[0]));
        }
        let keys = crate::cuda::ops::value_range_i64(buf::<Cuda>(&self.read(), "bincount")?, self.numel())?;
        let keys = Tensor::from_storage(Cuda::wrap(keys), &[2], DType::U64, self.device).to_vec::<u64>()?;
        Ok(crate::cuda::ops::decode_range([keys[0], keys[1]]))
    }

    fn check_bincount(&self, weights: Option<&Tensor>) -> Result<()> {
        if self.rank() != 1 || !self.dtype.is_int() {
            return Err(Error::invalid(
                "bincount",
                format!("needs a 1-D integer tensor, got {:?} {}", self.shape(), self.dtype),
            ));
        }
        if let Some(w) = weights {
            self.check_same_device(w, "bincount")?;
            if w.shape() != self.shape() {
                return Err(Error::ShapeMismatch {
                    op: "bincount",
                    lhs: self.shape().to_vec(),
                    rhs: w.shape().to_vec(),
                });
            }
            if !w.dtype.is_float() && !w.dtype.is_int() && w.dtype != DType::Bool {
                return Err(Error::DTypeNotSupported {
                    op: "bincount",
                    got: w.dtype,
                    expected: "real weights",
                });
            }
        }
        Ok(())
    }
}
