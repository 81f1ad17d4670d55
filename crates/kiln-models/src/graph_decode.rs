//! Decode steps replayed as one CUDA graph: embedding, every layer, final norm, LM head and
//! the greedy pick, captured once and replayed at every later position. The cache keeps its
//! length on the device ([`KvCache::track_on_device`]) and the step reads its token from, and
//! writes the next one into, one device buffer, so a replay takes nothing from the host.

use crate::decoder::Model;
use crate::kv_cache::KvCache;
use crate::sampling::Sampler;
use kiln::cuda::Graph;
use kiln::{Error, Result, Tensor};

/// One captured decode step and the token buffer it reads and overwrites.
pub struct GraphStep {
    graph: Graph,
    token: Tensor,
}

/// One step: the token in `token` (int64 `[1, 1]` on the model's device) through the model
/// at the cache's position, and the sampler's pick written back into `token`.
pub fn step(model: &Model, cache: &mut KvCache, sampler: &mut Sampler, token: &Tensor) -> Result<()> {
    let hidden = model.forward(token, cache)?;
    token.copy_(&sampler.sample(&model.logits(&hidden)?)?.reshape(&[1, 1])?)
}

impl GraphStep {
    /// Captures [`step`] at the cache's current length (capturing runs nothing: the cache,
    /// the token and the host's count of positions are as they were). Run one step eagerly
    /// first with the cache tracking its length on the device, so that every kernel is
    /// loaded and every lazily made handle exists before the capture.
    ///
    /// Fails, changing nothing, where the step needs the host: a sampler that draws (its
    /// seed and history live on the host: only greedy steps are captured), or a layer that
    /// reads device values back (FP8 experts' group sizes).
    pub fn capture(
        model: &Model,
        cache: &mut KvCache,
        sampler: &mut Sampler,
        token: &Tensor,
    ) -> Result<Self> {
        if !sampler.is_greedy() {
            return Err(Error::invalid(
                "graph decode",
                "only greedy steps are captured (the draw's seed is per step)",
            ));
        }
        let dev = kiln::cuda::device_of(model.device())?;
        cache.track_on_device()?;
        let len = cache.len();
        dev.begin_capture()?;
        let body = step(model, cache, sampler, token);
        let graph = dev.end_capture();
        cache.set_len(len)?;
        body?;
        let graph = graph?;
        graph.upload()?;
        Ok(GraphStep { graph, token: token.clone() })
    }

    /// Queues one step on the device's current stream and returns at once; the picked
    /// token is in [`token`](GraphStep::token) once the stream gets there. A step past the
    /// cache's capacity is an error before anything runs.
    pub fn replay(&self, cache: &mut KvCache) -> Result<()> {
        cache.count_replayed_step()?;
        self.graph.replay()
    }

    /// Nodes of the captured step: the kernels (and copies) one token launches.
    pub fn nodes(&self) -> Result<usize> {
        self.graph.node_count()
    }

    /// The token buffer, int64 `[1, 1]`.
    pub fn token(&self) -> &Tensor {
        &self.token
    }
}
