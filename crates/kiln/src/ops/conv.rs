//! `conv1d` / `conv2d` / `conv3d` with PyTorch's rules (`F.conv{1,2,3}d`: stride, zero
//! padding, dilation, groups, bias; batched `[N, C, *]` or unbatched `[C, *]` input),
//! composed of kiln ops: the input is zero-padded, each kernel tap is a strided view, the
//! taps are stacked into columns (im2col) and one batched matmul multiplies them with the
//! weight per group. A reference for dedicated kernels, not a fast path: the columns take
//! (taps ×) the input's memory.

use crate::error::{Error, Result};
use crate::ops::PadMode;
use crate::Tensor;

/// Stride, padding and dilation per spatial dim (one value: every dim), and the groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conv {
    /// Step between output positions, per spatial dim.
    pub stride: Vec<usize>,
    /// Zeros added at both ends of each spatial dim.
    pub padding: Vec<usize>,
    /// Spacing between kernel taps, per spatial dim.
    pub dilation: Vec<usize>,
    /// Channel groups: input and output channels split into `groups` independent convolutions.
    pub groups: usize,
}

impl Default for Conv {
    /// PyTorch's defaults: stride 1, no padding, dilation 1, one group.
    fn default() -> Self {
        Conv { stride: vec![1], padding: vec![0], dilation: vec![1], groups: 1 }
    }
}

const OP: &str = "conv";

impl Tensor {
    /// `F.conv1d`: `self` `[N, C, L]` (or `[C, L]`), `weight` `[O, C / groups, k]`, `bias` `[O]`.
    pub fn conv1d(&self, weight: &Tensor, bias: Option<&Tensor>, p: &Conv) -> Result<Tensor> {
        self.conv_nd(1, weight, bias, p)
    }

    /// `F.conv2d`: `self` `[N, C, H, W]` (or `[C, H, W]`), `weight` `[O, C / groups, kh, kw]`.
    pub fn conv2d(&self, weight: &Tensor, bias: Option<&Tensor>, p: &Conv) -> Result<Tensor> {
        self.conv_nd(2, weight, bias, p)
    }

    /// `F.conv3d`: `self` `[N, C, D, H, W]` (or without `N`), `weight` `[O, C / groups, kd, kh,
    /// kw]`.
    pub fn conv3d(&self, weight: &Tensor, bias: Option<&Tensor>, p: &Conv) -> Result<Tensor> {
        self.conv_nd(3, weight, bias, p)
    }

    /// `d` spatial dims: `self` `[N, C, *in]` (or `[C, *in]`), `weight` `[O, C / groups, *k]`,
    /// `bias` `[O]`; the output is `[N, O, *out]` with `out = (in + 2·pad − dil·(k − 1) − 1) /
    /// stride + 1`.
    fn conv_nd(&self, d: usize, weight: &Tensor, bias: Option<&Tensor>, p: &Conv) -> Result<Tensor> {
        if self.rank() == d + 1 {
            return self.unsqueeze(0)?.conv_nd(d, weight, bias, p)?.squeeze(0);
        }
        let per_dim = |name: &str, v: &[usize]| -> Result<Vec<usize>> {
            match v.len() {
                1 => Ok(vec![v[0]; d]),
                n if n == d => Ok(v.to_vec()),
                _ => Err(Error::invalid(OP, format!("{name} needs 1 or {d} values, got {v:?}"))),
            }
        };
        let (stride, pad, dil) = (
            per_dim("stride", &p.stride)?,
            per_dim("padding", &p.padding)?,
            per_dim("dilation", &p.dilation)?,
        );
        check(self, d, weight, bias, p.groups, &stride, &dil)?;
        let (n, c, o, g) = (self.shape()[0], self.shape()[1], weight.shape()[0], p.groups);
        let ks = &weight.shape()[2..];
        let out: Vec<usize> = (0..d)
            .map(|i| {
                let span = dil[i].checked_mul(ks[i] - 1).and_then(|s| s.checked_add(1));
                let room = pad[i].checked_mul(2).and_then(|p| p.checked_add(self.shape()[2 + i]));
                let (Some(span), Some(room)) = (span, room.filter(|&r| r <= isize::MAX as usize)) else {
                    return Err(Error::invalid(OP, format!("padding {pad:?} or dilation {dil:?} overflows")));
                };
                (room >= span).then(|| (room - span) / stride[i] + 1).ok_or_else(|| {
                    Error::invalid(
                        OP,
                        format!(
                            "kernel {ks:?} (dilation {dil:?}) does not fit the padded input {:?}",
                            self.shape()
                        ),
                    )
                })
            })
            .collect::<Result<_>>()?;
        let amounts: Vec<isize> = pad.iter().rev().flat_map(|&q| [q as isize, q as isize]).collect();
        let x = self.pad(&amounts, PadMode::Constant(0.0))?;
        // One strided view per kernel tap (row-major over the taps, as the weight holds them).
        let taps: usize = ks.iter().product();
        let views = (0..taps)
            .map(|t| {
                let mut v = x.clone();
                let mut rest = t;
                for i in (0..d).rev() {
                    let at = rest % ks[i] * dil[i];
                    rest /= ks[i];
                    v = v.slice((2 + i) as isize, at, at + (out[i] - 1) * stride[i] + 1, stride[i])?;
                }
                Ok(v)
            })
            .collect::<Result<Vec<_>>>()?;
        // The stacked taps (im2col) are the largest buffer: check it can exist.
        crate::alloc_check::check_output(
            OP,
            &[&[n, c, taps][..], &out[..]].concat(),
            self.dtype(),
            self.device(),
        )?;
        let l: usize = out.iter().product();
        let cols = Tensor::stack(&views, 2)?.reshape(&[n, g, c / g * taps, l])?;
        let w = weight.reshape(&[g, o / g, c / g * taps])?;
        let mut shape = vec![n, o];
        shape.extend(&out);
        let y = w.matmul(&cols)?.reshape(&shape)?;
        match bias {
            Some(b) => {
                let mut bs = vec![o];
                bs.resize(d + 1, 1);
                y.add(&b.reshape(&bs)?)
            }
            None => Ok(y),
        }
    }
}

fn check(
    x: &Tensor,
    d: usize,
    w: &Tensor,
    bias: Option<&Tensor>,
    g: usize,
    stride: &[usize],
    dil: &[usize],
) -> Result<()> {
    for t in std::iter::once(w).chain(bias) {
        x.check_same_device(t, OP)?;
        if t.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch { op: OP, lhs: x.dtype(), rhs: t.dtype() });
        }
    }
    if !x.dtype().is_float() {
        return Err(Error::DTypeNotSupported { op: OP, got: x.dtype(), expected: "a floating dtype" });
    }
    if x.rank() != d + 2 || w.rank() != d + 2 {
        return Err(Error::bad_shape(
            OP,
            format!("conv{d}d needs input [N, C, {d} dims] or [C, {d} dims] and weight [O, C / groups, {d} dims], got {:?} and {:?}", x.shape(), w.shape()),
        ));
    }
    let (c, o) = (x.shape()[1], w.shape()[0]);
    if g == 0 || !c.is_multiple_of(g) || !o.is_multiple_of(g) || w.shape()[1] * g != c {
        return Err(Error::bad_shape(
            OP,
            format!("{g} groups: input channels {c} and output channels {o} must divide, and the weight {:?} must take {c} / {g} channels", w.shape()),
        ));
    }
    if w.shape()[2..].contains(&0) || stride.contains(&0) || dil.contains(&0) {
        return Err(Error::invalid(OP, "kernel sizes, strides and dilations must be positive"));
    }
    if let Some(b) = bias {
        if b.shape() != [o] {
            return Err(Error::ShapeMismatch { op: OP, lhs: b.shape().to_vec(), rhs: vec![o] });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Conv;
    use crate::{DType, Device, Tensor};

    /// Direct convolution in f64 over 2 spatial dims (1-D runs as H = 1).
    fn naive2(x: &Tensor, w: &Tensor, b: Option<&Tensor>, p: &Conv) -> (Vec<usize>, Vec<f64>) {
        let (xv, wv) = (x.to_f64_vec().unwrap(), w.to_f64_vec().unwrap());
        let (n, c, h, wd) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
        let (o, cg, kh, kw) = (w.shape()[0], w.shape()[1], w.shape()[2], w.shape()[3]);
        let two = |v: &Vec<usize>| if v.len() == 1 { [v[0], v[0]] } else { [v[0], v[1]] };
        let (s, pd, dl) = (two(&p.stride), two(&p.padding), two(&p.dilation));
        let ho = (h + 2 * pd[0] - dl[0] * (kh - 1) - 1) / s[0] + 1;
        let wo = (wd + 2 * pd[1] - dl[1] * (kw - 1) - 1) / s[1] + 1;
        let og = o / p.groups;
        let bv = b.map(|b| b.to_f64_vec().unwrap());
        let mut out = vec![0.0; n * o * ho * wo];
        for (ni, oc, i, j) in (0..n).flat_map(|a| {
            (0..o).flat_map(move |b| (0..ho).flat_map(move |i| (0..wo).map(move |j| (a, b, i, j))))
        }) {
            let grp = oc / og;
            let mut acc = bv.as_ref().map_or(0.0, |b| b[oc]);
            for (ci, a, bb) in
                (0..cg).flat_map(|ci| (0..kh).flat_map(move |a| (0..kw).map(move |bb| (ci, a, bb))))
            {
                let (y, xx) = (
                    (i * s[0] + a * dl[0]) as isize - pd[0] as isize,
                    (j * s[1] + bb * dl[1]) as isize - pd[1] as isize,
                );
                if y < 0 || xx < 0 || y >= h as isize || xx >= wd as isize {
                    continue;
                }
                let ch = grp * cg + ci;
                acc += xv[((ni * c + ch) * h + y as usize) * wd + xx as usize]
                    * wv[((oc * cg + ci) * kh + a) * kw + bb];
            }
            out[((ni * o + oc) * ho + i) * wo + j] = acc;
        }
        (vec![n, o, ho, wo], out)
    }

    fn close(got: &Tensor, shape: &[usize], want: &[f64]) {
        assert_eq!(got.shape(), shape);
        for (i, (a, b)) in got.to_f64_vec().unwrap().iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-9 * (1.0 + b.abs()), "element {i}: {a} vs {b}");
        }
    }

    #[test]
    fn conv2d_and_conv1d_match_direct_convolution() {
        let r = |s: &[usize], seed| Tensor::randn(s, seed, DType::F64, Device::Cpu).unwrap();
        let cases = [
            ([2, 3, 7, 9], [4, 3, 3, 3], Conv { padding: vec![1], ..Conv::default() }),
            (
                [1, 4, 8, 5],
                [6, 2, 3, 2],
                Conv { stride: vec![2, 1], padding: vec![0, 1], dilation: vec![1], groups: 2 },
            ),
            (
                [2, 2, 9, 9],
                [3, 2, 2, 3],
                Conv { stride: vec![3], padding: vec![2], dilation: vec![2, 1], groups: 1 },
            ),
        ];
        for (k, (xs, ws, p)) in cases.into_iter().enumerate() {
            let (x, w, b) = (r(&xs, 3 * k as u64), r(&ws, 3 * k as u64 + 1), r(&[ws[0]], 3 * k as u64 + 2));
            let (shape, want) = naive2(&x, &w, Some(&b), &p);
            close(&x.conv2d(&w, Some(&b), &p).unwrap(), &shape, &want);
            // The same as 1-D along W for H = 1 rows (one kernel row).
            let (x1, w1) = (x.narrow(2, 0, 1).unwrap(), w.narrow(2, 0, 1).unwrap());
            let p1 = Conv {
                stride: vec![*p.stride.last().unwrap()],
                padding: vec![*p.padding.last().unwrap()],
                dilation: vec![*p.dilation.last().unwrap()],
                groups: p.groups,
            };
            let p2 = Conv {
                stride: vec![1, p1.stride[0]],
                padding: vec![0, p1.padding[0]],
                dilation: vec![1, p1.dilation[0]],
                groups: p.groups,
            };
            let (shape, want) = naive2(&x1, &w1, None, &p2);
            let y = x1.squeeze(2).unwrap().conv1d(&w1.squeeze(2).unwrap(), None, &p1).unwrap();
            close(&y.unsqueeze(2).unwrap(), &shape, &want);
        }
    }

    #[test]
    fn conv3d_with_one_frame_is_conv2d_and_unbatched_input_works() {
        let r = |s: &[usize], seed| Tensor::randn(s, seed, DType::F32, Device::Cpu).unwrap();
        let (x, w) = (r(&[2, 3, 1, 6, 5], 1), r(&[4, 3, 1, 3, 3], 2));
        let p = Conv { padding: vec![0, 1, 1], ..Conv::default() };
        let y3 = x.conv3d(&w, None, &p).unwrap();
        let p2 = Conv { padding: vec![1], ..Conv::default() };
        let y2 = x.squeeze(2).unwrap().conv2d(&w.squeeze(2).unwrap(), None, &p2).unwrap();
        assert_eq!(y3.squeeze(2).unwrap().to_f64_vec().unwrap(), y2.to_f64_vec().unwrap());
        let one = x.narrow(0, 1, 1).unwrap().squeeze(0).unwrap();
        let y = one.conv3d(&w, None, &p).unwrap();
        assert_eq!(y.shape(), &[4, 1, 6, 5]);
        assert_eq!(y.to_f64_vec().unwrap(), y3.narrow(0, 1, 1).unwrap().to_f64_vec().unwrap());
    }

    #[test]
    fn bad_convolutions_are_refused_with_reasons() {
        let r = |s: &[usize]| Tensor::randn(s, 1, DType::F32, Device::Cpu).unwrap();
        let x = r(&[1, 4, 5, 5]);
        let msg = |y: crate::Result<Tensor>| y.expect_err("must be refused").to_string();
        assert!(msg(x.conv2d(&r(&[2, 3, 3, 3]), None, &Conv::default())).contains("groups"));
        assert!(
            msg(x.conv2d(&r(&[3, 2, 3, 3]), None, &Conv { groups: 2, ..Conv::default() })).contains("groups")
        );
        assert!(msg(x.conv2d(&r(&[2, 4, 6, 3]), None, &Conv::default())).contains("does not fit"));
        assert!(msg(x.conv2d(&r(&[2, 4, 3, 3]), None, &Conv { stride: vec![1, 1, 1], ..Conv::default() }))
            .contains("1 or 2 values"));
        assert!(msg(x.conv2d(&r(&[2, 4, 3, 3]), None, &Conv { stride: vec![0], ..Conv::default() }))
            .contains("positive"));
        assert!(msg(x.conv3d(&r(&[2, 4, 3, 3]), None, &Conv::default())).contains("conv3d"));
        assert!(x.conv2d(&r(&[2, 4, 3, 3]), Some(&r(&[3])), &Conv::default()).is_err());
        assert!(x.conv2d(&r(&[2, 4, 3, 3]).to_dtype(DType::F64).unwrap(), None, &Conv::default()).is_err());
    }
}
