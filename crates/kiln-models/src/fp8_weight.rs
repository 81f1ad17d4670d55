//! FP8 linear weights on the model side: [`Fp8Weight`], a `[N, K]` float8_e4m3fn weight with
//! its f32 scale, run by [`Fp8Weight::forward`] (`Tensor::linear_fp8`), and [`load_linear`],
//! which reads one from a Hugging Face FP8 checkpoint. The quantiser and the ops are kiln's
//! (`kiln::fp8`, `Tensor::scaled_mm`, `Tensor::linear_fp8`).
//!
//! Hugging Face FP8 checkpoints store the dequantisation multiplier (`x ≈ x_fp8 · scale`)
//! beside each weight, named `weight_scale` (per tensor or per output channel) or
//! `weight_scale_inv` (DeepSeek / Qwen3-FP8 128×128 blocks, despite the name also a
//! multiplier).

use kiln::fp8::{column_scale, dequantize_blocks, quantize, Granularity};
use kiln::io::safetensors::Checkpoint;
use kiln::{DType, Device, Error, Result, Tensor};

/// An FP8 linear weight: `[N, K]` float8_e4m3fn values plus their f32 scale (per tensor or
/// per output channel). Dequantised it is `weight.to(f32) * scale`.
#[derive(Clone, Debug)]
pub struct Fp8Weight {
    weight: Tensor,
    scale: Tensor,
    granularity: Granularity,
    /// `scale` as the `[1, N]` per-column vector `linear_fp8`'s FP8 path reads, made once
    /// (a view of `scale` per row; its own buffer per tensor).
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
        if weight.device() != scale.device() {
            return Err(Error::DeviceMismatch { op: OP, lhs: weight.device(), rhs: scale.device() });
        }
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
        let col_scale = column_scale(&scale, n)?;
        Ok(Fp8Weight { weight: weight.contiguous()?, scale, granularity, col_scale })
    }

    /// `x @ dequantize(weight).T (+ bias)` in `x`'s dtype: `Tensor::linear_fp8`, which
    /// picks the path (w8a16 kernel at decode on CUDA, else quantised activations and the
    /// row-wise `scaled_mm`).
    pub fn forward(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        x.linear_fp8(&self.weight, &self.col_scale, bias)
    }

    /// The float8_e4m3fn values, `[N, K]` contiguous.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// f32, shape `[]` (per tensor) or `[N, 1]` (per row).
    pub fn scale(&self) -> &Tensor {
        &self.scale
    }

    /// The scale as one f32 per output row, `[N, 1]` (a per-tensor scale repeated).
    pub fn row_scale(&self) -> Result<Tensor> {
        let n = self.out_features();
        self.scale.reshape(&[self.scale.numel(), 1])?.broadcast_to(&[n, 1])?.contiguous()
    }

    /// Whether the scale is per tensor or per row.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// N: rows of the weight, the output features.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// K: columns of the weight, the input features.
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

    /// A copy on `device`.
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

#[cfg(test)]
mod tests {
    use super::*;
    const CPU: Device = Device::Cpu;

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

    #[test]
    fn forward_is_linear_fp8_on_the_parts() {
        let x = Tensor::randn(&[5, 64], 11, DType::BF16, CPU).unwrap();
        let w = Tensor::randn(&[40, 64], 12, DType::BF16, CPU).unwrap();
        let b = Tensor::randn(&[40], 13, DType::BF16, CPU).unwrap();
        for g in [Granularity::Tensor, Granularity::Row] {
            let fw = Fp8Weight::quantize(&w, g).unwrap();
            assert_eq!(fw.granularity(), g);
            let (q, s) = quantize(&w, g).unwrap();
            let want = x.linear_fp8(&q, &s, Some(&b)).unwrap().to_f64_vec().unwrap();
            assert_eq!(fw.forward(&x, Some(&b)).unwrap().to_f64_vec().unwrap(), want, "{g:?}");
        }
        let q = Tensor::ones(&[40, 64], DType::F8E4M3, CPU).unwrap();
        let bad = Tensor::ones(&[2, 20], DType::F32, CPU).unwrap();
        assert!(Fp8Weight::from_parts(q.clone(), bad).unwrap_err().to_string().contains("fits neither"));
        let dense = Tensor::ones(&[40, 64], DType::BF16, CPU).unwrap();
        let one = Tensor::scalar(1.0, DType::F32, CPU).unwrap();
        assert!(Fp8Weight::from_parts(dense, one).unwrap_err().to_string().contains("float8_e4m3fn"));
    }

    #[test]
    fn load_linear_reads_hf_layouts() {
        let dir = std::env::temp_dir().join(format!("kiln-fp8-load-linear-{}", std::process::id()));
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
        kiln::io::safetensors::save(
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
