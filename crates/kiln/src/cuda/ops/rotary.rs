//! Launcher of `kernels/rotary.cu`: rotary position embedding in one launch, optionally
//! after an RMS norm of each row.

use super::{dev_of, grid, suffix, Strided, ROTARY};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
use crate::DType;

/// Where the first token of a rotary launch sits.
pub(crate) enum RotaryStart<'a> {
    /// A position known on the host.
    At(usize),
    /// The int64 at this buffer's element `offset`, read on the device.
    Device(&'a DeviceBuffer, usize),
}

/// The per-head RMS norms before the turn: rows of heads (dim -3) below `split` take the
/// contiguous `[D]` weight `weights[0]`, the rest `weights[1]`.
pub(crate) struct RotaryNorm<'a> {
    pub weights: [&'a DeviceBuffer; 2],
    pub split: usize,
    pub eps: f64,
}

/// Rows per block of the normed kernel (a warp each).
const NORM_WARPS: usize = 8;

/// `x` (`lx`, `[.., T, D]`; `[.., H, T, D]` with `norm`) turned by the contiguous tables
/// `cos` / `sin` `[positions, r]`; a fresh contiguous buffer of `lx.numel()` elements.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rotary(
    x: &DeviceBuffer,
    lx: &Layout,
    norm: Option<RotaryNorm>,
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
    let sfx = suffix("rotary_embedding", dt)?;
    let (t, d) = (lx.shape[lx.rank() - 2] as i64, lx.shape[lx.rank() - 1] as i32);
    let (start_ptr, start_at) = match start {
        RotaryStart::At(p) => (0u64, p as i64),
        RotaryStart::Device(b, offset) => (b.ptr() + (offset * 8) as u64, 0),
    };
    let (xp, sx, cp, sp, op_) = (x.ptr(), Strided::exact(lx)?, cos.ptr(), sin.ptr(), o.ptr());
    let (p64, r32, n64) = (positions as i64, r as i32, n as i64);
    if let Some(nm) = norm {
        let f = dev.function(&ROTARY, &format!("norm_rotary_{sfx}"))?;
        let (w0, w1, eps) = (nm.weights[0].ptr(), nm.weights[1].ptr(), nm.eps);
        let (split, heads) = (nm.split as i64, lx.shape[lx.rank() - 3] as i64);
        let rows = n / lx.shape[lx.rank() - 1];
        let blocks = rows.div_ceil(NORM_WARPS).min(1 << 20) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (32 * NORM_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let rows64 = rows as i64;
        // SAFETY: as below, plus D elements of each weight (contiguous, from their start).
        unsafe {
            launch_after!(dev, f, cfg; xp, sx, w0, w1, split, heads, eps, cp, sp, p64, r32, start_ptr, start_at, op_, t, d, rows64)?
        };
        return Ok(o);
    }
    let f = dev.function(&ROTARY, &format!("rotary_{sfx}"))?;
    // SAFETY: reads n elements of x's view and its partners (same row, within r), table
    // entries at rows < positions (checked in the kernel) and columns < r, and at most one
    // int64 at start_ptr; writes n elements of `o`.
    unsafe {
        launch_after!(dev, f, grid(&dev, n); xp, sx, cp, sp, p64, r32, start_ptr, start_at, op_, t, d, n64)?
    };
    Ok(o)
}
