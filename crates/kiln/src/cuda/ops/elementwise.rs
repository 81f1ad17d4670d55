//! Launchers of `kernels/elementwise.cu`.

use super::{dev_of, grid, suffix, Strided, ELEMENTWISE};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::Result;
use crate::layout::Layout;
use crate::ops::{BinaryOp, UnaryOp};
use crate::DType;

pub(crate) fn binary(
    op: BinaryOp,
    a: &DeviceBuffer,
    la: &Layout,
    b: &DeviceBuffer,
    lb: &Layout,
    dt: DType,
    out: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(a)?;
    let n = la.numel();
    let o = dev.alloc(n * out.size())?;
    if n == 0 {
        return Ok(o);
    }
    let sfx = suffix(op.name(), dt)?;
    let code = op as i32;
    let (ap, bp, op_, n64) = (a.ptr(), b.ptr(), o.ptr(), n as i64);
    if out == dt && la.is_contiguous() && lb.is_contiguous() {
        let f = dev.function(&ELEMENTWISE, &format!("binary_contig_{sfx}"))?;
        let (ap, bp) = (ap + (la.offset * dt.size()) as u64, bp + (lb.offset * dt.size()) as u64);
        // SAFETY: both inputs are contiguous runs of n elements of `dt`; `o` holds n.
        unsafe { launch_after!(dev, f, grid(&dev, n); code, ap, bp, op_, n64)? };
        return Ok(o);
    }
    let name = if op.is_comparison() { format!("compare_{sfx}") } else { format!("binary_{sfx}") };
    let f = dev.function(&ELEMENTWISE, &name)?;
    let (sa, sb) = (Strided::of(la)?, Strided::of(lb)?);
    // SAFETY: inputs are in-bounds views of n elements; `o` holds n elements of `out`.
    unsafe { launch_after!(dev, f, grid(&dev, n); code, ap, sa, bp, sb, op_, n64)? };
    Ok(o)
}

pub(crate) fn unary(op: UnaryOp, x: &DeviceBuffer, l: &Layout, dt: DType) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let n = l.numel();
    let o = dev.alloc(n * dt.size())?;
    if n == 0 {
        return Ok(o);
    }
    let f = dev.function(&ELEMENTWISE, &format!("unary_{}", suffix(op.name(), dt)?))?;
    let (code, xp, s, op_, n64) = (op as i32, x.ptr(), Strided::of(l)?, o.ptr(), n as i64);
    // SAFETY: reads n elements through an in-bounds view, writes n into `o`.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); code, xp, s, op_, n64)? };
    Ok(o)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn where_(
    c: &DeviceBuffer,
    lc: &Layout,
    a: &DeviceBuffer,
    la: &Layout,
    b: &DeviceBuffer,
    lb: &Layout,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(a)?;
    let n = la.numel();
    let o = dev.alloc(n * dt.size())?;
    if n == 0 {
        return Ok(o);
    }
    let f = dev.function(&ELEMENTWISE, &format!("where_{}", suffix("where", dt)?))?;
    let (sc, sa, sb) = (Strided::of(lc)?, Strided::of(la)?, Strided::of(lb)?);
    let (cp, ap, bp, op_, n64) = (c.ptr(), a.ptr(), b.ptr(), o.ptr(), n as i64);
    // SAFETY: three in-bounds views of n elements; `o` holds n elements.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); cp, sc, ap, sa, bp, sb, op_, n64)? };
    Ok(o)
}

pub(crate) fn frexp(x: &DeviceBuffer, l: &Layout, dt: DType) -> Result<(DeviceBuffer, DeviceBuffer)> {
    let dev = dev_of(x)?;
    let n = l.numel();
    let (m, e) = (dev.alloc(n * dt.size())?, dev.alloc(n * 4)?);
    if n == 0 {
        return Ok((m, e));
    }
    let f = dev.function(&ELEMENTWISE, &format!("frexp_{}", suffix("frexp", dt)?))?;
    let (xp, s, mp, ep, n64) = (x.ptr(), Strided::of(l)?, m.ptr(), e.ptr(), n as i64);
    // SAFETY: reads n elements through an in-bounds view, writes n to `m` and `e`.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); xp, s, mp, ep, n64)? };
    Ok((m, e))
}
