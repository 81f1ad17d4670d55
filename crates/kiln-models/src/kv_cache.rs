//! A KV cache allocated once for the whole sequence: per layer, keys and values of
//! `[B, kv_heads, capacity, head_dim]`. Each step writes its new rows in place
//! (`copy_` into a narrowed view) and attends over a view of the filled part, so decode
//! allocates nothing for the cache and never copies what is already there.

use kiln::{DType, Device, Error, Result, Tensor};

pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: usize,
    capacity: usize,
    /// Layers that have appended at the current step (all must before `len` advances).
    written: usize,
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
        Ok(KvCache { keys: mk()?, values: mk()?, len: 0, capacity, written: 0 })
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

    /// Forgets the contents (a new sequence reuses the memory).
    pub fn clear(&mut self) {
        self.len = 0;
        self.written = 0;
    }

    /// Pretends positions `0..len` are filled (benchmarks of decode at a given context
    /// length, whose cost does not depend on the cached values).
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity {
            return Err(Error::IndexOutOfRange { op: "kv_cache", index: len as i64, size: self.capacity });
        }
        self.len = len;
        self.written = 0;
        Ok(())
    }

    /// Writes `k`, `v` `[B, kv_heads, T, D]` at positions `len..len+T` of `layer` and
    /// returns views of positions `0..len+T`. The length advances once the last layer
    /// has appended.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = k.size(2)?;
        let end = self.len + t;
        if end > self.capacity {
            return Err(Error::invalid(
                "kv_cache",
                format!("{end} positions exceed the cache's capacity of {}", self.capacity),
            ));
        }
        let (kc, vc) = (&self.keys[layer], &self.values[layer]);
        kc.narrow(2, self.len, t)?.copy_(k)?;
        vc.narrow(2, self.len, t)?.copy_(v)?;
        self.written += 1;
        let views = (kc.narrow(2, 0, end)?, vc.narrow(2, 0, end)?);
        if self.written == self.keys.len() {
            self.len = end;
            self.written = 0;
        }
        Ok(views)
    }

    /// Bytes held by the cache.
    pub fn nbytes(&self) -> usize {
        self.keys.iter().chain(&self.values).map(|t| t.nbytes()).sum()
    }
}
