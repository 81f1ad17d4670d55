//! Launcher of `linalg_inv.cu`: closed-form inverses of batched n×n matrices, n ≤ 4.

use super::{dev_of, grid, LINALG_INV};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::{DType, Device};

/// The largest n with a closed-form kernel.
pub const INV_MAX_N: usize = 4;

/// The inverses of `count` contiguous `n × n` matrices of `a` (f32 or f64, offset 0),
/// and the index of the first singular one (zero determinant), if any. Reading that
/// index back is a host synchronisation, as PyTorch's check of its `info` is.
pub fn inv_small(
    a: &DeviceBuffer,
    dt: DType,
    n: usize,
    count: usize,
) -> Result<(DeviceBuffer, Option<usize>)> {
    let sfx = match dt {
        DType::F32 => "f32",
        DType::F64 => "f64",
        _ => {
            return Err(Error::NotImplemented {
                op: "linalg.inv",
                device: Device::Cuda(a.ordinal()),
                dtype: dt,
            })
        }
    };
    let dev = dev_of(a)?;
    let out = dev.alloc(count * n * n * dt.size())?;
    let flag = dev.alloc_zeroed(8)?;
    let f = dev.function(&LINALG_INV, &format!("inv{n}_{sfx}"))?;
    let (ap, op_, fp, c64) = (a.ptr(), out.ptr(), flag.ptr(), count as i64);
    // SAFETY: reads count·n² elements of `a`, writes as many of `out` and may raise the
    // 8-byte `flag`; one thread per matrix over a grid-stride loop.
    unsafe { launch!(dev.stream(), f, grid(&dev, count); ap, op_, c64, fp)? };
    let raised = u64::from_le_bytes(dev.dtoh(&flag, 0, 8)?.try_into().expect("8 bytes were read"));
    Ok((out, (raised > 0).then(|| count - raised as usize)))
}
