//! FP8 suite (issue 8): `scaled_mm` op latency for decode and large shapes, both scale
//! recipes, against the floor (bytes over 4.1 TB/s, or FLOPs over the FP8 tensor-core rate),
//! timed by CUDA-graph replay as the PyTorch peer (`bench/torch_peer.py --suite fp8`) times
//! `torch._scaled_mm` (kiln's weights frozen, as a model's parameters are, and again not
//! frozen for the decode shapes); an FP8-weight layer stack against bf16 (memory: weight bytes; op
//! latency: one decode pass over the stack); and the `scaled_mm` fixture adapter.

use crate::timing::graph_median_ms;
use kiln::cuda::ops::Fp8Gemm;
use kiln::fp8::Granularity;
use kiln::{settings, DType, Device, Result, Tensor};
use kiln_models::Fp8Weight;
use serde_json::{json, Value};

const GPU: Device = Device::Cuda(0);
/// Measured device-to-device bandwidth of the H200 (reference/README.md), bytes/s.
const BANDWIDTH: f64 = 4.13e12;
/// Decode shapes rotate through enough weight copies to exceed this (L2 is 50 MB), so every
/// call streams its weight from DRAM as it would in a model.
const ROTATE_BYTES: usize = 128 << 20;

/// (M, N, K) of the suite: PyTorch's reference shapes, then decode shapes of Llama-3.1-8B
/// (q/o, k/v, gate/up, down) and a 4-token verify step. The PyTorch peer gets it on stdin.
pub const SHAPES: &[(usize, usize, usize)] = &[
    (1, 4096, 4096),
    (16, 14336, 4096),
    (8192, 8192, 8192),
    (4096, 4096, 4096),
    (1, 1024, 4096),
    (1, 14336, 4096),
    (1, 4096, 14336),
    (4, 4096, 4096),
];

/// Workload name shared with the Python peer: `scaled_mm {M}x{K}x{N} {recipe}` (PyTorch's
/// reference log writes M×K×N).
pub fn name(m: usize, n: usize, k: usize, recipe: &str) -> String {
    format!("scaled_mm {m}x{k}x{n} {recipe}")
}

/// One `scaled_mm` workload; `frozen`: the weights are frozen (`Tensor::freeze`), as a
/// model's parameters are, so the decode kernel may start streaming one while the call
/// before it finishes.
fn scaled_mm_case(m: usize, n: usize, k: usize, rowwise: bool, frozen: bool) -> Result<Value> {
    let dev = kiln::cuda::device(0)?;
    let wbytes = n * k;
    let copies = if m <= kiln::cuda::ops::GEMV_MAX_M { ROTATE_BYTES.div_ceil(wbytes).max(1) } else { 1 };
    let a = Tensor::randn(&[m, k], 1, DType::F32, GPU)?.to_dtype(DType::F8E4M3)?;
    let ws: Vec<Tensor> = (0..copies)
        .map(|i| Tensor::randn(&[n, k], 10 + i as u64, DType::F32, GPU)?.to_dtype(DType::F8E4M3))
        .collect::<Result<_>>()?;
    if frozen {
        ws.iter().try_for_each(Tensor::freeze)?;
    }
    let (sa, sb) = if rowwise {
        (Tensor::rand(&[m, 1], 3, DType::F32, GPU)?, Tensor::rand(&[1, n], 4, DType::F32, GPU)?)
    } else {
        (Tensor::scalar(0.5, DType::F32, GPU)?, Tensor::scalar(0.25, DType::F32, GPU)?)
    };
    let wts: Vec<Tensor> = ws.iter().map(|w| w.t()).collect::<Result<_>>()?;
    let mut i = 0;
    let own_before = kiln::cuda::ops::own_fp8_gemm_launches();
    let st = graph_median_ms(&dev, 20, if m >= 4096 { 10 } else { 50 }, || {
        i += 1;
        a.scaled_mm(&wts[i % copies], &sa, &sb, DType::BF16, None).map(drop)
    })?;
    let us = st.median_ms * 1e3;
    let bytes = (m * k + n * k + m * n * 2) as f64;
    let flops = 2.0 * (m * n * k) as f64;
    let floor_us = bytes / BANDWIDTH * 1e6;
    let recipe = if rowwise { "rowwise" } else { "tensorwise" };
    let gemm = if m <= kiln::cuda::ops::GEMV_MAX_M {
        "fp8_gemv"
    } else if kiln::cuda::ops::own_fp8_gemm_launches() > own_before {
        "kiln fp8_gemm"
    } else {
        "cuBLASLt"
    };
    Ok(json!({
        "name": name(m, n, k, recipe), "m": m, "n": n, "k": k, "recipe": recipe, "gemm": gemm,
        "out_dtype": "bfloat16", "graph": true, "weight_copies": copies, "weights_frozen": frozen,
        "us": us, "floor_us": floor_us, "fraction_of_floor": floor_us / us,
        "tflops": flops / (us * 1e-6) / 1e12, "stats": st,
    }))
}

/// Llama-3.1-8B linear shapes of one layer, `(N, K)`: q, k, v, o, gate, up, down.
const LAYER: &[(usize, usize)] =
    &[(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096), (4096, 14336)];

/// A `layers`-deep stack of 8B linears: weight bytes in bf16 vs FP8 (row scales) on the
/// device, pool-measured, and one batch-1 decode pass over every linear of the stack.
fn layer_stack(layers: usize) -> Result<Value> {
    let dev = kiln::cuda::device(0)?;
    dev.synchronize()?;
    let live0 = dev.memory_stats().live_bytes;
    let dense: Vec<Tensor> = (0..layers * LAYER.len())
        .map(|i| {
            Tensor::randn(
                &[LAYER[i % LAYER.len()].0, LAYER[i % LAYER.len()].1],
                100 + i as u64,
                DType::BF16,
                GPU,
            )
        })
        .collect::<Result<_>>()?;
    let dense_bytes = dev.memory_stats().live_bytes - live0;
    let fp8: Vec<Fp8Weight> =
        dense.iter().map(|w| Fp8Weight::quantize(w, Granularity::Row)).collect::<Result<_>>()?;
    dev.synchronize()?;
    let both = dev.memory_stats().live_bytes - live0;
    let fp8_bytes = both - dense_bytes;
    let xs: Vec<Tensor> =
        LAYER.iter().map(|&(_, k)| Tensor::randn(&[1, k], 7, DType::BF16, GPU)).collect::<Result<_>>()?;
    let x_of = |i: usize| &xs[i % LAYER.len()];
    let t_bf16 = graph_median_ms(&dev, 1, 20, || {
        dense.iter().enumerate().try_for_each(|(i, w)| x_of(i).linear(w, None).map(drop))
    })?;
    let t_fp8 = graph_median_ms(&dev, 1, 20, || {
        fp8.iter().enumerate().try_for_each(|(i, w)| w.forward(x_of(i), None).map(drop))
    })?;
    let params: usize =
        (0..layers * LAYER.len()).map(|i| LAYER[i % LAYER.len()].0 * LAYER[i % LAYER.len()].1).sum();
    Ok(json!({
        "name": format!("llama-3.1-8b linear stack, {layers} layers"),
        "params": params,
        "weight_bytes_bf16": dense_bytes, "weight_bytes_fp8": fp8_bytes,
        "fp8_over_bf16": fp8_bytes as f64 / dense_bytes as f64,
        "decode_pass_us_bf16": t_bf16.median_ms * 1e3, "decode_pass_us_fp8": t_fp8.median_ms * 1e3,
        "decode_speedup": t_bf16.median_ms / t_fp8.median_ms,
        "floor_us_bf16": params as f64 * 2.0 / BANDWIDTH * 1e6, "floor_us_fp8": params as f64 / BANDWIDTH * 1e6,
        "stats_bf16": t_bf16, "stats_fp8": t_fp8,
    }))
}

/// Every FP8 figure as one JSON object, with a table on stdout.
pub fn run(peer: Option<&str>) -> Result<Value> {
    let want = crate::peer::Want::parse(peer)?;
    let mut ops = Vec::new();
    let bar = crate::progress::bar(2 * SHAPES.len(), "scaled_mm");
    for &(m, n, k) in SHAPES {
        for rowwise in [false, true] {
            bar.set_message(name(m, n, k, if rowwise { "rowwise" } else { "tensorwise" }));
            bar.inc(1);
            ops.push(scaled_mm_case(m, n, k, rowwise, true)?);
        }
    }
    bar.finish_and_clear();
    let spec = json!({ "shapes": SHAPES, "gemv_max_m": kiln::cuda::ops::GEMV_MAX_M });
    let torch = crate::peer::torch("fp8", Some(&spec), want)?;
    if let Ok(t) = &torch {
        let empty = vec![];
        for v in ops.iter_mut() {
            let hit = t["op_latency"].as_array().unwrap_or(&empty).iter().find(|p| p["name"] == v["name"]);
            if let (Some(tus), Some(us)) = (hit.and_then(|p| p["us"].as_f64()), v["us"].as_f64()) {
                v["torch_us"] = json!(tus);
                v["torch_over_kiln"] = json!(tus / us);
            }
        }
    }
    println!(
        "{:<40} {:>9} {:>9} {:>8} {:>8} {:>9} {:>10}  path",
        "workload (bf16 out, graph, frozen w)",
        "kiln µs",
        "floor µs",
        "of floor",
        "TFLOP/s",
        "torch µs",
        "torch/kiln"
    );
    for v in &ops {
        let f = |key: &str| v[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<40} {:>9.2} {:>9.2} {:>7.0}% {:>8.1} {:>9.2} {:>9.2}x  {}",
            v["name"].as_str().unwrap_or(""),
            f("us"),
            f("floor_us"),
            100.0 * f("fraction_of_floor"),
            f("tflops"),
            f("torch_us"),
            f("torch_over_kiln"),
            v["gemm"].as_str().unwrap_or(""),
        );
    }
    let unfrozen = unfrozen_rows()?;
    // Each GEMM forced on the large shapes, against the default (`Auto`) above, then the
    // row-wise epilogue path (named slower path) for comparison.
    let own = forced_rows(Fp8Gemm::Own, false)?;
    let cublaslt = forced_rows(Fp8Gemm::CublasLt, false)?;
    let epilogue = forced_rows(Fp8Gemm::CublasLt, true)?;
    for t in kiln::cuda::ops::cublaslt_tunings() {
        let ms: Vec<String> = t.candidates_ms.iter().map(|v| format!("{:.1}", v * 1e3)).collect();
        println!("cuBLASLt {}: candidates µs [{}], kept #{}", t.problem, ms.join(", "), t.picked);
    }
    let stack = layer_stack(4)?;
    println!(
        "{}:\n  weights {:.0} MB bf16 -> {:.0} MB fp8 ({:.3}x); decode pass {:.1} µs bf16 -> {:.1} µs fp8 ({:.2}x)",
        stack["name"].as_str().unwrap_or(""),
        stack["weight_bytes_bf16"].as_f64().unwrap_or(0.0) / 1e6,
        stack["weight_bytes_fp8"].as_f64().unwrap_or(0.0) / 1e6,
        stack["fp8_over_bf16"].as_f64().unwrap_or(0.0),
        stack["decode_pass_us_bf16"].as_f64().unwrap_or(0.0),
        stack["decode_pass_us_fp8"].as_f64().unwrap_or(0.0),
        stack["decode_speedup"].as_f64().unwrap_or(0.0),
    );
    Ok(json!({
        "suite": "fp8",
        "provenance": crate::report::provenance(),
        "method": "CUDA graph of 20 calls replayed; median of CUDA-event timings / 20",
        "op_latency": ops,
        "op_latency_weights_not_frozen": unfrozen,
        "op_latency_own_gemm": own,
        "op_latency_cublaslt": cublaslt,
        "op_latency_rowwise_epilogue_path": epilogue,
        "cublaslt_tunings": kiln::cuda::ops::cublaslt_tunings(),
        "memory": stack,
        "torch": torch.as_ref().ok().map(|t| json!({ "version": t["torch"], "device": t["device"] })),
        "torch_error": torch.err(),
    }))
}

/// The decode shapes (M ≤ 16) with weights that are not frozen: each call's kernel starts
/// once the one before has finished.
fn unfrozen_rows() -> Result<Vec<Value>> {
    let rows = SHAPES
        .iter()
        .filter(|s| s.0 <= kiln::cuda::ops::GEMV_MAX_M)
        .flat_map(|&(m, n, k)| [false, true].map(move |rw| (m, n, k, rw)))
        .map(|(m, n, k, rw)| scaled_mm_case(m, n, k, rw, false))
        .collect::<Result<Vec<_>>>()?;
    for v in &rows {
        println!(
            "{:<40} {:>9.2}  (weights not frozen)",
            v["name"].as_str().unwrap_or(""),
            v["us"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(rows)
}

/// The large shapes (M > 16) with `choice` forced (and cuBLASLt's row-wise epilogue path when
/// `epilogue`, row-wise only), printed one per line; the defaults are restored after.
fn forced_rows(choice: Fp8Gemm, epilogue: bool) -> Result<Vec<Value>> {
    let _gemm = settings::FP8_GEMM.scoped(choice);
    let _epilogue = settings::FP8_FORCE_EPILOGUE.scoped(epilogue);
    let recipes: &[bool] = if epilogue { &[true] } else { &[false, true] };
    let rows = SHAPES
        .iter()
        .filter(|s| s.0 > kiln::cuda::ops::GEMV_MAX_M)
        .flat_map(|&(m, n, k)| recipes.iter().map(move |&rw| (m, n, k, rw)))
        .map(|(m, n, k, rw)| scaled_mm_case(m, n, k, rw, true))
        .collect::<Result<Vec<_>>>();
    let rows = rows?;
    for v in &rows {
        println!(
            "{:<40} {:>9.2} {:>28.1} TFLOP/s  ({}{})",
            v["name"].as_str().unwrap_or(""),
            v["us"].as_f64().unwrap_or(0.0),
            v["tflops"].as_f64().unwrap_or(0.0),
            v["gemm"].as_str().unwrap_or(""),
            if epilogue { ", row-wise epilogue path" } else { "" }
        );
    }
    Ok(rows)
}
