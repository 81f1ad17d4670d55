//! Launchers of `kernels/index.cu`. The kernels read contiguous int64 indices: an index
//! tensor already so is read in place, any other is converted on the device first (no host
//! round trip).

use super::{copy, dev_of, grid, size_suffix, suffix, Strided, INDEX};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::Scatter;
use crate::{DType, Device};

/// The device address of `idx` (`li`, `idt`) as contiguous int64: its own memory when it
/// already is (the router's top-k gives such indices), else a converted copy, returned to be
/// kept alive until the launch that reads it is enqueued.
pub(crate) fn i64_indices(
    idx: &DeviceBuffer,
    li: &Layout,
    idt: DType,
) -> Result<(Option<DeviceBuffer>, u64)> {
    if idt == DType::I64 && li.is_contiguous() {
        return Ok((None, idx.ptr() + (li.offset * 8) as u64));
    }
    let c = copy::cast(idx, li, idt, DType::I64)?;
    let p = c.ptr();
    Ok((Some(c), p))
}

#[allow(clippy::too_many_arguments)]
fn gather_like(
    kernel: &str,
    x: &DeviceBuffer,
    lx: &Layout,
    dim: usize,
    idx: &DeviceBuffer,
    li: &Layout,
    idt: DType,
    out_shape: &[usize],
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let n: usize = out_shape.iter().product();
    let o = dev.alloc(n * dt.size())?;
    if n == 0 {
        return Ok(o);
    }
    let (_i64_copy, ip) = i64_indices(idx, li, idt)?;
    let f = dev.function(&INDEX, &format!("{kernel}_{}", size_suffix(dt)))?;
    let (sx, so) = (Strided::exact(lx)?, Strided::exact(&Layout::contiguous(out_shape))?);
    let (xp, op_, d, n64) = (x.ptr(), o.ptr(), dim as i32, n as i64);
    // SAFETY: reads `x` only at in-range coordinates (out-of-range indices give 0),
    // reads n (gather) or out_shape[dim] (index_select) indices, writes n elements.
    unsafe { launch_after!(dev, f, grid(&dev, n); xp, sx, d, ip, so, op_, n64)? };
    Ok(o)
}

pub(crate) fn index_select(
    x: &DeviceBuffer,
    lx: &Layout,
    dim: usize,
    idx: &DeviceBuffer,
    li: &Layout,
    idt: DType,
    dt: DType,
) -> Result<DeviceBuffer> {
    let mut shape = lx.shape.clone();
    shape[dim] = li.numel();
    gather_like("index_select", x, lx, dim, idx, li, idt, &shape, dt)
}

pub(crate) fn gather(
    x: &DeviceBuffer,
    lx: &Layout,
    dim: usize,
    idx: &DeviceBuffer,
    li: &Layout,
    idt: DType,
    dt: DType,
) -> Result<DeviceBuffer> {
    gather_like("gather", x, lx, dim, idx, li, idt, &li.shape.clone(), dt)
}

pub(crate) fn take(
    x: &DeviceBuffer,
    lx: &Layout,
    idx: &DeviceBuffer,
    li: &Layout,
    idt: DType,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let n = li.numel();
    let o = dev.alloc(n * dt.size())?;
    if n == 0 {
        return Ok(o);
    }
    let (_i64_copy, ip) = i64_indices(idx, li, idt)?;
    let f = dev.function(&INDEX, &format!("take_{}", size_suffix(dt)))?;
    let (xp, sx, op_, n64, numel) = (x.ptr(), Strided::of(lx)?, o.ptr(), n as i64, lx.numel() as i64);
    // SAFETY: reads n indices and `x` only at in-range flat positions; writes n elements.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); xp, sx, ip, op_, n64, numel)? };
    Ok(o)
}

/// In place: `src` (`ls`) written into the view `lx` of `x` at the indices `idx` (`li`,
/// `idt`), as `at` says (for `Along`, `src` is shaped as the view but for that dim, of
/// `li.numel()` positions).
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    x: &mut DeviceBuffer,
    lx: &Layout,
    at: Scatter,
    idx: &DeviceBuffer,
    li: &Layout,
    idt: DType,
    src: &DeviceBuffer,
    ls: &Layout,
    dt: DType,
) -> Result<()> {
    let dev = dev_of(x)?;
    let n = match at {
        Scatter::Flat { .. } => li.numel(),
        Scatter::Along(_) => ls.numel(),
    };
    if n == 0 {
        return Ok(());
    }
    let (_i64_copy, ip) = i64_indices(idx, li, idt)?;
    let (xp, sp, n64) = (x.ptr(), src.ptr(), n as i64);
    match at {
        Scatter::Along(dim) => {
            let f = dev.function(&INDEX, &format!("index_copy_{}", size_suffix(dt)))?;
            let (sx, ss, d) = (Strided::exact(lx)?, Strided::exact(ls)?, dim as i32);
            // SAFETY: writes `x` only at in-range coordinates of its view (out-of-range
            // indices are skipped); reads src.shape[dim] indices and n source elements at
            // their view's offsets.
            unsafe { launch_after!(dev, f, grid(&dev, n); xp, sx, d, ip, sp, ss, n64)? };
        }
        Scatter::Flat { accumulate } => {
            let f = dev.function(&INDEX, &put_kernel(dt, accumulate, dev.ordinal())?)?;
            let (sx, ss, numel) = (Strided::of(lx)?, Strided::of(ls)?, lx.numel() as i64);
            // SAFETY: writes `x` only at in-range flat positions of its view; reads n
            // indices and n source elements.
            unsafe { launch_after!(dev, f, grid(&dev, n); xp, sx, ip, sp, ss, n64, numel)? };
        }
    }
    Ok(())
}

/// The `put_` kernel for `dt`: a plain store, or an atomic add where one exists.
fn put_kernel(dt: DType, accumulate: bool, ordinal: usize) -> Result<String> {
    if !accumulate {
        return Ok(format!("put_{}", size_suffix(dt)));
    }
    let s = match dt {
        DType::I64 | DType::U64 => "i64",
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::I32 => suffix("put_", dt)?,
        _ => {
            return Err(Error::NotImplemented {
                op: "put_(accumulate)",
                device: Device::Cuda(ordinal),
                dtype: dt,
            })
        }
    };
    Ok(format!("put_add_{s}"))
}
