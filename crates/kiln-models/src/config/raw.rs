//! The `config.json` schema kiln reads (every family's keys, all optional here) and the
//! fields every decoder family shares; the family modules add their own.

use super::{Arch, Config, RopeScaling};
use serde::Deserialize;
use serde_json::Value;

/// A `rope_scaling` / `rope_parameters` object.
#[derive(Deserialize)]
pub(super) struct RawRope {
    pub(super) rope_theta: Option<f64>,
    pub(super) partial_rotary_factor: Option<f64>,
    pub(super) rope_type: Option<String>,
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) factor: Option<f64>,
    pub(super) low_freq_factor: Option<f64>,
    pub(super) high_freq_factor: Option<f64>,
    pub(super) original_max_position_embeddings: Option<usize>,
}

/// The keys of a text model's `config.json` that some family reads.
#[derive(Deserialize)]
pub(super) struct RawConfig {
    pub(super) model_type: Option<String>,
    #[serde(default)]
    pub(super) architectures: Vec<String>,
    pub(super) hidden_size: Option<usize>,
    pub(super) intermediate_size: Option<usize>,
    pub(super) num_hidden_layers: Option<usize>,
    pub(super) num_attention_heads: Option<usize>,
    pub(super) num_key_value_heads: Option<usize>,
    pub(super) head_dim: Option<usize>,
    pub(super) vocab_size: Option<usize>,
    pub(super) rms_norm_eps: Option<f64>,
    pub(super) rope_theta: Option<f64>,
    pub(super) rope_scaling: Option<RawRope>,
    pub(super) rope_parameters: Option<RawRope>,
    pub(super) max_position_embeddings: Option<usize>,
    pub(super) tie_word_embeddings: Option<bool>,
    /// LFM2's older name of `tie_word_embeddings` (it wins, as in transformers).
    pub(super) tie_embedding: Option<bool>,
    #[serde(default)]
    pub(super) attention_bias: bool,
    #[serde(default)]
    pub(super) mlp_bias: bool,
    pub(super) hidden_act: Option<String>,
    #[serde(default)]
    pub(super) use_sliding_window: bool,
    pub(super) num_experts: Option<usize>,
    pub(super) num_local_experts: Option<usize>,
    pub(super) num_experts_per_tok: Option<usize>,
    pub(super) moe_intermediate_size: Option<usize>,
    pub(super) norm_topk_prob: Option<bool>,
    pub(super) decoder_sparse_step: Option<usize>,
    #[serde(default)]
    pub(super) mlp_only_layers: Vec<usize>,
    // LFM2-MoE.
    pub(super) norm_eps: Option<f64>,
    pub(super) num_dense_layers: Option<usize>,
    pub(super) use_expert_bias: Option<bool>,
    pub(super) routed_scaling_factor: Option<f64>,
    pub(super) layer_types: Option<Vec<String>>,
    #[serde(rename = "conv_L_cache")]
    pub(super) conv_l_cache: Option<usize>,
    pub(super) conv_bias: Option<bool>,
    // Qwen3.5-MoE.
    pub(super) partial_rotary_factor: Option<f64>,
    pub(super) shared_expert_intermediate_size: Option<usize>,
    pub(super) linear_num_key_heads: Option<usize>,
    pub(super) linear_num_value_heads: Option<usize>,
    pub(super) linear_key_head_dim: Option<usize>,
    pub(super) linear_value_head_dim: Option<usize>,
    pub(super) linear_conv_kernel_dim: Option<usize>,
    pub(super) dtype: Option<String>,
    pub(super) torch_dtype: Option<String>,
    #[serde(default)]
    pub(super) eos_token_id: Value,
}

/// Multimodal checkpoints whose text model kiln runs: the wrapper's `model_type`, the text
/// model's, and where the text model's weights live (the vision tower's are not read).
const MULTIMODAL: [(&str, &str, &str); 1] = [("qwen3_5_moe", "qwen3_5_moe_text", "model.language_model")];

/// The text model's config and weight prefix: a multimodal wrapper's `text_config`, which
/// inherits the keys the wrapper states once for the whole model; else `config` itself.
pub(super) fn text_model(config: Value) -> std::result::Result<(Value, &'static str), String> {
    let wrapper =
        config.get("model_type").and_then(Value::as_str).and_then(|t| MULTIMODAL.iter().find(|m| m.0 == t));
    let Some(&(outer, inner, prefix)) = wrapper else {
        return Ok((config, "model"));
    };
    let mut text = config
        .get("text_config")
        .filter(|t| t.is_object())
        .cloned()
        .ok_or_else(|| format!("model_type {outer:?} without a \"text_config\" object"))?;
    for key in ["tie_word_embeddings", "eos_token_id", "dtype", "torch_dtype", "architectures"] {
        if let (None, Some(v)) = (text.get(key), config.get(key)) {
            text[key] = v.clone();
        }
    }
    text["model_type"] = inner.into();
    Ok((text, prefix))
}

/// `eos_token_id` as written by transformers: null, one id, or a list of ids.
pub(super) fn token_ids(v: &Value) -> Vec<u32> {
    match v {
        Value::Number(n) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Value::Array(a) => a.iter().filter_map(|x| x.as_u64()).map(|n| n as u32).collect(),
        _ => vec![],
    }
}

/// A required key, or the error naming it.
pub(super) fn req<T>(v: Option<T>, name: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("missing \"{name}\""))
}

impl RawConfig {
    /// The fields every family reads the same way; family-specific ones keep their
    /// defaults (no MoE, no other mixers, q / k norms on, no dense MLP size) for the
    /// family module to set.
    pub(super) fn decoder(&self, arch: Arch, weight_prefix: &'static str) -> Result<Config, String> {
        let hidden_size = req(self.hidden_size, "hidden_size")?;
        let num_heads = req(self.num_attention_heads, "num_attention_heads")?;
        let rope = self.rope_parameters.as_ref().or(self.rope_scaling.as_ref());
        let rope_theta = req(rope.and_then(|r| r.rope_theta).or(self.rope_theta), "rope_theta")?;
        let partial_rotary =
            rope.and_then(|r| r.partial_rotary_factor).or(self.partial_rotary_factor).unwrap_or(1.0);
        let rope_type =
            rope.and_then(|r| r.rope_type.clone().or(r.kind.clone())).unwrap_or_else(|| "default".into());
        let rope_scaling = match (rope_type.as_str(), rope) {
            ("default", _) => RopeScaling::None,
            ("llama3", Some(rope)) => RopeScaling::Llama3 {
                factor: req(rope.factor, "rope factor")?,
                low_freq_factor: req(rope.low_freq_factor, "rope low_freq_factor")?,
                high_freq_factor: req(rope.high_freq_factor, "rope high_freq_factor")?,
                original_max_position: req(
                    rope.original_max_position_embeddings,
                    "rope original_max_position_embeddings",
                )?,
            },
            (other, _) => return Err(format!("rope type {other:?} is not supported (default, llama3)")),
        };
        let num_layers = req(self.num_hidden_layers, "num_hidden_layers")?;
        if !(partial_rotary > 0.0 && partial_rotary <= 1.0) {
            return Err(format!("partial_rotary_factor {partial_rotary} is not in (0, 1]"));
        }
        Ok(Config {
            arch,
            weight_prefix,
            hidden_size,
            intermediate_size: 0,
            num_layers,
            num_heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(num_heads),
            head_dim: self.head_dim.unwrap_or(hidden_size.checked_div(num_heads).unwrap_or(0)),
            vocab_size: req(self.vocab_size, "vocab_size")?,
            rms_norm_eps: req(self.rms_norm_eps.or(self.norm_eps), "rms_norm_eps")?,
            rope_theta,
            rope_scaling,
            max_position_embeddings: req(self.max_position_embeddings, "max_position_embeddings")?,
            tie_word_embeddings: self.tied(false),
            attention_bias: self.attention_bias,
            qk_norm: true,
            moe: None,
            short_conv: None,
            gated_delta: None,
            partial_rotary_factor: partial_rotary,
            attn_output_gate: false,
            norm_unit_offset: false,
            eos_token_ids: token_ids(&self.eos_token_id),
            bf16_checkpoint: self.dtype.as_ref().or(self.torch_dtype.as_ref()).map(String::as_str)
                == Some("bfloat16"),
        })
    }

    /// `tie_word_embeddings` (LFM2's older `tie_embedding` wins, as in transformers), else
    /// the family's default.
    pub(super) fn tied(&self, default: bool) -> bool {
        self.tie_embedding.or(self.tie_word_embeddings).unwrap_or(default)
    }

    /// The dense MLP's hidden size, required.
    pub(super) fn intermediate_size(&self) -> Result<usize, String> {
        req(self.intermediate_size, "intermediate_size")
    }

    /// The routed experts' sizes: (experts, experts per token, expert hidden size).
    pub(super) fn expert_sizes(&self) -> Result<(usize, usize, usize), String> {
        Ok((
            req(self.num_experts.or(self.num_local_experts), "num_experts")?,
            req(self.num_experts_per_tok, "num_experts_per_tok")?,
            req(self.moe_intermediate_size, "moe_intermediate_size")?,
        ))
    }

    /// The layers whose `layer_types` entry is `kind` (LFM2: "conv", Qwen3.5:
    /// "linear_attention"; the rest must be "full_attention").
    pub(super) fn layers_of_type(&self, kind: &str, num_layers: usize) -> Result<Vec<usize>, String> {
        let types = req(self.layer_types.as_ref(), "layer_types")?;
        if types.len() != num_layers {
            return Err(format!("{} layer_types for {num_layers} layers", types.len()));
        }
        let mut layers = vec![];
        for (i, t) in types.iter().enumerate() {
            match t.as_str() {
                "full_attention" => {}
                t if t == kind => layers.push(i),
                t => return Err(format!("layer type {t:?} is not supported ({kind}, full_attention)")),
            }
        }
        Ok(layers)
    }

    /// What no family here supports.
    pub(super) fn refuse_unsupported(&self) -> Result<(), String> {
        if self.mlp_bias {
            return Err("mlp_bias = true is not supported".into());
        }
        if self.use_sliding_window {
            return Err("use_sliding_window = true is not supported".into());
        }
        if let Some(act) = self.hidden_act.as_ref().filter(|a| *a != "silu") {
            return Err(format!("hidden_act {act:?} is not supported (silu)"));
        }
        Ok(())
    }
}
