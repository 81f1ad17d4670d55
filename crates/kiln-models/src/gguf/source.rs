//! GGUF tensors under the Hugging Face names the model builders ask for, dequantised to
//! the model dtype on load. llama.cpp's converter permutes the rows of llama-arch q / k
//! projections (per head, the two rotary halves interleaved); that is undone here so the
//! builders see the checkpoint's original layout.

use super::file::{GgufFile, TensorInfo};
use crate::config::{Arch, Config};
use crate::loader::{bad_tensors, Quantize, WeightSource};
use kiln::{DType, Device, Error, Result, Tensor};

pub(crate) struct GgufSource<'a> {
    file: &'a GgufFile,
    device: Device,
    dtype: DType,
    quantize: Quantize,
    /// `(heads, kv_heads)` when q / k rows must be un-permuted (llama arch).
    unpermute: Option<(usize, usize)>,
    problems: Vec<String>,
}

/// A checkpoint layer's name in llama.cpp's naming (`blk.N.*`), for the names whose
/// suffix is all that differs.
const LAYER_NAMES: [(&str, &str); 12] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("self_attn.q_proj", "attn_q"),
    ("self_attn.k_proj", "attn_k"),
    ("self_attn.v_proj", "attn_v"),
    ("self_attn.o_proj", "attn_output"),
    ("self_attn.q_norm", "attn_q_norm"),
    ("self_attn.k_norm", "attn_k_norm"),
    ("mlp.gate_proj", "ffn_gate"),
    ("mlp.up_proj", "ffn_up"),
    ("mlp.down_proj", "ffn_down"),
    ("mlp.gate", "ffn_gate_inp"),
];

/// The GGUF tensor holding Hugging Face tensor `name`, and the expert it is a slice of.
fn gguf_name(name: &str) -> Option<(String, Option<usize>)> {
    let top = match name {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some((t.into(), None));
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, suffix) = rest.rsplit_once('.')?;
    if let Some(e) = module.strip_prefix("mlp.experts.") {
        // mlp.experts.{e}.{gate,up,down}_proj → blk.N.ffn_{gate,up,down}_exps, slice e.
        let (e, proj) = e.split_once('.')?;
        let kind = proj.strip_suffix("_proj")?;
        return Some((format!("blk.{layer}.ffn_{kind}_exps.{suffix}"), Some(e.parse().ok()?)));
    }
    let (_, g) = LAYER_NAMES.iter().find(|(hf, _)| *hf == module)?;
    Some((format!("blk.{layer}.{g}.{suffix}"), None))
}

/// Rows of a `[heads · head_dim, cols]` weight (or `[heads · head_dim]` bias) in the
/// order before llama.cpp's permutation: its row `h·d + 2i + t` is row `h·d + t·d/2 + i`.
fn unpermute_rows(v: &[f32], heads: usize, cols: usize) -> Vec<f32> {
    let d = v.len() / cols / heads;
    let mut out = vec![0f32; v.len()];
    for h in 0..heads {
        for i in 0..d / 2 {
            for t in 0..2 {
                let (src, dst) = (h * d + 2 * i + t, h * d + t * d / 2 + i);
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&v[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}

impl<'a> GgufSource<'a> {
    pub fn new(file: &'a GgufFile, config: &Config, device: Device, dtype: DType) -> Self {
        let unpermute = (config.arch == Arch::Llama).then_some((config.num_heads, config.num_kv_heads));
        GgufSource { file, device, dtype, quantize: Quantize::None, unpermute, problems: vec![] }
    }

    pub(crate) fn with_quantize(mut self, quantize: Quantize) -> Self {
        self.quantize = quantize;
        self
    }

    /// Ok when every requested tensor was found with the expected shape.
    pub fn finish(self) -> Result<()> {
        if self.problems.is_empty() {
            return Ok(());
        }
        Err(Error::File { path: self.file.path().display().to_string(), msg: bad_tensors(&self.problems) })
    }

    /// The f32 values of `name` (an expert's slice of a stacked tensor when `expert`), or
    /// why they cannot be had.
    fn values(
        &self,
        name: &str,
        expert: Option<usize>,
        shape: &[usize],
    ) -> std::result::Result<Vec<f32>, String> {
        let info =
            self.file.tensors.get(name).ok_or_else(|| format!("missing (expected shape {shape:?})"))?;
        let stored = match expert {
            Some(e) if info.shape.len() == 3 && e < info.shape[0] => &info.shape[1..],
            Some(e) => return Err(format!("{:?} has no expert {e}", info.shape)),
            None => &info.shape[..],
        };
        if stored != shape {
            return Err(format!("{:?} {:?} (expected {shape:?})", info.shape, info.kind));
        }
        let n: usize = shape.iter().product();
        let bytes = self.file.data(info);
        let per = info.kind.bytes_for(n);
        let e = expert.unwrap_or(0);
        let mut v = vec![0f32; n];
        info.kind.dequantize(&bytes[e * per..(e + 1) * per], &mut v);
        Ok(self.unpermuted(name, info, v))
    }

    fn unpermuted(&self, name: &str, info: &TensorInfo, v: Vec<f32>) -> Vec<f32> {
        let cols = if info.shape.len() == 2 { info.shape[1] } else { 1 };
        match self.unpermute {
            Some((heads, _)) if name.contains(".attn_q.") => unpermute_rows(&v, heads, cols),
            Some((_, kv)) if name.contains(".attn_k.") => unpermute_rows(&v, kv, cols),
            _ => v,
        }
    }

    fn placeholder(&self, shape: &[usize]) -> Result<Tensor> {
        Tensor::zeros(&[], self.dtype, self.device)?.expand(shape)
    }
}

impl WeightSource for GgufSource<'_> {
    fn get(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let found = gguf_name(name)
            .ok_or_else(|| "no GGUF name for it".to_string())
            .and_then(|(g, expert)| self.values(&g, expert, shape).map_err(|e| format!("({g}) {e}")));
        match found {
            Ok(v) => crate::loader::parameter(
                Tensor::from_vec(v, shape, Device::Cpu)?.to_dtype(self.dtype)?.to_device(self.device)?,
            ),
            Err(e) => {
                self.problems.push(format!("{name}: {e}"));
                self.placeholder(shape)
            }
        }
    }

    fn device(&self) -> Device {
        self.device
    }

    fn dtype(&self) -> DType {
        self.dtype
    }

    fn quantize(&self) -> Quantize {
        self.quantize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_hugging_face_names() {
        let g = |n: &str| gguf_name(n).unwrap();
        assert_eq!(g("model.embed_tokens.weight"), ("token_embd.weight".into(), None));
        assert_eq!(g("model.layers.3.self_attn.q_proj.bias"), ("blk.3.attn_q.bias".into(), None));
        assert_eq!(
            g("model.layers.0.post_attention_layernorm.weight"),
            ("blk.0.ffn_norm.weight".into(), None)
        );
        assert_eq!(g("model.layers.1.mlp.gate.weight"), ("blk.1.ffn_gate_inp.weight".into(), None));
        assert_eq!(
            g("model.layers.2.mlp.experts.7.down_proj.weight"),
            ("blk.2.ffn_down_exps.weight".into(), Some(7))
        );
        assert_eq!(gguf_name("model.layers.0.conv.in_proj.weight"), None);
    }

    /// llama.cpp's `permute` interleaves each head's two rotary halves: rows
    /// [a0 a1 a2 | b0 b1 b2] are stored as [a0 b0 a1 b1 a2 b2].
    #[test]
    fn undoes_the_rotary_row_permutation() {
        let stored = [0., 3., 1., 4., 2., 5., 10., 13., 11., 14., 12., 15.];
        assert_eq!(unpermute_rows(&stored, 2, 1), [0., 1., 2., 3., 4., 5., 10., 11., 12., 13., 14., 15.]);
        // Two columns: whole rows move.
        assert_eq!(unpermute_rows(&[0., 1., 6., 7., 2., 3., 8., 9.], 1, 2), [0., 1., 2., 3., 6., 7., 8., 9.]);
    }
}
