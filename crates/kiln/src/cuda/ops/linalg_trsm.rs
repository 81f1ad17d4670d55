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
    let sfx = match dt {
        DType::F32 => "f32",
        DType::F64 => "f64",
        _ => return Err(Error::NotImplemented { op: OP, device: Device::Cuda(a.ordinal()), dtype: dt }),
    };
    let dev = dev_of(a)?;
    let out = dev.alloc(count * n * k * dt.size())?;
    // The kernel's register tile: the smallest of 16 / 32 / 64 rows that holds n.
    let nm = [16, 32, 64].into_iter().find(|&m| n <= m).expect("n ≤ TRSM_MAX_N");
    // One thread per right-hand side, at least two warps to load A, at most 128 columns
    // a block (more go to further blocks along y, each loading A again from L2).
    let threads = k.div_ceil(32).clamp(2, 4) * 32;
    let cfg = LaunchConfig {
        grid_dim: (count as u32, k.div_ceil(threads) as u32, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let f = dev.function(&LINALG_TRSM, &format!("trsm{nm}_{sfx}"))?;
    let (ap, bp, xp) = (a.ptr(), b.ptr(), out.ptr());
    // As a lower left solve: X A = B is Aᵀ Xᵀ = Bᵀ (read transposed); an upper one is a
    // lower one with the rows reversed.
    let (n32, k32, up, tr, rev, unit32) =
        (n as i32, k as i32, upper as i32, !left as i32, (upper == left) as i32, unit as i32);
    // SAFETY: block (m, y) reads matrix m of `a` (n² elements) and of `b` (n·k), and writes
    // right-hand sides y·threads.. (< k) of matrix m of `out`; n ≤ 64 fits the kernel's
    // static shared memory and register tile (nm ≥ n).
    unsafe { launch!(dev.stream(), f, cfg; ap, bp, xp, n32, k32, up, tr, rev, unit32)? };
    Ok(out)
}
