//! Index ops: index_select, gather, take, put_, index_copy_, cat, stack.
//! On the CPU, indices are range-checked and errors returned. On the GPU they are not
//! read back (that would be a host sync in the decode path): kernels wrap negative
//! indices and write 0 for out-of-range ones, as documented in `kernels/index.cu`.

use crate::backend::{buf, on_backend, Backend};
use crate::error::{Error, Result};
use crate::layout::normalize_dim;
use crate::{DType, Tensor};

/// Where a read by index takes its elements: the one difference between `index_select`,
/// `gather` and `take` that the backends see.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Gather {
    /// `out[.., j, ..] = self[.., index[j], ..]` along this dim (`index_select`, 1-D index).
    Select(usize),
    /// `out[i][j][k] = self[i][index[i][j][k]][k]` along this dim (`gather`).
    Along(usize),
    /// `out[p] = self.flatten()[index[p]]` (`take`).
    Flat,
}

/// Where an in-place write by index lands: the one difference between `put_` and
/// `index_copy_` that the backends see.
#[derive(Clone, Copy, Debug)]
pub enum Scatter {
    /// `self.flatten()[index[p]] = source[p]` (`put_`), `+=` with `accumulate`.
    Flat {
        /// Add to the element instead of overwriting it.
        accumulate: bool,
    },
    /// `self[.., index[c], ..] = source[.., c, ..]` along this dim (`index_copy_`).
    Along(usize),
}

pub(super) fn check_index_dtype(op: &'static str, t: &Tensor) -> Result<()> {
    if !t.dtype.is_int() {
        return Err(Error::DTypeNotSupported { op, got: t.dtype, expected: "an integer index dtype" });
    }
    Ok(())
}

/// Index `i` of a dim of `size`, negative ones wrapped once: the range check of every
/// index the host can see.
pub(crate) fn wrap_index(op: &'static str, i: i64, size: usize) -> Result<usize> {
    let j = if i < 0 { i + size as i64 } else { i };
    usize::try_from(j).ok().filter(|&j| j < size).ok_or(Error::IndexOutOfRange { op, index: i, size })
}

/// The indices of `t` read to the host (a sync on a GPU: for CPU paths), each checked by
/// [`wrap_index`] against `size`.
pub(super) fn host_indices(op: &'static str, t: &Tensor, size: usize) -> Result<Vec<usize>> {
    t.to_dtype(DType::I64)?.to_vec::<i64>()?.into_iter().map(|i| wrap_index(op, i, size)).collect()
}

impl Tensor {
    /// `out[..., j, ...] = self[..., index[j], ...]` along `dim`; `index` is 1-D.
    pub fn index_select(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        self.check_same_device(index, "index_select")?;
        check_index_dtype("index_select", index)?;
        if index.rank() > 1 {
            return Err(Error::bad_shape(
                "index_select",
                format!("index must be 1-D, got {:?}", index.shape()),
            ));
        }
        let d = normalize_dim(dim, self.rank())?;
        let mut shape = self.shape().to_vec();
        if shape.is_empty() {
            shape.push(1);
        }
        shape[d] = index.numel();
        let ig = index.read();
        let storage = on_backend!(&*self.read(), |B, x| {
            let (i, how) = (buf::<B>(&ig, "index_select")?, Gather::Select(d));
            B::wrap(B::gather(
                "index_select",
                how,
                x,
                &self.layout,
                i,
                &index.layout,
                index.dtype,
                self.dtype,
            )?)
        });
        Ok(Tensor::from_storage(storage, &shape, self.dtype, self.device))
    }

    /// `out[i][j][k] = self[i][index[i][j][k]][k]` for dim 1 (and likewise for any dim).
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        self.check_same_device(index, "gather")?;
        check_index_dtype("gather", index)?;
        let d = normalize_dim(dim, self.rank())?;
        if index.rank() != self.rank()
            || (0..self.rank()).any(|k| k != d && index.shape()[k] > self.shape()[k])
        {
            return Err(Error::ShapeMismatch {
                op: "gather",
                lhs: self.shape().to_vec(),
                rhs: index.shape().to_vec(),
            });
        }
        let ig = index.read();
        let storage = on_backend!(&*self.read(), |B, x| {
            let i = buf::<B>(&ig, "gather")?;
            let how = Gather::Along(d);
            B::wrap(B::gather("gather", how, x, &self.layout, i, &index.layout, index.dtype, self.dtype)?)
        });
        Ok(Tensor::from_storage(storage, index.shape(), self.dtype, self.device))
    }

    /// Elements of the flattened tensor at `index`, shaped like `index`.
    pub fn take(&self, index: &Tensor) -> Result<Tensor> {
        self.check_same_device(index, "take")?;
        check_index_dtype("take", index)?;
        let ig = index.read();
        let storage = on_backend!(&*self.read(), |B, x| {
            let i = buf::<B>(&ig, "take")?;
            B::wrap(B::gather(
                "take",
                Gather::Flat,
                x,
                &self.layout,
                i,
                &index.layout,
                index.dtype,
                self.dtype,
            )?)
        });
        Ok(Tensor::from_storage(storage, index.shape(), self.dtype, self.device))
    }

    /// PyTorch's `index_copy_`: `self[.., index[i], ..] = source[.., i, ..]` along `dim`, in
    /// place; `source` is shaped as `self` but for `dim`, where it has `index.numel()`
    /// positions, and is cast to `self`'s dtype. On CUDA the indices stay on the device, so
    /// a captured CUDA graph can write at a position it reads there (the KV cache's decode
    /// step); out-of-range ones are skipped there and an error on the CPU. Repeated
    /// indices: on the CPU the last write wins, on CUDA one of them, unspecified which.
    pub fn index_copy_(&self, dim: isize, index: &Tensor, source: &Tensor) -> Result<()> {
        const OP: &str = "index_copy_";
        self.check_same_device(index, OP)?;
        self.check_same_device(source, OP)?;
        check_index_dtype(OP, index)?;
        let d = normalize_dim(dim, self.rank())?;
        let fits = index.rank() <= 1
            && source.rank() == self.rank()
            && (0..self.rank())
                .all(|i| source.shape()[i] == if i == d { index.numel() } else { self.shape()[i] });
        if !fits {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "source {:?} must be self {:?} with dim {d} of the index's {} positions (index {:?})",
                    source.shape(),
                    self.shape(),
                    index.numel(),
                    index.shape()
                ),
            ));
        }
        self.scatter_(OP, index, source, Scatter::Along(d))
    }

    /// In place: `self.flatten()[index[p]] = source[p]` (or `+=` with `accumulate`;
    /// repeated indices then add up). `source` must have as many elements as `index`.
    pub fn put_(&self, index: &Tensor, source: &Tensor, accumulate: bool) -> Result<()> {
        self.check_same_device(index, "put_")?;
        self.check_same_device(source, "put_")?;
        check_index_dtype("put_", index)?;
        if index.numel() != source.numel() {
            return Err(Error::ShapeMismatch {
                op: "put_",
                lhs: index.shape().to_vec(),
                rhs: source.shape().to_vec(),
            });
        }
        self.scatter_("put_", index, source, Scatter::Flat { accumulate })
    }

    /// The in-place writes by index (`put_`, `index_copy_`) after their shape checks:
    /// `source` cast to `self`'s dtype (copied first when it shares `self`'s storage), the
    /// indices checked on the CPU and left on the device on CUDA.
    fn scatter_(&self, op: &'static str, index: &Tensor, source: &Tensor, how: Scatter) -> Result<()> {
        let src = source.to_dtype(self.dtype)?;
        let src = if src.same_storage(self) { src.copy_as(self.dtype)? } else { src };
        let (ig, sg) = (index.read(), src.read());
        let mut g = self.write(op)?;
        on_backend!(&mut *g, |B, x| {
            let (i, s) = (buf::<B>(&ig, op)?, buf::<B>(&sg, op)?);
            B::scatter(op, x, &self.layout, how, i, &index.layout, index.dtype, s, &src.layout, self.dtype)
        })
    }

    /// Concatenates along `dim`; dtypes promote as in PyTorch.
    pub fn cat(tensors: &[Tensor], dim: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::invalid("cat", "needs at least one tensor"))?;
        let d = normalize_dim(dim, first.rank())?;
        let dt = tensors.iter().fold(first.dtype, |a, t| DType::promote(a, t.dtype));
        let mut shape = first.shape().to_vec();
        shape[d] = 0;
        for t in tensors {
            first.check_same_device(t, "cat")?;
            if t.rank() != first.rank() || (0..t.rank()).any(|k| k != d && t.shape()[k] != first.shape()[k]) {
                return Err(Error::ShapeMismatch {
                    op: "cat",
                    lhs: first.shape().to_vec(),
                    rhs: t.shape().to_vec(),
                });
            }
            shape[d] += t.shape()[d];
        }
        let out = Tensor::zeros(&shape, dt, first.device)?;
        let mut at = 0;
        for t in tensors {
            out.narrow(d as isize, at, t.shape()[d])?.copy_(t)?;
            at += t.shape()[d];
        }
        Ok(out)
    }

    /// Stacks equal-shaped tensors along a new `dim`.
    pub fn stack(tensors: &[Tensor], dim: isize) -> Result<Tensor> {
        let first = tensors.first().ok_or_else(|| Error::invalid("stack", "needs at least one tensor"))?;
        let d = normalize_dim(dim, first.rank() + 1)?;
        let parts = tensors
            .iter()
            .map(|t| {
                if t.shape() != first.shape() {
                    return Err(Error::ShapeMismatch {
                        op: "stack",
                        lhs: first.shape().to_vec(),
                        rhs: t.shape().to_vec(),
                    });
                }
                t.unsqueeze(d as isize)
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&parts, d as isize)
    }
}
