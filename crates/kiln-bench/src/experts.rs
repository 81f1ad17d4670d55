//! `kiln bench --suite experts`: the two expert kernels of a mixture-of-experts decode step,
//! one token: `expert_swiglu` (the chosen experts' gate_up GEMVs with SwiGLU) and
//! `expert_linear_sum` (their down GEMVs with the router-weighted sum), in µs per call, GB/s
//! of the bytes a call must move (the chosen experts' weights, activations and output) and
//! % of the copy bandwidth measured in the same run.
//!
//! Method: bf16 weights stacked `[E, N, K]` as the models hold them; `SETS` routings of
//! `top_k` distinct experts each (drawn as the grouped suite draws them) on the device; one CUDA
//! graph captures one call per routing (so consecutive calls read other experts and the
//! chosen weights come from DRAM, as in a step), the figure is the median over 20 replays of
//! replay time / calls. `KILN_GEMV_SWEEP=1` also times every GEMV variant
//! (`gemv::candidates`, forced through `KILN_GEMV_VARIANT`) per kernel and reports the best:
//! input for the choices in kiln's cuda/ops/gemv.rs.

use crate::report::{print_table, provenance, Col};
use crate::runtime::copy_bandwidth;
use crate::timing::{graph_median_ms, Stats};
use kiln::cuda::{self, ops::gemv};
use kiln::{settings, DType, Device, Result, Tensor};
use serde_json::{json, Value};

/// Routings per graph: one call each.
const SETS: usize = 64;
const REPS: usize = 20;
const SWEEP_REPS: usize = 5;
const DTYPE: DType = DType::BF16;

/// A model's routed experts: from its config.json.
struct Moe {
    model: &'static str,
    experts: usize,
    top_k: usize,
    hidden: usize,
    inter: usize,
}

const MODELS: &[Moe] = &[
    Moe { model: "Qwen3-30B-A3B", experts: 128, top_k: 8, hidden: 2048, inter: 768 },
    Moe { model: "Qwen3.6-35B-A3B", experts: 256, top_k: 8, hidden: 2048, inter: 512 },
    Moe { model: "LFM2-8B-A1B", experts: 32, top_k: 4, hidden: 2048, inter: 1792 },
];

/// The operands of one model's two kernels.
struct Operands {
    x: Tensor,
    act: Tensor,
    gate_up: Tensor,
    down: Tensor,
    ids: Vec<Tensor>,
    weights: Tensor,
}

fn operands(m: &Moe, seed: u64) -> Result<Operands> {
    let gpu = Device::Cuda(0);
    let ids = crate::grouped::draw_experts(m.experts, m.top_k, SETS, seed)
        .chunks(m.top_k)
        .map(|c| Tensor::from_slice(c, &[1, m.top_k], Device::Cpu)?.to_device(gpu))
        .collect::<Result<_>>()?;
    Ok(Operands {
        x: Tensor::randn(&[1, m.hidden], seed + 1, DTYPE, gpu)?,
        act: Tensor::randn(&[1, m.top_k, m.inter], seed + 2, DTYPE, gpu)?,
        gate_up: Tensor::randn(&[m.experts, 2 * m.inter, m.hidden], seed + 3, DTYPE, gpu)?,
        down: Tensor::randn(&[m.experts, m.hidden, m.inter], seed + 4, DTYPE, gpu)?,
        ids,
        weights: Tensor::rand(&[1, m.top_k], seed + 5, DType::F32, gpu)?,
    })
}

/// The two kernels' names, and the bytes one call of each must move.
fn kernels(m: &Moe) -> [(&'static str, usize); 2] {
    let s = DTYPE.size();
    let expert = m.top_k * 2 * m.inter * m.hidden;
    [
        ("gate_up", (expert + m.hidden + m.top_k * m.inter) * s),
        ("down", (expert / 2 + m.top_k * m.inter + m.hidden) * s + m.top_k * 4),
    ]
}

/// Median per-call time of kernel `which` over the routings, in one graph.
fn time(op: &Operands, which: &str, reps: usize) -> Result<Stats> {
    let dev = cuda::device(0)?;
    let mut i = 0;
    graph_median_ms(&dev, SETS, reps, || {
        let ids = &op.ids[i % SETS];
        i += 1;
        match which {
            "gate_up" => op.x.expert_swiglu(&op.gate_up, ids).map(drop),
            _ => op.act.expert_linear_sum(&op.down, ids, &op.weights).map(drop),
        }
    })
}

/// The suite (kiln alone: PyTorch has no fused decode path for these to compare with; its
/// whole-step figures are the decode suite's).
pub fn run() -> Result<Value> {
    let dev = cuda::device(0)?;
    let (copy_gbps, copy) = copy_bandwidth(&dev, 1 << 31, 20)?;
    println!("copy bandwidth {copy_gbps:.0} GB/s; expert kernels {DTYPE}, one token, graph replay");
    let sweep = settings::GEMV_SWEEP.get()?;
    let mut results = Vec::new();
    let mut sweeps = Vec::new();
    let bar = crate::progress::bar(MODELS.len() * 2, "experts");
    for (i, m) in MODELS.iter().enumerate() {
        let op = operands(m, 0x5EED + i as u64)?;
        for (which, bytes) in kernels(m) {
            bar.set_message(format!("{} {which}", m.model));
            bar.inc(1);
            let st = time(&op, which, REPS)?;
            let us = st.median_ms * 1e3;
            let gbps = bytes as f64 / (us * 1e-6) / 1e9;
            results.push(json!({
                "name": format!("{} {which}", m.model), "model": m.model, "kernel": which,
                "experts": m.experts, "top_k": m.top_k, "hidden": m.hidden, "inter": m.inter,
                "bytes": bytes, "us": us, "gbps": gbps, "pct_copy": 100.0 * gbps / copy_gbps,
                "floor_us": bytes as f64 / (copy_gbps * 1e3), "stats": st,
            }));
            if sweep {
                sweeps.push(sweep_variants(&op, m, which, bytes, us, copy_gbps)?);
            }
        }
        drop(op);
        dev.empty_cache()?;
    }
    bar.finish_and_clear();
    let cols = [
        Col("µs", "us", 2, 8),
        Col("floor µs", "floor_us", 2, 9),
        Col("GB/s", "gbps", 0, 6),
        Col("%copy", "pct_copy", 1, 6),
    ];
    print_table("expert kernel (1 token)", 32, &cols, &results);
    Ok(json!({
        "suite": "experts",
        "provenance": provenance(),
        "method": {
            "dtype": DTYPE.name(), "routings": SETS, "reps": REPS,
            "timing": "CUDA graph of one call per routing; median of replays / calls",
        },
        "copy_gbps": copy_gbps,
        "copy": copy,
        "kernels": results,
        "sweep": sweep.then_some(Value::Array(sweeps)),
    }))
}

/// Every candidate GEMV variant on one kernel: all timings, the best, and the default's.
fn sweep_variants(
    op: &Operands,
    m: &Moe,
    which: &str,
    bytes: usize,
    default_us: f64,
    copy: f64,
) -> Result<Value> {
    let mut timed = Vec::new();
    for v in gemv::candidates() {
        let _forced = settings::GEMV_VARIANT.scoped(Some(v));
        timed.push((v.to_string(), time(op, which, SWEEP_REPS)?.median_ms * 1e3));
    }
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (best, best_us) = timed[0].clone();
    let pct = |us: f64| 100.0 * bytes as f64 / (us * 1e3) / copy;
    println!(
        "sweep {:<28} default {default_us:7.2} us ({:4.1}%), best {best} {best_us:7.2} us ({:4.1}%)",
        format!("{} {which}", m.model),
        pct(default_us),
        pct(best_us)
    );
    Ok(json!({
        "name": format!("{} {which}", m.model), "default_us": default_us, "best": best, "best_us": best_us,
        "all": timed.iter().map(|(v, us)| json!({ "variant": v, "us": us })).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_the_chosen_experts_and_the_activations() {
        let q = &MODELS[0];
        let [(g, gb), (d, db)] = kernels(q);
        assert_eq!((g, d), ("gate_up", "down"));
        // 8 experts × (1536 × 2048) bf16, x, the 8 SwiGLU rows out.
        assert_eq!(gb, (8 * 1536 * 2048 + 2048 + 8 * 768) * 2);
        assert_eq!(db, (8 * 2048 * 768 + 8 * 768 + 2048) * 2 + 32);
    }
}
