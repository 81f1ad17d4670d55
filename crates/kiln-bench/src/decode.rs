//! Whole-model decode throughput (`kiln bench --suite decode --preset NAME`): a model of
//! a published shape with seeded random bf16 weights made directly on the GPU (no file),
//! timed one token at a time, greedy, at context 512 and 4096, plus memory at the three
//! levels (live tensors, allocator pool, driver-reported use).
//!
//! Each step is what `kiln generate` does per token: forward one token over the KV
//! cache, LM head, on-device argmax, 8-byte read of the token (which syncs, so wall time
//! per step is device time plus launch gaps). Eager, not graph-replayed.

use crate::report::provenance;
use kiln::{DType, Device, Result, Tensor};
use kiln_models::config::{Arch, Config, MoeConfig, RopeScaling};
use kiln_models::kv_cache::KvCache;
use kiln_models::sampling::{Sampler, SamplingParams};
use kiln_models::Model;
use serde_json::{json, Value};
use std::time::Instant;

pub const PRESETS: [&str; 3] = ["llama-3.1-8b", "qwen3-8b", "qwen3-30b-a3b"];
pub const CONTEXTS: [usize; 2] = [512, 4096];
/// HBM3e bandwidth of the H200 used for the floor (bytes a step must read / bandwidth).
const BANDWIDTH: f64 = 4.1e12;

fn base(arch: Arch) -> Config {
    Config {
        arch,
        hidden_size: 4096,
        intermediate_size: 12288,
        num_layers: 36,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        vocab_size: 151936,
        rms_norm_eps: 1e-6,
        rope_theta: 1e6,
        rope_scaling: RopeScaling::None,
        max_position_embeddings: 40960,
        tie_word_embeddings: false,
        attention_bias: false,
        qk_norm: arch != Arch::Llama,
        moe: None,
        eos_token_ids: vec![],
        bf16_checkpoint: true,
    }
}

/// The config.json numbers of the published checkpoints.
pub fn preset(name: &str) -> Result<Config> {
    Ok(match name {
        "llama-3.1-8b" => Config {
            intermediate_size: 14336,
            num_layers: 32,
            vocab_size: 128256,
            rms_norm_eps: 1e-5,
            rope_theta: 500000.0,
            rope_scaling: RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position: 8192,
            },
            max_position_embeddings: 131072,
            ..base(Arch::Llama)
        },
        "qwen3-8b" => base(Arch::Qwen3),
        "qwen3-30b-a3b" => Config {
            hidden_size: 2048,
            intermediate_size: 6144,
            num_layers: 48,
            num_kv_heads: 4,
            moe: Some(MoeConfig {
                num_experts: 128,
                top_k: 8,
                intermediate_size: 768,
                norm_topk_prob: true,
                decoder_sparse_step: 1,
                mlp_only_layers: vec![],
            }),
            ..base(Arch::Qwen3Moe)
        },
        other => {
            return Err(kiln::Error::invalid(
                "bench decode",
                format!("unknown preset {other:?} ({})", PRESETS.join(", ")),
            ))
        }
    })
}

/// Bytes one decode step must read at context `ctx`: the weights it uses (the chosen
/// experts only; one embedding row is negligible) and the cached keys and values.
pub fn step_bytes(c: &Config, ctx: usize, elem: usize) -> f64 {
    let (h, d) = (c.hidden_size, c.head_dim);
    let attn = h * d * (2 * c.num_heads + 2 * c.num_kv_heads);
    let ffn = match &c.moe {
        Some(m) => m.num_experts * h + m.top_k * 3 * h * m.intermediate_size,
        None => 3 * h * c.intermediate_size,
    };
    let kv = 2 * c.num_kv_heads * d * ctx;
    ((c.num_layers * (attn + ffn + kv) + c.vocab_size * h) * elem) as f64
}

/// Decode tokens/s of `config` on `device` at each context, `steps` timed steps each.
pub fn run_config(config: Config, device: Device, contexts: &[usize], steps: usize) -> Result<Value> {
    let dtype = DType::BF16;
    let cuda = match device {
        Device::Cuda(i) => Some(kiln::cuda::device(i)?),
        Device::Cpu => None,
    };
    let probe = cuda.as_ref().map(|d| d.driver_peak_probe()).transpose()?;
    if let Some(d) = &cuda {
        d.reset_peak();
    }
    let t0 = Instant::now();
    let model = Model::random(config.clone(), device, dtype, 1)?;
    let warmup = 3;
    let capacity = contexts.iter().max().copied().unwrap_or(1) + warmup + steps;
    let mut cache = model.new_cache(1, capacity)?;
    let mut sampler = Sampler::new(SamplingParams::greedy(), capacity, device)?;
    let mut token = Tensor::from_vec(vec![1i64], &[1], device)?;
    if let Some(d) = &cuda {
        d.synchronize()?;
        // Temporaries of the random init are not part of what decode needs.
        d.empty_cache()?;
    }
    let build_secs = t0.elapsed().as_secs_f64();
    let mut results = vec![];
    for &ctx in contexts {
        // The cached values do not change the cost: only the length matters.
        cache.set_len(ctx.saturating_sub(warmup + 1))?;
        for _ in 0..warmup {
            decode_step(&model, &mut cache, &mut sampler, &mut token)?;
        }
        let mut ms = Vec::with_capacity(steps);
        let bar = crate::progress::bar(steps, &format!("context {ctx}"));
        let t = Instant::now();
        for _ in 0..steps {
            let s = Instant::now();
            decode_step(&model, &mut cache, &mut sampler, &mut token)?;
            ms.push(s.elapsed().as_secs_f64() * 1e3);
            bar.inc(1);
        }
        let secs = t.elapsed().as_secs_f64();
        bar.finish_and_clear();
        ms.sort_by(f64::total_cmp);
        let tps = steps as f64 / secs;
        let floor_tps = BANDWIDTH / step_bytes(&config, ctx, dtype.size());
        println!(
            "  context {ctx:>5}: {tps:8.1} tokens/s  (median {:.2} ms/token; bandwidth floor {floor_tps:.0} tokens/s, {:.0}%)",
            ms[ms.len() / 2],
            100.0 * tps / floor_tps
        );
        results.push(json!({
            "context": ctx, "steps": steps, "warmup": warmup, "tokens_per_s": tps,
            "median_ms_per_token": ms[ms.len() / 2], "min_ms": ms[0], "max_ms": ms[ms.len() - 1],
            "floor_tokens_per_s": floor_tps, "fraction_of_floor": tps / floor_tps,
        }));
    }
    let memory = match (&cuda, probe) {
        (Some(d), Some(p)) => {
            let s = d.memory_stats();
            let driver = p.finish();
            println!(
                "  memory: peak live {:.2} GiB, peak reserved {:.2} GiB, peak driver-used {:.2} GiB",
                gib(s.peak_live_bytes),
                gib(s.peak_reserved_bytes),
                gib(driver)
            );
            json!({
                "peak_live_bytes": s.peak_live_bytes,
                "peak_reserved_bytes": s.peak_reserved_bytes,
                "peak_driver_used_bytes": driver,
            })
        }
        _ => Value::Null,
    };
    Ok(json!({
        "dtype": dtype.name(),
        "mode": "eager",
        "batch": 1,
        "build_secs": build_secs,
        "weight_bytes": model.weight_bytes(),
        "kv_cache_bytes": cache.nbytes(),
        "decode": results,
        "memory": memory,
    }))
}

/// One token: forward over the cache, LM head, greedy pick, 8-byte read.
fn decode_step(model: &Model, cache: &mut KvCache, sampler: &mut Sampler, token: &mut Tensor) -> Result<()> {
    let hidden = model.forward(&token.reshape(&[1, 1])?, cache)?;
    *token = sampler.sample(&model.logits(&hidden)?)?;
    token.to_vec::<i64>().map(drop)
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// `kiln bench --suite decode --preset NAME` (or `all`).
pub fn run(preset_name: &str) -> Result<Value> {
    let names: Vec<&str> = if preset_name == "all" { PRESETS.to_vec() } else { vec![preset_name] };
    let mut out = serde_json::Map::new();
    for name in names {
        let config = preset(name)?;
        println!("decode {name} (bf16, random weights, batch 1)");
        out.insert(name.into(), run_config(config, Device::Cuda(0), &CONTEXTS, 128)?);
    }
    Ok(json!({ "suite": "decode", "provenance": provenance(), "presets": out }))
}

/// `kiln bench --suite memory`: the memory family alone for each preset: bytes of weights
/// and KV cache (context 4096), and the peaks at the three levels (live tensors, the
/// allocator's pool, the driver) over building the model and a few decode steps.
pub fn memory(preset_name: &str) -> Result<Value> {
    let names: Vec<&str> = if preset_name == "all" { PRESETS.to_vec() } else { vec![preset_name] };
    let mut out = serde_json::Map::new();
    for name in names {
        println!("memory {name} (bf16, random weights, batch 1, context 4096)");
        let v = run_config(preset(name)?, Device::Cuda(0), &[4096], 4)?;
        out.insert(
            name.into(),
            json!({ "weight_bytes": v["weight_bytes"], "kv_cache_bytes": v["kv_cache_bytes"], "peaks": v["memory"] }),
        );
    }
    Ok(json!({ "suite": "memory", "provenance": provenance(), "presets": out }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite's code path on the CPU with a tiny model of each family.
    #[test]
    fn tiny_models_decode_on_cpu() {
        for name in PRESETS {
            let mut c = preset(name).unwrap();
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
            }
            let v = run_config(c, Device::Cpu, &[8, 20], 2).unwrap();
            assert_eq!(v["decode"].as_array().unwrap().len(), 2, "{name}");
            assert!(v["decode"][1]["tokens_per_s"].as_f64().unwrap() > 0.0);
        }
        assert!(preset("gpt-5").is_err());
        // 8B dense at context 0 reads its ~16 GB of bf16 weights per token.
        let b = step_bytes(&preset("llama-3.1-8b").unwrap(), 0, 2);
        assert!((14e9..17e9).contains(&b), "{b}");
    }
}
