//! Qwen3.5's Gated DeltaNet, the mixer of its linear-attention layers. Per token `t` and
//! value head, with a state `S` `[key_dim, value_dim]` kept between steps:
//!
//! ```text
//! S ← exp(g_t) · S                       decay, g_t = −exp(A_log) · softplus(a_t + dt_bias)
//! S ← S + k_t ⊗ β_t (v_t − Sᵀ k_t)       delta rule, β_t = sigmoid(b_t)
//! o_t = Sᵀ q_t
//! ```
//!
//! with q, k, v from `in_proj_qkv` through a causal depthwise convolution of
//! `conv_kernel` taps and SiLU, q and k L2-normalised (q also scaled by 1/√key_dim), key
//! heads shared by `value_heads / key_heads` value heads. The output is RMS-normalised per
//! head, gated by `silu(in_proj_z(x))`, then `out_proj`.
//!
//! The recurrence runs token by token in f32, as transformers' recurrent form does (its
//! chunked prompt form computes the same function). Made of kiln ops: a reference for a
//! dedicated kernel, and slow on long prompts (several ops a token).

use crate::causal_conv::CausalConv;
use crate::config::{Config, GatedDeltaConfig};
use crate::kv_cache::KvCache;
use crate::layers::{Linear, WeightBytes};
use crate::loader::WeightSource;
use kiln::{DType, Error, Result, Tensor};

pub struct GatedDelta {
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    conv: CausalConv,
    /// `−exp(A_log)` and `dt_bias`, `[value_heads]`, f32.
    neg_a: Tensor,
    dt_bias: Tensor,
    /// The per-head gated RMS norm's weight `[value_dim]` (plain weight, not 1 + weight),
    /// f32 as the norm runs.
    norm: Tensor,
    eps: f64,
    out_proj: Linear,
    dims: GatedDeltaConfig,
}

impl GatedDelta {
    /// The `{prefix}` (`…linear_attn`) weights.
    pub fn load(src: &mut dyn WeightSource, prefix: &str, cfg: &Config) -> Result<Self> {
        let g = cfg
            .gated_delta
            .clone()
            .ok_or_else(|| Error::invalid("gated_delta", "the config has no linear-attention layers"))?;
        let (h, hv) = (cfg.hidden_size, g.value_heads);
        let (c, vd) = (g.conv_channels(), g.value_heads * g.value_dim);
        let f32_param = |src: &mut dyn WeightSource, n: &str| {
            src.get(&format!("{prefix}.{n}"), &[hv])?.to_dtype(DType::F32)
        };
        let neg_a = f32_param(src, "A_log")?.exp()?.neg()?;
        let dt_bias = f32_param(src, "dt_bias")?;
        let linear = |src: &mut dyn WeightSource, n: &str, out: usize, inp: usize| {
            Linear::load(src, &format!("{prefix}.{n}"), out, inp, false)
        };
        Ok(GatedDelta {
            in_proj_qkv: linear(src, "in_proj_qkv", c, h)?,
            in_proj_z: linear(src, "in_proj_z", vd, h)?,
            in_proj_b: linear(src, "in_proj_b", hv, h)?,
            in_proj_a: linear(src, "in_proj_a", hv, h)?,
            conv: CausalConv::load(src, &format!("{prefix}.conv1d"), c, g.conv_kernel, false)?,
            neg_a,
            dt_bias,
            norm: src.get(&format!("{prefix}.norm.weight"), &[g.value_dim])?.to_dtype(DType::F32)?,
            eps: cfg.rms_norm_eps,
            out_proj: linear(src, "out_proj", h, vd)?,
            dims: g,
        })
    }

    pub fn conv(&self) -> &CausalConv {
        &self.conv
    }

    /// The recurrent state's shape for `batch` sequences: `[B, value_heads, key_dim, value_dim]`.
    pub fn state_shape(&self, batch: usize) -> [usize; 4] {
        let g = &self.dims;
        [batch, g.value_heads, g.key_dim, g.value_dim]
    }

    /// `x` `[B, T, H]` at positions `cache.len()..+T`; updates the cache's convolution and
    /// recurrent states of linear-attention layer `layer`.
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache, layer: usize) -> Result<Tensor> {
        let (b, t) = (x.size(0)?, x.size(1)?);
        let g = &self.dims;
        let (hk, hv, dk, dv) = (g.key_heads, g.value_heads, g.key_dim, g.value_dim);
        let qkv =
            self.conv.forward(&self.in_proj_qkv.forward(x)?, cache, layer)?.silu()?.to_dtype(DType::F32)?;
        // Key heads shared by `hv / hk` consecutive value heads (repeat_interleave).
        let heads = |off: usize| -> Result<Tensor> {
            let y = qkv.narrow(-1, off, hk * dk)?.reshape(&[b, t, hk, 1, dk])?;
            l2norm(&y.broadcast_to(&[b, t, hk, hv / hk, dk])?.reshape(&[b, t, hv, dk])?)
        };
        let q = heads(0)?.mul_scalar(1.0 / (dk as f64).sqrt())?;
        let k = heads(hk * dk)?;
        let v = qkv.narrow(-1, 2 * hk * dk, hv * dv)?.reshape(&[b, t, hv, dv])?;
        let beta = self.in_proj_b.forward(x)?.to_dtype(DType::F32)?.sigmoid()?;
        let a = self.in_proj_a.forward(x)?.to_dtype(DType::F32)?.add(&self.dt_bias)?;
        let decay = softplus(&a)?.mul(&self.neg_a)?.exp()?;

        let mut state = cache.recurrent_state(layer)?;
        let mut outs = Vec::with_capacity(t);
        for s in 0..t {
            // Per (batch, head): column vectors `[.., dk, 1]`, row vectors `[.., 1, dv]`.
            let step = |y: &Tensor, d: usize| y.narrow(1, s, 1)?.reshape(&[b, hv, d]);
            let (qs, ks, vs) = (step(&q, dk)?, step(&k, dk)?, step(&v, dv)?);
            let (bs, ds) = (step(&beta, 1)?, step(&decay, 1)?.unsqueeze(-1)?);
            state = state.mul(&ds)?;
            let ks_row = ks.unsqueeze(-2)?;
            let remembered = ks_row.matmul(&state)?.squeeze(-2)?;
            let delta = vs.sub(&remembered)?.mul(&bs)?;
            state = state.add(&ks.unsqueeze(-1)?.matmul(&delta.unsqueeze(-2)?)?)?;
            outs.push(qs.unsqueeze(-2)?.matmul(&state)?);
        }
        cache.set_recurrent_state(layer, &state)?;
        let o = Tensor::cat(&outs, 2)?.transpose(1, 2)?;
        // Gated RMS norm per head: weight · norm(o) · silu(z), in f32.
        let z = self.in_proj_z.forward(x)?.reshape(&[b, t, hv, dv])?.to_dtype(DType::F32)?;
        let normed = o.rms_norm(&[dv], Some(&self.norm), Some(self.eps))?;
        let y = normed.mul(&z.silu()?)?.to_dtype(x.dtype())?.reshape(&[b, t, hv * dv])?;
        self.out_proj.forward(&y)
    }

    pub fn weight_bytes(&self, acc: &mut WeightBytes) {
        for l in [&self.in_proj_qkv, &self.in_proj_z, &self.in_proj_b, &self.in_proj_a, &self.out_proj] {
            l.weight_bytes(acc);
        }
        self.conv.weight_bytes(acc);
        for t in [&self.neg_a, &self.dt_bias, &self.norm] {
            acc.add_dense(t);
        }
    }
}

/// `x / sqrt(Σ x² + 1e-6)` over the last dim (the FLA library's l2norm, as transformers).
fn l2norm(x: &Tensor) -> Result<Tensor> {
    x.mul(&x.square()?.sum(&[-1], true)?.add_scalar(1e-6)?.rsqrt()?)
}

/// `log(1 + exp(x))`, as `max(x, 0) + log(1 + exp(−|x|))` so large `x` cannot overflow.
fn softplus(x: &Tensor) -> Result<Tensor> {
    x.relu()?.add(&x.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?)
}
