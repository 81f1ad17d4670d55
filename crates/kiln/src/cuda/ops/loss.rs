//! Launchers of `loss.cu`. Inputs are contiguous, offset 0, of one shape.

use super::reduce::{cfg, coop_blocks, sync_words};
use super::{dev_of, suffix, LOSS};
use crate::cuda::{DeviceBuffer, PushKernelArg};
use crate::error::Result;
use crate::ops::Reduction;
use crate::DType;

const THREADS: u32 = 256;

/// `(a - b)²` per element (`Reduction::None`, n outputs) or its sum / mean (one output).
pub fn mse_loss(
    a: &DeviceBuffer,
    b: &DeviceBuffer,
    dt: DType,
    n: usize,
    red: Reduction,
) -> Result<DeviceBuffer> {
    let dev = dev_of(a)?;
    let sfx = suffix("mse_loss", dt)?;
    let (ap, bp, n64) = (a.ptr(), b.ptr(), n as i64);
    if red == Reduction::None {
        let out = dev.alloc(n * dt.size())?;
        if n == 0 {
            return Ok(out);
        }
        let f = dev.function(&LOSS, &format!("mse_none_{sfx}"))?;
        let op_ = out.ptr();
        // SAFETY: reads n elements of each input, writes n.
        unsafe { launch!(dev.stream(), f, super::grid(&dev, n); ap, bp, op_, n64)? };
        return Ok(out);
    }
    let out = dev.alloc(dt.size())?;
    let f = dev.function(&LOSS, &format!("mse_reduce_{sfx}"))?;
    let blocks = n.div_ceil(THREADS as usize * 4).clamp(1, coop_blocks(&dev));
    let part = dev.alloc(if blocks > 1 { blocks * 8 } else { 0 })?;
    let words = if blocks > 1 { sync_words(&dev)? } else { None };
    // One launch (phase 2: one block, or the last block adds the block sums via the counter
    // word), else phase 0 (block sums) then phase 1 (one block adds them).
    let launches: &[(i32, usize)] =
        if blocks > 1 && words.is_none() { &[(0, blocks), (1, 1)] } else { &[(2, blocks)] };
    let (op_, mean, parts, pp, counter) =
        (out.ptr(), (red == Reduction::Mean) as i32, blocks as i64, part.ptr(), words.map_or(0, |w| w + 4));
    for &(phase, grid) in launches {
        // SAFETY: reads n elements of each input; writes one output and, with several blocks,
        // `blocks` f64 sums to `part`; `counter` is this stream's sync word.
        unsafe {
            launch!(dev.stream(), f, cfg(grid, THREADS); ap, bp, op_, n64, mean, phase, parts, pp, counter)?
        };
    }
    Ok(out)
}
