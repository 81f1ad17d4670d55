//! Launcher of `kernels/gated_delta.cu`: one decode token of a Gated DeltaNet layer.

use super::{dev_of, suffix, GATED_DELTA};
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

/// The buffers of one step, all contiguous from offset 0 (ops/gated_delta.rs arranges it):
/// `qkv` `[B, 2·hk·dk + hv·dv]`, `b` / `a` `[B, hv]`, `z` `[B, hv·dv]` in `dt`; `state`
/// `[B, hv, dk, dv]`, `neg_a` / `dt_bias` `[hv]` and `norm` `[dv]` in f32.
pub(crate) struct GatedDeltaBuffers<'a> {
    pub qkv: &'a DeviceBuffer,
    pub b: &'a DeviceBuffer,
    pub a: &'a DeviceBuffer,
    pub z: &'a DeviceBuffer,
    pub state: &'a DeviceBuffer,
    pub neg_a: &'a DeviceBuffer,
    pub dt_bias: &'a DeviceBuffer,
    pub norm: &'a DeviceBuffer,
}

/// `(y [B, hv·dv] in dt, new state [B, hv, dk, dv] f32)` for dims `[batch, hk, hv, dk, dv]`.
pub(crate) fn gated_delta_step(
    x: GatedDeltaBuffers,
    [batch, hk, hv, dk, dv]: [usize; 5],
    eps: f64,
    dt: DType,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    if !fits(dk, dv) {
        return Err(Error::invalid(
            "gated_delta_step",
            format!("on CUDA the key dim must be one of {KEY_DIMS:?} (got {dk}) and the value dim at most {MAX_VALUE_DIM} (got {dv})"),
        ));
    }
    let dev = dev_of(x.qkv)?;
    let y = dev.alloc(batch * hv * dv * dt.size())?;
    let state = dev.alloc(batch * hv * dk * dv * 4)?;
    if batch * hv * dv == 0 {
        return Ok((y, state));
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
    let (qp, bp, ap, zp, sp) = (x.qkv.ptr(), x.b.ptr(), x.a.ptr(), x.z.ptr(), x.state.ptr());
    let (np, dp, wp, op, yp) = (x.neg_a.ptr(), x.dt_bias.ptr(), x.norm.ptr(), state.ptr(), y.ptr());
    // SAFETY: every buffer holds the contiguous shape the struct docs give for these dims
    // (checked in ops/gated_delta.rs); the kernel reads them and writes `y` and `state`,
    // fresh buffers of B·hv·dv elements of dt and B·hv·dk·dv f32; hv is a multiple of hk.
    unsafe { launch_after!(dev, f, cfg; qp, bp, ap, zp, sp, op, np, dp, wp, yp, args)? };
    Ok((y, state))
}
