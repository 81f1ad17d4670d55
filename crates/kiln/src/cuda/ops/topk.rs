//! Launchers of `topk.cu`: top-k stages and the fused routers. Inputs are contiguous
//! rows from offset 0 (ops/topk.rs arranges that).

use super::reduce::cfg;
use super::{dev_of, suffix, TOPK};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::{DType, Device};

/// Largest k of the GPU kernels (`TOPK_MAX_K`), candidates a stage warp holds (`TOPK_SEG`)
/// and the most experts a router block holds (`ROUTER_MAX`).
pub const TOPK_MAX_K: usize = 64;
const TOPK_SEG: usize = 256;
pub const ROUTER_MAX: usize = 2048;

fn check_k(op: &'static str, k: usize, r: usize) -> Result<()> {
    if k > TOPK_MAX_K {
        return Err(Error::invalid(op, format!("k = {k}: the CUDA kernel takes k <= {TOPK_MAX_K}")));
    }
    if r >= u32::MAX as usize {
        return Err(Error::invalid(op, format!("rows of {r} elements (indices must fit in 32 bits)")));
    }
    Ok(())
}

/// Values (dtype `dt`) and int64 indices of the k best of each of `outer` rows of `r`.
pub fn topk(
    x: &DeviceBuffer,
    dt: DType,
    outer: usize,
    r: usize,
    k: usize,
    largest: bool,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    if dt.size() > 4 || dt.is_complex() {
        return Err(Error::NotImplemented { op: "topk", device: Device::Cuda(x.ordinal()), dtype: dt });
    }
    check_k("topk", k, r)?;
    let dev = dev_of(x)?;
    let (vals, idxs) = (dev.alloc(outer * k * dt.size())?, dev.alloc(outer * k * 8)?);
    if outer * k == 0 {
        return Ok((vals, idxs));
    }
    let f = dev.function(&TOPK, &format!("topk_stage_{}", suffix("topk", dt)?))?;
    let (xp, outer64, r64, k32, lg) = (x.ptr(), outer as i64, r as i64, k as i32, largest as i32);
    // Stage after stage, each cutting a row's candidates by TOPK_SEG / k, until one segment
    // per row is left; that last stage writes values and indices.
    let (mut n, mut segs) = (r, r.div_ceil(TOPK_SEG));
    let mut cand: Option<DeviceBuffer> = None;
    loop {
        let last = segs == 1;
        let dst = dev.alloc(if last { 0 } else { outer * segs * k * 8 })?;
        let (cp, dp) = (cand.as_ref().map_or(0, |c| c.ptr()), dst.ptr());
        let (vp, ip) = if last { (vals.ptr(), idxs.ptr()) } else { (0, 0) };
        let (n64, segs64) = (n as i64, segs as i64);
        // A warp per segment, eight per block (the kernel loops when segments outnumber warps).
        // SAFETY: reads outer·r elements of `x` (and outer·n candidates when `cp` is set);
        // writes outer·segs·k candidates to `dst`, or outer·k values and indices.
        unsafe {
            launch!(dev.stream(), f, cfg((outer * segs).div_ceil(8).min(1 << 20), 256); xp, cp, outer64, n64, r64, k32, lg, segs64, dp, vp, ip)?
        };
        if last {
            return Ok((vals, idxs));
        }
        cand = Some(dst);
        n = segs * k;
        segs = n.div_ceil(TOPK_SEG);
    }
}

/// Values per lane of `router_topk_warp<RV>`: rows of up to 64, 128, 256 experts.
const ROUTER_WARP_RV: [usize; 3] = [2, 4, 8];

/// Router scores and top-k of `outer` rows of `r` logits: (f32 weights, int64 experts),
/// `k` each. `sigmoid` false: softmax scores; true: sigmoid scores chosen by score + `bias`
/// (f32, r) when given. `norm_eps`: divide the k weights by their sum + eps.
#[allow(clippy::too_many_arguments)]
pub fn router_topk(
    x: &DeviceBuffer,
    dt: DType,
    bias: Option<&DeviceBuffer>,
    outer: usize,
    r: usize,
    k: usize,
    sigmoid: bool,
    norm_eps: Option<f64>,
) -> Result<(DeviceBuffer, DeviceBuffer)> {
    check_k("router_topk", k, r)?;
    if r > ROUTER_MAX {
        return Err(Error::invalid(
            "router_topk",
            format!("{r} experts: the CUDA kernel takes <= {ROUTER_MAX}"),
        ));
    }
    let dev = dev_of(x)?;
    let (w, i) = (dev.alloc(outer * k * 4)?, dev.alloc(outer * k * 8)?);
    if outer * k == 0 {
        return Ok((w, i));
    }
    let sfx = suffix("router_topk", dt)?;
    // A warp per row where the row fits its registers and the k picks its lanes (decode's
    // routers), else a block per row.
    let warp_rv = ROUTER_WARP_RV.into_iter().find(|v| 32 * v >= r).filter(|_| k <= 32);
    let (name, launch_cfg) = match warp_rv {
        Some(rv) => (format!("router_topk_warp{rv}_{sfx}"), cfg(outer.div_ceil(4).min(1 << 20), 128)),
        None => (
            format!("router_topk_{sfx}"),
            cfg(outer.min(1 << 20), r.next_multiple_of(32).clamp(32, 1024) as u32),
        ),
    };
    let f = dev.function(&TOPK, &name)?;
    let (xp, bp, wp, ip) = (x.ptr(), bias.map_or(0, |b| b.ptr()), w.ptr(), i.ptr());
    let (outer64, r64, k32, sg) = (outer as i64, r as i64, k as i32, sigmoid as i32);
    let eps = norm_eps.map_or(-1.0f32, |e| e as f32);
    // SAFETY: reads outer·r logits (and r f32 biases when `bp` is set); writes outer·k
    // f32 weights and int64 indices. Block kernel: r <= ROUTER_MAX and k <= TOPK_MAX_K fit
    // its shared arrays; warp kernel: r <= 32·rv values per lane, k <= 32 lanes, and the
    // grid's 4 warps per block cover the outer rows.
    unsafe { launch_after!(dev, f, launch_cfg; xp, bp, wp, ip, outer64, r64, k32, sg, eps)? };
    Ok((w, i))
}
