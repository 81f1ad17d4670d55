//! Llama (`model_type` "llama"): the plain decoder, dense MLPs, no q / k norms; its weight
//! names are the ones the Qwen families share.

use super::raw::RawConfig;
use super::{Config, WeightNames};

/// Where Llama (and the Qwen families) keep their per-layer weights.
pub(super) const NAMES: WeightNames = WeightNames {
    input_norm: "input_layernorm",
    post_norm: "post_attention_layernorm",
    ffn: "mlp",
    mlp: ["gate_proj", "up_proj", "down_proj"],
    attn_out: "o_proj",
    qk_norm: ["q_norm", "k_norm"],
    final_norm: "norm",
};

pub(super) fn describe(raw: &RawConfig, c: &mut Config) -> Result<(), String> {
    c.intermediate_size = raw.intermediate_size()?;
    c.qk_norm = false;
    Ok(())
}
