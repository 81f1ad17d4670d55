//! Qwen3.5-MoE's text model (`model_type` "qwen3_5_moe_text", or the `text_config` of a
//! "qwen3_5_moe" checkpoint): Gated DeltaNet layers among attention layers whose output
//! is gated, partial rotary embeddings, (1 + w) RMS norms, routed experts that always
//! renormalise plus a shared expert, and no dense MLP.

use super::raw::{req, RawConfig};
use super::{Config, GatedDeltaConfig, MoeConfig, RouterConfig};

pub(super) fn describe(raw: &RawConfig, c: &mut Config) -> Result<(), String> {
    // No dense MLP layer, and no size for one.
    c.intermediate_size = raw.intermediate_size.unwrap_or(0);
    let (num_experts, top_k, intermediate_size) = raw.expert_sizes()?;
    c.moe = Some(MoeConfig {
        num_experts,
        top_k,
        intermediate_size,
        norm_topk_prob: true,
        decoder_sparse_step: raw.decoder_sparse_step.unwrap_or(1),
        mlp_only_layers: raw.mlp_only_layers.clone(),
        router: RouterConfig::SOFTMAX,
        shared_expert_intermediate_size: raw.shared_expert_intermediate_size,
    });
    c.gated_delta = Some(GatedDeltaConfig {
        key_heads: req(raw.linear_num_key_heads, "linear_num_key_heads")?,
        value_heads: req(raw.linear_num_value_heads, "linear_num_value_heads")?,
        key_dim: req(raw.linear_key_head_dim, "linear_key_head_dim")?,
        value_dim: req(raw.linear_value_head_dim, "linear_value_head_dim")?,
        conv_kernel: req(raw.linear_conv_kernel_dim, "linear_conv_kernel_dim")?,
        layers: raw.layers_of_type("linear_attention", c.num_layers)?,
    });
    c.attn_output_gate = true;
    c.norm_unit_offset = true;
    Ok(())
}
