//! The states that layers without keys and values carry from one step to the next: the
//! last `kernel − 1` inputs of each short convolution (LFM2's mixers and the Gated
//! DeltaNet's input convolution), `[B, kernel − 1, channels]`, and each Gated DeltaNet's
//! f32 recurrent state. Allocated once per sequence beside the attention layers' keys and
//! values ([`KvCache`](crate::kv_cache::KvCache) holds both) and overwritten in place, so a
//! captured decode step updates them at fixed addresses.

use kiln::{DType, Device, Result, Tensor};

/// Per-sequence states of the convolution and linear-attention layers, in layer order.
#[derive(Default)]
pub struct LayerStates {
    conv: Vec<Tensor>,
    recurrent: Vec<Tensor>,
}

impl LayerStates {
    /// Zeroed states: one convolution window per `conv` shape (of `dtype`) and one f32
    /// recurrent state per `recurrent` shape.
    pub fn new(conv: &[[usize; 3]], dtype: DType, recurrent: &[[usize; 4]], device: Device) -> Result<Self> {
        Ok(LayerStates {
            conv: conv.iter().map(|s| Tensor::zeros(s, dtype, device)).collect::<Result<_>>()?,
            recurrent: recurrent
                .iter()
                .map(|s| Tensor::zeros(s, DType::F32, device))
                .collect::<Result<_>>()?,
        })
    }

    /// Convolution layer `layer`'s window, to be updated in place; zeroed first when
    /// `fresh` (the start of a sequence: the causal padding, whatever an earlier one left).
    pub fn conv(&self, layer: usize, fresh: bool) -> Result<&Tensor> {
        zeroed_if(&self.conv[layer], fresh)
    }

    /// Linear-attention layer `layer`'s state, to be updated in place; zeroed first when
    /// `fresh`.
    pub fn recurrent_in_place(&self, layer: usize, fresh: bool) -> Result<&Tensor> {
        zeroed_if(&self.recurrent[layer], fresh)
    }

    /// Linear-attention layer `layer`'s state as a value: new zeros when `fresh`, else the
    /// state itself (for the prompt path, which computes a new state and then stores it).
    pub fn recurrent(&self, layer: usize, fresh: bool) -> Result<Tensor> {
        let s = &self.recurrent[layer];
        if fresh {
            s.zeros_like()
        } else {
            Ok(s.clone())
        }
    }

    /// Stores linear-attention layer `layer`'s state after a step.
    pub fn set_recurrent(&self, layer: usize, state: &Tensor) -> Result<()> {
        self.recurrent[layer].copy_(state)
    }

    /// Bytes held.
    pub fn nbytes(&self) -> usize {
        self.conv.iter().chain(&self.recurrent).map(|t| t.nbytes()).sum()
    }
}

fn zeroed_if(state: &Tensor, fresh: bool) -> Result<&Tensor> {
    if fresh {
        state.copy_(&state.zeros_like()?)?;
    }
    Ok(state)
}
