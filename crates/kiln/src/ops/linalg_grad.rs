//! Gradients of the linear-algebra ops as explicit backward ops (kiln has no autograd
//! yet): each takes the forward's inputs and the gradient of its output and returns the
//! inputs' gradients as PyTorch's autograd computes them. For complex inputs that is the
//! conjugate Wirtinger convention, `grad_A = grad · conj(∂f/∂A)` (so `det`'s is
//! `grad · conj(det A) · A⁻ᴴ`). Gradients of inputs that were broadcast over batch dims
//! are summed back to the input's shape.
//!
//! They are composed of kiln ops (matmul, transposes, the forward solves), so they run
//! on every backend where those do. The matrix must be invertible: a singular one is the
//! forward solve's error (reals) or gives non-finite values (complex, as LAPACK's getrs).

use crate::error::{Error, Result};
use crate::{DType, Device, Tensor};

impl Tensor {
    /// The complex conjugate (the tensor itself for real dtypes).
    fn conj(&self) -> Result<Tensor> {
        if self.dtype != DType::C64 {
            return Ok(self.clone());
        }
        let flip = Tensor::from_vec(vec![1.0f32, -1.0], &[2], Device::Cpu)?.to_device(self.device)?;
        self.view_as_real()?.mul(&flip)?.view_as_complex()
    }

    /// The conjugate transpose of the last two dims (the transpose for real dtypes).
    fn mh(&self) -> Result<Tensor> {
        self.transpose(-1, -2)?.conj()
    }

    /// `A⁻¹` of square `[..., n, n]`: `linalg_inv` for reals, LU for complex64.
    fn inverse(&self) -> Result<Tensor> {
        if self.dtype != DType::C64 {
            return self.linalg_inv();
        }
        let n = self.size(-1)?;
        let eye = Tensor::from_vec(
            (0..n * n).flat_map(|k| [if k % (n + 1) == 0 { 1.0f32 } else { 0.0 }, 0.0]).collect(),
            &[n, n, 2],
            Device::Cpu,
        )?
        .to_device(self.device)?
        .view_as_complex()?;
        let (lu, piv) = self.linalg_lu_factor()?;
        lu.linalg_lu_solve(&piv, &eye.broadcast_to(self.shape())?)
    }

    /// `self` (a gradient of a broadcast result) summed over the leading dims that
    /// `shape` lacks or holds as 1, so that it has `shape`.
    fn sum_to(&self, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        let extra = self.rank() - shape.len();
        let dims: Vec<isize> = (0..self.rank())
            .filter(|&d| d < extra || (shape[d - extra] == 1 && self.shape()[d] != 1))
            .map(|d| d as isize)
            .collect();
        // Summed as real pairs, so complex64 needs no complex reduction.
        let summed = if self.dtype == DType::C64 {
            self.view_as_real()?.sum(&dims, true)?.contiguous()?.view_as_complex()?
        } else {
            self.sum(&dims, true)?
        };
        summed.reshape(shape)
    }

    /// Backward of [`Tensor::linalg_det`] with `self` as `A` `[..., n, n]` and `grad` the
    /// gradient of `det A` `[...]`: `grad_A = grad · conj(det A) · A⁻ᴴ`.
    pub fn linalg_det_backward(&self, grad: &Tensor) -> Result<Tensor> {
        let det = self.linalg_det()?;
        if grad.shape() != det.shape() {
            return Err(Error::ShapeMismatch {
                op: "linalg.det_backward",
                lhs: det.shape().to_vec(),
                rhs: grad.shape().to_vec(),
            });
        }
        let scale = grad.mul(&det.conj()?)?;
        self.inverse()?.mh()?.mul(&scale.unsqueeze(-1)?.unsqueeze(-1)?)
    }

    /// Backward of [`Tensor::linalg_inv`] with `self` as `A` `[..., n, n]` and `grad` the
    /// gradient of `A⁻¹`: `grad_A = −A⁻ᴴ · grad · A⁻ᴴ`.
    pub fn linalg_inv_backward(&self, grad: &Tensor) -> Result<Tensor> {
        if grad.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op: "linalg.inv_backward",
                lhs: self.shape().to_vec(),
                rhs: grad.shape().to_vec(),
            });
        }
        let inv_h = self.inverse()?.mh()?;
        inv_h.matmul(grad)?.matmul(&inv_h)?.mul_scalar(-1.0)
    }

    /// Backward of [`Tensor::linalg_solve`] with `self` as `A` `[..., n, n]`, `b` as `B`
    /// and `grad` the gradient of `X = A⁻¹ B`: `(grad_A, grad_B)` with
    /// `grad_B = A⁻ᴴ grad` and `grad_A = −grad_B Xᴴ`.
    pub fn linalg_solve_backward(&self, b: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor)> {
        let x = self.linalg_solve(b)?;
        check_grad("linalg.solve_backward", &x, grad)?;
        let grad_b = self.mh()?.linalg_solve(grad)?;
        let grad_a = grad_b.matmul(&x.mh()?)?.mul_scalar(-1.0)?;
        Ok((grad_a.sum_to(self.shape())?, grad_b.sum_to(b.shape())?))
    }

    /// Backward of [`Tensor::linalg_solve_triangular`] (same `upper`, `left`,
    /// `unitriangular`) with `self` as `A`, `b` as `B` and `grad` the gradient of X:
    /// `(grad_A, grad_B)` with `grad_B` the solve of `Aᴴ` (the other triangle) for `grad`,
    /// and `grad_A = −grad_B Xᴴ` (`−Xᴴ grad_B` for `!left`) kept to the triangle the
    /// forward read (without the diagonal when `unitriangular`), as PyTorch returns it.
    pub fn linalg_solve_triangular_backward(
        &self,
        b: &Tensor,
        grad: &Tensor,
        upper: bool,
        left: bool,
        unitriangular: bool,
    ) -> Result<(Tensor, Tensor)> {
        let x = self.linalg_solve_triangular(b, upper, left, unitriangular)?;
        check_grad("linalg.solve_triangular_backward", &x, grad)?;
        let grad_b = self.mh()?.linalg_solve_triangular(grad, !upper, left, unitriangular)?;
        let xh = x.mh()?;
        let grad_a = if left { grad_b.matmul(&xh)? } else { xh.matmul(&grad_b)? };
        let n = self.size(-1)?;
        // −1 inside the triangle the forward read, 0 elsewhere.
        let keep: Vec<f64> = (0..n * n)
            .map(|k| {
                let (i, j) = (k / n, k % n);
                let inside = if upper {
                    j > i || (j == i && !unitriangular)
                } else {
                    j < i || (j == i && !unitriangular)
                };
                if inside {
                    -1.0
                } else {
                    0.0
                }
            })
            .collect();
        let real = if self.dtype == DType::F64 { DType::F64 } else { DType::F32 };
        let mask = Tensor::from_vec(keep, &[n, n], Device::Cpu)?.to_dtype(real)?.to_device(self.device)?;
        Ok((grad_a.mul(&mask)?.sum_to(self.shape())?, grad_b.sum_to(b.shape())?))
    }
}

/// A gradient must have its output's shape.
fn check_grad(op: &'static str, out: &Tensor, grad: &Tensor) -> Result<()> {
    if grad.dtype() != out.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: out.dtype(), rhs: grad.dtype() });
    }
    if grad.shape() != out.shape() {
        return Err(Error::ShapeMismatch { op, lhs: out.shape().to_vec(), rhs: grad.shape().to_vec() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A random f64 `[2, n, n]` batch with a heavy diagonal (well conditioned).
    fn matrix(n: usize, seed: u64) -> Tensor {
        let eye: Vec<f64> = (0..n * n).map(|k| if k % (n + 1) == 0 { 4.0 } else { 0.0 }).collect();
        let eye = Tensor::from_vec(eye, &[n, n], Device::Cpu).unwrap();
        Tensor::randn(&[2, n, n], seed, DType::F64, Device::Cpu).unwrap().add(&eye).unwrap()
    }

    /// Central differences of `L(x) = Σ g ∘ f(x)` for every element of `x`.
    fn numeric_grad(x: &Tensor, g: &Tensor, f: impl Fn(&Tensor) -> Tensor) -> Vec<f64> {
        let (v, gv) = (x.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        let loss = |v: Vec<f64>| -> f64 {
            let y = f(&Tensor::from_vec(v, x.shape(), Device::Cpu).unwrap()).to_f64_vec().unwrap();
            y.iter().zip(&gv).map(|(a, b)| a * b).sum()
        };
        let h = 1e-6;
        (0..v.len())
            .map(|i| {
                let (mut p, mut m) = (v.clone(), v.clone());
                p[i] += h;
                m[i] -= h;
                (loss(p) - loss(m)) / (2.0 * h)
            })
            .collect()
    }

    fn assert_close(got: &Tensor, want: &[f64], what: &str) {
        let got = got.to_f64_vec().unwrap();
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{what}: element {i}: {a} vs {b}");
        }
    }

    fn randn(shape: &[usize], seed: u64) -> Tensor {
        Tensor::randn(shape, seed, DType::F64, Device::Cpu).unwrap()
    }

    #[test]
    fn det_and_inv_gradients_match_central_differences() {
        let a = matrix(5, 1);
        let g = randn(&[2], 2);
        let want = numeric_grad(&a, &g, |x| x.linalg_det().unwrap());
        assert_close(&a.linalg_det_backward(&g).unwrap(), &want, "det");
        let g = randn(&[2, 5, 5], 3);
        let want = numeric_grad(&a, &g, |x| x.linalg_inv().unwrap());
        assert_close(&a.linalg_inv_backward(&g).unwrap(), &want, "inv");
    }

    /// Both gradients of `solve`, with B broadcast over A's batch (its gradient summed).
    #[test]
    fn solve_gradients_match_central_differences() {
        let (a, b) = (matrix(4, 4), randn(&[4, 3], 5));
        let g = randn(&[2, 4, 3], 6);
        let (ga, gb) = a.linalg_solve_backward(&b, &g).unwrap();
        assert_eq!(gb.shape(), &[4, 3]);
        assert_close(&ga, &numeric_grad(&a, &g, |x| x.linalg_solve(&b).unwrap()), "solve A");
        assert_close(&gb, &numeric_grad(&b, &g, |x| a.linalg_solve(x).unwrap()), "solve B");
    }

    /// Every (upper, left, unitriangular): the gradient of A is zero outside the triangle
    /// the forward reads, as the central differences there are.
    #[test]
    fn solve_triangular_gradients_match_central_differences() {
        let a = matrix(4, 7);
        for upper in [false, true] {
            for left in [true, false] {
                for unit in [false, true] {
                    let b = randn(if left { &[2, 4, 3] } else { &[2, 3, 4] }, 8);
                    let g = randn(b.shape(), 9);
                    let what = format!("upper {upper} left {left} unit {unit}");
                    let (ga, gb) = a.linalg_solve_triangular_backward(&b, &g, upper, left, unit).unwrap();
                    let fa = |x: &Tensor| x.linalg_solve_triangular(&b, upper, left, unit).unwrap();
                    assert_close(&ga, &numeric_grad(&a, &g, fa), &what);
                    let fb = |x: &Tensor| a.linalg_solve_triangular(x, upper, left, unit).unwrap();
                    assert_close(&gb, &numeric_grad(&b, &g, fb), &what);
                }
            }
        }
    }

    /// complex64: the conjugate-transpose helpers and the LU inverse.
    #[test]
    fn complex_adjoint_and_inverse() {
        let v = Tensor::randn(&[3, 3, 2], 10, DType::F32, Device::Cpu).unwrap();
        let eye: Vec<f32> = (0..9).flat_map(|k| [if k % 4 == 0 { 3.0 } else { 0.0 }, 0.0]).collect();
        let a = v
            .add(&Tensor::from_vec(eye, &[3, 3, 2], Device::Cpu).unwrap())
            .unwrap()
            .view_as_complex()
            .unwrap();
        let (re, ah) =
            (a.view_as_real().unwrap().to_f64_vec().unwrap(), a.mh().unwrap().view_as_real().unwrap());
        let ah = ah.to_f64_vec().unwrap();
        for (i, j) in [(0, 1), (2, 0), (1, 1)] {
            assert_eq!(
                (ah[(j * 3 + i) * 2], ah[(j * 3 + i) * 2 + 1]),
                (re[(i * 3 + j) * 2], -re[(i * 3 + j) * 2 + 1])
            );
        }
        let id = a.matmul(&a.inverse().unwrap()).unwrap().view_as_real().unwrap().to_f64_vec().unwrap();
        for (k, x) in id.iter().enumerate() {
            let want = if k % 2 == 0 && (k / 2) % 4 == 0 { 1.0 } else { 0.0 };
            assert!((x - want).abs() < 1e-5, "{k}: {x}");
        }
    }

    #[test]
    fn mismatched_gradients_are_refused() {
        let a = matrix(3, 11);
        assert!(a.linalg_det_backward(&randn(&[3], 1)).is_err());
        assert!(a.linalg_inv_backward(&randn(&[2, 3, 4], 1)).is_err());
        let b = randn(&[2, 3, 2], 12);
        assert!(a.linalg_solve_backward(&b, &randn(&[2, 3, 3], 1)).is_err());
        let g32 = b.to_dtype(DType::F32).unwrap();
        assert!(a.linalg_solve_triangular_backward(&b, &g32, false, true, false).is_err());
    }
}
