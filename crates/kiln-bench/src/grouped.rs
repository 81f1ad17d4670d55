//! `kiln bench --suite grouped [--peer torch|none]`: `grouped_mm` on mixture-of-experts
//! prompts — every (token, slot) row of a prompt multiplied by its expert's weight, the rows
//! sorted by expert with int32 group ends on the device — in µs per call and TFLOP/s, beside
//! PyTorch's `torch._grouped_mm` on the same operands (bench/torch_peer.py --suite grouped).
//!
//! Method (both sides): bf16; the weight is F.linear's stacked `[E, N, K]` seen as
//! `[E, K, N]` (a transposed view, as the models hold experts); the group sizes come from
//! routing each token to `top_k` distinct experts drawn by a fixed-seed generator, and both
//! sides get the same ends; one CUDA graph captures 20 calls, the figure is the median over
//! 20 replays of replay time / calls. The weights (≥ 200 MB) overflow the L2.

use crate::report::{print_table, provenance, Col};
use crate::timing::graph_median_ms;
use kiln::cuda;
use kiln::{DType, Device, Result, Tensor};
use serde_json::{json, Value};

const CALLS: usize = 20;
const REPS: usize = 20;

/// One expert projection of a model at a prompt length.
struct Workload {
    model: &'static str,
    layer: &'static str,
    experts: usize,
    top_k: usize,
    n: usize,
    k: usize,
    tokens: usize,
}

impl Workload {
    fn name(&self) -> String {
        format!("{} {} {} tokens", self.model, self.layer, self.tokens)
    }
}

const fn w(
    model: &'static str,
    layer: &'static str,
    experts: usize,
    top_k: usize,
    n: usize,
    k: usize,
    tokens: usize,
) -> Workload {
    Workload { model, layer, experts, top_k, n, k, tokens }
}

/// From the models' config.json: experts, top-k, hidden and expert intermediate sizes.
const WORKLOADS: &[Workload] = &[
    w("Qwen3-30B-A3B", "gate_up", 128, 8, 2 * 768, 2048, 512),
    w("Qwen3-30B-A3B", "down", 128, 8, 2048, 768, 512),
    w("Qwen3-30B-A3B", "gate_up", 128, 8, 2 * 768, 2048, 4096),
    w("Qwen3-30B-A3B", "down", 128, 8, 2048, 768, 4096),
    w("LFM2-8B-A1B", "gate_up", 32, 4, 2 * 1792, 2048, 4096),
];

/// The experts of `tokens` tokens, `top_k` distinct ones of `experts` each, row-major
/// `[tokens, top_k]` (xorshift draws from a fixed seed; the experts suite routes by it too).
pub(crate) fn draw_experts(experts: usize, top_k: usize, tokens: usize, seed: u64) -> Vec<i64> {
    let mut s = seed | 1;
    let k = top_k.min(experts);
    let mut out = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let first = out.len();
        while out.len() < first + k {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let e = (s % experts as u64) as i64;
            if !out[first..].contains(&e) {
                out.push(e);
            }
        }
    }
    out
}

/// Group ends for `tokens` tokens, each routed to `top_k` distinct experts of `experts`
/// ([`draw_experts`]).
fn group_ends(experts: usize, top_k: usize, tokens: usize, seed: u64) -> Vec<i32> {
    let mut counts = vec![0i32; experts];
    draw_experts(experts, top_k, tokens, seed).iter().for_each(|&e| counts[e as usize] += 1);
    counts.iter().scan(0, |end, c| Some(*end + c).inspect(|e| *end = *e)).collect()
}

/// The suite; `peer` is `torch` (must succeed), `none`, or absent (run PyTorch if it can).
pub fn run(peer: Option<&str>) -> Result<Value> {
    let want = crate::peer::Want::parse(peer)?;
    let dev = cuda::device(0)?;
    let gpu = Device::Cuda(0);
    let mut results = Vec::new();
    let bar = crate::progress::bar(WORKLOADS.len(), "grouped");
    for (i, wl) in WORKLOADS.iter().enumerate() {
        bar.set_message(wl.name());
        bar.inc(1);
        let m = wl.tokens * wl.top_k;
        let ends = group_ends(wl.experts, wl.top_k, wl.tokens, 0x9E37_79B9 + i as u64);
        let a = Tensor::randn(&[m, wl.k], 11 + i as u64, DType::BF16, gpu)?;
        let b = Tensor::randn(&[wl.experts, wl.n, wl.k], 23 + i as u64, DType::BF16, gpu)?.transpose(1, 2)?;
        let offs = Tensor::from_vec(ends.clone(), &[wl.experts], Device::Cpu)?.to_device(gpu)?;
        let st = graph_median_ms(&dev, CALLS, REPS, || a.grouped_mm(&b, &offs).map(drop))?;
        let us = st.median_ms * 1e3;
        let flops = 2.0 * (m * wl.n * wl.k) as f64;
        results.push(json!({
            "name": wl.name(), "model": wl.model, "layer": wl.layer, "experts": wl.experts,
            "top_k": wl.top_k, "tokens": wl.tokens, "m": m, "n": wl.n, "k": wl.k, "ends": ends,
            "us": us, "tflops": flops / (us * 1e-6) / 1e12, "stats": st,
        }));
        dev.empty_cache()?;
    }
    bar.finish_and_clear();

    let input = json!({
        "calls": CALLS, "reps": REPS,
        "shapes": results.iter().map(|r| json!({
            "name": r["name"], "m": r["m"], "n": r["n"], "k": r["k"], "ends": r["ends"],
        })).collect::<Vec<_>>(),
    });
    let torch = crate::peer::torch("grouped", Some(&input), want)?.ok();
    if let Some(t) = &torch {
        crate::peer::merge(&mut results, t);
    }
    for r in &mut results {
        r["shape"] = json!(format!("{}x{}x{}", r["m"], r["n"], r["k"]));
    }
    let cols = [
        Col("M x N x K", "shape", 0, 18),
        Col("kiln µs", "us", 1, 9),
        Col("TFLOP/s", "tflops", 1, 7),
        Col("torch µs", "torch_us", 1, 9),
        Col("ratio", "speedup", 2, 6),
    ];
    print_table("workload", 40, &cols, &results);
    Ok(json!({
        "suite": "grouped",
        "provenance": provenance(),
        "method": {
            "dtype": "bfloat16", "weights": "[E, N, K] seen as [E, K, N] (transposed view)",
            "timing": "CUDA graph of 20 calls; median of 20 replays / calls", "calls": CALLS, "reps": REPS,
        },
        "shapes": results,
        "torch": torch.as_ref().map(|t| json!({ "torch": t["torch"], "cuda": t["cuda"], "device": t["device"] })),
    }))
}

#[cfg(test)]
mod tests {
    use super::group_ends;

    #[test]
    fn every_token_lands_in_top_k_groups() {
        let ends = group_ends(128, 8, 512, 7);
        assert_eq!(ends.len(), 128);
        assert_eq!(*ends.last().unwrap(), 512 * 8);
        assert!(ends.windows(2).all(|p| p[0] <= p[1]));
        // Uniform routing: no expert gets a tenth of the rows or none.
        let sizes: Vec<i32> = std::iter::once(ends[0]).chain(ends.windows(2).map(|p| p[1] - p[0])).collect();
        assert!(sizes.iter().all(|&s| s > 0 && s < 410), "{sizes:?}");
    }
}
