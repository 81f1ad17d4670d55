//! Launcher of `kernels/grouped_mm.cu`: torch._grouped_mm's 2-D × 3-D form (bf16 / f16 on
//! tensor cores, f32 on FMAs), the group ends read on the device (no host sync).

use super::{copy, dev_of, GROUPED_MM};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::{DType, Device};

// Tile of grouped_mm.cu (GM_BM, GM_BN, GM_THREADS).
const BM: usize = 64;
const BN: usize = 64;
const THREADS: u32 = 128;

/// `out[M, N]` with `out[r] = a[r] · b[g]` for the rows of group g (ends `offs`, int32 `[G]`),
/// zero past the last end; `a` `[M, K]` and `b` `[G, K, N]` of `dt` (bf16, f16 or f32) at
/// any strides.
pub fn grouped_mm(
    a: &DeviceBuffer,
    al: &Layout,
    b: &DeviceBuffer,
    bl: &Layout,
    offs: &DeviceBuffer,
    ol: &Layout,
    dt: DType,
) -> Result<DeviceBuffer> {
    let sfx = match dt {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::F32 => "f32",
        _ => {
            return Err(Error::NotImplemented {
                op: "grouped_mm",
                device: Device::Cuda(a.ordinal()),
                dtype: dt,
            })
        }
    };
    let dev = dev_of(a)?;
    let (m, k, g, n) = (al.shape[0], al.shape[1], bl.shape[0], bl.shape[2]);
    let out = dev.alloc(m * n * dt.size())?;
    if m * n == 0 {
        return Ok(out);
    }
    let ends = if ol.is_contiguous() { None } else { Some(copy::cast(offs, ol, DType::I32, DType::I32)?) };
    let offs_ptr = ends.as_ref().map_or(offs.ptr() + (ol.offset * 4) as u64, |c| c.ptr());
    let f = dev.function(&GROUPED_MM, &format!("grouped_mm_{sfx}"))?;
    let at = |buf: &DeviceBuffer, l: &Layout| buf.ptr() + (l.offset * dt.size()) as u64;
    let (ap, bp, op) = (at(a, al), at(b, bl), out.ptr());
    let s = |l: &Layout, i: usize| l.strides[i] as i64;
    let (sam, sak, sbg, sbk, sbn) = (s(al, 0), s(al, 1), s(bl, 0), s(bl, 1), s(bl, 2));
    let (m32, n32, k32, g32) = (m as i32, n as i32, k as i32, g as i32);
    // Row tiles of every group (a group boundary adds at most one partial tile, and the rows
    // past the last end are one more group) × column tiles, column tiles fastest.
    let blocks = (m.div_ceil(BM) + g + 1) * n.div_ceil(BN);
    if blocks > i32::MAX as usize {
        return Err(Error::invalid(
            "grouped_mm",
            format!("{m} rows in {g} groups × {n} columns: {blocks} tiles, more than a CUDA grid holds"),
        ));
    }
    let cfg =
        LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
    // SAFETY: a and b are read at their layouts' strides within their shapes (rows below M,
    // k below K, n below N, groups below G), offs at G contiguous int32s; out gets M × N
    // elements, every one written (rows past the last end as zeros). The kernel calls
    // kiln_after_previous_kernel before its first global access.
    unsafe { launch_after!(dev, f, cfg; ap, sam, sak, bp, sbg, sbk, sbn, offs_ptr, op, m32, n32, k32, g32)? };
    Ok(out)
}
