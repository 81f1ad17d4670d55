//! `causal_conv1d_update`: the causal depthwise convolution along time that LFM2's
//! short-conv layers and Qwen3.5's Gated DeltaNet run on their input projections, with the
//! inputs before this step carried as a state (the decode form of PyTorch's
//! `Conv1d(groups = C, padding = K − 1)` cut to the input's length; causal-conv1d's
//! `causal_conv1d_update`). One launch on CUDA (`kernels/causal_conv.cu`).

use crate::backend::{buf, on_backend, Backend};
use crate::error::{Error, Result};
use crate::{DType, Tensor};

/// The most taps a convolution may have (the kernel keeps them in registers;
/// causal-conv1d itself takes 2–4).
pub const CAUSAL_CONV_MAX_TAPS: usize = 8;

impl Tensor {
    /// `y[b, t, c] = act(bias[c] + Σ_j weight[c, j] · win[b, t + j, c])` over the window
    /// `win = [state, self]` along time, for `self` `[B, T, C]`, `state` `[B, K − 1, C]` (the
    /// K − 1 inputs before `self`: zeros at a sequence's start), `weight` `[C, K]` (Conv1d's
    /// `[C, 1, K]` reshaped) and `bias` `[C]`, all of one float dtype; `act` is SiLU when
    /// `silu`, else none. Writes the window's last K − 1 rows into `state` (which must be
    /// contiguous and not share `self`'s storage) and returns `y` `[B, T, C]`. Math in f32
    /// (f64 for f64 and on the CPU), one rounding per output. 1 ≤ K ≤
    /// [`CAUSAL_CONV_MAX_TAPS`].
    pub fn causal_conv1d_update(
        &self,
        state: &Tensor,
        weight: &Tensor,
        bias: Option<&Tensor>,
        silu: bool,
    ) -> Result<Tensor> {
        const OP: &str = "causal_conv1d_update";
        let dt = self.dtype;
        if !matches!(dt, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
            return Err(Error::DTypeNotSupported { op: OP, got: dt, expected: "f16, bf16, f32 or f64" });
        }
        for t in [state, weight].into_iter().chain(bias) {
            self.check_same_device(t, OP)?;
            if t.dtype != dt {
                return Err(Error::DTypeMismatch { op: OP, lhs: dt, rhs: t.dtype });
            }
        }
        let (&[b, t, c], &[wc, k]) = (self.shape(), weight.shape()) else {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "x must be [B, T, C] and weight [C, K], got {:?} and {:?}",
                    self.shape(),
                    weight.shape()
                ),
            ));
        };
        if wc != c || k == 0 || k > CAUSAL_CONV_MAX_TAPS {
            return Err(Error::bad_shape(
                OP,
                format!("weight {:?} must be [{c}, K] with 1 ≤ K ≤ {CAUSAL_CONV_MAX_TAPS}", weight.shape()),
            ));
        }
        if state.shape() != [b, k - 1, c] {
            return Err(Error::bad_shape(
                OP,
                format!("state {:?} must be [{b}, {}, {c}]", state.shape(), k - 1),
            ));
        }
        if let Some(bias) = bias.filter(|v| v.shape() != [c]) {
            return Err(Error::bad_shape(OP, format!("bias {:?} must be [{c}]", bias.shape())));
        }
        if !state.is_contiguous() {
            return Err(Error::invalid(OP, "the state must be contiguous: it is written in place"));
        }
        if [self, weight].into_iter().chain(bias).any(|v| state.same_storage(v)) {
            return Err(Error::invalid(OP, "the state must not share the storage of an input"));
        }
        // Contiguous views at any offset go as they are (a fused projection's slice of one row).
        let (x, w, bias) = (self.packed()?, weight.packed()?, bias.map(Tensor::packed).transpose()?);
        let (xg, wg, bg) = (x.read(), w.read(), bias.as_ref().map(|v| (v.read(), v.layout.offset)));
        let mut sg = state.write(OP)?;
        let dims = [b, t, c, k];
        let s_at = state.layout.offset;
        let y = on_backend!(&mut *sg, |B, sb| {
            let bias = bg.as_ref().map(|(g, at)| buf::<B>(g, OP).map(|v| (v, *at))).transpose()?;
            let (xb, wb) = ((buf::<B>(&xg, OP)?, x.layout.offset), (buf::<B>(&wg, OP)?, w.layout.offset));
            B::wrap(B::causal_conv(xb, (sb, s_at), wb, bias, dims, silu, dt)?)
        });
        Ok(Tensor::from_storage(y, &[b, t, c], dt, self.device))
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, seed, DType::F64, Device::Cpu).unwrap()
    }

    /// Two steps (a prompt, then one token) equal one pass over the whole sequence from a
    /// zero state, which equals the direct sum; the state ends as the last K − 1 inputs.
    #[test]
    fn steps_chain_and_match_the_direct_sum() {
        let (b, t, c, k) = (2, 6, 5, 4);
        let x = randn(&[b, t, c], 1);
        let (w, bias) = (randn(&[c, k], 2), randn(&[c], 3));
        for silu in [false, true] {
            let whole_state = Tensor::zeros(&[b, k - 1, c], DType::F64, Device::Cpu).unwrap();
            let whole = x.causal_conv1d_update(&whole_state, &w, Some(&bias), silu).unwrap();
            let state = Tensor::zeros(&[b, k - 1, c], DType::F64, Device::Cpu).unwrap();
            let first =
                x.narrow(1, 0, t - 1).unwrap().causal_conv1d_update(&state, &w, Some(&bias), silu).unwrap();
            let last =
                x.narrow(1, t - 1, 1).unwrap().causal_conv1d_update(&state, &w, Some(&bias), silu).unwrap();
            let chained = Tensor::cat(&[first, last], 1).unwrap().to_vec::<f64>().unwrap();
            assert_eq!(chained, whole.to_vec::<f64>().unwrap());
            assert_eq!(state.to_vec::<f64>().unwrap(), whole_state.to_vec::<f64>().unwrap());
            assert_eq!(
                state.to_vec::<f64>().unwrap(),
                x.narrow(1, t - (k - 1), k - 1).unwrap().contiguous().unwrap().to_vec::<f64>().unwrap()
            );
            let (xv, wv, bv) =
                (x.to_vec::<f64>().unwrap(), w.to_vec::<f64>().unwrap(), bias.to_vec::<f64>().unwrap());
            for (i, got) in chained.iter().enumerate() {
                let (bi, s, ch) = (i / (t * c), i / c % t, i % c);
                let mut v = bv[ch];
                for j in 0..k {
                    if let Some(p) = (s + j).checked_sub(k - 1) {
                        v += wv[ch * k + j] * xv[(bi * t + p) * c + ch];
                    }
                }
                if silu {
                    v /= 1.0 + (-v).exp();
                }
                assert!((got - v).abs() < 1e-12, "element {i}: {got} vs {v}");
            }
        }
    }

    #[test]
    fn refuses_bad_input() {
        let x = randn(&[1, 2, 3], 1);
        let s = Tensor::zeros(&[1, 2, 3], DType::F64, Device::Cpu).unwrap();
        let w = randn(&[3, 3], 2);
        let msg = |r: crate::Result<Tensor>| r.unwrap_err().to_string();
        assert!(msg(x.causal_conv1d_update(&s, &randn(&[3, 9], 2), None, false)).contains("1 ≤ K ≤ 8"));
        assert!(msg(x.causal_conv1d_update(&s, &randn(&[4, 3], 2), None, false)).contains("weight"));
        assert!(msg(x.causal_conv1d_update(&s.narrow(1, 0, 1).unwrap(), &w, None, false)).contains("state"));
        assert!(msg(x.causal_conv1d_update(&s, &w, Some(&randn(&[2], 3)), false)).contains("bias"));
        let strided = Tensor::zeros(&[1, 3, 2], DType::F64, Device::Cpu).unwrap().transpose(1, 2).unwrap();
        assert!(msg(x.causal_conv1d_update(&strided, &w, None, false)).contains("contiguous"));
        assert!(msg(x.causal_conv1d_update(&x.narrow(1, 0, 2).unwrap(), &w, None, false)).contains("share"));
        let f32s = s.to_dtype(DType::F32).unwrap();
        assert!(x.causal_conv1d_update(&f32s, &w, None, false).is_err());
        assert!(x.to_dtype(DType::I32).unwrap().causal_conv1d_update(&s, &w, None, false).is_err());
    }
}
