//! softmax, log_softmax and rms_norm: row ops over one dim (or the trailing dims); group_norm
//! and batch_norm (training forward and backward), composed of kiln ops.

use crate::backend::{buf, on_backend, Backend, Route};
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::layout::normalize_dim;
use crate::Tensor;

impl Tensor {
    fn softmax_impl(&self, dim: isize, log: bool) -> Result<Tensor> {
        let op = if log { "log_softmax" } else { "softmax" };
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported { op, got: self.dtype, expected: "a floating dtype" });
        }
        let d = normalize_dim(dim, self.rank())?;
        if self.rank() == 0 {
            return self.softmax_impl_rows(1, log).map(|t| t.reshape(&[]))?;
        }
        let last = self.rank() - 1;
        let moved = self.transpose(d as isize, last as isize)?;
        let r = moved.shape()[last];
        let out = moved.softmax_impl_rows(r, log)?.reshape(moved.shape())?;
        out.transpose(d as isize, last as isize)?.contiguous()
    }

    /// softmax over contiguous rows of `r` elements.
    fn softmax_impl_rows(&self, r: usize, log: bool) -> Result<Tensor> {
        let x = self.dense()?;
        let outer = x.numel().checked_div(r).unwrap_or(0);
        let storage = on_backend!(&*x.read(), |B, b| B::wrap(B::softmax(b, x.dtype, outer, r, log)?));
        Ok(Tensor::from_storage(storage, &[x.numel()], x.dtype, x.device))
    }

    /// `torch.softmax` along `dim`.
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, false)
    }

    /// `torch.log_softmax` along `dim`.
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        self.softmax_impl(dim, true)
    }

    /// `F.rms_norm(x, normalized_shape, weight, eps)`; `eps = None` uses the dtype's
    /// machine epsilon, as PyTorch does.
    pub fn rms_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: Option<f64>,
    ) -> Result<Tensor> {
        let (w, r, eps) = self.rms_norm_args("rms_norm", normalized_shape, weight, eps)?;
        let x = self.dense()?;
        let wg = w.as_ref().map(|w| w.read());
        let storage = on_backend!(&*x.read(), |B, b| {
            let w = wg.as_deref().map(|g| buf::<B>(g, "rms_norm")).transpose()?;
            B::wrap(B::rms_norm(b, w, x.dtype, x.numel() / r.max(1), r, eps)?)
        });
        Ok(Tensor::from_storage(storage, self.shape(), self.dtype, self.device))
    }

    /// `(rms_norm(self + residual), self + residual)`: a residual add and the norm that
    /// follows it (a decoder layer's two joints) as one op, one kernel on CUDA. The sum is
    /// rounded to the dtype before it is normalised, as the two ops round. Same shape and
    /// dtype for both inputs (no broadcasting); arguments as [`Tensor::rms_norm`].
    pub fn add_rms_norm(
        &self,
        residual: &Tensor,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: Option<f64>,
    ) -> Result<(Tensor, Tensor)> {
        const OP: &str = "add_rms_norm";
        self.check_same_device(residual, OP)?;
        if residual.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: residual.shape().to_vec(),
            });
        }
        if residual.dtype != self.dtype {
            return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: residual.dtype });
        }
        let (w, r, eps) = self.rms_norm_args(OP, normalized_shape, weight, eps)?;
        let why = (!self.device.is_cuda()).then_some("a CUDA kernel only");
        if let Route::Composed(_) = Route::of(format_args!("{OP} {:?} {}", self.shape(), self.dtype), why) {
            let sum = self.add(residual)?;
            return Ok((sum.rms_norm(normalized_shape, w.as_ref(), Some(eps))?, sum));
        }
        let (x, res) = (self.dense()?, residual.dense()?);
        let (xg, rg, wg) = (x.read(), res.read(), w.as_ref().map(|w| w.read()));
        let (xb, rb) = (buf::<Cuda>(&xg, OP)?, buf::<Cuda>(&rg, OP)?);
        let wb = wg.as_deref().map(|g| buf::<Cuda>(g, OP)).transpose()?;
        let (y, sum) =
            crate::cuda::ops::add_rms_norm(xb, rb, wb, self.dtype, self.numel() / r.max(1), r, eps)?;
        let t = |b| Tensor::from_storage(Cuda::wrap(b), self.shape(), self.dtype, self.device);
        Ok((t(y), t(sum)))
    }

    /// rms_norm's checks; the weight as a dense tensor of `self`'s dtype, the normalised
    /// size and epsilon.
    fn rms_norm_args(
        &self,
        op: &'static str,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        eps: Option<f64>,
    ) -> Result<(Option<Tensor>, usize, f64)> {
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported { op, got: self.dtype, expected: "a floating dtype" });
        }
        let k = normalized_shape.len();
        if k > self.rank() || self.shape()[self.rank() - k..] != *normalized_shape {
            return Err(Error::ShapeMismatch {
                op,
                lhs: self.shape().to_vec(),
                rhs: normalized_shape.to_vec(),
            });
        }
        if let Some(w) = weight {
            self.check_same_device(w, op)?;
            if w.shape() != normalized_shape {
                return Err(Error::ShapeMismatch {
                    op,
                    lhs: w.shape().to_vec(),
                    rhs: normalized_shape.to_vec(),
                });
            }
        }
        let eps = eps.unwrap_or(match self.dtype {
            crate::DType::F64 => f64::EPSILON,
            crate::DType::F16 => 0.0009765625,
            crate::DType::BF16 => 0.0078125,
            _ => f32::EPSILON as f64,
        });
        let w = weight.map(|w| w.to_dtype(self.dtype).and_then(|w| w.dense())).transpose()?;
        Ok((w, normalized_shape.iter().product(), eps))
    }

    /// `F.group_norm(x, num_groups, weight, bias, eps)` for `x` `[N, C, *]`: each sample's
    /// channels in `num_groups` consecutive groups, normalised by the group's mean and biased
    /// variance, then `· weight[c] + bias[c]`. Computed in f32 (f64 for f64 inputs), output
    /// in `x`'s dtype; composed of kiln ops.
    pub fn group_norm(
        &self,
        num_groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        const OP: &str = "group_norm";
        let work = self.norm_work_dtype(OP)?;
        let (n, c) = (self.shape()[0], self.shape()[1]);
        if num_groups == 0 || !c.is_multiple_of(num_groups) {
            return Err(Error::invalid(OP, format!("{num_groups} groups do not divide {c} channels")));
        }
        let (w, b) = self.affine(OP, weight, bias, work)?;
        let per_group = c / num_groups * self.shape()[2..].iter().product::<usize>();
        let x = self.to_dtype(work)?.reshape(&[n, num_groups, per_group])?;
        let (var, mean) = x.var_mean(&[-1], 0.0, true)?;
        let mut y = x.sub(&mean)?.mul(&var.add_scalar(eps)?.rsqrt()?)?.reshape(self.shape())?;
        if let Some(w) = w {
            y = y.mul(&w)?;
        }
        if let Some(b) = b {
            y = y.add(&b)?;
        }
        y.to_dtype(self.dtype)
    }

    /// The dtype the norms compute in (f32, f64 for f64) after checking that `self` is a
    /// floating `[N, C, *]` input.
    fn norm_work_dtype(&self, op: &'static str) -> Result<crate::DType> {
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported { op, got: self.dtype, expected: "a floating dtype" });
        }
        if self.rank() < 2 {
            return Err(Error::bad_shape(op, format!("x must be [N, C, *], got {:?}", self.shape())));
        }
        Ok(if self.dtype == crate::DType::F64 { crate::DType::F64 } else { crate::DType::F32 })
    }

    /// A per-channel `[C]` tensor of `self` `[N, C, *]` (checked: device, shape) in `work`,
    /// shaped `[C, 1, …]` to broadcast over `self`.
    fn channel_param(&self, op: &'static str, t: &Tensor, work: crate::DType) -> Result<Tensor> {
        self.check_same_device(t, op)?;
        let c = self.shape()[1];
        if t.shape() != [c] {
            return Err(Error::ShapeMismatch { op, lhs: t.shape().to_vec(), rhs: vec![c] });
        }
        let mut per_channel = vec![c];
        per_channel.resize(self.rank() - 1, 1);
        t.to_dtype(work)?.reshape(&per_channel)
    }

    /// `channel_param` of an optional weight and bias.
    fn affine(
        &self,
        op: &'static str,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        work: crate::DType,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let param = |t: Option<&Tensor>| t.map(|t| self.channel_param(op, t, work)).transpose();
        Ok((param(weight)?, param(bias)?))
    }

    /// The dims a batch norm reduces over (all but 1) and the count of each channel.
    fn batch_norm_dims(&self, op: &'static str) -> Result<(Vec<isize>, usize)> {
        let dims: Vec<isize> = (0..self.rank() as isize).filter(|&d| d != 1).collect();
        let count = self.numel() / self.shape()[1].max(1);
        if count <= 1 {
            return Err(Error::invalid(
                op,
                format!("training needs more than 1 value per channel, got input {:?}", self.shape()),
            ));
        }
        Ok((dims, count))
    }

    /// `F.batch_norm(x, None, None, weight, bias, training=True, eps=eps)` for `self` `[N,
    /// C, *]` (`torch.native_batch_norm`): each channel normalised by its batch mean and
    /// biased variance over every dim but 1, then `· weight[c] + bias[c]`. Returns `(out,
    /// save_mean, save_invstd)`, the statistics `[C]` that [`Tensor::batch_norm_backward`]
    /// takes (`invstd = 1 / sqrt(var + eps)`); updating running statistics is the caller's
    /// (PyTorch uses the unbiased variance, `var · n / (n − 1)`, for them). Computed in
    /// f32 (f64 for f64), `out` in `self`'s dtype, the statistics in f32 / f64.
    pub fn batch_norm_train(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "batch_norm";
        let work = self.norm_work_dtype(OP)?;
        let (w, b) = self.affine(OP, weight, bias, work)?;
        let (dims, _) = self.batch_norm_dims(OP)?;
        let x = self.to_dtype(work)?;
        let (var, mean) = x.var_mean(&dims, 0.0, true)?;
        let invstd = var.add_scalar(eps)?.rsqrt()?;
        let mut y = x.sub(&mean)?.mul(&invstd)?;
        if let Some(w) = w {
            y = y.mul(&w)?;
        }
        if let Some(b) = b {
            y = y.add(&b)?;
        }
        let c = [self.shape()[1]];
        Ok((y.to_dtype(self.dtype)?, mean.reshape(&c)?, invstd.reshape(&c)?))
    }

    /// `torch.native_batch_norm_backward` in training mode with `self` as `grad_out` (of
    /// `x`'s shape), `mean` and `invstd` `[C]` from [`Tensor::batch_norm_train`]: `(grad_input,
    /// grad_weight, grad_bias)`, with `ĝ = grad_out`, `x̂ = (x − mean) · invstd` and n values
    /// per channel: `grad_bias = Σ ĝ`, `grad_weight = Σ ĝ x̂`, `grad_input = (ĝ − grad_bias
    /// / n − x̂ · grad_weight / n) · invstd · weight` (weight 1 when absent).
    pub fn batch_norm_backward(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        mean: &Tensor,
        invstd: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "batch_norm_backward";
        let work = x.norm_work_dtype(OP)?;
        if self.shape() != x.shape() {
            return Err(Error::ShapeMismatch { op: OP, lhs: self.shape().to_vec(), rhs: x.shape().to_vec() });
        }
        let (dims, count) = x.batch_norm_dims(OP)?;
        let (mean, invstd) = (x.channel_param(OP, mean, work)?, x.channel_param(OP, invstd, work)?);
        let dy = self.to_dtype(work)?;
        let xhat = x.to_dtype(work)?.sub(&mean)?.mul(&invstd)?;
        let grad_bias = dy.sum(&dims, true)?;
        let grad_weight = dy.mul(&xhat)?.sum(&dims, true)?;
        let n = count as f64;
        let mut scale = invstd;
        if let Some(w) = weight {
            let w = x.channel_param(OP, w, work)?;
            scale = scale.mul(&w)?;
        }
        let gx =
            dy.sub(&grad_bias.div_scalar(n)?)?.sub(&xhat.mul(&grad_weight.div_scalar(n)?)?)?.mul(&scale)?;
        let c = [x.shape()[1]];
        Ok((gx.to_dtype(self.dtype)?, grad_weight.reshape(&c)?, grad_bias.reshape(&c)?))
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    #[test]
    fn group_norm_normalises_each_group_then_scales_each_channel() {
        // [1, 4, 2]: groups {c0, c1} = 1 2 3 4 and {c2, c3} = 10 10 10 10 (zero variance).
        let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0], &[1, 4, 2], Device::Cpu)
            .unwrap();
        let w = Tensor::from_slice(&[1f32, 2.0, 1.0, 1.0], &[4], Device::Cpu).unwrap();
        let b = Tensor::from_slice(&[0f32, 0.0, 0.0, 5.0], &[4], Device::Cpu).unwrap();
        let y = x.group_norm(2, Some(&w), Some(&b), 0.0).unwrap().to_f64_vec().unwrap();
        let z = |v: f64| (v - 2.5) / 1.25f64.sqrt();
        let want = [z(1.0), z(2.0), 2.0 * z(3.0), 2.0 * z(4.0)];
        for (a, w) in y[..4].iter().zip(want) {
            assert!((a - w).abs() < 1e-6, "{a} vs {w}");
        }
        // 0 / sqrt(0 + eps) with eps = 0 is NaN in PyTorch too; with eps it is 0 (+ bias).
        let y = x.group_norm(2, None, Some(&b), 1e-5).unwrap().to_f64_vec().unwrap();
        assert_eq!(&y[4..], &[0.0, 0.0, 5.0, 5.0]);
    }

    #[test]
    fn group_norm_refuses_bad_groups_shapes_and_dtypes() {
        let x = Tensor::zeros(&[2, 6, 3], DType::F32, Device::Cpu).unwrap();
        let msg = |r: crate::Result<Tensor>| r.expect_err("must be refused").to_string();
        assert!(msg(x.group_norm(4, None, None, 1e-5)).contains("do not divide"));
        assert!(msg(x.group_norm(0, None, None, 1e-5)).contains("do not divide"));
        let w = Tensor::ones(&[3], DType::F32, Device::Cpu).unwrap();
        assert!(x.group_norm(3, Some(&w), None, 1e-5).is_err());
        assert!(msg(x.reshape(&[36]).unwrap().group_norm(1, None, None, 1e-5)).contains("[N, C, *]"));
        assert!(Tensor::zeros(&[2, 6], DType::I32, Device::Cpu)
            .unwrap()
            .group_norm(2, None, None, 1e-5)
            .is_err());
    }

    /// batch_norm_train normalises each channel over every other dim; its backward equals
    /// central differences of `Σ g · batch_norm(x)` in x, weight and bias (f64, odd sizes).
    #[test]
    fn batch_norm_backward_matches_finite_differences() {
        let dev = Device::Cpu;
        let x = Tensor::randn(&[3, 2, 5], 1, DType::F64, dev).unwrap();
        let w = Tensor::randn(&[2], 2, DType::F64, dev).unwrap();
        let b = Tensor::randn(&[2], 3, DType::F64, dev).unwrap();
        let g = Tensor::randn(&[3, 2, 5], 4, DType::F64, dev).unwrap();
        let eps = 1e-5;
        let (y, mean, invstd) = x.batch_norm_train(Some(&w), Some(&b), eps).unwrap();
        let z = y.sub(&b.reshape(&[2, 1]).unwrap()).unwrap().div(&w.reshape(&[2, 1]).unwrap()).unwrap();
        let (var, m) = z.var_mean(&[0, 2], 0.0, false).unwrap();
        assert!(m.to_f64_vec().unwrap().iter().all(|v| v.abs() < 1e-12));
        let var = var.to_f64_vec().unwrap();
        let inv = invstd.to_f64_vec().unwrap();
        assert!(var.iter().zip(&inv).all(|(v, i)| (v - (1.0 - eps * i * i)).abs() < 1e-12));
        let (gx, gw, gb) = g.batch_norm_backward(&x, Some(&w), &mean, &invstd).unwrap();
        let loss = |x: &Tensor, w: &Tensor, b: &Tensor| {
            let y = x.batch_norm_train(Some(w), Some(b), eps).unwrap().0;
            y.mul(&g).unwrap().sum(&[], false).unwrap().item().unwrap()
        };
        // d loss / d t[i] by central differences, for every element of `t` in (x, w, b).
        let numeric = |which: usize| -> Vec<f64> {
            let base = [&x, &w, &b][which].to_f64_vec().unwrap();
            let shape = [&x, &w, &b][which].shape().to_vec();
            (0..base.len())
                .map(|i| {
                    let at = |d: f64| {
                        let mut v = base.clone();
                        v[i] += d;
                        let t = Tensor::from_vec(v, &shape, dev).unwrap();
                        let mut args = [x.clone(), w.clone(), b.clone()];
                        args[which] = t;
                        loss(&args[0], &args[1], &args[2])
                    };
                    (at(1e-6) - at(-1e-6)) / 2e-6
                })
                .collect()
        };
        for (which, got) in [gx, gw, gb].iter().enumerate() {
            let want = numeric(which);
            let got = got.to_f64_vec().unwrap();
            assert!(got.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6), "{which}: {got:?} vs {want:?}");
        }
    }

    #[test]
    fn batch_norm_refuses_single_values_and_bad_shapes() {
        let msg = |r: crate::Result<(Tensor, Tensor, Tensor)>| r.expect_err("must be refused").to_string();
        let one = Tensor::ones(&[1, 3], DType::F32, Device::Cpu).unwrap();
        assert!(msg(one.batch_norm_train(None, None, 1e-5)).contains("more than 1 value"));
        let x = Tensor::randn(&[4, 3, 2], 5, DType::F32, Device::Cpu).unwrap();
        let w = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
        assert!(x.batch_norm_train(Some(&w), None, 1e-5).is_err());
        assert!(msg(x.reshape(&[24]).unwrap().batch_norm_train(None, None, 1e-5)).contains("[N, C, *]"));
        let (y, mean, invstd) = x.batch_norm_train(None, None, 1e-5).unwrap();
        assert_eq!((y.dtype(), mean.shape(), invstd.shape()), (DType::F32, &[3][..], &[3][..]));
        assert!(y.batch_norm_backward(&x.reshape(&[4, 6]).unwrap(), None, &mean, &invstd).is_err());
        assert!(y.batch_norm_backward(&x, None, &w, &invstd).is_err());
    }
}
