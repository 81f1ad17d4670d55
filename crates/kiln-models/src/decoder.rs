//! The decoder shared by Llama, Qwen3, Qwen3-MoE, LFM2-MoE and Qwen3.5-MoE: embedding,
//! N × (RMS norm → mixer → residual, RMS norm → MLP or MoE → residual), final norm, LM
//! head. The mixer is attention, LFM2's gated short convolution (`short_conv`) in its conv
//! layers, or Qwen3.5's Gated DeltaNet (`gated_delta`) in its linear-attention layers.
//! Qwen3, LFM2 and Qwen3.5 add the q/k head norms (in `layers::Attention`; Qwen3.5 also its
//! output gate and partial rotary embedding); the MoE families swap the MLP for a routed
//! expert block (`moe`). The families' weight names differ (`config::WeightNames`).
//!
//! Linear layers (attention projections, MLPs, experts) hold dense or FP8 weights
//! (`layers::LinearWeight`): FP8 when the checkpoint stores them so (Hugging Face FP8
//! checkpoints, `weight_scale` / `weight_scale_inv`) or when loaded with
//! [`Quantize::Fp8`]. The embedding, norms, LM head and MoE router stay dense.

use crate::config::{Config, MixerKind};
use crate::gated_delta::GatedDelta;
use crate::kv_cache::KvCache;
use crate::layers::{Attention, Mlp, RmsNorm, Rope, WeightBytes};
use crate::loader::{CheckpointSource, Quantize, RandomSource, WeightSource};
use crate::moe::MoeBlock;
use crate::parallel::{Collective, Shard};
use crate::short_conv::ShortConv;
use crate::state::LayerStates;
use kiln::{DType, Device, Error, Result, Tensor};
use std::path::Path;
use std::sync::Arc;

mod batched;

/// Rotary tables cover at most this many positions (longer contexts are refused when
/// the cache is made, not silently wrapped).
pub const MAX_POSITIONS: usize = 32768;

// One per layer: the size of the handle (an FP8 MLP's is the largest) does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Ffn {
    Dense(Mlp),
    Moe(MoeBlock),
}

/// How a layer mixes information across positions.
// One per layer, as `Ffn`: the handles' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Mixer {
    Attention(Attention),
    ShortConv(ShortConv),
    GatedDelta(GatedDelta),
}

pub(crate) struct Layer {
    input_norm: RmsNorm,
    mixer: Mixer,
    /// The layer's index among the layers of its mixer kind: its place in the cache.
    slot: usize,
    post_norm: RmsNorm,
    ffn: Ffn,
}

/// A loaded decoder-only language model: embedding, layers, final norm and LM head, with
/// its rotary tables. Run it with [`Model::forward`] over a [`KvCache`].
///
/// A model may be one rank's part of a tensor-parallel model ([`Model::build_parallel`],
/// `crate::parallel`): every rank then runs the same calls on the same token ids, and
/// gets the same hidden states and logits.
pub struct Model {
    /// The config it was built from (the whole model's, also on a rank).
    pub config: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    /// `[V, H]`, or this rank's vocabulary rows when `lm_head_split`.
    lm_head: Tensor,
    lm_head_split: bool,
    rope: Rope,
    /// The other ranks, when the model is split.
    comm: Option<Arc<dyn Collective>>,
}

impl Model {
    /// Loads a Hugging Face model folder onto `device`, converting dense weights to `dtype`
    /// (the activations' dtype too). FP8 weights of an FP8 checkpoint stay FP8.
    pub fn load(dir: &Path, device: Device, dtype: DType) -> Result<Model> {
        Self::load_quantized(dir, device, dtype, Quantize::None)
    }

    /// [`load`](Model::load), with dense linear weights quantised on load as `quantize` says
    /// (`kiln generate --quantize fp8`).
    pub fn load_quantized(dir: &Path, device: Device, dtype: DType, quantize: Quantize) -> Result<Model> {
        Self::load_with(dir, device, dtype, quantize, None)
    }

    /// A model of `config`'s shape with seeded random weights made on `device`.
    pub fn random(config: Config, device: Device, dtype: DType, seed: u64) -> Result<Model> {
        Self::random_quantized(config, device, dtype, seed, Quantize::None)
    }

    /// [`random`](Model::random) with the linear weights quantised as `quantize` says.
    pub fn random_quantized(
        config: Config,
        device: Device,
        dtype: DType,
        seed: u64,
        quantize: Quantize,
    ) -> Result<Model> {
        config.validate().map_err(|m| Error::invalid("model", m))?;
        let mut src = RandomSource::new(device, dtype, seed);
        src.quantize = quantize;
        Self::build(config, &mut src)
    }

    /// Rank `comm.shard()`'s part of the model in `dir` (each split weight read as that
    /// part alone), for [`Model::load_quantized`]'s arguments.
    pub fn load_parallel(
        dir: &Path,
        device: Device,
        dtype: DType,
        quantize: Quantize,
        comm: Arc<dyn Collective>,
    ) -> Result<Model> {
        Self::load_with(dir, device, dtype, quantize, Some(comm))
    }

    /// The model in `dir`, whole or (with `comm`) that rank's part.
    fn load_with(
        dir: &Path,
        device: Device,
        dtype: DType,
        quantize: Quantize,
        comm: Option<Arc<dyn Collective>>,
    ) -> Result<Model> {
        let config = Config::load(dir)?;
        let shard = comm.as_ref().map_or(Shard::WHOLE, |c| c.shard());
        let mut src = CheckpointSource::open(dir, device, dtype)?.with_quantize(quantize).with_shard(shard);
        src.confirm(|ck| crate::config_check::check_model(&config, ck))?;
        let model = match comm {
            Some(comm) => Self::build_parallel(config, &mut src, comm),
            None => Self::build(config, &mut src),
        };
        // Report bad tensors first: a build error is often their consequence.
        src.finish()?;
        model
    }

    /// Builds the model of `config` with every weight taken from `src` (a checkpoint, GGUF file
    /// or random source), on `src`'s device and dtype.
    pub fn build(config: Config, src: &mut dyn WeightSource) -> Result<Model> {
        Self::build_with(config, src, None)
    }

    /// [`build`](Model::build) of rank `comm.shard()`'s part, which `src` must be reading
    /// (`WeightSource::shard`): attention heads, MLP and expert columns and LM-head rows
    /// split over the ranks, the rest whole (`crate::parallel`).
    pub fn build_parallel(
        config: Config,
        src: &mut dyn WeightSource,
        comm: Arc<dyn Collective>,
    ) -> Result<Model> {
        if src.shard() != comm.shard() {
            return Err(Error::invalid(
                "tensor parallel",
                format!("the weights are read for {:?} but the rank is {:?}", src.shard(), comm.shard()),
            ));
        }
        Self::build_with(config, src, Some(comm))
    }

    fn build_with(
        config: Config,
        src: &mut dyn WeightSource,
        comm: Option<Arc<dyn Collective>>,
    ) -> Result<Model> {
        let c = &config;
        let (h, names) = (c.hidden_size, c.arch.names());
        let prefix = c.weight_prefix;
        let embed = src.get(&format!("{prefix}.embed_tokens.weight"), &[c.vocab_size, h])?;
        let layers = (0..c.num_layers)
            .map(|i| {
                let p = format!("{prefix}.layers.{i}");
                let ffn = format!("{p}.{}", names.ffn);
                let kind = c.mixer(i);
                Ok(Layer {
                    input_norm: RmsNorm::load(src, &format!("{p}.{}.weight", names.input_norm), h, c)?,
                    mixer: match kind {
                        MixerKind::ShortConv => {
                            Mixer::ShortConv(ShortConv::load(src, &format!("{p}.conv"), c)?)
                        }
                        MixerKind::GatedDelta => {
                            Mixer::GatedDelta(GatedDelta::load(src, &format!("{p}.linear_attn"), c)?)
                        }
                        MixerKind::Attention => {
                            Mixer::Attention(Attention::load(src, &format!("{p}.self_attn"), c)?)
                        }
                    },
                    slot: (0..i).filter(|&j| c.mixer(j) == kind).count(),
                    post_norm: RmsNorm::load(src, &format!("{p}.{}.weight", names.post_norm), h, c)?,
                    ffn: if c.is_moe_layer(i) {
                        Ffn::Moe(MoeBlock::load(src, &ffn, c)?)
                    } else {
                        Ffn::Dense(Mlp::load(src, &ffn, names.mlp, h, c.intermediate_size)?)
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::load(src, &format!("{prefix}.{}.weight", names.final_norm), h, c)?;
        // A vocabulary the ranks cannot share evenly keeps its head whole on each.
        let shard = src.shard();
        let lm_head_split = shard.is_split() && c.vocab_size.is_multiple_of(shard.world);
        let lm_head = match (c.tie_word_embeddings, lm_head_split) {
            (true, false) => embed.clone(),
            (true, true) => {
                let (start, rows) = shard.part("vocabulary rows", c.vocab_size)?;
                embed.narrow(0, start, rows)?
            }
            (false, false) => src.get("lm_head.weight", &[c.vocab_size, h])?,
            (false, true) => src.get_part("lm_head.weight", &[c.vocab_size, h], 0)?,
        };
        let positions = c.max_position_embeddings.min(MAX_POSITIONS);
        let rope = Rope::new(c, positions, src.device(), src.dtype())?;
        Ok(Model { config, embed, layers, norm, lm_head, lm_head_split, rope, comm })
    }

    /// Which part of the model this is.
    pub fn shard(&self) -> Shard {
        self.comm.as_ref().map_or(Shard::WHOLE, |c| c.shard())
    }

    /// `x` summed over the ranks when the model is split: a split layer's output.
    fn all_reduce(&self, x: Tensor) -> Result<Tensor> {
        match &self.comm {
            Some(c) => c.all_reduce_sum(&x),
            None => Ok(x),
        }
    }

    /// Where the weights live.
    pub fn device(&self) -> Device {
        self.embed.device()
    }

    /// The dtype of the dense weights and the activations.
    pub fn dtype(&self) -> DType {
        self.embed.dtype()
    }

    /// An empty cache for `batch` sequences of up to `capacity` positions: keys and values
    /// of the attention layers, convolution states of the short-conv and DeltaNet layers,
    /// recurrent states of the DeltaNet layers.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        if capacity > self.rope.positions() {
            return Err(Error::invalid(
                "kv_cache",
                format!("{capacity} positions exceed the model's {} rotary positions", self.rope.positions()),
            ));
        }
        let c = &self.config;
        let (dtype, device) = (self.dtype(), self.device());
        let (mut attn, mut conv, mut recurrent) = (0, vec![], vec![]);
        for l in &self.layers {
            match &l.mixer {
                Mixer::Attention(_) => attn += 1,
                Mixer::ShortConv(s) => conv.push(s.conv().state_shape(batch)),
                Mixer::GatedDelta(g) => {
                    conv.push(g.conv().state_shape(batch));
                    recurrent.push(g.state_shape(batch));
                }
            }
        }
        let states = LayerStates::new(&conv, dtype, &recurrent, device)?;
        let kv_heads = c.num_kv_heads / self.shard().world;
        Ok(KvCache::new(attn, batch, kv_heads, capacity, c.head_dim, dtype, device)?.with_states(states))
    }

    /// Hidden states after the final norm, `[B, T, H]`, of token ids `[B, T]` placed
    /// after the cache's contents (which they are appended to).
    pub fn forward(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (b, t) = match ids.shape() {
            &[b, t] => (b, t),
            s => return Err(Error::bad_shape("model", format!("token ids must be [B, T], got {s:?}"))),
        };
        cache.begin_step(t)?;
        let x =
            self.embed.index_select(0, &ids.reshape(&[b * t])?)?.reshape(&[b, t, self.config.hidden_size])?;
        let h = self.run_layers(x, |l, h| l.mix(h, &self.rope, cache))?;
        cache.advance(t)?;
        Ok(h)
    }

    /// The layers and the final norm over embeddings `x`, with `mix` running a layer's
    /// mixer (over one cache, or one cache per sequence in `batched`).
    fn run_layers(
        &self,
        mut x: Tensor,
        mut mix: impl FnMut(&Layer, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        // Each residual add is fused with the norm after it: the layer's post-norm, then
        // the next layer's input norm (the final norm after the last layer).
        let mut h = self.layers.first().map_or(&self.norm, |l| &l.input_norm).forward(&x)?;
        for (i, l) in self.layers.iter().enumerate() {
            let mut a = mix(l, &h)?;
            // Split layers give partial sums; the replicated mixers give the whole.
            if matches!(l.mixer, Mixer::Attention(_)) {
                a = self.all_reduce(a)?;
            }
            let (normed, sum) = l.post_norm.add_forward(&x, &a)?;
            let f = self.all_reduce(match &l.ffn {
                Ffn::Dense(m) => m.forward(&normed)?,
                Ffn::Moe(m) => m.forward(&normed)?,
            })?;
            let next = self.layers.get(i + 1).map_or(&self.norm, |n| &n.input_norm);
            (h, x) = next.add_forward(&sum, &f)?;
        }
        Ok(h)
    }

    /// Vocabulary logits `[…, V]` of hidden states `[…, H]`, in the model's dtype.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let logits = hidden.linear(&self.lm_head, None)?;
        match &self.comm {
            Some(c) if self.lm_head_split => c.all_gather(&logits, -1),
            _ => Ok(logits),
        }
    }

    /// Bytes of all weights (the tied LM head counted once).
    pub fn weight_bytes(&self) -> usize {
        self.weight_stats().total
    }

    /// Bytes of the weights by kind: all, the linear layers', and their FP8 part.
    pub fn weight_stats(&self) -> WeightBytes {
        let mut acc = WeightBytes::default();
        acc.add_dense(&self.embed);
        acc.add_dense(&self.norm.weight);
        if !self.lm_head.same_storage(&self.embed) {
            acc.add_dense(&self.lm_head);
        }
        for l in &self.layers {
            l.weight_bytes(&mut acc);
        }
        acc
    }
}

impl Layer {
    /// The mixer over `h` `[B, T, H]`, reading and extending `cache`.
    fn mix(&self, h: &Tensor, rope: &Rope, cache: &mut KvCache) -> Result<Tensor> {
        match &self.mixer {
            Mixer::Attention(a) => a.forward(h, rope, cache, self.slot),
            Mixer::ShortConv(s) => s.forward(h, cache, self.slot),
            Mixer::GatedDelta(g) => g.forward(h, cache, self.slot),
        }
    }

    fn weight_bytes(&self, acc: &mut WeightBytes) {
        acc.add_dense(&self.input_norm.weight);
        acc.add_dense(&self.post_norm.weight);
        match &self.mixer {
            Mixer::Attention(a) => a.weight_bytes(acc),
            Mixer::ShortConv(s) => s.weight_bytes(acc),
            Mixer::GatedDelta(g) => g.weight_bytes(acc),
        }
        match &self.ffn {
            Ffn::Dense(m) => m.weight_bytes(acc),
            Ffn::Moe(m) => m.weight_bytes(acc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixtures_dir;

    /// A prompt in two steps, then one token at a time, gives the logits of one whole
    /// prefill, for every fixture family: the KV cache and the convolution and DeltaNet
    /// states carry over steps, and a cleared cache starts afresh.
    #[test]
    fn stepwise_forward_equals_one_prefill() {
        for arch in crate::golden::ARCHS {
            let dir = fixtures_dir().join("models").join(arch);
            let model = Model::load(&dir, Device::Cpu, DType::F32).unwrap();
            let golden = kiln::io::safetensors::load(dir.join("golden.safetensors"), Device::Cpu).unwrap();
            let ids = &golden["input_ids"];
            let t = ids.shape()[1];
            let mut cache = model.new_cache(1, t).unwrap();
            let whole = model.logits(&model.forward(ids, &mut cache).unwrap()).unwrap();
            assert_eq!(cache.len(), t);
            cache.clear().unwrap();
            let mut parts = vec![model.forward(&ids.narrow(1, 0, 5).unwrap(), &mut cache).unwrap()];
            for s in 5..t {
                parts.push(model.forward(&ids.narrow(1, s, 1).unwrap(), &mut cache).unwrap());
            }
            let stepped = model.logits(&Tensor::cat(&parts, 1).unwrap()).unwrap();
            let worst = whole.sub(&stepped).unwrap().abs().unwrap().max(&[], false).unwrap().item().unwrap();
            println!("{arch}: stepwise vs one prefill max |Δlogit| {worst:.3e}");
            assert!(worst < 1e-4, "{arch}: max |Δlogit| {worst}");
            let past = model.forward(&ids.narrow(1, 0, 1).unwrap(), &mut cache);
            assert!(past.is_err(), "{arch}: a step past the capacity must fail");

            // The same steps with the length kept on the device (as a captured step runs):
            // positions, cache writes and the attended length come from the device.
            cache.clear().unwrap();
            cache.track_on_device().unwrap();
            let mut parts = vec![model.forward(&ids.narrow(1, 0, 5).unwrap(), &mut cache).unwrap()];
            for s in 5..t {
                assert!(cache.begin_step(1).unwrap().is_some(), "{arch}: one token reads the device length");
                parts.push(model.forward(&ids.narrow(1, s, 1).unwrap(), &mut cache).unwrap());
            }
            let tracked = model.logits(&Tensor::cat(&parts, 1).unwrap()).unwrap();
            let worst = whole.sub(&tracked).unwrap().abs().unwrap().max(&[], false).unwrap().item().unwrap();
            println!("{arch}: device-length steps vs one prefill max |Δlogit| {worst:.3e}");
            assert!(worst < 1e-4, "{arch}: device-length steps, max |Δlogit| {worst}");
        }
    }
}
