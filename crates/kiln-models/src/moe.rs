//! The sparse block of Qwen3-MoE and LFM2-MoE: a router picks `top_k` of `E` expert MLPs
//! per token, and the token's output is the weighted sum of those experts' outputs.
//! Qwen3-MoE's router takes a softmax over the experts; LFM2-MoE's takes sigmoid scores
//! and chooses by score + a per-expert bias, weighting by the unbiased scores
//! (`config::RouterConfig`). Either renormalises the chosen weights with `norm_topk_prob`.
//! Qwen3.5-MoE adds a shared expert that every token runs, its output scaled by
//! `sigmoid(shared_expert_gate(x))`.
//!
//! The experts' weights are stacked at load: `gate_up` `[E, 2·I, H]` (gate rows, then
//! up rows) and `down` `[E, H, I]`. Two ways to run them:
//! - **gathered** (decode: `tokens · top_k ≤ E`): [`Tensor::expert_swiglu`] multiplies
//!   each (token, slot) by the gate_up expert its device-side top-k index names and
//!   stores SwiGLU, streaming only the chosen experts' weights, and
//!   [`Tensor::expert_linear_sum`] does the down projection and the router-weighted sum
//!   in one more launch. Routing never leaves the device, so a decode step has no host
//!   sync.
//! - **grouped** (prompts): the (token, slot) pairs are grouped by expert on the device
//!   ([`Tensor::expert_groups`]), the tokens gathered in group order, and each projection
//!   runs as one [`Tensor::grouped_mm`] over every expert's group: no host sync. Gathering
//!   weights per token would copy `tokens · top_k` expert matrices here, far more than
//!   the layer holds.
//!
//! FP8 experts (an FP8 checkpoint, or `Quantize::Fp8`) are stacked the same way as
//! float8_e4m3fn values with one f32 scale per row. Decode runs them gathered too
//! ([`Tensor::expert_swiglu_fp8`], [`Tensor::expert_linear_sum_fp8`]: two launches, no host
//! sync, so the step stays one CUDA graph). Prompts run them grouped by a host loop (the
//! FP8 GEMM takes one weight, so there is no grouped FP8 product): the group ends are read
//! back (one host sync per MoE layer) and each expert with tokens runs `linear_fp8` on its
//! view of the stack over its contiguous group. The router stays dense.
//!
//! Split over ranks (`crate::parallel`), every rank routes all tokens itself with the whole
//! router and holds its share of the shared expert's intermediate columns, and of the
//! routed experts either every expert's share of the columns (`ExpertSplit::Columns`) or
//! `E / world` whole experts (`ExpertSplit::Whole`; choices of another rank's experts get
//! weight zero here). Either way its output is a partial sum that the decoder all-reduces.

use crate::config::{Config, RouterConfig};
use crate::fp8_weight::Fp8Weight;
use crate::layers::{load_gate_up_down, swiglu, LinearWeight, Mlp, WeightBytes};
use crate::loader::WeightSource;
use crate::parallel::ExpertSplit;
use kiln::fp8::Granularity;
use kiln::{DType, Error, Result, Router, Tensor};

/// The experts' weights.
pub enum Experts {
    /// Dense, stacked: `gate_up` `[E, 2·I, H]`, `down` `[E, H, I]`.
    Stacked {
        /// Gate then up projection rows of every expert, `[E, 2·I, H]`.
        gate_up: Tensor,
        /// Down projections, `[E, H, I]`.
        down: Tensor,
    },
    /// FP8, stacked (when any expert is FP8; a dense one is quantised per row, as
    /// `LinearWeight::cat_rows` does): float8_e4m3fn values and f32 scales per row.
    Fp8 {
        /// Gate then up projection rows of every expert, `[E, 2·I, H]`.
        gate_up: Tensor,
        /// Their scales, `[E, 2·I]`.
        gate_up_scale: Tensor,
        /// Down projections, `[E, H, I]`.
        down: Tensor,
        /// Their scales, `[E, H]`.
        down_scale: Tensor,
    },
}

/// Each expert's weight as FP8 (a dense one quantised per row), stacked: values `[E, N, K]`
/// and row scales `[E, N]`.
fn stack_fp8(ws: Vec<LinearWeight>) -> Result<(Tensor, Tensor)> {
    let (mut values, mut scales) = (Vec::with_capacity(ws.len()), Vec::with_capacity(ws.len()));
    for w in ws {
        let w = match w {
            LinearWeight::Fp8(w) => w,
            LinearWeight::Dense(t) => Fp8Weight::quantize(&t, Granularity::Row)?,
        };
        scales.push(w.row_scale()?.reshape(&[w.out_features()])?);
        values.push(w.weight().clone());
    }
    Ok((Tensor::stack(&values, 0)?, Tensor::stack(&scales, 0)?))
}

/// A sparse mixture-of-experts feed-forward block: router, routed experts and, for
/// Qwen3.5-MoE, a gated shared expert.
pub struct MoeBlock {
    router: Tensor,
    /// `{prefix}.expert_bias` `[E]` (f32), with `RouterConfig::expert_bias`.
    expert_bias: Option<Tensor>,
    experts: Experts,
    top_k: usize,
    norm_topk_prob: bool,
    routing: RouterConfig,
    /// The shared expert and its gate's weight `[1, H]` (dense, like the router).
    shared: Option<(Mlp, Tensor)>,
    /// The first routed expert held and how many, when a rank holds whole experts (else
    /// all `E`, possibly each split by columns).
    held: Option<(usize, usize)>,
}

impl MoeBlock {
    /// The `{prefix}` weights: router (`gate`), experts `experts.{j}.*` (stacked when all
    /// are dense) and the shared expert when the config has one.
    pub fn load(src: &mut dyn WeightSource, prefix: &str, cfg: &Config) -> Result<Self> {
        let m = cfg.moe.as_ref().ok_or_else(|| Error::invalid("moe", "the config has no MoE section"))?;
        let (h, i, e) = (cfg.hidden_size, m.intermediate_size, m.num_experts);
        let router = src.get(&format!("{prefix}.gate.weight"), &[e, h])?;
        let expert_bias = if m.router.expert_bias {
            Some(src.get(&format!("{prefix}.expert_bias"), &[e])?.to_dtype(DType::F32)?)
        } else {
            None
        };
        let shard = src.shard();
        let held = match shard.experts {
            ExpertSplit::Whole if shard.is_split() => Some(shard.part("experts", e)?),
            _ => None,
        };
        let (first, count) = held.unwrap_or((0, e));
        let (mut gate_up, mut down) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for j in first..first + count {
            let names = cfg.arch.names().mlp.map(|n| format!("{prefix}.experts.{j}.{n}"));
            let names = names.each_ref().map(String::as_str);
            let (gu, dn) = load_gate_up_down(src, names, h, i, held.is_none())?;
            gate_up.push(gu);
            down.push(dn);
        }
        let experts = if gate_up.iter().chain(&down).any(LinearWeight::is_fp8) {
            let (gate_up, gate_up_scale) = stack_fp8(gate_up)?;
            let (down, down_scale) = stack_fp8(down)?;
            Experts::Fp8 { gate_up, gate_up_scale, down, down_scale }
        } else {
            let dense = |ws: Vec<LinearWeight>| -> Result<Tensor> {
                let ts: Option<Vec<Tensor>> = ws.into_iter().map(LinearWeight::into_dense).collect();
                Tensor::stack(&ts.expect("no FP8 expert"), 0)
            };
            Experts::Stacked { gate_up: dense(gate_up)?, down: dense(down)? }
        };
        let shared = match m.shared_expert_intermediate_size {
            Some(size) => Some((
                Mlp::load(src, &format!("{prefix}.shared_expert"), cfg.arch.names().mlp, h, size)?,
                src.get(&format!("{prefix}.shared_expert_gate.weight"), &[1, h])?,
            )),
            None => None,
        };
        Ok(MoeBlock {
            router,
            expert_bias,
            experts,
            top_k: m.top_k,
            norm_topk_prob: m.norm_topk_prob,
            routing: m.router.clone(),
            shared,
            held,
        })
    }

    fn num_experts(&self) -> usize {
        self.router.shape()[0]
    }

    /// Routed experts this block holds weights for.
    fn held_experts(&self) -> usize {
        self.held.map_or(self.num_experts(), |(_, n)| n)
    }

    /// Router choices `(weights, experts)` in terms of the held experts: a choice of expert
    /// `first + j` becomes `j`; a choice of another rank's expert becomes held expert 0 with
    /// weight 0 (it adds nothing; the expert kernels refuse indices past the held ones).
    fn to_held(&self, weights: Tensor, experts: Tensor) -> Result<(Tensor, Tensor)> {
        let Some((first, count)) = self.held else { return Ok((weights, experts)) };
        let local = experts.sub_scalar(first as f64)?;
        let (no_weight, no_expert) = (weights.zeros_like()?, local.zeros_like()?);
        let (mut w, mut j) = (weights, local);
        for elsewhere in [j.lt_scalar(0.0)?, j.ge_scalar(count as f64)?] {
            w = Tensor::where_cond(&elsewhere, &no_weight, &w)?;
            j = Tensor::where_cond(&elsewhere, &no_expert, &j)?;
        }
        Ok((w, j))
    }

    /// The routed experts' weights.
    pub fn experts(&self) -> &Experts {
        &self.experts
    }

    /// The router counts as dense, not linear; stacked dense experts as linear.
    pub fn weight_bytes(&self, acc: &mut WeightBytes) {
        acc.add_dense(&self.router);
        if let Some(b) = &self.expert_bias {
            acc.add_dense(b);
        }
        if let Some((mlp, gate)) = &self.shared {
            mlp.weight_bytes(acc);
            acc.add_dense(gate);
        }
        match &self.experts {
            Experts::Stacked { gate_up, down } => {
                for t in [gate_up, down] {
                    acc.add_linear_bytes(t.nbytes(), false);
                }
            }
            Experts::Fp8 { gate_up, gate_up_scale, down, down_scale } => {
                for (v, s) in [(gate_up, gate_up_scale), (down, down_scale)] {
                    acc.add_linear_bytes(v.nbytes() + s.nbytes(), true);
                }
            }
        }
    }

    /// `x` `[…, H]` → `[…, H]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = x.size(-1)?;
        let x2 = x.reshape(&[x.numel() / h, h])?;
        let n = x2.shape()[0];
        let (weights, experts) = self.route(&x2)?;
        let (weights, experts) = self.to_held(weights, experts)?;
        let routed = if n * self.top_k <= self.num_experts() {
            self.gathered(&x2, &experts, &weights)?
        } else {
            self.grouped(&x2, &experts, &weights)?
        };
        let out = match &self.shared {
            Some((mlp, gate)) => routed.add(&mlp.forward(&x2)?.mul(&x2.linear(gate, None)?.sigmoid()?)?)?,
            None => routed,
        };
        out.reshape(x.shape())
    }

    /// Router weights of the top-k experts (scored in f32), `[n, k]` f32, and the experts'
    /// indices `[n, k]` (int64): one fused `router_topk` launch after the router's GEMV
    /// (and a scaling when `routed_scaling_factor` is not 1).
    pub fn route(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let logits = x.linear(&self.router, None)?;
        let r = &self.routing;
        let router =
            if r.sigmoid { Router::Sigmoid { bias: self.expert_bias.as_ref() } } else { Router::Softmax };
        let (mut w, idx) =
            logits.router_topk(self.top_k, router, self.norm_topk_prob.then_some(r.renorm_eps))?;
        if r.scale != 1.0 {
            w = w.mul_scalar(r.scale)?;
        }
        Ok((w, idx))
    }

    /// The routed output `[n, H]` with each slot against its own expert's weights — decode,
    /// two launches: gate_up and SwiGLU by [`Tensor::expert_swiglu`], then down and the
    /// weighted sum by [`Tensor::expert_linear_sum`] (their `_fp8` forms for FP8 experts).
    pub fn gathered(&self, x: &Tensor, experts: &Tensor, weights: &Tensor) -> Result<Tensor> {
        match &self.experts {
            Experts::Stacked { gate_up, down } => {
                x.expert_swiglu(gate_up, experts)?.expert_linear_sum(down, experts, weights)
            }
            Experts::Fp8 { gate_up, gate_up_scale, down, down_scale } => x
                .expert_swiglu_fp8(gate_up, gate_up_scale, experts)?
                .expert_linear_sum_fp8(down, down_scale, experts, weights),
        }
    }

    /// The routed output `[n, H]` by running each expert once over its tokens: the pairs
    /// grouped by expert on the device, the tokens gathered in group order, the experts
    /// run, the outputs scattered back to (token, slot) order and summed by the router
    /// weights, as one `[1, k] @ [k, H]` product per token.
    pub fn grouped(&self, x: &Tensor, experts: &Tensor, weights: &Tensor) -> Result<Tensor> {
        let (n, h) = (x.shape()[0], x.shape()[1]);
        let g = experts.expert_groups(self.held_experts())?;
        let xs = x.index_select(0, &g.rows)?;
        let ys = match &self.experts {
            // Every expert in one grouped_mm per projection (the weights' transposed views:
            // F.linear's [out, in] per expert); no host sync.
            Experts::Stacked { gate_up, down } => {
                swiglu(&xs.grouped_mm(&gate_up.transpose(1, 2)?, &g.ends)?)?
                    .grouped_mm(&down.transpose(1, 2)?, &g.ends)?
            }
            // The FP8 GEMM takes one weight: the group ends are read back (the one host sync
            // of this path) and each expert with tokens runs one linear pair over its rows,
            // on its views of the stacks. Rows past the last end (none, with valid indices)
            // stay zero.
            Experts::Fp8 { gate_up, gate_up_scale, down, down_scale } => {
                let linear = |x: &Tensor, (v, s): (&Tensor, &Tensor), e: usize| {
                    x.linear_fp8(&v.narrow(0, e, 1)?.squeeze(0)?, &s.narrow(0, e, 1)?.squeeze(0)?, None)
                };
                let (gu, dn) = ((gate_up, gate_up_scale), (down, down_scale));
                let ys = Tensor::zeros(&[xs.shape()[0], h], x.dtype(), x.device())?;
                let mut start = 0;
                for (e, &end) in g.ends.to_vec::<i32>()?.iter().enumerate() {
                    let len = end as usize - start;
                    if len > 0 {
                        let xe = xs.narrow(0, start, len)?;
                        ys.narrow(0, start, len)?.copy_(&linear(&swiglu(&linear(&xe, gu, e)?)?, dn, e)?)?;
                    }
                    start = end as usize;
                }
                ys
            }
        };
        let y = ys.index_select(0, &g.slot_rows)?.reshape(&[n, self.top_k, h])?;
        weights.to_dtype(x.dtype())?.unsqueeze(1)?.matmul(&y)?.reshape(&[n, h])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::Quantize;
    use crate::loader::RandomSource;
    use kiln::Device;

    /// The fixture qwen3_moe config and one MoE block of seeded random f32 weights.
    fn fixture_block(quantize: Quantize) -> (Config, MoeBlock) {
        let path = crate::config::fixtures_dir().join("models/qwen3_moe/config.json");
        let cfg = Config::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut src = RandomSource::new(Device::Cpu, DType::F32, 3);
        src.std = 0.3;
        src.quantize = quantize;
        let block = MoeBlock::load(&mut src, "m", &cfg).unwrap();
        (cfg, block)
    }

    /// The two ways of running the experts agree (and differ from a wrong routing).
    #[test]
    fn gathered_and_grouped_agree() {
        let (cfg, block) = fixture_block(Quantize::None);
        let x = Tensor::randn(&[5, cfg.hidden_size], 9, DType::F32, Device::Cpu).unwrap();
        let (weights, experts) = block.route(&x).unwrap();
        let gathered = |e: &Tensor| block.gathered(&x, e, &weights).unwrap().to_vec::<f32>().unwrap();
        let a = gathered(&experts);
        let b = block.grouped(&x, &experts, &weights).unwrap().to_vec::<f32>().unwrap();
        let worst = a.iter().zip(&b).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-5, "max |Δ| {worst}");
        let other = experts.add_scalar(1.0).unwrap().remainder_scalar(8.0).unwrap();
        let c = gathered(&other);
        assert!(a.iter().zip(&c).any(|(p, q)| (p - q).abs() > 1e-3));
    }

    /// FP8 experts compute what dense experts holding the same dequantised weights
    /// compute: grouped (a prompt) up to the activations' per-row e4m3 rounding, gathered
    /// (decode: activations kept in their dtype) up to summation order; a swapped expert
    /// would be off by the size of the outputs.
    #[test]
    fn fp8_experts_match_their_dequantised_weights() {
        let (cfg, block) = fixture_block(Quantize::Fp8);
        let Experts::Fp8 { gate_up, gate_up_scale, down, down_scale } = &block.experts else {
            panic!("fp8 experts are stacked as fp8")
        };
        let deq =
            |v: &Tensor, s: &Tensor| v.to_dtype(DType::F32).unwrap().mul(&s.unsqueeze(2).unwrap()).unwrap();
        let dense = MoeBlock {
            router: block.router.clone(),
            expert_bias: None,
            experts: Experts::Stacked { gate_up: deq(gate_up, gate_up_scale), down: deq(down, down_scale) },
            top_k: block.top_k,
            norm_topk_prob: block.norm_topk_prob,
            routing: RouterConfig::SOFTMAX,
            shared: None,
            held: None,
        };
        let x = Tensor::randn(&[5, cfg.hidden_size], 9, DType::F32, Device::Cpu).unwrap();
        let a = block.forward(&x).unwrap().to_vec::<f32>().unwrap();
        let b = dense.forward(&x).unwrap().to_vec::<f32>().unwrap();
        let scale = b.iter().map(|v| v.abs()).fold(0f32, f32::max);
        let worst = a.iter().zip(&b).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max);
        println!("fp8 experts vs dequantised dense: max |Δ| {worst:.4} of max |y| {scale:.3}");
        // Two e4m3 activation roundings (2^-4 relative each, at most) per expert.
        assert!(worst <= 0.125 * scale, "max |Δ| {worst} vs max |y| {scale}");
        // Decoding (one token) runs gathered, on the activations as they are.
        let one = x.narrow(0, 0, 1).unwrap();
        let a1 = block.forward(&one).unwrap().to_vec::<f32>().unwrap();
        let b1 = dense.forward(&one).unwrap().to_vec::<f32>().unwrap();
        let worst = a1.iter().zip(&b1).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-5 * scale, "decode: max |Δ| {worst} vs max |y| {scale}");
    }
}
