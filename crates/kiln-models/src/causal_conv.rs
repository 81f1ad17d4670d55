//! The causal depthwise convolution along time that LFM2's short-conv layers and Qwen3.5's
//! Gated DeltaNet layers share: `y[t] = Σ_j w_j · x[t − (kernel − 1) + j]` per channel,
//! with zeros before the sequence's start (PyTorch's `Conv1d(groups = channels, padding =
//! kernel − 1)` cut to the input's length).
//!
//! It runs on `[B, T, C]` as a sum of `kernel` shifted products over the window
//! `[state, x]` (time-major, so no transposes), the same whether the step is a prompt or
//! one token; the last `kernel − 1` inputs stay in the cache as the next step's state.

use crate::kv_cache::KvCache;
use crate::layers::WeightBytes;
use crate::loader::WeightSource;
use kiln::{Result, Tensor};

/// A causal depthwise convolution along time over `[B, T, C]`, with optional bias (see the
/// module docs).
pub struct CausalConv {
    /// Tap `j` of every channel, `[channels]` each: the weight `[channels, 1, kernel]` split.
    taps: Vec<Tensor>,
    bias: Option<Tensor>,
}

impl CausalConv {
    /// `{prefix}.weight` `[channels, 1, kernel]` and, with `bias`, `{prefix}.bias` `[channels]`.
    pub fn load(
        src: &mut dyn WeightSource,
        prefix: &str,
        channels: usize,
        kernel: usize,
        bias: bool,
    ) -> Result<Self> {
        let weight = src.get(&format!("{prefix}.weight"), &[channels, 1, kernel])?;
        let taps = (0..kernel)
            .map(|j| weight.narrow(2, j, 1)?.reshape(&[channels])?.contiguous())
            .collect::<Result<_>>()?;
        let bias = if bias { Some(src.get(&format!("{prefix}.bias"), &[channels])?) } else { None };
        Ok(CausalConv { taps, bias })
    }

    /// The shape of the state it keeps in the cache for `batch` sequences: the last
    /// `kernel − 1` inputs, `[batch, kernel − 1, channels]`.
    pub fn state_shape(&self, batch: usize) -> [usize; 3] {
        [batch, self.taps.len() - 1, self.taps[0].numel()]
    }

    /// Tap `j`'s weights, `[channels]`.
    pub fn tap(&self, j: usize) -> &Tensor {
        &self.taps[j]
    }

    /// `x` `[B, T, C]` at positions `cache.len()..+T` → `[B, T, C]`; updates the cache's
    /// convolution state `layer`.
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache, layer: usize) -> Result<Tensor> {
        let t = x.size(1)?;
        let window = cache.conv_window(layer, x)?;
        let mut y = window.narrow(1, 0, t)?.mul(&self.taps[0])?;
        for (j, tap) in self.taps.iter().enumerate().skip(1) {
            y = y.add(&window.narrow(1, j, t)?.mul(tap)?)?;
        }
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    pub(crate) fn weight_bytes(&self, acc: &mut WeightBytes) {
        for t in self.taps.iter().chain(&self.bias) {
            acc.add_dense(t);
        }
    }
}
