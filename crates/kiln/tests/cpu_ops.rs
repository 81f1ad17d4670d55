//! CPU semantics of the Foundation ops against hand-checked or f64 results. The PyTorch
//! fixture cases run in kiln-bench's tests; GPU parity runs in `gpu_parity.rs`.

use kiln::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, CPU).unwrap()
}

fn vals(x: &Tensor) -> Vec<f64> {
    x.to_f64_vec().unwrap()
}

#[test]
fn views_share_storage_and_index_correctly() {
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32, CPU).unwrap().reshape(&[2, 3, 4]).unwrap();
    let p = x.permute(&[2, 0, 1]).unwrap();
    assert_eq!(p.shape(), &[4, 2, 3]);
    assert!(!p.is_contiguous());
    assert_eq!(vals(&p.contiguous().unwrap())[..4], [0.0, 4.0, 8.0, 12.0]);
    let n = x.narrow(2, 1, 2).unwrap();
    assert_eq!(vals(&n)[..4], [1.0, 2.0, 5.0, 6.0]);
    let s = x.slice(2, 0, 4, 3).unwrap();
    assert_eq!(vals(&s), [0.0, 3.0, 4.0, 7.0, 8.0, 11.0, 12.0, 15.0, 16.0, 19.0, 20.0, 23.0]);
    let e = t(&[1.0, 2.0, 3.0], &[3, 1]).expand(&[3, 2]).unwrap();
    assert_eq!(vals(&e), [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    assert_eq!(x.unsqueeze(0).unwrap().shape(), &[1, 2, 3, 4]);
    assert_eq!(x.unsqueeze(-1).unwrap().shape(), &[2, 3, 4, 1]);
    assert_eq!(x.unsqueeze(0).unwrap().squeeze(0).unwrap().shape(), &[2, 3, 4]);
    assert_eq!(x.transpose(0, 2).unwrap().reshape(&[24]).unwrap().to_vec::<f32>().unwrap()[1], 12.0);
    assert_eq!(x.reshape_infer(&[-1, 4]).unwrap().shape(), &[6, 4]);
    assert!(x.same_storage(&p));
}

#[test]
fn view_errors_are_typed() {
    let x = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    assert!(matches!(x.reshape(&[5]), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(x.t().unwrap().view(&[6]), Err(Error::BadShape { .. })));
    assert!(matches!(x.transpose(0, 2), Err(Error::DimOutOfRange { .. })));
    assert!(matches!(x.narrow(1, 2, 2), Err(Error::IndexOutOfRange { .. })));
    assert!(matches!(x.expand(&[4, 3]), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(x.permute(&[0, 0]), Err(Error::InvalidArgument { .. })));
    assert!(matches!(Tensor::from_vec(vec![1f32; 5], &[2, 3], CPU), Err(Error::BadShape { .. })));
    assert!(matches!(
        x.add(&Tensor::zeros(&[4], DType::F32, CPU).unwrap()),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(x.matmul(&x), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(
        x.matmul(&x.to_dtype(DType::F64).unwrap().t().unwrap()),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(x.to_dtype(DType::I32).unwrap().softmax(0), Err(Error::DTypeNotSupported { .. })));
    assert!(matches!(x.to_vec::<f64>(), Err(Error::DTypeMismatch { .. })));
}

#[test]
fn creation() {
    assert_eq!(vals(&Tensor::arange(1.0, 2.0, 0.25, DType::F32, CPU).unwrap()), [1.0, 1.25, 1.5, 1.75]);
    assert_eq!(vals(&Tensor::full(&[2], 7.5, DType::BF16, CPU).unwrap()), [7.5, 7.5]);
    assert_eq!(vals(&Tensor::ones(&[3], DType::I8, CPU).unwrap()), [1.0, 1.0, 1.0]);
    assert!(Tensor::arange(0.0, 1.0, 0.0, DType::F32, CPU).is_err());
    let a = Tensor::randn(&[1000], 3, DType::F32, CPU).unwrap();
    let b = Tensor::randn(&[1000], 3, DType::F32, CPU).unwrap();
    let c = Tensor::randn(&[1000], 4, DType::F32, CPU).unwrap();
    assert_eq!(vals(&a), vals(&b));
    assert_ne!(vals(&a), vals(&c));
    let u = vals(&Tensor::rand(&[1000], 1, DType::F64, CPU).unwrap());
    assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    assert!(Tensor::rand(&[2], 0, DType::I32, CPU).is_err());
}

#[test]
fn promotion_and_broadcasting() {
    let a = Tensor::from_slice(&[1i32, 2, 3], &[3, 1], CPU).unwrap();
    let b = t(&[0.5, 1.5], &[2]);
    let c = a.add(&b).unwrap();
    assert_eq!(c.dtype(), DType::F32);
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(vals(&c), [1.5, 2.5, 2.5, 3.5, 3.5, 4.5]);
    // Integer true division gives float32, as in PyTorch.
    let d = a.div(&a.add_scalar(1.0).unwrap()).unwrap();
    assert_eq!(d.dtype(), DType::F32);
    assert!((vals(&d)[0] - 0.5).abs() < 1e-7);
    // Python-style remainder takes the divisor's sign.
    let r = t(&[-3.0, 3.0], &[2]).remainder_scalar(2.0).unwrap();
    assert_eq!(vals(&r), [1.0, 1.0]);
    let ri = Tensor::from_slice(&[-7i64, 7], &[2], CPU).unwrap().remainder_scalar(-3.0).unwrap();
    assert_eq!(vals(&ri), [-1.0, -2.0]);
    let p = t(&[2.0, 3.0], &[2]).pow_scalar(2.0).unwrap();
    assert_eq!(vals(&p), [4.0, 9.0]);
    let m = t(&[1.0, f32::NAN], &[2]).maximum(&t(&[2.0, 0.0], &[2])).unwrap();
    assert_eq!(vals(&m)[0], 2.0);
    assert!(vals(&m)[1].is_nan());
}

#[test]
fn unsigned_comparisons_are_unsigned() {
    let a = Tensor::from_slice(&[u64::MAX, 1, 5], &[3], CPU).unwrap();
    let b = Tensor::from_slice(&[1u64, u64::MAX, 5], &[3], CPU).unwrap();
    assert_eq!(vals(&a.lt(&b).unwrap()), [0.0, 1.0, 0.0]);
    assert_eq!(vals(&a.ge(&b).unwrap()), [1.0, 0.0, 1.0]);
    assert_eq!(a.eq(&b).unwrap().dtype(), DType::Bool);
    // u64 arithmetic wraps exactly.
    assert_eq!(a.add(&b).unwrap().to_vec::<u64>().unwrap(), [0, 0, 10]);
}

#[test]
fn unary_functions_match_f64() {
    let xs = [-2.5f32, -0.3, 0.0, 0.7, 3.0];
    let x = t(&xs, &[5]);
    let check = |got: Tensor, f: fn(f64) -> f64| {
        for (g, &v) in vals(&got).iter().zip(&xs) {
            let want = f(v as f64) as f32 as f64;
            assert!(*g == want || (g - want).abs() <= 1e-6 * want.abs().max(1.0), "{g} vs {want}");
        }
    };
    check(x.exp().unwrap(), f64::exp);
    check(x.tanh().unwrap(), f64::tanh);
    check(x.sigmoid().unwrap(), |v| 1.0 / (1.0 + (-v).exp()));
    check(x.silu().unwrap(), |v| v / (1.0 + (-v).exp()));
    check(x.gelu().unwrap(), |v| {
        // erf(x/√2) from its series, independent of the library's erf
        let z = v / std::f64::consts::SQRT_2;
        let mut term = z;
        let mut s = z;
        for n in 1..60 {
            term *= -z * z / n as f64;
            s += term / (2 * n + 1) as f64;
        }
        0.5 * v * (1.0 + s * 2.0 / std::f64::consts::PI.sqrt())
    });
    check(x.abs().unwrap().log().unwrap(), |v| v.abs().ln());
    assert_eq!(Tensor::from_slice(&[3i32], &[1], CPU).unwrap().exp().unwrap().dtype(), DType::F32);
    assert_eq!(Tensor::from_slice(&[-3i32], &[1], CPU).unwrap().abs().unwrap().to_vec::<i32>().unwrap(), [3]);
}

#[test]
fn heaviside_and_frexp() {
    let h = t(&[-1.0, 0.0, 2.0], &[3]).heaviside(&t(&[0.5, 0.5, 0.5], &[3])).unwrap();
    assert_eq!(vals(&h), [0.0, 0.5, 1.0]);
    let (m, e) = t(&[8.0, 0.75, -3.0, 0.0], &[4]).frexp().unwrap();
    assert_eq!(vals(&m), [0.5, 0.75, -0.75, 0.0]);
    assert_eq!(e.to_vec::<i32>().unwrap(), [4, 0, 2, 0]);
}

#[test]
fn reductions() {
    let x = Tensor::arange(1.0, 7.0, 1.0, DType::F32, CPU).unwrap().reshape(&[2, 3]).unwrap();
    assert_eq!(vals(&x.sum(&[], false).unwrap()), [21.0]);
    assert_eq!(vals(&x.sum(&[0], false).unwrap()), [5.0, 7.0, 9.0]);
    assert_eq!(x.sum(&[1], true).unwrap().shape(), &[2, 1]);
    assert_eq!(vals(&x.mean(&[-1], false).unwrap()), [2.0, 5.0]);
    assert_eq!(vals(&x.prod(&[1], false).unwrap()), [6.0, 120.0]);
    assert_eq!(vals(&x.max(&[0], false).unwrap()), [4.0, 5.0, 6.0]);
    assert_eq!(vals(&x.min(&[], false).unwrap()), [1.0]);
    assert_eq!(x.argmax(Some(1), false).unwrap().to_vec::<i64>().unwrap(), [2, 2]);
    assert_eq!(x.argmin(None, false).unwrap().to_vec::<i64>().unwrap(), [0]);
    let (v, m) = x.var_mean(&[1], 1.0, false).unwrap();
    assert_eq!(vals(&v), [1.0, 1.0]);
    assert_eq!(vals(&m), [2.0, 5.0]);
    let (s, _) = x.std_mean(&[0, 1], 0.0, false).unwrap();
    assert!((vals(&s)[0] - (35.0f64 / 12.0).sqrt()).abs() < 1e-6);
    let i = Tensor::from_slice(&[1i8, 100, 100], &[3], CPU).unwrap();
    let si = i.sum(&[], false).unwrap();
    assert_eq!((si.dtype(), si.to_vec::<i64>().unwrap()), (DType::I64, vec![201]));
    assert!(i.mean(&[], false).is_err());
    assert!(x.sum(&[0, 0], false).is_err());
    assert!(Tensor::zeros(&[0, 3], DType::F32, CPU).unwrap().max(&[0], false).is_err());
    let nan = t(&[1.0, f32::NAN, 3.0], &[3]);
    assert!(vals(&nan.max(&[], false).unwrap())[0].is_nan());
    assert_eq!(nan.argmax(None, false).unwrap().to_vec::<i64>().unwrap(), [1]);
}

#[test]
fn index_ops() {
    let x = Tensor::arange(0.0, 12.0, 1.0, DType::F32, CPU).unwrap().reshape(&[3, 4]).unwrap();
    let idx = Tensor::from_slice(&[2i64, 0, -1], &[3], CPU).unwrap();
    assert_eq!(vals(&x.index_select(0, &idx).unwrap())[..4], [8.0, 9.0, 10.0, 11.0]);
    assert_eq!(vals(&x.index_select(1, &idx).unwrap())[..3], [2.0, 0.0, 3.0]);
    let g = Tensor::from_slice(&[3i64, 0, 1, 1], &[2, 2], CPU).unwrap();
    assert_eq!(vals(&x.gather(1, &g).unwrap()), [3.0, 0.0, 5.0, 5.0]);
    assert_eq!(vals(&x.t().unwrap().take(&g).unwrap()), [1.0, 0.0, 4.0, 4.0]);
    let y = x.copy().unwrap();
    y.put_(&Tensor::from_slice(&[0i64, 0], &[2], CPU).unwrap(), &t(&[1.0, 2.0], &[2]), true).unwrap();
    assert_eq!(vals(&y)[0], 3.0);
    assert_eq!(vals(&x)[0], 0.0, "copy() must not share storage");
    // index_copy_: columns 3 and 0 of a [3, 4] get the source's two columns; bad shapes,
    // out-of-range indices and float indices are errors.
    let z = x.copy().unwrap();
    let cols = Tensor::from_slice(&[-1i64, 0], &[2], CPU).unwrap();
    z.index_copy_(1, &cols, &t(&[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], &[3, 2])).unwrap();
    assert_eq!(vals(&z), [-2.0, 1.0, 2.0, -1.0, -4.0, 5.0, 6.0, -3.0, -6.0, 9.0, 10.0, -5.0]);
    assert!(matches!(z.index_copy_(1, &cols, &t(&[0.0; 4], &[2, 2])), Err(Error::BadShape { .. })));
    let far = Tensor::from_slice(&[4i64], &[1], CPU).unwrap();
    assert!(matches!(z.index_copy_(1, &far, &t(&[0.0; 3], &[3, 1])), Err(Error::IndexOutOfRange { .. })));
    assert!(z.index_copy_(1, &t(&[0.0], &[1]), &t(&[0.0; 3], &[3, 1])).is_err());
    let bad = Tensor::from_slice(&[12i64], &[1], CPU).unwrap();
    assert!(matches!(x.take(&bad), Err(Error::IndexOutOfRange { .. })));
    assert!(matches!(x.index_select(0, &t(&[0.0], &[1])), Err(Error::DTypeNotSupported { .. })));
    let c = Tensor::cat(&[x.clone(), x.narrow(0, 0, 1).unwrap()], 0).unwrap();
    assert_eq!(c.shape(), &[4, 4]);
    assert_eq!(vals(&c)[12..], [0.0, 1.0, 2.0, 3.0]);
    let s = Tensor::stack(&[x.clone(), x.clone()], 1).unwrap();
    assert_eq!(s.shape(), &[3, 2, 4]);
    let w = Tensor::where_cond(&x.gt_scalar(5.0).unwrap(), &x, &x.neg().unwrap()).unwrap();
    assert_eq!(vals(&w)[5..8], [-5.0, 6.0, 7.0]);
}

#[test]
fn matmul_ranks_and_broadcast() {
    let a = Tensor::randn(&[2, 1, 3, 5], 1, DType::F64, CPU).unwrap();
    let b = Tensor::randn(&[4, 5, 2], 2, DType::F64, CPU).unwrap();
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.shape(), &[2, 4, 3, 2]);
    let (av, bv, cv) = (vals(&a), vals(&b), vals(&c));
    for (i, j, q, r) in [(1, 3, 2, 1), (0, 0, 0, 0), (1, 2, 1, 0)] {
        let want: f64 = (0..5).map(|k| av[i * 15 + q * 5 + k] * bv[j * 10 + k * 2 + r]).sum();
        assert!((cv[((i * 4 + j) * 3 + q) * 2 + r] - want).abs() < 1e-12);
    }
    let v = Tensor::randn(&[5], 3, DType::F32, CPU).unwrap();
    assert_eq!(v.matmul(&v).unwrap().shape(), &[] as &[usize]);
    assert_eq!(
        b.to_dtype(DType::F32)
            .unwrap()
            .matmul(&Tensor::randn(&[2], 4, DType::F32, CPU).unwrap())
            .unwrap()
            .shape(),
        &[4, 5]
    );
    let m = Tensor::randn(&[3, 5], 5, DType::BF16, CPU).unwrap();
    let w = Tensor::randn(&[7, 5], 6, DType::BF16, CPU).unwrap();
    let y = m.linear(&w, Some(&Tensor::ones(&[7], DType::BF16, CPU).unwrap())).unwrap();
    let y32 = m.to_dtype(DType::F32).unwrap().matmul(&w.to_dtype(DType::F32).unwrap().t().unwrap()).unwrap();
    for (a, b) in vals(&y).iter().zip(vals(&y32)) {
        assert!((a - (b + 1.0)).abs() <= 0.02 * (b + 1.0).abs() + 0.02);
    }
}

#[test]
fn softmax_and_rms_norm() {
    let x = t(&[1.0, 2.0, 3.0, f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY], &[2, 3]);
    let s = vals(&x.softmax(-1).unwrap());
    let z = 1f64.exp() + 2f64.exp() + 3f64.exp();
    assert!((s[2] - 3f64.exp() / z).abs() < 1e-7);
    assert!(s[3].is_nan(), "an all -inf row gives NaN, as in PyTorch");
    let ls = vals(&x.log_softmax(1).unwrap());
    assert!((ls[0] - (1.0 - z.ln())).abs() < 1e-6);
    let col = vals(&t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]).softmax(0).unwrap());
    assert!((col[0] + col[2] - 1.0).abs() < 1e-7);
    let r = t(&[3.0, 4.0], &[1, 2]).rms_norm(&[2], Some(&t(&[1.0, 2.0], &[2])), Some(0.0)).unwrap();
    let inv = 1.0 / (12.5f64).sqrt();
    assert!((vals(&r)[1] - 8.0 * inv).abs() < 1e-6);
    assert!(t(&[1.0], &[1]).rms_norm(&[2], None, None).is_err());
    // add_rms_norm: [1, 2] + [2, 2] = [3, 4], normalised as above; shapes and dtypes must match.
    let (y, sum) = t(&[1.0, 2.0], &[1, 2])
        .add_rms_norm(&t(&[2.0, 2.0], &[1, 2]), &[2], Some(&t(&[1.0, 2.0], &[2])), Some(0.0))
        .unwrap();
    assert_eq!(vals(&sum), [3.0, 4.0]);
    assert!((vals(&y)[1] - 8.0 * inv).abs() < 1e-6);
    assert!(t(&[1.0, 2.0], &[1, 2]).add_rms_norm(&t(&[1.0], &[1]), &[2], None, None).is_err());
    let f64s = Tensor::from_slice(&[1.0f64, 2.0], &[1, 2], CPU).unwrap();
    assert!(matches!(
        t(&[1.0, 2.0], &[1, 2]).add_rms_norm(&f64s, &[2], None, None),
        Err(Error::DTypeMismatch { .. })
    ));
}

#[test]
fn casts_round_like_pytorch() {
    let x = t(&[1.0, 448.0, 500.0, -0.001953125, 1e-10, f32::NAN], &[6]);
    let b = x.to_dtype(DType::F8E4M3).unwrap().to_raw_bytes().unwrap();
    assert_eq!(b, [0x38, 0x7E, 0x7F, 0x81, 0x00, 0x7F]);
    let i = t(&[-1.7, 2.9, 300.0], &[3]).to_dtype(DType::I32).unwrap();
    assert_eq!(i.to_vec::<i32>().unwrap(), [-1, 2, 300]);
    let big = Tensor::from_slice(&[u64::MAX], &[1], CPU).unwrap().to_dtype(DType::I64).unwrap();
    assert_eq!(big.to_vec::<i64>().unwrap(), [-1]);
    let bf = t(&[1.0 + 1.0 / 256.0], &[1]).to_dtype(DType::BF16).unwrap();
    assert_eq!(bf.to_raw_bytes().unwrap(), 0x3F80u16.to_le_bytes());
    let c = t(&[1.0, 2.0], &[2]).to_dtype(DType::C64).unwrap();
    assert_eq!(c.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), [1.0, 2.0]);
}

#[test]
fn topk_sorted_with_ties_and_nan() {
    let x = t(&[1.0, 5.0, 3.0, 5.0, f32::NAN, -2.0], &[1, 6]);
    let (v, i) = x.topk(3, -1, true).unwrap();
    assert!(vals(&v)[0].is_nan());
    assert_eq!(vals(&v)[1..], [5.0, 5.0]);
    assert_eq!(i.to_vec::<i64>().unwrap(), [4, 1, 3], "ties keep the lower index first");
    let (v, i) = x.topk(2, 1, false).unwrap();
    assert_eq!((vals(&v), i.to_vec::<i64>().unwrap()), (vec![-2.0, 1.0], vec![5, 0]));
    let (v, _) = t(&[1.0, 4.0, 2.0, 3.0], &[2, 2]).topk(1, 0, true).unwrap();
    assert_eq!(vals(&v), [2.0, 4.0]);
    assert!(x.topk(7, -1, true).is_err());
}

#[test]
fn frozen_storage_refuses_in_place_writes() {
    let x = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let view = x.t().unwrap();
    let other = x.copy().unwrap(); // storage of its own
    assert!(!x.is_frozen());
    x.freeze().unwrap();
    assert!(x.is_frozen() && view.is_frozen(), "views share the flag");
    assert!(!other.is_frozen());
    let refused =
        |r: kiln::Result<()>| matches!(r, Err(Error::InvalidArgument { msg, .. }) if msg.contains("frozen"));
    assert!(refused(view.copy_(&t(&[9.0, 9.0, 9.0, 9.0], &[2, 2]))));
    let idx = Tensor::from_slice(&[0i64], &[1], CPU).unwrap();
    assert!(refused(x.put_(&idx, &t(&[5.0], &[1]), false)));
    assert_eq!(vals(&x), [1.0, 2.0, 3.0, 4.0], "nothing was written");
    // Reads, views and new results are unaffected; the copy stays writable.
    assert_eq!(vals(&x.add(&x).unwrap()), [2.0, 4.0, 6.0, 8.0]);
    other.copy_(&t(&[9.0, 8.0, 7.0, 6.0], &[2, 2])).unwrap();
    assert_eq!(vals(&other), [9.0, 8.0, 7.0, 6.0]);
}

/// rotary_embedding against the composed formula it replaces (narrow, cat, mul, add in
/// f64): full and partial tables, a transposed view, host and device-tensor starts; bad
/// tables and positions past them are errors.
#[test]
fn rotary_embedding() {
    use kiln::RotaryStart;
    let (t_len, d, p) = (3, 6, 9);
    let x = Tensor::randn(&[2, t_len, 4, d], 1, DType::F64, CPU).unwrap().transpose(1, 2).unwrap();
    for r in [6, 4, 2] {
        let cos = Tensor::randn(&[p, r], 2, DType::F64, CPU).unwrap();
        let sin = Tensor::randn(&[p, r], 3, DType::F64, CPU).unwrap();
        let start = 5;
        let (c, s) = (cos.narrow(0, start, t_len).unwrap(), sin.narrow(0, start, t_len).unwrap());
        let turned = x.narrow(-1, 0, r).unwrap();
        let half =
            [turned.narrow(-1, r / 2, r / 2).unwrap().neg().unwrap(), turned.narrow(-1, 0, r / 2).unwrap()];
        let rot = turned.mul(&c).unwrap().add(&Tensor::cat(&half, -1).unwrap().mul(&s).unwrap()).unwrap();
        let want = Tensor::cat(&[rot, x.narrow(-1, r, d - r).unwrap()], -1).unwrap();
        let at = x.rotary_embedding(&cos, &sin, RotaryStart::At(start)).unwrap();
        let pos = Tensor::from_slice(&[start as i64], &[1], CPU).unwrap();
        let dev = x.rotary_embedding(&cos, &sin, RotaryStart::Device(&pos)).unwrap();
        for got in [at, dev] {
            assert_eq!(got.shape(), &[2, 4, t_len, d]);
            let worst = got.sub(&want).unwrap().abs().unwrap().max(&[], false).unwrap().item().unwrap();
            assert!(worst < 1e-12, "r {r}: max |Δ| {worst}");
        }
        assert!(matches!(
            x.rotary_embedding(&cos, &sin, RotaryStart::At(p - t_len + 1)),
            Err(Error::BadShape { .. })
        ));
    }
    let odd = Tensor::randn(&[p, 3], 2, DType::F64, CPU).unwrap();
    assert!(matches!(x.rotary_embedding(&odd, &odd, RotaryStart::At(0)), Err(Error::BadShape { .. })));
    let wide = Tensor::randn(&[p, 8], 2, DType::F64, CPU).unwrap();
    assert!(matches!(x.rotary_embedding(&wide, &wide, RotaryStart::At(0)), Err(Error::BadShape { .. })));
    let f32s = Tensor::randn(&[p, 6], 2, DType::F32, CPU).unwrap();
    assert!(matches!(x.rotary_embedding(&f32s, &f32s, RotaryStart::At(0)), Err(Error::DTypeMismatch { .. })));
    let cos = Tensor::randn(&[p, 6], 2, DType::F64, CPU).unwrap();
    let float_start = t(&[0.0], &[1]);
    assert!(x.rotary_embedding(&cos, &cos, RotaryStart::Device(&float_start)).is_err());
}

/// rms_norm_rotary is the two ops: heads below the split normed by the first weight, the
/// rest by the second, then turned; bad weights and splits are errors.
#[test]
fn rms_norm_rotary() {
    use kiln::{HeadNorm, RotaryStart};
    let (t_len, d, p) = (3, 8, 9);
    let x = Tensor::randn(&[2, t_len, 4, d], 1, DType::F64, CPU).unwrap().transpose(1, 2).unwrap();
    let cos = Tensor::randn(&[p, d], 2, DType::F64, CPU).unwrap();
    let sin = Tensor::randn(&[p, d], 3, DType::F64, CPU).unwrap();
    let (w0, w1) =
        (Tensor::randn(&[d], 4, DType::F64, CPU).unwrap(), Tensor::randn(&[d], 5, DType::F64, CPU).unwrap());
    let norm = HeadNorm { weights: [&w0, &w1], split: 3, eps: 1e-6 };
    let got = x.rms_norm_rotary(norm, &cos, &sin, RotaryStart::At(2)).unwrap();
    for (heads, w) in [(0..3, &w0), (3..4, &w1)] {
        let part = x.narrow(1, heads.start, heads.len()).unwrap();
        let want = part
            .rms_norm(&[d], Some(w), Some(1e-6))
            .and_then(|n| n.rotary_embedding(&cos, &sin, RotaryStart::At(2)))
            .unwrap();
        let worst = got.narrow(1, heads.start, heads.len()).unwrap().sub(&want).unwrap().abs().unwrap();
        let worst = worst.max(&[], false).unwrap().item().unwrap();
        assert!(worst < 1e-12, "heads {heads:?}: max |Δ| {worst}");
    }
    let short = Tensor::randn(&[d - 1], 4, DType::F64, CPU).unwrap();
    let bad = [HeadNorm { split: 5, ..norm }, HeadNorm { weights: [&w0, &short], ..norm }];
    for n in bad {
        assert!(matches!(x.rms_norm_rotary(n, &cos, &sin, RotaryStart::At(0)), Err(Error::BadShape { .. })));
    }
}

/// gated_delta_step refuses inputs that do not fit its state: a short qkv row, key heads
/// that do not divide the value heads, a state of another dtype, a strided state (it is
/// updated in place).
#[test]
fn gated_delta_step_checks_shapes() {
    use kiln::GatedDelta;
    let (batch, hk, hv, dk, dv) = (1, 2, 4, 4, 3);
    let r = |shape: &[usize]| Tensor::randn(shape, 1, DType::F32, CPU).unwrap();
    let (qkv, b, a, z) =
        (r(&[batch, 2 * hk * dk + hv * dv]), r(&[batch, hv]), r(&[batch, hv]), r(&[batch, hv * dv]));
    let (state, n, w) = (r(&[batch, hv, dk, dv]), r(&[hv]), r(&[dv]));
    let p = GatedDelta { neg_a: &n, dt_bias: &n, norm: &w, eps: 1e-6, key_heads: hk };
    let y = qkv.gated_delta_step(&b, &a, &z, &state, p).unwrap();
    assert_eq!(y.shape(), [batch, hv * dv]);
    let strided = r(&[batch, hv, dv, dk]).transpose(2, 3).unwrap();
    assert!(matches!(qkv.gated_delta_step(&b, &a, &z, &strided, p), Err(Error::InvalidArgument { .. })));
    let short = r(&[batch, 2 * hk * dk + hv * dv - 1]);
    assert!(matches!(short.gated_delta_step(&b, &a, &z, &state, p), Err(Error::BadShape { .. })));
    let three = GatedDelta { key_heads: 3, ..p };
    assert!(matches!(qkv.gated_delta_step(&b, &a, &z, &state, three), Err(Error::BadShape { .. })));
    let f64_state = state.to_dtype(DType::F64).unwrap();
    assert!(matches!(qkv.gated_delta_step(&b, &a, &z, &f64_state, p), Err(Error::DTypeMismatch { .. })));
}
