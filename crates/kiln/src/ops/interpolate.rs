//! `F.interpolate` (modes nearest, nearest-exact, linear / bilinear / trilinear) and its
//! backward with PyTorch's index formulas, on the CPU. Each spatial dim is resampled in
//! turn by per-position taps (`cpu::interpolate`), which is exact for these separable
//! modes; the backward scatter-adds the same taps. The taps are computed in the precision
//! PyTorch computes them in (f32 for nearest and for non-f64 linear, f64 for f64 linear)
//! so that source indices and weights round as PyTorch's do.
//!
//! kiln has no autograd: the backward is its own op, `interpolate_backward`. No CUDA
//! kernel yet: a CUDA tensor gets `Error::NotImplemented`.

use crate::cpu::interpolate::{resample, resample_adjoint, Taps};
use crate::error::{Error, Result};
use crate::{DType, Device, Tensor};

const OP: &str = "interpolate";

/// How `interpolate` reads its input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterpolateMode {
    /// `src = floor(dst · scale)` (PyTorch's legacy nearest, OpenCV's INTER_NEAREST).
    Nearest,
    /// `src = floor((dst + 0.5) · scale)`: pixel centres, as PIL and scikit-image.
    NearestExact,
    /// Linear over 1 spatial dim (3-D input).
    Linear,
    /// Bilinear over 2 spatial dims (4-D input).
    Bilinear,
    /// Trilinear over 3 spatial dims (5-D input).
    Trilinear,
}

impl InterpolateMode {
    /// PyTorch's mode names.
    pub fn parse(mode: &str) -> Option<InterpolateMode> {
        Some(match mode {
            "nearest" => InterpolateMode::Nearest,
            "nearest-exact" => InterpolateMode::NearestExact,
            "linear" => InterpolateMode::Linear,
            "bilinear" => InterpolateMode::Bilinear,
            "trilinear" => InterpolateMode::Trilinear,
            _ => return None,
        })
    }

    fn is_linear(self) -> bool {
        matches!(self, InterpolateMode::Linear | InterpolateMode::Bilinear | InterpolateMode::Trilinear)
    }
}

/// The output's spatial size: given, or as `scale_factor`s (PyTorch's default
/// `recompute_scale_factor=None`: the size is `floor(in · s)` and the index formulas keep
/// `1 / s`, not `in / out`). One value applies to every spatial dim.
#[derive(Clone, Debug, PartialEq)]
pub enum Resize {
    /// The output's spatial size.
    Size(Vec<usize>),
    /// A scale factor per spatial dim.
    Scale(Vec<f64>),
}

/// PyTorch's `compute_scales_value`: `1 / scale` when a scale factor was given, else
/// `in / out` (in the precision `round` gives).
fn scale_value(scale: Option<f64>, n_in: usize, n_out: usize, round: fn(f64) -> f64) -> f64 {
    match scale {
        Some(s) if s > 0.0 => round(1.0 / s),
        _ => round(n_in as f64 / n_out as f64),
    }
}

fn to_f32(x: f64) -> f64 {
    x as f32 as f64
}

/// The taps of every output position along one dim. `round` rounds each step to the
/// precision PyTorch computes linear weights in (one f64 op rounded to f32 equals the f32
/// op).
fn taps(
    mode: InterpolateMode,
    n_in: usize,
    n_out: usize,
    scale: Option<f64>,
    align_corners: bool,
    round: fn(f64) -> f64,
) -> Vec<Taps> {
    let last = n_in - 1;
    let nearest = |j: usize, exact: bool| -> usize {
        // PyTorch's nearest_idx: exact shortcuts for ×1 and ×2, else f32 math.
        let s = scale_value(scale, n_in, n_out, to_f32);
        let src = match () {
            _ if exact => to_f32((j as f64 + 0.5) * s).floor(),
            _ if n_out == n_in => return j,
            _ if n_out == 2 * n_in => return j >> 1,
            _ => to_f32(j as f64 * s).floor(),
        };
        (src as usize).min(last)
    };
    (0..n_out)
        .map(|j| match mode {
            InterpolateMode::Nearest => vec![(nearest(j, false), 1.0)],
            InterpolateMode::NearestExact => vec![(nearest(j, true), 1.0)],
            // PyTorch's "scale_factor = 1, simply copy".
            _ if n_out == n_in => vec![(j, 1.0)],
            _ => {
                // area_pixel_compute_scale / _source_index, then guard_index_and_lambda.
                let ratio = match () {
                    _ if align_corners && n_out > 1 => round(last as f64 / (n_out - 1) as f64),
                    _ if align_corners => 0.0,
                    _ => scale_value(scale, n_in, n_out, round),
                };
                let real = if align_corners {
                    round(ratio * j as f64)
                } else {
                    round(round(ratio * round(j as f64 + 0.5)) - 0.5).max(0.0)
                };
                // PyTorch floors with floorf (through f32) in every precision.
                let i0 = (to_f32(real).floor() as usize).min(last);
                let l1 = round(real - i0 as f64).clamp(0.0, 1.0);
                let i1 = if i0 < last { i0 + 1 } else { i0 };
                vec![(i0, round(1.0 - l1)), (i1, l1)]
            }
        })
        .collect()
}

/// Checks an interpolation of an input of `shape` and `dtype` on `device`; returns each
/// spatial dim's (output size, taps).
fn plan(
    shape: &[usize],
    dtype: DType,
    device: Device,
    resize: &Resize,
    mode: InterpolateMode,
    align_corners: Option<bool>,
) -> Result<Vec<(usize, Vec<Taps>)>> {
    if device != Device::Cpu {
        return Err(Error::NotImplemented { op: OP, device, dtype });
    }
    if !dtype.is_float() {
        return Err(Error::DTypeNotSupported { op: OP, got: dtype, expected: "a floating dtype" });
    }
    let want_rank = match mode {
        InterpolateMode::Linear => 3..=3,
        InterpolateMode::Bilinear => 4..=4,
        InterpolateMode::Trilinear => 5..=5,
        _ => 3..=5,
    };
    if !want_rank.contains(&shape.len()) {
        return Err(Error::bad_shape(
            OP,
            format!("{mode:?} needs a [N, C, spatial...] input of rank {want_rank:?}, got {shape:?}"),
        ));
    }
    if align_corners.is_some() && !mode.is_linear() {
        return Err(Error::invalid(OP, format!("align_corners is only for the linear modes, not {mode:?}")));
    }
    let spatial = &shape[2..];
    let count = match resize {
        Resize::Size(v) => v.len(),
        Resize::Scale(v) => v.len(),
    };
    if count != 1 && count != spatial.len() {
        return Err(Error::invalid(
            OP,
            format!("{resize:?} needs one value or one per spatial dim of {shape:?}"),
        ));
    }
    let round = if dtype == DType::F64 { |x| x } else { to_f32 as fn(f64) -> f64 };
    spatial
        .iter()
        .enumerate()
        .map(|(d, &n_in)| {
            let at = if count == 1 { 0 } else { d };
            let (n_out, scale) = match resize {
                Resize::Size(v) => (v[at], None),
                Resize::Scale(v) if v[at].is_finite() && v[at] > 0.0 => {
                    ((n_in as f64 * v[at]).floor() as usize, Some(v[at]))
                }
                Resize::Scale(v) => {
                    return Err(Error::invalid(OP, format!("scale factor {} is not positive", v[at])))
                }
            };
            // The taps are a vector per output position: check it can exist before making it.
            crate::alloc_check::host_can_allocate(OP, n_out.saturating_mul(std::mem::size_of::<Taps>()))?;
            if n_in == 0 || n_out == 0 {
                return Err(Error::invalid(
                    OP,
                    format!("input and output sizes must be above 0: dim {} is {n_in} → {n_out}", d + 2),
                ));
            }
            Ok((n_out, taps(mode, n_in, n_out, scale, align_corners.unwrap_or(false), round)))
        })
        .collect()
}

impl Tensor {
    /// `F.interpolate(self, size | scale_factor, mode, align_corners)` for `self` `[N, C,
    /// spatial...]` (1 to 3 spatial dims; linear / bilinear / trilinear need exactly 1 / 2
    /// / 3). `align_corners` is for the linear modes only (`None` there means false, as in
    /// PyTorch). Computed in f64 with PyTorch's source indices and weights, returned in
    /// `self`'s dtype.
    pub fn interpolate(
        &self,
        resize: &Resize,
        mode: InterpolateMode,
        align_corners: Option<bool>,
    ) -> Result<Tensor> {
        let dims = plan(self.shape(), self.dtype(), self.device(), resize, mode, align_corners)?;
        let mut shape = self.shape().to_vec();
        let mut v = self.to_f64_vec()?;
        for (i, (n_out, taps)) in dims.iter().enumerate() {
            v = resample(&v, &shape, i + 2, taps);
            shape[i + 2] = *n_out;
        }
        Tensor::from_vec(v, &shape, Device::Cpu)?.to_dtype(self.dtype())
    }

    /// The backward of [`Tensor::interpolate`] with `self` as `grad_output` (its output's
    /// shape): the gradient with respect to an input of shape `input_size`, each output
    /// element's gradient added to the input elements it was read from, with the same
    /// weights (`aten::upsample_*_backward`).
    pub fn interpolate_backward(
        &self,
        input_size: &[usize],
        resize: &Resize,
        mode: InterpolateMode,
        align_corners: Option<bool>,
    ) -> Result<Tensor> {
        let dims = plan(input_size, self.dtype(), self.device(), resize, mode, align_corners)?;
        let mut shape = input_size.to_vec();
        for (i, (n_out, _)) in dims.iter().enumerate() {
            shape[i + 2] = *n_out;
        }
        if self.shape() != shape {
            return Err(Error::ShapeMismatch {
                op: "interpolate_backward",
                lhs: self.shape().to_vec(),
                rhs: shape,
            });
        }
        let mut g = self.to_f64_vec()?;
        for (i, (_, taps)) in dims.iter().enumerate().rev() {
            g = resample_adjoint(&g, &shape, i + 2, taps, input_size[i + 2]);
            shape[i + 2] = input_size[i + 2];
        }
        Tensor::from_vec(g, &shape, Device::Cpu)?.to_dtype(self.dtype())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use InterpolateMode::*;

    fn t(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_slice(v, shape, Device::Cpu).unwrap()
    }

    fn vals(t: &Tensor) -> Vec<f64> {
        t.to_f64_vec().unwrap()
    }

    fn dot(a: &Tensor, b: &Tensor) -> f64 {
        vals(a).iter().zip(vals(b)).map(|(x, y)| x * y).sum()
    }

    /// Known 1-D results of each mode against PyTorch's formulas.
    #[test]
    fn one_dim_matches_pytorch_formulas() {
        let x = t(&[1.0, 2.0, 4.0], &[1, 1, 3]);
        let up = |r: Resize, m, ac| vals(&x.interpolate(&r, m, ac).unwrap());
        assert_eq!(up(Resize::Scale(vec![2.0]), Nearest, None), [1.0, 1.0, 2.0, 2.0, 4.0, 4.0]);
        // 3 → 5: scale 0.6; nearest floor(j·0.6) = 0 0 1 1 2; exact floor((j+.5)·0.6) = 0 0 1 2 2.
        assert_eq!(up(Resize::Size(vec![5]), Nearest, None), [1.0, 1.0, 2.0, 2.0, 4.0]);
        assert_eq!(up(Resize::Size(vec![5]), NearestExact, None), [1.0, 1.0, 2.0, 4.0, 4.0]);
        // Linear ×2 without align_corners: src = (j + 0.5)/2 − 0.5, clamped at 0.
        let lin = up(Resize::Scale(vec![2.0]), Linear, Some(false));
        let want = [1.0, 1.25, 1.75, 2.5, 3.5, 4.0];
        assert!(lin.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{lin:?}");
        // With align_corners the ends line up: src = j · 2/4.
        assert_eq!(up(Resize::Size(vec![5]), Linear, Some(true)), [1.0, 1.5, 2.0, 3.0, 4.0]);
        // A scale factor is used as given (1/s), not recomputed from the sizes: 3 · 1.7 → 5
        // positions read at (j + 0.5)/1.7 − 0.5.
        let s = up(Resize::Scale(vec![1.7]), Linear, None);
        let src = |j: f64| ((j + 0.5) / 1.7 - 0.5f64).max(0.0);
        let f = |p: f64| if p < 1.0 { 1.0 + p } else { 2.0 + 2.0 * (p - 1.0).min(1.0) };
        assert!(s.iter().enumerate().all(|(j, v)| (v - f(src(j as f64))).abs() < 1e-6), "{s:?}");
    }

    /// Backward is the adjoint of forward: ⟨f(x), g⟩ = ⟨x, f*(g)⟩ for every mode, odd
    /// sizes, up and down, 1 to 3 spatial dims.
    #[test]
    fn backward_is_the_adjoint() {
        let cases: [(&[usize], Resize, InterpolateMode, Option<bool>); 8] = [
            (&[2, 3, 5, 7], Resize::Scale(vec![2.0]), Nearest, None),
            (&[2, 3, 5, 7], Resize::Size(vec![3, 11]), NearestExact, None),
            (&[2, 3, 5, 7], Resize::Scale(vec![2.0]), Bilinear, Some(false)),
            (&[2, 3, 5, 7], Resize::Size(vec![9, 4]), Bilinear, Some(true)),
            (&[1, 2, 7], Resize::Scale(vec![0.6]), Linear, None),
            (&[1, 2, 3, 4, 5], Resize::Scale(vec![1.5, 2.0, 0.5]), Trilinear, Some(false)),
            (&[1, 2, 3, 4, 5], Resize::Size(vec![2, 7, 5]), Nearest, None),
            (&[1, 1, 1, 6], Resize::Size(vec![1, 1]), Bilinear, Some(true)),
        ];
        for (k, (shape, r, m, ac)) in cases.into_iter().enumerate() {
            let x = Tensor::randn(shape, k as u64, DType::F64, Device::Cpu).unwrap();
            let y = x.interpolate(&r, m, ac).unwrap();
            let g = Tensor::randn(y.shape(), 100 + k as u64, DType::F64, Device::Cpu).unwrap();
            let gx = g.interpolate_backward(shape, &r, m, ac).unwrap();
            assert_eq!(gx.shape(), shape);
            let (a, b) = (dot(&y, &g), dot(&x, &gx));
            assert!((a - b).abs() < 1e-10 * a.abs().max(1.0), "case {k}: {a} vs {b}");
        }
    }

    /// Nearest copies (infinities survive), keeps f16 / bf16, and bilinear's ×1 is a copy.
    #[test]
    fn copies_and_dtypes() {
        let x = t(&[f32::INFINITY, -1.0, 3.0, 0.5], &[1, 1, 2, 2]);
        let y =
            x.to_dtype(DType::BF16).unwrap().interpolate(&Resize::Scale(vec![3.0]), Nearest, None).unwrap();
        assert_eq!((y.dtype(), y.shape()), (DType::BF16, &[1, 1, 6, 6][..]));
        assert_eq!(vals(&y)[..3], [f64::INFINITY; 3]);
        let same = x.interpolate(&Resize::Size(vec![2, 2]), Bilinear, None).unwrap();
        assert_eq!(vals(&same), vals(&x));
    }

    #[test]
    fn bad_arguments_are_refused_with_reasons() {
        let x = Tensor::zeros(&[1, 2, 3, 4], DType::F32, Device::Cpu).unwrap();
        let msg = |r: Result<Tensor>| r.expect_err("must be refused").to_string();
        let two = Resize::Scale(vec![2.0]);
        assert!(msg(x.interpolate(&two, Linear, None)).contains("rank"));
        assert!(msg(x.reshape(&[24]).unwrap().interpolate(&two, Nearest, None)).contains("rank"));
        assert!(msg(x.interpolate(&two, Nearest, Some(false))).contains("align_corners"));
        assert!(msg(x.interpolate(&Resize::Size(vec![1, 2, 3]), Nearest, None)).contains("one per spatial"));
        assert!(msg(x.interpolate(&Resize::Scale(vec![-1.0]), Nearest, None)).contains("not positive"));
        assert!(msg(x.interpolate(&Resize::Scale(vec![0.1]), Nearest, None)).contains("above 0"));
        let i = Tensor::zeros(&[1, 2, 3, 4], DType::I32, Device::Cpu).unwrap();
        assert!(msg(i.interpolate(&two, Nearest, None)).contains("floating"));
        let g = Tensor::zeros(&[1, 2, 6, 9], DType::F32, Device::Cpu).unwrap();
        assert!(g.interpolate_backward(&[1, 2, 3, 4], &two, Nearest, None).is_err());
        assert_eq!(InterpolateMode::parse("nearest-exact"), Some(NearestExact));
        assert_eq!(InterpolateMode::parse("bicubic"), None);
    }
}
