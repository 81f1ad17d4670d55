//! Runtime figures of the CUDA backend (issue "Foundation II"): measured copy bandwidth,
//! a 256M-element bf16 add as a fraction of it, kernel-cache cold vs warm loads, and the
//! caching allocator under a decode-like alloc/free loop.

use crate::timing::{gpu_median_ms, Stats};
use kiln::cuda::{self, CudaDevice};
use kiln::{DType, Device, Result, Tensor};
use serde_json::{json, Value};
use std::time::Instant;

/// Device-to-device copy of `bytes`, median of `reps`: GB/s counting read + write.
pub fn copy_bandwidth(dev: &CudaDevice, bytes: usize, reps: usize) -> Result<(f64, Stats)> {
    let (src, dst) = (dev.alloc(bytes)?, dev.alloc(bytes)?);
    // SAFETY: both buffers hold `bytes` bytes.
    let st = gpu_median_ms(dev, 3, reps, || unsafe { dev.dtod(src.ptr(), dst.ptr(), bytes) })?;
    Ok((2.0 * bytes as f64 / (st.median_ms * 1e-3) / 1e9, st))
}

/// Elementwise add of two bf16 tensors of `n` elements (3 passes of n·2 bytes).
pub fn add_bf16(n: usize, reps: usize) -> Result<Stats> {
    let dev = cuda::device(0)?;
    let a = Tensor::randn(&[n], 1, DType::BF16, Device::Cuda(0))?;
    let b = Tensor::randn(&[n], 2, DType::BF16, Device::Cuda(0))?;
    gpu_median_ms(&dev, 3, reps, || a.add(&b).map(drop))
}

/// A decode-like loop: per step, 36 layers each allocating and freeing the activations
/// of one token of an 8B model, plus the logits. Returns (µs per alloc, stats delta).
pub fn alloc_loop(dev: &CudaDevice, steps: usize) -> Result<Value> {
    let sizes = [4096 * 2, 6144 * 2, 4096 * 2, 14336 * 2 * 2, 14336 * 2, 4096 * 2, 4096 * 4];
    let before = dev.memory_stats();
    let t0 = Instant::now();
    let mut count = 0usize;
    for _ in 0..steps {
        for _layer in 0..36 {
            let held: Vec<_> = sizes.iter().map(|&s| dev.alloc(s)).collect::<Result<_>>()?;
            count += held.len();
        }
        drop(dev.alloc(151_936 * 4)?);
        count += 1;
    }
    dev.synchronize()?;
    let secs = t0.elapsed().as_secs_f64();
    let after = dev.memory_stats();
    Ok(json!({
        "steps": steps,
        "allocs": count,
        "us_per_alloc_free": secs * 1e6 / count as f64,
        "driver_allocs": after.driver_alloc_count - before.driver_alloc_count,
        "reused": after.reuse_count - before.reuse_count,
        "peak_reserved_bytes": after.peak_reserved_bytes,
    }))
}

/// All runtime figures as one JSON object, with a short table on stdout.
pub fn run() -> Result<Value> {
    let dev = cuda::device(0)?;
    let t0 = Instant::now();
    for src in kiln::cuda::ops::ALL_SOURCES {
        dev.function(src, "cast_strided").ok();
    }
    let load_wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    let cache = cuda::kernel_cache_stats();
    let (copy_gbps, copy) = copy_bandwidth(&dev, 1 << 31, 20)?;
    let n = 256 << 20;
    let add = add_bf16(n, 20)?;
    let add_gbps = 3.0 * (n * 2) as f64 / (add.median_ms * 1e-3) / 1e9;
    let alloc = alloc_loop(&dev, 200)?;
    println!("copy bandwidth (2 GiB d2d)      {copy_gbps:8.0} GB/s   median {:.3} ms", copy.median_ms);
    println!(
        "bf16 add 256M elements          {add_gbps:8.0} GB/s   {:.1}% of copy, median {:.3} ms",
        100.0 * add_gbps / copy_gbps,
        add.median_ms
    );
    println!(
        "kernel modules: {} compiled ({:.0} ms), {} from disk cache ({:.1} ms); wall {load_wall_ms:.0} ms",
        cache.compiled, cache.compiled_ms, cache.disk_hits, cache.disk_ms
    );
    println!(
        "allocator loop: {} allocs over {} steps, {} from the driver, {:.2} µs per alloc+free",
        alloc["allocs"],
        alloc["steps"],
        alloc["driver_allocs"],
        alloc["us_per_alloc_free"].as_f64().unwrap_or(f64::NAN)
    );
    Ok(json!({
        "copy_gbps": copy_gbps,
        "copy": copy,
        "add_bf16_256M": { "gbps": add_gbps, "fraction_of_copy": add_gbps / copy_gbps, "stats": add },
        "kernel_cache": {
            "compiled": cache.compiled, "compiled_ms": cache.compiled_ms,
            "disk_hits": cache.disk_hits, "disk_ms": cache.disk_ms, "wall_ms": load_wall_ms,
        },
        "allocator": alloc,
    }))
}
