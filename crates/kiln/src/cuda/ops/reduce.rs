//! Launchers of the row families: `reduce.cu`, `softmax.cu`, `norm.cu`. Inputs are
//! contiguous rows from offset 0 (ops/reduce.rs and ops/nn.rs arrange that).

use super::{dev_of, row_threads, rows_grid, suffix, NORM, REDUCE, SOFTMAX};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::Result;
use crate::ops::ReduceOp;
use crate::DType;

fn reduce_code(op: ReduceOp) -> i32 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Mean => 2,
        ReduceOp::Max => 3,
        ReduceOp::Min => 4,
        ReduceOp::ArgMax => 5,
        ReduceOp::ArgMin => 6,
    }
}

pub fn reduce(
    op: ReduceOp,
    x: &DeviceBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    out: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let o = dev.alloc(outer * out.size())?;
    if outer == 0 {
        return Ok(o);
    }
    let f = dev.function(&REDUCE, &format!("reduce_{}", suffix("reduce", dt)?))?;
    // The kernel writes int64 results (arg*, integer sum / prod) through `oi`.
    let (ot, oi) = if out == DType::I64 && !(dt == DType::I64 && matches!(op, ReduceOp::Max | ReduceOp::Min))
    {
        (0u64, o.ptr())
    } else {
        (o.ptr(), 0u64)
    };
    let (code, xp, outer64, r64) = (reduce_code(op), x.ptr(), outer as i64, r as i64);
    // SAFETY: `x` holds outer·r contiguous elements of `dt`; the kernel writes `outer`
    // values through exactly one of `ot` / `oi`, both pointing at `o`.
    unsafe {
        dev.stream()
            .raw()
            .launch_builder(&f)
            .arg(&code)
            .arg(&xp)
            .arg(&ot)
            .arg(&oi)
            .arg(&outer64)
            .arg(&r64)
            .launch(rows_grid(outer, row_threads(r)))?
    };
    Ok(o)
}

pub fn var_mean(
    x: &DeviceBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    correction: f64,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let dev = dev_of(x)?;
    let (v, m) = (dev.alloc(outer * dt.size())?, dev.alloc(outer * dt.size())?);
    if outer == 0 {
        return Ok((v, m));
    }
    let f = dev.function(&REDUCE, &format!("var_mean_{}", suffix("var_mean", dt)?))?;
    let (xp, vp, mp, outer64, r64) = (x.ptr(), v.ptr(), m.ptr(), outer as i64, r as i64);
    // SAFETY: reads outer·r elements, writes `outer` to each output.
    unsafe {
        dev.stream()
            .raw()
            .launch_builder(&f)
            .arg(&xp)
            .arg(&vp)
            .arg(&mp)
            .arg(&outer64)
            .arg(&r64)
            .arg(&correction)
            .launch(rows_grid(outer, row_threads(r)))?
    };
    Ok((v, m))
}

pub fn softmax(x: &DeviceBuffer, dt: DType, outer: usize, r: usize, log: bool) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let o = dev.alloc(outer * r * dt.size())?;
    if outer * r == 0 {
        return Ok(o);
    }
    let f = dev.function(&SOFTMAX, &format!("softmax_{}", suffix("softmax", dt)?))?;
    let (xp, op_, outer64, r64, lg) = (x.ptr(), o.ptr(), outer as i64, r as i64, log as i32);
    // SAFETY: reads and writes outer·r contiguous elements.
    unsafe {
        dev.stream()
            .raw()
            .launch_builder(&f)
            .arg(&xp)
            .arg(&op_)
            .arg(&outer64)
            .arg(&r64)
            .arg(&lg)
            .launch(rows_grid(outer, row_threads(r)))?
    };
    Ok(o)
}

pub fn rms_norm(
    x: &DeviceBuffer,
    w: Option<&DeviceBuffer>,
    dt: DType,
    outer: usize,
    r: usize,
    eps: f64,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let o = dev.alloc(outer * r * dt.size())?;
    if outer * r == 0 {
        return Ok(o);
    }
    let f = dev.function(&NORM, &format!("rms_norm_{}", suffix("rms_norm", dt)?))?;
    let (xp, wp, op_, outer64, r64) = (x.ptr(), w.map_or(0, |w| w.ptr()), o.ptr(), outer as i64, r as i64);
    // SAFETY: reads outer·r elements (and r weights when `wp` is non-null), writes outer·r.
    unsafe {
        dev.stream()
            .raw()
            .launch_builder(&f)
            .arg(&xp)
            .arg(&wp)
            .arg(&op_)
            .arg(&outer64)
            .arg(&r64)
            .arg(&eps)
            .launch(rows_grid(outer, row_threads(r)))?
    };
    Ok(o)
}
