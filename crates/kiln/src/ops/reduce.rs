//! Reductions over any set of dims. The input is permuted so the reduced dims come
//! last and copied contiguous; backends then reduce `outer` rows of `r` elements.

use super::ReduceOp;
use crate::backend::{on_backend, Backend};
use crate::error::{Error, Result};
use crate::layout::normalize_dim;
use crate::{DType, Tensor};

/// The input as contiguous rows, plus the output shape.
pub(crate) struct Rows {
    pub x: Tensor,
    pub outer: usize,
    pub r: usize,
    pub out_shape: Vec<usize>,
}

impl Tensor {
    /// Moves `dims` (all dims when empty) last and makes the tensor contiguous.
    pub(crate) fn rows_over(&self, dims: &[isize], keepdim: bool) -> Result<Rows> {
        let rank = self.rank();
        let mut red = vec![false; rank];
        if dims.is_empty() {
            red.iter_mut().for_each(|r| *r = true);
        }
        for &d in dims {
            let d = normalize_dim(d, rank)?;
            if rank == 0 {
                continue;
            }
            if red[d] {
                return Err(Error::invalid("reduce", format!("dim {d} appears more than once")));
            }
            red[d] = true;
        }
        let keep: Vec<usize> = (0..rank).filter(|&d| !red[d]).collect();
        let perm: Vec<usize> = keep.iter().copied().chain((0..rank).filter(|&d| red[d])).collect();
        let x = self.permute(&perm)?.dense()?;
        let outer: usize = keep.iter().map(|&d| self.shape()[d]).product();
        let r: usize = (0..rank).filter(|&d| red[d]).map(|d| self.shape()[d]).product();
        let out_shape = if keepdim {
            (0..rank).map(|d| if red[d] { 1 } else { self.shape()[d] }).collect()
        } else {
            keep.iter().map(|&d| self.shape()[d]).collect()
        };
        Ok(Rows { x, outer, r, out_shape })
    }

    /// Reduces over `dims` (all when empty), dropping them unless `keepdim`. Sum and product of
    /// integers give int64, argmax / argmin int64 indices; min, max, argmin and argmax of an empty
    /// dim are an error.
    pub fn reduce(&self, op: ReduceOp, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        use ReduceOp::*;
        let name = format!("{op:?}").to_lowercase();
        if self.dtype.is_complex() && op != Sum {
            return Err(Error::DTypeNotSupported { op: "reduce", got: self.dtype, expected: "a real dtype" });
        }
        if op == Mean && !self.dtype.is_float() && !self.dtype.is_complex() {
            return Err(Error::invalid(
                "mean",
                format!("needs a floating dtype, got {} ({name})", self.dtype),
            ));
        }
        let rows = self.rows_over(dims, keepdim)?;
        if rows.r == 0 && matches!(op, Max | Min | ArgMax | ArgMin) && rows.outer > 0 {
            return Err(Error::invalid("reduce", format!("{name} of an empty dimension has no identity")));
        }
        let out = match op {
            ArgMax | ArgMin => DType::I64,
            Sum | Prod if !self.dtype.is_float() && !self.dtype.is_complex() => DType::I64,
            _ => self.dtype,
        };
        let Rows { x, outer, r, out_shape } = rows;
        let storage = on_backend!(&*x.read(), |B, b| B::wrap(B::reduce(op, b, x.dtype, outer, r, out)?));
        Ok(Tensor::from_storage(storage, &out_shape, out, self.device))
    }

    /// (variance with `correction`, mean) over `dims` in one pass over the data.
    pub fn var_mean(&self, dims: &[isize], correction: f64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported {
                op: "var_mean",
                got: self.dtype,
                expected: "a floating dtype",
            });
        }
        let Rows { x, outer, r, out_shape } = self.rows_over(dims, keepdim)?;
        let (v, m) = on_backend!(&*x.read(), |B, b| {
            let (v, m) = B::var_mean(b, x.dtype, outer, r, correction)?;
            (B::wrap(v), B::wrap(m))
        });
        Ok((
            Tensor::from_storage(v, &out_shape, self.dtype, self.device),
            Tensor::from_storage(m, &out_shape, self.dtype, self.device),
        ))
    }

    /// (standard deviation with `correction`, mean).
    pub fn std_mean(&self, dims: &[isize], correction: f64, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let (v, m) = self.var_mean(dims, correction, keepdim)?;
        Ok((v.sqrt()?, m))
    }

    /// Variance over `dims` with `correction` (1: Bessel's, as `torch.var`'s default).
    pub fn var(&self, dims: &[isize], correction: f64, keepdim: bool) -> Result<Tensor> {
        Ok(self.var_mean(dims, correction, keepdim)?.0)
    }

    /// Standard deviation over `dims` with `correction`.
    pub fn std(&self, dims: &[isize], correction: f64, keepdim: bool) -> Result<Tensor> {
        Ok(self.std_mean(dims, correction, keepdim)?.0)
    }

    /// Sum over `dims` (all when empty); integer sums are int64 as in PyTorch.
    pub fn sum(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, dims, keepdim)
    }

    /// Mean over `dims` (all when empty); floating dtypes only.
    pub fn mean(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, dims, keepdim)
    }

    /// Product over `dims` (all when empty); integer products are int64.
    pub fn prod(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Prod, dims, keepdim)
    }

    /// Maximum over `dims` (all when empty); `torch.amax`, values only.
    pub fn max(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, dims, keepdim)
    }

    /// Minimum over `dims` (all when empty); `torch.amin`, values only.
    pub fn min(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, dims, keepdim)
    }

    /// Index of the first maximum along `dim` (over the flattened tensor when `None`).
    pub fn argmax(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        match dim {
            Some(d) => self.reduce(ReduceOp::ArgMax, &[d], keepdim),
            None => self.flatten(0, -1)?.reduce(ReduceOp::ArgMax, &[0], false),
        }
    }

    /// Index of the first minimum along `dim` (over the flattened tensor when `None`).
    pub fn argmin(&self, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        match dim {
            Some(d) => self.reduce(ReduceOp::ArgMin, &[d], keepdim),
            None => self.flatten(0, -1)?.reduce(ReduceOp::ArgMin, &[0], false),
        }
    }
}
