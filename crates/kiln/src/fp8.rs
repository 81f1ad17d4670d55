//! FP8: quantisation helpers, `Tensor::scaled_mm` (PyTorch's `torch._scaled_mm`) and
//! FP8-weight linear layers, with the op rules checked once here.
//!
//! Conventions (PyTorch / torchao): a scale is a *dequantisation* multiplier, so
//! `x ≈ x_fp8.to(f32) * scale`; quantising takes `amax = max|x|` (per tensor or per row),
//! `scale = max(amax, 1e-12) / 448` and `x_fp8 = clamp(x / scale, -448, 448)` cast to
//! float8_e4m3fn. Hugging Face FP8 checkpoints store the same multiplier beside each weight,
//! named `weight_scale` (per tensor or per output channel) or `weight_scale_inv`
//! (DeepSeek / Qwen3-FP8 128×128 blocks, despite the name also a multiplier).
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
//!   path "row-wise epilogue" (unit-scale f32 GEMM + `scaled_mm_epilogue` kernel).
//! - `quantize(.., Row)` on the GPU is one fused kernel (`quantize_rows`); tensor-wise is
//!   composed from elementwise ops (it runs once per weight).

use crate::error::{Error, Result};
use crate::io::safetensors::Checkpoint;
use crate::layout::Layout;
use crate::storage::Storage;
use crate::{cpu, DType, Device, Tensor};

/// Largest finite float8_e4m3fn value.
pub const E4M3_MAX: f64 = 448.0;
/// Floor of `amax` before dividing (torchao's EPS), so an all-zero row gets a finite scale.
pub const AMAX_EPS: f64 = 1e-12;

/// How many values share one scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// One scale for the whole tensor (scale shape `[]`).
    Tensor,
    /// One scale per row, i.e. per output channel of a `[N, K]` weight (scale shape `[N, 1]`).
    Row,
}

/// `(x_fp8, scale)` with `x ≈ x_fp8 · scale`: float8_e4m3fn values of `x`'s shape and f32
/// scales of shape `[]` (Tensor) or `[rows, 1]` (Row; `x` must be 2-D).
pub fn quantize(x: &Tensor, granularity: Granularity) -> Result<(Tensor, Tensor)> {
    if !matches!(x.dtype(), DType::F32 | DType::BF16 | DType::F16) {
        return Err(Error::DTypeNotSupported {
            op: "fp8::quantize",
            got: x.dtype(),
            expected: "f32, bf16 or f16",
        });
    }
    match granularity {
        Granularity::Tensor => quantize_with(&x.to_dtype(DType::F32)?, &[]),
        Granularity::Row => {
            if x.rank() != 2 {
                return Err(Error::bad_shape(
                    "fp8::quantize",
                    format!("row-wise quantisation needs a 2-D tensor, got {:?}", x.shape()),
                ));
            }
            let (rows, k) = (x.shape()[0], x.shape()[1]);
            if let (Device::Cuda(_), true) = (x.device(), k > 0) {
                let xd = x.dense()?;
                let (q, s) = match &*xd.read() {
                    Storage::Cuda(b) => crate::cuda::ops::quantize_rows(b, xd.dtype(), rows, k)?,
                    Storage::Cpu(_) => unreachable!("device checked above"),
                };
                let dev = x.device();
                return Ok((
                    Tensor::from_storage(Storage::Cuda(q), &[rows, k], DType::F8E4M3, dev),
                    Tensor::from_storage(Storage::Cuda(s), &[rows, 1], DType::F32, dev),
                ));
            }
            quantize_with(&x.to_dtype(DType::F32)?, &[-1])
        }
    }
}

/// The composed quantiser (the reference the fused GPU kernel matches bit for bit):
/// `x` is f32; the amax is taken over `dims` (all when empty), kept as size-1 dims.
fn quantize_with(x: &Tensor, dims: &[isize]) -> Result<(Tensor, Tensor)> {
    let amax = if x.numel() == 0 {
        let mut shape = vec![1; x.rank()];
        if !dims.is_empty() {
            shape[0] = x.shape()[0]; // per row of a 2-D tensor
        }
        Tensor::zeros(&shape, DType::F32, x.device())?
    } else {
        x.abs()?.max(dims, true)?
    };
    let scale = amax.maximum_scalar(AMAX_EPS)?.div_scalar(E4M3_MAX)?;
    let q = x.div(&scale)?.minimum_scalar(E4M3_MAX)?.maximum_scalar(-E4M3_MAX)?.to_dtype(DType::F8E4M3)?;
    let scale = if dims.is_empty() { scale.reshape(&[])? } else { scale };
    Ok((q, scale))
}

/// `scale_a` / `scale_b` shapes `torch._scaled_mm` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recipe {
    /// One f32 scale per operand (each a one-element tensor).
    TensorWise,
    /// `scale_a` `[M, 1]` (per row of a) and `scale_b` `[1, N]` (per column of b).
    RowWise,
}

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
        let storage = match (&*ga, &*gb, &*gsa, &*gsb) {
            (Storage::Cpu(x), Storage::Cpu(y), Storage::Cpu(s1), Storage::Cpu(s2)) => {
                let bias = gbias.as_deref().map(|g| match g {
                    Storage::Cpu(bb) => cpu_f32(bb, out_dtype),
                    Storage::Cuda(_) => unreachable!("devices checked above"),
                });
                Storage::Cpu(cpu::scaled_mm::scaled_mm(
                    (x, &a.layout, a.dtype()),
                    (y, &b.layout, b.dtype()),
                    s1.as_slice::<f32>(),
                    s2.as_slice::<f32>(),
                    bias.as_deref(),
                    out_dtype,
                ))
            }
            (Storage::Cuda(x), Storage::Cuda(y), Storage::Cuda(s1), Storage::Cuda(s2)) => {
                let bias = gbias.as_deref().map(|g| match g {
                    Storage::Cuda(bb) => bb,
                    Storage::Cpu(_) => unreachable!("devices checked above"),
                });
                Storage::Cuda(crate::cuda::ops::scaled_mm(crate::cuda::ops::ScaledMm {
                    a: (x, &a.layout, a.dtype()),
                    b: (y, &b.layout, b.dtype()),
                    b_frozen: b.is_frozen(),
                    scale_a: s1,
                    scale_b: s2,
                    recipe,
                    bias,
                    out: out_dtype,
                })?)
            }
            _ => unreachable!("devices checked above"),
        };
        Ok(Tensor::from_storage(storage, &[m, n], out_dtype, a.device()))
    }

    /// `F.linear(x, w.dequantize())` with an FP8 weight: `x` `[..., K]` (f32, bf16 or f16)
    /// times the `[N, K]` e4m3 weight and its scale; the result has `x`'s dtype and shape
    /// `[..., N]`, and `bias` `[N]` is added in that dtype. Which path serves which case:
    /// - CUDA, 1–16 rows (after flattening), bf16 / f16 `x`, K % 16 == 0 ("w8a16",
    ///   `cuda/ops/fp8_linear.rs`): `x` stays 16-bit, the weight is widened exactly in
    ///   registers, 16-bit tensor cores accumulate in f32, scale and bias are applied and the
    ///   result rounded once, all in one launch. It is therefore closer to
    ///   `x.linear(w.dequantize())` than the FP8 path (no activation rounding), and does not
    ///   match the CPU's `linear_fp8` bit for bit.
    /// - Everywhere else (CPU, f32 `x`, more rows, other K, unaligned weight rows): `x` is
    ///   quantised per row to e4m3 (torchao's dynamic-activation recipe; on the GPU one fused
    ///   kernel), then multiplied with the FP8 weight by the row-wise `scaled_mm`.
    pub fn linear_fp8(&self, w: &Fp8Weight, bias: Option<&Tensor>) -> Result<Tensor> {
        let (n, k) = (w.out_features(), w.in_features());
        if self.rank() == 0 || self.shape()[self.rank() - 1] != k {
            return Err(Error::ShapeMismatch {
                op: "linear_fp8",
                lhs: self.shape().to_vec(),
                rhs: vec![n, k],
            });
        }
        let lead = &self.shape()[..self.rank() - 1];
        let x = self.reshape(&[lead.iter().product(), k])?;
        let mut shape = lead.to_vec();
        shape.push(n);
        if let Some(y) = x.linear_w8a16(w, bias)? {
            return y.reshape(&shape);
        }
        let (xq, xs) = quantize(&x, Granularity::Row)?;
        let dt = self.dtype();
        // scaled_mm takes a bias only for 16-bit outputs; f32 adds it afterwards.
        let fused = bias.filter(|b| dt != DType::F32 && b.dtype() == dt);
        let mut y = xq.scaled_mm(&w.weight.t()?, &xs, &w.col_scale, dt, fused)?;
        if let (Some(b), None) = (bias, fused) {
            y = y.add(b)?;
        }
        y.reshape(&shape)
    }

    /// The w8a16 path of `linear_fp8` for a CUDA `[M, K]` `self` (see there); `None` leaves
    /// the call to the FP8 path, which also reports any device error.
    fn linear_w8a16(&self, w: &Fp8Weight, bias: Option<&Tensor>) -> Result<Option<Tensor>> {
        let (Device::Cuda(_), dev) = (self.device(), self.device()) else { return Ok(None) };
        if w.weight.device() != dev || w.scale.device() != dev {
            return Ok(None);
        }
        let (m, k, n, dt) = (self.shape()[0], self.shape()[1], w.out_features(), self.dtype());
        if let Some(why) = crate::cuda::ops::fp8_linear_declines(m, n, k, dt) {
            tracing::debug!("linear_fp8 {m}x[{n}, {k}] {dt}: FP8 path ({why})");
            return Ok(None);
        }
        // A bias of x's dtype must be [N] on x's device (the FP8 path's `scaled_mm` reports
        // it otherwise); one of another dtype is added afterwards, as there.
        let fused = match bias {
            Some(b) if b.dtype() == dt && (b.shape() != [n] || b.device() != dev) => return Ok(None),
            Some(b) if b.dtype() == dt => Some(b),
            _ => None,
        };
        let scale = w.scale.dense()?;
        let buf = {
            let (gx, gw, gs) = (self.read(), w.weight.read(), scale.read());
            let gb = fused.map(|b| b.read());
            let (Storage::Cuda(xb), Storage::Cuda(wb), Storage::Cuda(sb)) = (&*gx, &*gw, &*gs) else {
                unreachable!("devices checked above")
            };
            let bias_arg = match (gb.as_deref(), fused) {
                (Some(Storage::Cuda(b)), Some(bt)) => Some((b, &bt.layout)),
                _ => None,
            };
            crate::cuda::ops::fp8_linear(crate::cuda::ops::Fp8Linear {
                x: (xb, &self.layout),
                w: (wb, &w.weight.layout),
                scale: sb,
                rowwise: w.granularity == Granularity::Row,
                bias: bias_arg,
                dt,
            })?
        };
        let Some(buf) = buf else { return Ok(None) };
        let mut y = Tensor::from_storage(Storage::Cuda(buf), &[m, n], dt, dev);
        if let (Some(b), None) = (bias, fused) {
            y = y.add(b)?;
        }
        Ok(Some(y))
    }
}

/// A CPU bias of `dt` as f32 values.
fn cpu_f32(b: &cpu::CpuBuffer, dt: DType) -> Vec<f32> {
    let t = cpu::cast(b, &Layout::contiguous(&[b.len_bytes() / dt.size()]), dt, DType::F32);
    t.as_slice::<f32>().to_vec()
}

/// An FP8 linear weight: `[N, K]` float8_e4m3fn values plus their f32 scale (per tensor or
/// per output channel). Dequantised it is `weight.to(f32) * scale`.
#[derive(Clone, Debug)]
pub struct Fp8Weight {
    weight: Tensor,
    scale: Tensor,
    granularity: Granularity,
    /// `scale` as the `[1, N]` per-column vector the row-wise `scaled_mm` reads.
    col_scale: Tensor,
}

impl Fp8Weight {
    /// Quantises a `[N, K]` weight (f32, bf16 or f16), e.g. for `--quantize fp8`.
    pub fn quantize(w: &Tensor, granularity: Granularity) -> Result<Fp8Weight> {
        if w.rank() != 2 {
            return Err(Error::bad_shape(
                "Fp8Weight",
                format!("weight must be 2-D [N, K], got {:?}", w.shape()),
            ));
        }
        let (q, s) = quantize(w, granularity)?;
        Fp8Weight::from_parts(q, s)
    }

    /// From stored parts: `weight` `[N, K]` float8_e4m3fn and `scale` f32 with one element
    /// (per tensor) or N elements (`[N, 1]` or `[N]`, per output channel).
    pub fn from_parts(weight: Tensor, scale: Tensor) -> Result<Fp8Weight> {
        const OP: &str = "Fp8Weight";
        weight.check_same_device(&scale, OP)?;
        if weight.dtype() != DType::F8E4M3 || weight.rank() != 2 {
            return Err(Error::invalid(
                OP,
                format!("weight must be [N, K] float8_e4m3fn, got {:?} {}", weight.shape(), weight.dtype()),
            ));
        }
        let n = weight.shape()[0];
        let scale = scale.to_dtype(DType::F32)?;
        let granularity = match scale.numel() {
            1 => Granularity::Tensor,
            c if c == n && (scale.shape() == [n] || scale.shape() == [n, 1]) => Granularity::Row,
            _ => {
                return Err(Error::bad_shape(
                    OP,
                    format!("scale {:?} fits neither per-tensor [] nor per-row [{n}, 1]", scale.shape()),
                ))
            }
        };
        let scale = match granularity {
            Granularity::Tensor => scale.reshape(&[])?,
            Granularity::Row => scale.reshape(&[n, 1])?,
        };
        let col_scale = match granularity {
            Granularity::Tensor => scale.reshape(&[1, 1])?.broadcast_to(&[1, n])?.contiguous()?,
            Granularity::Row => scale.reshape(&[1, n])?.contiguous()?,
        };
        Ok(Fp8Weight { weight: weight.contiguous()?, scale, granularity, col_scale })
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// f32, shape `[]` (per tensor) or `[N, 1]` (per row).
    pub fn scale(&self) -> &Tensor {
        &self.scale
    }

    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// Bytes held on the device: the FP8 values plus the scales (a per-row weight's column
    /// scale is a view of its scale; a per-tensor one is its own `[1, N]` buffer).
    pub fn nbytes(&self) -> usize {
        let col = match self.granularity {
            Granularity::Row => 0,
            Granularity::Tensor => self.col_scale.nbytes(),
        };
        self.weight.nbytes() + self.scale.nbytes() + col
    }

    /// `weight · scale` in `dtype`.
    pub fn dequantize(&self, dtype: DType) -> Result<Tensor> {
        self.weight.to_dtype(DType::F32)?.mul(&self.scale)?.to_dtype(dtype)
    }

    pub fn to_device(&self, device: Device) -> Result<Fp8Weight> {
        Ok(Fp8Weight {
            weight: self.weight.to_device(device)?,
            scale: self.scale.to_device(device)?,
            granularity: self.granularity,
            col_scale: self.col_scale.to_device(device)?,
        })
    }
}

/// Loads `{prefix}.weight` of a Hugging Face FP8 checkpoint with its scale
/// (`{prefix}.weight_scale`, else `{prefix}.weight_scale_inv`): per tensor, per output
/// channel, or in `[⌈N/b⌉, ⌈K/b⌉]` blocks (DeepSeek / Qwen3-FP8, b = 128). Block scales are
/// converted once to per-row ones: the weight is dequantised in f32 and re-quantised per
/// row, so the layer runs on the row-wise path (which costs at most e4m3's rounding once
/// more on the rows whose blocks had different scales). The bias is left to the caller.
pub fn load_linear(checkpoint: &Checkpoint, prefix: &str, device: Device) -> Result<Fp8Weight> {
    let wname = format!("{prefix}.weight");
    let weight = checkpoint.load(&wname, device)?;
    if weight.dtype() != DType::F8E4M3 {
        return Err(Error::invalid(
            "fp8::load_linear",
            format!(
                "{wname} is {}, not float8_e4m3fn (use Fp8Weight::quantize for a dense weight)",
                weight.dtype()
            ),
        ));
    }
    let sname = [format!("{prefix}.weight_scale"), format!("{prefix}.weight_scale_inv")]
        .into_iter()
        .find(|s| checkpoint.contains(s))
        .ok_or_else(|| {
            Error::invalid("fp8::load_linear", format!("no {prefix}.weight_scale or .weight_scale_inv"))
        })?;
    let scale = checkpoint.load(&sname, device)?.to_dtype(DType::F32)?;
    let (n, k) = (weight.shape()[0], weight.shape()[1]);
    if scale.numel() == 1 || scale.numel() == n {
        return Fp8Weight::from_parts(weight, scale);
    }
    let dense = dequantize_blocks(&weight, &scale).map_err(|e| match e {
        Error::BadShape { msg, .. } => Error::bad_shape(
            "fp8::load_linear",
            format!("{sname} {:?} for weight [{n}, {k}]: {msg}", scale.shape()),
        ),
        e => e,
    })?;
    Fp8Weight::quantize(&dense, Granularity::Row)
}

/// `weight · scale` with one scale per `b × b` block (`scale` `[⌈N/b⌉, ⌈K/b⌉]`; b is 128
/// when that fits, else the smallest square block that does), in f32.
pub fn dequantize_blocks(weight: &Tensor, scale: &Tensor) -> Result<Tensor> {
    let (n, k) = (weight.shape()[0], weight.shape()[1]);
    let (sn, sk) = match scale.shape() {
        [a, b] => (*a, *b),
        s => {
            return Err(Error::bad_shape("dequantize_blocks", format!("block scales must be 2-D, got {s:?}")))
        }
    };
    // 128 (every published checkpoint) first: [2, 2] scales of a [200, 144] weight fit 100 too.
    let block =
        std::iter::once(128).chain(1..=n.max(k)).find(|b| n.div_ceil(*b) == sn && k.div_ceil(*b) == sk);
    let Some(b) = block.filter(|_| sn > 0 && sk > 0) else {
        return Err(Error::bad_shape("dequantize_blocks", "no square block size fits"));
    };
    // Expand each scale over its block: [sn, sk] -> [sn, b, sk, b] -> [sn·b, sk·b], cut to [n, k].
    let full = scale
        .reshape(&[sn, 1, sk, 1])?
        .broadcast_to(&[sn, b, sk, b])?
        .reshape(&[sn * b, sk * b])?
        .narrow(0, 0, n)?
        .narrow(1, 0, k)?;
    weight.to_dtype(DType::F32)?.mul(&full)
}

#[cfg(test)]
mod tests {
    use super::*;
    const CPU: Device = Device::Cpu;

    #[test]
    fn quantize_follows_torchao() {
        let w =
            Tensor::from_slice(&[1.0f32, -2.0, 0.5, 0.0, 0.0, 0.0, 3.0, 1e-3, -448.0], &[3, 3], CPU).unwrap();
        let (q, s) = quantize(&w, Granularity::Row).unwrap();
        assert_eq!(s.shape(), &[3, 1]);
        let s = s.to_vec::<f32>().unwrap();
        assert_eq!(s, vec![2.0 / 448.0, 1e-12 / 448.0, 448.0 / 448.0]);
        let q = q.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(&q[..3], &[224.0, -448.0, 112.0]);
        assert_eq!(&q[3..6], &[0.0, 0.0, 0.0]);
        assert_eq!(q[6], 3.0);
        assert_eq!(q[8], -448.0);
        let (qt, st) = quantize(&w, Granularity::Tensor).unwrap();
        assert_eq!(st.shape(), &[] as &[usize]);
        assert_eq!(st.item().unwrap(), (448.0f32 / 448.0) as f64);
        assert_eq!(qt.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()[1], -2.0);
    }

    #[test]
    fn quantize_round_trip_error_is_small() {
        let w = Tensor::randn(&[37, 64], 7, DType::BF16, CPU).unwrap();
        for g in [Granularity::Tensor, Granularity::Row] {
            let fw = Fp8Weight::quantize(&w, g).unwrap();
            let back = fw.dequantize(DType::F32).unwrap();
            let err =
                back.sub(&w.to_dtype(DType::F32).unwrap()).unwrap().abs().unwrap().max(&[], false).unwrap();
            let amax = w.to_dtype(DType::F32).unwrap().abs().unwrap().max(&[], false).unwrap();
            // e4m3 keeps 3 mantissa bits: relative error ≤ 2^-4 of the value, plus subnormals.
            assert!(err.item().unwrap() <= amax.item().unwrap() / 16.0 + 1e-6, "{g:?}");
        }
    }

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
            let fw = Fp8Weight::quantize(&w, g).unwrap();
            let y = x.linear_fp8(&fw, Some(&b)).unwrap();
            assert_eq!(y.shape(), &[2, 3, 40]);
            assert_eq!(y.dtype(), DType::BF16);
            let got = y.to_f64_vec().unwrap();
            let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 0.05 * scale, "{g:?}: {a} vs {b}");
            }
        }
        // f32 activations add the bias outside scaled_mm.
        let fw = Fp8Weight::quantize(&w, Granularity::Row).unwrap();
        let y =
            x.to_dtype(DType::F32).unwrap().linear_fp8(&fw, Some(&b.to_dtype(DType::F32).unwrap())).unwrap();
        assert_eq!(y.dtype(), DType::F32);
    }

    #[test]
    fn load_linear_reads_hf_layouts() {
        let dir = std::env::temp_dir().join(format!("kiln-fp8-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let w = Tensor::randn(&[200, 144], 5, DType::F32, CPU).unwrap();
        let (qt, st) = quantize(&w, Granularity::Tensor).unwrap();
        let (qr, sr) = quantize(&w, Granularity::Row).unwrap();
        // 128×128 blocks: quantise each block with its own scale.
        let blocks = Tensor::from_slice(&[0.02f32, 0.03, 0.04, 0.05], &[2, 2], CPU).unwrap();
        let full =
            dequantize_blocks(&Tensor::ones(&[200, 144], DType::F8E4M3, CPU).unwrap(), &blocks).unwrap();
        let qb = w.div(&full).unwrap().to_dtype(DType::F8E4M3).unwrap();
        let st1 = st.reshape(&[1]).unwrap();
        crate::io::safetensors::save(
            dir.join("model.safetensors"),
            &[
                ("t.weight", &qt),
                ("t.weight_scale", &st1),
                ("r.weight", &qr),
                ("r.weight_scale", &sr),
                ("b.weight", &qb),
                ("b.weight_scale_inv", &blocks),
                ("d.weight", &w),
            ],
        )
        .unwrap();
        let ck = Checkpoint::open(&dir).unwrap();
        let t = load_linear(&ck, "t", CPU).unwrap();
        assert_eq!(t.granularity(), Granularity::Tensor);
        let r = load_linear(&ck, "r", CPU).unwrap();
        assert_eq!(r.granularity(), Granularity::Row);
        assert_eq!(r.weight().to_raw_bytes().unwrap(), qr.to_raw_bytes().unwrap());
        let b = load_linear(&ck, "b", CPU).unwrap();
        assert_eq!(b.granularity(), Granularity::Row);
        let want = dequantize_blocks(&qb, &blocks).unwrap().to_f64_vec().unwrap();
        let got = b.dequantize(DType::F32).unwrap().to_f64_vec().unwrap();
        for (x, y) in got.iter().zip(&want) {
            assert!((x - y).abs() <= y.abs() / 8.0 + 1e-3, "{x} vs {y}");
        }
        assert!(load_linear(&ck, "d", CPU).unwrap_err().to_string().contains("not float8"));
        assert!(load_linear(&ck, "missing", CPU).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
