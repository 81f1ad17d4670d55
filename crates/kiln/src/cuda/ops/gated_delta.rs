//! Launcher of `kernels/gated_delta.cu`: one decode token of a Gated DeltaNet layer.

use super::{at_ptr, dev_of, suffix, At, GATED_DELTA};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::DType;
use cudarc::driver::DeviceRepr;

/// Key head dims with a compiled kernel (the state column lives in registers).
pub const KEY_DIMS: [usize; 4] = [16, 32, 64, 128];
/// The most value columns of a head (one thread each).
pub const MAX_VALUE_DIM: usize = 1024;

/// Whether the kernel serves heads of key dim `dk` and value dim `dv`.
pub fn fits(dk: usize, dv: usize) -> bool {
    KEY_DIMS.contains(&dk) && dv <= MAX_VALUE_DIM
}

/// Mirrors `struct GdArgs` of the kernel (passed by value).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct GdArgs {
    channels: i64,
    hk: i32,
    hv: i32,
    dv: i32,
    q_scale: f32,
    eps: f32,
}

// SAFETY: `#[repr(C)]` plain-old-data: an i64, three i32 and two f32 (size 32, align 8), as
// `struct GdArgs` of gated_delta.cu lays them out under the CUDA ABI.
unsafe impl DeviceRepr for GdArgs {}
const _: () = assert!(std::mem::size_of::<GdArgs>() == 32);

/// The views of one step, each contiguous from its element offset (ops/gated_delta.rs
/// arranges it): `qkv` `[B, 2·hk·dk + hv·dv]`, `b` / `a` `[B, hv]`, `z` `[B, hv·dv]` in `dt`;
/// `state` `[B, hv, dk, dv]` (updated in place), `neg_a` / `dt_bias` `[hv]` and `norm` `[dv]`
/// in f32.
pub(crate) struct GatedDeltaBuffers<'a> {
    pub qkv: At<'a>,
    pub b: At<'a>,
    pub a: At<'a>,
    pub z: At<'a>,
    pub state: At<'a>,
    pub neg_a: At<'a>,
    pub dt_bias: At<'a>,
    pub norm: At<'a>,
}

/// `y [B, hv·dv]` in dt for dims `[batch, hk, hv, dk, dv]`; the state is updated in place
/// (each thread reads its state column before it writes it back).
pub(crate) fn gated_delta_step(
    x: GatedDeltaBuffers,
    [batch, hk, hv, dk, dv]: [usize; 5],
    eps: f64,
    dt: DType,
) -> Result<DeviceBuffer> {
    if !fits(dk, dv) {
        return Err(Error::invalid(
            "gated_delta_step",
            format!("on CUDA the key dim must be one of {KEY_DIMS:?} (got {dk}) and the value dim at most {MAX_VALUE_DIM} (got {dv})"),
        ));
    }
    let dev = dev_of(x.qkv.0)?;
    let y = dev.alloc(batch * hv * dv * dt.size())?;
    if batch * hv * dv == 0 {
        return Ok(y);
    }
    let f =
        dev.function(&GATED_DELTA, &format!("gated_delta_step_{}_k{dk}", suffix("gated_delta_step", dt)?))?;
    let args = GdArgs {
        channels: (2 * hk * dk + hv * dv) as i64,
        hk: hk as i32,
        hv: hv as i32,
        dv: dv as i32,
        q_scale: (1.0 / (dk as f64).sqrt()) as f32,
        eps: eps as f32,
    };
    let cfg = LaunchConfig {
        grid_dim: ((batch * hv) as u32, 1, 1),
        block_dim: (dv.next_multiple_of(32) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let (size, f32s) = (dt.size(), 4);
    let [qp, bp, ap, zp] = [x.qkv, x.b, x.a, x.z].map(|v| at_ptr(v, size));
    let [sp, np, dp, wp] = [x.state, x.neg_a, x.dt_bias, x.norm].map(|v| at_ptr(v, f32s));
    let yp = y.ptr();
    // SAFETY: every view holds the contiguous shape the struct docs give for these dims
    // from its offset (checked in ops/gated_delta.rs); the kernel reads them, writes `y`
    // (a fresh buffer of B·hv·dv elements of dt) and the state in place (s_in = s_out:
    // each thread reads its own column before writing it); hv is a multiple of hk.
    unsafe { launch_after!(dev, f, cfg; qp, bp, ap, zp, sp, sp, np, dp, wp, yp, args)? };
    Ok(y)
}
