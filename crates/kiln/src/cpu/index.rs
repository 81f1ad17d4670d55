//! Indexing kernels. Indices arrive validated and non-negative from `ops`.

use super::CpuBuffer;
use crate::dtype::Elem;
use crate::layout::Layout;
use crate::DType;

/// Storage offset of the element at row-major position `p` of `l`.
pub fn offset_of(l: &Layout, mut p: usize) -> usize {
    let mut off = l.offset;
    for d in (0..l.rank()).rev() {
        off += (p % l.shape[d]) * l.strides[d];
        p /= l.shape[d];
    }
    off
}

/// `dst[dl] = src[sl]` elementwise (same shape, same dtype), in place.
pub fn copy_into(dst: &mut CpuBuffer, dl: &Layout, src: &CpuBuffer, sl: &Layout, dt: DType) {
    crate::with_dtype!(dt, T, {
        let s = src.as_slice::<T>();
        let d = dst.as_mut_slice::<T>();
        for (i, j) in dl.offsets().zip(sl.offsets()) {
            d[i] = s[j];
        }
    })
}

/// Shared walk of gather and index_select: output position `p` (shape `out`) reads
/// `x` at the same coordinates except along `dim`, where `pick(p, coord)` gives it.
fn gather_walk(
    x: &CpuBuffer,
    lx: &Layout,
    dim: usize,
    out: &[usize],
    dt: DType,
    pick: impl Fn(usize, usize) -> usize,
) -> CpuBuffer {
    let ol = Layout::contiguous(out);
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        let v: Vec<T> = (0..ol.numel())
            .map(|p| {
                let mut off = lx.offset;
                for (d, &size) in out.iter().enumerate() {
                    let c = (p / ol.strides[d]) % size;
                    off += if d == dim { pick(p, c) } else { c } * lx.strides[d];
                }
                x[off]
            })
            .collect();
        CpuBuffer::from_vec(v)
    })
}

/// `out[..., j, ...] = x[..., idx[j], ...]` along `dim`.
pub fn index_select(x: &CpuBuffer, lx: &Layout, dim: usize, idx: &[usize], dt: DType) -> CpuBuffer {
    let mut shape = lx.shape.clone();
    shape[dim] = idx.len();
    gather_walk(x, lx, dim, &shape, dt, |_, c| idx[c])
}

/// `out[i][j][k] = x[i][index[i][j][k]][k]` (for dim = 1), out shaped like `index`.
pub fn gather(
    x: &CpuBuffer,
    lx: &Layout,
    dim: usize,
    index: &[usize],
    ishape: &[usize],
    dt: DType,
) -> CpuBuffer {
    gather_walk(x, lx, dim, ishape, dt, |p, _| index[p])
}

/// `out[p] = x.flatten()[idx[p]]`.
pub fn take(x: &CpuBuffer, lx: &Layout, idx: &[usize], dt: DType) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let x = x.as_slice::<T>();
        CpuBuffer::from_vec(idx.iter().map(|&i| x[offset_of(lx, i)]).collect::<Vec<T>>())
    })
}

/// `x[.., idx[c], ..] = src[.., c, ..]` along `dim`, in place; repeated indices: the last
/// write wins.
pub fn index_copy(
    x: &mut CpuBuffer,
    lx: &Layout,
    dim: usize,
    idx: &[usize],
    src: &CpuBuffer,
    ls: &Layout,
    dt: DType,
) {
    let walk = Layout::contiguous(&ls.shape);
    crate::with_dtype!(dt, T, {
        let s = src.as_slice::<T>();
        let x = x.as_mut_slice::<T>();
        for (p, from) in ls.offsets().enumerate() {
            let mut off = lx.offset;
            for (d, &size) in ls.shape.iter().enumerate() {
                let c = (p / walk.strides[d]) % size;
                off += if d == dim { idx[c] } else { c } * lx.strides[d];
            }
            x[off] = s[from];
        }
    })
}

/// `x.flatten()[idx[p]] = src[p]` (or `+=` when `accumulate`), in place.
pub fn put(
    x: &mut CpuBuffer,
    lx: &Layout,
    idx: &[usize],
    src: &CpuBuffer,
    ls: &Layout,
    dt: DType,
    accumulate: bool,
) {
    crate::with_dtype!(dt, T, {
        let s = src.as_slice::<T>();
        let x = x.as_mut_slice::<T>();
        for (&i, j) in idx.iter().zip(ls.offsets()) {
            let o = offset_of(lx, i);
            x[o] = if !accumulate {
                s[j]
            } else if dt.is_float() || dt.is_complex() {
                T::from_complex(x[o].to_f64() + s[j].to_f64(), x[o].im() + s[j].im())
            } else {
                T::from_i128(x[o].to_i128().wrapping_add(s[j].to_i128()))
            };
        }
    })
}

/// Reads an integer index tensor's values (any integer dtype) as i64.
pub fn indices_as_i64(x: &CpuBuffer, lx: &Layout, dt: DType) -> Vec<i64> {
    crate::with_dtype!(dt, T, lx.offsets().map(|o| x.as_slice::<T>()[o].to_i64()).collect())
}
