//! Launcher of `bincount.cu`.

use super::reduce::{cfg, coop_blocks, sync_words};
use super::{dev_of, BINCOUNT};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::{Error, Result};
use crate::DType;

/// Histogram of `n` int64 values into `nbins` bins (values outside are dropped): int64
/// counts, or sums of `weights` (f32 gives f32, f64 gives f64). No host sync.
pub fn bincount(
    x: &DeviceBuffer,
    weights: Option<(&DeviceBuffer, DType)>,
    n: usize,
    nbins: usize,
) -> Result<DeviceBuffer> {
    let (name, out_size) = match weights.map(|w| w.1) {
        None => ("bincount_count", 8),
        Some(DType::F32) => ("bincount_f32", 4),
        Some(DType::F64) => ("bincount_f64", 8),
        Some(dt) => {
            return Err(Error::DTypeNotSupported { op: "bincount", got: dt, expected: "f32 or f64 weights" })
        }
    };
    if n > u32::MAX as usize {
        return Err(Error::invalid(
            "bincount",
            format!("{n} values: the CUDA kernel counts at most 2^32 - 1"),
        ));
    }
    let dev = dev_of(x)?;
    let out = dev.alloc(nbins * out_size)?;
    if nbins == 0 {
        return Ok(out);
    }
    let f = dev.function(&BINCOUNT, name)?;
    // Enough blocks to keep 4 loads in flight per thread, at most the resident ones.
    let blocks = n.div_ceil(512 * 4).clamp(1, coop_blocks(&dev));
    let bar = sync_words(&dev)?;
    if bar.is_none() {
        // SAFETY: `out` was just allocated with nbins·out_size bytes on this stream.
        unsafe { dev.memset_d8(out.ptr(), 0, nbins * out_size)? };
    }
    let (xp, op_, n64, nb64, barp) = (x.ptr(), out.ptr(), n as i64, nbins as i64, bar.unwrap_or(0));
    let stream = dev.stream();
    let mut b = stream.raw().launch_builder(&f);
    b.arg(&xp);
    let wp = weights.map(|w| w.0.ptr());
    if let Some(wp) = &wp {
        b.arg(wp);
    }
    b.arg(&op_).arg(&n64).arg(&nb64).arg(&barp);
    // SAFETY: reads n int64 values (and n weights of the kernel's type); writes nbins
    // outputs; with a barrier word the grid is at most coop_blocks resident blocks.
    unsafe {
        if bar.is_some() {
            b.launch_cooperative(cfg(blocks, 512))?;
        } else {
            b.launch(cfg(blocks, 512))?;
        }
    }
    Ok(out)
}
