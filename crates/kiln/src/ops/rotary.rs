//! Rotary position embedding (`Tensor::rotary_embedding`): transformers'
//! `apply_rotary_pos_emb` for one tensor, as one kernel on CUDA.

use crate::cpu;
use crate::cuda::ops::RotaryStart as CudaStart;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::{DType, Tensor};

/// Where the first token of [`Tensor::rotary_embedding`] sits: token `t` of the input is at
/// position `start + t`.
#[derive(Clone, Copy)]
pub enum RotaryStart<'a> {
    /// A position known on the host.
    At(usize),
    /// The position in an int64 tensor of one element, read where it lives: on CUDA the
    /// kernel reads it, so a captured CUDA graph turns its tokens by wherever it is replayed.
    Device(&'a Tensor),
}

impl Tensor {
    /// `x · cos + rotate_half(x) · sin` over the first `R` dims of each `[.., T, D]` row of
    /// `self`, the rest passed through (partial rotary), with `cos` / `sin` `[P, R]` tables
    /// (transformers' layout: each half of a row holds the same frequencies) indexed by the
    /// token's position; `rotate_half(x) = cat(-x[R/2..R], x[..R/2])`. transformers'
    /// `apply_rotary_pos_emb` for one tensor. Computed in f32 (f64 for f64) with one
    /// rounding; contiguous output. A position past the tables is an error, except one read
    /// on CUDA from a [`RotaryStart::Device`] tensor, which turns that row to NaN.
    pub fn rotary_embedding(&self, cos: &Tensor, sin: &Tensor, start: RotaryStart) -> Result<Tensor> {
        const OP: &str = "rotary_embedding";
        if !matches!(self.dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
            return Err(Error::DTypeNotSupported {
                op: OP,
                got: self.dtype,
                expected: "f16, bf16, f32 or f64",
            });
        }
        for table in [cos, sin] {
            self.check_same_device(table, OP)?;
            if table.dtype != self.dtype {
                return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: table.dtype });
            }
        }
        if self.rank() < 2 || cos.rank() != 2 || cos.shape() != sin.shape() {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "x {:?} must be [.., T, D], cos {:?} and sin {:?} one [P, R]",
                    self.shape(),
                    cos.shape(),
                    sin.shape()
                ),
            ));
        }
        let (t, d) = (self.shape()[self.rank() - 2], self.shape()[self.rank() - 1]);
        let (positions, r) = (cos.shape()[0], cos.shape()[1]);
        if r == 0 || r % 2 == 1 || r > d {
            return Err(Error::bad_shape(
                OP,
                format!("table width {r} must be even, positive and at most D = {d}"),
            ));
        }
        let past = |p: usize| {
            Error::bad_shape(OP, format!("tokens at positions {p}..{} past the tables' {positions}", p + t))
        };
        if let RotaryStart::Device(s) = start {
            self.check_same_device(s, OP)?;
            if s.dtype != DType::I64 || s.numel() != 1 {
                return Err(Error::bad_shape(
                    OP,
                    format!("start must be one int64, got {:?} {:?}", s.dtype, s.shape()),
                ));
            }
        }
        let (cos, sin) = (cos.dense()?, sin.dense()?);
        let (cg, sg) = (cos.read(), sin.read());
        let storage = match (&*cg, &*sg) {
            (Storage::Cpu(cb), Storage::Cpu(sb)) => {
                let p = match start {
                    RotaryStart::At(p) => p,
                    RotaryStart::Device(s) => usize::try_from(s.item()? as i64).map_err(|_| past(0))?,
                };
                if p + t > positions {
                    return Err(past(p));
                }
                let x = self.dense()?;
                let Storage::Cpu(xb) = &*x.read() else { unreachable!("devices checked above") };
                Storage::Cpu(cpu::rotary::rotary(xb, cb, sb, r, t, d, p, self.dtype))
            }
            (Storage::Cuda(cb), Storage::Cuda(sb)) => {
                let sg = match start {
                    RotaryStart::At(p) if p + t > positions => return Err(past(p)),
                    RotaryStart::At(_) => None,
                    RotaryStart::Device(s) => Some((s.read(), s.layout.offset)),
                };
                let at = match (&sg, start) {
                    (Some((g, offset)), _) => match &**g {
                        Storage::Cuda(b) => CudaStart::Device(b, *offset),
                        Storage::Cpu(_) => unreachable!("devices checked above"),
                    },
                    (None, RotaryStart::At(p)) => CudaStart::At(p),
                    (None, RotaryStart::Device(_)) => unreachable!("a device start is read above"),
                };
                let xg = self.read();
                let Storage::Cuda(xb) = &*xg else { unreachable!("devices checked above") };
                Storage::Cuda(crate::cuda::ops::rotary(
                    xb,
                    &self.layout,
                    cb,
                    sb,
                    positions,
                    r,
                    at,
                    self.dtype,
                )?)
            }
            _ => unreachable!("devices checked above"),
        };
        Ok(Tensor::from_storage(storage, self.shape(), self.dtype, self.device))
    }
}
