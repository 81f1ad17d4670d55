//! `kiln bench --suite attention [--peer torch|none]`: decode attention (one query per head
//! against a KV cache, `scaled_dot_product_attention` with `enable_gqa`) over the head
//! layouts of real models at 4K and 32K keys: µs per call by CUDA-graph replay, GB/s of
//! keys + values + query + output, % of the copy bandwidth measured in the same run, and
//! PyTorch's `F.scaled_dot_product_attention` on the same shapes by the same method
//! (bench/torch_peer.py --suite attention) with the PyTorch/kiln time ratio.
//!
//! Method (both sides): bf16, q `[1, Hq, 1, D]`, k and v `[1, Hkv, S, D]`; C = ceil(200 MB /
//! K+V bytes) copies of k and v (so one pass overflows the 50 MB L2); one graph captures
//! max(C, 20) calls cycling through the copies; the figure is the median over 20 replays
//! of replay time / calls.

use crate::report::provenance;
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

    let input = json!({
        "reps": REPS,
        "shapes": results.iter().map(|r| json!({
            "name": r["name"], "hq": r["hq"], "hkv": r["hkv"], "d": r["d"], "s": r["s"],
            "copies": r["copies"], "calls": r["calls"],
        })).collect::<Vec<_>>(),
    });
    let torch = crate::peer::torch("attention", Some(&input), want)?.ok();
    if let Some(t) = &torch {
        crate::peer::merge(&mut results, t);
    }
    println!(
        "{:<36} {:>9} {:>8} {:>7} {:>9} {:>6}",
        "workload", "kiln µs", "GB/s", "% copy", "torch µs", "ratio"
    );
    for r in &results {
        let f = |key: &str, prec: usize| r[key].as_f64().map_or("-".to_string(), |v| format!("{v:.prec$}"));
        println!(
            "{:<36} {:>9} {:>8} {:>7} {:>9} {:>6}",
            r["name"].as_str().unwrap_or(""),
            f("us", 2),
            f("gbps", 0),
            f("pct_copy", 1),
            f("torch_us", 2),
            f("speedup", 2)
        );
    }
    Ok(json!({
        "suite": "attention",
        "provenance": provenance(),
        "copy_gbps": copy_gbps,
        "copy_stats": copy,
        "method": {
            "dtype": "bfloat16", "query": "[1, Hq, 1, D]", "keys_values": "[1, Hkv, S, D], C copies over 200 MB",
            "timing": "CUDA graph of max(C, 20) calls; median of 20 replays / calls", "reps": REPS,
        },
        "shapes": results,
        "torch": torch.as_ref().map(|t| json!({ "torch": t["torch"], "cuda": t["cuda"], "device": t["device"] })),
    }))
}
