//! `torch.linalg` on the CPU backend: `inv`, `solve_triangular`, `qr` (reduced), `svd`,
//! `svdvals`, `pinv` and `lstsq`, batched over leading dims, with PyTorch's shapes and
//! rules. f32 and f64 inputs are computed in f64 by faer and returned in their dtype (so
//! f32 results carry f64 accuracy: ill-conditioned and badly scaled inputs stay exact to
//! f32 rounding).
//!
//! Empty matrices (a zero dim) give PyTorch's empty, zero or identity results without a
//! factorisation.
//!
//! These are the references the GPU kernels are checked against. On CUDA, `inv` of
//! matrices up to 4 × 4 and `solve_triangular` of systems up to 64 × 64 have kernels
//! (`cuda/kernels/linalg_inv.cu`, `linalg_trsm.cu`); every other CUDA case gets
//! `Error::NotImplemented`, never a silent copy to the host.

use crate::backend::{buf, Backend};
use crate::cuda::Cuda;
use crate::error::{Error, Result};
use crate::layout::broadcast_shapes;
use crate::{DType, Device, Tensor};
use faer::linalg::solvers::{DenseSolveCore, Svd};
use faer::Mat;

/// The matrices `[..., rows, cols]` of a tensor in f64, with its leading (batch) dims.
struct Batch {
    lead: Vec<usize>,
    rows: usize,
    cols: usize,
    mats: Vec<Mat<f64>>,
}

/// Checks what every op here needs: the CPU, f32 or f64, at least 2 dims.
fn check(op: &'static str, t: &Tensor) -> Result<()> {
    check_of(op, t, &[DType::F32, DType::F64], "f32 or f64")
}

/// `check` with the dtypes `ok` (named `expected` in the error) in place of f32 / f64.
pub(super) fn check_of(op: &'static str, t: &Tensor, ok: &[DType], expected: &'static str) -> Result<()> {
    if t.device() != Device::Cpu {
        return Err(Error::NotImplemented { op, device: t.device(), dtype: t.dtype() });
    }
    check_matrix(op, t, ok, expected)
}

/// What `check_of` checks, on any device.
pub(super) fn check_matrix(op: &'static str, t: &Tensor, ok: &[DType], expected: &'static str) -> Result<()> {
    if !ok.contains(&t.dtype()) {
        return Err(Error::DTypeNotSupported { op, got: t.dtype(), expected });
    }
    if t.rank() < 2 {
        return Err(Error::bad_shape(op, format!("needs a matrix [..., m, n], got {:?}", t.shape())));
    }
    Ok(())
}

impl Batch {
    fn of(t: &Tensor) -> Result<Batch> {
        let r = t.rank();
        let (rows, cols) = (t.shape()[r - 2], t.shape()[r - 1]);
        let v = t.to_f64_vec()?;
        let size = rows * cols;
        let count: usize = t.shape()[..r - 2].iter().product();
        let mats = (0..count).map(|b| Mat::from_fn(rows, cols, |i, j| v[b * size + i * cols + j])).collect();
        Ok(Batch { lead: t.shape()[..r - 2].to_vec(), rows, cols, mats })
    }

    /// Whether the matrices hold no elements.
    fn is_empty(&self) -> bool {
        self.rows == 0 || self.cols == 0
    }

    /// One `rows × cols` matrix per batch entry, from `f`.
    fn each(&self, f: impl Fn() -> Mat<f64>) -> Vec<Mat<f64>> {
        self.mats.iter().map(|_| f()).collect()
    }

    /// `self`'s batch of `t` broadcast to the leading dims `lead`.
    fn broadcast(t: &Tensor, lead: &[usize]) -> Result<Batch> {
        let r = t.rank();
        let mut shape = lead.to_vec();
        shape.extend_from_slice(&t.shape()[r - 2..]);
        Batch::of(&t.broadcast_to(&shape)?)
    }
}

/// A system's matrix `a` and right-hand side `b` as f64 batches broadcast over their
/// leading dims, after `check`ing both, one dtype, and `fits(a_shape, b_shape)` (the
/// op's rule for the matrices' sizes).
fn system(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    fits: impl Fn(&[usize], &[usize]) -> bool,
) -> Result<(Vec<usize>, Batch, Batch)> {
    let lead = system_lead(op, a, b, check, fits)?;
    let (ba, bb) = (Batch::broadcast(a, &lead)?, Batch::broadcast(b, &lead)?);
    Ok((lead, ba, bb))
}

/// The broadcast leading dims of a system's `a` and `b`, after `check`ing both, one dtype,
/// and `fits(a_shape, b_shape)` on their trailing two dims.
pub(super) fn system_lead(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    check: impl Fn(&'static str, &Tensor) -> Result<()>,
    fits: impl Fn(&[usize], &[usize]) -> bool,
) -> Result<Vec<usize>> {
    check(op, a)?;
    check(op, b)?;
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch { op, lhs: a.dtype(), rhs: b.dtype() });
    }
    let (r, rr) = (a.rank(), b.rank());
    if !fits(&a.shape()[r - 2..], &b.shape()[rr - 2..]) {
        return Err(Error::ShapeMismatch { op, lhs: a.shape().to_vec(), rhs: b.shape().to_vec() });
    }
    broadcast_shapes(&a.shape()[..r - 2], &b.shape()[..rr - 2])
}

/// A tensor `[lead..., rows, cols]` of `mats` in `dtype` on the CPU.
fn assemble(lead: &[usize], rows: usize, cols: usize, mats: &[Mat<f64>], dtype: DType) -> Result<Tensor> {
    let mut data = Vec::with_capacity(mats.len() * rows * cols);
    for m in mats {
        data.extend((0..rows).flat_map(|i| (0..cols).map(move |j| m[(i, j)])));
    }
    let mut shape = lead.to_vec();
    shape.extend([rows, cols]);
    Tensor::from_vec(data, &shape, Device::Cpu)?.to_dtype(dtype)
}

/// A tensor `[lead..., n]` of vectors in `dtype` on the CPU.
fn assemble_vectors(lead: &[usize], n: usize, vs: Vec<Vec<f64>>, dtype: DType) -> Result<Tensor> {
    let mut shape = lead.to_vec();
    shape.push(n);
    Tensor::from_vec(vs.concat(), &shape, Device::Cpu)?.to_dtype(dtype)
}

fn svd_of(op: &'static str, m: &Mat<f64>, full: bool) -> Result<Svd<f64>> {
    let s = if full { m.svd() } else { m.thin_svd() };
    s.map_err(|e| Error::invalid(op, format!("the SVD did not converge ({e:?})")))
}

/// `V · diag(1/σ) · Uᵀ` of a thin SVD, with σ ≤ `rtol · σ_max` treated as zero
/// (`torch.linalg.pinv`'s rule).
fn pinv_of(op: &'static str, m: &Mat<f64>, rtol: f64) -> Result<Mat<f64>> {
    let svd = svd_of(op, m, false)?;
    let (u, v, s) = (svd.U(), svd.V(), svd.S().column_vector());
    let k = s.nrows();
    let cutoff = rtol * if k > 0 { s[0] } else { 0.0 };
    let inv: Vec<f64> = (0..k).map(|i| if s[i] > cutoff { 1.0 / s[i] } else { 0.0 }).collect();
    Ok(Mat::from_fn(m.ncols(), m.nrows(), |i, j| (0..k).map(|l| v[(i, l)] * inv[l] * u[(j, l)]).sum()))
}

/// PyTorch's default `rtol` for pinv and lstsq: the dtype's epsilon · max(m, n).
fn default_rtol(dtype: DType, rows: usize, cols: usize) -> f64 {
    let eps = if dtype == DType::F32 { f32::EPSILON as f64 } else { f64::EPSILON };
    eps * rows.max(cols) as f64
}

impl Tensor {
    /// `torch.linalg.inv`: the inverse of each square matrix `[..., n, n]`, by LU with
    /// partial pivoting. A singular matrix is an error naming the zero pivot, as in PyTorch.
    ///
    /// On CUDA, matrices up to 4 × 4 are inverted in closed form (the adjugate over the
    /// determinant, in double), one thread per matrix in one launch; a singular one (zero
    /// determinant) is the same error, which costs a host synchronisation to read back.
    pub fn linalg_inv(&self) -> Result<Tensor> {
        const OP: &str = "linalg.inv";
        check_matrix(OP, self, &[DType::F32, DType::F64], "f32 or f64")?;
        let n = self.shape()[self.rank() - 1];
        if self.shape()[self.rank() - 2] != n {
            return Err(Error::bad_shape(OP, format!("needs square matrices, got {:?}", self.shape())));
        }
        if self.device() != Device::Cpu {
            return self.inv_cuda(n);
        }
        let b = Batch::of(self)?;
        if b.is_empty() {
            return assemble(&b.lead, 0, 0, &[], self.dtype());
        }
        let mut out = Vec::with_capacity(b.mats.len());
        for (k, m) in b.mats.iter().enumerate() {
            let lu = m.partial_piv_lu();
            if let Some(i) = (0..b.rows).find(|&i| lu.U()[(i, i)] == 0.0) {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "matrix {k} is singular: the diagonal element {} of its LU factor is zero",
                        i + 1
                    ),
                ));
            }
            out.push(lu.inverse());
        }
        assemble(&b.lead, b.rows, b.cols, &out, self.dtype())
    }

    /// The CUDA half of `linalg_inv` (checked square f32 / f64 matrices of size `n`).
    fn inv_cuda(&self, n: usize) -> Result<Tensor> {
        const OP: &str = "linalg.inv";
        if n > crate::cuda::ops::INV_MAX_N {
            return Err(Error::NotImplemented { op: OP, device: self.device(), dtype: self.dtype() });
        }
        if self.numel() == 0 {
            return Tensor::zeros(self.shape(), self.dtype(), self.device());
        }
        let a = self.dense()?;
        let count = a.numel() / (n * n);
        let (out, singular) = crate::cuda::ops::inv_small(buf::<Cuda>(&a.read(), OP)?, a.dtype(), n, count)?;
        if let Some(k) = singular {
            return Err(Error::invalid(OP, format!("matrix {k} is singular: its determinant is zero")));
        }
        Ok(Tensor::from_storage(Cuda::wrap(out), self.shape(), self.dtype(), self.device()))
    }

    /// `torch.linalg.solve_triangular(A, B, upper=, left=, unitriangular=)` with `self` as
    /// `A` `[..., n, n]`: X with `A X = B` (`left`) or `X A = B`, `B` `[..., n, k]` (`[...,
    /// k, n]` for `!left`); batch dims broadcast. Only `A`'s triangle is read (its
    /// diagonal taken as ones with `unitriangular`).
    pub fn linalg_solve_triangular(
        &self,
        rhs: &Tensor,
        upper: bool,
        left: bool,
        unitriangular: bool,
    ) -> Result<Tensor> {
        const OP: &str = "linalg.solve_triangular";
        // A is n × n; B is n × k (left) or k × n.
        let fits = |a: &[usize], b: &[usize]| a[0] == a[1] && a[0] == if left { b[0] } else { b[1] };
        if self.device() != Device::Cpu {
            let check = |op, t: &Tensor| check_matrix(op, t, &[DType::F32, DType::F64], "f32 or f64");
            let lead = system_lead(OP, self, rhs, check, fits)?;
            return self.solve_triangular_cuda(rhs, &lead, (upper, left, unitriangular));
        }
        let (lead, a, b) = system(OP, self, rhs, fits)?;
        if a.is_empty() || b.is_empty() {
            return assemble(&lead, b.rows, b.cols, &[], self.dtype());
        }
        let n = a.rows;
        let out: Vec<Mat<f64>> = a
            .mats
            .iter()
            .zip(&b.mats)
            .map(|(a, b)| {
                // X A = B is Aᵀ Xᵀ = Bᵀ, with Aᵀ's triangle on the other side.
                let lower = upper != left;
                let tri = Mat::from_fn(n, n, |i, j| {
                    let (si, sj) = if left { (i, j) } else { (j, i) };
                    let keep = if lower { j <= i } else { j >= i };
                    match () {
                        _ if i == j && unitriangular => 1.0,
                        _ if keep => a[(si, sj)],
                        _ => 0.0,
                    }
                });
                let mut x = if left { b.clone() } else { b.transpose().to_owned() };
                if lower {
                    tri.solve_lower_triangular_in_place(x.as_mut());
                } else {
                    tri.solve_upper_triangular_in_place(x.as_mut());
                }
                if left {
                    x
                } else {
                    x.transpose().to_owned()
                }
            })
            .collect();
        assemble(&lead, b.rows, b.cols, &out, self.dtype())
    }

    /// The CUDA half of `linalg_solve_triangular` (checked operands, batch dims `lead`):
    /// systems up to 64 × 64, one block per matrix.
    fn solve_triangular_cuda(
        &self,
        rhs: &Tensor,
        lead: &[usize],
        flags: (bool, bool, bool),
    ) -> Result<Tensor> {
        let n = self.shape()[self.rank() - 1];
        if n > crate::cuda::ops::TRSM_MAX_N {
            let e = Error::NotImplemented {
                op: "linalg.solve_triangular",
                device: self.device(),
                dtype: self.dtype(),
            };
            return Err(e);
        }
        let full = |t: &Tensor| -> Result<Tensor> {
            let mut shape = lead.to_vec();
            shape.extend_from_slice(&t.shape()[t.rank() - 2..]);
            t.broadcast_to(&shape)?.dense()
        };
        let (a, b) = (full(self)?, full(rhs)?);
        let count: usize = lead.iter().product();
        let k = if flags.1 { b.shape()[b.rank() - 1] } else { b.shape()[b.rank() - 2] };
        if count == 0 || n == 0 || k == 0 {
            return Tensor::zeros(b.shape(), b.dtype(), b.device());
        }
        const OP: &str = "linalg.solve_triangular";
        let (ga, gb) = (a.read(), b.read());
        let out = crate::cuda::ops::trsm_small(
            buf::<Cuda>(&ga, OP)?,
            buf::<Cuda>(&gb, OP)?,
            a.dtype(),
            count,
            n,
            k,
            flags,
        )?;
        Ok(Tensor::from_storage(Cuda::wrap(out), b.shape(), b.dtype(), b.device()))
    }

    /// `torch.linalg.qr(A, mode="reduced")`: Q `[..., m, k]` with orthonormal columns and
    /// upper-triangular R `[..., k, n]`, k = min(m, n), by Householder reflections with
    /// LAPACK's sign convention.
    pub fn linalg_qr(&self) -> Result<(Tensor, Tensor)> {
        check("linalg.qr", self)?;
        let b = Batch::of(self)?;
        let k = b.rows.min(b.cols);
        let (mut qs, mut rs) = (Vec::with_capacity(b.mats.len()), Vec::with_capacity(b.mats.len()));
        // Empty: Q [m, 0] and R [0, n] hold nothing.
        for m in b.mats.iter().filter(|_| !b.is_empty()) {
            let qr = m.qr();
            qs.push(qr.compute_thin_Q());
            rs.push(qr.thin_R().to_owned());
        }
        let q = assemble(&b.lead, b.rows, k, &qs, self.dtype())?;
        Ok((q, assemble(&b.lead, k, b.cols, &rs, self.dtype())?))
    }

    /// `torch.linalg.svd(A, full_matrices=)`: U, S (descending), Vh with `A = U diag(S) Vh`;
    /// U `[..., m, m]` and Vh `[..., n, n]` with `full_matrices`, else `[..., m, k]` and
    /// `[..., k, n]`. Singular vectors are unique only up to sign (per pair).
    pub fn linalg_svd(&self, full_matrices: bool) -> Result<(Tensor, Tensor, Tensor)> {
        const OP: &str = "linalg.svd";
        check(OP, self)?;
        let b = Batch::of(self)?;
        let k = b.rows.min(b.cols);
        let (mut us, mut ss, mut vhs) = (vec![], vec![], vec![]);
        if b.is_empty() && full_matrices {
            // PyTorch's SVD of an empty matrix: identity U and Vh (no singular values).
            (us, vhs) = (b.each(|| Mat::identity(b.rows, b.rows)), b.each(|| Mat::identity(b.cols, b.cols)));
            ss = vec![vec![]; b.mats.len()];
        }
        for m in b.mats.iter().filter(|_| !b.is_empty()) {
            let svd = svd_of(OP, m, full_matrices)?;
            us.push(svd.U().to_owned());
            ss.push(svd.S().column_vector().iter().copied().collect());
            vhs.push(svd.V().transpose().to_owned());
        }
        let (uc, vr) = if full_matrices { (b.rows, b.cols) } else { (k, k) };
        let u = assemble(&b.lead, b.rows, uc, &us, self.dtype())?;
        let s = assemble_vectors(&b.lead, k, ss, self.dtype())?;
        Ok((u, s, assemble(&b.lead, vr, b.cols, &vhs, self.dtype())?))
    }

    /// `torch.linalg.svdvals`: the singular values `[..., min(m, n)]`, descending.
    pub fn linalg_svdvals(&self) -> Result<Tensor> {
        const OP: &str = "linalg.svdvals";
        check(OP, self)?;
        let b = Batch::of(self)?;
        let vs = b
            .mats
            .iter()
            .map(|m| {
                if b.is_empty() {
                    return Ok(vec![]);
                }
                m.singular_values()
                    .map_err(|e| Error::invalid(OP, format!("the SVD did not converge ({e:?})")))
            })
            .collect::<Result<Vec<_>>>()?;
        assemble_vectors(&b.lead, b.rows.min(b.cols), vs, self.dtype())
    }

    /// `torch.linalg.pinv` with its default tolerance: singular values at or below
    /// `eps(dtype) · max(m, n) · σ_max` count as zero. `[..., m, n]` → `[..., n, m]`.
    pub fn linalg_pinv(&self) -> Result<Tensor> {
        const OP: &str = "linalg.pinv";
        check(OP, self)?;
        let b = Batch::of(self)?;
        let rtol = default_rtol(self.dtype(), b.rows, b.cols);
        if b.is_empty() {
            return assemble(&b.lead, b.cols, b.rows, &[], self.dtype());
        }
        let out = b.mats.iter().map(|m| pinv_of(OP, m, rtol)).collect::<Result<Vec<_>>>()?;
        assemble(&b.lead, b.cols, b.rows, &out, self.dtype())
    }

    /// `torch.linalg.lstsq(A, B).solution` with `self` as A `[..., m, n]` and B `[..., m,
    /// k]` (batch dims broadcast): the X `[..., n, k]` minimising ‖A X − B‖, of least
    /// norm when A is rank-deficient (LAPACK's gelsd; for full-rank A every driver agrees),
    /// singular values below `eps(dtype) · max(m, n) · σ_max` dropped.
    pub fn linalg_lstsq(&self, rhs: &Tensor) -> Result<Tensor> {
        const OP: &str = "linalg.lstsq";
        let (lead, a, b) = system(OP, self, rhs, |a, b| a[0] == b[0])?;
        let rtol = default_rtol(self.dtype(), a.rows, a.cols);
        if a.is_empty() || b.is_empty() {
            // The least-norm solution of an empty system is zero.
            return assemble(&lead, a.cols, b.cols, &a.each(|| Mat::zeros(a.cols, b.cols)), self.dtype());
        }
        let out = a
            .mats
            .iter()
            .zip(&b.mats)
            .map(|(a, b)| Ok(pinv_of(OP, a, rtol)? * b))
            .collect::<Result<Vec<_>>>()?;
        assemble(&lead, a.cols, b.cols, &out, self.dtype())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[f64], shape: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), shape, Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        a.to_f64_vec()
            .unwrap()
            .iter()
            .zip(b.to_f64_vec().unwrap())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    }

    fn eye(n: usize, lead: &[usize]) -> Tensor {
        let mut shape = lead.to_vec();
        shape.extend([n, n]);
        let id: Vec<f64> = (0..n * n).map(|i| if i % (n + 1) == 0 { 1.0 } else { 0.0 }).collect();
        t(&id, &[n, n]).broadcast_to(&shape).unwrap()
    }

    /// The triangle of a square `a` that a triangular solve reads (unit diagonal with `unit`).
    fn triangle(a: &Tensor, upper: bool, unit: bool) -> Tensor {
        let n = a.shape()[0];
        let v = a.to_f64_vec().unwrap();
        let tri: Vec<f64> = (0..n * n)
            .map(|k| {
                let (i, j) = (k / n, k % n);
                match () {
                    _ if i == j && unit => 1.0,
                    _ if (upper && j >= i) || (!upper && j <= i) => v[k],
                    _ => 0.0,
                }
            })
            .collect();
        t(&tri, &[n, n])
    }

    /// Random well-conditioned matrices: A·A⁻¹ = I, batched, and a 2×2 known inverse.
    #[test]
    fn inverse_times_matrix_is_identity() {
        let a = Tensor::randn(&[3, 5, 5], 1, DType::F64, Device::Cpu)
            .unwrap()
            .add(&eye(5, &[3]).mul_scalar(4.0).unwrap())
            .unwrap();
        let inv = a.linalg_inv().unwrap();
        assert!(max_diff(&a.matmul(&inv).unwrap(), &eye(5, &[3])) < 1e-12);
        let two = t(&[4.0, 7.0, 2.0, 6.0], &[2, 2]).linalg_inv().unwrap();
        assert!(max_diff(&two, &t(&[0.6, -0.7, -0.2, 0.4], &[2, 2])) < 1e-15);
        let e = t(&[1.0, 2.0, 2.0, 4.0], &[2, 2]).linalg_inv().unwrap_err().to_string();
        assert!(e.contains("singular"), "{e}");
    }

    /// Every (upper, left, unitriangular) combination solves its own equation, reading
    /// only the triangle; B's batch dim broadcasts over an unbatched A.
    #[test]
    fn triangular_solves_satisfy_their_equations() {
        let n = 4;
        let a = Tensor::randn(&[n, n], 2, DType::F64, Device::Cpu)
            .unwrap()
            .add(&eye(n, &[]).mul_scalar(3.0).unwrap())
            .unwrap();
        for upper in [false, true] {
            for left in [true, false] {
                for unit in [false, true] {
                    let shape = if left { [2, n, 3] } else { [2, 3, n] };
                    let b = Tensor::randn(&shape, 3, DType::F64, Device::Cpu).unwrap();
                    let x = a.linalg_solve_triangular(&b, upper, left, unit).unwrap();
                    let tri = triangle(&a, upper, unit);
                    let back = if left { tri.matmul(&x).unwrap() } else { x.matmul(&tri).unwrap() };
                    assert!(max_diff(&back, &b) < 1e-12, "upper {upper} left {left} unit {unit}");
                }
            }
        }
    }

    /// QR and SVD reconstruct their input with orthonormal factors; pinv and lstsq agree
    /// with the normal equations on a full-rank tall matrix; a rank-1 matrix's pinv drops
    /// the zero singular value.
    #[test]
    fn factorisations_reconstruct_and_solve() {
        let a = Tensor::randn(&[2, 7, 4], 4, DType::F64, Device::Cpu).unwrap();
        let (q, r) = a.linalg_qr().unwrap();
        assert_eq!((q.shape(), r.shape()), (&[2, 7, 4][..], &[2, 4, 4][..]));
        assert!(max_diff(&q.matmul(&r).unwrap(), &a) < 1e-12);
        assert!(max_diff(&q.transpose(-1, -2).unwrap().matmul(&q).unwrap(), &eye(4, &[2])) < 1e-12);
        let rv = r.to_f64_vec().unwrap();
        assert!(
            rv.iter().enumerate().all(|(k, &x)| k % 16 / 4 <= k % 4 || x == 0.0),
            "R is upper triangular"
        );
        for full in [true, false] {
            let (u, s, vh) = a.linalg_svd(full).unwrap();
            let k = if full { 7 } else { 4 };
            assert_eq!((u.shape(), s.shape(), vh.shape()), (&[2, 7, k][..], &[2, 4][..], &[2, 4, 4][..]));
            let us = u.narrow(-1, 0, 4).unwrap().mul(&s.unsqueeze(-2).unwrap()).unwrap();
            assert!(max_diff(&us.matmul(&vh).unwrap(), &a) < 1e-12);
            assert!(max_diff(&u.transpose(-1, -2).unwrap().matmul(&u).unwrap(), &eye(k, &[2])) < 1e-12);
            assert!(max_diff(&s, &a.linalg_svdvals().unwrap()) < 1e-12);
        }
        let b = Tensor::randn(&[2, 7, 3], 5, DType::F64, Device::Cpu).unwrap();
        let x = a.linalg_lstsq(&b).unwrap();
        let at = a.transpose(-1, -2).unwrap();
        let normal = at.matmul(&a).unwrap().linalg_inv().unwrap().matmul(&at.matmul(&b).unwrap()).unwrap();
        assert!(max_diff(&x, &normal) < 1e-10);
        assert!(max_diff(&a.linalg_pinv().unwrap().matmul(&b).unwrap(), &x) < 1e-10);
        // [[1, 2], [2, 4]] = 5 · v vᵀ with v = (1, 2)/√5: its pinv is v vᵀ / 25.
        let p = t(&[1.0, 2.0, 2.0, 4.0], &[2, 2]).linalg_pinv().unwrap();
        assert!(max_diff(&p, &t(&[0.04, 0.08, 0.08, 0.16], &[2, 2])) < 1e-15);
    }

    /// Empty matrices give PyTorch's shapes: empty results, identity U / Vh for a full
    /// SVD, zero least-squares solutions.
    #[test]
    fn empty_matrices_give_empty_results() {
        let z = |shape: &[usize]| Tensor::zeros(shape, DType::F32, Device::Cpu).unwrap();
        let e = z(&[2, 3, 0]);
        assert_eq!(z(&[2, 0, 0]).linalg_inv().unwrap().shape(), &[2, 0, 0]);
        let (q, r) = e.linalg_qr().unwrap();
        assert_eq!((q.shape(), r.shape()), (&[2, 3, 0][..], &[2, 0, 0][..]));
        let (u, s, vh) = e.linalg_svd(true).unwrap();
        assert_eq!((u.shape(), s.shape(), vh.shape()), (&[2, 3, 3][..], &[2, 0][..], &[2, 0, 0][..]));
        assert_eq!(u.to_f64_vec().unwrap(), eye(3, &[2]).to_f64_vec().unwrap());
        let (u, _, vh) = z(&[0, 4]).linalg_svd(false).unwrap();
        assert_eq!((u.shape(), vh.shape()), (&[0, 0][..], &[0, 4][..]));
        assert_eq!(e.linalg_svdvals().unwrap().shape(), &[2, 0]);
        assert_eq!(e.linalg_pinv().unwrap().shape(), &[2, 0, 3]);
        let x = z(&[2, 0, 3]).linalg_lstsq(&z(&[2, 0, 4])).unwrap();
        assert_eq!((x.shape(), x.to_f64_vec().unwrap()), (&[2, 3, 4][..], vec![0.0; 24]));
        assert_eq!(e.linalg_lstsq(&z(&[2, 3, 4])).unwrap().shape(), &[2, 0, 4]);
        let a = z(&[0, 0]);
        assert_eq!(a.linalg_solve_triangular(&z(&[0, 5]), false, true, false).unwrap().shape(), &[0, 5]);
        let a = Tensor::randn(&[3, 3], 1, DType::F32, Device::Cpu).unwrap();
        assert_eq!(a.linalg_solve_triangular(&z(&[3, 0]), true, true, false).unwrap().shape(), &[3, 0]);
    }

    #[test]
    fn bad_inputs_are_refused_with_reasons() {
        let msg = |r: Result<Tensor>| r.unwrap_err().to_string();
        assert!(msg(t(&[1.0, 2.0, 3.0], &[3]).linalg_inv()).contains("[..., m, n]"));
        assert!(msg(t(&[1.0; 6], &[2, 3]).linalg_inv()).contains("square"));
        let half = Tensor::ones(&[2, 2], DType::F16, Device::Cpu).unwrap();
        assert!(msg(half.linalg_pinv()).contains("f32 or f64"));
        let a = t(&[1.0, 0.0, 0.0, 1.0], &[2, 2]);
        assert!(a.linalg_solve_triangular(&t(&[1.0; 3], &[3, 1]), false, true, false).is_err());
        assert!(a.linalg_lstsq(&t(&[1.0; 3], &[3, 1])).is_err());
    }
}
