//! Launcher of `linalg_inv.cu`: closed-form inverses of batched n×n matrices, n ≤ 4.

use super::{dev_of, LINALG_INV};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::{DType, Device};
use cudarc::driver::{result as dresult, LaunchConfig};
use std::sync::Mutex;

/// The largest n with a closed-form kernel.
pub const INV_MAX_N: usize = 4;

/// Matrices per block (`INV_TPB` in the kernel).
const TPB: usize = 128;

/// A page-locked host word the kernel raises when it meets a singular matrix. Under unified
/// addressing the kernel writes it through its host address, so the common (nonsingular)
/// call needs neither a memset before nor a copy after: only the stream synchronisation
/// that any singularity check needs (PyTorch's reads its `info` back too).
struct HostFlag(*mut u32);

// SAFETY: the page-locked word is only touched under `RAISED`'s lock.
unsafe impl Send for HostFlag {}

/// Allocated on first use and kept for the process (4 bytes); the lock also keeps two
/// calls from sharing it at once.
static RAISED: Mutex<Option<HostFlag>> = Mutex::new(None);

/// The inverses of `count` contiguous `n × n` matrices of `a` (f32 or f64, offset 0),
/// and the index of the first singular one (zero determinant), if any. The check is a
/// host synchronisation, so this cannot be captured in a CUDA graph.
pub fn inv_small(
    a: &DeviceBuffer,
    dt: DType,
    n: usize,
    count: usize,
) -> Result<(DeviceBuffer, Option<usize>)> {
    let sfx = match dt {
        DType::F32 => "f32",
        DType::F64 => "f64",
        _ => {
            return Err(Error::NotImplemented {
                op: "linalg.inv",
                device: Device::Cuda(a.ordinal()),
                dtype: dt,
            })
        }
    };
    let dev = dev_of(a)?;
    if dev.stream().is_capturing()? {
        return Err(Error::Cuda("linalg.inv: its singularity check cannot be captured in a graph".into()));
    }
    let out = dev.alloc(count * n * n * dt.size())?;
    let mut slot = RAISED.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        dev.context().bind_to_thread()?;
        // SAFETY: a plain page-locked allocation of 4 bytes, kept for the process.
        let host = unsafe { dresult::malloc_host(4, 0) }? as *mut u32;
        // SAFETY: just allocated, 4 bytes, no kernel has its address yet.
        unsafe { host.write_volatile(0) };
        *slot = Some(HostFlag(host));
    }
    let host = slot.as_ref().expect("allocated above").0;
    let launch = |first: u64| -> Result<()> {
        let f = dev.function(&LINALG_INV, &format!("inv{n}_{sfx}"))?;
        let cfg = LaunchConfig {
            grid_dim: (count.div_ceil(TPB) as u32, 1, 1),
            block_dim: (TPB as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ap, op_, c64, raised) = (a.ptr(), out.ptr(), count as i64, host as u64);
        // SAFETY: block b reads matrices 128·b.. of `a` (count·n² elements in all) and writes
        // the same of `out`; `first` is null or 8 device bytes, `raised` the live page-locked
        // word, addressable by the device under unified addressing (every 64-bit platform).
        unsafe { launch!(dev.stream(), f, cfg; ap, op_, c64, first, raised)? };
        Ok(())
    };
    launch(0)?;
    dev.stream().synchronize()?;
    // SAFETY: the stream has finished the kernel, the word's only writer.
    if unsafe { host.read_volatile() } == 0 {
        return Ok((out, None));
    }
    // The error path: again with a zeroed word for the atomicMax that names the first
    // singular matrix; the read-back waits for it, then the host word is lowered.
    let first = dev.alloc_zeroed(8)?;
    launch(first.ptr())?;
    let raised = u64::from_le_bytes(dev.dtoh(&first, 0, 8)?.try_into().expect("8 bytes were read"));
    // SAFETY: both launches have finished; no kernel can write the word.
    unsafe { host.write_volatile(0) };
    Ok((out, Some(count - raised as usize)))
}
