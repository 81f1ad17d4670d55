//! Launcher of `kernels/causal_conv.cu`: the causal depthwise convolution with a carried
//! state.

use super::{at_ptr, dev_of, suffix, At, CAUSAL_CONV};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::DType;

/// Steps one thread runs (`CC_CHUNK` of the kernel).
const CHUNK: usize = 64;

/// `y` `[B, T, C]` of `x` `[B, T, C]` over the window `[state, x]`, `state` `[B, K−1, C]`
/// overwritten with the window's last K−1 rows, `w` `[C, K]`, `bias` `[C]`: all contiguous
/// from their element offsets (ops/causal_conv.rs arranges it), K in 1..=`CC_MAX_K`.
#[allow(clippy::too_many_arguments)]
pub fn causal_conv(
    x: At,
    state: At,
    w: At,
    bias: Option<At>,
    [b, t, c, k]: [usize; 4],
    silu: bool,
    dt: DType,
) -> Result<DeviceBuffer> {
    let dev = dev_of(x.0)?;
    let y = dev.alloc(b * t * c * dt.size())?;
    if b * t * c == 0 {
        return Ok(y);
    }
    let ptr = |v: At| at_ptr(v, dt.size());
    let state_in = ptr(state);
    // With several chunks another block may still read the old state when the last one
    // writes the new one: it goes to a fresh buffer, copied in after.
    let fresh = if t > CHUNK { Some(dev.alloc(b * (k - 1) * c * dt.size())?) } else { None };
    let state_out = fresh.as_ref().map_or(state_in, |f| f.ptr());
    let f = dev.function(&CAUSAL_CONV, &format!("causal_conv_{}", suffix("causal_conv1d_update", dt)?))?;
    let (xp, wp, bp, yp) = (ptr(x), ptr(w), bias.map_or(0, ptr), y.ptr());
    let (steps, c32, k32, act) = (t as i64, c as i32, k as i32, silu as i32);
    let cfg = LaunchConfig {
        grid_dim: (c.div_ceil(128) as u32, t.div_ceil(CHUNK) as u32, b as u32),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: x and y hold B·T·C elements of dt from `xp` / `yp`, the state B·(K−1)·C from
    // `state_in` (and `state_out`: the same, or a fresh buffer of that size when T spans
    // several chunks), w C·K and bias (when `bp` != 0) C, as the doc says the op arranged;
    // K ≤ CC_MAX_K. The kernel writes only y and state_out.
    unsafe { launch_after!(dev, f, cfg; xp, state_in, state_out, wp, bp, yp, steps, c32, k32, act)? };
    if let Some(fresh) = &fresh {
        // SAFETY: both ranges hold B·(K−1)·C elements of dt (above); stream-ordered after
        // the kernel that wrote `fresh`, which lives until the copy is enqueued.
        unsafe { dev.dtod(fresh.ptr(), state_in, b * (k - 1) * c * dt.size())? };
    }
    Ok(y)
}
