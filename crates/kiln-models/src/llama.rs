//! The decoder shared by Llama, Qwen3 and Qwen3-MoE: embedding, N × (RMS norm →
//! attention → residual, RMS norm → MLP or MoE → residual), final norm, LM head. Qwen3
//! adds the q/k head norms (in `layers::Attention`), Qwen3-MoE swaps the MLP for a
//! routed expert block (`qwen3_moe`).
//!
//! Linear layers (attention projections, MLPs, experts) hold dense or FP8 weights
//! (`layers::LinearWeight`): FP8 when the checkpoint stores them so (Hugging Face FP8
//! checkpoints, `weight_scale` / `weight_scale_inv`) or when loaded with
//! [`Quantize::Fp8`]. The embedding, norms, LM head and MoE router stay dense.

use crate::config::Config;
use crate::kv_cache::KvCache;
use crate::layers::{Attention, Mlp, RmsNorm, Rope, WeightBytes};
use crate::loader::{CheckpointSource, Quantize, RandomSource, WeightSource};
use crate::qwen3_moe::MoeBlock;
use kiln::{DType, Device, Error, Result, Tensor};
use std::path::Path;

/// Rotary tables cover at most this many positions (longer contexts are refused when
/// the cache is made, not silently wrapped).
pub const MAX_POSITIONS: usize = 32768;

// One per layer: the size of the handle (an FP8 MLP's is the largest) does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Ffn {
    Dense(Mlp),
    Moe(MoeBlock),
}

pub struct Layer {
    input_norm: RmsNorm,
    attn: Attention,
    post_norm: RmsNorm,
    ffn: Ffn,
}

pub struct Model {
    pub config: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: RmsNorm,
    lm_head: Tensor,
    rope: Rope,
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
        let config = Config::load(dir)?;
        let mut src = CheckpointSource::open(dir, device, dtype)?.with_quantize(quantize);
        let model = Self::build(config, &mut src);
        // Report bad tensors first: a build error is often their consequence.
        src.finish()?;
        model
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

    pub fn build(config: Config, src: &mut dyn WeightSource) -> Result<Model> {
        let c = &config;
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let embed = src.get("model.embed_tokens.weight", &[c.vocab_size, h])?;
        let layers = (0..c.num_layers)
            .map(|i| {
                let p = format!("model.layers.{i}");
                Ok(Layer {
                    input_norm: RmsNorm::load(src, &format!("{p}.input_layernorm.weight"), h, eps)?,
                    attn: Attention::load(src, &format!("{p}.self_attn"), c)?,
                    post_norm: RmsNorm::load(src, &format!("{p}.post_attention_layernorm.weight"), h, eps)?,
                    ffn: if c.is_moe_layer(i) {
                        Ffn::Moe(MoeBlock::load(src, &format!("{p}.mlp"), c)?)
                    } else {
                        Ffn::Dense(Mlp::load(src, &format!("{p}.mlp"), h, c.intermediate_size)?)
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::load(src, "model.norm.weight", h, eps)?;
        let lm_head = if c.tie_word_embeddings {
            embed.clone()
        } else {
            src.get("lm_head.weight", &[c.vocab_size, h])?
        };
        let positions = c.max_position_embeddings.min(MAX_POSITIONS);
        let rope = Rope::new(c, positions, src.device(), src.dtype())?;
        Ok(Model { config, embed, layers, norm, lm_head, rope })
    }

    pub fn device(&self) -> Device {
        self.embed.device()
    }

    pub fn dtype(&self) -> DType {
        self.embed.dtype()
    }

    /// An empty cache for `batch` sequences of up to `capacity` positions.
    pub fn new_cache(&self, batch: usize, capacity: usize) -> Result<KvCache> {
        if capacity > self.rope.positions() {
            return Err(Error::invalid(
                "kv_cache",
                format!("{capacity} positions exceed the model's {} rotary positions", self.rope.positions()),
            ));
        }
        let c = &self.config;
        KvCache::new(c.num_layers, batch, c.num_kv_heads, capacity, c.head_dim, self.dtype(), self.device())
    }

    /// Hidden states after the final norm, `[B, T, H]`, of token ids `[B, T]` placed
    /// after the cache's contents (which they are appended to).
    pub fn forward(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (b, t) = match ids.shape() {
            &[b, t] => (b, t),
            s => return Err(Error::bad_shape("model", format!("token ids must be [B, T], got {s:?}"))),
        };
        let mut x =
            self.embed.index_select(0, &ids.reshape(&[b * t])?)?.reshape(&[b, t, self.config.hidden_size])?;
        for (i, l) in self.layers.iter().enumerate() {
            let a = l.attn.forward(&l.input_norm.forward(&x)?, &self.rope, cache, i)?;
            x = x.add(&a)?;
            let h = l.post_norm.forward(&x)?;
            let f = match &l.ffn {
                Ffn::Dense(m) => m.forward(&h)?,
                Ffn::Moe(m) => m.forward(&h)?,
            };
            x = x.add(&f)?;
        }
        self.norm.forward(&x)
    }

    /// Vocabulary logits `[…, V]` of hidden states `[…, H]`, in the model's dtype.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        hidden.linear(&self.lm_head, None)
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
    fn weight_bytes(&self, acc: &mut WeightBytes) {
        acc.add_dense(&self.input_norm.weight);
        acc.add_dense(&self.post_norm.weight);
        self.attn.weight_bytes(acc);
        match &self.ffn {
            Ffn::Dense(m) => m.weight_bytes(acc),
            Ffn::Moe(m) => m.weight_bytes(acc),
        }
    }
}
