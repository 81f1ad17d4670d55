//! The causal depthwise convolution along time that LFM2's short-conv layers and Qwen3.5's
//! Gated DeltaNet layers share: `y[t] = Σ_j w_j · x[t − (kernel − 1) + j]` per channel,
//! with zeros before the sequence's start (PyTorch's `Conv1d(groups = channels, padding =
//! kernel − 1)` cut to the input's length).
//!
//! It runs as one [`Tensor::causal_conv1d_update`] (one launch on CUDA) over the state the
//! cache keeps — the last `kernel − 1` inputs — whether the step is a prompt or one token.

use crate::kv_cache::KvCache;
use crate::layers::WeightBytes;
use crate::loader::WeightSource;
use kiln::{Result, Tensor};

/// A causal depthwise convolution along time over `[B, T, C]`, with optional bias (see the
/// module docs).
pub struct CausalConv {
    /// The taps, `[channels, kernel]` (the checkpoint's `[channels, 1, kernel]`).
    weight: Tensor,
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
        let weight =
            src.get(&format!("{prefix}.weight"), &[channels, 1, kernel])?.reshape(&[channels, kernel])?;
        let bias = if bias { Some(src.get(&format!("{prefix}.bias"), &[channels])?) } else { None };
        Ok(CausalConv { weight, bias })
    }

    /// The shape of the state it keeps in the cache for `batch` sequences: the last
    /// `kernel − 1` inputs, `[batch, kernel − 1, channels]`.
    pub fn state_shape(&self, batch: usize) -> [usize; 3] {
        let [channels, kernel] = [self.weight.shape()[0], self.weight.shape()[1]];
        [batch, kernel - 1, channels]
    }

    /// The taps, `[channels, kernel]`.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// `x` `[B, T, C]` at positions `cache.len()..+T` → `[B, T, C]` (SiLU applied when
    /// `silu`); updates the cache's convolution state `layer`.
    pub fn forward(&self, x: &Tensor, cache: &mut KvCache, layer: usize, silu: bool) -> Result<Tensor> {
        let state = cache.conv_state(layer, x.size(1)?)?;
        x.causal_conv1d_update(state, &self.weight, self.bias.as_ref(), silu)
    }

    pub(crate) fn weight_bytes(&self, acc: &mut WeightBytes) {
        for t in std::iter::once(&self.weight).chain(&self.bias) {
            acc.add_dense(t);
        }
    }
}
