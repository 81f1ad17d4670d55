//! `kiln bench --suite linalg [--peer torch|none]`: the CUDA linalg kernels in µs per call
//! beside `torch.linalg.*` on the same shapes (bench/torch_peer.py --suite linalg): batched
//! closed-form inverses (`inv`, ≤ 4 × 4) and batched small triangular solves
//! (`solve_triangular`, ≤ 64 × 64), among them the Gated DeltaNet's chunk solves, and LU
//! factorisations (`lu_factor`: one complex64 512 × 512, a batch of small f32 ones).
//!
//! Method (both sides): f32; A = randn / n + 2·I (well conditioned), B = randn; LU
//! factors plain randn (complex64 where named), so rows are swapped. `inv`
//! checks for singular matrices, which reads a flag back to the host (PyTorch's
//! `linalg.inv` checks its `info` too), so it cannot be captured in a graph: it is timed
//! eagerly, each call between two CUDA events after warm-up, median of 20. The solves
//! and LU factorisations never synchronise: one CUDA graph captures 20 calls, the figure is the median over 20
//! replays of replay time / calls.

use crate::report::{print_table, provenance, Col};
use crate::timing::{gpu_median_ms, graph_median_ms, Stats};
use kiln::cuda;
use kiln::{DType, Device, Result, Tensor};
use serde_json::{json, Value};

const CALLS: usize = 20;
const REPS: usize = 20;

/// One timed op: `batch` systems of `n × n` (and `k` right-hand sides for a solve).
struct Workload {
    op: &'static str,
    batch: usize,
    n: usize,
    k: usize,
    unit: bool,
    /// complex64 (lu_factor) rather than f32.
    complex: bool,
    what: &'static str,
}

impl Workload {
    fn name(&self) -> String {
        match self.op {
            "inv" => format!("inv {}x{}x{}", self.batch, self.n, self.n),
            "lu_factor" => {
                let dt = if self.complex { "complex64" } else { "f32" };
                format!("lu_factor {}x{}x{} {dt}", self.batch, self.n, self.n)
            }
            _ => {
                let tri = if self.unit { "unit lower" } else { "lower" };
                format!("solve_triangular {}x{}x{} {tri}, {} rhs", self.batch, self.n, self.n, self.k)
            }
        }
    }
}

const fn w(op: &'static str, batch: usize, n: usize, k: usize, unit: bool, what: &'static str) -> Workload {
    Workload { op, batch, n, k, unit, complex: false, what }
}

const WORKLOADS: &[Workload] = &[
    w("inv", 100_000, 4, 0, false, "issue 33 goal: >= 20x PyTorch"),
    w("inv", 100_000, 3, 0, false, ""),
    w("solve_triangular", 4096, 64, 8, false, "issue 33 goal: >= 5x PyTorch"),
    w("solve_triangular", 4096, 16, 8, true, "DeltaNet 16-chunk size"),
    w("solve_triangular", 4096, 32, 8, true, "DeltaNet 32-chunk size"),
    w("solve_triangular", 2048, 64, 256, true, "DeltaNet prompt: 64-chunks, values + keys (dv = dk = 128)"),
    Workload { complex: true, ..w("lu_factor", 1, 512, 0, false, "issue 33 goal: >= 3x PyTorch") },
    w("lu_factor", 10_000, 8, 0, false, "batched small LU"),
];

/// `[batch, n, n]`: randn / n + 2·I on `device`.
fn matrices(batch: usize, n: usize, seed: u64, device: Device) -> Result<Tensor> {
    let eye: Vec<f32> = (0..n * n).map(|k| if k % (n + 1) == 0 { 2.0 } else { 0.0 }).collect();
    let eye = Tensor::from_vec(eye, &[n, n], Device::Cpu)?.to_device(device)?;
    Tensor::randn(&[batch, n, n], seed, DType::F32, device)?.div_scalar(n as f64)?.add(&eye)
}

fn time(wl: &Workload, seed: u64) -> Result<Stats> {
    let dev = cuda::device(0)?;
    let gpu = Device::Cuda(0);
    let a = matrices(wl.batch, wl.n, seed, gpu)?;
    if wl.op == "inv" {
        return gpu_median_ms(&dev, 3, REPS, || a.linalg_inv().map(drop));
    }
    if wl.op == "lu_factor" {
        let a = if wl.complex {
            let re_im = Tensor::randn(&[wl.batch, wl.n, wl.n, 2], seed, DType::F32, Device::Cpu)?;
            Tensor::from_raw_bytes(&re_im.to_raw_bytes()?, &[wl.batch, wl.n, wl.n], DType::C64, Device::Cpu)?
                .to_device(gpu)?
        } else {
            Tensor::randn(&[wl.batch, wl.n, wl.n], seed, DType::F32, gpu)?
        };
        return graph_median_ms(&dev, CALLS, REPS, || a.linalg_lu_factor().map(drop));
    }
    let b = Tensor::randn(&[wl.batch, wl.n, wl.k], seed + 1, DType::F32, gpu)?;
    graph_median_ms(&dev, CALLS, REPS, || a.linalg_solve_triangular(&b, false, true, wl.unit).map(drop))
}

/// The suite; `peer` is `torch` (must succeed), `none`, or absent (run PyTorch if it can).
pub fn run(peer: Option<&str>) -> Result<Value> {
    let want = crate::peer::Want::parse(peer)?;
    let mut results = Vec::new();
    for (i, wl) in WORKLOADS.iter().enumerate() {
        let st = time(wl, 31 + 2 * i as u64)?;
        results.push(json!({
            "name": wl.name(), "op": wl.op, "batch": wl.batch, "n": wl.n, "k": wl.k, "unit": wl.unit,
            "complex": wl.complex,
            "timing": if wl.op == "inv" { "eager" } else { "graph" }, "note": wl.what,
            "us": st.median_ms * 1e3, "stats": st,
        }));
        cuda::device(0)?.empty_cache()?;
    }
    let input = json!({ "calls": CALLS, "reps": REPS, "shapes": results });
    let torch = crate::peer::torch("linalg", Some(&input), want)?.ok();
    if let Some(t) = &torch {
        crate::peer::merge(&mut results, t);
    }
    let cols = [
        Col("timing", "timing", 0, 6),
        Col("kiln µs", "us", 1, 10),
        Col("torch µs", "torch_us", 1, 10),
        Col("ratio", "speedup", 2, 7),
    ];
    print_table("workload", 58, &cols, &results);
    Ok(json!({
        "suite": "linalg",
        "provenance": provenance(),
        "method": {
            "dtype": "float32", "inputs": "A = randn / n + 2 I, B = randn; lu_factor: A = randn",
            "timing": "solves: CUDA graph of 20 calls, median of 20 replays / calls; inv: eager (it reads \
                       a singularity flag back), events around each call after 3 warm-ups, median of 20",
            "calls": CALLS, "reps": REPS,
        },
        "shapes": results,
        "torch": torch.as_ref().map(|t| json!({ "torch": t["torch"], "cuda": t["cuda"], "device": t["device"] })),
    }))
}
