//! A KV cache allocated once for the whole sequence: per attention layer, keys and values
//! of `[B, kv_heads, capacity, head_dim]`. Each step writes its new rows in place
//! (`copy_` into a narrowed view) and attends over a view of the filled part, so decode
//! allocates nothing for the cache and never copies what is already there.
//!
//! The short-convolution and Gated DeltaNet layers' states ride along
//! ([`LayerStates`]): the cache's length says when a sequence
//! starts and they must start from zeros.
//!
//! For decode steps captured in a CUDA graph ([`KvCache::track_on_device`]) the length also
//! lives on the device: a one-token step reads its position there, writes its keys and
//! values at it, attends over the whole cache with the device length as the key count, and
//! advances it, so the same captured step serves every position.

use crate::state::LayerStates;
use kiln::{DType, Device, Error, KvSlots, Result, Tensor};

/// Per-sequence state of a decoder across steps, pre-allocated for `capacity` positions:
/// keys and values of the attention layers and the other layers' [`LayerStates`] (make
/// one with [`Model::new_cache`](crate::Model::new_cache)).
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    states: LayerStates,
    len: usize,
    capacity: usize,
    device_len: Option<DeviceLen>,
}

/// The length on the device, for captured steps.
struct DeviceLen {
    /// Positions filled, i32 `[1]`.
    len: Tensor,
    /// The step under way, between [`KvCache::begin_step`] and [`KvCache::advance`].
    step: Option<DeviceStep>,
}

/// A one-token step's position on the device.
#[derive(Clone)]
pub struct DeviceStep {
    /// The new token's position, i64 `[1]`: rotary tables are indexed by it and the
    /// step's keys and values written there (`index_copy_`).
    pub position: Tensor,
    /// Keys to attend to, `len + 1`, i32 `[1]` (`Sdpa::kv_len`).
    pub kv_len: Tensor,
}

impl KvCache {
    /// An empty cache of `layers` attention layers' keys and values, `[batch, kv_heads,
    /// capacity, head_dim]` each, zeroed.
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
        Ok(KvCache {
            keys: mk()?,
            values: mk()?,
            states: LayerStates::default(),
            len: 0,
            capacity,
            device_len: None,
        })
    }

    /// The convolution and linear-attention layers' states that ride along.
    pub fn with_states(mut self, states: LayerStates) -> Self {
        self.states = states;
        self
    }

    /// Positions already filled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Linear-attention layer `layer`'s recurrent state before this step (zeros at the
    /// start of a sequence).
    pub fn recurrent_state(&self, layer: usize) -> Result<Tensor> {
        self.states.recurrent(layer, self.len == 0)
    }

    /// Linear-attention layer `layer`'s state, to be updated in place by this step
    /// ([`Tensor::gated_delta_step`]); zeroed first at the start of a sequence.
    pub fn recurrent_state_in_place(&self, layer: usize) -> Result<&Tensor> {
        self.states.recurrent_in_place(layer, self.len == 0)
    }

    /// Stores linear-attention layer `layer`'s state after this step.
    pub fn set_recurrent_state(&mut self, layer: usize, state: &Tensor) -> Result<()> {
        self.states.set_recurrent(layer, state)
    }

    /// Forgets the contents (a new sequence reuses the memory).
    pub fn clear(&mut self) -> Result<()> {
        self.set_len(0)
    }

    /// Pretends positions `0..len` are filled (benchmarks of decode at a given context
    /// length, whose cost does not depend on the cached values).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity {
            return Err(Error::IndexOutOfRange { op: "kv_cache", index: len as i64, size: self.capacity });
        }
        self.len = len;
        self.upload_len()
    }

    /// Keeps the length on the device from now on, so that one-token steps can be captured
    /// in a CUDA graph and replayed at later positions (see the module docs).
    pub fn track_on_device(&mut self) -> Result<()> {
        if self.device_len.is_some() {
            return Ok(());
        }
        let Some(k) = self.keys.first() else {
            return Err(Error::invalid(
                "kv_cache",
                "a model without attention layers has no length to track",
            ));
        };
        self.device_len = Some(DeviceLen { len: Tensor::zeros(&[1], DType::I32, k.device())?, step: None });
        self.upload_len()
    }

    /// Writes the host's length to the device's (not during a capture: it is a host copy).
    fn upload_len(&mut self) -> Result<()> {
        if let Some(dl) = &self.device_len {
            dl.len.copy_(&Tensor::from_vec(vec![self.len as i32], &[1], dl.len.device())?)?;
        }
        Ok(())
    }

    /// Starts a step of `t` positions. With the length on the device and one token, returns
    /// that token's position there, which attention layers then use
    /// ([`device_step`](KvCache::device_step)); otherwise `None` (positions from the host).
    pub fn begin_step(&mut self, t: usize) -> Result<Option<DeviceStep>> {
        self.step_end(t)?;
        let Some(dl) = self.device_len.as_mut().filter(|_| t == 1) else { return Ok(None) };
        let position = dl.len.to_dtype(DType::I64)?;
        let step = DeviceStep { kv_len: dl.len.add_scalar(1.0)?, position };
        dl.step = Some(step.clone());
        Ok(Some(step))
    }

    /// The step under way when its position is on the device.
    pub fn device_step(&self) -> Option<&DeviceStep> {
        self.device_len.as_ref().and_then(|d| d.step.as_ref())
    }

    /// One replay of a captured step has run: it advanced the device's length itself.
    pub fn count_replayed_step(&mut self) -> Result<()> {
        self.len = self.step_end(1)?;
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
    /// In a step whose position is on the device, the writes go there and the views are the
    /// whole cache (attend with [`DeviceStep::kv_len`]).
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (kc, vc) = (&self.keys[layer], &self.values[layer]);
        if let Some(step) = self.device_step() {
            kc.index_copy_(2, &step.position, k)?;
            vc.index_copy_(2, &step.position, v)?;
            return Ok((kc.clone(), vc.clone()));
        }
        let t = k.size(2)?;
        let end = self.step_end(t)?;
        kc.narrow(2, self.len, t)?.copy_(k)?;
        vc.narrow(2, self.len, t)?.copy_(v)?;
        Ok((kc.narrow(2, 0, end)?, vc.narrow(2, 0, end)?))
    }

    /// Attention layer `layer`'s whole caches, for a kernel that writes a step's `t` keys
    /// and values itself at the step's position ([`Tensor::rotary_into_cache`]), with the
    /// views of them to attend over that [`append`](KvCache::append) would return.
    pub fn slots(&self, layer: usize, t: usize) -> Result<(KvSlots<'_>, Tensor, Tensor)> {
        let (keys, values) = (&self.keys[layer], &self.values[layer]);
        let end = if self.device_step().is_some() { self.capacity } else { self.step_end(t)? };
        Ok((KvSlots { keys, values }, keys.narrow(2, 0, end)?, values.narrow(2, 0, end)?))
    }

    /// Convolution layer `layer`'s state for a step of `t` positions, to be updated in place
    /// ([`Tensor::causal_conv1d_update`]): the inputs before this step, `[B, width, C]`,
    /// zeroed first at the start of a sequence (the causal padding).
    pub fn conv_state(&mut self, layer: usize, t: usize) -> Result<&Tensor> {
        self.step_end(t)?;
        self.states.conv(layer, self.len == 0)
    }

    /// Ends a step of `t` positions: they count as filled from now on (on the device too,
    /// where the length is kept there).
    pub fn advance(&mut self, t: usize) -> Result<()> {
        self.len = self.step_end(t)?;
        match self.device_len.as_mut().map(|d| (d.step.take(), &d.len)) {
            Some((Some(step), len)) => len.copy_(&step.kv_len),
            Some((None, _)) => self.upload_len(),
            None => Ok(()),
        }
    }

    /// Bytes held by the cache.
    pub fn nbytes(&self) -> usize {
        self.keys.iter().chain(&self.values).map(|t| t.nbytes()).sum::<usize>() + self.states.nbytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The length kept on the device follows the host's through steps, `set_len` and
    /// `clear`; a replayed step past the capacity is an error and leaves the length alone.
    #[test]
    fn device_length_follows_and_the_capacity_holds() {
        let device = Device::Cpu;
        let mut c = KvCache::new(1, 1, 2, 3, 4, DType::F32, device).unwrap();
        let dev_len = |c: &KvCache| c.device_len.as_ref().unwrap().len.to_vec::<i32>().unwrap()[0];
        c.set_len(1).unwrap();
        c.track_on_device().unwrap();
        assert_eq!(dev_len(&c), 1);
        assert!(c.begin_step(2).unwrap().is_none(), "more than one token: host positions");
        let step = c.begin_step(1).unwrap().expect("one token reads the device length");
        assert_eq!(step.position.to_vec::<i64>().unwrap(), [1]);
        assert_eq!(step.kv_len.to_vec::<i32>().unwrap(), [2]);
        // The step's keys and values land at position 1 of each head, nothing else moves.
        let k = Tensor::arange(1.0, 9.0, 1.0, DType::F32, device).unwrap().reshape(&[1, 2, 1, 4]).unwrap();
        let (keys, values) = c.append(0, &k, &k.neg().unwrap()).unwrap();
        let at =
            |t: &Tensor, pos| t.narrow(2, pos, 1).unwrap().contiguous().unwrap().to_vec::<f32>().unwrap();
        assert_eq!(at(&keys, 1), (1..9).map(|i| i as f32).collect::<Vec<_>>());
        assert_eq!(at(&values, 1), (1..9).map(|i| -i as f32).collect::<Vec<_>>());
        assert_eq!([at(&keys, 0), at(&keys, 2)], [vec![0.0; 8], vec![0.0; 8]]);
        c.advance(1).unwrap();
        assert_eq!((c.len(), dev_len(&c)), (2, 2));
        c.count_replayed_step().unwrap();
        let past = c.count_replayed_step();
        assert!(past.is_err() && c.len() == 3, "a step past the capacity of 3 must fail");
        c.clear().unwrap();
        assert_eq!((c.len(), dev_len(&c)), (0, 0));
    }
}
