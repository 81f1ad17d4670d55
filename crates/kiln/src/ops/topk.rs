//! `topk` along one dim, and `router_topk`, the fused mixture-of-experts routers. Values
//! come sorted (descending for `largest`, ascending otherwise); ties keep the lower index
//! first; NaN counts as the largest value (first for `largest`, last otherwise) and -0 ties
//! with +0, as in PyTorch.

use crate::backend::{buf, on_backend, Backend};
use crate::error::{Error, Result};
use crate::layout::normalize_dim;
use crate::storage::Storage;
use crate::{DType, Tensor};

/// How a mixture-of-experts router scores experts from its logits.
#[derive(Clone, Copy, Debug)]
pub enum Router<'a> {
    /// Softmax over the experts; the k best probabilities are the weights (Mixtral,
    /// Qwen3-MoE).
    Softmax,
    /// Sigmoid scores; experts are chosen by score + `bias` (f32, one per expert) when
    /// given, and weighted by their unbiased score (DeepSeek-V3, LFM2).
    Sigmoid {
        /// Per-expert bias added to the scores for choosing experts only.
        bias: Option<&'a Tensor>,
    },
}

impl Tensor {
    /// The `k` largest (or smallest) elements along `dim` and their int64 indices. The
    /// GPU takes k <= 64 and element types of at most 32 bits.
    pub fn topk(&self, k: usize, dim: isize, largest: bool) -> Result<(Tensor, Tensor)> {
        if !self.dtype.is_float() && !self.dtype.is_int() && self.dtype != DType::Bool {
            return Err(Error::DTypeNotSupported { op: "topk", got: self.dtype, expected: "a real dtype" });
        }
        let d = normalize_dim(dim, self.rank())?;
        let size = self.shape().get(d).copied().unwrap_or(1);
        if k > size {
            return Err(Error::invalid("topk", format!("k = {k} is larger than the dim's size {size}")));
        }
        let last = self.rank().saturating_sub(1) as isize;
        let moved = if self.rank() == 0 { self.reshape(&[1])? } else { self.transpose(d as isize, last)? };
        let x = moved.dense()?;
        let outer = x.numel().checked_div(size).unwrap_or(0);
        let (v, i) = on_backend!(&*x.read(), |B, b| {
            let (v, i) = B::topk(b, x.dtype, outer, size, k, largest)?;
            (B::wrap(v), B::wrap(i))
        });
        let mut shape = moved.shape().to_vec();
        if let Some(l) = shape.last_mut() {
            *l = k;
        }
        let back = |s: Storage, dt: DType| -> Result<Tensor> {
            let t = Tensor::from_storage(s, &shape, dt, self.device);
            if self.rank() == 0 {
                t.reshape(&[])
            } else {
                t.transpose(d as isize, last)?.contiguous()
            }
        };
        Ok((back(v, self.dtype)?, back(i, DType::I64)?))
    }

    /// Mixture-of-experts routing over the last dim of router logits `[..., experts]`:
    /// scores by `router`, the `k` best experts (best first, ties to the lower index), and
    /// their weights. Returns (f32 weights `[..., k]`, int64 experts `[..., k]`).
    /// `renormalize = Some(eps)` divides the k weights by their sum + eps (Qwen3-MoE's
    /// `norm_topk_prob` is `Some(0.0)`; DeepSeek-V3 uses 1e-20, LFM2 1e-6); a routed scaling
    /// factor is left to the caller. On the GPU: one launch, no host sync, at most 2048
    /// experts and k <= 64. Group-limited selection (DeepSeek-V3's `topk_group`) is not done.
    pub fn router_topk(
        &self,
        k: usize,
        router: Router,
        renormalize: Option<f64>,
    ) -> Result<(Tensor, Tensor)> {
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported {
                op: "router_topk",
                got: self.dtype,
                expected: "a floating dtype",
            });
        }
        let r =
            *self.shape().last().ok_or_else(|| Error::invalid("router_topk", "needs at least one dim"))?;
        if k > r {
            return Err(Error::invalid("router_topk", format!("k = {k} is larger than the {r} experts")));
        }
        if renormalize.is_some_and(|e| e.is_nan() || e < 0.0) {
            return Err(Error::invalid("router_topk", "renormalize eps must be >= 0"));
        }
        let (sigmoid, bias) = match router {
            Router::Softmax => (false, None),
            Router::Sigmoid { bias } => (true, bias),
        };
        let bias = match bias {
            Some(b) => {
                self.check_same_device(b, "router_topk")?;
                if b.shape() != [r] {
                    return Err(Error::ShapeMismatch {
                        op: "router_topk",
                        lhs: b.shape().to_vec(),
                        rhs: vec![r],
                    });
                }
                Some(b.to_dtype(DType::F32)?.dense()?)
            }
            None => None,
        };
        let x = self.dense()?;
        let outer = x.numel().checked_div(r).unwrap_or(0);
        let bg = bias.as_ref().map(|b| b.read());
        let (w, i) = on_backend!(&*x.read(), |B, b| {
            let bias = bg.as_deref().map(|g| buf::<B>(g, "router_topk")).transpose()?;
            let (w, i) = B::router_topk(b, x.dtype, bias, outer, r, k, sigmoid, renormalize)?;
            (B::wrap(w), B::wrap(i))
        });
        let mut shape = self.shape().to_vec();
        *shape.last_mut().expect("rank checked above") = k;
        Ok((
            Tensor::from_storage(w, &shape, DType::F32, self.device),
            Tensor::from_storage(i, &shape, DType::I64, self.device),
        ))
    }
}
