//! `torch.linalg.lu_factor`, `lu_solve` and `det` on the CPU for f32, f64 and complex64,
//! batched over leading dims. The LU is written out here rather than taken from faer
//! because PyTorch's factors and pivots are LAPACK getrf's: each step takes the first row
//! of the largest |x| in the column (|re| + |im| for complex: icamax / scabs1), so a
//! different (equally valid) pivot order would give different `LU` and `pivots`. Reals
//! are computed in f64, complex64 in complex128, and returned in the input's dtype.
//!
//! On CUDA (`cuda/kernels/linalg_lu.cu`) the three ops compute the same way and give the
//! same factors and pivots: one block per matrix when it fits in shared memory, one
//! launch per column otherwise.

use super::linalg::{check_matrix, check_of, system_lead};
use crate::backend::{buf, Backend};
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::{DType, Device, Tensor};
use num_complex::{Complex32, Complex64};
use std::ops::{Div, Mul, Neg, Sub};

const DTYPES: &[DType] = &[DType::F32, DType::F64, DType::C64];
const EXPECTED: &str = "f32, f64 or complex64";

fn check(op: &'static str, t: &Tensor) -> Result<()> {
    check_of(op, t, DTYPES, EXPECTED)
}

/// `check` on any device.
fn check_any(op: &'static str, t: &Tensor) -> Result<()> {
    check_matrix(op, t, DTYPES, EXPECTED)
}

/// A CUDA tensor of `shape` holding `buf`.
fn cuda_tensor(buf: crate::cuda::DeviceBuffer, shape: &[usize], dtype: DType, device: Device) -> Tensor {
    Tensor::from_storage(Cuda::wrap(buf), shape, dtype, device)
}

/// The CUDA buffer of a dense CUDA tensor.
fn with_buffer<R>(t: &Tensor, f: impl FnOnce(&crate::cuda::DeviceBuffer) -> Result<R>) -> Result<R> {
    f(buf::<Cuda>(&t.read(), "linalg.lu")?)
}

impl Tensor {
    /// The CUDA half of `linalg_lu_factor` (`factors`) or `linalg_det` (checked operand):
    /// `(LU, pivots)` or `(det, None)`.
    fn lu_cuda(&self, factors: bool) -> Result<(Tensor, Option<Tensor>)> {
        let (lead, m, n, count) = dims(self);
        let (dt, dev) = (self.dtype(), self.device());
        let mut pshape = lead.to_vec();
        pshape.push(m.min(n));
        if count * m * n == 0 {
            return Ok(if factors {
                (Tensor::zeros(self.shape(), dt, dev)?, Some(Tensor::zeros(&pshape, DType::I32, dev)?))
            } else {
                (Tensor::ones(lead, dt, dev)?, None) // det of 0 × 0 is 1
            });
        }
        let a = self.dense()?;
        let (lu, piv, det) =
            with_buffer(&a, |x| crate::cuda::ops::lu_factor(x, dt, count, (m, n), (factors, !factors)))?;
        Ok(match (lu, piv, det) {
            (Some(lu), Some(piv), _) => {
                (cuda_tensor(lu, self.shape(), dt, dev), Some(cuda_tensor(piv, &pshape, DType::I32, dev)))
            }
            (_, _, Some(det)) => (cuda_tensor(det, lead, dt, dev), None),
            _ => unreachable!("lu_factor returns what it was asked for"),
        })
    }

    /// The CUDA half of `linalg_lu_solve`: checked operands, batch dims `lead`.
    fn lu_solve_cuda(&self, pivots: &Tensor, b: &Tensor, lead: &[usize]) -> Result<Tensor> {
        let n = self.shape()[self.rank() - 1];
        let k = b.shape()[b.rank() - 1];
        let count: usize = lead.iter().product();
        let full = |t: &Tensor, tail: &[usize]| -> Result<Tensor> {
            t.broadcast_to(&[lead, tail].concat())?.dense()
        };
        let bshape = [lead, &[n, k]].concat();
        if count * n * k == 0 {
            return Tensor::zeros(&bshape, b.dtype(), b.device());
        }
        let (lu, piv, b) = (full(self, &[n, n])?, full(pivots, &[n])?, full(b, &[n, k])?);
        let x = with_buffer(&lu, |l| {
            with_buffer(&piv, |p| {
                with_buffer(&b, |y| crate::cuda::ops::lu_solve(l, p, y, b.dtype(), count, (n, k)))
            })
        })?;
        Ok(cuda_tensor(x, &bshape, b.dtype(), b.device()))
    }
}

/// The field an LU is computed in: f64 for real inputs, complex128 for complex64.
trait Field:
    Copy + PartialEq + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self> + Neg<Output = Self>
{
    const ONE: Self;
    const ZERO: Self;
    /// LAPACK's pivot size: |x|, or |re| + |im| (scabs1) for complex.
    fn abs1(self) -> f64;
    /// A tensor's elements in row-major order.
    fn read(t: &Tensor) -> Result<Vec<Self>>;
    /// A CPU tensor of `shape` in `dtype` holding `v`.
    fn tensor(v: Vec<Self>, shape: &[usize], dtype: DType) -> Result<Tensor>;
}

impl Field for f64 {
    const ONE: Self = 1.0;
    const ZERO: Self = 0.0;
    fn abs1(self) -> f64 {
        self.abs()
    }
    fn read(t: &Tensor) -> Result<Vec<Self>> {
        t.to_f64_vec()
    }
    fn tensor(v: Vec<Self>, shape: &[usize], dtype: DType) -> Result<Tensor> {
        Tensor::from_vec(v, shape, Device::Cpu)?.to_dtype(dtype)
    }
}

impl Field for Complex64 {
    const ONE: Self = Complex64::new(1.0, 0.0);
    const ZERO: Self = Complex64::new(0.0, 0.0);
    fn abs1(self) -> f64 {
        self.re.abs() + self.im.abs()
    }
    fn read(t: &Tensor) -> Result<Vec<Self>> {
        let v = t.to_dtype(DType::C64)?.to_vec::<Complex32>()?;
        Ok(v.into_iter().map(|z| Complex64::new(z.re.into(), z.im.into())).collect())
    }
    fn tensor(v: Vec<Self>, shape: &[usize], _: DType) -> Result<Tensor> {
        let v = v.into_iter().map(|z| Complex32::new(z.re as f32, z.im as f32)).collect();
        Tensor::from_vec(v, shape, Device::Cpu)
    }
}

/// Runs `$body` with `$T` the field of `$dtype` (a checked linalg dtype).
macro_rules! with_field {
    ($dtype:expr, $T:ident, $body:expr) => {
        if $dtype == DType::C64 {
            type $T = Complex64;
            $body
        } else {
            type $T = f64;
            $body
        }
    };
}

/// The `count` consecutive matrices of `size` elements in `v` (empty ones too).
fn matrices<T>(mut v: &mut [T], count: usize, size: usize) -> impl Iterator<Item = &mut [T]> {
    (0..count).map(move |_| {
        let (head, tail) = std::mem::take(&mut v).split_at_mut(size);
        v = tail;
        head
    })
}

/// `a` (row-major `m × n`) replaced by its LU, unit-lower L below the diagonal and U on
/// and above it; returns the 0-based pivot rows: step `j` swapped rows `j` and `piv[j]`.
/// A zero pivot column is left as it is (LAPACK's `info > 0`), so U gets a zero diagonal.
fn getrf<T: Field>(a: &mut [T], m: usize, n: usize) -> Vec<usize> {
    let mut piv = Vec::with_capacity(m.min(n));
    for j in 0..m.min(n) {
        // The first row of the largest pivot size (strictly larger replaces).
        let p = (j + 1..m).fold(j, |p, i| if a[i * n + j].abs1() > a[p * n + j].abs1() { i } else { p });
        piv.push(p);
        let d = a[p * n + j];
        if d == T::ZERO {
            continue;
        }
        if p != j {
            for c in 0..n {
                a.swap(j * n + c, p * n + c);
            }
        }
        for i in j + 1..m {
            let l = a[i * n + j] / d;
            a[i * n + j] = l;
            for c in j + 1..n {
                a[i * n + c] = a[i * n + c] - l * a[j * n + c];
            }
        }
    }
    piv
}

/// `b` (row-major `n × k`) replaced by X with `P L U X = b`, from `getrf`'s `lu` and `piv`.
fn getrs<T: Field>(lu: &[T], piv: &[usize], n: usize, b: &mut [T], k: usize) {
    for (i, &p) in piv.iter().enumerate() {
        for c in 0..k {
            b.swap(i * k + c, p * k + c);
        }
    }
    for i in 0..n {
        for j in 0..i {
            let l = lu[i * n + j];
            for c in 0..k {
                b[i * k + c] = b[i * k + c] - l * b[j * k + c];
            }
        }
    }
    for i in (0..n).rev() {
        for j in i + 1..n {
            let u = lu[i * n + j];
            for c in 0..k {
                b[i * k + c] = b[i * k + c] - u * b[j * k + c];
            }
        }
        let d = lu[i * n + i];
        for c in 0..k {
            b[i * k + c] = b[i * k + c] / d;
        }
    }
}

/// (leading dims, rows, cols, number of matrices) of a checked `[..., m, n]` tensor.
fn dims(t: &Tensor) -> (&[usize], usize, usize, usize) {
    let r = t.rank();
    let lead = &t.shape()[..r - 2];
    (lead, t.shape()[r - 2], t.shape()[r - 1], lead.iter().product())
}

fn lu_factor<T: Field>(a: &Tensor) -> Result<(Tensor, Tensor)> {
    let (lead, m, n, count) = dims(a);
    let mut v = T::read(a)?;
    let mut pivots = Vec::with_capacity(count * m.min(n));
    for mat in matrices(&mut v, count, m * n) {
        pivots.extend(getrf(mat, m, n).into_iter().map(|p| p as i32 + 1));
    }
    let mut pshape = lead.to_vec();
    pshape.push(m.min(n));
    Ok((T::tensor(v, a.shape(), a.dtype())?, Tensor::from_vec(pivots, &pshape, Device::Cpu)?))
}

fn lu_solve<T: Field>(lu: &Tensor, pivots: &[usize], b: &Tensor) -> Result<Tensor> {
    let (_, n, _, count) = dims(lu);
    let k = b.shape()[b.rank() - 1];
    let (lu_v, mut x) = (T::read(lu)?, T::read(b)?);
    for (i, xm) in matrices(&mut x, count, n * k).enumerate() {
        getrs(&lu_v[i * n * n..(i + 1) * n * n], &pivots[i * n..(i + 1) * n], n, xm, k);
    }
    T::tensor(x, b.shape(), b.dtype())
}

fn det<T: Field>(a: &Tensor) -> Result<Tensor> {
    let (lead, n, _, count) = dims(a);
    let mut v = T::read(a)?;
    let dets = matrices(&mut v, count, n * n)
        .map(|mat| {
            let piv = getrf(mat, n, n);
            // det(P) = (−1)^swaps; a zero pivot makes the product 0.
            (0..n).fold(T::ONE, |d, i| if piv[i] == i { d * mat[i * n + i] } else { -(d * mat[i * n + i]) })
        })
        .collect();
    T::tensor(dets, lead, a.dtype())
}

impl Tensor {
    /// `torch.linalg.lu_factor(A)` for `A` `[..., m, n]`: `(LU, pivots)` with `LU` holding
    /// unit-lower L (below the diagonal) and U, and `pivots` i32 `[..., min(m, n)]`,
    /// 1-based as LAPACK's: row `i` was swapped with row `pivots[i]`. The pivot of each
    /// column is the first entry of largest |x| (|re| + |im| for complex), as LAPACK
    /// chooses it. A singular matrix still factors (U gets a zero on its diagonal), as
    /// LAPACK's `info > 0`.
    pub fn linalg_lu_factor(&self) -> Result<(Tensor, Tensor)> {
        if self.device() != Device::Cpu {
            check_any("linalg.lu_factor", self)?;
            let (lu, piv) = self.lu_cuda(true)?;
            return Ok((lu, piv.expect("the factors come with pivots")));
        }
        check("linalg.lu_factor", self)?;
        with_field!(self.dtype(), T, lu_factor::<T>(self))
    }

    /// `torch.linalg.lu_solve(LU, pivots, B)` (left, not adjoint) with `self` as `LU`
    /// `[..., n, n]` from [`Tensor::linalg_lu_factor`]: X `[..., n, k]` with `A X = B`;
    /// `B`'s and `LU`'s batch dims broadcast (`pivots` `[..., n]` follows `LU`'s). A
    /// singular U gives infinities / NaN, as LAPACK's getrs does. Pivots out of range are an
    /// error on the CPU; on CUDA they are skipped, since checking them would synchronise.
    pub fn linalg_lu_solve(&self, pivots: &Tensor, b: &Tensor) -> Result<Tensor> {
        const OP: &str = "linalg.lu_solve";
        let fits = |a: &[usize], b: &[usize]| a[0] == a[1] && a[0] == b[0];
        let cuda = self.device() != Device::Cpu;
        let chk = |op, t: &Tensor| if cuda { check_any(op, t) } else { check(op, t) };
        let lead = system_lead(OP, self, b, chk, fits)?;
        self.check_same_device(pivots, OP)?;
        self.check_same_device(b, OP)?;
        let r = self.rank();
        let n = self.shape()[r - 1];
        if pivots.dtype() != DType::I32 {
            return Err(Error::DTypeNotSupported { op: OP, got: pivots.dtype(), expected: "int32 pivots" });
        }
        if *pivots.shape() != self.shape()[..r - 1] {
            return Err(Error::ShapeMismatch {
                op: OP,
                lhs: self.shape().to_vec(),
                rhs: pivots.shape().to_vec(),
            });
        }
        if cuda {
            return self.lu_solve_cuda(pivots, b, &lead);
        }
        let broadcast = |t: &Tensor, tail: usize| -> Result<Tensor> {
            let mut shape = lead.clone();
            shape.extend_from_slice(&t.shape()[t.rank() - tail..]);
            t.broadcast_to(&shape)
        };
        let piv = broadcast(pivots, 1)?.to_vec::<i32>()?;
        if let Some(p) = piv.iter().find(|&&p| p < 1 || p as usize > n) {
            return Err(Error::IndexOutOfRange { op: OP, index: *p as i64, size: n });
        }
        let piv: Vec<usize> = piv.into_iter().map(|p| p as usize - 1).collect();
        let (lu, b) = (broadcast(self, 2)?, broadcast(b, 2)?);
        with_field!(self.dtype(), T, lu_solve::<T>(&lu, &piv, &b))
    }

    /// `torch.linalg.solve(A, B)` (left) with `self` as `A` `[..., n, n]` and `B` `[..., n,
    /// k]`: X with `A X = B`, by [`Tensor::linalg_lu_factor`] and
    /// [`Tensor::linalg_lu_solve`] (batch dims broadcast; a singular A gives infinities /
    /// NaN, as those do).
    pub fn linalg_solve(&self, b: &Tensor) -> Result<Tensor> {
        let (lu, pivots) = self.linalg_lu_factor()?;
        lu.linalg_lu_solve(&pivots, b)
    }

    /// `torch.linalg.det` of square matrices `[..., n, n]` → `[...]`: the product of U's
    /// diagonal times the sign of the row swaps; a singular matrix gives 0.
    pub fn linalg_det(&self) -> Result<Tensor> {
        const OP: &str = "linalg.det";
        check_any(OP, self)?;
        let (_, m, n, _) = dims(self);
        if m != n {
            return Err(Error::bad_shape(OP, format!("needs square matrices, got {:?}", self.shape())));
        }
        if self.device() != Device::Cpu {
            return Ok(self.lu_cuda(false)?.0);
        }
        with_field!(self.dtype(), T, det::<T>(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(v: &[(f32, f32)], shape: &[usize]) -> Tensor {
        let v = v.iter().map(|&(re, im)| Complex32::new(re, im)).collect();
        Tensor::from_vec(v, shape, Device::Cpu).unwrap()
    }

    fn complex_vals(t: &Tensor) -> Vec<Complex64> {
        Complex64::read(t).unwrap()
    }

    /// A random complex batch, as complex64.
    fn randc(shape: &[usize], seed: u64) -> Tensor {
        let mut s = shape.to_vec();
        s.push(2);
        let v = Tensor::randn(&s, seed, DType::F32, Device::Cpu).unwrap();
        Tensor::from_raw_bytes(&v.to_raw_bytes().unwrap(), shape, DType::C64, Device::Cpu).unwrap()
    }

    /// P · L · U rebuilt from a factorisation, as complex128 `[count][m][n]`.
    fn rebuild(lu: &Tensor, piv: &Tensor) -> Vec<Vec<Complex64>> {
        let (_, m, n, count) = dims(lu);
        let k = m.min(n);
        let (v, p) = (complex_vals(lu), piv.to_vec::<i32>().unwrap());
        (0..count)
            .map(|b| {
                let f = &v[b * m * n..(b + 1) * m * n];
                // L is m × k (unit diagonal), U is k × n; A = P · L · U.
                let l = |i: usize, j: usize| match () {
                    _ if i == j => Complex64::ONE,
                    _ if i > j => f[i * n + j],
                    _ => Complex64::ZERO,
                };
                let u = |i: usize, j: usize| if i <= j { f[i * n + j] } else { Complex64::ZERO };
                let mut a: Vec<Complex64> =
                    (0..m * n).map(|x| (0..k).map(|s| l(x / n, s) * u(s, x % n)).sum()).collect();
                for s in (0..k).rev() {
                    let q = p[b * k + s] as usize - 1;
                    for c in 0..n {
                        a.swap(s * n + c, q * n + c);
                    }
                }
                a
            })
            .collect()
    }

    fn max_diff(a: &[Complex64], b: &[Complex64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| (x - y).norm()).fold(0.0, f64::max)
    }

    /// P L U rebuilds random square, tall and wide complex matrices; f64 ones too.
    #[test]
    fn lu_rebuilds_its_input() {
        for shape in [[3, 5, 5], [2, 7, 4], [2, 3, 6], [1, 1, 1]] {
            let a = randc(&shape, 7);
            let (lu, piv) = a.linalg_lu_factor().unwrap();
            assert_eq!(piv.shape(), &[shape[0], shape[1].min(shape[2])]);
            let want = complex_vals(&a);
            let got: Vec<Complex64> = rebuild(&lu, &piv).concat();
            assert!(max_diff(&got, &want) < 1e-5, "{shape:?}");
        }
        let a = Tensor::randn(&[4, 6, 6], 3, DType::F64, Device::Cpu).unwrap();
        let (lu, piv) = a.linalg_lu_factor().unwrap();
        assert_eq!((lu.dtype(), piv.dtype()), (DType::F64, DType::I32));
        let lu_c = lu.to_dtype(DType::C64).unwrap();
        let got: Vec<Complex64> = rebuild(&lu_c, &piv).concat();
        assert!(max_diff(&got, &complex_vals(&a)) < 1e-5);
    }

    /// The pivot is the largest |re| + |im|, not the largest modulus, and the first on ties.
    #[test]
    fn pivots_follow_lapack() {
        // Column 0: |3+3i| has |re|+|im| 6 > |5| (modulus 4.24 < 5): row 1 wins.
        let a = c(&[(5.0, 0.0), (1.0, 0.0), (3.0, 3.0), (2.0, 0.0)], &[2, 2]);
        assert_eq!(a.linalg_lu_factor().unwrap().1.to_vec::<i32>().unwrap(), vec![2, 2]);
        // Ties: the first row stays; reals pivot by |x| (−4 beats 3).
        let t = Tensor::from_vec(vec![2.0f32, 1.0, -2.0, 5.0], &[2, 2], Device::Cpu).unwrap();
        assert_eq!(t.linalg_lu_factor().unwrap().1.to_vec::<i32>().unwrap(), vec![1, 2]);
        let t = Tensor::from_vec(vec![3.0f32, 1.0, -4.0, 5.0], &[2, 2], Device::Cpu).unwrap();
        let (lu, piv) = t.linalg_lu_factor().unwrap();
        assert_eq!(piv.to_vec::<i32>().unwrap(), vec![2, 2]);
        assert_eq!(lu.to_vec::<f32>().unwrap(), vec![-4.0, 5.0, -0.75, 4.75]);
    }

    /// det = Π diag(U) · (−1)^swaps, lu_solve solves A X = B with broadcast batches, and a
    /// singular matrix factors with det 0.
    #[test]
    fn det_and_solve_agree_with_the_factors() {
        // det [[0, 1], [2, 3]] = −2 (one swap); complex: det [[i, 0], [0, 2]] = 2i.
        let t = Tensor::from_vec(vec![0.0f64, 1.0, 2.0, 3.0], &[2, 2], Device::Cpu).unwrap();
        assert_eq!(t.linalg_det().unwrap().to_f64_vec().unwrap(), vec![-2.0]);
        let z = c(&[(0.0, 1.0), (0.0, 0.0), (0.0, 0.0), (2.0, 0.0)], &[2, 2]);
        assert_eq!(complex_vals(&z.linalg_det().unwrap()), vec![Complex64::new(0.0, 2.0)]);
        let a = randc(&[3, 5, 5], 11);
        let b = randc(&[2, 1, 5, 3], 12);
        let (lu, piv) = a.linalg_lu_factor().unwrap();
        let x = lu.linalg_lu_solve(&piv, &b).unwrap();
        assert_eq!(x.shape(), &[2, 3, 5, 3]);
        let back = a.matmul(&x).unwrap();
        let want = complex_vals(&b.broadcast_to(&[2, 3, 5, 3]).unwrap());
        assert!(max_diff(&complex_vals(&back), &want) < 1e-4);
        // det of a batch equals the product of U's diagonal with the swaps' sign.
        let d = complex_vals(&a.linalg_det().unwrap());
        let (luv, p) = (complex_vals(&lu), piv.to_vec::<i32>().unwrap());
        for (m, &dm) in d.iter().enumerate() {
            let sign = (0..5).filter(|&i| p[m * 5 + i] != i as i32 + 1).count();
            let prod: Complex64 = (0..5).map(|i| luv[m * 25 + i * 6]).product();
            let want = if sign % 2 == 1 { -prod } else { prod };
            assert!((dm - want).norm() < 1e-4 * want.norm(), "{dm} vs {want}");
        }
        let singular = Tensor::from_vec(vec![1.0f32, 2.0, 2.0, 4.0], &[2, 2], Device::Cpu).unwrap();
        let (lu, _) = singular.linalg_lu_factor().unwrap();
        assert_eq!(lu.to_vec::<f32>().unwrap()[3], 0.0);
        assert_eq!(singular.linalg_det().unwrap().to_f64_vec().unwrap(), vec![0.0]);
    }

    #[test]
    fn empty_matrices_factor_to_empty_results() {
        let e = Tensor::zeros(&[2, 0, 0], DType::F32, Device::Cpu).unwrap();
        let (lu, piv) = e.linalg_lu_factor().unwrap();
        assert_eq!((lu.shape(), piv.shape()), (&[2, 0, 0][..], &[2, 0][..]));
        assert_eq!(e.linalg_det().unwrap().to_f64_vec().unwrap(), vec![1.0, 1.0]);
        let (lu, piv) =
            Tensor::zeros(&[2, 3, 0], DType::F32, Device::Cpu).unwrap().linalg_lu_factor().unwrap();
        assert_eq!((lu.shape(), piv.shape()), (&[2, 3, 0][..], &[2, 0][..]));
        let b = Tensor::zeros(&[2, 0, 4], DType::F32, Device::Cpu).unwrap();
        let (lu, piv) = e.linalg_lu_factor().unwrap();
        assert_eq!(lu.linalg_lu_solve(&piv, &b).unwrap().shape(), &[2, 0, 4]);
    }

    #[test]
    fn bad_inputs_are_refused_with_reasons() {
        let msg = |r: Result<Tensor>| r.unwrap_err().to_string();
        let a = Tensor::randn(&[3, 3], 1, DType::F32, Device::Cpu).unwrap();
        let (lu, piv) = a.linalg_lu_factor().unwrap();
        assert!(
            msg(Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap().linalg_det()).contains("[..., m, n]")
        );
        assert!(msg(Tensor::zeros(&[2, 3], DType::F32, Device::Cpu).unwrap().linalg_det()).contains("square"));
        assert!(
            msg(Tensor::zeros(&[2, 2], DType::I32, Device::Cpu).unwrap().linalg_det()).contains("complex64")
        );
        let b = Tensor::ones(&[4, 1], DType::F32, Device::Cpu).unwrap();
        assert!(lu.linalg_lu_solve(&piv, &b).is_err());
        let b = Tensor::ones(&[3, 1], DType::F32, Device::Cpu).unwrap();
        assert!(msg(lu.linalg_lu_solve(&piv.to_dtype(DType::I64).unwrap(), &b)).contains("int32"));
        let bad = Tensor::from_vec(vec![1i32, 4, 3], &[3], Device::Cpu).unwrap();
        assert!(msg(lu.linalg_lu_solve(&bad, &b)).contains("out of range"));
        assert!(lu.linalg_lu_solve(&piv, &b.to_dtype(DType::F64).unwrap()).is_err());
    }
}
