//! Qwen3-MoE (`model_type` "qwen3_moe"): Qwen3 with sparse MoE blocks, softmax routing,
//! every `decoder_sparse_step`-th layer sparse except `mlp_only_layers`.

use super::raw::RawConfig;
use super::{Config, MoeConfig, RouterConfig};

pub(super) fn describe(raw: &RawConfig, c: &mut Config) -> Result<(), String> {
    c.intermediate_size = raw.intermediate_size()?;
    let (num_experts, top_k, intermediate_size) = raw.expert_sizes()?;
    c.moe = Some(MoeConfig {
        num_experts,
        top_k,
        intermediate_size,
        // transformers' default: False.
        norm_topk_prob: raw.norm_topk_prob.unwrap_or(false),
        decoder_sparse_step: raw.decoder_sparse_step.unwrap_or(1),
        mlp_only_layers: raw.mlp_only_layers.clone(),
        router: RouterConfig::SOFTMAX,
        shared_expert_intermediate_size: None,
    });
    Ok(())
}
