//! LFM2's gated short convolution, the mixer of its non-attention layers:
//! `in_proj` to `[B, C, x]` (3 × hidden), `B · x` through a causal depthwise convolution of
//! `kernel` taps along time, gated by `C`, then `out_proj`. Between steps it keeps the
//! last `kernel − 1` gated inputs (in the cache), where attention keeps every key.
//!
//! The convolution is `causal_conv::CausalConv`: for 3 taps, 3 multiplies and 2 adds.

use crate::causal_conv::CausalConv;
use crate::config::Config;
use crate::kv_cache::KvCache;
use crate::layers::{Linear, WeightBytes};
use crate::loader::WeightSource;
use kiln::{Error, Result, Tensor};

/// LFM2's gated short convolution of one layer (see the module docs).
pub struct ShortConv {
    in_proj: Linear,
    conv: CausalConv,
    out_proj: Linear,
}

impl ShortConv {
    /// `{prefix}.in_proj`, `{prefix}.conv` and `{prefix}.out_proj`.
    pub fn load(src: &mut dyn WeightSource, prefix: &str, cfg: &Config) -> Result<Self> {
        let sc = cfg
            .short_conv
            .as_ref()
            .ok_or_else(|| Error::invalid("short_conv", "the config has no short-convolution layers"))?;
        let (h, k, b) = (cfg.hidden_size, sc.kernel, sc.bias);
        Ok(ShortConv {
            in_proj: Linear::load(src, &format!("{prefix}.in_proj"), 3 * h, h, b)?,
            conv: CausalConv::load(src, &format!("{prefix}.conv"), h, k, b)?,
            out_proj: Linear::load(src, &format!("{prefix}.out_proj"), h, h, b)?,
        })
    }

    /// The causal convolution.
    pub fn conv(&self) -> &CausalConv {
        &self.conv
    }

    /// `x` `[B, T, H]` at positions `cache.len()..+T`; updates the cache's state of
    /// short-conv layer `layer`.
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache, layer: usize) -> Result<Tensor> {
        let h = x.size(2)?;
        let bcx = self.in_proj.forward(x)?;
        let gated = bcx.narrow(-1, 0, h)?.mul(&bcx.narrow(-1, 2 * h, h)?)?;
        let y = self.conv.forward(&gated, cache, layer, false)?;
        self.out_proj.forward(&bcx.narrow(-1, h, h)?.mul(&y)?)
    }

    pub(crate) fn weight_bytes(&self, acc: &mut WeightBytes) {
        self.in_proj.weight_bytes(acc);
        self.out_proj.weight_bytes(acc);
        self.conv.weight_bytes(acc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::RandomSource;
    use crate::state::LayerStates;
    use kiln::{DType, Device};

    /// The fixture LFM2 config and one short-conv layer of seeded random f64 weights.
    fn fixture_conv() -> (Config, ShortConv) {
        let path = crate::config::fixtures_dir().join("models/lfm2_moe/config.json");
        let cfg = Config::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut src = RandomSource::new(Device::Cpu, DType::F64, 11);
        src.std = 0.3;
        let conv = ShortConv::load(&mut src, "c", &cfg).unwrap();
        (cfg, conv)
    }

    fn cache(cfg: &Config, capacity: usize) -> KvCache {
        let states = LayerStates::new(&[[1, 2, cfg.hidden_size]], DType::F64, &[], Device::Cpu).unwrap();
        KvCache::new(0, 1, 1, capacity, 1, DType::F64, Device::Cpu).unwrap().with_states(states)
    }

    /// The prompt path equals F.conv1d's definition (zero left padding, cross-correlation),
    /// computed here element by element from the same projections.
    #[test]
    fn prompt_matches_the_causal_depthwise_convolution() {
        let (cfg, conv) = fixture_conv();
        let (t, h) = (5, cfg.hidden_size);
        let x = Tensor::randn(&[1, t, h], 4, DType::F64, Device::Cpu).unwrap();
        let got = conv.forward(&x, &mut cache(&cfg, t), 0).unwrap();

        let bcx = conv.in_proj.forward(&x).unwrap().to_vec::<f64>().unwrap();
        let w = conv.conv.weight().to_vec::<f64>().unwrap();
        let taps: Vec<Vec<f64>> = (0..3).map(|j| (0..h).map(|c| w[c * 3 + j]).collect()).collect();
        let gated = |s: usize, c: usize| bcx[s * 3 * h + c] * bcx[s * 3 * h + 2 * h + c];
        let mut y = vec![0f64; t * h];
        for s in 0..t {
            for c in 0..h {
                // Output s reads inputs s − 2, s − 1, s with taps 0, 1, 2.
                let conv_out: f64 =
                    (0..3).filter(|&j| s + j >= 2).map(|j| taps[j][c] * gated(s + j - 2, c)).sum();
                y[s * h + c] = bcx[s * 3 * h + h + c] * conv_out;
            }
        }
        let want = conv.out_proj.forward(&Tensor::from_vec(y, &[1, t, h], Device::Cpu).unwrap()).unwrap();
        let worst = got.sub(&want).unwrap().abs().unwrap().max(&[], false).unwrap().item().unwrap();
        assert!(worst < 1e-12, "max |Δ| {worst}");
    }

    /// Decoding one token at a time through the cached state gives the prompt's outputs,
    /// and a cleared cache starts from zeros again.
    #[test]
    fn stepwise_decode_equals_the_prompt() {
        let (cfg, conv) = fixture_conv();
        let (t, h) = (6, cfg.hidden_size);
        let x = Tensor::randn(&[1, t, h], 8, DType::F64, Device::Cpu).unwrap();
        let mut c = cache(&cfg, t);
        let whole = conv.forward(&x, &mut c, 0).unwrap().to_vec::<f64>().unwrap();
        for _ in 0..2 {
            c.clear().unwrap();
            // A 2-token step, then single tokens: the state carries over both kinds.
            let mut steps = vec![conv.forward(&x.narrow(1, 0, 2).unwrap(), &mut c, 0).unwrap()];
            c.advance(2).unwrap();
            for s in 2..t {
                steps.push(conv.forward(&x.narrow(1, s, 1).unwrap(), &mut c, 0).unwrap());
                c.advance(1).unwrap();
            }
            let steps = Tensor::cat(&steps, 1).unwrap().to_vec::<f64>().unwrap();
            let worst = whole.iter().zip(&steps).map(|(a, b)| (a - b).abs()).fold(0f64, f64::max);
            assert!(worst < 1e-12, "max |Δ| {worst}");
        }
        assert!(conv.forward(&x.narrow(1, 0, 1).unwrap(), &mut c, 0).is_err(), "past the capacity");
    }
}
