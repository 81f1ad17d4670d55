//! The engine thread: it owns the model and runs every sequence, and the HTTP handlers
//! talk to it through channels (a [`Job`] in, [`Event`]s out).
//!
//! Scheduling is continuous: between two decode steps the engine takes new jobs, admits
//! the first waiting one when a batch slot and its KV blocks are free, and runs one chunk
//! of the admitted job's prompt, so a long prompt delays running streams by one chunk per
//! step rather than by its whole prefill. Each decode step then advances every running
//! sequence by one token in one batched forward pass ([`Model::forward_batched`]); a
//! sequence leaves as soon as it ends, its client goes away or a stop string appears,
//! and its blocks return to the pool.

use crate::blocks::{BlockPool, Blocks};
use crate::metrics::Metrics;
use crate::stop::StopMatcher;
use kiln::{Result, Tensor};
use kiln_models::generate::on_pool;
use kiln_models::kv_cache::KvCache;
use kiln_models::sampling::Sampler;
use kiln_models::tokenizer::{TextStream, Tokenizer};
use kiln_models::{Model, SamplingParams};
use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// A generation request for the engine.
pub struct Job {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// How tokens are chosen.
    pub sampling: SamplingParams,
    /// Text that ends generation.
    pub stop: Vec<String>,
    /// Where the output goes; when the receiver is dropped the sequence ends.
    pub events: UnboundedSender<Event>,
}

/// What the engine tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// New output text (never empty).
    Text(String),
    /// Generation ended.
    Done(Finish),
    /// The model failed on this sequence.
    Failed(String),
}

/// Why and after how many tokens a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finish {
    /// The stop reason.
    pub reason: FinishReason,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens generated (an end-of-sequence token included).
    pub completion_tokens: usize,
}

/// OpenAI's `finish_reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl FinishReason {
    /// The name OpenAI's API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// How the engine schedules.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most sequences in prefill or decode at once.
    pub max_batch: usize,
    /// Prompt tokens run per prefill chunk (between two decode steps).
    pub prefill_chunk: usize,
    /// Positions per KV block.
    pub block_size: usize,
    /// KV blocks in the pool.
    pub kv_blocks: usize,
}

/// One sequence: its request, its cache (sized to its blocks) and sampler, its output so far.
struct Seq<'t> {
    job: Job,
    cache: KvCache,
    sampler: Sampler,
    blocks: Blocks,
    /// Prompt tokens already in the cache.
    prefilled: usize,
    /// The last token sampled: the next step's input.
    last: u32,
    generated: usize,
    text: TextStream<'t>,
    stop: StopMatcher,
}

/// Whether a sequence goes on after a token.
enum After {
    Continue,
    Ended,
}

/// The scheduler's state (see the module docs).
pub struct Engine<'t> {
    model: Model,
    tokenizer: &'t Tokenizer,
    eos: Vec<u32>,
    limits: Limits,
    pool: BlockPool,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Job>,
    prefilling: Option<Seq<'t>>,
    running: Vec<Seq<'t>>,
}

impl<'t> Engine<'t> {
    /// An engine for `model`, stopping sequences at `eos` tokens.
    pub fn new(
        model: Model,
        tokenizer: &'t Tokenizer,
        eos: Vec<u32>,
        limits: Limits,
        metrics: Arc<Metrics>,
    ) -> Self {
        let pool = BlockPool::new(limits.block_size, limits.kv_blocks);
        metrics.kv_blocks_total.store(pool.total(), Relaxed);
        Engine {
            model,
            tokenizer,
            eos,
            limits,
            pool,
            metrics,
            waiting: VecDeque::new(),
            prefilling: None,
            running: vec![],
        }
    }

    /// Runs jobs from `jobs` until every sender is dropped and the work is done.
    pub fn run(mut self, jobs: Receiver<Job>) {
        loop {
            if self.is_idle() {
                match jobs.recv() {
                    Ok(job) => self.waiting.push_back(job),
                    Err(_) => return,
                }
            }
            while let Ok(job) = jobs.try_recv() {
                self.waiting.push_back(job);
            }
            self.forget_abandoned();
            self.admit();
            if let Some(seq) = self.prefilling.take() {
                self.prefill_chunk(seq);
            }
            if !self.running.is_empty() {
                self.decode_step();
            }
            self.publish();
        }
    }

    fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.prefilling.is_none() && self.running.is_empty()
    }

    /// Waiting jobs whose clients have gone leave the queue.
    fn forget_abandoned(&mut self) {
        let before = self.waiting.len();
        self.waiting.retain(|j| !j.events.is_closed());
        self.metrics.queued.fetch_sub(before - self.waiting.len(), Relaxed);
    }

    /// Starts the first waiting job when nothing is in prefill, a batch slot is free and
    /// the pool has its blocks (first come, first served: later jobs wait behind it).
    fn admit(&mut self) {
        if self.prefilling.is_some() || self.running.len() >= self.limits.max_batch {
            return;
        }
        let Some(job) = self.waiting.front() else { return };
        let Some(blocks) = self.pool.try_take(job.prompt.len() + job.max_tokens) else { return };
        let job = self.waiting.pop_front().expect("a front job");
        self.metrics.queued.fetch_sub(1, Relaxed);
        self.metrics.prompt_tokens.fetch_add(job.prompt.len() as u64, Relaxed);
        let capacity = self.pool.positions(&blocks).min(job.prompt.len() + job.max_tokens);
        let made = self.model.new_cache(1, capacity).and_then(|cache| {
            Ok((cache, Sampler::new(job.sampling.clone(), capacity, self.model.device())?))
        });
        match made {
            Ok((cache, sampler)) => {
                let stop = StopMatcher::new(job.stop.clone());
                let text = self.tokenizer.stream();
                self.prefilling = Some(Seq {
                    job,
                    cache,
                    sampler,
                    blocks,
                    prefilled: 0,
                    last: 0,
                    generated: 0,
                    text,
                    stop,
                });
            }
            Err(e) => {
                let _ = job.events.send(Event::Failed(e.to_string()));
                self.pool.give_back(blocks);
            }
        }
    }

    /// Runs the next chunk of `seq`'s prompt; after the last one it samples the first token
    /// and the sequence joins the decode batch.
    fn prefill_chunk(&mut self, mut seq: Seq<'t>) {
        if seq.job.events.is_closed() {
            return self.release(seq);
        }
        let device = self.model.device();
        let (start, total) = (seq.prefilled, seq.job.prompt.len());
        let end = total.min(start + self.limits.prefill_chunk);
        let model = &self.model;
        let (cache, sampler) = (&mut seq.cache, &mut seq.sampler);
        let first = on_pool(device, || -> Result<Option<u32>> {
            let ids: Vec<i64> = seq.job.prompt[start..end].iter().map(|&i| i as i64).collect();
            let ids = Tensor::from_vec(ids, &[1, end - start], device)?;
            sampler.observe(&ids)?;
            let hidden = model.forward(&ids, cache)?;
            if end < total {
                return Ok(None);
            }
            let token = sampler.sample(&model.logits(&hidden.narrow(1, end - start - 1, 1)?)?)?;
            Ok(Some(token.to_vec::<i64>()?[0] as u32))
        });
        seq.prefilled = end;
        match first {
            Ok(None) => self.prefilling = Some(seq),
            Ok(Some(id)) => {
                self.metrics.record_step(1);
                if let After::Continue = self.take_token(&mut seq, id) {
                    self.running.push(seq);
                } else {
                    self.release(seq);
                }
            }
            Err(e) => self.fail(seq, &e),
        }
    }

    /// One token for every running sequence, in one batched forward pass.
    fn decode_step(&mut self) {
        let device = self.model.device();
        let model = &self.model;
        let running = &mut self.running;
        let tokens = on_pool(device, || -> Result<Vec<i64>> {
            let last: Vec<i64> = running.iter().map(|s| s.last as i64).collect();
            let ids = Tensor::from_vec(last, &[running.len(), 1], device)?;
            let mut caches: Vec<&mut KvCache> = running.iter_mut().map(|s| &mut s.cache).collect();
            let logits = model.logits(&model.forward_batched(&ids, &mut caches)?)?;
            let picks = running
                .iter_mut()
                .enumerate()
                .map(|(i, s)| s.sampler.sample(&logits.narrow(0, i, 1)?))
                .collect::<Result<Vec<_>>>()?;
            // One read for the whole batch.
            Tensor::cat(&picks, 0)?.to_vec::<i64>()
        });
        let seqs = std::mem::take(&mut self.running);
        let tokens = match tokens {
            Ok(t) => t,
            Err(e) => {
                for seq in seqs {
                    self.fail(seq, &e);
                }
                return;
            }
        };
        self.metrics.record_step(seqs.len());
        for (mut seq, id) in seqs.into_iter().zip(tokens) {
            match self.take_token(&mut seq, id as u32) {
                After::Continue => self.running.push(seq),
                After::Ended => self.release(seq),
            }
        }
    }

    /// Sends what token `id` adds to `seq`'s text and says whether the sequence goes on:
    /// it ends at an end-of-sequence token, a stop string, `max_tokens`, or a closed client.
    fn take_token(&mut self, seq: &mut Seq<'t>, id: u32) -> After {
        seq.last = id;
        seq.generated += 1;
        let (mut text, mut reason) = if self.eos.contains(&id) {
            (seq.stop.finish(), Some(FinishReason::Stop))
        } else {
            let piece = match seq.text.push(id) {
                Ok(p) => p,
                Err(e) => {
                    let _ = seq.job.events.send(Event::Failed(e.to_string()));
                    return After::Ended;
                }
            };
            let (text, hit) = seq.stop.push(&piece);
            (text, hit.then_some(FinishReason::Stop))
        };
        if reason.is_none() && seq.generated == seq.job.max_tokens {
            text.push_str(&seq.stop.finish());
            reason = Some(FinishReason::Length);
        }
        let events = &seq.job.events;
        if (!text.is_empty() && events.send(Event::Text(text)).is_err()) || events.is_closed() {
            return After::Ended;
        }
        match reason {
            Some(reason) => {
                let finish =
                    Finish { reason, prompt_tokens: seq.job.prompt.len(), completion_tokens: seq.generated };
                let _ = events.send(Event::Done(finish));
                After::Ended
            }
            None => After::Continue,
        }
    }

    /// Tells `seq`'s client the model failed, and frees the sequence.
    fn fail(&mut self, seq: Seq<'t>, e: &kiln::Error) {
        tracing::error!("a sequence failed: {e}");
        let _ = seq.job.events.send(Event::Failed(e.to_string()));
        self.release(seq);
    }

    /// Gives `seq`'s blocks back to the pool (its cache is dropped with it).
    fn release(&mut self, seq: Seq<'t>) {
        self.pool.give_back(seq.blocks);
    }

    /// Updates the gauges the engine owns.
    fn publish(&self) {
        let m = &self.metrics;
        m.running.store(self.running.len() + usize::from(self.prefilling.is_some()), Relaxed);
        m.kv_blocks_used.store(self.pool.used(), Relaxed);
    }
}
