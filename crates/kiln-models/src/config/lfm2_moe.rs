//! LFM2-MoE (`model_type` "lfm2_moe"): gated short-convolution layers among the attention
//! layers (`layer_types`), the first `num_dense_layers` dense, then MoE blocks with sigmoid
//! routing and an expert bias; tied embeddings by default; its own weight names.

use super::raw::RawConfig;
use super::{Config, MoeConfig, RouterConfig, ShortConvConfig, WeightNames};

/// Where LFM2 keeps its per-layer weights.
pub(super) const NAMES: WeightNames = WeightNames {
    input_norm: "operator_norm",
    post_norm: "ffn_norm",
    ffn: "feed_forward",
    mlp: ["w1", "w3", "w2"],
    attn_out: "out_proj",
    qk_norm: ["q_layernorm", "k_layernorm"],
    final_norm: "embedding_norm",
};

pub(super) fn describe(raw: &RawConfig, c: &mut Config) -> Result<(), String> {
    c.intermediate_size = raw.intermediate_size()?;
    // transformers' default is True for LFM2-MoE.
    c.tie_word_embeddings = raw.tied(true);
    let (num_experts, top_k, intermediate_size) = raw.expert_sizes()?;
    // Bounded by `layer_types` (one per layer, checked below) so a huge count cannot
    // allocate before the checkpoint is read.
    let layers = raw.layer_types.as_ref().map_or(0, Vec::len).min(c.num_layers);
    c.moe = Some(MoeConfig {
        num_experts,
        top_k,
        intermediate_size,
        norm_topk_prob: raw.norm_topk_prob.unwrap_or(true),
        decoder_sparse_step: 1,
        mlp_only_layers: (0..raw.num_dense_layers.unwrap_or(2).min(layers)).collect(),
        router: RouterConfig {
            expert_bias: raw.use_expert_bias.unwrap_or(true),
            scale: raw.routed_scaling_factor.unwrap_or(1.0),
            ..RouterConfig::LFM2
        },
        shared_expert_intermediate_size: None,
    });
    c.short_conv = Some(ShortConvConfig {
        kernel: raw.conv_l_cache.unwrap_or(3),
        bias: raw.conv_bias.unwrap_or(false),
        layers: raw.layers_of_type("conv", c.num_layers)?,
    });
    Ok(())
}
