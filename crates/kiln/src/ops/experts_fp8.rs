//! Mixture-of-experts decode with FP8 experts: [`Tensor::expert_swiglu`] and
//! [`Tensor::expert_linear_sum`] for stacked float8_e4m3fn values `[E, N, K]` with f32 row
//! scales `[E, N]`. On CUDA (bf16 / f16 activations, K a multiple of 16) one launch each
//! (`cuda/ops/fp8_experts.rs`): the expert indices stay on the device and only the chosen
//! experts' bytes are read. Elsewhere the chosen experts are dequantised to f32 and
//! multiplied as batched products, with the same roundings: each product is rounded to the
//! activations' dtype before SwiGLU, the routed sum once at the end.

use super::experts::slots_per_x_row;
use super::index::check_index_dtype;
use crate::backend::{buf, Backend, Route};
use crate::cuda::ops::{fp8_experts_declines, Fp8Experts};
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::{DType, Device, Tensor};

/// Checks stacked FP8 experts: values `[E, N, K]` float8_e4m3fn and scales `[E, N]` f32 on
/// `x`'s device, and integer `experts` `[T, k]`; returns (E, N, K, T, k).
fn check(
    op: &'static str,
    x: &Tensor,
    values: &Tensor,
    scale: &Tensor,
    experts: &Tensor,
) -> Result<(usize, usize, usize, usize, usize)> {
    for t in [values, scale, experts] {
        x.check_same_device(t, op)?;
    }
    check_index_dtype(op, experts)?;
    if !x.dtype().is_float() {
        return Err(Error::DTypeNotSupported { op, got: x.dtype(), expected: "a floating dtype" });
    }
    let (ws, ss, es) = (values.shape(), scale.shape(), experts.shape());
    match (ws, es) {
        ([e, n, k], [t, slots]) if values.dtype() == DType::F8E4M3 && ss == [*e, *n] && scale.dtype() == DType::F32 => {
            if *e == 0 {
                return Err(Error::IndexOutOfRange { op, index: 0, size: 0 });
            }
            Ok((*e, *n, *k, *t, *slots))
        }
        _ => Err(Error::invalid(
            op,
            format!(
                "needs values [E, N, K] float8_e4m3fn, scales [E, N] f32 and experts [T, k]; got {ws:?} {}, {ss:?} {}, {es:?}",
                values.dtype(),
                scale.dtype()
            ),
        )),
    }
}

/// The chosen experts' products `[T, k, N]` in f32 (composed path): each slot's x row
/// (`per_row` slots share one) times its expert's dequantised values.
fn chosen_products(
    x: &Tensor,
    values: &Tensor,
    scale: &Tensor,
    experts: &Tensor,
    per_row: usize,
) -> Result<Tensor> {
    let (t, slots, n, k) = (experts.shape()[0], experts.shape()[1], values.shape()[1], values.shape()[2]);
    let idx = experts.reshape(&[t * slots])?;
    let w = values
        .index_select(0, &idx)?
        .to_dtype(DType::F32)?
        .mul(&scale.index_select(0, &idx)?.unsqueeze(2)?)?;
    let x = x.to_dtype(DType::F32)?.reshape(&[t, slots / per_row, 1, k])?.expand(&[t, slots, 1, k])?;
    x.reshape(&[t * slots, 1, k])?.matmul(&w.transpose(1, 2)?)?.reshape(&[t, slots, n])
}

/// Whether the CUDA kernels take `slots` slots against `values`, logged by [`Route`].
fn kernel_takes(op: &str, x: &Tensor, values: &Tensor, slots: usize) -> bool {
    if !matches!(x.device(), Device::Cuda(_)) {
        return false;
    }
    let why = fp8_experts_declines(slots, &values.layout, x.dtype());
    Route::of(format_args!("{op} {slots} slots of {:?} fp8 {}", values.shape(), x.dtype()), why)
        == Route::Kernel
}

/// Runs `launch` on the CUDA buffers of x, the values, the (dense) scales and the experts
/// as int64, and wraps its output `[shape]` in x's dtype.
fn on_cuda(
    op: &'static str,
    x: &Tensor,
    values: &Tensor,
    scale: &Tensor,
    experts: &Tensor,
    shape: &[usize],
    launch: impl FnOnce(Fp8Experts<'_>) -> Result<crate::cuda::DeviceBuffer>,
) -> Result<Tensor> {
    let idx = experts.to_dtype(DType::I64)?.dense()?;
    let g = [x.read(), values.read(), scale.read(), idx.read()];
    let [xb, w, s, e] = g.each_ref().map(|g| buf::<Cuda>(g, op));
    let y = launch(Fp8Experts {
        x: (xb?, &x.layout),
        w: (w?, &values.layout),
        scale: (s?, &scale.layout),
        experts: (e?, &idx.layout),
        dt: x.dtype(),
    })?;
    Ok(Tensor::from_storage(Cuda::wrap(y), shape, x.dtype(), x.device()))
}

impl Tensor {
    /// SwiGLU of the chosen FP8 gate_up experts: [`Tensor::expert_swiglu`] for stacked
    /// float8_e4m3fn `values` `[E, 2·I, K]` (gate rows, then up rows, per expert) with f32 row
    /// scales `scale` `[E, 2·I]`: slot (t, j) computes `g = x · dequant(values[e])ᵀ` (e =
    /// `experts[t, j]`), rounds it to x's dtype and stores `silu(g[..I]) · g[I..]` →
    /// `[T, k, I]`. x is `[T, K]` (every slot of a token reads its row) or `[T, k, K]`.
    /// Indices as in `expert_linear` (negative wraps once; still outside `[0, E)`: an
    /// error on the CPU, a zero row on the GPU).
    pub fn expert_swiglu_fp8(&self, values: &Tensor, scale: &Tensor, experts: &Tensor) -> Result<Tensor> {
        const OP: &str = "expert_swiglu_fp8";
        let (_, n2, k, t, slots) = check(OP, self, values, scale, experts)?;
        if !n2.is_multiple_of(2) {
            return Err(Error::bad_shape(
                OP,
                format!("gate_up experts have {n2} rows: must be 2·I (gate, then up)"),
            ));
        }
        let per_row = slots_per_x_row(OP, self.shape(), t, slots, k)?;
        let i = n2 / 2;
        if t * slots == 0 {
            return Tensor::zeros(&[t, slots, i], self.dtype(), self.device());
        }
        let scale = scale.dense()?;
        if kernel_takes(OP, self, values, t * slots) {
            return on_cuda(OP, self, values, &scale, experts, &[t, slots, i], |p| {
                crate::cuda::ops::fp8_expert_swiglu(p, per_row)
            });
        }
        let h = chosen_products(self, values, &scale, experts, per_row)?.to_dtype(self.dtype())?;
        h.narrow(-1, 0, i)?.silu_mul(&h.narrow(-1, i, i)?)
    }

    /// The down projection and routed sum of FP8 experts: [`Tensor::expert_linear_sum`]
    /// for stacked float8_e4m3fn `values` `[E, N, I]` with f32 row scales `scale` `[E, N]`:
    /// `y[t] = Σ_j weights[t, j] · dequant(values[experts[t, j]]) · self[t, j]` for `self`
    /// `[T, k, I]` → `[T, N]` in `self`'s dtype, summed in f32 and rounded once.
    pub fn expert_linear_sum_fp8(
        &self,
        values: &Tensor,
        scale: &Tensor,
        experts: &Tensor,
        weights: &Tensor,
    ) -> Result<Tensor> {
        const OP: &str = "expert_linear_sum_fp8";
        let (_, n, i, t, slots) = check(OP, self, values, scale, experts)?;
        self.check_same_device(weights, OP)?;
        if !weights.dtype().is_float() || weights.shape() != [t, slots] || self.shape() != [t, slots, i] {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "needs x [T, k, I] = [{t}, {slots}, {i}] and float weights [T, k]; got x {:?}, weights {:?} {}",
                    self.shape(),
                    weights.shape(),
                    weights.dtype()
                ),
            ));
        }
        if t * slots == 0 {
            return Tensor::zeros(&[t, n], self.dtype(), self.device());
        }
        let (weights, scale) = (weights.to_dtype(DType::F32)?.dense()?, scale.dense()?);
        if kernel_takes(OP, self, values, t * slots) {
            let r = weights.read();
            let rb = buf::<Cuda>(&r, OP)?;
            return on_cuda(OP, self, values, &scale, experts, &[t, n], |p| {
                crate::cuda::ops::fp8_expert_linear_sum(p, rb, weights.layout.offset)
            });
        }
        let y = chosen_products(self, values, &scale, experts, 1)?;
        weights.unsqueeze(1)?.matmul(&y)?.reshape(&[t, n])?.to_dtype(self.dtype())
    }
}

#[cfg(test)]
mod tests {
    use crate::fp8::{quantize, Granularity};
    use crate::{DType, Device, Tensor};

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, seed, DType::F32, Device::Cpu).unwrap()
    }

    /// Stacked FP8 experts of `[e, n, k]`: values and `[e, n]` row scales, and the
    /// dequantised f32 weights they stand for.
    fn fp8_experts(e: usize, n: usize, k: usize, seed: u64) -> (Tensor, Tensor, Tensor) {
        let (q, s) = quantize(&randn(&[e * n, k], seed), Granularity::Row).unwrap();
        let deq = q.to_dtype(DType::F32).unwrap().mul(&s).unwrap().reshape(&[e, n, k]).unwrap();
        (q.reshape(&[e, n, k]).unwrap(), s.reshape(&[e, n]).unwrap(), deq)
    }

    /// The FP8 ops equal the dense expert ops on the dequantised weights (f32 activations:
    /// the same products, summation order aside), for both x forms and a negative index.
    #[test]
    fn match_dense_experts_on_dequantised_weights() {
        let (e, i, h, t, k) = (5, 16, 32, 3, 2);
        let (gu, gus, gu_deq) = fp8_experts(e, 2 * i, h, 1);
        let (dn, dns, dn_deq) = fp8_experts(e, h, i, 2);
        let experts = Tensor::from_vec(vec![3i64, 0, -1, 3, 2, 1], &[t, k], Device::Cpu).unwrap();
        let weights = randn(&[t, k], 3);
        let close = |a: &Tensor, b: &Tensor| {
            let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
            assert_eq!(a.len(), b.len());
            for (p, q) in a.iter().zip(&b) {
                assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "{p} vs {q}");
            }
        };
        for x in [randn(&[t, h], 4), randn(&[t, k, h], 5)] {
            let got = x.expert_swiglu_fp8(&gu, &gus, &experts).unwrap();
            assert_eq!(got.shape(), [t, k, i]);
            close(&got, &x.expert_swiglu(&gu_deq, &experts).unwrap());
        }
        let act = randn(&[t, k, i], 6);
        let got = act.expert_linear_sum_fp8(&dn, &dns, &experts, &weights).unwrap();
        assert_eq!(got.shape(), [t, h]);
        close(&got, &act.expert_linear_sum(&dn_deq, &experts, &weights).unwrap());
    }

    #[test]
    fn refuse_bad_input_with_reasons() {
        let (gu, gus, gu_deq) = fp8_experts(4, 6, 16, 1);
        let experts = Tensor::from_vec(vec![0i64, 1], &[1, 2], Device::Cpu).unwrap();
        let x = randn(&[1, 16], 2);
        let msg = |r: crate::Result<Tensor>| r.unwrap_err().to_string();
        assert!(msg(x.expert_swiglu_fp8(&gu_deq, &gus, &experts)).contains("float8_e4m3fn"));
        assert!(
            msg(x.expert_swiglu_fp8(&gu, &gus.narrow(1, 0, 5).unwrap(), &experts)).contains("scales [E, N]")
        );
        assert!(msg(randn(&[2, 16], 2).expert_swiglu_fp8(&gu, &gus, &experts)).contains("x must be"));
        let (odd, odd_s, _) = fp8_experts(4, 5, 16, 1);
        assert!(msg(x.expert_swiglu_fp8(&odd, &odd_s, &experts)).contains("2·I"));
        let far = Tensor::from_vec(vec![0i64, 4], &[1, 2], Device::Cpu).unwrap();
        assert!(msg(x.expert_swiglu_fp8(&gu, &gus, &far)).contains("out of range"));
        let act = randn(&[1, 2, 16], 3);
        assert!(msg(act.expert_linear_sum_fp8(&gu, &gus, &experts, &randn(&[1, 3], 4)))
            .contains("weights [T, k]"));
        assert!(msg(randn(&[1, 2, 8], 3).expert_linear_sum_fp8(&gu, &gus, &experts, &randn(&[1, 2], 4)))
            .contains("x [T, k, I]"));
        let none = Tensor::zeros(&[0, 2], DType::I64, Device::Cpu).unwrap();
        assert_eq!(randn(&[0, 16], 2).expert_swiglu_fp8(&gu, &gus, &none).unwrap().shape(), [0, 2, 3]);
    }
}
