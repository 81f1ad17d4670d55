//! One decode token of Qwen3.5's Gated DeltaNet (`Tensor::gated_delta_step`), per batch and
//! value head `h` with an f32 state `S` `[dk, dv]` kept between steps:
//!
//! ```text
//! q, k   = l2norm(q) / √dk, l2norm(k)       of h's key head (x / √(Σx² + 1e-6))
//! S      ← exp(g) · S                        g = −exp(A_log) · softplus(a + dt_bias)
//! S      ← S + k ⊗ β (v − Sᵀ k)              β = sigmoid(b)
//! y      = rms_norm(Sᵀ q) · w · silu(z)      over the head's dv outputs
//! ```
//!
//! in f32 from inputs in the model's dtype, `y` rounded to it once. The composed form (about
//! 35 ops, kiln-models' `gated_delta.rs`) is what it replaces in a decode step; one kernel
//! on CUDA (`kernels/gated_delta.cu`), the same loops on the CPU.

use crate::backend::{buf, on_backend, Backend};
use crate::error::{Error, Result};
use crate::{DType, Tensor};

/// The layer's parameters for [`Tensor::gated_delta_step`].
#[derive(Clone, Copy)]
pub struct GatedDelta<'a> {
    /// `−exp(A_log)`, `[hv]` f32.
    pub neg_a: &'a Tensor,
    /// `[hv]` f32.
    pub dt_bias: &'a Tensor,
    /// The output norm's weight, `[dv]` f32, and its epsilon.
    pub norm: &'a Tensor,
    /// Epsilon of the output norm.
    pub eps: f64,
    /// Key heads; each serves `hv / key_heads` consecutive value heads.
    pub key_heads: usize,
}

impl Tensor {
    /// One token through a Gated DeltaNet layer's recurrence (the module docs):
    /// `self` is `[B, 2·hk·dk + hv·dv]` — q's key heads, k's, then v's value heads, after
    /// the causal convolution and SiLU — `b` and `a` `[B, hv]` the gate projections, `z`
    /// `[B, hv·dv]` the output gate, all in one float dtype; `state` `[B, hv, dk, dv]` f32,
    /// contiguous, is updated in place (it must not share an input's storage). Returns
    /// `y [B, hv·dv]`. Inputs that are contiguous at any offset (slices of one fused
    /// projection's row) are read where they are. On CUDA the key dim must be 16, 32, 64
    /// or 128 and the value dim at most 1024.
    pub fn gated_delta_step(
        &self,
        b: &Tensor,
        a: &Tensor,
        z: &Tensor,
        state: &Tensor,
        p: GatedDelta,
    ) -> Result<Tensor> {
        const OP: &str = "gated_delta_step";
        let dt = self.dtype;
        if !matches!(dt, DType::F16 | DType::BF16 | DType::F32) {
            return Err(Error::DTypeNotSupported { op: OP, got: dt, expected: "f16, bf16 or f32" });
        }
        for t in [b, a, z, state, p.neg_a, p.dt_bias, p.norm] {
            self.check_same_device(t, OP)?;
        }
        let f32s = [state, p.neg_a, p.dt_bias, p.norm].map(|t| (t, DType::F32));
        for (t, want) in [(b, dt), (a, dt), (z, dt)].into_iter().chain(f32s) {
            if t.dtype != want {
                return Err(Error::DTypeMismatch { op: OP, lhs: want, rhs: t.dtype });
            }
        }
        let &[batch, hv, dk, dv] = state.shape() else {
            return Err(Error::bad_shape(OP, format!("state {:?} must be [B, hv, dk, dv]", state.shape())));
        };
        let hk = p.key_heads;
        let channels = 2 * hk * dk + hv * dv;
        let want = [
            (self, vec![batch, channels], "qkv"),
            (b, vec![batch, hv], "b"),
            (a, vec![batch, hv], "a"),
            (z, vec![batch, hv * dv], "z"),
            (p.neg_a, vec![hv], "neg_a"),
            (p.dt_bias, vec![hv], "dt_bias"),
            (p.norm, vec![dv], "norm"),
        ];
        if hk == 0 || !hv.is_multiple_of(hk) {
            return Err(Error::bad_shape(OP, format!("{hk} key heads must divide the {hv} value heads")));
        }
        for (t, shape, name) in &want {
            if t.shape() != shape.as_slice() {
                return Err(Error::bad_shape(
                    OP,
                    format!(
                        "{name} {:?} must be {shape:?} for state {:?} and {hk} key heads",
                        t.shape(),
                        state.shape()
                    ),
                ));
            }
        }
        if !state.is_contiguous() {
            return Err(Error::invalid(OP, "the state must be contiguous: it is updated in place"));
        }
        if want.iter().any(|(t, _, _)| state.same_storage(t)) {
            return Err(Error::invalid(OP, "the state must not share the storage of an input"));
        }
        let dims = [batch, hk, hv, dk, dv];
        let ts = [self, b, a, z, p.neg_a, p.dt_bias, p.norm].map(|t| t.packed());
        let [x, b, a, z, neg_a, dt_bias, norm] = ts;
        let ts = [x?, b?, a?, z?, neg_a?, dt_bias?, norm?];
        let guards = ts.each_ref().map(|t| (t.read(), t.layout.offset));
        let mut sg = state.write(OP)?;
        let s_at = state.layout.offset;
        let y = on_backend!(&mut *sg, |B, s| {
            let [x, b, a, z, n, d, w] = guards.each_ref().map(|(g, o)| buf::<B>(g, OP).map(|b| (b, *o)));
            B::wrap(B::gated_delta_step([x?, b?, a?, z?], (s, s_at), [n?, d?, w?], dims, p.eps, dt)?)
        });
        Ok(Tensor::from_storage(y, &[batch, hv * dv], dt, self.device))
    }
}
