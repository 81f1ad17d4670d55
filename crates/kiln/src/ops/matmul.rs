//! `matmul` with PyTorch's rank rules (dot, mm, mv, batched with broadcasting), `linear`
//! and `grouped_mm`.

use crate::backend::{buf, on_backend, Backend, Route};
use crate::cpu::{self, Cpu};
use crate::cuda::ops::gemv::Pairs;
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::layout::broadcast_shapes;
use crate::{DType, Device, Tensor};

impl Tensor {
    /// `torch.matmul`: 1-D operands are lifted to matrices and their dim dropped again, batch
    /// dims broadcast. A few rows against a transposed contiguous weight take the GEMV kernels.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.check_same_device(rhs, "matmul")?;
        if self.dtype != rhs.dtype {
            return Err(Error::DTypeMismatch { op: "matmul", lhs: self.dtype, rhs: rhs.dtype });
        }
        if self.rank() == 0 || rhs.rank() == 0 {
            return Err(Error::invalid("matmul", "both arguments need at least one dimension"));
        }
        // Up to 8 rows against a transposed contiguous [N, K] weight (`x @ w.t()`): GEMV.
        if rhs.rank() == 2 {
            if let Some(y) = self.gemv(&rhs.t()?, None)? {
                return Ok(y);
            }
        }
        // Lift 1-D operands to matrices, remembering which dims to drop afterwards.
        let a = if self.rank() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if rhs.rank() == 1 { rhs.unsqueeze(1)? } else { rhs.clone() };
        let (ra, rb) = (a.rank(), b.rank());
        let (m, k, k2, n) = (a.shape()[ra - 2], a.shape()[ra - 1], b.shape()[rb - 2], b.shape()[rb - 1]);
        if k != k2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                lhs: self.shape().to_vec(),
                rhs: rhs.shape().to_vec(),
            });
        }
        let batch = broadcast_shapes(&a.shape()[..ra - 2], &b.shape()[..rb - 2])?;
        let mut sa = batch.clone();
        sa.extend([m, k]);
        let mut sb = batch.clone();
        sb.extend([k, n]);
        let (a, b) = (a.broadcast_to(&sa)?, b.broadcast_to(&sb)?);
        let mut out_shape = batch;
        out_shape.extend([m, n]);
        let yg = b.read();
        let storage = on_backend!(&*a.read(), |B, x| {
            B::wrap(B::matmul(x, &a.layout, buf::<B>(&yg, "matmul")?, &b.layout, a.dtype)?)
        });
        let mut out = Tensor::from_storage(storage, &out_shape, self.dtype, self.device);
        if rhs.rank() == 1 {
            out = out.squeeze(-1)?;
        }
        if self.rank() == 1 {
            out = out.squeeze(if rhs.rank() == 1 { -1 } else { -2 })?;
        }
        Ok(out)
    }

    /// PyTorch's `F.linear`: `x @ weight.T + bias`, weight `[out, in]`, x `[..., in]`.
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        if weight.rank() != 2 {
            return Err(Error::bad_shape(
                "linear",
                format!("weight must be 2-D [out, in], got {:?}", weight.shape()),
            ));
        }
        if let Some(y) = self.gemv(weight, bias)? {
            return Ok(y);
        }
        let y = self.matmul(&weight.t()?)?;
        match bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// SwiGLU of an MLP's gate and up projections, `silu(x · gateᵀ) · (x · upᵀ)`, for
    /// `self` `[..., K]` and `gate_up` `[2·I, K]` (gate rows, then up rows) → `[..., I]`.
    /// On CUDA 1–8 rows (a decode step) run as one GEMV launch whose warps each compute a
    /// gate row and its up row, rounded to the dtype as `linear` stores them, then SwiGLU
    /// as `silu_mul` computes it: the result is the composed one's. Anything else runs
    /// `linear`, then `silu_mul`.
    pub fn linear_swiglu(&self, gate_up: &Tensor) -> Result<Tensor> {
        const OP: &str = "linear_swiglu";
        let [two_i, k] = *gate_up.shape() else {
            return Err(Error::bad_shape(OP, format!("gate_up must be [2·I, K], got {:?}", gate_up.shape())));
        };
        if !two_i.is_multiple_of(2) {
            return Err(Error::bad_shape(
                OP,
                format!("gate_up has {two_i} rows: must be 2·I (gate, then up)"),
            ));
        }
        let rows = self.numel().checked_div(k).unwrap_or(0);
        let same =
            gate_up.device == self.device && gate_up.dtype == self.dtype && self.shape().last() == Some(&k);
        if self.device == Device::Cpu && same {
            if let Some(t) = self.cpu_gemv(gate_up, None, rows, Pairs(true))? {
                return Ok(t);
            }
        }
        let fused = self.device.is_cuda()
            && same
            && crate::cuda::ops::gemv::declines(rows, two_i, k, &gate_up.layout, self.dtype).is_none()
            && self.cuda_pairs_fit(gate_up);
        if !fused {
            let h = self.linear(gate_up, None)?;
            let i = two_i / 2;
            return h.narrow(-1, 0, i)?.silu_mul(&h.narrow(-1, i, i)?);
        }
        self.cuda_gemv(gate_up, None, Pairs(true))
    }

    /// Whether CUDA gate_up weight `w` `[2·I, K]` can run as SwiGLU pairs (alignment).
    fn cuda_pairs_fit(&self, w: &Tensor) -> bool {
        let why = Cuda::of(&w.read()).map_or(Some("not on CUDA"), |b| {
            let wp = b.ptr() + (w.layout.offset * w.dtype.size()) as u64;
            crate::cuda::ops::gemv::pairs_decline(w.shape()[0], w.shape()[1], wp, w.dtype)
        });
        Route::of(format_args!("linear_swiglu {:?} {}", w.shape(), w.dtype), why) == Route::Kernel
    }

    /// The GEMV path of `linear` and `matmul` (`cuda/ops/gemv.rs`, `cpu/gemv.rs`): `None`
    /// sends the call to the general path, which also reports any shape / dtype / device
    /// error.
    fn gemv(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<Tensor>> {
        let Some(&k) = self.shape().last() else { return Ok(None) };
        let n = weight.shape()[0];
        let same = |t: &Tensor| t.device == self.device && t.dtype == self.dtype;
        let bias_fits = bias.is_none_or(|b| same(b) && b.shape() == [n]);
        if !same(weight) || weight.shape()[1] != k || !bias_fits {
            return Ok(None);
        }
        let rows = self.numel().checked_div(k).unwrap_or(0);
        if self.device == Device::Cpu {
            return self.cpu_gemv(weight, bias, rows, Pairs(false));
        }
        let why = crate::cuda::ops::gemv::declines(rows, n, k, &weight.layout, self.dtype);
        if let Route::Composed(_) =
            Route::of(format_args!("linear {rows}x[{n}, {k}] {} (GEMV)", self.dtype), why)
        {
            return Ok(None);
        }
        self.cuda_gemv(weight, bias, Pairs(false)).map(Some)
    }

    /// The CUDA GEMV launch of [`Tensor::linear`] (and with `pairs`, of
    /// [`Tensor::linear_swiglu`]) once its callers checked devices, dtypes and shapes:
    /// `self` `[..., K]`, `weight` `[N, K]` → `[..., N]` (`[..., N / 2]` with pairs).
    fn cuda_gemv(&self, weight: &Tensor, bias: Option<&Tensor>, pairs: Pairs) -> Result<Tensor> {
        const OP: &str = "linear";
        let (xg, wg, bg) = (self.read(), weight.read(), bias.map(|b| b.read()));
        let bias = match (&bg, bias) {
            (Some(g), Some(b)) => Some((buf::<Cuda>(g, OP)?, &b.layout)),
            _ => None,
        };
        let (x, w) = (buf::<Cuda>(&xg, OP)?, buf::<Cuda>(&wg, OP)?);
        let y = crate::cuda::ops::gemv::linear(x, &self.layout, w, &weight.layout, bias, pairs, self.dtype)?;
        let mut shape = self.shape()[..self.rank() - 1].to_vec();
        shape.push(if pairs.0 { weight.shape()[0] / 2 } else { weight.shape()[0] });
        Ok(Tensor::from_storage(Cuda::wrap(y), &shape, self.dtype, self.device))
    }
    /// `torch._grouped_mm(self, b, offs)` for a 2-D `self` `[M, K]` and `b` `[G, K, N]`
    /// (the mixture-of-experts case): rows `offs[g-1]..offs[g]` of `self` times `b[g]`,
    /// stacked into `[M, N]`. `offs` is int32 `[G]` of cumulative group ends
    /// (non-decreasing, at most M); an empty group gives no rows. Rows past `offs[G-1]`
    /// are zero (PyTorch leaves them uninitialised). f32, f16 or bf16, one dtype, as
    /// PyTorch allows (its CUDA kernel takes bf16 only; kiln's takes all three).
    ///
    /// On CUDA the kernel of `kernels/grouped_mm.cu` reads `offs` on the device: no host
    /// sync, so it can run in a CUDA graph. Ends that go backwards or past M cannot be
    /// refused there, so on every backend they are clamped: each end is the running
    /// maximum of the ends so far, at most M (the CPU composes `matmul` per group).
    pub fn grouped_mm(&self, b: &Tensor, offs: &Tensor) -> Result<Tensor> {
        const OP: &str = "grouped_mm";
        self.check_same_device(b, OP)?;
        self.check_same_device(offs, OP)?;
        if !matches!(self.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::DTypeNotSupported { op: OP, got: self.dtype, expected: "f32, f16 or bf16" });
        }
        if self.dtype != b.dtype {
            return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: b.dtype });
        }
        if offs.dtype != DType::I32 {
            return Err(Error::DTypeNotSupported { op: OP, got: offs.dtype, expected: "int32 offsets" });
        }
        let (m, k) = match *self.shape() {
            [m, k] => (m, k),
            _ => return Err(Error::bad_shape(OP, format!("a must be [M, K], got {:?}", self.shape()))),
        };
        let (g, n) = match *b.shape() {
            [g, bk, n] if bk == k && offs.shape() == [g] => (g, n),
            _ => {
                return Err(Error::bad_shape(
                    OP,
                    format!(
                        "b must be [G, {k}, N] and offs [G] for a {:?}, got {:?} and {:?}",
                        self.shape(),
                        b.shape(),
                        offs.shape()
                    ),
                ))
            }
        };
        if let Device::Cuda(_) = self.device {
            if [m, k, n, g].iter().any(|&v| v > i32::MAX as usize) {
                return Err(Error::invalid(
                    OP,
                    format!("sizes past int32 on CUDA: a {:?}, b {:?}", self.shape(), b.shape()),
                ));
            }
            let g = [self.read(), b.read(), offs.read()];
            let [x, w, o] = g.each_ref().map(|g| buf::<Cuda>(g, OP));
            let y =
                crate::cuda::ops::grouped_mm(x?, &self.layout, w?, &b.layout, o?, &offs.layout, self.dtype)?;
            return Ok(Tensor::from_storage(Cuda::wrap(y), &[m, n], self.dtype, self.device));
        }
        let mut start = 0;
        let out = Tensor::zeros(&[m, n], self.dtype, self.device)?;
        for (i, &end) in offs.to_vec::<i32>()?.iter().enumerate() {
            let end = usize::try_from(end).unwrap_or(0).max(start).min(m);
            let rows = end - start;
            if rows > 0 {
                let y = self.narrow(0, start, rows)?.matmul(&b.narrow(0, i, 1)?.squeeze(0)?)?;
                out.narrow(0, start, rows)?.copy_(&y)?;
            }
            start = end;
        }
        Ok(out)
    }
}

impl Tensor {
    /// `cpu/gemv.rs` for up to `MAX_ROWS` rows against a contiguous f32 / bf16 / f16
    /// weight: the activations and bias are widened to f32, the weight is read as stored,
    /// and the f32 result rounds once to the dtype (as the GEMM path rounds).
    /// With `pairs`, the weight is `[2·I, K]` (gate, then up) and the result SwiGLU of the
    /// f32 products, `[..., I]`: one pass, without the composed `silu_mul`'s f64 `exp` per
    /// element (2.5% of a SmolLM2-135M decode step on a 2-core EPYC).
    fn cpu_gemv(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        rows: usize,
        pairs: Pairs,
    ) -> Result<Option<Tensor>> {
        let dt = self.dtype;
        let fits = matches!(dt, DType::F32 | DType::BF16 | DType::F16) && weight.layout.is_contiguous();
        if !fits || rows == 0 || rows > cpu::gemv::MAX_ROWS {
            return Ok(None);
        }
        let (n, k) = (weight.shape()[0], weight.shape()[1]);
        let x = self.to_dtype(DType::F32)?.to_vec::<f32>()?;
        let b = bias.map(|b| b.to_dtype(DType::F32)?.to_vec::<f32>()).transpose()?;
        let wg = weight.read();
        let w = (buf::<Cpu>(&wg, "linear")?, weight.layout.offset);
        let mut y = cpu::gemv::linear_of(&x, rows, k, w, n, dt, b.as_deref());
        let n = if pairs.0 {
            y = cpu::gemv::swiglu_rows(&y, rows, n);
            n / 2
        } else {
            n
        };
        let mut shape = self.shape()[..self.rank() - 1].to_vec();
        shape.push(n);
        Tensor::from_vec(y, &shape, Device::Cpu)?.to_dtype(dt).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    /// linear_swiglu is silu(x · gateᵀ) · (x · upᵀ); an odd number of gate_up rows is
    /// refused.
    #[test]
    fn linear_swiglu_is_linear_then_silu_mul() {
        let x = Tensor::randn(&[2, 3], 1, DType::F64, Device::Cpu).unwrap();
        let w = Tensor::randn(&[8, 3], 2, DType::F64, Device::Cpu).unwrap();
        let got = x.linear_swiglu(&w).unwrap();
        assert_eq!(got.shape(), [2, 4]);
        let (got, xv, wv) =
            (got.to_vec::<f64>().unwrap(), x.to_vec::<f64>().unwrap(), w.to_vec::<f64>().unwrap());
        for r in 0..2 {
            let dot = |o: usize| (0..3).map(|c| xv[r * 3 + c] * wv[o * 3 + c]).sum::<f64>();
            for o in 0..4 {
                let (g, u) = (dot(o), dot(4 + o));
                assert!((got[r * 4 + o] - g / (1.0 + (-g).exp()) * u).abs() < 1e-12, "row {r} out {o}");
            }
        }
        assert!(x.linear_swiglu(&w.narrow(0, 0, 7).unwrap()).unwrap_err().to_string().contains("2·I"));
    }

    /// The CPU's fused decode path (f32 / bf16, up to 8 rows) against linear then
    /// silu_mul computed in f64, at odd sizes.
    #[test]
    fn cpu_linear_swiglu_matches_the_composed_ops() {
        for (dt, tol) in [(DType::F32, 1e-5), (DType::BF16, 2e-2)] {
            for rows in [1, 3, 8] {
                let x = Tensor::randn(&[rows, 37], 3, dt, Device::Cpu).unwrap();
                let w = Tensor::randn(&[2 * 19, 37], 4, dt, Device::Cpu).unwrap();
                let got = x.linear_swiglu(&w).unwrap();
                assert_eq!((got.shape(), got.dtype()), (&[rows, 19][..], dt));
                let h =
                    x.to_dtype(DType::F64).unwrap().linear(&w.to_dtype(DType::F64).unwrap(), None).unwrap();
                let want = h.narrow(-1, 0, 19).unwrap().silu_mul(&h.narrow(-1, 19, 19).unwrap()).unwrap();
                let (got, want) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= tol * w.abs().max(1.0), "{dt:?} rows {rows}: {g} vs {w}");
                }
            }
        }
    }

    /// Each row of the output is its row of A times its group's B (f64 reference); an
    /// empty group gives no rows and rows past the last end are zero; bf16 rounds once.
    #[test]
    fn grouped_mm_multiplies_each_group_by_its_matrix() {
        let (m, k, n) = (7, 5, 3);
        let a = Tensor::randn(&[m, k], 1, DType::F32, Device::Cpu).unwrap();
        let b = Tensor::randn(&[3, k, n], 2, DType::F32, Device::Cpu).unwrap();
        let offs = Tensor::from_vec(vec![2i32, 2, 6], &[3], Device::Cpu).unwrap();
        let (av, bv) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        let group = |r: usize| [0, 0, 2, 2, 2, 2][r];
        let want: Vec<f64> = (0..m * n)
            .map(|x| {
                let (r, c) = (x / n, x % n);
                if r >= 6 {
                    return 0.0;
                }
                (0..k).map(|j| av[r * k + j] * bv[group(r) * k * n + j * n + c]).sum()
            })
            .collect();
        let got = a.grouped_mm(&b, &offs).unwrap();
        assert_eq!(got.shape(), &[m, n]);
        let err = got.to_f64_vec().unwrap().iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(err < 1e-5, "{err}");
        let (a16, b16) = (a.to_dtype(DType::BF16).unwrap(), b.to_dtype(DType::BF16).unwrap());
        let got16 = a16.grouped_mm(&b16, &offs).unwrap();
        let want16 =
            a16.to_dtype(DType::F32).unwrap().grouped_mm(&b16.to_dtype(DType::F32).unwrap(), &offs).unwrap();
        assert_eq!(got16.dtype(), DType::BF16);
        assert_eq!(got16.to_f64_vec().unwrap(), want16.to_dtype(DType::BF16).unwrap().to_f64_vec().unwrap());
    }

    #[test]
    fn grouped_mm_clamps_bad_offsets_and_refuses_bad_shapes_and_dtypes() {
        let a = Tensor::arange(0.0, 8.0, 1.0, DType::F32, Device::Cpu).unwrap().reshape(&[4, 2]).unwrap();
        let b = Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::Cpu).unwrap().reshape(&[2, 2, 3]).unwrap();
        let offs = |v: Vec<i32>| Tensor::from_vec(v, &[2], Device::Cpu).unwrap();
        // Ends that go backwards, past M or below 0 are clamped as the CUDA kernel clamps
        // them: each end the running maximum, at most M.
        for (bad, clamped) in [(vec![3, 1], vec![3, 3]), (vec![1, 5], vec![1, 4]), (vec![-1, 2], vec![0, 2])]
        {
            let got = a.grouped_mm(&b, &offs(bad.clone())).unwrap().to_vec::<f32>().unwrap();
            let want = a.grouped_mm(&b, &offs(clamped)).unwrap().to_vec::<f32>().unwrap();
            assert_eq!(got, want, "offs {bad:?}");
        }
        let msg = |r: crate::Result<Tensor>| r.expect_err("must be refused").to_string();
        assert!(msg(a.grouped_mm(&b, &offs(vec![1, 2]).to_dtype(DType::I64).unwrap())).contains("int32"));
        assert!(msg(a.grouped_mm(&b.reshape(&[2, 3, 2]).unwrap(), &offs(vec![1, 2]))).contains("[G, 2, N]"));
        assert!(msg(a.reshape(&[8]).unwrap().grouped_mm(&b, &offs(vec![1, 2]))).contains("[M, K]"));
        let f64a = a.to_dtype(DType::F64).unwrap();
        assert!(msg(f64a.grouped_mm(&b, &offs(vec![1, 2]))).contains("bf16"));
        assert!(a.grouped_mm(&b.to_dtype(DType::BF16).unwrap(), &offs(vec![1, 2])).is_err());
    }
}
