//! `config.json` and `generation_config.json` of a Hugging Face model folder, checked
//! into the few numbers the decoder families need. Both transformers' older layout
//! (`rope_theta` + `rope_scaling`) and its 5.x layout (`rope_parameters`) are read.
//! `raw.rs` holds the schema and the fields every family shares; one module per family
//! (`llama.rs`, `qwen3.rs`, `qwen3_moe.rs`, `lfm2_moe.rs`, `qwen3_5_moe.rs`) reads what it
//! adds to the shared decoder's description.

mod lfm2_moe;
mod llama;
mod qwen3;
mod qwen3_5_moe;
mod qwen3_moe;
mod raw;

use kiln::{Error, Result};
use raw::RawConfig;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

/// The model families kiln can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama (`llama`).
    Llama,
    /// Qwen3 dense (`qwen3`).
    Qwen3,
    /// Qwen3-MoE (`qwen3_moe`).
    Qwen3Moe,
    /// LFM2-MoE: gated short-convolution layers among the attention layers, sigmoid routing
    /// with an expert bias.
    Lfm2Moe,
    /// Qwen3.5-MoE (text): Gated DeltaNet layers among gated-output attention layers with
    /// partial rotary embeddings, (1 + w) RMS norms, routed plus shared experts.
    Qwen35Moe,
}

impl Arch {
    pub(crate) const SUPPORTED: &'static str =
        "llama, qwen3, qwen3_moe, lfm2_moe, qwen3_5_moe_text (and qwen3_5_moe's text model)";

    fn from_model_type(t: &str) -> Option<Arch> {
        Some(match t {
            "llama" => Arch::Llama,
            "qwen3" => Arch::Qwen3,
            "qwen3_moe" => Arch::Qwen3Moe,
            "lfm2_moe" => Arch::Lfm2Moe,
            "qwen3_5_moe_text" => Arch::Qwen35Moe,
            _ => return None,
        })
    }

    /// Where this family keeps its weights in a checkpoint.
    pub fn names(self) -> &'static WeightNames {
        match self {
            Arch::Llama | Arch::Qwen3 | Arch::Qwen3Moe | Arch::Qwen35Moe => &llama::NAMES,
            Arch::Lfm2Moe => &lfm2_moe::NAMES,
        }
    }
}

/// The names a family gives its per-layer weights (under `{prefix}.layers.{i}.`), where the
/// families share a structure: pre-norm mixer (attention or short conv) and feed-forward
/// blocks, each added to the residual stream.
#[derive(Debug, PartialEq, Eq)]
pub struct WeightNames {
    /// The norm before the mixer.
    pub input_norm: &'static str,
    /// The norm before the feed-forward block.
    pub post_norm: &'static str,
    /// The feed-forward block (dense MLP or MoE).
    pub ffn: &'static str,
    /// Gate, up and down projections of an MLP (and of each expert).
    pub mlp: [&'static str; 3],
    /// Attention's output projection.
    pub attn_out: &'static str,
    /// Attention's query and key head norms.
    pub qk_norm: [&'static str; 2],
    /// The norm after the last layer (under the decoder's prefix).
    pub final_norm: &'static str,
}

/// Frequency scaling of the rotary embedding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// Unscaled frequencies.
    None,
    /// Llama 3.1's piecewise scaling of the low and middle frequencies.
    Llama3 {
        /// What the low frequencies are divided by.
        factor: f64,
        /// Wavelengths above `original_max_position / low_freq_factor` are divided by
        /// `factor`.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position / high_freq_factor` stay as they are;
        /// those between the two bounds are interpolated.
        high_freq_factor: f64,
        /// `original_max_position_embeddings`: the context length before scaling.
        original_max_position: usize,
    },
}

/// The sparse mixture-of-experts feed-forward blocks of a MoE family.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    /// Routed experts per MoE layer.
    pub num_experts: usize,
    /// Experts per token.
    pub top_k: usize,
    /// Hidden size of one expert's MLP.
    pub intermediate_size: usize,
    /// Renormalise the chosen experts' probabilities to sum to 1.
    pub norm_topk_prob: bool,
    /// Every `decoder_sparse_step`-th layer is sparse...
    pub decoder_sparse_step: usize,
    /// ...except these, which keep a dense MLP.
    pub mlp_only_layers: Vec<usize>,
    /// How the router scores and weights the experts.
    pub router: RouterConfig,
    /// Hidden size of a shared expert that every token runs, gated by
    /// `sigmoid(shared_expert_gate(x))` (Qwen3.5-MoE); `None`: no shared expert.
    pub shared_expert_intermediate_size: Option<usize>,
}

/// How a MoE router scores the experts and weights the chosen ones.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterConfig {
    /// Sigmoid scores (LFM2) instead of a softmax over the experts (Qwen3-MoE).
    pub sigmoid: bool,
    /// A per-expert bias (`{ffn}.expert_bias`) added to the scores to choose the experts,
    /// not to weight them (LFM2's `use_expert_bias`).
    pub expert_bias: bool,
    /// Added to the chosen weights' sum when `norm_topk_prob` renormalises them.
    pub renorm_eps: f64,
    /// Multiplies the chosen weights (`routed_scaling_factor`).
    pub scale: f64,
}

impl RouterConfig {
    /// Qwen3-MoE's router.
    pub const SOFTMAX: RouterConfig =
        RouterConfig { sigmoid: false, expert_bias: false, renorm_eps: 0.0, scale: 1.0 };
    /// LFM2-MoE's router with its config's defaults.
    pub const LFM2: RouterConfig =
        RouterConfig { sigmoid: true, expert_bias: true, renorm_eps: 1e-6, scale: 1.0 };
}

/// How a layer mixes information across positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MixerKind {
    /// Softmax attention with a KV cache.
    Attention,
    /// LFM2's gated short convolution ([`ShortConvConfig`]).
    ShortConv,
    /// Qwen3.5's Gated DeltaNet ([`GatedDeltaConfig`]).
    GatedDelta,
}

/// LFM2's gated short convolution, the mixer of the layers `layers` names (the others
/// run attention).
#[derive(Clone, Debug, PartialEq)]
pub struct ShortConvConfig {
    /// Taps of the causal depthwise convolution (`conv_L_cache`).
    pub kernel: usize,
    /// Biases on the convolution and its in / out projections (`conv_bias`).
    pub bias: bool,
    /// Indices of the layers that use it.
    pub layers: Vec<usize>,
}

/// Qwen3.5's Gated DeltaNet (linear attention), the mixer of the layers `layers` names.
#[derive(Clone, Debug, PartialEq)]
pub struct GatedDeltaConfig {
    /// Query / key heads.
    pub key_heads: usize,
    /// Value heads (a multiple of the key heads).
    pub value_heads: usize,
    /// Dims of a query / key head.
    pub key_dim: usize,
    /// Dims of a value head.
    pub value_dim: usize,
    /// Taps of the causal depthwise convolution over q, k and v (`linear_conv_kernel_dim`).
    pub conv_kernel: usize,
    /// Indices of the layers that use it.
    pub layers: Vec<usize>,
}

impl GatedDeltaConfig {
    /// Channels of the convolution: queries, keys and values.
    pub fn conv_channels(&self) -> usize {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }
}

/// A decoder's `config.json`, checked and reduced to what kiln's decoder families read.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The model family.
    pub arch: Arch,
    /// Where the decoder's weights live: `model` (`model.embed_tokens`, `model.layers.{i}`,
    /// …), or `model.language_model` in a multimodal checkpoint; `lm_head` is top-level.
    pub weight_prefix: &'static str,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Hidden size of the dense MLP.
    pub intermediate_size: usize,
    /// Decoder layers (`num_hidden_layers`).
    pub num_layers: usize,
    /// Query heads (`num_attention_heads`).
    pub num_heads: usize,
    /// Key / value heads (`num_key_value_heads`; fewer than `num_heads` for grouped queries).
    pub num_kv_heads: usize,
    /// Dims per attention head.
    pub head_dim: usize,
    /// Tokens in the vocabulary (rows of the embedding and the LM head).
    pub vocab_size: usize,
    /// Epsilon of every RMS norm.
    pub rms_norm_eps: f64,
    /// Base of the rotary embedding's frequencies.
    pub rope_theta: f64,
    /// Frequency scaling of the rotary embedding.
    pub rope_scaling: RopeScaling,
    /// Longest context the model supports.
    pub max_position_embeddings: usize,
    /// The LM head reuses the token embedding (no `lm_head.weight`).
    pub tie_word_embeddings: bool,
    /// Biases on the q/k/v/o projections.
    pub attention_bias: bool,
    /// RMS norm of each query and key head (Qwen3).
    pub qk_norm: bool,
    /// The MoE blocks; `None`: every layer has a dense MLP.
    pub moe: Option<MoeConfig>,
    /// Short-convolution layers (LFM2); `None`: every layer runs attention.
    pub short_conv: Option<ShortConvConfig>,
    /// Gated DeltaNet layers (Qwen3.5); `None`: none.
    pub gated_delta: Option<GatedDeltaConfig>,
    /// The share of each head's dims that the rotary embedding turns (the leading ones; the
    /// rest pass through): see [`Config::rotary_dim`].
    pub partial_rotary_factor: f64,
    /// Attention's output is gated by `sigmoid` of a second half of `q_proj` (Qwen3.5).
    pub attn_output_gate: bool,
    /// RMS norms scale by `1 + weight` (Qwen3.5; zero-initialised weights).
    pub norm_unit_offset: bool,
    /// `eos_token_id` of config.json (generation_config.json's takes precedence).
    pub eos_token_ids: Vec<u32>,
    /// The checkpoint is stored in bf16 (`dtype` / `torch_dtype`). transformers then keeps
    /// the rotary `inv_freq` buffer in bf16 too, so its frequencies are bf16-rounded; kiln
    /// rounds them the same way to reproduce its logits (layers::inv_freq).
    pub bf16_checkpoint: bool,
}

fn read_json(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::Io { path: path.display().to_string(), source: e })
}

impl Config {
    /// Reads and checks `dir/config.json`; an unknown architecture, a missing field or an
    /// inconsistent value is one error naming the file and what is wrong.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("config.json");
        Self::from_json(&read_json(&path)?)
            .map_err(|msg| Error::File { path: path.display().to_string(), msg })
    }

    /// Parses and checks config.json's text; the error says what is missing or inconsistent.
    /// The shared decoder fields are read once (`config/raw.rs`); each family's module reads what
    /// it adds.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let (text_config, weight_prefix) =
            raw::text_model(serde_json::from_str(text).map_err(|e| e.to_string())?)?;
        let raw: RawConfig = serde_json::from_value(text_config).map_err(|e| e.to_string())?;
        let model_type = raw.model_type.clone().ok_or("missing \"model_type\"")?;
        let arch = Arch::from_model_type(&model_type).ok_or_else(|| {
            format!(
                "unknown architecture {model_type:?} ({}); kiln supports {}",
                raw.architectures.join(", "),
                Arch::SUPPORTED
            )
        })?;
        let mut c = raw.decoder(arch, weight_prefix)?;
        match arch {
            Arch::Llama => llama::describe(&raw, &mut c)?,
            Arch::Qwen3 => qwen3::describe(&raw, &mut c)?,
            Arch::Qwen3Moe => qwen3_moe::describe(&raw, &mut c)?,
            Arch::Lfm2Moe => lfm2_moe::describe(&raw, &mut c)?,
            Arch::Qwen35Moe => qwen3_5_moe::describe(&raw, &mut c)?,
        }
        raw.refuse_unsupported()?;
        c.validate()?;
        Ok(c)
    }

    /// Checks that the sizes fit together.
    pub fn validate(&self) -> std::result::Result<(), String> {
        // Without walking the layers (their count is not yet confirmed by a checkpoint).
        let dense_mlp = self.moe.as_ref().is_none_or(|m| {
            m.decoder_sparse_step != 1 || m.mlp_only_layers.iter().any(|&i| i < self.num_layers)
        });
        let positive = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", if dense_mlp { self.intermediate_size } else { 1 }),
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("\"{name}\" must be positive"));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_heads, self.num_kv_heads
            ));
        }
        let r = self.rotary_dim();
        if !r.is_multiple_of(2) || r == 0 || r > self.head_dim {
            return Err(format!(
                "rotary dims {r} of head_dim {} (partial_rotary_factor {}) must be even, positive and at most head_dim",
                self.head_dim, self.partial_rotary_factor
            ));
        }
        if !(self.rope_theta > 0.0 && self.rms_norm_eps >= 0.0) {
            return Err(format!("bad rope_theta {} or rms_norm_eps {}", self.rope_theta, self.rms_norm_eps));
        }
        if let Some(m) = &self.moe {
            if m.num_experts == 0 || m.top_k == 0 || m.top_k > m.num_experts || m.intermediate_size == 0 {
                return Err(format!(
                    "MoE sizes: {} experts, {} per token, expert size {}",
                    m.num_experts, m.top_k, m.intermediate_size
                ));
            }
            if m.decoder_sparse_step == 0 {
                return Err("decoder_sparse_step must be positive".into());
            }
        }
        if let Some(sc) = &self.short_conv {
            if sc.kernel == 0 {
                return Err("conv_L_cache must be positive".into());
            }
            if let Some(i) = sc.layers.iter().find(|&&i| i >= self.num_layers) {
                return Err(format!("short-conv layer {i} of {} layers", self.num_layers));
            }
        }
        if let Some(g) = &self.gated_delta {
            let sizes = [g.key_heads, g.value_heads, g.key_dim, g.value_dim, g.conv_kernel];
            if sizes.contains(&0) || !g.value_heads.is_multiple_of(g.key_heads) {
                return Err(format!(
                    "linear attention: {} key heads of {}, {} value heads of {}, conv kernel {} (all positive, value heads a multiple of key heads)",
                    g.key_heads, g.key_dim, g.value_heads, g.value_dim, g.conv_kernel
                ));
            }
            if let Some(i) = g.layers.iter().find(|&&i| i >= self.num_layers) {
                return Err(format!("linear-attention layer {i} of {} layers", self.num_layers));
            }
        }
        Ok(())
    }

    /// Leading dims of each head that the rotary embedding turns, as transformers rounds
    /// them: `int(head_dim · partial_rotary_factor)`.
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }

    /// How layer `i` mixes tokens.
    pub fn mixer(&self, i: usize) -> MixerKind {
        if self.short_conv.as_ref().is_some_and(|s| s.layers.contains(&i)) {
            MixerKind::ShortConv
        } else if self.gated_delta.as_ref().is_some_and(|g| g.layers.contains(&i)) {
            MixerKind::GatedDelta
        } else {
            MixerKind::Attention
        }
    }

    /// Whether layer `i` mixes tokens with a short convolution (LFM2).
    pub fn is_conv_layer(&self, i: usize) -> bool {
        self.mixer(i) == MixerKind::ShortConv
    }

    /// Whether layer `i` has a sparse MoE block (else a dense MLP).
    pub fn is_moe_layer(&self, i: usize) -> bool {
        self.moe
            .as_ref()
            .is_some_and(|m| !m.mlp_only_layers.contains(&i) && (i + 1).is_multiple_of(m.decoder_sparse_step))
    }
}

/// `generation_config.json`: stop tokens and the sampling defaults a checkpoint ships.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    /// Tokens that end generation.
    pub eos_token_ids: Vec<u32>,
    /// Whether to sample (else greedy decoding).
    pub do_sample: bool,
    /// Sampling temperature, if set.
    pub temperature: Option<f64>,
    /// Keep only the `k` most likely tokens, if set.
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches `p`, if set.
    pub top_p: Option<f64>,
    /// Penalty on tokens already seen (transformers' `repetition_penalty`), if set.
    pub repetition_penalty: Option<f64>,
}

#[derive(Deserialize)]
struct RawGeneration {
    #[serde(default)]
    eos_token_id: Value,
    #[serde(default)]
    do_sample: bool,
    temperature: Option<f64>,
    top_k: Option<usize>,
    top_p: Option<f64>,
    repetition_penalty: Option<f64>,
}

impl GenerationConfig {
    /// Reads `dir/generation_config.json` (absent: defaults), taking the EOS ids of
    /// `config` when the file names none.
    pub fn load(dir: &Path, config: &Config) -> Result<Self> {
        let path = dir.join("generation_config.json");
        let mut g = if path.exists() {
            let raw: RawGeneration = serde_json::from_str(&read_json(&path)?)
                .map_err(|e| Error::File { path: path.display().to_string(), msg: e.to_string() })?;
            GenerationConfig {
                eos_token_ids: raw::token_ids(&raw.eos_token_id),
                do_sample: raw.do_sample,
                temperature: raw.temperature,
                top_k: raw.top_k,
                top_p: raw.top_p,
                repetition_penalty: raw.repetition_penalty,
            }
        } else {
            GenerationConfig::default()
        };
        if g.eos_token_ids.is_empty() {
            g.eos_token_ids = config.eos_token_ids.clone();
        }
        Ok(g)
    }
}

/// The PyTorch / transformers / diffusers ground truth: `$KILN_FIXTURES`, else the
/// repository's own `fixtures/` (a copy of the shared fixtures, so a fresh clone tests itself).
pub fn fixtures_dir() -> std::path::PathBuf {
    kiln::testing::fixtures::default_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_configs_parse() {
        let root = fixtures_dir().join("models");
        let llama = Config::load(&root.join("llama")).unwrap();
        assert_eq!((llama.arch, llama.num_kv_heads, llama.head_dim), (Arch::Llama, 2, 16));
        assert!(matches!(llama.rope_scaling, RopeScaling::Llama3 { original_max_position: 64, .. }));
        assert_eq!(GenerationConfig::load(&root.join("llama"), &llama).unwrap().eos_token_ids, vec![2]);
        let q = Config::load(&root.join("qwen3")).unwrap();
        assert!(q.tie_word_embeddings && q.qk_norm && q.moe.is_none());
        let m = Config::load(&root.join("qwen3_moe")).unwrap();
        let moe = m.moe.as_ref().unwrap();
        assert_eq!((moe.num_experts, moe.top_k, moe.intermediate_size), (8, 2, 32));
        assert!(m.is_moe_layer(0) && m.is_moe_layer(1));
        assert_eq!(moe.router, RouterConfig::SOFTMAX);
        assert!(!m.tie_word_embeddings && m.short_conv.is_none() && !m.is_conv_layer(0));
        let l = Config::load(&root.join("lfm2_moe")).unwrap();
        let moe = l.moe.as_ref().unwrap();
        assert_eq!((moe.num_experts, moe.top_k, moe.intermediate_size), (8, 2, 32));
        assert_eq!(moe.router, RouterConfig::LFM2);
        // num_dense_layers = 1; layer_types conv, full_attention, conv, full_attention.
        assert_eq!((0..4).map(|i| l.is_moe_layer(i)).collect::<Vec<_>>(), [false, true, true, true]);
        assert_eq!((0..4).map(|i| l.is_conv_layer(i)).collect::<Vec<_>>(), [true, false, true, false]);
        assert_eq!(l.short_conv.as_ref().unwrap().kernel, 3);
        assert!(l.tie_word_embeddings && l.qk_norm && l.rms_norm_eps == 1e-5 && l.head_dim == 16);
        assert_eq!(l.arch.names().final_norm, "embedding_norm");
        let q = Config::load(&root.join("qwen3_5_moe")).unwrap();
        let g = q.gated_delta.as_ref().unwrap();
        assert_eq!((g.key_heads, g.value_heads, g.key_dim, g.value_dim, g.conv_kernel), (2, 4, 16, 16, 4));
        assert_eq!(g.conv_channels(), 128);
        let kinds: Vec<MixerKind> = (0..4).map(|i| q.mixer(i)).collect();
        assert_eq!(
            kinds,
            [MixerKind::GatedDelta, MixerKind::GatedDelta, MixerKind::GatedDelta, MixerKind::Attention]
        );
        assert_eq!((q.rotary_dim(), q.head_dim), (8, 32));
        assert!(q.attn_output_gate && q.norm_unit_offset && !q.tie_word_embeddings);
        let moe = q.moe.as_ref().unwrap();
        assert!(moe.norm_topk_prob && (0..4).all(|i| q.is_moe_layer(i)));
        assert_eq!(moe.shared_expert_intermediate_size, Some(32));
        let err = Config::load(Path::new("/nonexistent")).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let text = std::fs::read_to_string(fixtures_dir().join("models/qwen3/config.json")).unwrap();
        let edit = |from: &str, to: &str| {
            assert!(text.contains(from), "{from}");
            Config::from_json(&text.replace(from, to)).unwrap_err()
        };
        let e = edit("\"model_type\": \"qwen3\"", "\"model_type\": \"mamba\"");
        assert!(e.contains("unknown architecture \"mamba\"") && e.contains("qwen3_moe"), "{e}");
        let e = edit("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
        assert!(e.contains("num_key_value_heads 3"), "{e}");
        let e = edit("\"hidden_size\": 64,", "");
        assert!(e.contains("missing \"hidden_size\""), "{e}");
        let e = edit("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"");
        assert!(e.contains("yarn"), "{e}");
        let e = edit("\"vocab_size\": 512", "\"vocab_size\": \"big\"");
        assert!(e.contains("vocab_size") || e.contains("invalid type"), "{e}");

        let text = std::fs::read_to_string(fixtures_dir().join("models/lfm2_moe/config.json")).unwrap();
        let edit = |from: &str, to: &str| {
            assert!(text.contains(from), "{from}");
            Config::from_json(&text.replace(from, to)).unwrap_err()
        };
        let e = edit(
            "\"conv\",\n    \"full_attention\",\n    \"conv\"",
            "\"conv\",\n    \"sliding_attention\",\n    \"conv\"",
        );
        assert!(e.contains("\"sliding_attention\""), "{e}");
        let e = edit("\"full_attention\",\n    \"conv\",", "");
        assert!(e.contains("2 layer_types for 4 layers"), "{e}");
        let e = edit("\"conv_L_cache\": 3", "\"conv_L_cache\": 0");
        assert!(e.contains("conv_L_cache"), "{e}");
        // The older `tie_embedding` key wins over `tie_word_embeddings`, as in transformers.
        let untied = text.replace("\"tie_word_embeddings\": true", "\"tie_embedding\": false");
        assert!(!Config::from_json(&untied).unwrap().tie_word_embeddings);
    }
}
