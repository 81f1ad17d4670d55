//! Batched matrix products through the `gemm` crate (f32, f64, complex64).

use crate::layout::Layout;
use rayon::prelude::*;

/// Types the `gemm` crate multiplies.
pub trait GemmElem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
}
impl GemmElem for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}
impl GemmElem for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}
impl GemmElem for gemm::c32 {
    const ZERO: Self = gemm::c32 { re: 0.0, im: 0.0 };
    const ONE: Self = gemm::c32 { re: 1.0, im: 0.0 };
}

/// `la` = [batch…, m, k], `lb` = [batch…, k, n] with identical batch dims (broadcast
/// strides allowed, any inner strides). Returns the contiguous [batch…, m, n] product.
pub fn matmul<T: GemmElem>(a: &[T], la: &Layout, b: &[T], lb: &Layout) -> Vec<T> {
    let r = la.rank();
    let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], lb.shape[r - 1]);
    let batch = |l: &Layout| Layout {
        shape: l.shape[..r - 2].to_vec(),
        strides: l.strides[..r - 2].to_vec(),
        offset: l.offset,
    };
    let (ba, bb) = (batch(la), batch(lb));
    let offs: Vec<(usize, usize)> = ba.offsets().zip(bb.offsets()).collect();
    let mut out = vec![T::ZERO; offs.len() * m * n];
    if m * n == 0 {
        return out;
    }
    let par = if offs.len() == 1 { gemm::Parallelism::Rayon(0) } else { gemm::Parallelism::None };
    let one = |(dst, &(oa, ob)): (&mut [T], &(usize, usize))| {
        // SAFETY: `ops::matmul` checked the shapes, so every index the strides reach lies
        // inside `a` / `b` (their layouts came from valid tensors), and `dst` holds m·n
        // elements written with row stride n.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr().add(oa),
                la.strides[r - 1] as isize,
                la.strides[r - 2] as isize,
                b.as_ptr().add(ob),
                lb.strides[r - 1] as isize,
                lb.strides[r - 2] as isize,
                T::ZERO,
                T::ONE,
                false,
                false,
                false,
                par,
            )
        }
    };
    if offs.len() == 1 {
        out.chunks_mut(m * n).zip(&offs).for_each(one);
    } else {
        out.par_chunks_mut(m * n).zip(offs.par_iter()).for_each(one);
    }
    out
}
