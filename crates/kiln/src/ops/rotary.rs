//! Rotary position embedding (`Tensor::rotary_embedding`): transformers'
//! `apply_rotary_pos_emb` for one tensor, as one kernel on CUDA; `Tensor::rms_norm_rotary`
//! puts each head's RMS norm in front (Qwen3's q / k norms), one kernel for q and k;
//! `Tensor::rotary_into_cache` also writes the keys and values to a KV cache in that kernel.

use crate::backend::{
    buf, on_backend, Backend, RotaryCache as BackendCache, RotaryNorm as BackendNorm,
    RotaryStart as BackendStart,
};
use crate::error::{Error, Result};
use crate::{DType, Tensor};

/// Where the first token of [`Tensor::rotary_embedding`] sits: token `t` of the input is at
/// position `start + t`.
#[derive(Clone, Copy)]
pub enum RotaryStart<'a> {
    /// A position known on the host.
    At(usize),
    /// The position in an int64 tensor of one element, read where it lives: on CUDA the
    /// kernel reads it, so a captured CUDA graph turns its tokens by wherever it is replayed.
    Device(&'a Tensor),
}

/// The RMS norms of [`Tensor::rms_norm_rotary`]: heads (dim -3) `0..split` normed with
/// `weights[0]`, the rest with `weights[1]`, each `[D]` — a model's query and key heads of
/// one projection, normed and turned in one launch.
#[derive(Clone, Copy)]
pub struct HeadNorm<'a> {
    /// Norm weights `[D]`: `weights[0]` for heads below `split`, `weights[1]` for the rest.
    pub weights: [&'a Tensor; 2],
    /// The first head normed with `weights[1]`.
    pub split: usize,
    /// Epsilon of the RMS norm.
    pub eps: f64,
}

/// The KV cache that [`Tensor::rotary_into_cache`] writes: keys and values
/// `[B, kv_heads, capacity, D]`, each a whole contiguous tensor of the input's dtype.
#[derive(Clone, Copy)]
pub struct KvSlots<'a> {
    /// The key cache.
    pub keys: &'a Tensor,
    /// The value cache.
    pub values: &'a Tensor,
}

impl Tensor {
    /// `self` `[B, Hq + 2·Hkv, T, D]` is a projection's query, key and value heads: the
    /// queries and keys are turned as by [`Tensor::rotary_embedding`] (after their RMS norms
    /// with `norm`, whose `split` must be Hq), the keys and the values are written to `cache`
    /// at positions `start..start + T`, and the queries `[B, Hq, T, D]` are returned. The
    /// same as the rotary op on the first Hq + Hkv heads and two copies into the caches; one
    /// kernel on CUDA, where a position past the cache read from a [`RotaryStart::Device`]
    /// tensor writes nothing (one known on the host is an error).
    pub fn rotary_into_cache(
        &self,
        q_heads: usize,
        norm: Option<HeadNorm>,
        cos: &Tensor,
        sin: &Tensor,
        start: RotaryStart,
        cache: KvSlots,
    ) -> Result<Tensor> {
        const OP: &str = "rotary_into_cache";
        let shape = self.shape();
        let kv_shape = cache.keys.shape();
        let fits = shape.len() == 4
            && kv_shape.len() == 4
            && cache.values.shape() == kv_shape
            && kv_shape[0] == shape[0]
            && kv_shape[3] == shape[3]
            && shape[1] == q_heads + 2 * kv_shape[1];
        if !fits {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "x {shape:?} must be [B, {q_heads} + 2·Hkv, T, D] with caches [B, Hkv, capacity, D] \
                     (keys {kv_shape:?}, values {:?})",
                    cache.values.shape()
                ),
            ));
        }
        let (hkv, t, capacity) = (kv_shape[1], shape[2], kv_shape[2]);
        for c in [cache.keys, cache.values] {
            self.check_same_device(c, OP)?;
            if c.dtype != self.dtype {
                return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: c.dtype });
            }
            if !c.is_contiguous() || c.layout.offset != 0 {
                return Err(Error::invalid(OP, "the caches must be whole contiguous tensors"));
            }
        }
        if let Some(n) = norm.filter(|n| n.split != q_heads) {
            return Err(Error::invalid(
                OP,
                format!("the norm's split {} must be the {q_heads} query heads", n.split),
            ));
        }
        let host_start = match start {
            RotaryStart::At(p) => Some(p),
            RotaryStart::Device(s) if !s.device.is_cuda() && s.numel() == 1 => {
                usize::try_from(s.item()? as i64).ok()
            }
            RotaryStart::Device(_) => None,
        };
        if let Some(p) = host_start.filter(|&p| p + t > capacity) {
            return Err(Error::bad_shape(
                OP,
                format!("positions {p}..{} past the cache's {capacity}", p + t),
            ));
        }
        let qk = self.narrow(1, 0, q_heads + hkv)?;
        if !self.device.is_cuda() {
            // The reference: the rotary op and two copies.
            let turned = match norm {
                Some(n) => qk.rms_norm_rotary(n, cos, sin, start)?,
                None => qk.rotary_embedding(cos, sin, start)?,
            };
            let p = host_start.ok_or_else(|| Error::invalid(OP, "start must be one int64 >= 0"))?;
            cache.keys.narrow(2, p, t)?.copy_(&turned.narrow(1, q_heads, hkv)?)?;
            cache.values.narrow(2, p, t)?.copy_(&self.narrow(1, q_heads + hkv, hkv)?)?;
            return turned.narrow(1, 0, q_heads);
        }
        self.rotary(OP, norm, cos, sin, start, Some((cache, q_heads)))
    }

    /// `x · cos + rotate_half(x) · sin` over the first `R` dims of each `[.., T, D]` row of
    /// `self`, the rest passed through (partial rotary), with `cos` / `sin` `[P, R]` tables
    /// (transformers' layout: each half of a row holds the same frequencies) indexed by the
    /// token's position; `rotate_half(x) = cat(-x[R/2..R], x[..R/2])`. transformers'
    /// `apply_rotary_pos_emb` for one tensor. Computed in f32 (f64 for f64) with one
    /// rounding; contiguous output. A position past the tables is an error, except one read
    /// on CUDA from a [`RotaryStart::Device`] tensor, which turns that row to NaN.
    pub fn rotary_embedding(&self, cos: &Tensor, sin: &Tensor, start: RotaryStart) -> Result<Tensor> {
        self.rotary("rotary_embedding", None, cos, sin, start, None)
    }

    /// [`Tensor::rotary_embedding`] of `self` `[.., H, T, D]` after `rms_norm` of each `[D]`
    /// row with its head's weight (see [`HeadNorm`]), the normed row rounded to the dtype as
    /// `rms_norm`'s output is: the same result as the two ops, one kernel on CUDA.
    pub fn rms_norm_rotary(
        &self,
        norm: HeadNorm,
        cos: &Tensor,
        sin: &Tensor,
        start: RotaryStart,
    ) -> Result<Tensor> {
        const OP: &str = "rms_norm_rotary";
        let heads = if self.rank() >= 3 { self.shape()[self.rank() - 3] } else { 0 };
        let d = self.shape().last().copied().unwrap_or(0);
        if heads == 0 || norm.split > heads {
            return Err(Error::bad_shape(
                OP,
                format!("x {:?} must be [.., H, T, D] with H >= split {}", self.shape(), norm.split),
            ));
        }
        for w in norm.weights {
            self.check_same_device(w, OP)?;
            if w.dtype != self.dtype {
                return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: w.dtype });
            }
            if w.shape() != [d] {
                return Err(Error::bad_shape(OP, format!("norm weight {:?} must be [{d}]", w.shape())));
            }
        }
        if !self.device.is_cuda() {
            // The reference: the two ops.
            let rank = self.rank() as isize;
            let part = |from: usize, len: usize, w: &Tensor| {
                self.narrow(rank - 3, from, len)?.rms_norm(&[d], Some(w), Some(norm.eps))
            };
            let normed = Tensor::cat(
                &[
                    part(0, norm.split, norm.weights[0])?,
                    part(norm.split, heads - norm.split, norm.weights[1])?,
                ],
                rank - 3,
            )?;
            return normed.rotary("rms_norm_rotary", None, cos, sin, start, None);
        }
        self.rotary(OP, Some(norm), cos, sin, start, None)
    }

    /// The three ops: checks, then the backend (`norm` and `cache`, with the query heads,
    /// only on CUDA, which fuses them).
    fn rotary(
        &self,
        op: &'static str,
        norm: Option<HeadNorm>,
        cos: &Tensor,
        sin: &Tensor,
        start: RotaryStart,
        cache: Option<(KvSlots, usize)>,
    ) -> Result<Tensor> {
        if !matches!(self.dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
            return Err(Error::DTypeNotSupported { op, got: self.dtype, expected: "f16, bf16, f32 or f64" });
        }
        for table in [cos, sin] {
            self.check_same_device(table, op)?;
            if table.dtype != self.dtype {
                return Err(Error::DTypeMismatch { op, lhs: self.dtype, rhs: table.dtype });
            }
        }
        if self.rank() < 2 || cos.rank() != 2 || cos.shape() != sin.shape() {
            return Err(Error::bad_shape(
                op,
                format!(
                    "x {:?} must be [.., T, D], cos {:?} and sin {:?} one [P, R]",
                    self.shape(),
                    cos.shape(),
                    sin.shape()
                ),
            ));
        }
        let (t, d) = (self.shape()[self.rank() - 2], self.shape()[self.rank() - 1]);
        let (positions, r) = (cos.shape()[0], cos.shape()[1]);
        if r == 0 || r % 2 == 1 || r > d {
            return Err(Error::bad_shape(
                op,
                format!("table width {r} must be even, positive and at most D = {d}"),
            ));
        }
        let past = |p: usize| {
            Error::bad_shape(op, format!("tokens at positions {p}..{} past the tables' {positions}", p + t))
        };
        if let RotaryStart::Device(s) = start {
            self.check_same_device(s, op)?;
            if s.dtype != DType::I64 || s.numel() != 1 {
                return Err(Error::bad_shape(
                    op,
                    format!("start must be one int64, got {:?} {:?}", s.dtype, s.shape()),
                ));
            }
        }
        // A start known on the host (given, or in a CPU tensor) is checked here; one in a
        // CUDA tensor stays there.
        let host_start = match start {
            RotaryStart::At(p) => Some(p),
            RotaryStart::Device(s) if !s.device.is_cuda() => {
                Some(usize::try_from(s.item()? as i64).map_err(|_| past(0))?)
            }
            RotaryStart::Device(_) => None,
        };
        if let Some(p) = host_start.filter(|&p| p + t > positions) {
            return Err(past(p));
        }
        // The kernel reads the tables and norm weights as dense rows.
        let (cos, sin) = (cos.dense()?, sin.dense()?);
        let norm = match norm {
            Some(n) => Some(([n.weights[0].dense()?, n.weights[1].dense()?], n.split, n.eps)),
            None => None,
        };
        let (cg, sg) = (cos.read(), sin.read());
        let start_guard = match start {
            RotaryStart::Device(s) if host_start.is_none() => Some((s.read(), s.layout.offset)),
            _ => None,
        };
        let norm_guards = norm.as_ref().map(|(w, split, eps)| (w.each_ref().map(|w| w.read()), *split, *eps));
        let cache_guards = match cache {
            Some((c, _)) => Some((c.keys.write(op)?, c.values.write(op)?)),
            None => None,
        };
        let storage = on_backend!(&*self.read(), |B, x| {
            let at = match (&start_guard, host_start) {
                (Some((g, offset)), _) => BackendStart::Device(buf::<B>(g, op)?, *offset),
                (None, p) => BackendStart::At(p.expect("no start tensor: a host start")),
            };
            let norm = match &norm_guards {
                Some(([g0, g1], split, eps)) => {
                    let weights = [buf::<B>(g0, op)?, buf::<B>(g1, op)?];
                    Some(BackendNorm { weights, split: *split, eps: *eps })
                }
                None => None,
            };
            let cache = match (&cache_guards, cache) {
                (Some((kg, vg)), Some((c, q_heads))) => {
                    let (keys, values) = (buf::<B>(kg, op)?, buf::<B>(vg, op)?);
                    let (kv_heads, capacity) = (c.keys.shape()[1], c.keys.shape()[2]);
                    Some(BackendCache { keys, values, q_heads, kv_heads, capacity })
                }
                _ => None,
            };
            let tables = [buf::<B>(&cg, op)?, buf::<B>(&sg, op)?];
            B::wrap(B::rotary(op, x, &self.layout, norm, cache, tables, positions, r, at, self.dtype)?)
        });
        let mut shape = self.shape().to_vec();
        if let Some((_, q_heads)) = cache {
            shape[1] = q_heads;
        }
        Ok(Tensor::from_storage(storage, &shape, self.dtype, self.device))
    }
}
