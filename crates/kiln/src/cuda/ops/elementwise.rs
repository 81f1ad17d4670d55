//! Launchers of `kernels/elementwise.cu`.

use super::{dev_of, grid, suffix, Strided, ELEMENTWISE};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::ops::{BinaryOp, UnaryOp};
use crate::{DType, Device};

/// Op codes of `fbin` / `ibin` in elementwise.cu.
fn binary_code(op: BinaryOp) -> i32 {
    use BinaryOp::*;
    match op {
        Add => 0,
        Sub => 1,
        Mul => 2,
        Div => 3,
        Pow => 4,
        Minimum => 5,
        Maximum => 6,
        Remainder => 7,
        Heaviside => 8,
        // No kernel yet: `binary` refuses it before any launch.
        LaguerrePolynomialL => -1,
        Eq => 9,
        Ne => 10,
        Lt => 11,
        Le => 12,
        Gt => 13,
        Ge => 14,
    }
}

/// Op codes of `fun` / `iun` in elementwise.cu.
fn unary_code(op: UnaryOp) -> i32 {
    use UnaryOp::*;
    match op {
        Neg => 0,
        Abs => 1,
        Exp => 2,
        Log => 3,
        Sqrt => 4,
        Rsqrt => 5,
        Sin => 6,
        Cos => 7,
        Tanh => 8,
        Sigmoid => 9,
        Silu => 10,
        Gelu => 11,
        GeluTanh => 12,
        Relu => 13,
        Recip => 14,
        Square => 15,
        Floor => 16,
        Ceil => 17,
        Round => 18,
        Sign => 19,
        Erf => 20,
    }
}

pub fn binary(
    op: BinaryOp,
    a: &DeviceBuffer,
    la: &Layout,
    b: &DeviceBuffer,
    lb: &Layout,
    dt: DType,
    out: DType,
) -> Result<DeviceBuffer> {
    if op == BinaryOp::LaguerrePolynomialL {
        return Err(Error::NotImplemented { op: op.name(), device: Device::Cuda(0), dtype: dt });
    }
    let dev = dev_of(a)?;
    let n = la.numel();
    let o = dev.alloc(n * out.size())?;
    if n == 0 {
        return Ok(o);
    }
    let sfx = suffix(op.name(), dt)?;
    let code = binary_code(op);
    let (ap, bp, op_, n64) = (a.ptr(), b.ptr(), o.ptr(), n as i64);
    let stream = dev.stream();
    if out == dt && la.is_contiguous() && lb.is_contiguous() {
        let f = dev.function(&ELEMENTWISE, &format!("binary_contig_{sfx}"))?;
        let (ap, bp) = (ap + (la.offset * dt.size()) as u64, bp + (lb.offset * dt.size()) as u64);
        // SAFETY: both inputs are contiguous runs of n elements of `dt`; `o` holds n.
        unsafe { launch!(stream, f, grid(&dev, n); code, ap, bp, op_, n64)? };
        return Ok(o);
    }
    let name = if op.is_comparison() { format!("compare_{sfx}") } else { format!("binary_{sfx}") };
    let f = dev.function(&ELEMENTWISE, &name)?;
    let (sa, sb) = (Strided::of(la)?, Strided::of(lb)?);
    // SAFETY: inputs are in-bounds views of n elements; `o` holds n elements of `out`.
    unsafe { launch!(stream, f, grid(&dev, n); code, ap, sa, bp, sb, op_, n64)? };
    Ok(o)
}

pub fn unary(op: UnaryOp, x: &DeviceBuffer, l: &Layout, dt: DType) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let n = l.numel();
    let o = dev.alloc(n * dt.size())?;
    if n == 0 {
        return Ok(o);
    }
    let f = dev.function(&ELEMENTWISE, &format!("unary_{}", suffix(op.name(), dt)?))?;
    let (code, xp, s, op_, n64) = (unary_code(op), x.ptr(), Strided::of(l)?, o.ptr(), n as i64);
    // SAFETY: reads n elements through an in-bounds view, writes n into `o`.
    unsafe { launch!(dev.stream(), f, grid(&dev, n); code, xp, s, op_, n64)? };
    Ok(o)
}

#[allow(clippy::too_many_arguments)]
pub fn where_(
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

pub fn frexp(x: &DeviceBuffer, l: &Layout, dt: DType) -> Result<(DeviceBuffer, DeviceBuffer)> {
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
