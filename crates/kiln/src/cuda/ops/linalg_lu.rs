//! Launcher of `linalg_lu.cu`: batched LU factorisation (LAPACK getrf's pivots), its
//! determinant, and the solve with its factors, for f32, f64 and complex64.

use super::{dev_of, grid, LINALG_LU};
use crate::cuda::{CudaDevice, DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::{DType, Device};
use cudarc::driver::LaunchConfig;

/// Shared memory a one-block kernel may take (below the 48 KiB a launch gets without
/// opting in, leaving room for the kernels' static arrays).
const SMEM: usize = 40 << 10;

/// Columns per block of `lu_step` (`LU_TILE`).
const TILE: usize = 16;

/// The kernel suffix of `dt` and the size of its compute type (double, complex128).
fn kind(op: &'static str, a: &DeviceBuffer, dt: DType) -> Result<(&'static str, usize)> {
    match dt {
        DType::F32 => Ok(("f32", 8)),
        DType::F64 => Ok(("f64", 8)),
        DType::C64 => Ok(("c64", 16)),
        _ => Err(Error::NotImplemented { op, device: Device::Cuda(a.ordinal()), dtype: dt }),
    }
}

fn cfg(grid: (u32, u32), threads: u32, smem: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid.0, grid.1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 }
}

/// The LU factors `[count, m, n]` and 1-based i32 pivots `[count, min(m, n)]` of `count`
/// contiguous matrices of `a` (offset 0), and / or (`det`, square only) their
/// determinants `[count]`: `(lu, pivots, det)`, each `Some` when asked for.
#[allow(clippy::type_complexity)]
pub fn lu_factor(
    a: &DeviceBuffer,
    dt: DType,
    count: usize,
    (m, n): (usize, usize),
    (factors, det): (bool, bool),
) -> Result<(Option<DeviceBuffer>, Option<DeviceBuffer>, Option<DeviceBuffer>)> {
    let op = if factors { "linalg.lu_factor" } else { "linalg.det" };
    let (sfx, wsize) = kind(op, a, dt)?;
    let dev = dev_of(a)?;
    let k = m.min(n);
    let lu = factors.then(|| dev.alloc(count * m * n * dt.size())).transpose()?;
    let piv = dev.alloc(count * k * 4)?;
    let det = det.then(|| dev.alloc(count * dt.size())).transpose()?;
    let (lp, pp, dp) = (lu.as_ref().map_or(0, |b| b.ptr()), piv.ptr(), det.as_ref().map_or(0, |b| b.ptr()));
    let (m32, n32) = (m as i32, n as i32);
    let smem = m * n * wsize + k * 4;
    if smem <= SMEM {
        let f = dev.function(&LINALG_LU, &format!("lu_small_{sfx}"))?;
        let ap = a.ptr();
        // SAFETY: block b reads matrix b of `a` (m·n elements) and writes matrix b of `lu`
        // (if any), its k pivots and its det (if any); the matrix and its pivots fill
        // `smem` bytes of shared memory.
        unsafe { launch!(dev.stream(), f, cfg((count as u32, 1), 128, smem); ap, lp, pp, dp, m32, n32)? };
    } else {
        workspace_factor(&dev, a, sfx, wsize, count, (m, n), &piv, (lp, dp))?;
    }
    Ok((lu, factors.then_some(piv), det))
}

/// The large-matrix path: the matrices widened into a workspace of the compute type,
/// step 0's pivot, then one `lu_step` launch per column, then the factors narrowed back
/// (to `lp`) and / or the determinants (to `dp`); null pointers are skipped.
#[allow(clippy::too_many_arguments)]
fn workspace_factor(
    dev: &CudaDevice,
    a: &DeviceBuffer,
    sfx: &str,
    wsize: usize,
    count: usize,
    (m, n): (usize, usize),
    piv: &DeviceBuffer,
    (lp, dp): (u64, u64),
) -> Result<()> {
    let k = m.min(n);
    let total = count * m * n;
    let ws = dev.alloc(total * wsize)?;
    let (ap, wp, pp, t64) = (a.ptr(), ws.ptr(), piv.ptr(), total as i64);
    let (m32, n32) = (m as i32, n as i32);
    let f = dev.function(&LINALG_LU, &format!("lu_widen_{sfx}"))?;
    // SAFETY: reads `total` elements of `a`, writes as many of the workspace.
    unsafe { launch!(dev.stream(), f, grid(dev, total); ap, wp, t64)? };
    let pivot0 = dev.function(&LINALG_LU, &format!("lu_pivot0_{sfx}"))?;
    let step = dev.function(&LINALG_LU, &format!("lu_step_{sfx}"))?;
    // Grid y is at most 65535: batches beyond that in slices.
    for first in (0..count).step_by(65535) {
        let part = (count - first).min(65535);
        let (wq, pq) = (wp + (first * m * n * wsize) as u64, pp + (first * k * 4) as u64);
        // SAFETY: block b factors column 0 of workspace matrix first + b and writes its
        // first pivot; every access stays within that matrix (m·n elements) and its k pivots.
        unsafe { launch!(dev.stream(), pivot0, cfg((part as u32, 1), 256, 0); wq, pq, m32, n32)? };
        let c = cfg((n.div_ceil(TILE) as u32, part as u32), 256, 0);
        for j in 0..k as i32 {
            // SAFETY: block (t, b) touches columns 16·t.. of matrix first + b (and column
            // j + 1 for the pivot), all rows, and pivots j and j + 1 of that matrix.
            unsafe { launch!(dev.stream(), step, c; wq, pq, m32, n32, j)? };
        }
    }
    let f = dev.function(&LINALG_LU, &format!("lu_finish_{sfx}"))?;
    let c64 = count as i64;
    // SAFETY: reads the workspace and pivots written above; writes `total` elements of the
    // factors (if lp) and `count` determinants (if dp, square matrices).
    unsafe { launch!(dev.stream(), f, grid(dev, total); wp, pp, lp, dp, m32, n32, c64)? };
    Ok(())
}

/// X `[count, n, k]` with `A X = B` from `lu_factor`'s factors `lu` `[count, n, n]` and
/// pivots `[count, n]` (offset 0, contiguous) and `b` `[count, n, k]`. Pivots out of
/// range are skipped, not refused (checking them would synchronise with the host).
pub fn lu_solve(
    lu: &DeviceBuffer,
    piv: &DeviceBuffer,
    b: &DeviceBuffer,
    dt: DType,
    count: usize,
    (n, k): (usize, usize),
) -> Result<DeviceBuffer> {
    const OP: &str = "linalg.lu_solve";
    let (sfx, wsize) = kind(OP, lu, dt)?;
    if n * wsize > SMEM {
        // One right-hand side must fit in shared memory.
        return Err(Error::NotImplemented { op: OP, device: Device::Cuda(lu.ordinal()), dtype: dt });
    }
    let dev = dev_of(lu)?;
    let out = dev.alloc(count * n * k * dt.size())?;
    let r = k.min(32).min(SMEM / (n * wsize));
    let f = dev.function(&LINALG_LU, &format!("lu_solve_{sfx}"))?;
    let (lp, pp, bp, xp) = (lu.ptr(), piv.ptr(), b.ptr(), out.ptr());
    let (n32, k32, r32) = (n as i32, k as i32, r as i32);
    let c = cfg((count as u32, k.div_ceil(r) as u32), 256, n * r * wsize);
    // SAFETY: block (b, y) reads matrix b's factors (n²), pivots (n) and right-hand sides
    // r·y.. (< k) of `b`, writes the same of `out`; its n × r columns fill the shared memory.
    unsafe { launch!(dev.stream(), f, c; lp, pp, bp, xp, n32, k32, r32)? };
    Ok(out)
}
