//! The building blocks of the decoder families: linear, RMS norm, gated MLP, rotary
//! embedding and grouped-query attention over the KV cache, composed of kiln ops.
//!
//! A linear layer's weight is dense (the model dtype) or FP8 ([`LinearWeight`]): FP8
//! weights come from an FP8 checkpoint or from quantising on load (`Quantize::Fp8`), and
//! serve the attention projections, the dense MLPs and the MoE experts. Embeddings, norms,
//! the LM head and the MoE router always stay dense.

use crate::config::{Config, RopeScaling};
use crate::fp8_weight::Fp8Weight;
use crate::kv_cache::KvCache;
use crate::loader::WeightSource;
use kiln::fp8::Granularity;
use kiln::{DType, Device, HeadNorm, KvSlots, Result, RotaryStart, Sdpa, Tensor};

/// The `[out, in]` weight of a linear layer, as stored (`x @ weight.T`).
#[derive(Clone, Debug)]
pub enum LinearWeight {
    /// In the model dtype; runs `Tensor::linear`.
    Dense(Tensor),
    /// float8_e4m3fn values with f32 per-tensor or per-output-channel scales; runs
    /// [`Fp8Weight::forward`], i.e. `Tensor::linear_fp8` (at decode on CUDA the 16-bit
    /// activations meet the widened weight; otherwise they are quantised per row on the
    /// fly), output in the activations' dtype.
    Fp8(Fp8Weight),
}

impl LinearWeight {
    /// Per-output-channel FP8 of a dense `[out, in]` weight (what `--quantize fp8` does).
    pub fn quantize_fp8(w: &Tensor) -> Result<LinearWeight> {
        Ok(LinearWeight::Fp8(Fp8Weight::quantize(w, Granularity::Row)?))
    }

    /// Whether an `[_, in_features]` weight can run in FP8: the FP8 GEMM needs K to be a
    /// multiple of 16. Ineligible weights stay (or are made) dense.
    pub fn fp8_eligible(in_features: usize) -> bool {
        in_features > 0 && in_features.is_multiple_of(16)
    }

    /// `x @ weight.T (+ bias)`, in `x`'s dtype.
    pub fn forward(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        match self {
            LinearWeight::Dense(w) => x.linear(w, bias),
            LinearWeight::Fp8(w) => w.forward(x, bias),
        }
    }

    /// Rows of the weight, the output features.
    pub fn out_features(&self) -> usize {
        match self {
            LinearWeight::Dense(w) => w.shape()[0],
            LinearWeight::Fp8(w) => w.out_features(),
        }
    }

    /// Columns of the weight, the input features.
    pub fn in_features(&self) -> usize {
        match self {
            LinearWeight::Dense(w) => w.shape()[1],
            LinearWeight::Fp8(w) => w.in_features(),
        }
    }

    /// Whether the weight is held in FP8.
    pub fn is_fp8(&self) -> bool {
        matches!(self, LinearWeight::Fp8(_))
    }

    /// Bytes held on the device (FP8: values plus scales, `Fp8Weight::nbytes`).
    pub fn nbytes(&self) -> usize {
        match self {
            LinearWeight::Dense(w) => w.nbytes(),
            LinearWeight::Fp8(w) => w.nbytes(),
        }
    }

    /// The dense tensor, or `None` for an FP8 weight.
    pub fn into_dense(self) -> Option<Tensor> {
        match self {
            LinearWeight::Dense(t) => Some(t),
            LinearWeight::Fp8(_) => None,
        }
    }

    /// The rows of `parts` one after another, `[Σ out, in]` (gate and up fused into one
    /// matmul). All dense: a dense concatenation. Any FP8: an FP8 weight with per-row
    /// scales (per-tensor scales are broadcast to their rows, a dense part is quantised
    /// per row), which computes exactly what the parts compute separately.
    pub fn cat_rows(parts: Vec<LinearWeight>) -> Result<LinearWeight> {
        if parts.len() == 1 {
            return Ok(parts.into_iter().next().expect("one part"));
        }
        if parts.iter().all(|p| !p.is_fp8()) {
            let dense: Option<Vec<Tensor>> = parts.into_iter().map(LinearWeight::into_dense).collect();
            return Ok(LinearWeight::Dense(Tensor::cat(&dense.expect("all dense"), 0)?));
        }
        let (mut values, mut scales) = (Vec::with_capacity(parts.len()), Vec::with_capacity(parts.len()));
        for p in parts {
            let w = match p {
                LinearWeight::Fp8(w) => w,
                LinearWeight::Dense(t) => Fp8Weight::quantize(&t, Granularity::Row)?,
            };
            scales.push(w.row_scale()?);
            values.push(w.weight().clone());
        }
        let w = Fp8Weight::from_parts(Tensor::cat(&values, 0)?, Tensor::cat(&scales, 0)?)?;
        Ok(LinearWeight::Fp8(w))
    }
}

/// Bytes of a model's weights, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightBytes {
    /// Every weight (a tied LM head counted once).
    pub total: usize,
    /// The linear layers' weights (attention projections, MLPs, experts; not their
    /// biases, the router or the LM head), dense or FP8.
    pub linear: usize,
    /// The part of `linear` held in FP8, values plus scales.
    pub fp8: usize,
}

impl WeightBytes {
    pub(crate) fn add_dense(&mut self, t: &Tensor) {
        self.total += t.nbytes();
    }

    pub(crate) fn add_linear(&mut self, w: &LinearWeight) {
        self.add_linear_bytes(w.nbytes(), w.is_fp8());
    }

    /// `bytes` of linear-layer weights, FP8 or dense (e.g. stacked dense experts).
    pub fn add_linear_bytes(&mut self, bytes: usize, fp8: bool) {
        self.total += bytes;
        self.linear += bytes;
        if fp8 {
            self.fp8 += bytes;
        }
    }
}

/// `x @ weight.T (+ bias)`, weight `[out, in]` as stored, dense or FP8.
pub struct Linear {
    /// `[out, in]`.
    pub weight: LinearWeight,
    /// `[out]`, when the layer has one.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// `{prefix}.weight` (through [`WeightSource::linear`], so FP8 when the checkpoint
    /// stores it so or the source quantises) and, with `bias`, `{prefix}.bias` (dense).
    pub fn load(
        src: &mut dyn WeightSource,
        prefix: &str,
        out: usize,
        inp: usize,
        bias: bool,
    ) -> Result<Self> {
        let weight = src.linear(prefix, out, inp)?;
        let bias = if bias { Some(src.get(&format!("{prefix}.bias"), &[out])?) } else { None };
        Ok(Linear { weight, bias })
    }

    /// This rank's part of the layer `prefix` of whole shape `[out, inp]` split along `dim`
    /// (tensor parallelism, [`WeightSource::linear_part`]): split by output rows (`dim` 0)
    /// the bias splits with them; split by input columns (1) each rank's output is a
    /// partial sum, so only rank 0 adds the bias.
    pub fn load_part(
        src: &mut dyn WeightSource,
        prefix: &str,
        [out, inp]: [usize; 2],
        bias: bool,
        dim: usize,
    ) -> Result<Self> {
        let weight = src.linear_part(prefix, out, inp, dim)?;
        let name = format!("{prefix}.bias");
        let bias = match (bias, dim) {
            (false, _) => None,
            (true, 0) => Some(src.get_part(&name, &[out], 0)?),
            (true, _) => (src.shard().rank == 0).then(|| src.get(&name, &[out])).transpose()?,
        };
        Ok(Linear { weight, bias })
    }

    /// One linear of `parts`' output rows stacked in order (their biases too, when they
    /// have them), computed by one matmul.
    pub fn cat_rows(parts: Vec<Linear>) -> Result<Linear> {
        let (weights, biases): (Vec<_>, Vec<_>) = parts.into_iter().map(|l| (l.weight, l.bias)).unzip();
        let bias = match biases.iter().flatten().count() {
            0 => None,
            n if n == biases.len() => {
                Some(Tensor::cat(&biases.into_iter().flatten().collect::<Vec<_>>(), 0)?)
            }
            _ => return Err(kiln::Error::invalid("Linear::cat_rows", "some parts have a bias and some not")),
        };
        Ok(Linear { weight: LinearWeight::cat_rows(weights)?, bias })
    }

    /// `x @ weight.T (+ bias)`, in `x`'s dtype.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.weight.forward(x, self.bias.as_ref())
    }

    pub(crate) fn weight_bytes(&self, acc: &mut WeightBytes) {
        acc.add_linear(&self.weight);
        if let Some(b) = &self.bias {
            acc.add_dense(b);
        }
    }
}

pub(crate) struct RmsNorm {
    pub weight: Tensor,
    pub eps: f64,
}

impl RmsNorm {
    /// `name` `[size]` with the config's epsilon. A family that scales by `1 + weight`
    /// (`Config::norm_unit_offset`) gets the 1 added here, once, in f32: transformers adds
    /// it in f32 and normalises in f32, and `1 + w` rounded to bf16 would be off by up to
    /// 2^-9 relative in every norm.
    pub fn load(src: &mut dyn WeightSource, name: &str, size: usize, cfg: &Config) -> Result<Self> {
        let w = src.get(name, &[size])?;
        let weight = if cfg.norm_unit_offset { w.to_dtype(DType::F32)?.add_scalar(1.0)? } else { w };
        Ok(RmsNorm { weight, eps: cfg.rms_norm_eps })
    }

    /// Normalises the last dim (in the weight's dtype when it differs from `x`'s).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = &self.weight;
        if w.dtype() != x.dtype() {
            return x.to_dtype(w.dtype())?.rms_norm(w.shape(), Some(w), Some(self.eps))?.to_dtype(x.dtype());
        }
        x.rms_norm(w.shape(), Some(w), Some(self.eps))
    }

    /// `(norm(x + delta), x + delta)`: the residual add before this norm, fused with it
    /// (one kernel on CUDA) when the weight has `x`'s dtype.
    pub fn add_forward(&self, x: &Tensor, delta: &Tensor) -> Result<(Tensor, Tensor)> {
        let w = &self.weight;
        if w.dtype() != x.dtype() {
            let sum = x.add(delta)?;
            return Ok((self.forward(&sum)?, sum));
        }
        x.add_rms_norm(delta, w.shape(), Some(w), Some(self.eps))
    }
}

/// `down(silu(gate(x)) * up(x))`, with gate and up fused into one `[2·I, H]` weight at
/// load so the step costs one matmul for both (dense, or FP8 with per-row scales).
pub struct Mlp {
    /// Gate then up projection rows, `[2·I, H]`.
    pub gate_up: LinearWeight,
    /// Down projection, `[H, I]`.
    pub down: LinearWeight,
}

impl Mlp {
    /// `{prefix}.{gate}`, `{prefix}.{up}` and `{prefix}.{down}` with `names` = [gate, up,
    /// down] (`WeightNames::mlp`), `inter` the whole intermediate size. Split over ranks,
    /// a rank holds its intermediate columns (gate and up rows, down columns) and its
    /// output is a partial sum.
    pub fn load(
        src: &mut dyn WeightSource,
        prefix: &str,
        names: [&str; 3],
        hidden: usize,
        inter: usize,
    ) -> Result<Self> {
        let [gate, up, down] = names.map(|n| format!("{prefix}.{n}"));
        let (gate_up, down) = load_gate_up_down(src, [&gate, &up, &down], hidden, inter, true)?;
        Ok(Mlp { gate_up, down })
    }

    /// `x` `[…, H]` through the MLP.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let act = match &self.gate_up {
            // A decode step's gate_up GEMV stores SwiGLU itself (one launch fewer).
            LinearWeight::Dense(w) => x.linear_swiglu(w)?,
            LinearWeight::Fp8(_) => swiglu(&self.gate_up.forward(x, None)?)?,
        };
        self.down.forward(&act, None)
    }

    pub(crate) fn weight_bytes(&self, acc: &mut WeightBytes) {
        acc.add_linear(&self.gate_up);
        acc.add_linear(&self.down);
    }
}

/// The gate and up weights `[inter, hidden]` (fused, gate first) and the down weight
/// `[hidden, inter]` of the projections named `[gate, up, down]`: a dense MLP, a shared
/// expert or one routed expert. With `split`, this rank's part: its intermediate columns
/// (gate and up rows, down columns).
pub(crate) fn load_gate_up_down(
    src: &mut dyn WeightSource,
    [gate, up, down]: [&str; 3],
    hidden: usize,
    inter: usize,
    split: bool,
) -> Result<(LinearWeight, LinearWeight)> {
    let mut load = |name: &str, out: usize, inp: usize, dim: usize| {
        if split {
            src.linear_part(name, out, inp, dim)
        } else {
            src.linear(name, out, inp)
        }
    };
    let gate = load(gate, inter, hidden, 0)?;
    let up = load(up, inter, hidden, 0)?;
    let down = load(down, hidden, inter, 1)?;
    Ok((LinearWeight::cat_rows(vec![gate, up])?, down))
}

/// `silu(gate) * up` of a `[…, 2·I]` tensor holding gate then up.
pub fn swiglu(h: &Tensor) -> Result<Tensor> {
    let i = h.size(-1)? / 2;
    h.narrow(-1, 0, i)?.silu_mul(&h.narrow(-1, i, i)?)
}

/// Rotary embedding tables, `[positions, rotary_dim]`, in the model's dtype, as
/// transformers holds them (each half of a row the same frequencies); applied by
/// [`Tensor::rotary_embedding`], one kernel per tensor. With a partial rotary factor only a
/// head's first `rotary_dim` dims turn.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
}

/// Inverse frequencies of the rotary embedding, with Llama 3.1 scaling applied, rounded
/// as transformers holds them: f32, or bf16 for a bf16 checkpoint (Config::bf16_checkpoint).
pub fn inv_freq(cfg: &Config) -> Vec<f64> {
    let round = |f: f64| {
        let f = f as f32;
        if cfg.bf16_checkpoint {
            half::bf16::from_f32(f).to_f64()
        } else {
            f as f64
        }
    };
    unrounded_inv_freq(cfg).into_iter().map(round).collect()
}

fn unrounded_inv_freq(cfg: &Config) -> Vec<f64> {
    let d = cfg.rotary_dim();
    // The powers in f32, as transformers computes them.
    let base: Vec<f64> =
        (0..d / 2).map(|i| (1.0 / (cfg.rope_theta as f32).powf((2 * i) as f32 / d as f32)) as f64).collect();
    match cfg.rope_scaling {
        RopeScaling::None => base,
        RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
            let old = original_max_position as f64;
            let (low_wavelen, high_wavelen) = (old / low_freq_factor, old / high_freq_factor);
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}

impl Rope {
    /// Tables for positions `0..positions`.
    pub fn new(cfg: &Config, positions: usize, device: Device, dtype: DType) -> Result<Self> {
        let freqs = inv_freq(cfg);
        let (d, half) = (cfg.rotary_dim(), cfg.rotary_dim() / 2);
        let (mut cos, mut sin) = (Vec::with_capacity(positions * d), Vec::with_capacity(positions * d));
        for p in 0..positions {
            for j in 0..d {
                // f32 angle, as transformers computes `inv_freq @ positions` in f32.
                let angle = (p as f32 * freqs[j % half] as f32) as f64;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let table = |v: Vec<f32>| Tensor::from_vec(v, &[positions, d], device)?.to_dtype(dtype);
        Ok(Rope { cos: table(cos)?, sin: table(sin)? })
    }

    pub(crate) fn positions(&self) -> usize {
        self.cos.shape()[0]
    }

    /// [`Rope::apply`] of a projection's heads `[B, q_heads + 2·kv_heads, T, D]`: returns
    /// the queries turned, and writes the keys turned and the values to `cache` at the
    /// step's positions, in the same launch ([`Tensor::rotary_into_cache`]).
    pub fn apply_into_cache(
        &self,
        heads: &Tensor,
        q_heads: usize,
        start: RotaryStart,
        norm: Option<HeadNorm>,
        cache: KvSlots,
    ) -> Result<Tensor> {
        heads.rotary_into_cache(q_heads, norm, &self.cos, &self.sin, start, cache)
    }

    /// Rotates `x` `[B, heads, T, D]` whose first token sits at `start`: a position, or one
    /// read on the device from an int64 `[1]` (a captured step turns its token by wherever
    /// it is replayed). With `norm`, each head is RMS-normed first, in the same launch.
    pub fn apply(&self, x: &Tensor, start: RotaryStart, norm: Option<HeadNorm>) -> Result<Tensor> {
        match norm {
            Some(n) => x.rms_norm_rotary(n, &self.cos, &self.sin, start),
            None => x.rotary_embedding(&self.cos, &self.sin, start),
        }
    }
}

/// Grouped-query attention with an optional RMS norm of each query and key head (Qwen3)
/// and an optional output gate (Qwen3.5: `q_proj` gives each head its queries, then as
/// many gate values; the output is multiplied by their sigmoid before `o_proj`). The q, k
/// and v projections are one `[q + 2·kv, H]` weight, fused at load: one GEMV per step.
pub struct Attention {
    qkv: Linear,
    o: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    output_gate: bool,
}

impl Attention {
    /// The `{prefix}` (`…self_attn`) weights: q, k and v fused, o, and the head norms when
    /// the config has them. Split over ranks, a rank holds its query heads and their
    /// key / value heads (q, k, v rows; o columns) and its output is a partial sum.
    pub fn load(src: &mut dyn WeightSource, prefix: &str, cfg: &Config) -> Result<Self> {
        let (h, d, b) = (cfg.hidden_size, cfg.head_dim, cfg.attention_bias);
        let (qd, kvd) = (cfg.num_heads * d, cfg.num_kv_heads * d);
        let names = cfg.arch.names();
        let norm = |src: &mut dyn WeightSource, n: &str| -> Result<Option<RmsNorm>> {
            cfg.qk_norm.then(|| RmsNorm::load(src, &format!("{prefix}.{n}.weight"), d, cfg)).transpose()
        };
        let shard = src.shard();
        let heads = shard.part_len("attention heads", cfg.num_heads)?;
        let kv_heads = shard.part_len("key / value heads", cfg.num_kv_heads)?;
        // With an output gate, each head's q rows are followed by its gate rows: a rank's
        // rows are still whole heads.
        let q_out = if cfg.attn_output_gate { 2 * qd } else { qd };
        Ok(Attention {
            qkv: Linear::cat_rows(vec![
                Linear::load_part(src, &format!("{prefix}.q_proj"), [q_out, h], b, 0)?,
                Linear::load_part(src, &format!("{prefix}.k_proj"), [kvd, h], b, 0)?,
                Linear::load_part(src, &format!("{prefix}.v_proj"), [kvd, h], b, 0)?,
            ])?,
            o: Linear::load_part(src, &format!("{prefix}.{}", names.attn_out), [h, qd], b, 1)?,
            q_norm: norm(src, names.qk_norm[0])?,
            k_norm: norm(src, names.qk_norm[1])?,
            heads,
            kv_heads,
            head_dim: d,
            output_gate: cfg.attn_output_gate,
        })
    }

    /// `x` `[B, T, H]` at positions `cache.len()..+T`; appends this step's keys and values
    /// to the cache's attention layer `layer`.
    pub fn forward(&self, x: &Tensor, rope: &Rope, cache: &mut KvCache, layer: usize) -> Result<Tensor> {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (hq, hkv, d) = (self.heads, self.kv_heads, self.head_dim);
        let pos = cache.len();
        // The projection seen as heads of d: q's (or q and gate's, interleaved per head),
        // then k's, then v's; views, no copies.
        let q_heads = if self.output_gate { 2 * hq } else { hq };
        let heads = self.qkv.forward(x)?.reshape(&[b, t, q_heads + 2 * hkv, d])?;
        let (mut q, gate) = if self.output_gate {
            let qg = heads.narrow(2, 0, q_heads)?.reshape(&[b, t, hq, 2 * d])?;
            (qg.narrow(-1, 0, d)?, Some(qg.narrow(-1, d, d)?.reshape(&[b, t, hq * d])?))
        } else {
            (heads.narrow(2, 0, hq)?, None)
        };
        let mut k = heads.narrow(2, q_heads, hkv)?;
        let v = heads.narrow(2, q_heads + hkv, hkv)?;
        let step = cache.device_step().cloned();
        let start = step.as_ref().map_or(RotaryStart::At(pos), |s| RotaryStart::Device(&s.position));
        let norms = self.q_norm.as_ref().zip(self.k_norm.as_ref());
        let fused = norms.is_none_or(|(qn, kn)| {
            qn.eps == kn.eps && qn.weight.dtype() == x.dtype() && kn.weight.dtype() == x.dtype()
        });
        let (q, keys, values) = if gate.is_none() && fused {
            // q's heads, k's, v's: one launch normalises (Qwen3) and turns q and k, and writes
            // k and v to the cache.
            let norm =
                norms.map(|(qn, kn)| HeadNorm { weights: [&qn.weight, &kn.weight], split: hq, eps: qn.eps });
            let (slots, keys, values) = cache.slots(layer, t)?;
            (rope.apply_into_cache(&heads.transpose(1, 2)?, hq, start, norm, slots)?, keys, values)
        } else {
            if let Some((qn, kn)) = norms {
                q = qn.forward(&q)?;
                k = kn.forward(&k)?;
            }
            let (q, k) = (
                rope.apply(&q.transpose(1, 2)?, start, None)?,
                rope.apply(&k.transpose(1, 2)?, start, None)?,
            );
            let (keys, values) = cache.append(layer, &k, &v.transpose(1, 2)?)?;
            (q, keys, values)
        };
        // Prefill: query i, at position pos + i, sees keys 0..=pos + i (bottom-right), as an
        // offset the kernels read (no [T, pos + T] mask); one query sees the whole cache.
        let kv_len = step.as_ref().map(|s| &s.kv_len);
        let o = Sdpa {
            is_causal: t > 1,
            causal_offset: if t > 1 { pos as isize } else { 0 },
            enable_gqa: true,
            kv_len,
            ..Sdpa::default()
        };
        let out = q.scaled_dot_product_attention(&keys, &values, &o)?;
        let mut out = out.transpose(1, 2)?.reshape(&[b, t, hq * d])?;
        if let Some(g) = gate {
            out = out.mul(&g.sigmoid()?)?;
        }
        self.o.forward(&out)
    }

    pub(crate) fn weight_bytes(&self, acc: &mut WeightBytes) {
        self.qkv.weight_bytes(acc);
        self.o.weight_bytes(acc);
        for n in [&self.q_norm, &self.k_norm].into_iter().flatten() {
            acc.add_dense(&n.weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_scaling_keeps_high_and_divides_low_frequencies() {
        let mut cfg = Config::from_json(
            &std::fs::read_to_string(crate::config::fixtures_dir().join("models/llama/config.json")).unwrap(),
        )
        .unwrap();
        let scaled = inv_freq(&cfg);
        cfg.rope_scaling = RopeScaling::None;
        let plain = inv_freq(&cfg);
        assert_eq!(scaled[0], plain[0]); // wavelength 2π < 64/4: unchanged
        let last = plain.len() - 1; // wavelength > 64: divided by the factor 8
        assert!((scaled[last] * 8.0 - plain[last]).abs() < 1e-15);
        assert!(scaled.iter().zip(&plain).all(|(s, p)| s <= p && *s >= p / 8.0 - 1e-18));
    }

    #[test]
    fn rope_matches_rotate_half_formula() {
        let cfg = Config::from_json(
            &std::fs::read_to_string(crate::config::fixtures_dir().join("models/qwen3/config.json")).unwrap(),
        )
        .unwrap();
        let rope = Rope::new(&cfg, 8, Device::Cpu, DType::F64).unwrap();
        let x = Tensor::randn(&[1, 2, 3, 16], 5, DType::F64, Device::Cpu).unwrap();
        let got = rope.apply(&x, RotaryStart::At(4), None).unwrap().to_vec::<f64>().unwrap();
        let xs = x.to_vec::<f64>().unwrap();
        let f = inv_freq(&cfg);
        for (row, chunk) in xs.chunks(16).enumerate() {
            let p = (4 + row % 3) as f64;
            for j in 0..16 {
                let a = p * f[j % 8];
                let rot = if j < 8 { -chunk[j + 8] } else { chunk[j - 8] };
                let want = chunk[j] * a.cos() + rot * a.sin();
                assert!((got[row * 16 + j] - want).abs() < 1e-6, "{row} {j}");
            }
        }
    }
}
