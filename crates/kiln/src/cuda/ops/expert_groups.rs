//! Launcher of `kernels/expert_groups.cu`: a mixture-of-experts layer's (token, slot) pairs
//! grouped by expert on the device (a counting sort in one block, no host sync).

use super::{dev_of, EXPERT_GROUPS};
use crate::cuda::{DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};

/// Most experts the kernel's shared-memory histogram holds (`E + 1` int bins in 48 KB).
pub const EXPERT_GROUPS_MAX: usize = 8192;

/// `(rows, slot_rows, ends)` for `n` contiguous int64 expert indices, `k` per token, `e`
/// experts: `rows` int64 `[n]` (the token of each grouped row), `slot_rows` int64 `[n]` (the
/// grouped row of each pair), `ends` int32 `[e]` (cumulative group ends).
pub fn expert_groups(
    idx: &DeviceBuffer,
    n: usize,
    k: usize,
    e: usize,
) -> Result<(DeviceBuffer, DeviceBuffer, DeviceBuffer)> {
    if e == 0 || e > EXPERT_GROUPS_MAX || n > i32::MAX as usize {
        return Err(Error::invalid(
            "expert_groups",
            format!("{e} experts, {n} pairs: the CUDA kernel takes 1..={EXPERT_GROUPS_MAX} experts and < 2^31 pairs"),
        ));
    }
    let dev = dev_of(idx)?;
    let (rows, slot_rows, ends) = (dev.alloc(n * 8)?, dev.alloc(n * 8)?, dev.alloc(e * 4)?);
    let f = dev.function(&EXPERT_GROUPS, "expert_groups")?;
    let cfg =
        LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1024, 1, 1), shared_mem_bytes: (4 * (e + 1)) as u32 };
    let (ip, rp, sp, ep) = (idx.ptr(), rows.ptr(), slot_rows.ptr(), ends.ptr());
    let (n64, k32, e32) = (n as i64, k.max(1) as i32, e as i32);
    // SAFETY: reads n int64 indices; writes n rows and n slot rows (each pair's row is
    // distinct, below n) and e ends; the dynamic shared memory holds e + 1 int bins. The
    // kernel calls kiln_after_previous_kernel before its first global access.
    unsafe { launch_after!(dev, f, cfg; ip, n64, k32, e32, rp, sp, ep)? };
    Ok((rows, slot_rows, ends))
}
