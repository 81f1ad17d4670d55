//! `kiln bench --suite reductions`: softmax / log_softmax over vocabulary rows, std_mean,
//! mse_loss, bincount, top-k and the fused MoE routers; µs per call by CUDA-graph replay
//! (as the PyTorch reference figures), beside the floor (bytes over 4.13 TB/s) and
//! PyTorch measured the same way by `bench/torch_peer.py --suite reductions` in the same run.

use crate::report::provenance;
use crate::timing::{gpu_median_ms, graph_median_ms, Stats};
use kiln::cuda::ops::{BlockSync, SoftmaxPath};
use kiln::cuda::{self, CudaDevice};
use kiln::settings;
use kiln::{DType, Device, Reduction, Result, Router, Tensor};
use serde_json::{json, Map, Value};
use std::sync::Arc;

const GPU: Device = Device::Cuda(0);
/// Measured H200 copy bandwidth (reference README), for the floors.
const BANDWIDTH: f64 = 4.13e12;
const PER_GRAPH: usize = 20;
const REPS: usize = 50;

struct Row {
    name: String,
    stats: Stats,
    floor_us: f64,
    mode: &'static str,
}

fn floor_us(bytes: usize) -> f64 {
    bytes as f64 / BANDWIDTH * 1e6
}

fn graph(
    dev: &Arc<CudaDevice>,
    rows: &mut Vec<Row>,
    name: &str,
    bytes: usize,
    f: impl FnMut() -> Result<()>,
) -> Result<()> {
    let stats = graph_median_ms(dev, PER_GRAPH, REPS, f)?;
    rows.push(Row { name: name.into(), stats, floor_us: floor_us(bytes), mode: "graph" });
    Ok(())
}

fn softmaxes(dev: &Arc<CudaDevice>, rows: &mut Vec<Row>) -> Result<()> {
    let shapes =
        [[1usize, 32000], [1, 128256], [1, 151936], [1, 262144], [32, 128256], [4096, 1024], [64, 8192]];
    for [outer, r] in shapes {
        let x = Tensor::randn(&[outer, r], 1, DType::F32, GPU)?;
        let bytes = 2 * outer * r * 4;
        graph(dev, rows, &format!("softmax_f32_{outer}x{r}"), bytes, || x.softmax(-1).map(drop))?;
        if outer == 1 && r == 128256 {
            graph(dev, rows, &format!("log_softmax_f32_{outer}x{r}"), bytes, || x.log_softmax(-1).map(drop))?;
            let xb = x.to_dtype(DType::BF16)?;
            graph(dev, rows, &format!("softmax_bf16_{outer}x{r}"), bytes / 2, || xb.softmax(-1).map(drop))?;
        }
        // The other paths of the long rows, for the policy (a forced path that does not apply
        // runs the split kernel).
        let variants: &[(&str, Option<SoftmaxPath>, BlockSync)] = match (outer, r) {
            (1, 128256) => &[
                ("rows", Some(SoftmaxPath::Rows), BlockSync::OneLaunch),
                ("split", Some(SoftmaxPath::Split), BlockSync::OneLaunch),
                ("split-2launch", Some(SoftmaxPath::Split), BlockSync::MultiLaunch),
                ("cluster", Some(SoftmaxPath::Cluster), BlockSync::OneLaunch),
                ("poll", Some(SoftmaxPath::Poll), BlockSync::OneLaunch),
            ],
            (_, 8192..) => &[
                ("split", Some(SoftmaxPath::Split), BlockSync::OneLaunch),
                ("cluster", Some(SoftmaxPath::Cluster), BlockSync::OneLaunch),
                ("poll", Some(SoftmaxPath::Poll), BlockSync::OneLaunch),
            ],
            _ => &[],
        };
        for &(tag, path, sync) in variants {
            let _path = settings::SOFTMAX_PATH.scoped(path);
            let _sync = settings::BLOCK_SYNC.scoped(sync);
            graph(dev, rows, &format!("softmax_f32_{outer}x{r}[{tag}]"), bytes, || x.softmax(-1).map(drop))?;
        }
        // The chosen path launched plainly: what programmatic dependent launch (the kernel
        // scheduled while the previous call finishes) is worth in a chain of calls.
        if r > 4096 && outer <= 32 {
            let _no_pdl = settings::AFTER_PREVIOUS.scoped(false);
            graph(dev, rows, &format!("softmax_f32_{outer}x{r}[no-pdl]"), bytes, || x.softmax(-1).map(drop))?;
        }
    }
    Ok(())
}

fn statistics(dev: &Arc<CudaDevice>, rows: &mut Vec<Row>) -> Result<()> {
    for [outer, r] in [[32usize, 4096], [1, 4 << 20]] {
        let x = Tensor::randn(&[outer, r], 2, DType::F32, GPU)?;
        graph(dev, rows, &format!("std_mean_f32_{outer}x{r}"), outer * r * 4, || {
            x.std_mean(&[-1], 1.0, false).map(drop)
        })?;
    }
    for n in [64usize, 16 << 20] {
        let (a, b) = (Tensor::randn(&[n], 3, DType::F32, GPU)?, Tensor::randn(&[n], 4, DType::F32, GPU)?);
        graph(dev, rows, &format!("mse_loss_f32_{n}_mean"), 2 * n * 4, || {
            a.mse_loss(&b, Reduction::Mean).map(drop)
        })?;
    }
    Ok(())
}

fn bincounts(dev: &Arc<CudaDevice>, rows: &mut Vec<Row>) -> Result<()> {
    let n = 4 << 20;
    let one = Tensor::full(&[n], 3.0, DType::I64, GPU)?;
    let uniform =
        Tensor::rand(&[n], 5, DType::F32, GPU)?.mul_scalar(1024.0)?.floor()?.to_dtype(DType::I64)?;
    for (name, x) in [("one_bin", &one), ("uniform1024", &uniform)] {
        // PyTorch's bincount reads the max back (no graph): time kiln's the same way, and
        // the bounded form (no sync) by graph replay.
        graph(dev, rows, &format!("bincount_4M_{name}_bounded"), n * 8, || {
            x.bincount_bounded(None, 1024).map(drop)
        })?;
        let stats = gpu_median_ms(dev, 3, REPS, || x.bincount(None, 0).map(drop))?;
        rows.push(Row {
            name: format!("bincount_4M_{name}"),
            stats,
            floor_us: floor_us(n * 8),
            mode: "eager",
        });
    }
    Ok(())
}

fn selections(dev: &Arc<CudaDevice>, rows: &mut Vec<Row>) -> Result<()> {
    for (outer, r, k) in [(1usize, 128256usize, 50usize), (64, 32000, 8), (1, 262144, 64)] {
        let x = Tensor::randn(&[outer, r], 6, DType::F32, GPU)?;
        graph(dev, rows, &format!("topk_f32_{outer}x{r}_k{k}"), outer * r * 4, || {
            x.topk(k, -1, true).map(drop)
        })?;
    }
    for r in [128usize, 256] {
        let x = Tensor::randn(&[1, r], 7, DType::F32, GPU)?;
        let bias = Tensor::randn(&[r], 8, DType::F32, GPU)?.mul_scalar(0.1)?;
        graph(dev, rows, &format!("router_softmax_top8_1x{r}"), r * 4, || {
            x.router_topk(8, Router::Softmax, None).map(drop)
        })?;
        graph(dev, rows, &format!("router_softmax_top8_norm_1x{r}"), r * 4, || {
            x.router_topk(8, Router::Softmax, Some(0.0)).map(drop)
        })?;
        graph(dev, rows, &format!("router_sigmoid_bias_top8_1x{r}"), r * 8, || {
            x.router_topk(8, Router::Sigmoid { bias: Some(&bias) }, Some(1e-20)).map(drop)
        })?;
    }
    Ok(())
}

/// PyTorch's figures from `bench/torch_peer.py --suite reductions` (name → µs), or why there
/// are none.
fn torch_figures(want: crate::peer::Want) -> Result<std::result::Result<Map<String, Value>, String>> {
    Ok(crate::peer::torch("reductions", None, want)?.and_then(|v| {
        v.get("results").and_then(|r| r.as_object()).cloned().ok_or_else(|| "no results in its output".into())
    }))
}

/// Runs the suite; prints a table and returns the JSON record.
pub fn run(peer: Option<&str>) -> Result<Value> {
    let want = crate::peer::Want::parse(peer)?;
    let dev = cuda::device(0)?;
    let mut rows = Vec::new();
    softmaxes(&dev, &mut rows)?;
    statistics(&dev, &mut rows)?;
    bincounts(&dev, &mut rows)?;
    selections(&dev, &mut rows)?;
    let torch = torch_figures(want)?;
    println!(
        "{:<42} {:>5} {:>10} {:>9} {:>10} {:>8}",
        "workload", "mode", "kiln µs", "floor µs", "torch µs", "torch/kiln"
    );
    let mut results = Vec::new();
    for row in &rows {
        let us = row.stats.median_ms * 1e3;
        let t = torch.as_ref().ok().and_then(|m| m.get(&row.name)).and_then(|v| v.as_f64());
        let (ts, ratio) = match t {
            Some(t) => (format!("{t:.2}"), format!("{:.1}x", t / us)),
            None => ("-".into(), "-".into()),
        };
        println!("{:<42} {:>5} {us:>10.2} {:>9.2} {ts:>10} {ratio:>8}", row.name, row.mode, row.floor_us);
        results.push(json!({
            "name": row.name, "mode": row.mode, "kiln_us": us, "floor_us": row.floor_us,
            "fraction_of_floor": row.floor_us / us, "torch_us": t, "stats_ms": row.stats,
        }));
    }
    if let Err(why) = &torch {
        println!("PyTorch figures unavailable: {why}");
    }
    Ok(json!({
        "suite": "reductions",
        "provenance": provenance(),
        "method": format!("graph: {PER_GRAPH} calls per CUDA graph, median of {REPS} replays; eager: CUDA events per call"),
        "results": results,
        "torch_error": torch.err(),
    }))
}
