//! `pad` with PyTorch's `F.pad` rules: `pad` holds (before, after) pairs from the last dim
//! backwards. Constant padding fills a new tensor and copies the input into its middle
//! (negative amounts crop); reflect / replicate / circular gather each padded dim through an
//! index map. Composed of kiln ops (full, copy_, index_select), so it runs on every device
//! they do.

use crate::error::{Error, Result};
use crate::Tensor;

/// How `pad` fills the new border.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// With this value; negative amounts crop.
    Constant(f64),
    /// Mirrored without repeating the edge (`[1 2 3]` → `3 2 | 1 2 3 | 2 1`); each amount
    /// below the dim's size.
    Reflect,
    /// Repeating the edge element; the dim must not be empty.
    Replicate,
    /// Wrapping around; each amount at most the dim's size.
    Circular,
}

const OP: &str = "pad";

impl Tensor {
    /// `F.pad(self, pad, mode)`: `pad = [before_last, after_last, before_2nd_last, …]`, at most
    /// two per dim.
    pub fn pad(&self, pad: &[isize], mode: PadMode) -> Result<Tensor> {
        if !pad.len().is_multiple_of(2) || pad.len() > 2 * self.rank() {
            return Err(Error::bad_shape(
                OP,
                format!(
                    "pad needs (before, after) pairs, at most one per dim: got {pad:?} for {:?}",
                    self.shape()
                ),
            ));
        }
        // (dim, before, after), innermost first.
        let dims: Vec<(usize, isize, isize)> =
            pad.chunks(2).enumerate().map(|(i, p)| (self.rank() - 1 - i, p[0], p[1])).collect();
        for &(d, b, a) in &dims {
            let n = self.shape()[d] as isize;
            let why = match mode {
                PadMode::Constant(_)
                    if b.saturating_neg().max(0).saturating_add(a.saturating_neg().max(0)) > n =>
                {
                    Some("crops more than the dim holds")
                }
                PadMode::Constant(_) => None,
                _ if b < 0 || a < 0 => Some("is negative (only constant padding crops)"),
                PadMode::Reflect if b >= n || a >= n => Some("is not below the dim's size (reflect)"),
                PadMode::Replicate if n == 0 && b.saturating_add(a) > 0 => {
                    Some("pads an empty dim (replicate)")
                }
                PadMode::Circular if b > n || a > n => Some("exceeds the dim's size (circular)"),
                _ => None,
            };
            if let Some(why) = why {
                return Err(Error::invalid(
                    OP,
                    format!("padding ({b}, {a}) of dim {d} (size {n}) of {:?} {why}", self.shape()),
                ));
            }
        }
        let mut shape = self.shape().to_vec();
        for &(d, b, a) in &dims {
            let n = (shape[d] as isize).checked_add(b).and_then(|n| n.checked_add(a));
            shape[d] = n.and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                Error::invalid(OP, format!("padding ({b}, {a}) of dim {d} (size {}) overflows", shape[d]))
            })?;
        }
        crate::alloc_check::check_output(OP, &shape, self.dtype(), self.device())?;
        match mode {
            PadMode::Constant(value) => self.pad_constant(&dims, value),
            _ => dims.iter().try_fold(self.clone(), |x, &(d, b, a)| x.pad_gather(d, b, a, mode)),
        }
    }

    fn pad_constant(&self, dims: &[(usize, isize, isize)], value: f64) -> Result<Tensor> {
        let mut inner = self.clone();
        let mut shape = self.shape().to_vec();
        for &(d, b, a) in dims {
            let n = shape[d] as isize;
            let (cut_b, cut_a) = ((-b).max(0), (-a).max(0));
            inner = inner.narrow(d as isize, cut_b as usize, (n - cut_b - cut_a) as usize)?;
            shape[d] = (n + b + a) as usize;
        }
        let out = Tensor::full(&shape, value, self.dtype(), self.device())?;
        let mut middle = out.clone();
        for &(d, b, _) in dims {
            middle = middle.narrow(d as isize, b.max(0) as usize, inner.shape()[d])?;
        }
        middle.copy_(&inner)?;
        Ok(out)
    }

    /// One dim padded by `b` before and `a` after (both ≥ 0) in a gathering mode.
    fn pad_gather(&self, d: usize, b: isize, a: isize, mode: PadMode) -> Result<Tensor> {
        if b == 0 && a == 0 {
            return Ok(self.clone());
        }
        let n = self.shape()[d] as isize;
        let src: Vec<i64> = (-b..n + a)
            .map(|p| match mode {
                PadMode::Reflect if p < 0 => -p,
                PadMode::Reflect if p >= n => 2 * (n - 1) - p,
                PadMode::Replicate => p.clamp(0, n - 1),
                PadMode::Circular => p.rem_euclid(n),
                _ => p,
            } as i64)
            .collect();
        let len = src.len();
        let index = Tensor::from_vec(src, &[len], self.device())?;
        self.index_select(d as isize, &index)
    }
}

/// Parses PyTorch's mode names (`constant` takes `value`).
impl PadMode {
    /// Parses PyTorch's mode names (`constant` takes `value`); `None` for any other name.
    pub fn parse(mode: &str, value: f64) -> Option<PadMode> {
        match mode {
            "constant" => Some(PadMode::Constant(value)),
            "reflect" => Some(PadMode::Reflect),
            "replicate" => Some(PadMode::Replicate),
            "circular" => Some(PadMode::Circular),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PadMode;
    use crate::{DType, Device, Tensor};

    fn row(v: &[f32]) -> Tensor {
        Tensor::from_slice(v, &[1, v.len()], Device::Cpu).unwrap()
    }

    fn vals(t: &Tensor) -> Vec<f64> {
        t.to_f64_vec().unwrap()
    }

    #[test]
    fn each_mode_on_one_dim() {
        let x = row(&[1.0, 2.0, 3.0]);
        let cases: [(PadMode, [isize; 2], Vec<f64>); 6] = [
            (PadMode::Constant(9.0), [2, 1], vec![9.0, 9.0, 1.0, 2.0, 3.0, 9.0]),
            (PadMode::Constant(0.0), [-1, 1], vec![2.0, 3.0, 0.0]),
            (PadMode::Reflect, [2, 2], vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]),
            (PadMode::Replicate, [2, 1], vec![1.0, 1.0, 1.0, 2.0, 3.0, 3.0]),
            (PadMode::Circular, [3, 1], vec![1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0]),
            (PadMode::Reflect, [0, 0], vec![1.0, 2.0, 3.0]),
        ];
        for (mode, p, want) in cases {
            let y = x.pad(&p, mode).unwrap();
            assert_eq!(y.shape(), &[1, want.len()], "{mode:?} {p:?}");
            assert_eq!(vals(&y), want, "{mode:?} {p:?}");
        }
    }

    #[test]
    fn pairs_run_from_the_last_dim_backwards_and_keep_the_dtype() {
        // [2, 3] padded (1, 0) on the last dim and (0, 1) on the first, reflect then constant.
        let x = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6], &[2, 3], Device::Cpu).unwrap();
        let y = x.pad(&[1, 0, 0, 1], PadMode::Reflect).unwrap();
        assert_eq!(vals(&y), vec![2.0, 1.0, 2.0, 3.0, 5.0, 4.0, 5.0, 6.0, 2.0, 1.0, 2.0, 3.0]);
        let y = x.pad(&[1, 0, 0, 1], PadMode::Replicate).unwrap();
        assert_eq!(y.dtype(), DType::I64);
        assert_eq!(y.shape(), &[3, 4]);
        assert_eq!(vals(&y), vec![1.0, 1.0, 2.0, 3.0, 4.0, 4.0, 5.0, 6.0, 4.0, 4.0, 5.0, 6.0]);
        let y = x.pad(&[0, 1, 1, -1], PadMode::Constant(-1.0)).unwrap();
        assert_eq!(y.shape(), &[2, 4]);
        assert_eq!(vals(&y), vec![-1.0, -1.0, -1.0, -1.0, 1.0, 2.0, 3.0, -1.0]);
    }

    #[test]
    fn bad_padding_is_refused_with_reasons() {
        let x = row(&[1.0, 2.0, 3.0]);
        let err = |p: &[isize], m| x.pad(p, m).expect_err("must be refused").to_string();
        assert!(err(&[1], PadMode::Reflect).contains("pairs"));
        assert!(err(&[0, 0, 0, 0, 1, 1], PadMode::Constant(0.0)).contains("pairs"));
        assert!(err(&[3, 0], PadMode::Reflect).contains("below the dim's size"));
        assert!(err(&[4, 0], PadMode::Circular).contains("exceeds"));
        assert!(err(&[-1, 0], PadMode::Replicate).contains("negative"));
        assert!(err(&[-2, -2], PadMode::Constant(0.0)).contains("crops more"));
        let empty = Tensor::zeros(&[2, 0], DType::F32, Device::Cpu).unwrap();
        assert!(empty.pad(&[1, 0], PadMode::Replicate).unwrap_err().to_string().contains("empty"));
        assert_eq!(PadMode::parse("reflect", 0.0), Some(PadMode::Reflect));
        assert_eq!(PadMode::parse("zeros", 0.0), None);
    }
}
