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
            b.launch(cfg(blocks, 512)).map_err(launch_error!())?;
        }
    }
    Ok(out)
}

/// `(min, max)` of `n` int64 values, as a 2-element buffer of order keys (`u64`): max key
/// first, then the max of the complemented keys (`value_range_i64` in `bincount.cu`;
/// [`decode_range`] turns them back). One launch over the whole GPU, no host sync.
pub fn value_range_i64(x: &DeviceBuffer, n: usize) -> Result<DeviceBuffer> {
    let dev = dev_of(x)?;
    let out = dev.alloc(16)?;
    // SAFETY: `out` was just allocated with 16 bytes on this stream.
    unsafe { dev.memset_d8(out.ptr(), 0, 16)? };
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(&BINCOUNT, "value_range_i64")?;
    let (xp, op_, n64) = (x.ptr(), out.ptr(), n as i64);
    // SAFETY: reads n int64 values at `xp`, updates the two u64 at `op_`.
    unsafe {
        launch!(dev.stream(), f, cfg(n.div_ceil(512 * 8).clamp(1, 4 * coop_blocks(&dev)), 512); xp, op_, n64)?
    };
    Ok(out)
}

/// `(min, max)` from the two keys `value_range_i64` wrote.
pub fn decode_range(keys: [u64; 2]) -> (i64, i64) {
    const SIGN: u64 = 1 << 63;
    ((!keys[1] ^ SIGN) as i64, (keys[0] ^ SIGN) as i64)
}

#[cfg(test)]
mod tests {
    use super::decode_range;

    /// The kernel's keys, computed on the host: max of `v ^ 2^63`, max of its complement.
    fn keys(xs: &[i64]) -> [u64; 2] {
        let key = |v: i64| (v as u64) ^ (1 << 63);
        [xs.iter().map(|&v| key(v)).max().unwrap(), xs.iter().map(|&v| !key(v)).max().unwrap()]
    }

    #[test]
    fn range_keys_round_trip() {
        for xs in [vec![0i64], vec![5, -3, 7, 2], vec![i64::MIN, i64::MAX], vec![-1, -9], vec![42, 42]] {
            let want = (*xs.iter().min().unwrap(), *xs.iter().max().unwrap());
            assert_eq!(decode_range(keys(&xs)), want, "{xs:?}");
        }
    }
}
