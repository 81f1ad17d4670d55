//! `matmul` with PyTorch's rank rules (dot, mm, mv, batched with broadcasting) and
//! `linear`.

use crate::cpu;
use crate::cpu::CpuBuffer;
use crate::error::{Error, Result};
use crate::layout::broadcast_shapes;
use crate::storage::Storage;
use crate::{DType, Device, Tensor};

impl Tensor {
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.check_same_device(rhs, "matmul")?;
        if self.dtype != rhs.dtype {
            return Err(Error::DTypeMismatch { op: "matmul", lhs: self.dtype, rhs: rhs.dtype });
        }
        if self.rank() == 0 || rhs.rank() == 0 {
            return Err(Error::invalid("matmul", "both arguments need at least one dimension"));
        }
        // Up to 8 rows against a transposed contiguous [N, K] weight (`x @ w.t()`): GEMV.
        if rhs.rank() == 2 {
            if let Some(y) = self.gemv(&rhs.t()?, None)? {
                return Ok(y);
            }
        }
        // Lift 1-D operands to matrices, remembering which dims to drop afterwards.
        let a = if self.rank() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if rhs.rank() == 1 { rhs.unsqueeze(1)? } else { rhs.clone() };
        let (ra, rb) = (a.rank(), b.rank());
        let (m, k, k2, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 2], b.shape()[rb - 1]);
        if k != k2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                lhs: self.shape().to_vec(),
                rhs: rhs.shape().to_vec(),
            });
        }
        let batch = broadcast_shapes(&a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
        let mut sa = batch.clone();
        sa.extend([m, k]);
        let mut sb = batch.clone();
        sb.extend([k, n]);
        let (a, b) = (a.broadcast_to(&sa)?, b.broadcast_to(&sb)?);
        let mut out_shape = batch;
        out_shape.extend([m, n]);
        let storage = match (&*a.read(), &*b.read()) {
            (Storage::Cpu(x), Storage::Cpu(y)) => Storage::Cpu(cpu_matmul(x, &a, y, &b)?),
            (Storage::Cuda(x), Storage::Cuda(y)) => {
                Storage::Cuda(crate::cuda::ops::matmul(x, &a.layout, y, &b.layout, a.dtype)?)
            }
            _ => unreachable!("devices checked above"),
        };
        let mut out = Tensor::from_storage(storage, &out_shape, self.dtype, self.device);
        if rhs.rank() == 1 {
            out = out.squeeze(-1)?;
        }
        if self.rank() == 1 {
            out = out.squeeze(if rhs.rank() == 1 { -1 } else { -2 })?;
        }
        Ok(out)
    }

    /// PyTorch's `F.linear`: `x @ weight.T + bias`, weight `[out, in]`, x `[..., in]`.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        if weight.rank() != 2 {
            return Err(Error::bad_shape(
                "linear",
                format!("weight must be 2-D [out, in], got {:?}", weight.shape()),
            ));
        }
        if let Some(y) = self.gemv(weight, bias)? {
            return Ok(y);
        }
        let y = self.matmul(&weight.t()?)?;
        match bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// The CUDA GEMV path of `linear` and `matmul` (`cuda/ops/gemv.rs`): `None` sends the
    /// call to the general path, which also reports any shape / dtype / device error.
    fn gemv(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<Tensor>> {
        let (Device::Cuda(_), Some(&k)) = (self.device, self.shape().last()) else { return Ok(None) };
        let n = weight.shape()[0];
        let same = |t: &Tensor| t.device == self.device && t.dtype == self.dtype;
        let bias_fits = bias.is_none_or(|b| same(b) && b.shape() == [n]);
        if !same(weight) || weight.shape()[1] != k || !bias_fits {
            return Ok(None);
        }
        let rows = self.numel().checked_div(k).unwrap_or(0);
        if let Some(why) = crate::cuda::ops::gemv::declines(rows, n, k, &weight.layout, self.dtype) {
            tracing::debug!("linear {rows}x[{n}, {k}] {}: cuBLAS path ({why})", self.dtype);
            return Ok(None);
        }
        let bias_storage = bias.map(|b| b.read());
        let bias_arg = match (bias_storage.as_deref(), bias) {
            (Some(Storage::Cuda(b)), Some(bt)) => Some((b, &bt.layout)),
            _ => None,
        };
        let buf = match (&*self.read(), &*weight.read()) {
            (Storage::Cuda(x), Storage::Cuda(w)) => {
                crate::cuda::ops::gemv::linear(x, &self.layout, w, &weight.layout, bias_arg, self.dtype)?
            }
            _ => unreachable!("devices checked above"),
        };
        let mut shape = self.shape()[..self.rank() - 1].to_vec();
        shape.push(n);
        Ok(Some(Tensor::from_storage(Storage::Cuda(buf), &shape, self.dtype, self.device)))
    }
}

/// CPU product: f32 math for f32 and narrower floats (rounded back once), f64 and
/// complex64 natively. Integer matmul is not offered.
fn cpu_matmul(x: &CpuBuffer, a: &Tensor, y: &CpuBuffer, b: &Tensor) -> Result<CpuBuffer> {
    let dt = a.dtype;
    Ok(match dt {
        DType::F64 => CpuBuffer::from_vec(cpu::matmul::matmul(
            x.as_slice::<f64>(),
            &a.layout,
            y.as_slice::<f64>(),
            &b.layout,
        )),
        DType::C64 => CpuBuffer::from_vec(cpu::matmul::matmul(
            x.as_slice::<gemm::c32>(),
            &a.layout,
            y.as_slice::<gemm::c32>(),
            &b.layout,
        )),
        DType::F32 => CpuBuffer::from_vec(cpu::matmul::matmul(
            x.as_slice::<f32>(),
            &a.layout,
            y.as_slice::<f32>(),
            &b.layout,
        )),
        _ if dt.is_float() => {
            let (a32, b32) = (a.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?);
            let (ga, gb) = (a32.read(), b32.read());
            let (Storage::Cpu(xa), Storage::Cpu(xb)) = (&*ga, &*gb) else { unreachable!("CPU tensors") };
            let v = cpu::matmul::matmul(xa.as_slice::<f32>(), &a32.layout, xb.as_slice::<f32>(), &b32.layout);
            let shape = [v.len()];
            cpu::cast(&CpuBuffer::from_vec(v), &crate::layout::Layout::contiguous(&shape), DType::F32, dt)
        }
        _ => return Err(Error::NotImplemented { op: "matmul", device: crate::Device::Cpu, dtype: dt }),
    })
}
