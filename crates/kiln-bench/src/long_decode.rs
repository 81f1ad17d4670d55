//! `kiln bench --suite long --preset NAME`: one long greedy generation (10,000 tokens) with a
//! preset's random-weight model, through `kiln_models::generate` as `kiln generate` runs it
//! (on CUDA each step a replay of one captured CUDA graph). Memory is read at the three
//! levels DESIGN.md keeps apart — live tensors, the allocator's pool, what the driver
//! reports used — after the first decode token and at every tenth of the run: past the
//! first step none of them may grow. Then a cache filled to its capacity takes one more
//! step, which must end with an error rather than a write past the cache.

use crate::decode::parse_preset;
use kiln::{DType, Device, Error, Result, Tensor};
use kiln_models::graph_decode::{self, GraphStep};
use kiln_models::sampling::{Sampler, SamplingParams};
use kiln_models::{GenerateOptions, Model};
use serde_json::{json, Value};

/// Tokens of the long generation.
pub const LONG_TOKENS: usize = 10_000;

/// Live, pool and driver-used bytes now (`None` on the CPU).
fn levels(device: Device) -> Result<Option<[u64; 3]>> {
    let Device::Cuda(i) = device else { return Ok(None) };
    let dev = kiln::cuda::device(i)?;
    let m = dev.memory_stats();
    let (free, total) = dev.driver_mem_info()?;
    Ok(Some([m.live_bytes, m.reserved_bytes, (total - free) as u64]))
}

/// The suite with preset `preset_name`'s model on `device`, `tokens` tokens.
pub fn run(preset_name: &str, device: Device, tokens: usize) -> Result<Value> {
    let (config, quantize) = parse_preset(preset_name)?;
    println!("long generation {preset_name} on {device}: {tokens} greedy tokens, random bf16 weights");
    let model = Model::random_quantized(config, device, DType::BF16, 1, quantize)?;
    let mut v = long_generation(&model, tokens)?;
    v["suite"] = json!("long");
    v["provenance"] = crate::report::provenance();
    v["preset"] = json!(preset_name);
    Ok(v)
}

/// `tokens` greedy tokens from a 16-token prompt with memory samples, then the step past a
/// full cache.
fn long_generation(model: &Model, tokens: usize) -> Result<Value> {
    let device = model.device();
    let vocab = model.config.vocab_size as u32;
    let prompt: Vec<u32> = (0..16u32).map(|i| (i * 7919 + 11) % vocab).collect();
    let opts = GenerateOptions {
        max_tokens: tokens,
        sampling: SamplingParams::greedy(),
        eos_token_ids: vec![],
        eager: false,
    };
    let every = (tokens / 10).max(1);
    let bar = crate::progress::bar(tokens, "tokens");
    let mut samples: Vec<(usize, [u64; 3])> = vec![];
    let mut n = 0;
    let stats = kiln_models::generate(model, &prompt, &opts, |_| {
        n += 1;
        bar.inc(1);
        // Token 1 comes from the prompt pass; token 2 ends the first decode step.
        if n == 2 || n % every == 0 || n == tokens {
            if let Some(l) = levels(device)? {
                samples.push((n, l));
            }
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    if stats.tokens.len() != tokens {
        return Err(Error::invalid("bench long", format!("{} of {tokens} tokens", stats.tokens.len())));
    }
    // The largest rise of each level over its value after the first decode step.
    let growth: Option<[i64; 3]> = samples.iter().find(|(t, _)| *t >= 2).map(|(_, base)| {
        let mut g = [0i64; 3];
        for (_, l) in samples.iter().filter(|(t, _)| *t >= 2) {
            for k in 0..3 {
                g[k] = g[k].max(l[k] as i64 - base[k] as i64);
            }
        }
        g
    });
    println!(
        "  {} tokens, decode {:.1} tokens/s ({}), {} memory samples",
        stats.tokens.len(),
        stats.decode_tokens_per_sec(),
        if stats.graph { "CUDA graph" } else { "eager" },
        samples.len()
    );
    if let Some(g) = growth {
        println!("  growth after the first step: live {} B, pool {} B, driver {} B", g[0], g[1], g[2]);
    }
    let past = past_capacity(model)?;
    println!("  a step past a full cache: {past}");
    Ok(json!({
        "tokens": stats.tokens.len(),
        "graph": stats.graph,
        "decode_tokens_per_s": stats.decode_tokens_per_sec(),
        "samples": samples.iter().map(|(t, l)| json!({
            "token": t, "live_bytes": l[0], "reserved_bytes": l[1], "driver_used_bytes": l[2]
        })).collect::<Vec<_>>(),
        "growth_after_first_step_bytes": growth.map(|g| json!({
            "live": g[0], "reserved": g[1], "driver_used": g[2]
        })),
        "past_capacity_error": past,
    }))
}

/// Fills a 4-position cache (one prompt token, then steps as `kiln generate` takes them:
/// replays of a captured step on CUDA) and takes one step more; its error message, or an
/// error if that step went through.
fn past_capacity(model: &Model) -> Result<String> {
    let device = model.device();
    let capacity = 4;
    let mut cache = model.new_cache(1, capacity)?;
    let mut sampler = Sampler::new(SamplingParams::greedy(), capacity, device)?;
    let token = Tensor::from_vec(vec![1i64], &[1, 1], device)?;
    model.forward(&token, &mut cache)?;
    let result = if device.is_cuda() {
        cache.track_on_device()?;
        graph_decode::step(model, &mut cache, &mut sampler, &token)?;
        let g = GraphStep::capture(model, &mut cache, &mut sampler, &token)?;
        (cache.len()..capacity).try_for_each(|_| g.replay(&mut cache))?;
        g.replay(&mut cache)
    } else {
        (cache.len()..capacity)
            .try_for_each(|_| graph_decode::step(model, &mut cache, &mut sampler, &token))?;
        graph_decode::step(model, &mut cache, &mut sampler, &token)
    };
    match result {
        Err(e) => Ok(e.to_string()),
        Ok(()) => Err(Error::invalid("bench long", "a step past the cache's capacity went through")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The suite's path on the CPU with a tiny llama: every token made, and the step past a
    /// full cache refused with the cache's error.
    #[test]
    fn tiny_long_generation_on_cpu() {
        let (mut c, q) = parse_preset("llama-3.1-8b").unwrap();
        (c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) =
            (32, 48, 2, 4, 2, 8);
        c.vocab_size = 64;
        let model = Model::random_quantized(c, Device::Cpu, DType::BF16, 1, q).unwrap();
        let v = long_generation(&model, 40).unwrap();
        assert_eq!(v["tokens"], 40);
        assert!(v["past_capacity_error"].as_str().unwrap().contains("capacity"), "{v}");
    }
}
