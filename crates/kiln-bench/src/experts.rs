//! `kiln bench --suite experts`: the two expert kernels of a mixture-of-experts decode step,
//! one token: `expert_swiglu` (the chosen experts' gate_up GEMVs with SwiGLU) and
//! `expert_linear_sum` (their down GEMVs with the router-weighted sum), each with bf16 and
//! with FP8 experts (`_fp8`), in µs per call, GB/s of the bytes a call must move (the
//! chosen experts' weights and scales, activations and output) and % of the copy bandwidth
//! measured in the same run.
//!
//! Method: weights stacked `[E, N, K]` as the models hold them (FP8: the bf16 ones quantised
//! per row); `SETS` routings of
//! `top_k` distinct experts each (drawn as the grouped suite draws them) on the device; one CUDA
//! graph captures one call per routing (so consecutive calls read other experts and the
//! chosen weights come from DRAM, as in a step), the figure is the median over 20 replays of
//! replay time / calls. `KILN_GEMV_SWEEP=1` also times every variant per kernel and reports
//! the best (bf16: `gemv::candidates` forced through `KILN_GEMV_VARIANT`; FP8: every
//! `KILN_FP8_LINEAR_VARIANT`): input for the choices in kiln's cuda/ops/gemv.rs and
//! cuda/ops/fp8_experts.rs.

use crate::report::{print_table, provenance, Col};
use crate::runtime::copy_bandwidth;
use crate::timing::{graph_median_ms, Stats};
use kiln::cuda;
use kiln::cuda::ops::{gemv, Fp8LinearVariant};
use kiln::fp8::{quantize, Granularity};
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
    /// The FP8 forms: values and `[E, N]` row scales.
    gate_up_fp8: (Tensor, Tensor),
    down_fp8: (Tensor, Tensor),
    ids: Vec<Tensor>,
    weights: Tensor,
}

fn operands(m: &Moe, seed: u64) -> Result<Operands> {
    let gpu = Device::Cuda(0);
    let ids = crate::grouped::draw_experts(m.experts, m.top_k, SETS, seed)
        .chunks(m.top_k)
        .map(|c| Tensor::from_slice(c, &[1, m.top_k], Device::Cpu)?.to_device(gpu))
        .collect::<Result<_>>()?;
    let gate_up = Tensor::randn(&[m.experts, 2 * m.inter, m.hidden], seed + 3, DTYPE, gpu)?;
    let down = Tensor::randn(&[m.experts, m.hidden, m.inter], seed + 4, DTYPE, gpu)?;
    let fp8 = |w: &Tensor| -> Result<(Tensor, Tensor)> {
        let &[e, n, k] = w.shape() else { unreachable!("stacked experts are [E, N, K]") };
        let (q, s) = quantize(&w.reshape(&[e * n, k])?, Granularity::Row)?;
        Ok((q.reshape(&[e, n, k])?, s.reshape(&[e, n])?))
    };
    Ok(Operands {
        x: Tensor::randn(&[1, m.hidden], seed + 1, DTYPE, gpu)?,
        act: Tensor::randn(&[1, m.top_k, m.inter], seed + 2, DTYPE, gpu)?,
        gate_up_fp8: fp8(&gate_up)?,
        down_fp8: fp8(&down)?,
        gate_up,
        down,
        ids,
        weights: Tensor::rand(&[1, m.top_k], seed + 5, DType::F32, gpu)?,
    })
}

/// The kernels timed per model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    GateUp,
    Down,
    GateUpFp8,
    DownFp8,
}

const KERNELS: [Kernel; 4] = [Kernel::GateUp, Kernel::Down, Kernel::GateUpFp8, Kernel::DownFp8];

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::GateUp => "gate_up",
            Kernel::Down => "down",
            Kernel::GateUpFp8 => "gate_up fp8",
            Kernel::DownFp8 => "down fp8",
        }
    }

    fn fp8(self) -> bool {
        matches!(self, Kernel::GateUpFp8 | Kernel::DownFp8)
    }

    /// The bytes one call must move: the chosen experts' weights (FP8: a byte each plus an
    /// f32 scale per row), the activations in and out, and (down) the router weights.
    fn bytes(self, m: &Moe) -> usize {
        let s = DTYPE.size();
        let (gate_up_rows, down_rows) = (m.top_k * 2 * m.inter, m.top_k * m.hidden);
        let weight = |rows: usize, k: usize| if self.fp8() { rows * (k + 4) } else { rows * k * s };
        match self {
            Kernel::GateUp | Kernel::GateUpFp8 => {
                weight(gate_up_rows, m.hidden) + (m.hidden + m.top_k * m.inter) * s
            }
            Kernel::Down | Kernel::DownFp8 => {
                weight(down_rows, m.inter) + (m.top_k * m.inter + m.hidden) * s + m.top_k * 4
            }
        }
    }

    fn run(self, op: &Operands, ids: &Tensor) -> Result<()> {
        let ((gu, gus), (dn, dns)) = (&op.gate_up_fp8, &op.down_fp8);
        match self {
            Kernel::GateUp => op.x.expert_swiglu(&op.gate_up, ids).map(drop),
            Kernel::Down => op.act.expert_linear_sum(&op.down, ids, &op.weights).map(drop),
            Kernel::GateUpFp8 => op.x.expert_swiglu_fp8(gu, gus, ids).map(drop),
            Kernel::DownFp8 => op.act.expert_linear_sum_fp8(dn, dns, ids, &op.weights).map(drop),
        }
    }
}

/// Median per-call time of kernel `which` over the routings, in one graph.
fn time(op: &Operands, which: Kernel, reps: usize) -> Result<Stats> {
    let dev = cuda::device(0)?;
    let mut i = 0;
    graph_median_ms(&dev, SETS, reps, || {
        let ids = &op.ids[i % SETS];
        i += 1;
        which.run(op, ids)
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
    let bar = crate::progress::bar(MODELS.len() * KERNELS.len(), "experts");
    for (i, m) in MODELS.iter().enumerate() {
        let op = operands(m, 0x5EED + i as u64)?;
        for which in KERNELS {
            let (bytes, name) = (which.bytes(m), which.name());
            bar.set_message(format!("{} {name}", m.model));
            bar.inc(1);
            let st = time(&op, which, REPS)?;
            let us = st.median_ms * 1e3;
            let gbps = bytes as f64 / (us * 1e-6) / 1e9;
            results.push(json!({
                "name": format!("{} {name}", m.model), "model": m.model, "kernel": name,
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
            "dtype": DTYPE.name(), "fp8": "float8_e4m3fn values, f32 row scales", "routings": SETS, "reps": REPS,
            "timing": "CUDA graph of one call per routing; median of replays / calls",
        },
        "copy_gbps": copy_gbps,
        "copy": copy,
        "kernels": results,
        "sweep": sweep.then_some(Value::Array(sweeps)),
    }))
}

/// Every FP8 experts variant: 1 or 2 tiles a warp, 1–8 warps a row group, 4 or 8 a block.
fn fp8_candidates() -> Vec<Fp8LinearVariant> {
    let mut all = Vec::new();
    for rt in [1, 2] {
        for kw in [1, 2, 4, 8] {
            for warps in [4, 8] {
                if warps >= kw {
                    all.push(Fp8LinearVariant { rt, kw, warps });
                }
            }
        }
    }
    all
}

/// Every candidate variant on one kernel: all timings, the best, and the default's.
fn sweep_variants(
    op: &Operands,
    m: &Moe,
    which: Kernel,
    bytes: usize,
    default_us: f64,
    copy: f64,
) -> Result<Value> {
    let mut timed = Vec::new();
    if which.fp8() {
        for v in fp8_candidates() {
            let _forced = settings::FP8_LINEAR_VARIANT.scoped(Some(v));
            timed.push((v.to_string(), time(op, which, SWEEP_REPS)?.median_ms * 1e3));
        }
    } else {
        for v in gemv::candidates() {
            let _forced = settings::GEMV_VARIANT.scoped(Some(v));
            timed.push((v.to_string(), time(op, which, SWEEP_REPS)?.median_ms * 1e3));
        }
    }
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    let (best, best_us) = timed[0].clone();
    let pct = |us: f64| 100.0 * bytes as f64 / (us * 1e3) / copy;
    println!(
        "sweep {:<28} default {default_us:7.2} us ({:4.1}%), best {best} {best_us:7.2} us ({:4.1}%)",
        format!("{} {}", m.model, which.name()),
        pct(default_us),
        pct(best_us)
    );
    Ok(json!({
        "name": format!("{} {}", m.model, which.name()), "default_us": default_us, "best": best, "best_us": best_us,
        "all": timed.iter().map(|(v, us)| json!({ "variant": v, "us": us })).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_the_chosen_experts_and_the_activations() {
        let q = &MODELS[0];
        // 8 experts × (1536 × 2048) bf16, x, the 8 SwiGLU rows out.
        assert_eq!(Kernel::GateUp.bytes(q), (8 * 1536 * 2048 + 2048 + 8 * 768) * 2);
        assert_eq!(Kernel::Down.bytes(q), (8 * 2048 * 768 + 8 * 768 + 2048) * 2 + 32);
        // FP8: a byte per weight and an f32 scale per row.
        assert_eq!(Kernel::GateUpFp8.bytes(q), 8 * 1536 * (2048 + 4) + (2048 + 8 * 768) * 2);
        assert_eq!(Kernel::DownFp8.bytes(q), 8 * 2048 * (768 + 4) + (8 * 768 + 2048) * 2 + 32);
        assert!(fp8_candidates().iter().all(|v| v.to_string().parse::<Fp8LinearVariant>() == Ok(*v)));
    }
}
