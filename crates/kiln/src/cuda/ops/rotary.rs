//! Launcher of `kernels/rotary.cu`: rotary position embedding in one launch, optionally
//! after an RMS norm of each row.

use super::{dev_of, suffix, Strided, ROTARY};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
use crate::DType;

type RotaryStart<'a> = crate::backend::RotaryStart<'a, crate::cuda::Cuda>;
type RotaryNorm<'a> = crate::backend::RotaryNorm<'a, crate::cuda::Cuda>;

/// Rows per block (a warp each): `RT_WARPS` of the kernel.
const WARPS: usize = 8;

/// The longest row (head dim) the kernels stage in shared memory: 48 KiB over the block's
/// warps in the compute type (f32; f64 for f64).
pub(crate) fn max_head_dim(dt: DType) -> usize {
    let acc = if dt == DType::F64 { 8 } else { 4 };
    48 * 1024 / (WARPS * acc)
}

/// `x` (`lx`, `[.., T, D]`; `[.., H, T, D]` with `norm`) turned by the contiguous tables
/// `cos` / `sin` `[positions, r]`; a fresh contiguous buffer of `lx.numel()` elements.
/// D must be at most [`max_head_dim`] (the op checks).
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
    let (t, d) = (lx.shape[lx.rank() - 2] as i64, lx.shape[lx.rank() - 1]);
    let (start_ptr, start_at) = match start {
        RotaryStart::At(p) => (0u64, p as i64),
        RotaryStart::Device(b, offset) => (b.ptr() + (offset * 8) as u64, 0),
    };
    let (xp, sx, cp, sp, op_) = (x.ptr(), Strided::exact(lx)?, cos.ptr(), sin.ptr(), o.ptr());
    let (p64, r32, d32) = (positions as i64, r as i32, d as i32);
    let rows = (n / d) as i64;
    let cfg = LaunchConfig {
        grid_dim: ((rows as usize).div_ceil(WARPS).min(1 << 20) as u32, 1, 1),
        block_dim: (32 * WARPS as u32, 1, 1),
        shared_mem_bytes: (WARPS * d * if dt == DType::F64 { 8 } else { 4 }) as u32,
    };
    // SAFETY: reads the n elements of x's view (rows of D from each row's strided start,
    // the last dim's stride apart), table entries at rows < positions (checked in the
    // kernel) and columns < r, at most one int64 at start_ptr and, with a norm, D elements
    // of each (contiguous) weight; writes n elements of `o`. Shared memory holds WARPS rows
    // of D in the compute type, at most 48 KiB (D <= max_head_dim, checked by the op).
    unsafe {
        if let Some(nm) = norm {
            let f = dev.function(&ROTARY, &format!("norm_rotary_{sfx}"))?;
            let (w0, w1, eps) = (nm.weights[0].ptr(), nm.weights[1].ptr(), nm.eps);
            let (split, heads) = (nm.split as i64, lx.shape[lx.rank() - 3] as i64);
            launch_after!(dev, f, cfg; xp, sx, w0, w1, split, heads, eps, cp, sp, p64, r32, start_ptr, start_at, op_, t, d32, rows)?
        } else {
            let f = dev.function(&ROTARY, &format!("rotary_{sfx}"))?;
            launch_after!(dev, f, cfg; xp, sx, cp, sp, p64, r32, start_ptr, start_at, op_, t, d32, rows)?
        }
    };
    Ok(o)
}
