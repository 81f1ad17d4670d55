//! `kiln bench --suite linear [--peer torch|none]`: decode-time `linear` (bf16, bias, one x
//! row) over the shapes of real models: µs per call by CUDA-graph replay, GB/s of
//! weight + x + bias + out, % of the copy bandwidth measured in the same run, the GEMV
//! variant each shape ran with, and PyTorch's F.linear for the same shapes by the same
//! method (bench/torch_peer.py --suite linear) with the PyTorch/kiln time ratio ("speedup") and geomeans.
//!
//! Method (both sides): C = ceil(200 MB / weight bytes) copies (at most 2048) of weight and
//! bias, so one pass over them overflows the 50 MB L2; one graph captures max(C, 20) calls
//! cycling through the copies; the figure is the median over 20 replays of replay time /
//! calls. Shapes whose C copies still fit in L2 (weights under 25 KB) are flagged.
//!
//! Environment: `KILN_LINEAR_ROWS` (x rows, default 1), `KILN_LINEAR_FILTER` (only shapes
//! whose name contains it), `KILN_GEMV_SWEEP=1` (afterwards time every candidate variant
//! per shape and report the best: input for the policy table in kiln's cuda/ops/gemv.rs),
//! `KILN_GEMV_VARIANT` (force one variant).

use crate::report::provenance;
use crate::runtime::copy_bandwidth;
use crate::timing::{graph_median_ms, Stats};
use kiln::cuda::{self, ops::gemv};
use kiln::{settings, DType, Device, Result, Tensor};
use serde_json::{json, Value};

/// One linear layer of a model: weight [n, k].
pub(crate) struct Shape {
    pub model: &'static str,
    pub layer: &'static str,
    pub n: usize,
    pub k: usize,
    /// One of the 27 shapes of bench/reference/torch-2.11-h200-ops.txt.
    pub reference: bool,
}

impl Shape {
    pub fn name(&self) -> String {
        format!("{} {}", self.model, self.layer)
    }
}

const fn r(model: &'static str, layer: &'static str, n: usize, k: usize) -> Shape {
    Shape { model, layer, n, k, reference: true }
}

const fn s(model: &'static str, layer: &'static str, n: usize, k: usize) -> Shape {
    Shape { model, layer, n, k, reference: false }
}

/// From the models' config.json (hidden, intermediate, heads × head_dim, vocab).
pub(crate) const SHAPES: &[Shape] = &[
    r("Llama-3.1-8B", "q_proj/o_proj", 4096, 4096),
    r("Llama-3.1-8B", "k_proj/v_proj", 1024, 4096),
    r("Llama-3.1-8B", "gate_proj/up_proj", 14336, 4096),
    r("Llama-3.1-8B", "down_proj", 4096, 14336),
    r("Llama-3.1-8B", "lm_head", 128256, 4096),
    s("Llama-3.1-8B", "qkv fused", 6144, 4096),
    s("Llama-3.1-8B", "gate_up fused", 28672, 4096),
    r("Qwen3-30B-A3B", "q_proj", 4096, 2048),
    r("Qwen3-30B-A3B", "k_proj/v_proj", 512, 2048),
    r("Qwen3-30B-A3B", "o_proj", 2048, 4096),
    r("Qwen3-30B-A3B", "router", 128, 2048),
    r("Qwen3-30B-A3B", "expert gate_up", 1536, 2048),
    r("Qwen3-30B-A3B", "expert down", 2048, 768),
    r("Qwen3-30B-A3B", "lm_head", 151936, 2048),
    s("Qwen3-30B-A3B", "qkv fused", 5120, 2048),
    r("Qwen2.5-0.5B", "q_proj/o_proj", 896, 896),
    r("Qwen2.5-0.5B", "k_proj/v_proj", 128, 896),
    r("Qwen2.5-0.5B", "gate_proj/up_proj", 4864, 896),
    r("Qwen2.5-0.5B", "down_proj", 896, 4864),
    r("Qwen2.5-0.5B", "lm_head", 151936, 896),
    r("Mistral-7B-v0.3", "q_proj/o_proj", 4096, 4096),
    r("Mistral-7B-v0.3", "k_proj/v_proj", 1024, 4096),
    r("Mistral-7B-v0.3", "gate_proj/up_proj", 14336, 4096),
    r("Mistral-7B-v0.3", "down_proj", 4096, 14336),
    r("Mistral-7B-v0.3", "lm_head", 32768, 4096),
    r("Llama-3.2-1B", "q_proj/o_proj", 2048, 2048),
    r("Llama-3.2-1B", "k_proj/v_proj", 512, 2048),
    r("Llama-3.2-1B", "gate_proj/up_proj", 8192, 2048),
    r("Llama-3.2-1B", "down_proj", 2048, 8192),
    r("Llama-3.2-1B", "lm_head", 128256, 2048),
    s("Qwen3-8B", "q_proj/o_proj", 4096, 4096),
    s("Qwen3-8B", "k_proj/v_proj", 1024, 4096),
    s("Qwen3-8B", "qkv fused", 6144, 4096),
    s("Qwen3-8B", "gate_proj/up_proj", 12288, 4096),
    s("Qwen3-8B", "down_proj", 4096, 12288),
    s("Qwen3-8B", "lm_head", 151936, 4096),
    s("Llama-3.2-3B", "q_proj/o_proj", 3072, 3072),
    s("Llama-3.2-3B", "k_proj/v_proj", 1024, 3072),
    s("Llama-3.2-3B", "gate_proj/up_proj", 8192, 3072),
    s("Llama-3.2-3B", "down_proj", 3072, 8192),
    s("Llama-3.2-3B", "lm_head", 128256, 3072),
    s("Qwen2.5-7B", "q_proj/o_proj", 3584, 3584),
    s("Qwen2.5-7B", "k_proj/v_proj", 512, 3584),
    s("Qwen2.5-7B", "gate_proj/up_proj", 18944, 3584),
    s("Qwen2.5-7B", "down_proj", 3584, 18944),
    s("Qwen2.5-7B", "lm_head", 152064, 3584),
    s("Qwen3.6-35B-A3B", "q_proj+gate", 8192, 2048),
    s("Qwen3.6-35B-A3B", "k_proj/v_proj", 512, 2048),
    s("Qwen3.6-35B-A3B", "o_proj/out_proj", 2048, 4096),
    s("Qwen3.6-35B-A3B", "in_proj_qkv", 8192, 2048),
    s("Qwen3.6-35B-A3B", "in_proj_z", 4096, 2048),
    s("Qwen3.6-35B-A3B", "in_proj_a/in_proj_b", 32, 2048),
    s("Qwen3.6-35B-A3B", "router", 256, 2048),
    s("Qwen3.6-35B-A3B", "shared_expert_gate", 1, 2048),
    s("Qwen3.6-35B-A3B", "expert gate_up", 1024, 2048),
    s("Qwen3.6-35B-A3B", "expert down", 2048, 512),
    s("Qwen3.6-35B-A3B", "shared_expert gate/up", 512, 2048),
    s("Qwen3.6-35B-A3B", "lm_head", 248320, 2048),
    s("Gemma-2-2B", "q_proj", 2048, 2304),
    s("Gemma-2-2B", "k_proj/v_proj", 1024, 2304),
    s("Gemma-2-2B", "o_proj", 2304, 2048),
    s("Gemma-2-2B", "gate_proj/up_proj", 9216, 2304),
    s("Gemma-2-2B", "down_proj", 2304, 9216),
    s("Gemma-2-2B", "lm_head", 256000, 2304),
    s("Phi-3-mini", "qkv_proj", 9216, 3072),
    s("Phi-3-mini", "o_proj", 3072, 3072),
    s("Phi-3-mini", "gate_up_proj", 16384, 3072),
    s("Phi-3-mini", "down_proj", 3072, 8192),
    s("Phi-3-mini", "lm_head", 32064, 3072),
];

const DTYPE: DType = DType::BF16;
/// Bytes the weight copies of one shape span at least.
const WORKING_SET: usize = 200_000_000;
const L2_BYTES: usize = 50_000_000;
const MAX_COPIES: usize = 2048;
const MIN_CALLS: usize = 20;
const REPS: usize = 20;
const SWEEP_REPS: usize = 10;

/// Weight copies and calls per graph for `sh`.
fn plan(sh: &Shape) -> (usize, usize) {
    let copies = WORKING_SET.div_ceil(sh.n * sh.k * DTYPE.size()).clamp(1, MAX_COPIES);
    (copies, copies.max(MIN_CALLS))
}

/// Bytes one call must move: weight, x, bias and output.
fn bytes(sh: &Shape, rows: usize) -> usize {
    (sh.n * sh.k + rows * sh.k + sh.n + rows * sh.n) * DTYPE.size()
}

struct Operands {
    x: Tensor,
    ws: Vec<Tensor>,
    bs: Vec<Tensor>,
}

fn operands(sh: &Shape, rows: usize) -> Result<Operands> {
    let dev = Device::Cuda(0);
    let (copies, _) = plan(sh);
    let seed = (sh.n * 31 + sh.k) as u64;
    let ws = (0..copies)
        .map(|i| Tensor::randn(&[sh.n, sh.k], seed + i as u64, DTYPE, dev))
        .collect::<Result<_>>()?;
    let bs = (0..copies)
        .map(|i| Tensor::randn(&[sh.n], seed ^ ((i as u64) << 32), DTYPE, dev))
        .collect::<Result<_>>()?;
    Ok(Operands { x: Tensor::randn(&[rows, sh.k], seed + 7, DTYPE, dev)?, ws, bs })
}

/// Median per-call time of `linear` cycling through the copies inside one graph.
fn time(op: &Operands, reps: usize) -> Result<Stats> {
    let dev = cuda::device(0)?;
    let calls = op.ws.len().max(MIN_CALLS);
    let mut i = 0;
    graph_median_ms(&dev, calls, reps, || {
        let j = i % op.ws.len();
        i += 1;
        op.x.linear(&op.ws[j], Some(&op.bs[j])).map(drop)
    })
}

fn geomean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x.ln(), n + 1));
    (n > 0).then(|| (sum / n as f64).exp())
}

/// The variant `linear` runs for `rows` × `sh`, or the cuBLAS path and why.
fn path(sh: &Shape, rows: usize) -> Result<String> {
    let w = kiln::layout::Layout::contiguous(&[sh.n, sh.k]);
    Ok(match gemv::declines(rows, sh.n, sh.k, &w, DTYPE) {
        Some(why) => format!("cublas ({why})"),
        None => gemv::choose(rows, sh.n, sh.k)?.to_string(),
    })
}

/// The suite; `peer` is `torch` (must succeed), `none`, or absent (run PyTorch if it can).
pub fn run(peer: Option<&str>) -> Result<Value> {
    let want = crate::peer::Want::parse(peer)?;
    let dev = cuda::device(0)?;
    let rows = settings::LINEAR_ROWS.get()?;
    let filter = settings::LINEAR_FILTER.get()?;
    let sweep = settings::GEMV_SWEEP.get()?;
    let shapes: Vec<&Shape> = SHAPES.iter().filter(|sh| sh.name().contains(&filter)).collect();
    let (copy_gbps, copy) = copy_bandwidth(&dev, 1 << 31, 20)?;
    println!("copy bandwidth {copy_gbps:.0} GB/s; linear {DTYPE}, {rows} x row(s), bias, graph replay");

    let mut results = Vec::new();
    let bar = crate::progress::bar(shapes.len(), "linear");
    for sh in &shapes {
        bar.set_message(sh.name());
        bar.inc(1);
        let op = operands(sh, rows)?;
        let st = time(&op, REPS)?;
        let us = st.median_ms * 1e3;
        let gbps = bytes(sh, rows) as f64 / (us * 1e-6) / 1e9;
        let (copies, calls) = plan(sh);
        results.push(json!({
            "name": sh.name(), "model": sh.model, "layer": sh.layer, "n": sh.n, "k": sh.k,
            "reference": sh.reference, "path": path(sh, rows)?, "bytes": bytes(sh, rows),
            "copies": copies, "calls": calls, "l2_resident": copies * sh.n * sh.k * DTYPE.size() <= L2_BYTES,
            "us": us, "gbps": gbps, "pct_copy": 100.0 * gbps / copy_gbps,
            "floor_us": bytes(sh, rows) as f64 / (copy_gbps * 1e9) * 1e6, "stats": st,
        }));
    }
    bar.finish_and_clear();
    dev.empty_cache()?;

    let input = json!({
        "rows": rows, "dtype": "bfloat16", "reps": REPS,
        "shapes": shapes.iter().zip(&results).map(|(sh, r)| json!({
            "name": sh.name(), "n": sh.n, "k": sh.k, "bias": true,
            "copies": r["copies"], "calls": r["calls"],
        })).collect::<Vec<_>>(),
    });
    let torch = crate::peer::torch("linear", Some(&input), want)?.ok();
    if let Some(t) = &torch {
        let empty = vec![];
        let peer_results = t["results"].as_array().unwrap_or(&empty);
        for (r, sh) in results.iter_mut().zip(&shapes) {
            let hit = peer_results.iter().find(|p| p["name"] == r["name"]).and_then(|p| p["us"].as_f64());
            if let (Some(tus), Some(us)) = (hit, r["us"].as_f64()) {
                r["torch_us"] = json!(tus);
                r["torch_gbps"] = json!(bytes(sh, rows) as f64 / (tus * 1e-6) / 1e9);
                r["speedup"] = json!(tus / us);
            }
        }
    }

    // 99 columns: workload, shape, variant, kiln, share of copy bandwidth, PyTorch, ratio.
    let line = |c: [&str; 8]| {
        println!(
            "{:<37} {:>11} {:<15} {:>7} {:>4} {:>5} {:>7} {:>6}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        )
    };
    line(["workload (* L2-resident)", "N x K", "variant", "kiln µs", "GB/s", "%copy", "torch µs", "ratio"]);
    for r in &results {
        let f = |key: &str, prec: usize| r[key].as_f64().map_or("-".to_string(), |v| format!("{v:.prec$}"));
        let mut name: String = r["name"].as_str().unwrap_or("").chars().take(36).collect();
        if r["l2_resident"] == true {
            name.push('*');
        }
        let shape = format!("{}x{}", r["n"].as_u64().unwrap_or(0), r["k"].as_u64().unwrap_or(0));
        let (us, gbps, pct, tus, ratio) =
            (f("us", 2), f("gbps", 0), f("pct_copy", 1), f("torch_us", 2), f("speedup", 2));
        line([&name, &shape, r["path"].as_str().unwrap_or(""), &us, &gbps, &pct, &tus, &ratio]);
    }
    let summary = summarize(&results);
    println!("{}", serde_json::to_string_pretty(&summary).unwrap_or_default());

    let sweep_results = if sweep { Some(sweep_variants(&shapes, rows)?) } else { None };
    Ok(json!({
        "suite": "linear",
        "provenance": provenance(),
        "dtype": DTYPE.name(),
        "rows": rows,
        "method": {
            "timing": "CUDA graph of max(copies, 20) calls cycling through the weight copies; median of replays / calls",
            "reps": REPS, "working_set_bytes": WORKING_SET, "max_copies": MAX_COPIES, "bias": true,
        },
        "copy_gbps": copy_gbps,
        "copy": copy,
        "shapes": results,
        "summary": summary,
        "torch": torch.as_ref().map(|t| json!({ "torch": t["torch"], "cuda": t["cuda"], "device": t["device"] })),
        "sweep": sweep_results,
    }))
}

/// Geomeans (all shapes and the 27 reference ones), worst speedup, the router, and the
/// largest shapes' share of copy bandwidth: the figures the goals are stated in.
fn summarize(results: &[Value]) -> Value {
    let col = |key: &str, only_ref: bool| {
        geomean(
            results.iter().filter(|r| !only_ref || r["reference"] == true).filter_map(|r| r[key].as_f64()),
        )
    };
    let worst = results
        .iter()
        .filter_map(|r| Some((r["speedup"].as_f64()?, r["name"].as_str()?)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let router = results.iter().find(|r| r["name"] == "Qwen3-30B-A3B router");
    let largest = results
        .iter()
        .filter(|r| r["bytes"].as_u64().is_some_and(|b| b >= 100_000_000))
        .filter_map(|r| r["pct_copy"].as_f64())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));
    json!({
        "shapes": results.len(),
        "geomean_gbps": col("gbps", false),
        "geomean_gbps_reference27": col("gbps", true),
        "torch_geomean_gbps": col("torch_gbps", false),
        "torch_geomean_gbps_reference27": col("torch_gbps", true),
        "geomean_speedup": col("speedup", false),
        "worst_speedup": worst.map(|(s, n)| json!({ "speedup": s, "name": n })),
        "router_128x2048": router.map(|r| json!({ "us": r["us"], "torch_us": r["torch_us"], "speedup": r["speedup"] })),
        "min_pct_copy_shapes_over_100MB": largest,
        "goals": "geomean >= 3300 GB/s; no speedup < 1; router speedup >= 4; shapes over 100 MB >= 90% of copy",
    })
}

/// Every candidate variant on every shape: the best, and how it compares with the table's.
fn sweep_variants(shapes: &[&Shape], rows: usize) -> Result<Value> {
    let mut out = Vec::new();
    println!("sweep: {} variants per shape", gemv::candidates().len());
    for sh in shapes {
        let op = operands(sh, rows)?;
        let table = gemv::choose(rows, sh.n, sh.k)?;
        let table_us = time(&op, SWEEP_REPS)?.median_ms * 1e3;
        let mut timed = Vec::new();
        for v in gemv::candidates() {
            let _forced = settings::GEMV_VARIANT.scoped(Some(v));
            timed.push((v.to_string(), time(&op, SWEEP_REPS)?.median_ms * 1e3));
        }
        timed.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, best_us) = timed[0].clone();
        println!(
            "sweep {:<42} table {table} {table_us:8.2} us, best {best} {best_us:8.2} us ({:.2}x)",
            sh.name(),
            table_us / best_us
        );
        out.push(json!({
            "name": sh.name(), "n": sh.n, "k": sh.k, "rows": rows,
            "table": table.to_string(), "table_us": table_us, "best": best, "best_us": best_us,
            "all": timed.iter().map(|(v, us)| json!({ "variant": v, "us": us })).collect::<Vec<_>>(),
        }));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_cover_the_reference_and_more() {
        assert!(SHAPES.len() >= 60);
        assert_eq!(SHAPES.iter().filter(|s| s.reference).count(), 27);
        let mut names: Vec<String> = SHAPES.iter().map(Shape::name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SHAPES.len(), "shape names must be unique (the peer joins on them)");
    }

    #[test]
    fn working_set_overflows_l2_unless_capped() {
        for sh in SHAPES {
            let (copies, calls) = plan(sh);
            assert!(calls >= MIN_CALLS && calls >= copies);
            assert!(copies * sh.n * sh.k * 2 >= WORKING_SET || copies == MAX_COPIES, "{}", sh.name());
        }
        assert_eq!(geomean([2.0, 8.0].into_iter()), Some(4.0));
    }
}
