//! Prefill then decode with a pre-allocated KV cache.

use crate::llama::Model;
use crate::sampling::{Sampler, SamplingParams};
use kiln::{Error, Result, Tensor};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops after any of these (it is still passed to `on_token`).
    pub eos_token_ids: Vec<u32>,
}

#[derive(Clone, Debug, Default)]
pub struct GenerateStats {
    pub prompt_tokens: usize,
    pub tokens: Vec<u32>,
    /// Prompt forward pass plus the first sampled token.
    pub prefill_secs: f64,
    /// Forward passes after the prefill, and their time.
    pub decode_steps: usize,
    pub decode_secs: f64,
}

impl GenerateStats {
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_secs.max(1e-12)
    }

    pub fn decode_tokens_per_sec(&self) -> f64 {
        self.decode_steps as f64 / self.decode_secs.max(1e-12)
    }
}

/// Reads the sampled token: the step's single host read (8 bytes).
fn read_token(t: &Tensor) -> Result<u32> {
    Ok(t.to_vec::<i64>()?[0] as u32)
}

/// Generates up to `opts.max_tokens` tokens after `prompt`, calling `on_token` with each
/// as soon as it is known.
///
/// Host synchronisation, all of it:
/// - prefill: Qwen3-MoE layers read their top-k expert indices once per layer (the
///   grouped expert path, see `qwen3_moe`); dense models do not sync in the prefill;
/// - each step (the prefill's last position, then each decode step): one 8-byte read of
///   the sampled token id, after greedy argmax or the sampling draw on the device.
///
/// Nothing else goes to the host: the sampled token stays on the device as the next
/// step's input, the KV cache is written in place, MoE routing in decode uses the
/// device-side indices, and the prompt upload (host to device) does not wait.
pub fn generate(
    model: &Model,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<GenerateStats> {
    if prompt.is_empty() {
        return Err(Error::invalid("generate", "the prompt has no tokens"));
    }
    let device = model.device();
    let capacity = prompt.len() + opts.max_tokens;
    let mut cache = model.new_cache(1, capacity)?;
    let mut sampler = Sampler::new(opts.sampling.clone(), capacity, device)?;
    let mut stats = GenerateStats { prompt_tokens: prompt.len(), ..Default::default() };
    if opts.max_tokens == 0 {
        return Ok(stats);
    }

    let t0 = Instant::now();
    let ids: Vec<i64> = prompt.iter().map(|&i| i as i64).collect();
    let ids = Tensor::from_vec(ids, &[1, prompt.len()], device)?;
    sampler.observe(&ids)?;
    let hidden = model.forward(&ids, &mut cache)?;
    let mut token = sampler.sample(&model.logits(&hidden.narrow(1, prompt.len() - 1, 1)?)?)?;
    let mut id = read_token(&token)?;
    stats.prefill_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    loop {
        stats.tokens.push(id);
        on_token(id)?;
        if opts.eos_token_ids.contains(&id) || stats.tokens.len() == opts.max_tokens {
            break;
        }
        let hidden = model.forward(&token.reshape(&[1, 1])?, &mut cache)?;
        token = sampler.sample(&model.logits(&hidden)?)?;
        id = read_token(&token)?;
        stats.decode_steps += 1;
    }
    stats.decode_secs = t1.elapsed().as_secs_f64();
    Ok(stats)
}
