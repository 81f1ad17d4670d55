//! `kiln bench --suite attention [--peer torch|none]`: decode attention (one query per head
//! against a KV cache, `scaled_dot_product_attention` with `enable_gqa`) over the head
//! layouts of real models at 4K and 32K keys: µs per call by CUDA-graph replay, GB/s of
//! keys + values + query + output, % of the copy bandwidth measured in the same run, and
//! PyTorch's `F.scaled_dot_product_attention` on the same shapes by the same method
//! (bench/torch_peer.py --suite attention) with the PyTorch/kiln time ratio. Then prefill
//! attention (the flash kernel, `L = S` queries and keys per head, causal or not) over head
//! dims 40–256 and 512–16K tokens: µs per call, TFLOP/s, and PyTorch's SDPA on its flash
//! backend (`sdpa_kernel(FLASH_ATTENTION)`) by the same method.
//!
//! Method (both sides), decode: bf16, q `[1, Hq, 1, D]`, k and v `[1, Hkv, S, D]`; C =
//! ceil(200 MB / K+V bytes) copies of k and v (so one pass overflows the 50 MB L2); one
//! graph captures max(C, 20) calls cycling through the copies; the figure is the median
//! over 20 replays of replay time / calls. Prefill: q `[B, Hq, L, D]`, k and v `[B, Hkv, L,
//! D]` (compute-bound: no copies); one graph of 5 calls, median of 10 replays / calls;
//! FLOPs 4·B·Hq·D per (query, key) pair a query sees (L·S, or L·(L+1)/2 causal).

use crate::report::{print_table, provenance, Col};
use crate::runtime::copy_bandwidth;
use crate::timing::graph_median_ms;
use kiln::cuda;
use kiln::{DType, Device, Result, Sdpa, Tensor};
use serde_json::{json, Value};

const REPS: usize = 20;
const DTYPE: DType = DType::BF16;

/// One attention layer's decode step: heads, head dim, keys.
struct Workload {
    model: &'static str,
    hq: usize,
    hkv: usize,
    d: usize,
    s: usize,
}

impl Workload {
    fn name(&self) -> String {
        format!("{} {}q/{}kv d{} {}K", self.model, self.hq, self.hkv, self.d, self.s / 1024)
    }

    fn kv_bytes(&self) -> usize {
        2 * self.hkv * self.s * self.d * DTYPE.size()
    }

    /// Keys, values, query and output.
    fn bytes(&self) -> usize {
        self.kv_bytes() + 2 * self.hq * self.d * DTYPE.size()
    }
}

const fn w(model: &'static str, hq: usize, hkv: usize, d: usize, s: usize) -> Workload {
    Workload { model, hq, hkv, d, s }
}

/// From the models' config.json (the d80 row is the GQA 32q/8kv d80 shape).
const WORKLOADS: &[Workload] = &[
    w("Llama-3.1-8B", 32, 8, 128, 4096),
    w("GQA", 32, 8, 80, 4096),
    w("Qwen3-30B-A3B", 32, 4, 128, 4096),
    w("Qwen3.6-35B-A3B", 16, 2, 256, 4096),
    w("Llama-3.1-8B", 32, 8, 128, 32768),
    w("GQA", 32, 8, 80, 32768),
];

/// One prompt's attention: heads, head dim, tokens (queries = keys), causal, dtype.
struct Prefill {
    model: &'static str,
    dtype: DType,
    hq: usize,
    hkv: usize,
    d: usize,
    l: usize,
    causal: bool,
}

impl Prefill {
    fn name(&self) -> String {
        let t = if self.l >= 1024 { format!("{}K", self.l / 1024) } else { self.l.to_string() };
        let c = if self.causal { " causal" } else { "" };
        format!("prefill {} {} {}q/{}kv d{} {t}{c}", self.model, self.dtype, self.hq, self.hkv, self.d)
    }

    fn flops(&self) -> f64 {
        let pairs = if self.causal { self.l * (self.l + 1) / 2 } else { self.l * self.l };
        4.0 * (self.hq * self.d) as f64 * pairs as f64
    }
}

const fn p(
    model: &'static str,
    dtype: DType,
    hq: usize,
    hkv: usize,
    d: usize,
    l: usize,
    causal: bool,
) -> Prefill {
    Prefill { model, dtype, hq, hkv, d, l, causal }
}

/// The two reference rows (fp16 H8 d40 and H32 d128 at 4K) and the models' heads.
const PREFILL: &[Prefill] = &[
    p("H8", DType::F16, 8, 8, 40, 4096, false),
    p("H32", DType::F16, 32, 32, 128, 4096, false),
    p("Llama-3.1-8B", DType::BF16, 32, 8, 128, 512, true),
    p("Llama-3.1-8B", DType::BF16, 32, 8, 128, 4096, true),
    p("Llama-3.1-8B", DType::BF16, 32, 8, 128, 16384, true),
    p("Qwen3-30B-A3B", DType::BF16, 32, 4, 128, 4096, true),
    p("Qwen3.6-35B-A3B", DType::BF16, 16, 2, 256, 4096, true),
    p("GQA", DType::BF16, 16, 2, 256, 2048, false),
    p("GQA", DType::BF16, 32, 8, 64, 4096, true),
    p("GQA", DType::BF16, 32, 8, 80, 4096, true),
    p("MHA", DType::BF16, 32, 32, 96, 4096, true),
    p("MHA", DType::BF16, 16, 16, 64, 2048, false),
    p("H8", DType::F16, 8, 8, 40, 16384, false),
];
const PREFILL_CALLS: usize = 5;
const PREFILL_REPS: usize = 10;

/// The prefill rows, timed as the module says.
fn prefill(dev: &std::sync::Arc<cuda::CudaDevice>) -> Result<Vec<Value>> {
    let _kernel = kiln::settings::PREFILL_ATTENTION.scoped(true);
    let gpu = Device::Cuda(0);
    let mut results = Vec::new();
    let bar = crate::progress::bar(PREFILL.len(), "prefill attention");
    for (i, wl) in PREFILL.iter().enumerate() {
        bar.set_message(wl.name());
        bar.inc(1);
        let seed = 7000 + 10 * i as u64;
        let r = |h, n| Tensor::randn(&[1, h, wl.l, wl.d], seed + n, wl.dtype, gpu);
        let (q, k, v) = (r(wl.hq, 0)?, r(wl.hkv, 1)?, r(wl.hkv, 2)?);
        let o = Sdpa { is_causal: wl.causal, enable_gqa: true, ..Sdpa::default() };
        let st = graph_median_ms(dev, PREFILL_CALLS, PREFILL_REPS, || {
            q.scaled_dot_product_attention(&k, &v, &o).map(drop)
        })?;
        let us = st.median_ms * 1e3;
        results.push(json!({
            "name": wl.name(), "model": wl.model, "dtype": wl.dtype.to_string(), "b": 1, "hq": wl.hq,
            "hkv": wl.hkv, "d": wl.d, "l": wl.l, "s": wl.l, "causal": wl.causal, "flops": wl.flops(),
            "us": us, "tflops": wl.flops() / (us * 1e-6) / 1e12, "stats": st,
        }));
        drop((q, k, v));
        dev.empty_cache()?;
    }
    bar.finish_and_clear();
    Ok(results)
}

/// The suite; `peer` is `torch` (must succeed), `none`, or absent (run PyTorch if it can).
pub fn run(peer: Option<&str>) -> Result<Value> {
    let want = crate::peer::Want::parse(peer)?;
    let _kernel = kiln::settings::DECODE_ATTENTION.scoped(true);
    let dev = cuda::device(0)?;
    let gpu = Device::Cuda(0);
    let (copy_gbps, copy) = copy_bandwidth(&dev, 1 << 31, 20)?;
    println!("copy bandwidth {copy_gbps:.0} GB/s; decode attention {DTYPE}, 1 query, graph replay");
    let mut results = Vec::new();
    let bar = crate::progress::bar(WORKLOADS.len(), "attention");
    for (i, wl) in WORKLOADS.iter().enumerate() {
        bar.set_message(wl.name());
        bar.inc(1);
        let copies = (200_000_000usize).div_ceil(wl.kv_bytes()).max(1);
        let calls = copies.max(20);
        let seed = 100 * i as u64;
        let q = Tensor::randn(&[1, wl.hq, 1, wl.d], seed, DTYPE, gpu)?;
        let kv = |n| Tensor::randn(&[1, wl.hkv, wl.s, wl.d], seed + n, DTYPE, gpu);
        let ks = (0..copies).map(|c| kv(2 * c as u64 + 1)).collect::<Result<Vec<_>>>()?;
        let vs = (0..copies).map(|c| kv(2 * c as u64 + 2)).collect::<Result<Vec<_>>>()?;
        let o = Sdpa { enable_gqa: true, ..Sdpa::default() };
        let mut call = 0;
        let st = graph_median_ms(&dev, calls, REPS, || {
            let c = call % copies;
            call += 1;
            q.scaled_dot_product_attention(&ks[c], &vs[c], &o).map(drop)
        })?;
        let us = st.median_ms * 1e3;
        let gbps = wl.bytes() as f64 / (us * 1e-6) / 1e9;
        results.push(json!({
            "name": wl.name(), "model": wl.model, "hq": wl.hq, "hkv": wl.hkv, "d": wl.d, "s": wl.s,
            "copies": copies, "calls": calls, "bytes": wl.bytes(), "us": us, "gbps": gbps,
            "pct_copy": 100.0 * gbps / copy_gbps, "stats": st,
        }));
        drop((ks, vs));
        dev.empty_cache()?;
    }
    bar.finish_and_clear();
    let mut prefill = prefill(&dev)?;

    let input = json!({
        "reps": REPS,
        "shapes": results.iter().map(|r| json!({
            "name": r["name"], "hq": r["hq"], "hkv": r["hkv"], "d": r["d"], "s": r["s"],
            "copies": r["copies"], "calls": r["calls"],
        })).collect::<Vec<_>>(),
        "prefill_calls": PREFILL_CALLS,
        "prefill_reps": PREFILL_REPS,
        "prefill": prefill.iter().map(|r| json!({
            "name": r["name"], "dtype": r["dtype"], "b": r["b"], "hq": r["hq"], "hkv": r["hkv"],
            "d": r["d"], "l": r["l"], "s": r["s"], "causal": r["causal"],
        })).collect::<Vec<_>>(),
    });
    let torch = crate::peer::torch("attention", Some(&input), want)?.ok();
    if let Some(t) = &torch {
        crate::peer::merge(&mut results, t);
        crate::peer::merge(&mut prefill, t);
        for r in &mut prefill {
            if let (Some(f), Some(tus)) = (r["flops"].as_f64(), r["torch_us"].as_f64()) {
                r["torch_tflops"] = json!(f / (tus * 1e-6) / 1e12);
            }
        }
    }
    let (us, torch_us, ratio) =
        (Col("kiln µs", "us", 2, 9), Col("torch µs", "torch_us", 2, 9), Col("ratio", "speedup", 2, 6));
    print_table(
        "workload",
        36,
        &[us, Col("GB/s", "gbps", 0, 8), Col("% copy", "pct_copy", 1, 7), torch_us, ratio],
        &results,
    );
    let cols = [
        Col("kiln µs", "us", 1, 9),
        Col("TFLOP/s", "tflops", 0, 7),
        Col("torch µs", "torch_us", 1, 9),
        Col("TFLOP/s", "torch_tflops", 0, 7),
        Col("ratio", "speedup", 2, 6),
    ];
    print_table("prefill", 52, &cols, &prefill);
    Ok(json!({
        "suite": "attention",
        "provenance": provenance(),
        "copy_gbps": copy_gbps,
        "copy_stats": copy,
        "method": {
            "dtype": "bfloat16", "query": "[1, Hq, 1, D]", "keys_values": "[1, Hkv, S, D], C copies over 200 MB",
            "timing": "CUDA graph of max(C, 20) calls; median of 20 replays / calls", "reps": REPS,
            "prefill": "q [1, Hq, L, D], k and v [1, Hkv, L, D]; CUDA graph of 5 calls, median of 10 replays / calls; \
                        torch: sdpa_kernel(FLASH_ATTENTION)",
        },
        "shapes": results,
        "prefill": prefill,
        "torch": torch.as_ref().map(|t| json!({ "torch": t["torch"], "cuda": t["cuda"], "device": t["device"] })),
    }))
}
