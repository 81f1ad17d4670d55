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
//! All in f32, made of kiln ops (so on every device they run on). A single token steps the
//! recurrence; a prompt runs transformers' chunked form: within a chunk of up to 64 tokens
//! the updates are condensed into matmuls (the UT transform), and only the state passes
//! from chunk to chunk, so the op count grows with T / 64 instead of with T.

use crate::causal_conv::CausalConv;
use crate::config::{Config, GatedDeltaConfig};
use crate::kv_cache::KvCache;
use crate::layers::{Linear, WeightBytes};
use crate::loader::WeightSource;
use kiln::ops::PadMode;
use kiln::{DType, Error, GatedDelta as GatedDeltaStep, Result, Tensor};

/// Qwen3.5's Gated DeltaNet mixer of one layer: the input projections, the causal
/// convolution over q, k and v, the recurrent delta-rule update, gated norm and output
/// projection.
pub struct GatedDelta {
    /// `in_proj_qkv`, `in_proj_z`, `in_proj_b` and `in_proj_a` stacked at load, in that
    /// order: one GEMV per decode step, its output sliced.
    in_proj: Linear,
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
            in_proj: Linear::cat_rows(vec![
                linear(src, "in_proj_qkv", c, h)?,
                linear(src, "in_proj_z", vd, h)?,
                linear(src, "in_proj_b", hv, h)?,
                linear(src, "in_proj_a", hv, h)?,
            ])?,
            conv: CausalConv::load(src, &format!("{prefix}.conv1d"), c, g.conv_kernel, false)?,
            neg_a,
            dt_bias,
            norm: src.get(&format!("{prefix}.norm.weight"), &[g.value_dim])?.to_dtype(DType::F32)?,
            eps: cfg.rms_norm_eps,
            out_proj: linear(src, "out_proj", h, vd)?,
            dims: g,
        })
    }

    /// The causal convolution over queries, keys and values.
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
        let (c, vd) = (g.conv_channels(), hv * dv);
        let proj = self.in_proj.forward(x)?;
        let part = |at: usize, n: usize| proj.narrow(-1, at, n);
        let (z, b_gate, a_gate) = (part(c, vd)?, part(c + vd, hv)?, part(c + vd + hv, hv)?);
        let qkv = self.conv.forward(&part(0, c)?, cache, layer, true)?;
        if t == 1 && (!x.device().is_cuda() || kiln::cuda::ops::gated_delta_fits(dk, dv)) {
            // A decode token: the recurrence, norm and gate in one op (one kernel on CUDA).
            let p = GatedDeltaStep {
                neg_a: &self.neg_a,
                dt_bias: &self.dt_bias,
                norm: &self.norm,
                eps: self.eps,
                key_heads: hk,
            };
            let rows = |y: Tensor| -> Result<Tensor> {
                let n = y.size(-1)?;
                y.reshape(&[b, n])
            };
            let state = cache.recurrent_state_in_place(layer)?;
            let y = rows(qkv)?.gated_delta_step(&rows(b_gate)?, &rows(a_gate)?, &rows(z)?, state, p)?;
            return self.out_proj.forward(&y.reshape(&[b, 1, hv * dv])?);
        }
        let qkv = qkv.to_dtype(DType::F32)?;
        // Key heads shared by `hv / hk` consecutive value heads (repeat_interleave).
        let heads = |off: usize| -> Result<Tensor> {
            let y = qkv.narrow(-1, off, hk * dk)?.reshape(&[b, t, hk, 1, dk])?;
            l2norm(&y.broadcast_to(&[b, t, hk, hv / hk, dk])?.reshape(&[b, t, hv, dk])?)
        };
        let q = heads(0)?.mul_scalar(1.0 / (dk as f64).sqrt())?;
        let k = heads(hk * dk)?;
        let v = qkv.narrow(-1, 2 * hk * dk, hv * dv)?.reshape(&[b, t, hv, dv])?;
        let beta = b_gate.to_dtype(DType::F32)?.sigmoid()?;
        let a = a_gate.to_dtype(DType::F32)?.add(&self.dt_bias)?;
        let steps = Steps { q, k, v, beta, g: softplus(&a)?.mul(&self.neg_a)? };
        let state = cache.recurrent_state(layer)?;
        let (o, state) = match t {
            1 => recurrent_step(&steps, state)?,
            _ => chunked(&steps, state)?,
        };
        cache.set_recurrent_state(layer, &state)?;
        // Gated RMS norm per head: weight · norm(o) · silu(z), in f32.
        let z = z.reshape(&[b, t, hv, dv])?.to_dtype(DType::F32)?;
        let normed = o.rms_norm(&[dv], Some(&self.norm), Some(self.eps))?;
        let y = normed.mul(&z.silu()?)?.to_dtype(x.dtype())?.reshape(&[b, t, hv * dv])?;
        self.out_proj.forward(&y)
    }

    pub(crate) fn weight_bytes(&self, acc: &mut WeightBytes) {
        for l in [&self.in_proj, &self.out_proj] {
            l.weight_bytes(acc);
        }
        self.conv.weight_bytes(acc);
        for t in [&self.neg_a, &self.dt_bias, &self.norm] {
            acc.add_dense(t);
        }
    }
}

/// What the delta rule reads per token, f32: `q`, `k` `[B, T, H, dk]` (L2-normalised, `q`
/// scaled), `v` `[B, T, H, dv]`, and per head `beta` and the log-decay `g` `[B, T, H]`.
struct Steps {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    g: Tensor,
}

/// One token (`T = 1`) through the recurrence of the module docs from `state`
/// `[B, H, dk, dv]`; the output is `[B, 1, H, dv]`.
fn recurrent_step(x: &Steps, state: Tensor) -> Result<(Tensor, Tensor)> {
    let Steps { q, k, v, beta, g } = x;
    // Per (batch, head): column vectors `[.., d, 1]`, a row vector `[.., 1, dv]`, scalars `[.., 1, 1]`.
    let col = |y: &Tensor| y.squeeze(1)?.unsqueeze(-1);
    let (qs, ks, vs) = (col(q)?, col(k)?, v.squeeze(1)?.unsqueeze(-2)?);
    let (bs, ds) = (col(beta)?.unsqueeze(-1)?, col(&g.exp()?)?.unsqueeze(-1)?);
    let state = state.mul(&ds)?;
    let remembered = ks.transpose(-1, -2)?.matmul(&state)?;
    let delta = vs.sub(&remembered)?.mul(&bs)?;
    let state = state.add(&ks.matmul(&delta)?)?;
    let o = qs.transpose(-1, -2)?.matmul(&state)?.transpose(1, 2)?;
    Ok((o, state))
}

/// Tokens per chunk of the prompt form (transformers' and the FLA kernels' choice).
const CHUNK: usize = 64;

/// The gated delta rule over `T > 1` tokens from `state` `[B, H, dk, dv]`, transformers'
/// `torch_chunk_gated_delta_rule`. Within a chunk the delta updates' interactions form a
/// unit lower-triangular system (`I + L`, `L = tril(β k kᵀ ⊙ decay, −1)`), solved once for
/// the values and the decayed keys; the loop then only carries the state across chunks.
fn chunked(x: &Steps, state: Tensor) -> Result<(Tensor, Tensor)> {
    let Steps { q, k, v, beta, g } = x;
    let (b, t, h) = (q.size(0)?, q.size(1)?, q.size(2)?);
    let c = t.min(CHUNK);
    let n = t.div_ceil(c);
    // Heads first, time padded (with zeros: no update, no decay) to whole chunks.
    let chunks = |x: &Tensor| -> Result<Tensor> {
        let d = x.size(3)?;
        x.transpose(1, 2)?
            .pad(&[0, 0, 0, (n * c - t) as isize], PadMode::Constant(0.0))?
            .reshape(&[b, h, n, c, d])
    };
    let per_token = |x: &Tensor| chunks(&x.unsqueeze(-1)?);
    let (q, k, v, beta, g) = (chunks(q)?, chunks(k)?, chunks(v)?, per_token(beta)?, per_token(g)?);
    let tri = Triangles::new(c, q.device())?;
    // cum[i] = Σ_{j ≤ i} g[j] within the chunk; decay[i, j] = exp(cum[i] − cum[j]) for j ≤ i.
    let cum = g.transpose(-1, -2)?.matmul(&tri.upper_ones)?.transpose(-1, -2)?;
    let zero = Tensor::zeros(&[], DType::F32, q.device())?;
    let decay = Tensor::where_cond(&tri.lower, &cum.sub(&cum.transpose(-1, -2)?)?.exp()?, &zero)?;
    let (k_beta, v_beta) = (k.mul(&beta)?, v.mul(&beta)?);
    let kt = k.transpose(-1, -2)?;
    let cum_exp = cum.exp()?;
    // (I + L) X = [β v, β k e^cum]: one unit-lower solve for both right-hand sides (the
    // solve reads only L, the strict lower triangle).
    let (dv, dk) = (v.size(4)?, k.size(4)?);
    let rhs = Tensor::cat(&[v_beta, k_beta.mul(&cum_exp)?], -1)?;
    let solved = k_beta.matmul(&kt)?.mul(&decay)?.linalg_solve_triangular(&rhs, false, true, true)?;
    let (new_values, k_cumdecay) = (solved.narrow(-1, 0, dv)?, solved.narrow(-1, dv, dk)?);
    let intra = q.matmul(&kt)?.mul(&decay)?;
    let last = cum.narrow(3, c - 1, 1)?;
    let q_decayed = q.mul(&cum_exp)?;
    let k_to_end = k.mul(&last.sub(&cum)?.exp()?)?;
    let chunk_decay = last.exp()?;

    let mut state = state;
    let mut outs = Vec::with_capacity(n);
    for i in 0..n {
        let at = |x: &Tensor| x.narrow(2, i, 1)?.squeeze(2);
        let v_new = at(&new_values)?.sub(&at(&k_cumdecay)?.matmul(&state)?)?;
        outs.push(at(&q_decayed)?.matmul(&state)?.add(&at(&intra)?.matmul(&v_new)?)?);
        state = state.mul(&at(&chunk_decay)?)?.add(&at(&k_to_end)?.transpose(-1, -2)?.matmul(&v_new)?)?;
    }
    let o = Tensor::stack(&outs, 2)?.reshape(&[b, h, n * c, dv])?.narrow(2, 0, t)?.transpose(1, 2)?;
    Ok((o, state))
}

/// The masks and constant matrices of one chunk size, built on the device.
struct Triangles {
    /// `j ≤ i` (bool).
    lower: Tensor,
    /// `[i ≤ j]` as f32: a row vector times it is its running sum.
    upper_ones: Tensor,
}

impl Triangles {
    fn new(c: usize, device: kiln::Device) -> Result<Self> {
        let idx = Tensor::arange(0.0, c as f64, 1.0, DType::F32, device)?;
        let (i, j) = (idx.reshape(&[c, 1])?, idx.reshape(&[1, c])?);
        Ok(Triangles { lower: j.le(&i)?, upper_ones: i.le(&j)?.to_dtype(DType::F32)? })
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

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::Device;

    impl Steps {
        /// Token `i` alone.
        fn token(&self, i: usize) -> Steps {
            let at = |x: &Tensor| x.narrow(1, i, 1).unwrap();
            Steps { q: at(&self.q), k: at(&self.k), v: at(&self.v), beta: at(&self.beta), g: at(&self.g) }
        }
    }

    /// The prompt form over several chunks (the last one padded), from a non-zero state,
    /// against the recurrence a token at a time: the same outputs and final state.
    #[test]
    fn chunked_equals_token_by_token() {
        let (b, t, h, dk, dv) = (2, 2 * CHUNK + 22, 3, 8, 5);
        let rand = |shape: &[usize], seed| Tensor::randn(shape, seed, DType::F32, Device::Cpu).unwrap();
        let q = l2norm(&rand(&[b, t, h, dk], 1)).unwrap();
        let k = l2norm(&rand(&[b, t, h, dk], 2)).unwrap();
        let v = rand(&[b, t, h, dv], 3);
        let beta = rand(&[b, t, h], 4).sigmoid().unwrap();
        // Decays between exp(−2) and 1, as softplus · −exp(A_log) gives.
        let g = rand(&[b, t, h], 5).sigmoid().unwrap().mul_scalar(-2.0).unwrap();
        let state0 = rand(&[b, h, dk, dv], 6);

        let all = Steps { q, k, v, beta, g };
        let (o, state) = chunked(&all, state0.clone()).unwrap();
        let mut s = state0;
        let mut outs = Vec::new();
        for i in 0..t {
            let (oi, si) = recurrent_step(&all.token(i), s).unwrap();
            outs.push(oi);
            s = si;
        }
        let want = Tensor::cat(&outs, 1).unwrap();
        assert_eq!(o.shape(), want.shape());
        let err = |a: &Tensor, b: &Tensor| {
            a.sub(b).unwrap().abs().unwrap().max(&[], false).unwrap().to_vec::<f32>().unwrap()[0]
        };
        let scale = want.abs().unwrap().max(&[], false).unwrap().to_vec::<f32>().unwrap()[0];
        assert!(err(&o, &want) < 1e-4 * scale, "outputs off by {} (max {scale})", err(&o, &want));
        assert!(err(&state, &s) < 1e-4 * scale.max(1.0), "state off by {}", err(&state, &s));
    }

    /// Seconds for a prompt's delta rule (16 heads of 128 dims), chunked and a token at a
    /// time: `cargo test --release -p kiln-models --lib -- --ignored --nocapture prompt_forms`.
    #[test]
    #[ignore = "a timing, not a check"]
    fn prompt_forms_timing() {
        let (h, d) = (16, 128);
        for t in [512, 2048] {
            let rand = |shape: &[usize], seed| Tensor::randn(shape, seed, DType::F32, Device::Cpu).unwrap();
            let (q, k) = (l2norm(&rand(&[1, t, h, d], 1)).unwrap(), l2norm(&rand(&[1, t, h, d], 2)).unwrap());
            let v = rand(&[1, t, h, d], 3);
            let beta = rand(&[1, t, h], 4).sigmoid().unwrap();
            let g = rand(&[1, t, h], 5).sigmoid().unwrap().mul_scalar(-2.0).unwrap();
            let s0 = Tensor::zeros(&[1, h, d, d], DType::F32, Device::Cpu).unwrap();
            let all = Steps { q, k, v, beta, g };
            let t0 = std::time::Instant::now();
            chunked(&all, s0.clone()).unwrap();
            let chunked_s = t0.elapsed().as_secs_f64();
            let t0 = std::time::Instant::now();
            let mut s = s0;
            for i in 0..t {
                s = recurrent_step(&all.token(i), s).unwrap().1;
            }
            let steps_s = t0.elapsed().as_secs_f64();
            println!("T={t} H={h} d={d}: chunked {chunked_s:.3} s, token by token {steps_s:.3} s");
        }
    }
}
