//! `Tensor::scaled_mm` (PyTorch's `torch._scaled_mm`) and `Tensor::linear_fp8` (a linear
//! layer with an FP8 weight): their rules checked once here, then each backend computes.
//! Scales are dequantisation multipliers, as in [`super::quantize`].
//!
//! Which path serves which case:
//! - CPU: `cpu::scaled_mm` dequantises both operands in f32 and runs one f32 GEMM.
//! - GPU, M ≤ 16 (decode): `kernels/scaled_mm.cu` `fp8_gemv`, FP8 `mma.sync` streaming the
//!   weight once.
//! - `linear_fp8` on the GPU with 1–16 bf16 / f16 rows skips activation quantisation and
//!   `scaled_mm`: `kernels/fp8_linear.cu` ("w8a16") widens the weight to the activations'
//!   type in registers and runs 16-bit `mma.sync`, in one launch.
//! - GPU, M > 16: cuBLASLt FP8 GEMM; tensor-wise scales through `A/B_SCALE_POINTER`, row-wise
//!   through `OUTER_VEC_32F` scale modes, or, where cuBLASLt refuses those, the named slower
//!   path "row-wise epilogue" (unit-scale f32 GEMM + `scaled_mm_epilogue` kernel); kiln's own
//!   Hopper GEMM where `cuda/ops/scaled_mm.rs` says.
//! - `quantize(.., Row)` on the GPU is one fused kernel (`quantize_rows`); tensor-wise is
//!   composed from elementwise ops (it runs once per weight).

use super::quantize::{quantize, Granularity};
use super::Recipe;
use crate::backend::{buf, on_backend, Backend, Route, ScaledMm};
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::{DType, Device, Tensor};

fn is_fp8(dt: DType) -> bool {
    matches!(dt, DType::F8E4M3 | DType::F8E5M2)
}

impl Tensor {
    /// PyTorch's `torch._scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)`:
    /// `out = (a·scale_a) @ (b·scale_b) + bias`, accumulated in f32, rounded once to
    /// `out_dtype` (bf16, f16 or f32).
    ///
    /// Rules, as PyTorch's: `self` (a) `[M, K]` row-major float8, `b` `[K, N]` column-major
    /// float8 (the `w.t()` view of an `[N, K]` weight), not both e5m2; K a multiple of 16;
    /// scales f32, both tensor-wise (one element each) or both row-wise (`[M, 1]`, `[1, N]`);
    /// bias `[N]` of `out_dtype`, which must then be bf16 or f16. Unlike PyTorch, N need not
    /// be a multiple of 16.
    pub fn scaled_mm(
        &self,
        b: &Tensor,
        scale_a: &Tensor,
        scale_b: &Tensor,
        out_dtype: DType,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        const OP: &str = "scaled_mm";
        let a = self;
        for t in [b, scale_a, scale_b].into_iter().chain(bias) {
            a.check_same_device(t, OP)?;
        }
        if a.rank() != 2 || b.rank() != 2 {
            return Err(Error::bad_shape(
                OP,
                format!("a and b must be 2-D, got {:?} and {:?}", a.shape(), b.shape()),
            ));
        }
        if !is_fp8(a.dtype()) || !is_fp8(b.dtype()) {
            return Err(Error::invalid(
                OP,
                format!("a and b must be float8_e4m3fn or float8_e5m2, got {} and {}", a.dtype(), b.dtype()),
            ));
        }
        if a.dtype() == DType::F8E5M2 && b.dtype() == DType::F8E5M2 {
            return Err(Error::invalid(
                OP,
                "float8_e5m2 × float8_e5m2 is not supported (one operand must be e4m3)",
            ));
        }
        let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
        if b.shape()[0] != k {
            return Err(Error::ShapeMismatch { op: OP, lhs: a.shape().to_vec(), rhs: b.shape().to_vec() });
        }
        if !k.is_multiple_of(16) {
            return Err(Error::bad_shape(OP, format!("K = {k} must be a multiple of 16")));
        }
        if k > 1 && a.strides()[1] != 1 {
            return Err(Error::invalid(OP, format!("a must be row-major (strides {:?})", a.strides())));
        }
        if k > 1 && b.strides()[0] != 1 {
            return Err(Error::invalid(
                OP,
                format!("b must be column-major, e.g. w.t() of an [N, K] weight (strides {:?})", b.strides()),
            ));
        }
        if scale_a.dtype() != DType::F32 || scale_b.dtype() != DType::F32 {
            return Err(Error::invalid(
                OP,
                format!("scales must be float32, got {} and {}", scale_a.dtype(), scale_b.dtype()),
            ));
        }
        let recipe = if scale_a.numel() == 1 && scale_b.numel() == 1 {
            Recipe::TensorWise
        } else if scale_a.shape() == [m, 1] && scale_b.shape() == [1, n] {
            Recipe::RowWise
        } else {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "scales {:?} and {:?}: expected one element each (tensor-wise) or [{m}, 1] and [1, {n}] (row-wise)",
                    scale_a.shape(),
                    scale_b.shape()
                ),
            ));
        };
        if !matches!(out_dtype, DType::BF16 | DType::F16 | DType::F32) {
            return Err(Error::DTypeNotSupported { op: OP, got: out_dtype, expected: "bf16, f16 or f32" });
        }
        if let Some(bias) = bias {
            if out_dtype == DType::F32 {
                return Err(Error::invalid(
                    OP,
                    "bias is not supported when out_dtype is float32 (as in PyTorch)",
                ));
            }
            if bias.dtype() != out_dtype || bias.shape() != [n] {
                return Err(Error::invalid(
                    OP,
                    format!("bias must be [{n}] {out_dtype}, got {:?} {}", bias.shape(), bias.dtype()),
                ));
            }
        }
        let (sa, sb) = (scale_a.dense()?, scale_b.dense()?);
        let bias = bias.map(|t| t.dense()).transpose()?;
        let (ga, gb, gsa, gsb) = (a.read(), b.read(), sa.read(), sb.read());
        let gbias = bias.as_ref().map(|t| t.read());
        let storage = on_backend!(&*ga, |B, x| {
            let p = ScaledMm::<B> {
                a: (x, &a.layout, a.dtype()),
                b: (buf::<B>(&gb, OP)?, &b.layout, b.dtype()),
                b_frozen: b.is_frozen(),
                scale_a: buf::<B>(&gsa, OP)?,
                scale_b: buf::<B>(&gsb, OP)?,
                recipe,
                bias: gbias.as_deref().map(|g| buf::<B>(g, OP)).transpose()?,
                out: out_dtype,
            };
            B::wrap(B::scaled_mm(p)?)
        });
        Ok(Tensor::from_storage(storage, &[m, n], out_dtype, a.device()))
    }

    /// `F.linear(x, weight.to(f32) * scale)` with an FP8 weight: `x` `[..., K]` (f32, bf16 or
    /// f16) times the `[N, K]` float8_e4m3fn `weight`, whose f32 `scale` has one element (per
    /// tensor) or N (per output channel: `[N]`, `[N, 1]` or `[1, N]`); the result has `x`'s
    /// dtype and shape `[..., N]`, and `bias` `[N]` is added in that dtype. The FP8 path
    /// reads the scale as `[1, N]`: a layer that runs one per-tensor weight many times passes
    /// it broadcast to that shape once rather than have each call broadcast it. Which path
    /// serves which case:
    /// - CUDA, 1–16 rows (after flattening), bf16 / f16 `x`, K % 16 == 0 ("w8a16",
    ///   `cuda/ops/fp8_linear.rs`): `x` stays 16-bit, the weight is widened exactly in
    ///   registers, 16-bit tensor cores accumulate in f32, scale and bias are applied and the
    ///   result rounded once, all in one launch. It is therefore closer to
    ///   `x.linear(w.dequantize())` than the FP8 path (no activation rounding), and does not
    ///   match the CPU's `linear_fp8` bit for bit.
    /// - Everywhere else (CPU, f32 `x`, more rows, other K, unaligned weight rows): `x` is
    ///   quantised per row to e4m3 (torchao's dynamic-activation recipe; on the GPU one fused
    ///   kernel), then multiplied with the FP8 weight by the row-wise `scaled_mm`.
    pub fn linear_fp8(&self, weight: &Tensor, scale: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        const OP: &str = "linear_fp8";
        if weight.dtype() != DType::F8E4M3 || weight.rank() != 2 {
            return Err(Error::invalid(
                OP,
                format!("weight must be [N, K] float8_e4m3fn, got {:?} {}", weight.shape(), weight.dtype()),
            ));
        }
        let (n, k) = (weight.shape()[0], weight.shape()[1]);
        if self.rank() == 0 || self.shape()[self.rank() - 1] != k {
            return Err(Error::ShapeMismatch { op: OP, lhs: self.shape().to_vec(), rhs: vec![n, k] });
        }
        let per_channel = scale.numel() == n && matches!(scale.shape(), [_] | [_, 1] | [1, _]);
        if scale.dtype() != DType::F32 || (scale.numel() != 1 && !per_channel) {
            return Err(Error::invalid(
                OP,
                format!(
                    "scale must be f32 with one element or [{n}] / [{n}, 1] / [1, {n}], got {:?} {}",
                    scale.shape(),
                    scale.dtype()
                ),
            ));
        }
        let lead = &self.shape()[..self.rank() - 1];
        let x = self.reshape(&[lead.iter().product(), k])?;
        let mut shape = lead.to_vec();
        shape.push(n);
        if let Some(y) = x.linear_w8a16(weight, scale, bias)? {
            return y.reshape(&shape);
        }
        let col_scale = column_scale(scale, n)?;
        let (xq, xs) = quantize(&x, Granularity::Row)?;
        let dt = self.dtype();
        // scaled_mm takes a bias only for 16-bit outputs; f32 adds it afterwards.
        let fused = bias.filter(|b| dt != DType::F32 && b.dtype() == dt);
        let mut y = xq.scaled_mm(&weight.t()?, &xs, &col_scale, dt, fused)?;
        if let (Some(b), None) = (bias, fused) {
            y = y.add(b)?;
        }
        y.reshape(&shape)
    }

    /// The w8a16 path of `linear_fp8` for a CUDA `[M, K]` `self` and the weight and scale
    /// `linear_fp8` checked (see there); `None` leaves the call to the FP8 path, which also
    /// reports any device error.
    fn linear_w8a16(&self, weight: &Tensor, scale: &Tensor, bias: Option<&Tensor>) -> Result<Option<Tensor>> {
        let (Device::Cuda(_), dev) = (self.device(), self.device()) else { return Ok(None) };
        if weight.device() != dev || scale.device() != dev {
            return Ok(None);
        }
        let (m, k, n, dt) = (self.shape()[0], self.shape()[1], weight.shape()[0], self.dtype());
        let why = crate::cuda::ops::fp8_linear_declines(m, n, k, dt);
        if let Route::Composed(_) =
            Route::of(format_args!("linear_fp8 {m}x[{n}, {k}] {dt} (W8A16 kernel)"), why)
        {
            return Ok(None);
        }
        // A bias of x's dtype must be [N] on x's device (the FP8 path's `scaled_mm` reports
        // it otherwise); one of another dtype is added afterwards, as there.
        let fused = match bias {
            Some(b) if b.dtype() == dt && (b.shape() != [n] || b.device() != dev) => return Ok(None),
            Some(b) if b.dtype() == dt => Some(b),
            _ => None,
        };
        let rowwise = scale.numel() != 1;
        let scale = scale.dense()?;
        let buf = {
            const OP: &str = "linear_fp8";
            let (gx, gw, gs) = (self.read(), weight.read(), scale.read());
            let gb = fused.map(|b| b.read());
            let bias = match (&gb, fused) {
                (Some(g), Some(b)) => Some((buf::<Cuda>(g, OP)?, &b.layout)),
                _ => None,
            };
            crate::cuda::ops::fp8_linear(crate::cuda::ops::Fp8Linear {
                x: (buf::<Cuda>(&gx, OP)?, &self.layout),
                w: (buf::<Cuda>(&gw, OP)?, &weight.layout),
                scale: buf::<Cuda>(&gs, OP)?,
                rowwise,
                bias,
                dt,
            })?
        };
        let Some(buf) = buf else { return Ok(None) };
        let mut y = Tensor::from_storage(Cuda::wrap(buf), &[m, n], dt, dev);
        if let (Some(b), None) = (bias, fused) {
            y = y.add(b)?;
        }
        Ok(Some(y))
    }
}

/// A weight's f32 scale (one element, or one per output channel of `n`) as the `[1, N]`
/// column vector the row-wise `scaled_mm` of `linear_fp8` reads: a view of a per-channel
/// scale, a buffer of its own for a per-tensor one.
pub fn column_scale(scale: &Tensor, n: usize) -> Result<Tensor> {
    if scale.numel() == 1 {
        scale.reshape(&[1, 1])?.broadcast_to(&[1, n])?.contiguous()
    } else {
        scale.reshape(&[1, n])?.contiguous()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const CPU: Device = Device::Cpu;

    fn fp8(v: &[f32], shape: &[usize], dt: DType) -> Tensor {
        Tensor::from_slice(v, shape, CPU).unwrap().to_dtype(dt).unwrap()
    }

    #[test]
    fn scaled_mm_matches_dequantised_matmul() {
        let (m, k, n) = (3, 32, 5);
        let a = Tensor::randn(&[m, k], 1, DType::F32, CPU).unwrap().to_dtype(DType::F8E4M3).unwrap();
        let w = Tensor::randn(&[n, k], 2, DType::F32, CPU).unwrap().to_dtype(DType::F8E5M2).unwrap();
        let sa = Tensor::from_slice(&[0.5f32, 2.0, 1.5], &[m, 1], CPU).unwrap();
        let sb = Tensor::from_slice(&[1.0f32, 0.25, 3.0, 1.0, 0.5], &[1, n], CPU).unwrap();
        let bias = Tensor::randn(&[n], 3, DType::BF16, CPU).unwrap();
        let got = a.scaled_mm(&w.t().unwrap(), &sa, &sb, DType::BF16, Some(&bias)).unwrap();
        let af = a.to_dtype(DType::F64).unwrap().mul(&sa.to_dtype(DType::F64).unwrap()).unwrap();
        let wf = w.to_dtype(DType::F64).unwrap().t().unwrap().mul(&sb.to_dtype(DType::F64).unwrap()).unwrap();
        let want = af.matmul(&wf).unwrap().add(&bias.to_dtype(DType::F64).unwrap()).unwrap();
        let (g, r) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        for (x, y) in g.iter().zip(&r) {
            assert!((x - y).abs() <= 1e-2 * y.abs().max(1.0), "{x} vs {y}");
        }
        // Tensor-wise: scalars.
        let (s1, s2) =
            (Tensor::scalar(0.5, DType::F32, CPU).unwrap(), Tensor::scalar(4.0, DType::F32, CPU).unwrap());
        let got = a.scaled_mm(&w.t().unwrap(), &s1, &s2, DType::F32, None).unwrap();
        let want =
            a.to_dtype(DType::F32).unwrap().matmul(&w.to_dtype(DType::F32).unwrap().t().unwrap()).unwrap();
        let (g, w) = (got.to_vec::<f32>().unwrap(), want.mul_scalar(2.0).unwrap().to_vec::<f32>().unwrap());
        for (x, y) in g.iter().zip(&w) {
            assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{x} vs {y}");
        }
    }

    #[test]
    fn scaled_mm_rejects_what_pytorch_rejects() {
        let a = fp8(&[1.0; 64], &[2, 32], DType::F8E4M3);
        let w = fp8(&[1.0; 96], &[3, 32], DType::F8E4M3);
        let one = Tensor::scalar(1.0, DType::F32, CPU).unwrap();
        let err = |r: Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
        // b row-major
        let wt_rowmajor = w.t().unwrap().contiguous().unwrap();
        assert!(err(a.scaled_mm(&wt_rowmajor, &one, &one, DType::BF16, None)).contains("column-major"));
        // a column-major
        let a_t = a.t().unwrap().contiguous().unwrap().t().unwrap();
        assert!(err(a_t.scaled_mm(&w.t().unwrap(), &one, &one, DType::BF16, None)).contains("row-major"));
        // not fp8
        let af = a.to_dtype(DType::BF16).unwrap();
        assert!(err(af.scaled_mm(&w.t().unwrap(), &one, &one, DType::BF16, None)).contains("float8"));
        // e5m2 x e5m2
        let (a5, w5) = (a.to_dtype(DType::F8E5M2).unwrap(), w.to_dtype(DType::F8E5M2).unwrap());
        assert!(err(a5.scaled_mm(&w5.t().unwrap(), &one, &one, DType::BF16, None)).contains("e5m2"));
        // K not a multiple of 16
        let a24 = fp8(&[1.0; 48], &[2, 24], DType::F8E4M3);
        let w24 = fp8(&[1.0; 72], &[3, 24], DType::F8E4M3);
        assert!(
            err(a24.scaled_mm(&w24.t().unwrap(), &one, &one, DType::BF16, None)).contains("multiple of 16")
        );
        // wrong scale shapes / dtypes / mixed recipes
        let sa = Tensor::ones(&[2, 1], DType::F32, CPU).unwrap();
        let sb_bad = Tensor::ones(&[3, 1], DType::F32, CPU).unwrap();
        assert!(err(a.scaled_mm(&w.t().unwrap(), &sa, &sb_bad, DType::BF16, None)).contains("row-wise"));
        assert!(err(a.scaled_mm(&w.t().unwrap(), &sa, &one, DType::BF16, None)).contains("tensor-wise"));
        let half = Tensor::scalar(1.0, DType::BF16, CPU).unwrap();
        assert!(err(a.scaled_mm(&w.t().unwrap(), &half, &one, DType::BF16, None)).contains("float32"));
        // out dtype, bias rules
        assert!(a.scaled_mm(&w.t().unwrap(), &one, &one, DType::F8E4M3, None).is_err());
        let bias32 = Tensor::ones(&[3], DType::F32, CPU).unwrap();
        assert!(err(a.scaled_mm(&w.t().unwrap(), &one, &one, DType::F32, Some(&bias32))).contains("float32"));
        let bias16 = Tensor::ones(&[3], DType::F16, CPU).unwrap();
        assert!(err(a.scaled_mm(&w.t().unwrap(), &one, &one, DType::BF16, Some(&bias16))).contains("bias"));
        // shape mismatch
        let w2 = fp8(&[1.0; 48], &[3, 16], DType::F8E4M3);
        assert!(a.scaled_mm(&w2.t().unwrap(), &one, &one, DType::BF16, None).is_err());
    }

    #[test]
    fn linear_fp8_close_to_bf16_linear() {
        let x = Tensor::randn(&[2, 3, 64], 11, DType::BF16, CPU).unwrap();
        let w = Tensor::randn(&[40, 64], 12, DType::BF16, CPU).unwrap().mul_scalar(0.05).unwrap();
        let b = Tensor::randn(&[40], 13, DType::BF16, CPU).unwrap();
        let want = x.linear(&w, Some(&b)).unwrap().to_f64_vec().unwrap();
        for g in [Granularity::Tensor, Granularity::Row] {
            let (q, s) = quantize(&w, g).unwrap();
            let y = x.linear_fp8(&q, &s, Some(&b)).unwrap();
            assert_eq!(y.shape(), &[2, 3, 40]);
            assert_eq!(y.dtype(), DType::BF16);
            let got = y.to_f64_vec().unwrap();
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 0.05 * scale, "{g:?}: {a} vs {b}");
            }
            // Every accepted form of the same scale gives the same result.
            let forms = match g {
                Granularity::Tensor => vec![
                    s.reshape(&[1]).unwrap(),
                    s.reshape(&[1, 1]).unwrap().broadcast_to(&[1, 40]).unwrap(),
                ],
                Granularity::Row => vec![s.reshape(&[40]).unwrap(), s.reshape(&[1, 40]).unwrap()],
            };
            for s2 in forms {
                let y2 = x.linear_fp8(&q, &s2, Some(&b)).unwrap();
                assert_eq!(y2.to_f64_vec().unwrap(), got, "{g:?} scale {:?}", s2.shape());
            }
        }
        // f32 activations add the bias outside scaled_mm.
        let (q, s) = quantize(&w, Granularity::Row).unwrap();
        let y = x
            .to_dtype(DType::F32)
            .unwrap()
            .linear_fp8(&q, &s, Some(&b.to_dtype(DType::F32).unwrap()))
            .unwrap();
        assert_eq!(y.dtype(), DType::F32);
    }

    #[test]
    fn linear_fp8_checks_its_weight_and_scale() {
        let x = Tensor::randn(&[3, 64], 11, DType::BF16, CPU).unwrap();
        let w = Tensor::randn(&[40, 64], 12, DType::F32, CPU).unwrap();
        let (q, s) = quantize(&w, Granularity::Row).unwrap();
        let err = |r: Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(x.linear_fp8(&q.to_dtype(DType::F8E5M2).unwrap(), &s, None)).contains("float8_e4m3fn"));
        assert!(err(x.linear_fp8(&q.reshape(&[40, 1, 64]).unwrap(), &s, None)).contains("[N, K]"));
        assert!(err(x.linear_fp8(&q, &s.to_dtype(DType::BF16).unwrap(), None)).contains("scale must be f32"));
        let s2 = Tensor::ones(&[2, 20], DType::F32, CPU).unwrap();
        assert!(err(x.linear_fp8(&q, &s2, None)).contains("scale must be f32"));
        let s3 = Tensor::ones(&[39, 1], DType::F32, CPU).unwrap();
        assert!(err(x.linear_fp8(&q, &s3, None)).contains("scale must be f32"));
        let x48 = Tensor::randn(&[3, 48], 11, DType::BF16, CPU).unwrap();
        assert!(matches!(x48.linear_fp8(&q, &s, None), Err(Error::ShapeMismatch { .. })));
    }
}
