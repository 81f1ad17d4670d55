//! Launcher of `linalg_trsm.cu`: batched triangular solves of systems up to 64 × 64.

use super::{dev_of, LINALG_TRSM};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::{DType, Device};
use cudarc::driver::LaunchConfig;

/// The largest n the shared-memory kernel solves.
pub const TRSM_MAX_N: usize = 64;

/// X with `A X = B` (`left`) or `X A = B` for `count` contiguous matrices (offset 0):
/// `a` `[count, n, n]`, `b` `[count, n, k]` (`[count, k, n]` for `!left`); X has `b`'s
/// shape. Only A's triangle is read (its diagonal taken as ones with `unit`).
#[allow(clippy::too_many_arguments)]
pub fn trsm_small(
    a: &DeviceBuffer,
    b: &DeviceBuffer,
    dt: DType,
    count: usize,
    n: usize,
    k: usize,
    (upper, left, unit): (bool, bool, bool),
) -> Result<DeviceBuffer> {
    const OP: &str = "linalg.solve_triangular";
    let (sfx, acc) = match dt {
        DType::F32 => ("f32", 4),
        DType::F64 => ("f64", 8),
        _ => return Err(Error::NotImplemented { op: OP, device: Device::Cuda(a.ordinal()), dtype: dt }),
    };
    let dev = dev_of(a)?;
    let out = dev.alloc(count * n * k * dt.size())?;
    // As a lower left solve: X A = B is Aᵀ Xᵀ = Bᵀ (A and B read transposed, the
    // triangle flips); an upper one reads the rows backwards.
    let (a_rs, a_cs, b_rs, b_cs) = if left { (n, 1, k, 1) } else { (1, n, 1, n) };
    let lower = upper != left;
    let warps = k.clamp(1, 8);
    let cfg = LaunchConfig {
        grid_dim: (count as u32, k.div_ceil(warps).min(65535) as u32, 1),
        block_dim: (32 * warps as u32, 1, 1),
        shared_mem_bytes: (n * (n + 1) * acc) as u32,
    };
    let f = dev.function(&LINALG_TRSM, &format!("trsm_small_{sfx}"))?;
    let (ap, bp, xp) = (a.ptr(), b.ptr(), out.ptr());
    let (n32, k32, rev, unit32) = (n as i32, k as i32, !lower as i32, unit as i32);
    let (a_rs, a_cs, b_rs, b_cs) = (a_rs as i64, a_cs as i64, b_rs as i64, b_cs as i64);
    // SAFETY: block m reads matrix m of `a` (n² elements) and of `b` (n·k) and writes
    // matrix m of `out` (n·k); shared memory holds the n × (n + 1) triangle, n ≤ 64.
    unsafe { launch!(dev.stream(), f, cfg; ap, bp, xp, n32, k32, a_rs, a_cs, b_rs, b_cs, rev, unit32)? };
    Ok(out)
}
