//! CPU figures: f32 matmul and a large elementwise add on the CPU backend, timed by the
//! wall clock (median of repeats after a warm-up). Runs in CI at small sizes.

use kiln::{DType, Device, Result, Tensor};
use serde_json::{json, Value};
use std::time::Instant;

fn median_ms(warmup: usize, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<crate::timing::Stats> {
    for _ in 0..warmup {
        f()?;
    }
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(crate::timing::Stats::from_samples(v, warmup))
}

/// `n`×`n`×`n` f32 matmul and an `add_len`-element f32 add.
pub fn run(n: usize, add_len: usize, reps: usize) -> Result<Value> {
    let a = Tensor::randn(&[n, n], 1, DType::F32, Device::Cpu)?;
    let b = Tensor::randn(&[n, n], 2, DType::F32, Device::Cpu)?;
    let mm = median_ms(1, reps, || a.matmul(&b).map(drop))?;
    let x = Tensor::randn(&[add_len], 3, DType::F32, Device::Cpu)?;
    let y = Tensor::randn(&[add_len], 4, DType::F32, Device::Cpu)?;
    let add = median_ms(1, reps, || x.add(&y).map(drop))?;
    let gflops = 2.0 * (n as f64).powi(3) / (mm.median_ms * 1e-3) / 1e9;
    let gbps = 3.0 * 4.0 * add_len as f64 / (add.median_ms * 1e-3) / 1e9;
    println!("cpu matmul f32 {n}³      {:9.3} ms  {gflops:7.1} GFLOP/s", mm.median_ms);
    println!("cpu add f32 {add_len} elems {:9.3} ms  {gbps:7.1} GB/s", add.median_ms);
    Ok(json!({
        "threads": rayon_threads(),
        "matmul_f32": { "n": n, "stats": mm, "gflops": gflops },
        "add_f32": { "elements": add_len, "stats": add, "gbps": gbps },
    }))
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_cpu_suite_runs_and_times_something() {
        let v = super::run(64, 1 << 12, 3).unwrap();
        assert!(v["matmul_f32"]["stats"]["median_ms"].as_f64().unwrap() > 0.0);
        assert!(v["add_f32"]["gbps"].as_f64().unwrap() > 0.0);
    }
}
