//! A KV cache allocated once for the whole sequence: per attention layer, keys and values
//! of `[B, kv_heads, capacity, head_dim]`. Each step writes its new rows in place
//! (`copy_` into a narrowed view) and attends over a view of the filled part, so decode
//! allocates nothing for the cache and never copies what is already there.
//!
//! Short-convolution layers (LFM2) and Gated DeltaNet layers (Qwen3.5) keep their states
//! here too: the last `kernel - 1` inputs of their convolution, `[B, kernel - 1,
//! channels]`, and the DeltaNet's recurrent state, overwritten each step.

use kiln::{DType, Device, Error, Result, Tensor};

pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    conv: Vec<Tensor>,
    recurrent: Vec<Tensor>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    pub fn new(
        layers: usize,
        batch: usize,
        kv_heads: usize,
        capacity: usize,
        head_dim: usize,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let shape = [batch, kv_heads, capacity, head_dim];
        let mk = || (0..layers).map(|_| Tensor::zeros(&shape, dtype, device)).collect::<Result<Vec<_>>>();
        Ok(KvCache { keys: mk()?, values: mk()?, conv: vec![], recurrent: vec![], len: 0, capacity })
    }

    /// Adds one convolution state per shape, `[batch, taps − 1, channels]`, in the order of
    /// the layers that own them.
    pub fn with_conv_states(mut self, shapes: &[[usize; 3]], dtype: DType, device: Device) -> Result<Self> {
        self.conv = shapes.iter().map(|s| Tensor::zeros(s, dtype, device)).collect::<Result<_>>()?;
        Ok(self)
    }

    /// Positions already filled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Adds one f32 recurrent state per shape, in the order of the linear-attention layers.
    pub fn with_recurrent_states(mut self, shapes: &[[usize; 4]], device: Device) -> Result<Self> {
        self.recurrent =
            shapes.iter().map(|s| Tensor::zeros(s, DType::F32, device)).collect::<Result<_>>()?;
        Ok(self)
    }

    /// A state as this step starts from it: zeros at the start of a sequence (whatever an
    /// earlier sequence left), else the state itself.
    fn carried(&self, state: &Tensor) -> Result<Tensor> {
        if self.len == 0 {
            Tensor::zeros(state.shape(), state.dtype(), state.device())
        } else {
            Ok(state.clone())
        }
    }

    /// Linear-attention layer `layer`'s recurrent state before this step.
    pub fn recurrent_state(&self, layer: usize) -> Result<Tensor> {
        self.carried(&self.recurrent[layer])
    }

    /// Stores linear-attention layer `layer`'s state after this step.
    pub fn set_recurrent_state(&mut self, layer: usize, state: &Tensor) -> Result<()> {
        self.recurrent[layer].copy_(state)
    }

    /// Forgets the contents (a new sequence reuses the memory).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Pretends positions `0..len` are filled (benchmarks of decode at a given context
    /// length, whose cost does not depend on the cached values).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity {
            return Err(Error::IndexOutOfRange { op: "kv_cache", index: len as i64, size: self.capacity });
        }
        self.len = len;
        Ok(())
    }

    /// The end of a step of `t` positions `len..len+t`, or an error past the capacity.
    fn step_end(&self, t: usize) -> Result<usize> {
        let end = self.len + t;
        if end > self.capacity {
            return Err(Error::invalid(
                "kv_cache",
                format!("{end} positions exceed the cache's capacity of {}", self.capacity),
            ));
        }
        Ok(end)
    }

    /// Writes `k`, `v` `[B, kv_heads, T, D]` at positions `len..len+T` of attention layer
    /// `layer` and returns views of positions `0..len+T`. The length stays until
    /// [`advance`](KvCache::advance), so every layer of a step sees the same positions.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.size(2)?;
        let end = self.step_end(t)?;
        let (kc, vc) = (&self.keys[layer], &self.values[layer]);
        kc.narrow(2, self.len, t)?.copy_(k)?;
        vc.narrow(2, self.len, t)?.copy_(v)?;
        Ok((kc.narrow(2, 0, end)?, vc.narrow(2, 0, end)?))
    }

    /// The input of short-convolution layer `layer`'s step: its state (zeros at the start
    /// of a sequence, as the causal padding) followed by `x` `[B, T, C]`, `[B, width + T,
    /// C]`. The state becomes the window's last `width` rows.
    pub fn conv_window(&mut self, layer: usize, x: &Tensor) -> Result<Tensor> {
        self.step_end(x.size(1)?)?;
        let state = &self.conv[layer];
        let window = Tensor::cat(&[self.carried(state)?, x.clone()], 1)?;
        state.copy_(&window.narrow(1, x.size(1)?, state.shape()[1])?)?;
        Ok(window)
    }

    /// Ends a step of `t` positions: they count as filled from now on.
    pub fn advance(&mut self, t: usize) -> Result<()> {
        self.len = self.step_end(t)?;
        Ok(())
    }

    /// Bytes held by the cache.
    pub fn nbytes(&self) -> usize {
        self.keys
            .iter()
            .chain(&self.values)
            .chain(&self.conv)
            .chain(&self.recurrent)
            .map(|t| t.nbytes())
            .sum()
    }
}
