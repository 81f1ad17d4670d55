//! Launcher of `kernels/rotary.cu`: rotary position embedding in one launch.

use super::{dev_of, grid, suffix, Strided, ROTARY};
use crate::cuda::DeviceBuffer;
use crate::error::Result;
use crate::layout::Layout;
use crate::DType;

/// Where the first token of a rotary launch sits.
pub enum RotaryStart<'a> {
    /// A position known on the host.
    At(usize),
    /// The int64 at this buffer's element `offset`, read on the device.
    Device(&'a DeviceBuffer, usize),
}

/// `x` (`lx`, `[.., T, D]`) turned by the contiguous tables `cos` / `sin` `[positions, r]`;
/// a fresh contiguous buffer of `lx.numel()` elements.
#[allow(clippy::too_many_arguments)]
pub fn rotary(
    x: &DeviceBuffer,
    lx: &Layout,
    cos: &DeviceBuffer,
    sin: &DeviceBuffer,
    positions: usize,
    r: usize,
    start: RotaryStart,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let n = lx.numel();
    let o = dev.alloc(n * dt.size())?;
    if n == 0 {
        return Ok(o);
    }
    let f = dev.function(&ROTARY, &format!("rotary_{}", suffix("rotary_embedding", dt)?))?;
    let (t, d) = (lx.shape[lx.rank() - 2] as i64, lx.shape[lx.rank() - 1] as i32);
    let (start_ptr, start_at) = match start {
        RotaryStart::At(p) => (0u64, p as i64),
        RotaryStart::Device(b, offset) => (b.ptr() + (offset * 8) as u64, 0),
    };
    let (xp, sx, cp, sp, op_) = (x.ptr(), Strided::exact(lx)?, cos.ptr(), sin.ptr(), o.ptr());
    let (p64, r32, n64) = (positions as i64, r as i32, n as i64);
    // SAFETY: reads n elements of x's view and its partners (same row, within r), table
    // entries at rows < positions (checked in the kernel) and columns < r, and at most one
    // int64 at start_ptr; writes n elements of `o`.
    unsafe {
        launch_after!(dev, f, grid(&dev, n); xp, sx, cp, sp, p64, r32, start_ptr, start_at, op_, t, d, n64)?
    };
    Ok(o)
}
