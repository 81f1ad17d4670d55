//! Prefill then decode with a pre-allocated KV cache; on CUDA the decode steps can replay
//! one captured CUDA graph (`graph_decode`, behind `kiln::settings::GRAPH_DECODE`).

use crate::decoder::Model;
use crate::graph_decode::{self, GraphStep};
use crate::kv_cache::KvCache;
use crate::sampling::{Sampler, SamplingParams};
use kiln::cuda::Readback;
use kiln::{Error, Result, Tensor};
use std::time::Instant;

/// What [`generate`] produces and how it samples.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most tokens to generate after the prompt.
    pub max_tokens: usize,
    /// How each token is chosen.
    pub sampling: SamplingParams,
    /// Generation stops after any of these (it is still passed to `on_token`).
    pub eos_token_ids: Vec<u32>,
    /// Decode step by step as kernels are queued, never as a replayed CUDA graph (which
    /// greedy decoding on CUDA uses unless `kiln::settings::GRAPH_DECODE` is off). The CPU
    /// always decodes eagerly.
    pub eager: bool,
}

impl GenerateOptions {
    /// Greedy decoding of up to `max_tokens` tokens, stopping after any of `eos_token_ids`.
    pub fn greedy(max_tokens: usize, eos_token_ids: Vec<u32>) -> Self {
        GenerateOptions { max_tokens, sampling: SamplingParams::greedy(), eos_token_ids, eager: false }
    }
}

/// What a [`generate`] call produced and how long it took.
#[derive(Clone, Debug, Default)]
pub struct GenerateStats {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// The generated tokens (a stop token included).
    pub tokens: Vec<u32>,
    /// Prompt forward pass plus the first sampled token.
    pub prefill_secs: f64,
    /// Forward passes after the prefill, and their time.
    pub decode_steps: usize,
    /// Seconds spent in those decode steps.
    pub decode_secs: f64,
    /// Whether the decode steps after the first replayed a CUDA graph.
    pub graph: bool,
    /// Why the step could not be captured, where graph decode was asked for and declined.
    pub graph_declined: Option<String>,
}

impl GenerateStats {
    /// Prompt tokens per second of the prefill.
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_secs.max(1e-12)
    }

    /// Decode steps per second.
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
///   grouped expert path, see `moe`); dense models do not sync in the prefill;
/// - each step: one 8-byte read of the sampled token id, after greedy argmax or the
///   sampling draw on the device.
///
/// Nothing else goes to the host: the sampled token stays on the device as the next
/// step's input, the KV cache is written in place, MoE routing in decode uses the
/// device-side indices, and the prompt upload (host to device) does not wait.
///
/// Greedy decoding on CUDA (unless `opts.eager` or `KILN_GRAPH_DECODE=0`) runs the first decode step eagerly, then
/// captures the step once and replays it ([`GraphStep`]); token t is read while step t + 1
/// already runs, so a stop on EOS or on `max_tokens` discards one step's work. A step that
/// cannot be captured (see [`GraphStep::capture`]) leaves the loop eager, saying why in a
/// warning.
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
    // One position to spare: the graph loop queues a step past the last token it keeps.
    let capacity = prompt.len() + opts.max_tokens + 1;
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
    // A split model's ranks each drive their own ops and meet in collectives: they must
    // not block rayon's workers (`on_pool`), nor sit in a graph (the collectives run on
    // the host).
    let split = model.shard().is_split();
    let on_pool =
        |f: &mut (dyn FnMut() -> Result<Tensor> + Send)| if split { f() } else { on_pool(device, f) };
    let token = on_pool(&mut || {
        let hidden = model.forward(&ids, &mut cache)?;
        sampler.sample(&model.logits(&hidden.narrow(1, prompt.len() - 1, 1)?)?)?.reshape(&[1, 1])
    })?;
    let mut id = read_token(&token)?;
    stats.prefill_secs = t0.elapsed().as_secs_f64();

    let t1 = Instant::now();
    let mut use_graph = device.is_cuda()
        && !opts.eager
        && !split
        && sampler.is_greedy()
        && kiln::settings::GRAPH_DECODE.get()?;
    if use_graph {
        cache.track_on_device()?;
    }
    let mut keep = |id: u32, stats: &mut GenerateStats| -> Result<bool> {
        stats.tokens.push(id);
        on_token(id)?;
        Ok(opts.eos_token_ids.contains(&id) || stats.tokens.len() == opts.max_tokens)
    };
    loop {
        if keep(id, &mut stats)? {
            break;
        }
        on_pool(&mut || graph_decode::step(model, &mut cache, &mut sampler, &token).map(|()| token.clone()))?;
        id = read_token(&token)?;
        stats.decode_steps += 1;
        if use_graph {
            // The eager step above loaded every kernel: capture from here on.
            match GraphStep::capture(model, &mut cache, &mut sampler, &token) {
                Ok(g) => {
                    stats.graph = true;
                    if keep(id, &mut stats)? {
                        break;
                    }
                    replay_loop(&g, &mut cache, &mut stats, &mut keep)?;
                    break;
                }
                Err(e) => {
                    tracing::warn!("decode runs eagerly: the step could not be captured ({e})");
                    stats.graph_declined = Some(e.to_string());
                    use_graph = false;
                }
            }
        }
    }
    stats.decode_secs = t1.elapsed().as_secs_f64();
    Ok(stats)
}

/// Runs `f` on a thread of rayon's pool when the model is on the CPU. The CPU ops fork onto
/// that pool: from one of its own threads a fork is a push that the other thread steals,
/// while from outside it every op hands its work over and sleeps on a lock until woken
/// (two futex round trips per op, hundreds of ops per token, a third thread on the cores).
pub fn on_pool<R: Send>(device: kiln::Device, f: impl FnOnce() -> R + Send) -> R {
    if device.is_cuda() {
        f()
    } else {
        rayon::scope(|_| f())
    }
}

/// Replays `g` until `keep` says stop, reading each step's token while the next one runs.
fn replay_loop(
    g: &GraphStep,
    cache: &mut KvCache,
    stats: &mut GenerateStats,
    keep: &mut impl FnMut(u32, &mut GenerateStats) -> Result<bool>,
) -> Result<()> {
    let dev = kiln::cuda::device_of(g.token().device())?;
    let mut slots = [Readback::new(&dev, 8)?, Readback::new(&dev, 8)?];
    let queue = |slot: &mut Readback, cache: &mut KvCache| -> Result<()> {
        g.replay(cache)?;
        slot.queue(g.token())
    };
    queue(&mut slots[0], cache)?;
    loop {
        // The cache has a position to spare for the step queued past the last kept token.
        queue(&mut slots[1], cache)?;
        let id = i64::from_le_bytes(slots[0].wait()?[..8].try_into().expect("8-byte slot")) as u32;
        stats.decode_steps += 1;
        if keep(id, stats)? {
            break;
        }
        slots.swap(0, 1);
    }
    Ok(())
}
