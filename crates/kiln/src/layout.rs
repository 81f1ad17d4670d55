//! Shapes, strides and the strided index walk shared by every backend.

use crate::error::{Error, Result};

/// Where a tensor's elements sit in its storage: `offset + Σ index[d] * strides[d]`,
/// all in elements (not bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Size of each dim.
    pub shape: Vec<usize>,
    /// Distance in elements between neighbours along each dim (0 for a broadcast dim).
    pub strides: Vec<usize>,
    /// Storage index of the first element.
    pub offset: usize,
}

pub(crate) fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for d in (0..shape.len()).rev() {
        strides[d] = acc;
        acc *= shape[d].max(1);
    }
    strides
}

/// Resolves a possibly negative `dim` for a tensor of rank `rank`.
pub fn normalize_dim(dim: isize, rank: usize) -> Result<usize> {
    let r = rank.max(1) as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(Error::DimOutOfRange { dim, rank });
    }
    Ok(d as usize)
}

/// NumPy/PyTorch broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::ShapeMismatch { op: "broadcast", lhs: a.to_vec(), rhs: b.to_vec() });
        };
    }
    Ok(out)
}

impl Layout {
    /// The row-major layout of `shape` at offset 0.
    pub fn contiguous(shape: &[usize]) -> Self {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for rank 0).
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Whether the elements are dense in row-major order from `offset` (size-1 dims' strides
    /// do not matter).
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for d in (0..self.shape.len()).rev() {
            if self.shape[d] != 1 && self.strides[d] != acc {
                return false;
            }
            acc *= self.shape[d];
        }
        true
    }

    /// Whether the elements fill `offset..offset + numel` in some order of the dims: a
    /// permutation of a contiguous layout, such as a transpose (size-1 dims' strides do not
    /// matter). Gaps and broadcast (stride-0) dims are not dense.
    pub fn is_dense(&self) -> bool {
        let mut dims: Vec<(usize, usize)> =
            self.strides.iter().zip(&self.shape).filter(|&(_, &n)| n != 1).map(|(&st, &n)| (st, n)).collect();
        dims.sort_unstable();
        let mut next = 1;
        dims.iter().all(|&(st, n)| {
            let ok = st == next;
            next *= n;
            ok
        })
    }

    /// The largest storage index touched plus one (0 for an empty tensor).
    pub fn storage_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset + self.shape.iter().zip(&self.strides).map(|(s, st)| (s - 1) * st).sum::<usize>() + 1
    }

    /// A view of this layout broadcast to `shape` (stride 0 on expanded dims).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Layout> {
        if shape.len() < self.rank() {
            return Err(Error::ShapeMismatch { op: "expand", lhs: self.shape.clone(), rhs: shape.to_vec() });
        }
        let extra = shape.len() - self.rank();
        let mut strides = vec![0; shape.len()];
        for (i, &s) in shape.iter().enumerate() {
            if i < extra {
                continue;
            }
            let (src, st) = (self.shape[i - extra], self.strides[i - extra]);
            if src == s {
                strides[i] = st;
            } else if src != 1 {
                return Err(Error::ShapeMismatch {
                    op: "expand",
                    lhs: self.shape.clone(),
                    rhs: shape.to_vec(),
                });
            }
        }
        Ok(Layout { shape: shape.to_vec(), strides, offset: self.offset })
    }

    /// The dims reordered: dim `i` of the result is dim `dims[i]` of this one. `dims` must be a
    /// permutation of `0..rank` (callers check it).
    pub fn permute(&self, dims: &[usize]) -> Layout {
        Layout {
            shape: dims.iter().map(|&d| self.shape[d]).collect(),
            strides: dims.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        }
    }

    /// Storage offsets of every element in row-major order.
    pub fn offsets(&self) -> StridedOffsets<'_> {
        StridedOffsets { layout: self, index: vec![0; self.rank()], next: self.offset, left: self.numel() }
    }

    /// Merges adjacent dims that are contiguous with each other; fewer dims make the
    /// strided walks (and the GPU index math) cheaper without changing element order.
    pub fn coalesced(&self) -> Layout {
        let mut shape: Vec<usize> = Vec::new();
        let mut strides: Vec<usize> = Vec::new();
        for (&s, &st) in self.shape.iter().zip(&self.strides) {
            if s == 1 {
                continue;
            }
            if let (Some(ls), Some(lst)) = (shape.last_mut(), strides.last_mut()) {
                if *lst == st * s {
                    *ls *= s;
                    *lst = st;
                    continue;
                }
            }
            shape.push(s);
            strides.push(st);
        }
        Layout { shape, strides, offset: self.offset }
    }
}

/// Iterator over a layout's storage offsets in row-major order ([`Layout::offsets`]).
pub struct StridedOffsets<'a> {
    layout: &'a Layout,
    index: Vec<usize>,
    next: usize,
    left: usize,
}

impl Iterator for StridedOffsets<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let cur = self.next;
        let l = self.layout;
        for d in (0..l.rank()).rev() {
            self.index[d] += 1;
            self.next += l.strides[d];
            if self.index[d] < l.shape[d] {
                break;
            }
            self.next -= l.strides[d] * l.shape[d];
            self.index[d] = 0;
        }
        Some(cur)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for StridedOffsets<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_layouts_are_permutations_of_contiguous_ones() {
        assert!(Layout::contiguous(&[6, 10]).is_dense());
        assert!(Layout::contiguous(&[6, 10]).permute(&[1, 0]).is_dense());
        assert!(Layout::contiguous(&[3, 1, 4, 5]).permute(&[3, 1, 0, 2]).is_dense());
        assert!(!Layout { shape: vec![5, 3], strides: vec![1, 10], offset: 2 }.is_dense());
        assert!(!Layout { shape: vec![4, 5], strides: vec![0, 1], offset: 5 }.is_dense());
    }

    #[test]
    fn offsets_of_transpose() {
        let l = Layout::contiguous(&[2, 3]).permute(&[1, 0]);
        assert_eq!(l.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
        assert!(!l.is_contiguous());
    }

    #[test]
    fn broadcast_rules() {
        assert_eq!(broadcast_shapes(&[3, 1], &[4]).unwrap(), vec![3, 4]);
        assert!(broadcast_shapes(&[3], &[4]).is_err());
        let l = Layout::contiguous(&[3, 1]).broadcast_to(&[2, 3, 4]).unwrap();
        assert_eq!(l.strides, vec![0, 1, 0]);
    }

    #[test]
    fn coalesce_merges_contiguous_dims() {
        let l = Layout::contiguous(&[2, 3, 4]).coalesced();
        assert_eq!(l.shape, vec![24]);
        let t = Layout::contiguous(&[2, 3, 4]).permute(&[1, 0, 2]).coalesced();
        assert_eq!(t.shape, vec![3, 2, 4]);
    }

    #[test]
    fn negative_dims() {
        assert_eq!(normalize_dim(-1, 3).unwrap(), 2);
        assert!(normalize_dim(3, 3).is_err());
        assert!(normalize_dim(-4, 3).is_err());
    }
}
