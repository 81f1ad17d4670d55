//! `kiln bench --suite decode --device cpu`: whole-model decode tokens/s on the CPU for
//! the small published shapes a CPU serves (Qwen3-0.6B, Llama-3.2-1B), seeded random f32
//! weights (the CLI's CPU default dtype), greedy, one token at a time, beside the CPU's
//! memory bandwidth measured in the same run ([`crate::membw`]): the floor of a step is
//! the bytes it must read ([`decode::step_bytes`]) over that bandwidth.

use crate::decode::{self, decode_step, preset, CPU_PRESETS};
use crate::report::provenance;
use kiln::{DType, Device, Result, Tensor};
use kiln_models::config::Config;
use kiln_models::sampling::{Sampler, SamplingParams};
use kiln_models::Model;
use serde_json::{json, Value};
use std::time::Instant;

const CONTEXTS: [usize; 2] = [128, 1024];
const STEPS: usize = 16;

/// Tokens/s of `config` at each context (`steps` timed steps after 2 warm-up steps), and
/// the share of `bandwidth` (bytes/s) they reach.
pub fn run_config(config: &Config, contexts: &[usize], steps: usize, bandwidth: f64) -> Result<Value> {
    let (device, dtype) = (Device::Cpu, DType::F32);
    let model = Model::random(config.clone(), device, dtype, 1)?;
    let warmup = 2;
    let capacity = contexts.iter().max().copied().unwrap_or(1) + warmup + steps;
    let mut cache = model.new_cache(1, capacity)?;
    let mut sampler = Sampler::new(SamplingParams::greedy(), capacity, device)?;
    let mut token = Tensor::from_vec(vec![1i64], &[1], device)?;
    let mut results = vec![];
    for &ctx in contexts {
        cache.set_len(ctx.saturating_sub(warmup + 1))?;
        for _ in 0..warmup {
            decode_step(&model, &mut cache, &mut sampler, &mut token)?;
        }
        let t = Instant::now();
        for _ in 0..steps {
            decode_step(&model, &mut cache, &mut sampler, &mut token)?;
        }
        let tps = steps as f64 / t.elapsed().as_secs_f64();
        let bytes = decode::step_bytes(config, ctx, dtype.size(), dtype.size());
        let share = tps * bytes / bandwidth;
        println!(
            "  context {ctx:>5}: {tps:7.2} tokens/s, {:.1} GB/s read = {:.0}% of the measured bandwidth",
            tps * bytes / 1e9,
            100.0 * share
        );
        results.push(json!({
            "context": ctx, "steps": steps, "warmup": warmup, "tokens_per_s": tps,
            "step_bytes": bytes, "fraction_of_bandwidth": share,
        }));
    }
    Ok(
        json!({ "dtype": dtype.name(), "batch": 1, "weight_bytes": model.weight_stats().total, "decode": results }),
    )
}

/// Each CPU preset (or the one `preset_name` names; a GPU preset name runs them all).
pub fn run(preset_name: &str) -> Result<Value> {
    let all: Vec<&str> = CPU_PRESETS.iter().map(|(n, _)| *n).collect();
    let names = match all.iter().find(|p| **p == preset_name) {
        Some(p) => vec![*p],
        None => {
            println!("decode on the CPU: presets {} ({preset_name:?} is a GPU preset)", all.join(", "));
            all
        }
    };
    let bandwidth = crate::membw::measure();
    println!(
        "cpu memory bandwidth: {:.1} GB/s (parallel copy, read + written, {} threads)",
        bandwidth / 1e9,
        rayon::current_num_threads()
    );
    let mut out = serde_json::Map::new();
    for name in names {
        println!("decode {name} (f32, random weights, batch 1, cpu)");
        out.insert(name.to_string(), run_config(&preset(name)?, &CONTEXTS, STEPS, bandwidth)?);
    }
    Ok(json!({
        "suite": "decode", "device": "cpu", "provenance": provenance(),
        "memory_bandwidth_bytes_per_s": bandwidth, "threads": rayon::current_num_threads(), "presets": out,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite's path with both presets shrunk, against a nominal bandwidth.
    #[test]
    fn shrunk_presets_decode() {
        for (name, _) in CPU_PRESETS {
            let mut c = preset(name).unwrap();
            (c.hidden_size, c.intermediate_size, c.num_layers, c.vocab_size) = (64, 96, 2, 128);
            (c.num_heads, c.num_kv_heads, c.head_dim) = (4, 2, 16);
            let v = run_config(&c, &[4, 9], 2, 1e10).unwrap();
            let d = v["decode"].as_array().unwrap();
            assert_eq!(d.len(), 2);
            assert!(
                d[1]["tokens_per_s"].as_f64().unwrap() > 0.0 && d[1]["step_bytes"].as_f64().unwrap() > 0.0
            );
        }
        assert!(preset("gpt-5").is_err());
        assert_eq!(preset("llama-3.2-1b").unwrap().num_layers, 16);
    }
}
