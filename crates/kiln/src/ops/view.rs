//! View ops: new layouts over the same storage (no copies, except `contiguous` and a
//! `reshape` of a non-contiguous tensor).

use crate::error::{Error, Result};
use crate::layout::{contiguous_strides, normalize_dim, numel, Layout};
use crate::{DType, Tensor};

impl Tensor {
    /// Same elements in row-major order; copies only when the layout is not contiguous.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.copy_as(self.dtype)
    }

    /// A contiguous copy with its own storage (PyTorch's `clone()`).
    pub fn copy(&self) -> Result<Tensor> {
        self.copy_as(self.dtype)
    }

    /// Contiguous with offset 0: what row kernels that take a bare buffer need.
    pub(crate) fn dense(&self) -> Result<Tensor> {
        if self.is_contiguous() && self.layout.offset == 0 {
            return Ok(self.clone());
        }
        self.copy_as(self.dtype)
    }

    /// This view when it is contiguous at any offset (a slice of a fused projection's row
    /// qualifies), else a contiguous copy: for kernels that take a start element.
    pub(crate) fn packed(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.copy_as(self.dtype)
    }

    /// A view with a new shape; the tensor must be contiguous (else use `reshape`).
    pub fn view(&self, shape: &[usize]) -> Result<Tensor> {
        if numel(shape) != self.numel() {
            return Err(Error::ShapeMismatch { op: "view", lhs: self.shape().to_vec(), rhs: shape.to_vec() });
        }
        if !self.is_contiguous() {
            return Err(Error::bad_shape("view", "tensor is not contiguous; use reshape"));
        }
        Ok(self.with_layout(Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: self.layout.offset,
        }))
    }

    /// Like `view`, copying first when the layout is not contiguous.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if numel(shape) != self.numel() {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                lhs: self.shape().to_vec(),
                rhs: shape.to_vec(),
            });
        }
        self.contiguous()?.view(shape)
    }

    /// `reshape` where one entry may be -1 (inferred).
    pub fn reshape_infer(&self, shape: &[isize]) -> Result<Tensor> {
        let known: usize = shape.iter().filter(|&&s| s >= 0).map(|&s| s as usize).product();
        let holes = shape.iter().filter(|&&s| s < 0).count();
        if holes > 1
            || shape.iter().any(|&s| s < -1)
            || (holes == 1 && (known == 0 || !self.numel().is_multiple_of(known)))
        {
            return Err(Error::bad_shape(
                "reshape",
                format!("cannot infer {shape:?} from {:?}", self.shape()),
            ));
        }
        let dims: Vec<usize> =
            shape.iter().map(|&s| if s < 0 { self.numel() / known.max(1) } else { s as usize }).collect();
        self.reshape(&dims)
    }

    /// Merges dims `start..=end` into one.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape(&[1]);
        }
        let (s, e) = (normalize_dim(start, self.rank())?, normalize_dim(end, self.rank())?);
        if s > e {
            return Err(Error::invalid("flatten", format!("start dim {start} is after end dim {end}")));
        }
        let mut shape = self.shape()[..s].to_vec();
        shape.push(self.shape()[s..=e].iter().product());
        shape.extend_from_slice(&self.shape()[e + 1..]);
        self.reshape(&shape)
    }

    /// A view with dims reordered: dim `i` of the result is dim `dims[i]` of `self`.
    pub fn permute(&self, dims: &[usize]) -> Result<Tensor> {
        let mut seen = vec![false; self.rank()];
        if dims.len() != self.rank() {
            return Err(Error::invalid(
                "permute",
                format!("{dims:?} is not a permutation of {} dims", self.rank()),
            ));
        }
        for &d in dims {
            if d >= self.rank() || seen[d] {
                return Err(Error::invalid(
                    "permute",
                    format!("{dims:?} is not a permutation of {} dims", self.rank()),
                ));
            }
            seen[d] = true;
        }
        Ok(self.with_layout(self.layout.permute(dims)))
    }

    /// A view with dims `d0` and `d1` swapped.
    pub fn transpose(&self, d0: isize, d1: isize) -> Result<Tensor> {
        let (a, b) = (normalize_dim(d0, self.rank())?, normalize_dim(d1, self.rank())?);
        let mut dims: Vec<usize> = (0..self.rank()).collect();
        dims.swap(a, b);
        self.permute(&dims)
    }

    /// Transpose of a tensor of rank ≤ 2 (PyTorch's `t()`).
    pub fn t(&self) -> Result<Tensor> {
        match self.rank() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            r => Err(Error::invalid("t", format!("expects a tensor of rank ≤ 2, got {r}"))),
        }
    }

    /// Elements `start..start+len` of `dim`.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        let d = normalize_dim(dim, self.rank())?;
        let size = self.shape()[d];
        if start + len > size {
            return Err(Error::IndexOutOfRange { op: "narrow", index: (start + len) as i64, size });
        }
        let mut l = self.layout.clone();
        l.offset += start * l.strides[d];
        l.shape[d] = len;
        Ok(self.with_layout(l))
    }

    /// Python's `t[start:end:step]` along `dim` (`end` clamped to the size).
    pub fn slice(&self, dim: isize, start: usize, end: usize, step: usize) -> Result<Tensor> {
        let d = normalize_dim(dim, self.rank())?;
        if step == 0 {
            return Err(Error::invalid("slice", "step must be positive"));
        }
        let end = end.min(self.shape()[d]);
        let start = start.min(end);
        let mut l = self.layout.clone();
        l.offset += start * l.strides[d];
        l.shape[d] = (end - start).div_ceil(step);
        l.strides[d] *= step;
        Ok(self.with_layout(l))
    }

    /// Broadcasts to `shape` without copying (stride 0 on expanded dims).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        Ok(self.with_layout(self.layout.broadcast_to(shape)?))
    }

    /// PyTorch's `expand`: like `broadcast_to`.
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        self.broadcast_to(shape)
    }

    /// Removes `dim` if it has size 1 (else returns the tensor unchanged, as PyTorch does).
    pub fn squeeze(&self, dim: isize) -> Result<Tensor> {
        let d = normalize_dim(dim, self.rank())?;
        if self.rank() == 0 || self.shape()[d] != 1 {
            return Ok(self.clone());
        }
        let mut l = self.layout.clone();
        l.shape.remove(d);
        l.strides.remove(d);
        Ok(self.with_layout(l))
    }

    /// Removes every dim of size 1.
    pub fn squeeze_all(&self) -> Tensor {
        let mut l = self.layout.clone();
        let keep: Vec<usize> = (0..self.rank()).filter(|&d| self.shape()[d] != 1).collect();
        l.shape = keep.iter().map(|&d| self.shape()[d]).collect();
        l.strides = keep.iter().map(|&d| self.strides()[d]).collect();
        self.with_layout(l)
    }

    /// `torch.view_as_real`: a complex64 tensor `[...]` as f32 `[..., 2]` (re, im), sharing
    /// its storage.
    pub fn view_as_real(&self) -> Result<Tensor> {
        if self.dtype != DType::C64 {
            return Err(Error::DTypeNotSupported {
                op: "view_as_real",
                got: self.dtype,
                expected: "complex64",
            });
        }
        let mut l = self.layout.clone();
        l.strides.iter_mut().for_each(|s| *s *= 2);
        l.offset *= 2;
        l.shape.push(2);
        l.strides.push(1);
        Ok(Tensor { dtype: DType::F32, ..self.with_layout(l) })
    }

    /// `torch.view_as_complex`: an f32 tensor `[..., 2]` (re, im) as complex64 `[...]`,
    /// sharing its storage; the pairs must be adjacent and every other stride (and the
    /// offset) even, as PyTorch requires.
    pub fn view_as_complex(&self) -> Result<Tensor> {
        const OP: &str = "view_as_complex";
        if self.dtype != DType::F32 {
            return Err(Error::DTypeNotSupported { op: OP, got: self.dtype, expected: "float32 [..., 2]" });
        }
        let l = &self.layout;
        let r = l.rank();
        if r == 0 || l.shape[r - 1] != 2 || l.strides[r - 1] != 1 {
            return Err(Error::bad_shape(OP, format!("needs a last dim of 2 with stride 1, got {:?}", l)));
        }
        let odd = |x: &usize| !x.is_multiple_of(2);
        if odd(&l.offset) || l.strides[..r - 1].iter().zip(&l.shape).any(|(s, &n)| n > 1 && odd(s)) {
            return Err(Error::bad_shape(OP, format!("needs even strides and offset, got {:?}", l)));
        }
        let layout = Layout {
            shape: l.shape[..r - 1].to_vec(),
            strides: l.strides[..r - 1].iter().map(|s| s / 2).collect(),
            offset: l.offset / 2,
        };
        Ok(Tensor { dtype: DType::C64, ..self.with_layout(layout) })
    }

    /// A view with a new size-1 dim at `dim` (counted in the result's rank).
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let d = normalize_dim(dim, self.rank() + 1)?;
        let mut l = self.layout.clone();
        let stride = if d < self.rank() { l.strides[d] * l.shape[d] } else { 1 };
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(self.with_layout(l))
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};
    use num_complex::Complex32;

    /// Complex64 and its (re, im) pairs share storage both ways, through strided views too;
    /// pairs that are not adjacent, odd offsets and other dtypes are refused.
    #[test]
    fn complex_and_real_views_share_storage() {
        let z: Vec<Complex32> = (0..6).map(|i| Complex32::new(i as f32, -(i as f32) - 0.5)).collect();
        let z = Tensor::from_vec(z, &[2, 3], Device::Cpu).unwrap();
        let r = z.view_as_real().unwrap();
        assert_eq!((r.shape(), r.dtype()), (&[2, 3, 2][..], DType::F32));
        assert_eq!(r.to_vec::<f32>().unwrap()[8..10], [4.0, -4.5]);
        // A transposed complex view stays a view: element (2, 1) of zᵀ is z[1][2].
        let rt = z.transpose(0, 1).unwrap().view_as_real().unwrap();
        assert_eq!(
            rt.narrow(0, 2, 1).unwrap().narrow(1, 1, 1).unwrap().to_vec::<f32>().unwrap(),
            [5.0, -5.5]
        );
        let back = r.narrow(1, 1, 2).unwrap().view_as_complex().unwrap();
        assert_eq!(back.to_vec::<Complex32>().unwrap()[3], Complex32::new(5.0, -5.5));
        assert!(r.narrow(2, 0, 1).unwrap().view_as_complex().is_err());
        assert!(r.transpose(1, 2).unwrap().view_as_complex().is_err());
        let odd = Tensor::zeros(&[5], DType::F32, Device::Cpu).unwrap().narrow(0, 1, 4).unwrap();
        assert!(odd.reshape(&[2, 2]).unwrap().view_as_complex().is_err());
        assert!(r.view_as_real().is_err());
    }
}
