//! Whole-model decode throughput (`kiln bench --suite decode --preset NAME`): a model of
//! a published shape with seeded random bf16 weights made directly on the GPU (no file),
//! timed one token at a time, greedy, at context 512 and 4096, plus memory at the three
//! levels (live tensors, allocator pool, driver-reported use).
//!
//! `--preset NAME-fp8` (or `--quantize fp8`, which appends the suffix) builds the same
//! model with FP8 linear weights (attention, MLP and expert projections quantised per
//! output channel as they are made; embedding, LM head, norms and router stay bf16), so
//! its tokens/s and weight memory compare with the bf16 run's.
//!
//! Each step is what `kiln generate` does per token: forward one token over the KV
//! cache, LM head, on-device argmax, 8-byte read of the token (which syncs, so wall time
//! per step is device time plus launch gaps). On CUDA each context is timed twice: eager
//! (kernels queued one by one) and with the step captured once as a CUDA graph and
//! replayed (`graph`, what `kiln generate` runs by default; the graph's
//! node count is the kernels and copies per token), after the captured step is timed
//! eagerly (`eager-dev`: the length read on the device, the whole cache attended with it).
//! Under `ncu --profile-from-start off` exactly two steps are profiled: one eager, one of
//! the captured form. Before decoding, one forward over a 512-token prompt from an empty
//! cache is timed (`prompt`).

use crate::peaks::{self, gib, Peaks};
use crate::peer::Want;
use crate::report::provenance;
use crate::timing::Stats;
use kiln::{DType, Device, Result, Tensor};
use kiln_models::config::{Config, MixerKind};
use kiln_models::graph_decode::{self, GraphStep};
use kiln_models::kv_cache::KvCache;
use kiln_models::sampling::{Sampler, SamplingParams};
use kiln_models::{Model, Quantize};
use serde_json::{json, Map, Value};
use std::time::Instant;

/// The presets: the config.json of each published checkpoint's text model, kept in
/// `bench/presets/NAME.json` and parsed as `kiln generate` parses a checkpoint's (the
/// PyTorch peer reads the same files). Where each comes from: `bench/presets/README.md`.
/// In the order of the goals, which the PyTorch peer's time budget follows.
pub const PRESETS: [(&str, &str); 5] = [
    ("llama-3.1-8b", include_str!("../../../bench/presets/llama-3.1-8b.json")),
    ("qwen3-30b-a3b", include_str!("../../../bench/presets/qwen3-30b-a3b.json")),
    ("qwen3.6-35b-a3b", include_str!("../../../bench/presets/qwen3.6-35b-a3b.json")),
    ("lfm2-8b-a1b", include_str!("../../../bench/presets/lfm2-8b-a1b.json")),
    ("qwen3-8b", include_str!("../../../bench/presets/qwen3-8b.json")),
];
/// The small shapes the CPU form of the suite runs (`crate::cpu_decode`).
pub const CPU_PRESETS: [(&str, &str); 2] = [
    ("qwen3-0.6b", include_str!("../../../bench/presets/qwen3-0.6b.json")),
    ("llama-3.2-1b", include_str!("../../../bench/presets/llama-3.2-1b.json")),
];
pub(crate) const CONTEXTS: [usize; 2] = [512, 4096];

/// The config.json text of preset `name` (GPU or CPU).
fn preset_json(name: &str) -> Result<&'static str> {
    let all = || PRESETS.iter().chain(&CPU_PRESETS);
    all().find(|(n, _)| *n == name).map(|(_, json)| *json).ok_or_else(|| {
        let names: Vec<&str> = all().map(|(n, _)| *n).collect();
        kiln::Error::invalid("bench decode", format!("unknown preset {name:?} ({})", names.join(", ")))
    })
}

/// The config of preset `name`.
pub fn preset(name: &str) -> Result<Config> {
    Config::from_json(preset_json(name)?)
        .map_err(|msg| kiln::Error::invalid("bench decode", format!("preset {name}: {msg}")))
}

/// `NAME` or `NAME-fp8`: the preset's config and how its linear weights are stored.
pub fn parse_preset(name: &str) -> Result<(Config, Quantize)> {
    match name.strip_suffix("-fp8") {
        Some(base) => Ok((preset(base)?, Quantize::Fp8)),
        None => Ok((preset(name)?, Quantize::None)),
    }
}

/// The preset names `--preset` selects: `all` / `all-fp8` expand to every preset.
fn preset_names(preset_name: &str) -> Vec<String> {
    match preset_name {
        "all" => PRESETS.iter().map(|(p, _)| p.to_string()).collect(),
        "all-fp8" => PRESETS.iter().map(|(p, _)| format!("{p}-fp8")).collect(),
        one => vec![one.to_string()],
    }
}

/// Bytes one decode step must read at context `ctx`: the weights it uses (the chosen
/// experts only; one embedding row is negligible) and the cached keys and values, with
/// `elem` bytes per element, `linear_elem` for the attention, short-conv, DeltaNet, MLP and
/// expert projections (1 for FP8; their per-row scales are negligible). A short-conv
/// layer's taps and state are negligible too; a DeltaNet layer's f32 recurrent state is
/// read and written once.
pub fn step_bytes(c: &Config, ctx: usize, elem: usize, linear_elem: usize) -> f64 {
    let (h, d) = (c.hidden_size, c.head_dim);
    let (mut dense, mut linear, mut state_f32) = (c.vocab_size * h, 0, 0);
    // Attention's q_proj is twice as wide when it also carries the output gate.
    let q_heads = if c.attn_output_gate { 2 * c.num_heads } else { c.num_heads };
    for i in 0..c.num_layers {
        match c.mixer(i) {
            MixerKind::ShortConv => linear += 4 * h * h, // in_proj [3H, H], out_proj [H, H]
            MixerKind::GatedDelta => {
                let g = c.gated_delta.as_ref().expect("a DeltaNet layer has its config");
                let values = g.value_heads * g.value_dim;
                // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj.
                linear += h * (g.conv_channels() + 2 * values + 2 * g.value_heads);
                state_f32 += 2 * g.value_heads * g.key_dim * g.value_dim;
            }
            MixerKind::Attention => {
                linear += h * d * (q_heads + c.num_heads + 2 * c.num_kv_heads);
                dense += 2 * c.num_kv_heads * d * ctx;
            }
        }
        match &c.moe {
            Some(m) if c.is_moe_layer(i) => {
                dense += m.num_experts * h;
                linear += m.top_k * 3 * h * m.intermediate_size;
                if let Some(shared) = m.shared_expert_intermediate_size {
                    linear += 3 * h * shared + h; // the shared expert and its gate
                }
            }
            _ => linear += 3 * h * c.intermediate_size,
        }
    }
    (dense * elem + linear * linear_elem + state_f32 * 4) as f64
}

/// Copy bandwidth of `device` in bytes per second (read + write), measured now, for the
/// floor: on CUDA the runtime suite's 2 GiB device-to-device copy timed with CUDA events;
/// on the CPU a copy over every core ([`crate::membw::measure`]).
pub fn measured_bandwidth(device: Device) -> Result<f64> {
    match device {
        Device::Cuda(i) => {
            let dev = kiln::cuda::device(i)?;
            let (gbps, _) = crate::runtime::copy_bandwidth(&dev, 1 << 31, 20)?;
            // The copy's 4 GiB go back to the driver before the model is built.
            dev.empty_cache()?;
            Ok(gbps * 1e9)
        }
        Device::Cpu => Ok(crate::membw::measure()),
    }
}

/// Decode tokens/s of `config` on `device` at each context, `steps` timed steps each,
/// with bf16 weights (or FP8 linear weights under `quantize`); the floor is the bytes a
/// step reads over `bandwidth` (bytes/s, from [`measured_bandwidth`]).
pub fn run_config(
    config: Config,
    quantize: Quantize,
    device: Device,
    contexts: &[usize],
    steps: usize,
    bandwidth: f64,
) -> Result<Value> {
    let dtype = DType::BF16;
    let linear_elem = if quantize == Quantize::Fp8 { 1 } else { dtype.size() };
    let peaks = Peaks::start(device)?;
    let t0 = Instant::now();
    let model = Model::random_quantized(config.clone(), device, dtype, 1, quantize)?;
    let warmup = WARMUP;
    // Room for the steps past the largest context, and the graph's warm-up step.
    let capacity = contexts.iter().max().copied().unwrap_or(1) + warmup + steps + 1;
    let mut cache = model.new_cache(1, capacity)?;
    let mut sampler = Sampler::new(SamplingParams::greedy(), capacity, device)?;
    let mut token = Tensor::from_vec(vec![1i64], &[1], device)?;
    if let Some(d) = peaks.as_ref().map(Peaks::device) {
        d.synchronize()?;
        // Temporaries of the random init are not part of what decode needs.
        d.empty_cache()?;
    }
    let build_secs = t0.elapsed().as_secs_f64();
    let w = model.weight_stats();
    println!(
        "  weights: {:.2} GiB (linear layers {:.2} GiB, of which fp8 {:.2} GiB)",
        gib(w.total as u64),
        gib(w.linear as u64),
        gib(w.fp8 as u64)
    );
    let prompt =
        prompt_pass(&model, &mut cache, device, contexts.iter().copied().min().unwrap_or(1).min(PROMPT))?;
    let floor = |ctx| bandwidth / step_bytes(&config, ctx, dtype.size(), linear_elem);
    let mut results = vec![];
    for &ctx in contexts {
        // The cached values do not change the cost: only the length matters.
        cache.set_len(ctx.saturating_sub(warmup + 1))?;
        let step = || decode_step(&model, &mut cache, &mut sampler, &mut token);
        results.push(timed("eager", ctx, warmup, steps, floor(ctx), step)?);
    }
    let graph = if device.is_cuda() {
        // One eager step as the first range `ncu --profile-from-start off` profiles.
        kiln::cuda::device_of(device)?
            .profiler_range(|| decode_step(&model, &mut cache, &mut sampler, &mut token))?;
        graph_steps(&model, &mut cache, &mut sampler, contexts, steps, &floor).unwrap_or_else(|e| {
            println!("  graph: not captured: {e}");
            json!({ "error": e.to_string() })
        })
    } else {
        Value::Null
    };
    let memory = peaks::report(peaks, "memory");
    let linear_weights = if quantize == Quantize::Fp8 { "fp8" } else { dtype.name() };
    Ok(json!({
        "dtype": dtype.name(),
        "linear_weights": linear_weights,
        "batch": 1,
        "build_secs": build_secs,
        "weight_bytes": w.total,
        "linear_weight_bytes": w.linear,
        "fp8_weight_bytes": w.fp8,
        "kv_cache_bytes": cache.nbytes(),
        "prompt": prompt,
        "decode": results,
        "graph": graph,
        "memory": memory,
    }))
}

/// `steps` calls of `step` after `warmup` untimed ones, at context `ctx`: tokens/s over the
/// wall time, the per-step median, and the share of `floor` (tokens/s).
fn timed(
    mode: &str,
    ctx: usize,
    warmup: usize,
    steps: usize,
    floor: f64,
    mut step: impl FnMut() -> Result<()>,
) -> Result<Value> {
    for _ in 0..warmup {
        step()?;
    }
    let mut ms = Vec::with_capacity(steps);
    let bar = crate::progress::bar(steps, &format!("{mode} context {ctx}"));
    let t = Instant::now();
    for _ in 0..steps {
        let s = Instant::now();
        step()?;
        ms.push(s.elapsed().as_secs_f64() * 1e3);
        bar.inc(1);
    }
    let secs = t.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let st = Stats::from_samples(ms, warmup);
    let tps = steps as f64 / secs;
    println!(
        "  {mode:<5} context {ctx:>5}: {tps:8.1} tokens/s  (median {:.2} ms/token; bandwidth floor {floor:.0} tokens/s, {:.0}%)",
        st.median_ms,
        100.0 * tps / floor
    );
    Ok(json!({
        "mode": mode, "context": ctx, "steps": steps, "warmup": warmup, "tokens_per_s": tps,
        "median_ms_per_token": st.median_ms, "min_ms": st.min_ms, "max_ms": st.max_ms,
        "floor_tokens_per_s": floor, "fraction_of_floor": tps / floor,
    }))
}

/// The decode step captured once as a CUDA graph (as `kiln generate` runs it by default)
/// and replayed at every context, no re-capture: per step one replay
/// and the 8-byte token read, as the eager steps. With the nodes (kernels and copies) one
/// replay launches.
fn graph_steps(
    model: &Model,
    cache: &mut KvCache,
    sampler: &mut Sampler,
    contexts: &[usize],
    steps: usize,
    floor: &dyn Fn(usize) -> f64,
) -> Result<Value> {
    let device = model.device();
    let token = Tensor::from_vec(vec![1i64], &[1, 1], device)?;
    cache.track_on_device()?;
    cache.set_len(contexts.first().copied().unwrap_or(1).saturating_sub(WARMUP + 2))?;
    // One eager step with the length on the device loads what the captured step launches.
    graph_decode::step(model, cache, sampler, &token)?;
    // The captured step run eagerly: what the graph's kernels cost without the graph (the
    // length read on the device, the whole cache attended with that length).
    let mut eager = vec![];
    // The step the graph holds, once, in the second profiler range (see `run_config`).
    let dev = kiln::cuda::device_of(device)?;
    dev.profiler_range(|| graph_decode::step(model, cache, sampler, &token))?;
    for &ctx in contexts {
        cache.set_len(ctx.saturating_sub(WARMUP + 1))?;
        let step = || {
            graph_decode::step(model, cache, sampler, &token)?;
            token.to_vec::<i64>().map(drop)
        };
        eager.push(timed("eager-dev", ctx, WARMUP, steps, floor(ctx), step)?);
    }
    let g = GraphStep::capture(model, cache, sampler, &token)?;
    let nodes = g.nodes()?;
    println!("  graph: {nodes} nodes per step");
    let (start, end) = (dev.new_event(true)?, dev.new_event(true)?);
    let mut out = vec![];
    for &ctx in contexts {
        cache.set_len(ctx.saturating_sub(WARMUP + 1))?;
        // Device time of each replay (events either side), beside the wall time per token.
        let mut device_ms = Vec::with_capacity(steps + WARMUP);
        let step = || {
            start.record(&dev.stream())?;
            g.replay(cache)?;
            end.record(&dev.stream())?;
            g.token().to_vec::<i64>()?;
            device_ms.push(f64::from(start.elapsed_ms(&end)?));
            Ok(())
        };
        let mut r = timed("graph", ctx, WARMUP, steps, floor(ctx), step)?;
        let dm = Stats::from_samples(device_ms, WARMUP).median_ms;
        println!("        context {ctx:>5}: device time per replay {dm:.2} ms (median)");
        r["device_median_ms"] = json!(dm);
        out.push(r);
    }
    Ok(json!({ "nodes_per_step": nodes, "decode": out, "eager_device_length": eager }))
}

/// Tokens of the timed prompt (capped at the smallest context).
const PROMPT: usize = 512;

/// One forward over a `len`-token prompt from an empty cache, as `kiln generate` makes
/// before decoding (mixture-of-experts layers take their grouped path), read back so the
/// time is the device's; the median of 3 after one unmeasured pass.
fn prompt_pass(model: &Model, cache: &mut KvCache, device: Device, len: usize) -> Result<Value> {
    let ids: Vec<i64> = (0..len as i64).collect();
    let tokens = Tensor::from_vec(ids, &[1, len], device)?;
    let mut ms = Vec::with_capacity(3);
    for pass in 0..4 {
        cache.set_len(0)?;
        let t = Instant::now();
        let hidden = model.forward(&tokens, cache)?;
        hidden.narrow(1, len - 1, 1)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
        if pass > 0 {
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    ms.sort_by(f64::total_cmp);
    let median = ms[ms.len() / 2];
    println!("  prompt of {len} tokens: {median:.1} ms ({:.0} tokens/s)", len as f64 / median * 1e3);
    Ok(
        json!({ "tokens": len, "median_ms": median, "tokens_per_s": len as f64 / median * 1e3, "passes": ms.len() }),
    )
}

/// One token: forward over the cache, LM head, greedy pick, 8-byte read.
pub(crate) fn decode_step(
    model: &Model,
    cache: &mut KvCache,
    sampler: &mut Sampler,
    token: &mut Tensor,
) -> Result<()> {
    let hidden = model.forward(&token.reshape(&[1, 1])?, cache)?;
    *token = sampler.sample(&model.logits(&hidden)?)?;
    token.to_vec::<i64>().map(drop)
}

fn describe(q: Quantize) -> &'static str {
    match q {
        Quantize::Fp8 => "bf16, fp8 linear weights",
        Quantize::None => "bf16",
    }
}

/// Timed decode steps at each context, after [`WARMUP`] untimed ones.
const STEPS: usize = 128;
const WARMUP: usize = 3;

/// `kiln bench --suite decode --preset NAME` (or `all`; either with `-fp8`), beside the
/// PyTorch peer `bench/torch_decode.py` on the bf16 presets as `peer` asks.
pub fn run(preset_name: &str, peer: Option<&str>) -> Result<Value> {
    let want = Want::parse(peer)?;
    let device = Device::Cuda(0);
    let bandwidth = measured_bandwidth(device)?;
    println!("copy bandwidth (2 GiB device-to-device, read + write): {:.0} GB/s", bandwidth / 1e9);
    let mut out = Map::new();
    for name in preset_names(preset_name) {
        let (config, q) = parse_preset(&name)?;
        println!("decode {name} ({}, random weights, batch 1)", describe(q));
        // A preset that fails (one too large for the card) is recorded; the others still run.
        let v = run_config(config, q, device, &CONTEXTS, STEPS, bandwidth).unwrap_or_else(|e| {
            println!("  failed: {e}");
            json!({ "error": e.to_string() })
        });
        out.insert(name, v);
    }
    let torch = torch_peer(&mut out, want)?;
    print_side_by_side(&out, bandwidth);
    Ok(json!({
        "suite": "decode", "provenance": provenance(), "copy_bandwidth_gbps": bandwidth / 1e9,
        "presets": out, "torch": torch,
    }))
}

/// Runs `bench/torch_decode.py` on the bf16 presets of `out` with kiln's contexts and
/// steps and merges its figures ([`merge_peer`]). Returns the peer's torch build and
/// device, or why it did not run.
fn torch_peer(out: &mut Map<String, Value>, want: Want) -> Result<Value> {
    let bad = |e: serde_json::Error| kiln::Error::invalid("bench decode", e.to_string());
    let mut presets = vec![];
    for name in out.keys().filter(|n| !n.ends_with("-fp8")) {
        presets.push(json!({ "name": name, "config": serde_json::from_str::<Value>(preset_json(name)?).map_err(bad)? }));
    }
    if presets.is_empty() {
        return Ok(json!({ "skipped": "no bf16 preset" }));
    }
    // kiln's pool goes back to the driver: the peer builds the same weights again.
    kiln::cuda::device(0)?.empty_cache()?;
    let spec = json!({
        "presets": presets, "contexts": CONTEXTS, "steps": STEPS, "warmup": WARMUP, "prompts": [PROMPT, 4096],
    });
    let v = match crate::peer::torch("decode", Some(&spec), want)? {
        Ok(v) => v,
        Err(why) => return Ok(json!({ "skipped": why })),
    };
    merge_peer(out, &v);
    Ok(json!({ "torch": v["torch"], "cuda": v["cuda"], "device": v["device"] }))
}

/// Puts each preset's figures of the peer's output `v` into its kiln entry as `torch`,
/// each decode figure with its fraction of kiln's floor at that context.
fn merge_peer(out: &mut Map<String, Value>, v: &Value) {
    for r in v["results"].as_array().into_iter().flatten() {
        let Some(kiln) = r["preset"].as_str().and_then(|n| out.get_mut(n)) else { continue };
        let mut r = r.clone();
        for d in r["decode"].as_array_mut().into_iter().flatten() {
            let floor =
                kiln["decode"].as_array().into_iter().flatten().find(|k| k["context"] == d["context"]);
            if let (Some(tps), Some(floor)) =
                (d["tokens_per_s"].as_f64(), floor.and_then(|f| f["floor_tokens_per_s"].as_f64()))
            {
                d["fraction_of_floor"] = json!(tps / floor);
            }
        }
        kiln["torch"] = r;
    }
}

/// Modes of the peer, in the order of the table's columns.
const TORCH_MODES: [&str; 3] = ["eager", "graph", "compiled"];

/// kiln's tokens/s and PyTorch's per mode, each with its share of the floor, one line per
/// preset and context; then the prompt passes.
fn print_side_by_side(out: &Map<String, Value>, bandwidth: f64) {
    println!(
        "decode tokens/s, batch 1 (floor: bytes a step reads / {:.0} GB/s measured copy bandwidth)",
        bandwidth / 1e9
    );
    println!(
        "{:<22} {:>5} {:>6} {:>14} {:>14} {:>14} {:>14} {:>14}",
        "preset", "ctx", "floor", "kiln eager", "kiln graph", "torch eager", "torch graph", "torch compiled"
    );
    let cell = |tps: Option<f64>, floor: f64| match tps {
        Some(t) => format!("{t:.1} {:>3.0}%", 100.0 * t / floor),
        None => "-".to_string(),
    };
    for (name, v) in out {
        for k in v["decode"].as_array().into_iter().flatten() {
            let floor = k["floor_tokens_per_s"].as_f64().unwrap_or(f64::NAN);
            let torch = |mode: &str| {
                v["torch"]["decode"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|d| d["context"] == k["context"] && d["mode"] == mode)
                    .and_then(|d| d["tokens_per_s"].as_f64())
            };
            let [eager, graph, compiled] = TORCH_MODES.map(|m| cell(torch(m), floor));
            let kiln_graph = v["graph"]["decode"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|d| d["context"] == k["context"])
                .and_then(|d| d["tokens_per_s"].as_f64());
            println!(
                "{name:<22} {:>5} {floor:>6.0} {:>14} {:>14} {eager:>14} {graph:>14} {compiled:>14}",
                k["context"],
                cell(k["tokens_per_s"].as_f64(), floor),
                cell(kiln_graph, floor)
            );
        }
    }
    for (name, v) in out {
        let torch: Vec<String> = v["torch"]["prompt"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                format!(
                    "{} tokens {:.0} tokens/s",
                    p["tokens"],
                    p["tokens_per_s"].as_f64().unwrap_or(f64::NAN)
                )
            })
            .collect();
        println!(
            "{name:<22} prompt: kiln {} tokens {:.0} tokens/s; torch {}",
            v["prompt"]["tokens"],
            v["prompt"]["tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            if torch.is_empty() { "-".to_string() } else { torch.join(", ") }
        );
        for key in ["error", "skipped"].iter().filter(|k| v.get(**k).is_some()) {
            println!("{name:<22} kiln {key}: {}", v[*key]);
        }
        for key in ["errors", "skipped"] {
            if v["torch"][key].as_object().is_some_and(|m| !m.is_empty())
                || v["torch"][key].as_array().is_some_and(|a| !a.is_empty())
            {
                println!("{name:<22} torch {key}: {}", v["torch"][key]);
            }
        }
    }
}

/// `kiln bench --suite memory`: the memory family alone for each preset: bytes of weights
/// and KV cache (context 4096), and the peaks at the three levels (live tensors, the
/// allocator's pool, the driver) over building the model and a few decode steps.
pub fn memory(preset_name: &str) -> Result<Value> {
    let mut out = serde_json::Map::new();
    for name in preset_names(preset_name) {
        let (config, q) = parse_preset(&name)?;
        println!("memory {name} ({}, random weights, batch 1, context 4096)", describe(q));
        let device = Device::Cuda(0);
        let v = run_config(config, q, device, &[4096], 4, measured_bandwidth(device)?)?;
        out.insert(
            name,
            json!({
                "weight_bytes": v["weight_bytes"], "linear_weight_bytes": v["linear_weight_bytes"],
                "fp8_weight_bytes": v["fp8_weight_bytes"], "kv_cache_bytes": v["kv_cache_bytes"],
                "peaks": v["memory"],
            }),
        );
    }
    Ok(json!({ "suite": "memory", "provenance": provenance(), "presets": out }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite's code path on the CPU with a tiny model of each family, bf16 and fp8.
    #[test]
    fn tiny_models_decode_on_cpu() {
        let bandwidth = measured_bandwidth(Device::Cpu).unwrap();
        assert!(bandwidth > 1e8, "{bandwidth}");
        for name in PRESETS.iter().flat_map(|(p, _)| [p.to_string(), format!("{p}-fp8")]) {
            let (mut c, q) = parse_preset(&name).unwrap();
            c.hidden_size = 32;
            c.intermediate_size = 48;
            c.num_layers = 2;
            c.num_heads = 4;
            c.num_kv_heads = 2;
            c.head_dim = 8;
            c.vocab_size = 64;
            if let Some(m) = &mut c.moe {
                m.num_experts = 8;
                m.top_k = 2;
                m.intermediate_size = 16;
                m.shared_expert_intermediate_size = m.shared_expert_intermediate_size.map(|_| 16);
            }
            // LFM2: layer 0 short conv with a dense MLP, layer 1 attention with experts.
            if let Some(sc) = &mut c.short_conv {
                sc.layers = vec![0];
                c.moe.as_mut().unwrap().mlp_only_layers = vec![0];
            }
            // Qwen3.5: layer 0 Gated DeltaNet, layer 1 attention, both with experts.
            if let Some(g) = &mut c.gated_delta {
                (g.key_heads, g.value_heads, g.key_dim, g.value_dim, g.layers) = (2, 4, 8, 8, vec![0]);
            }
            let v = run_config(c, q, Device::Cpu, &[8, 20], 2, bandwidth).unwrap();
            assert_eq!(v["decode"].as_array().unwrap().len(), 2, "{name}");
            assert!(v["decode"][1]["tokens_per_s"].as_f64().unwrap() > 0.0);
            assert_eq!(v["prompt"]["tokens"], 8, "{name}");
            let fp8 = v["fp8_weight_bytes"].as_u64().unwrap();
            assert_eq!(fp8 > 0, q == Quantize::Fp8, "{name}");
            if q == Quantize::Fp8 {
                assert_eq!(fp8, v["linear_weight_bytes"].as_u64().unwrap(), "{name}");
            }
        }
        assert!(preset("gpt-5").is_err());
        assert!(parse_preset("gpt-5-fp8").is_err());
        // 8B dense at context 0 reads its ~16 GB of bf16 weights per token; FP8 ~9 GB (the
        // embedding-sized LM head stays bf16).
        let b = step_bytes(&preset("llama-3.1-8b").unwrap(), 0, 2, 2);
        assert!((14e9..17e9).contains(&b), "{b}");
        let b8 = step_bytes(&preset("llama-3.1-8b").unwrap(), 0, 2, 1);
        assert!((7.5e9..9e9).contains(&b8), "{b8}");
        // LFM2-8B-A1B has ~1.5 B active parameters a token: ~3.1 GB in bf16.
        let lfm = step_bytes(&preset("lfm2-8b-a1b").unwrap(), 0, 2, 2);
        assert!((2.9e9..3.3e9).contains(&lfm), "{lfm}");
        // Qwen3.6-35B-A3B: ~3 B active parameters (8 of 256 experts and the shared one,
        // 30 DeltaNet and 10 attention layers, the 248K-row LM head): ~6 GB in bf16.
        let q36 = step_bytes(&preset("qwen3.6-35b-a3b").unwrap(), 0, 2, 2);
        assert!((5.5e9..6.5e9).contains(&q36), "{q36}");
    }

    /// The peer's figures land beside kiln's with their share of kiln's floor, per context
    /// and mode; a preset the peer did not run keeps no `torch` entry.
    #[test]
    fn peer_figures_are_merged_with_the_floor() {
        let kiln = |floor: f64| {
            json!({ "decode": [{ "context": 512, "tokens_per_s": 90.0, "floor_tokens_per_s": floor }],
                    "prompt": { "tokens": 512, "tokens_per_s": 1e4 } })
        };
        let mut out = Map::new();
        out.insert("a".into(), kiln(200.0));
        out.insert("b".into(), kiln(400.0));
        let peer = json!({ "results": [{ "preset": "a", "decode": [
            { "mode": "graph", "context": 512, "tokens_per_s": 50.0 },
            { "mode": "compiled", "context": 512, "tokens_per_s": 150.0 },
            { "mode": "compiled", "context": 4096, "tokens_per_s": 140.0 }],
            "prompt": [], "errors": {}, "skipped": ["eager@512"] }] });
        merge_peer(&mut out, &peer);
        let t = &out["a"]["torch"]["decode"];
        assert_eq!(t[0]["fraction_of_floor"], json!(0.25));
        assert_eq!(t[1]["fraction_of_floor"], json!(0.75));
        // kiln ran no context 4096 here: no floor to divide by.
        assert!(t[2].get("fraction_of_floor").is_none());
        assert!(out["b"].get("torch").is_none());
        print_side_by_side(&out, 3e12);
    }

    /// With every expert active, a step reads every weight but the embedding (one row),
    /// plus the DeltaNet states: Qwen3.5's gated q_proj, DeltaNet projections and shared
    /// experts counted against the model's own weight bytes. What step_bytes leaves out
    /// (norms, conv taps, A_log, dt_bias: under 2 % at the fixture's tiny widths) bounds it.
    #[test]
    fn step_bytes_counts_every_qwen3_5_weight() {
        let mut c = Config::load(&kiln_models::config::fixtures_dir().join("models/qwen3_5_moe")).unwrap();
        let m = c.moe.as_mut().unwrap();
        m.top_k = m.num_experts;
        let model = Model::random(c.clone(), Device::Cpu, DType::BF16, 1).unwrap();
        let g = c.gated_delta.as_ref().unwrap();
        let states = 4 * 2 * g.layers.len() * g.value_heads * g.key_dim * g.value_dim;
        let want = model.weight_stats().total - 2 * c.vocab_size * c.hidden_size + states;
        let got = step_bytes(&c, 0, 2, 2);
        assert!(got <= want as f64 && got > 0.98 * want as f64, "step_bytes {got}, weights {want}");
    }
}
