//! Launcher of `kernels/rotary.cu`: rotary position embedding in one launch, optionally
//! after an RMS norm of each row.

use super::{dev_of, suffix, Strided, ROTARY};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::layout::Layout;
use crate::DType;
use cudarc::driver::DeviceRepr;

type RotaryStart<'a> = crate::backend::RotaryStart<'a, crate::cuda::Cuda>;
type RotaryNorm<'a> = crate::backend::RotaryNorm<'a, crate::cuda::Cuda>;

type RotaryCache<'a> = crate::backend::RotaryCache<'a, crate::cuda::Cuda>;

/// Mirrors `RtCache<T>` of the kernel (passed by value); null `k` for no cache.
#[repr(C)]
#[derive(Clone, Copy)]
struct RtCache {
    k: u64,
    v: u64,
    hq: i64,
    hkv: i64,
    cap: i64,
}

// SAFETY: `#[repr(C)]` plain-old-data: two device addresses and three i64 (size 40, align
// 8), as `RtCache<T>` of rotary.cu lays them out.
unsafe impl DeviceRepr for RtCache {}

/// Rows per block (a warp each): `RT_WARPS` of the kernel.
const WARPS: usize = 8;

/// The longest row (head dim) the kernels stage in shared memory: 48 KiB over the block's
/// warps in the compute type (f32; f64 for f64).
pub(crate) fn max_head_dim(dt: DType) -> usize {
    let acc = if dt == DType::F64 { 8 } else { 4 };
    48 * 1024 / (WARPS * acc)
}

/// `x` (`lx`, `[.., T, D]`; `[.., H, T, D]` with `norm` or `cache`) turned by the contiguous
/// tables `cos` / `sin` `[positions, r]`; a fresh contiguous buffer of `lx.numel()` elements,
/// or with `cache` of the query heads' (the keys and values go to the cache). D must be at
/// most [`max_head_dim`] (the op checks).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rotary(
    x: &DeviceBuffer,
    lx: &Layout,
    norm: Option<RotaryNorm>,
    cache: Option<RotaryCache>,
    cos: &DeviceBuffer,
    sin: &DeviceBuffer,
    positions: usize,
    r: usize,
    start: RotaryStart,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let n = lx.numel();
    let (t, d) = (lx.shape[lx.rank() - 2] as i64, lx.shape[lx.rank() - 1]);
    let heads = if lx.rank() >= 3 { lx.shape[lx.rank() - 3] } else { 1 };
    let out_elems = cache.as_ref().map_or(n, |c| n / heads * c.q_heads);
    let o = dev.alloc(out_elems * dt.size())?;
    if n == 0 {
        return Ok(o);
    }
    let kv = cache.map_or(RtCache { k: 0, v: 0, hq: 0, hkv: 0, cap: 0 }, |c| RtCache {
        k: c.keys.ptr(),
        v: c.values.ptr(),
        hq: c.q_heads as i64,
        hkv: c.kv_heads as i64,
        cap: c.capacity as i64,
    });
    let sfx = suffix("rotary_embedding", dt)?;
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
    let h64 = heads as i64;
    // SAFETY: reads the n elements of x's view (rows of D from each row's strided start,
    // the last dim's stride apart), table entries at rows < positions (checked in the
    // kernel) and columns < r, at most one int64 at start_ptr and, with a norm, D elements
    // of each (contiguous) weight; writes `out_elems` elements of `o` and, with a cache, rows
    // of D at positions < capacity (checked in the kernel) of the [B, kv_heads, capacity, D]
    // caches, B = n / (heads·T·D) as the op checked. Shared memory holds WARPS rows of D in
    // the compute type, at most 48 KiB (D <= max_head_dim, checked by the op).
    unsafe {
        if let Some(nm) = norm {
            let f = dev.function(&ROTARY, &format!("norm_rotary_{sfx}"))?;
            let (w0, w1, eps, split) = (nm.weights[0].ptr(), nm.weights[1].ptr(), nm.eps, nm.split as i64);
            launch_after!(dev, f, cfg; xp, sx, w0, w1, split, h64, eps, cp, sp, p64, r32, start_ptr, start_at, op_, t, d32, rows, kv)?
        } else {
            let f = dev.function(&ROTARY, &format!("rotary_{sfx}"))?;
            launch_after!(dev, f, cfg; xp, sx, cp, sp, p64, r32, start_ptr, start_at, op_, t, d32, rows, h64, kv)?
        }
    };
    Ok(o)
}
