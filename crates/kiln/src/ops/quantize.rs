//! FP8 (float8_e4m3fn) quantisation: [`quantize`] per tensor or per row, and
//! [`dequantize_blocks`] for 128×128 block scales. Public as `kiln::fp8::*`.
//!
//! Conventions (PyTorch / torchao): a scale is a *dequantisation* multiplier, so
//! `x ≈ x_fp8.to(f32) * scale`; quantising takes `amax = max|x|` (per tensor or per row),
//! `scale = max(amax, 1e-12) / 448` and `x_fp8 = clamp(x / scale, -448, 448)` cast to
//! float8_e4m3fn. Row-wise on the GPU is one fused kernel (`quantize_rows`, bit for bit the
//! composed path); tensor-wise is composed from elementwise ops (it runs once per weight).

use crate::backend::{buf, Backend};
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::{DType, Device, Tensor};

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
                let (q, s) = crate::cuda::ops::quantize_rows(
                    buf::<Cuda>(&xd.read(), "fp8::quantize")?,
                    xd.dtype(),
                    rows,
                    k,
                )?;
                let dev = x.device();
                return Ok((
                    Tensor::from_storage(Cuda::wrap(q), &[rows, k], DType::F8E4M3, dev),
                    Tensor::from_storage(Cuda::wrap(s), &[rows, 1], DType::F32, dev),
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
    fn dequantize_blocks_spreads_each_scale_over_its_block() {
        // [200, 144] with [2, 2] scales: 128×128 blocks (100 would fit too), the last ones cut.
        let w = Tensor::ones(&[200, 144], DType::F8E4M3, CPU).unwrap();
        let s = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2], CPU).unwrap();
        let d = dequantize_blocks(&w, &s).unwrap().to_vec::<f32>().unwrap();
        let at = |r: usize, c: usize| d[r * 144 + c];
        assert_eq!([at(0, 0), at(127, 127), at(0, 128), at(128, 0), at(199, 143)], [1.0, 1.0, 2.0, 3.0, 4.0]);
        let bad = Tensor::ones(&[1, 5], DType::F32, CPU).unwrap(); // needs b ≥ 200 and b ≤ 36
        assert!(dequantize_blocks(&w, &bad).unwrap_err().to_string().contains("no square block"));
        let flat = Tensor::ones(&[4], DType::F32, CPU).unwrap();
        assert!(dequantize_blocks(&w, &flat).unwrap_err().to_string().contains("2-D"));
    }
}
