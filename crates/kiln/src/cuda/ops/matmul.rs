//! Batched matmul through cuBLAS `GemmStridedBatchedEx` (f32, f16, bf16 with f32
//! accumulation and no TF32; f64). Row-major C = A·B is computed as the column-major
//! product Cᵀ = Bᵀ·Aᵀ, so a row-major operand needs no transpose flag and a transposed
//! view (such as `weight.t()`) needs one; other layouts are copied contiguous first.

use super::{copy, dev_of};
use crate::cuda::DeviceBuffer;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::{DType, Device};
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use std::ffi::c_void;

/// How cuBLAS reads one operand of `rows × cols` with strides (`sr`, `sc`): whether it is
/// transposed, and its leading dimension; `None` when neither fits.
fn plan(rows: usize, cols: usize, sr: usize, sc: usize) -> Option<(bool, usize)> {
    if sc == 1 || cols == 1 {
        let ld = if rows > 1 { sr } else { cols.max(1) };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if sr == 1 || rows == 1 {
        let ld = if cols > 1 { sc } else { rows.max(1) };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// One operand ready for cuBLAS: pointer, transpose flag, leading dim, batch stride.
/// Keeps the contiguous copy alive when one was needed.
struct Operand {
    ptr: u64,
    trans: bool,
    ld: usize,
    batch_stride: usize,
    _copy: Option<DeviceBuffer>,
}

fn operand(buf: &DeviceBuffer, l: &Layout, dt: DType) -> Result<Operand> {
    let r = l.rank();
    let (rows, cols) = (l.shape[r - 2], l.shape[r - 1]);
    let batch = Layout { shape: l.shape[..r - 2].to_vec(), strides: l.strides[..r - 2].to_vec(), offset: 0 }
        .coalesced();
    let fits = plan(rows, cols, l.strides[r - 2], l.strides[r - 1]);
    if let (Some((trans, ld)), true) = (fits, batch.rank() <= 1) {
        return Ok(Operand {
            ptr: buf.ptr() + (l.offset * dt.size()) as u64,
            trans,
            ld,
            batch_stride: batch.strides.first().copied().unwrap_or(0),
            _copy: None,
        });
    }
    let c = copy::cast(buf, l, dt, dt)?;
    Ok(Operand { ptr: c.ptr(), trans: false, ld: cols.max(1), batch_stride: rows * cols, _copy: Some(c) })
}

/// `la` = [batch…, m, k], `lb` = [batch…, k, n] (same batch dims, broadcast allowed).
pub fn matmul(
    a: &DeviceBuffer,
    la: &Layout,
    b: &DeviceBuffer,
    lb: &Layout,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(a)?;
    let r = la.rank();
    let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], lb.shape[r - 1]);
    let batch: usize = la.shape[..r - 2].iter().product();
    let out = dev.alloc(batch * m * n * dt.size())?;
    if batch * m * n == 0 {
        return Ok(out);
    }
    let (data, compute) = match dt {
        DType::F32 => (cudaDataType::CUDA_R_32F, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::F16 => (cudaDataType::CUDA_R_16F, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::BF16 => (cudaDataType::CUDA_R_16BF, cublasComputeType_t::CUBLAS_COMPUTE_32F),
        DType::F64 => (cudaDataType::CUDA_R_64F, cublasComputeType_t::CUBLAS_COMPUTE_64F),
        _ => {
            return Err(Error::NotImplemented {
                op: "matmul",
                device: Device::Cuda(dev.ordinal()),
                dtype: dt,
            })
        }
    };
    if k == 0 {
        // SAFETY: `out` holds exactly these bytes.
        unsafe { dev.memset_d8(out.ptr(), 0, out.len())? };
        return Ok(out);
    }
    let too_big = [m, n, k, batch].iter().any(|&v| v > i32::MAX as usize);
    if too_big {
        return Err(Error::bad_shape(
            "matmul",
            format!("dims {m}×{k}×{n} (batch {batch}) exceed cuBLAS's int range"),
        ));
    }
    let (oa, ob) = (operand(a, la, dt)?, operand(b, lb, dt)?);
    let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
    let (alpha, beta): (*const c_void, *const c_void) = if dt == DType::F64 {
        (&one64 as *const f64 as _, &zero64 as *const f64 as _)
    } else {
        (&one32 as *const f32 as _, &zero32 as *const f32 as _)
    };
    let op = |t: bool| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
    let blas = dev.cublas()?;
    // SAFETY: pointers address `batch` matrices laid out as described by (ld, batch
    // stride), all inside their allocations; alpha / beta match the compute type and
    // outlive the (stream-ordered) call, which copies them at launch.
    unsafe {
        cudarc::cublas::result::gemm_strided_batched_ex(
            *blas.handle(),
            op(ob.trans),
            op(oa.trans),
            n as i32,
            m as i32,
            k as i32,
            alpha,
            ob.ptr as *const c_void,
            data,
            ob.ld as i32,
            ob.batch_stride as i64,
            oa.ptr as *const c_void,
            data,
            oa.ld as i32,
            oa.batch_stride as i64,
            beta,
            out.ptr() as *mut c_void,
            data,
            n as i32,
            (m * n) as i64,
            batch as i32,
            compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )?
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn operand_plans() {
        // row-major 3×4
        assert_eq!(plan(3, 4, 4, 1), Some((false, 4)));
        // transposed view of a 4×3 row-major matrix
        assert_eq!(plan(3, 4, 1, 3), Some((true, 3)));
        // single row / column
        assert_eq!(plan(1, 5, 99, 1), Some((false, 5)));
        assert_eq!(plan(5, 1, 1, 7), Some((false, 1)));
        // neither dim unit-stride
        assert_eq!(plan(3, 4, 8, 2), None);
    }
}
