//! Every Foundation op on the GPU against the CPU backend: casts, elementwise,
//! reductions, softmax / rms_norm / group_norm, matmul, attention, padding, convolution, indexing,
//! creation — odd sizes, empty, non-contiguous, broadcast, -inf / NaN. See `common/mod.rs` for the harness.

use kiln::testing::{both, e, same, tol_of, Case, Ctx};
use kiln::{BinaryOp, Conv, DType, Device, PadMode, ReduceOp, Sdpa, Tensor, UnaryOp};
use std::process::ExitCode;

const CPU: Device = Device::Cpu;

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];
const INTS: [DType; 5] = [DType::I32, DType::I64, DType::U8, DType::U64, DType::I8];

fn casts(cx: &mut Ctx) -> std::result::Result<(), String> {
    let real = DType::ALL.into_iter().filter(|d| !d.is_complex()).collect::<Vec<_>>();
    for &from in &real {
        // Values past the float8 range (saturation / NaN) and in its subnormals.
        let (g, c) = cx.pair(&[37, 29], from, if from.is_float() { 300.0 } else { 50.0 }).map_err(e)?;
        for &to in &real {
            both(&format!("cast {from}->{to}"), &g, &c, 0.0, |x| x.to_dtype(to))?;
            both(&format!("cast T {from}->{to}"), &g, &c, 0.0, |x| x.t()?.to_dtype(to))?;
        }
    }
    let (g, c) = cx.pair(&[1000], DType::F32, 1e-3).map_err(e)?;
    both("cast tiny->f8", &g, &c, 0.0, |x| x.to_dtype(DType::F8E4M3))
}

fn binary(cx: &mut Ctx) -> std::result::Result<(), String> {
    use BinaryOp::*;
    let ops = BinaryOp::ALL;
    for dt in FLOATS.iter().chain(&INTS).copied() {
        let (a, ac) = cx.pair(&[7, 1, 33], dt, 4.0).map_err(e)?;
        let (b, bc) = cx.pair(&[5, 33], dt, 4.0).map_err(e)?;
        let (b, bc) = (
            b.abs().map_err(e)?.add_scalar(1.0).map_err(e)?,
            bc.abs().map_err(e)?.add_scalar(1.0).map_err(e)?,
        );
        for &op in ops {
            if op == Pow && !dt.is_float() {
                continue; // integer powers overflow differently in i128 (CPU) and i64 (GPU)
            }
            let r = (a.binary(op, &b).map_err(e)?, ac.binary(op, &bc).map_err(e)?);
            // Integer inputs of a float op (true division, logaddexp) give f32, computed in
            // f32 on the GPU and in f64 on the CPU: f32's tolerance.
            let base = if r.0.dtype().is_float() && !dt.is_float() { DType::F32 } else { dt };
            // Recurrences (pow, Laguerre) round differently in f32 (GPU) and f64 (CPU).
            let t = match op {
                Pow => tol_of(base).max(1e-5) * 10.0,
                LaguerrePolynomialL => tol_of(base).max(1e-3),
                _ => tol_of(base),
            };
            same(&format!("{op:?} {dt} broadcast"), &r.0, &r.1, t)?;
            // Non-contiguous operands, both the strided and the contiguous kernel.
            let r = (
                a.transpose(0, 2)
                    .map_err(e)?
                    .binary(op, &b.t().map_err(e)?.unsqueeze(-1).map_err(e)?)
                    .map_err(e)?,
                ac.transpose(0, 2)
                    .map_err(e)?
                    .binary(op, &bc.t().map_err(e)?.unsqueeze(-1).map_err(e)?)
                    .map_err(e)?,
            );
            same(&format!("{op:?} {dt} transposed"), &r.0, &r.1, t)?;
            let (c2, cc2) = cx.pair(&[1001], dt, 4.0).map_err(e)?;
            let (d2, dc2) = cx.pair(&[1001], dt, 4.0).map_err(e)?;
            let (d2, dc2) = (
                d2.abs().map_err(e)?.add_scalar(1.0).map_err(e)?,
                dc2.abs().map_err(e)?.add_scalar(1.0).map_err(e)?,
            );
            same(
                &format!("{op:?} {dt} contiguous"),
                &c2.binary(op, &d2).map_err(e)?,
                &cc2.binary(op, &dc2).map_err(e)?,
                t,
            )?;
        }
    }
    // Special values.
    let v = [f32::NEG_INFINITY, -1.0, 0.0, f32::NAN, f32::INFINITY, 2.5];
    let a = Tensor::from_slice(&v, &[6, 1], CPU).map_err(e)?;
    let b = Tensor::from_slice(&v, &[1, 6], CPU).map_err(e)?;
    let (ag, bg) = (a.to_device(cx.dev).map_err(e)?, b.to_device(cx.dev).map_err(e)?);
    for &op in ops {
        same(
            &format!("{op:?} inf/nan"),
            &ag.binary(op, &bg).map_err(e)?,
            &a.binary(op, &b).map_err(e)?,
            1e-6,
        )?;
    }
    Ok(())
}

fn unary(cx: &mut Ctx) -> std::result::Result<(), String> {
    use UnaryOp::*;
    let ops = UnaryOp::ALL;
    for dt in FLOATS.iter().chain(&INTS[..2]).copied() {
        let (g, c) = cx.pair(&[19, 45], dt, 3.0).map_err(e)?;
        for &op in ops {
            let needs_pos = matches!(op, Log | Sqrt | Rsqrt);
            let (gi, ci) = if needs_pos {
                (
                    g.abs().map_err(e)?.add_scalar(0.5).map_err(e)?,
                    c.abs().map_err(e)?.add_scalar(0.5).map_err(e)?,
                )
            } else {
                (g.clone(), c.clone())
            };
            let t = if dt.is_float() { tol_of(dt) * 4.0 } else { 2e-6 };
            both(&format!("{op:?} {dt}"), &gi.t().map_err(e)?, &ci.t().map_err(e)?, t, |x| x.unary(op))?;
        }
    }
    Ok(())
}

fn where_frexp(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in [DType::F32, DType::BF16, DType::I64] {
        let (a, ac) = cx.pair(&[3, 1, 17], dt, 5.0).map_err(e)?;
        let (b, bc) = cx.pair(&[4, 17], dt, 5.0).map_err(e)?;
        let (m, mc) = cx.pair(&[4, 1], DType::F32, 1.0).map_err(e)?;
        let (mg, mcpu) = (m.gt_scalar(0.0).map_err(e)?, mc.gt_scalar(0.0).map_err(e)?);
        same(
            &format!("where {dt}"),
            &Tensor::where_cond(&mg, &a, &b).map_err(e)?,
            &Tensor::where_cond(&mcpu, &ac, &bc).map_err(e)?,
            0.0,
        )?;
    }
    for dt in FLOATS {
        let (g, c) = cx.pair(&[77], dt, 1e3).map_err(e)?;
        let (gm, ge) = g.frexp().map_err(e)?;
        let (cm, ce) = c.frexp().map_err(e)?;
        same(&format!("frexp m {dt}"), &gm, &cm, 0.0)?;
        same(&format!("frexp e {dt}"), &ge, &ce, 0.0)?;
    }
    Ok(())
}

fn reductions(cx: &mut Ctx) -> std::result::Result<(), String> {
    use ReduceOp::*;
    for dt in [DType::F32, DType::BF16, DType::F64, DType::I32, DType::U8] {
        let (g, c) = cx.pair(&[3, 1001, 5], dt, 2.0).map_err(e)?;
        for op in [Sum, Prod, Mean, Max, Min, ArgMax, ArgMin] {
            if op == Mean && !dt.is_float() {
                continue;
            }
            for dims in [&[1isize][..], &[0, 2], &[], &[-1]] {
                let (gi, ci) = if op == Prod {
                    (g.narrow(1, 0, 7).map_err(e)?, c.narrow(1, 0, 7).map_err(e)?)
                } else {
                    (g.clone(), c.clone())
                };
                let t = if dt.is_float() { tol_of(dt).max(1e-5) * 8.0 } else { 0.0 };
                both(&format!("{op:?} {dt} {dims:?}"), &gi, &ci, t, |x| x.reduce(op, dims, true))?;
            }
        }
        if dt.is_float() {
            for corr in [0.0, 1.0] {
                let (gv, gm) = g.var_mean(&[1], corr, false).map_err(e)?;
                let (cv, cm) = c.var_mean(&[1], corr, false).map_err(e)?;
                same(&format!("var {dt}"), &gv, &cv, tol_of(dt).max(1e-5) * 8.0)?;
                same(&format!("mean {dt}"), &gm, &cm, tol_of(dt).max(1e-5) * 8.0)?;
            }
        }
    }
    let (g, c) = cx.pair(&[0, 4], DType::F32, 1.0).map_err(e)?;
    both("sum of empty", &g, &c, 0.0, |x| x.sum(&[0], false))
}

fn softmax_norm(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in FLOATS {
        let (g, c) = cx.pair(&[5, 1337], dt, 8.0).map_err(e)?;
        let t = tol_of(dt).max(1e-6) * 4.0;
        both(&format!("softmax {dt}"), &g, &c, t, |x| x.softmax(-1))?;
        both(&format!("log_softmax {dt}"), &g, &c, t, |x| x.log_softmax(-1))?;
        both(&format!("softmax dim0 {dt}"), &g, &c, t, |x| x.softmax(0))?;
        let (w, wc) = cx.pair(&[1337], dt, 1.0).map_err(e)?;
        let (gr, cr) = (
            g.rms_norm(&[1337], Some(&w), Some(1e-6)).map_err(e)?,
            c.rms_norm(&[1337], Some(&wc), Some(1e-6)).map_err(e)?,
        );
        same(&format!("rms_norm {dt}"), &gr, &cr, t)?;
        // The fused residual add + norm against the CPU's two ops, on a transposed residual.
        let (r, rc) = cx.pair(&[1337, 5], dt, 8.0).map_err(e)?;
        let (r, rc) = (r.t().map_err(e)?, rc.t().map_err(e)?);
        let (gy, gs) = g.add_rms_norm(&r, &[1337], Some(&w), Some(1e-6)).map_err(e)?;
        let (cy, cs) = c.add_rms_norm(&rc, &[1337], Some(&wc), Some(1e-6)).map_err(e)?;
        same(&format!("add_rms_norm sum {dt}"), &gs, &cs, tol_of(dt))?;
        same(&format!("add_rms_norm {dt}"), &gy, &cy, t)?;
        let (x, xc) = cx.pair(&[3, 12, 5, 7], dt, 3.0).map_err(e)?;
        let (w, wc) = cx.pair(&[12], dt, 1.0).map_err(e)?;
        let (b, bc) = cx.pair(&[12], dt, 1.0).map_err(e)?;
        same(
            &format!("group_norm {dt}"),
            &x.group_norm(4, Some(&w), Some(&b), 1e-5).map_err(e)?,
            &xc.group_norm(4, Some(&wc), Some(&bc), 1e-5).map_err(e)?,
            t,
        )?;
    }
    let x = Tensor::from_slice(&[f32::NEG_INFINITY, f32::NEG_INFINITY, 1.0, f32::NAN], &[2, 2], CPU)
        .map_err(e)?;
    both("softmax -inf/nan", &x.to_device(cx.dev).map_err(e)?, &x, 1e-6, |x| x.softmax(-1))
}

fn matmul(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in FLOATS {
        let t = match dt {
            DType::F64 => 1e-12,
            DType::F32 => 1e-5,
            _ => tol_of(dt),
        };
        for (sa, sb) in [
            (vec![1, 77], vec![77, 131]),
            (vec![5, 33], vec![33, 7]),
            (vec![2, 1, 9, 17], vec![3, 17, 5]),
            (vec![17], vec![17]),
            (vec![4, 0], vec![0, 3]),
        ] {
            let (a, ac) = cx.pair(&sa, dt, 1.0).map_err(e)?;
            let (b, bc) = cx.pair(&sb, dt, 1.0).map_err(e)?;
            same(
                &format!("matmul {dt} {sa:?}x{sb:?}"),
                &a.matmul(&b).map_err(e)?,
                &ac.matmul(&bc).map_err(e)?,
                t,
            )?;
        }
        let (x, xc) = cx.pair(&[3, 64], dt, 1.0).map_err(e)?;
        let (w, wc) = cx.pair(&[48, 64], dt, 1.0).map_err(e)?;
        let (bias, bc) = cx.pair(&[48], dt, 1.0).map_err(e)?;
        same(
            &format!("linear {dt}"),
            &x.linear(&w, Some(&bias)).map_err(e)?,
            &xc.linear(&wc, Some(&bc)).map_err(e)?,
            t,
        )?;
        let (p, pc) = cx.pair(&[6, 10, 12], dt, 1.0).map_err(e)?;
        let (gp, cp) = (p.slice(2, 0, 12, 2).map_err(e)?, pc.slice(2, 0, 12, 2).map_err(e)?);
        same(
            &format!("matmul strided {dt}"),
            &gp.matmul(&gp.transpose(1, 2).map_err(e)?).map_err(e)?,
            &cp.matmul(&cp.transpose(1, 2).map_err(e)?).map_err(e)?,
            t,
        )?;
    }
    Ok(())
}

/// scaled_dot_product_attention: batch broadcast, GQA at decode (L = 1) and prefill, top-left
/// causal with L ≠ S, additive and boolean masks with a row that sees no key.
fn attention(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in [DType::F32, DType::BF16, DType::F16] {
        let t = tol_of(dt).max(1e-5) * 4.0;
        for (qs, ks, causal, gqa) in [
            ([2, 3, 5, 24], [1, 3, 7, 24], false, false),
            ([1, 8, 1, 80], [1, 2, 33, 80], false, true),
            ([2, 6, 7, 40], [2, 2, 11, 40], true, true),
        ] {
            let (q, qc) = cx.pair(&qs, dt, 1.0).map_err(e)?;
            let (k, kc) = cx.pair(&ks, dt, 1.0).map_err(e)?;
            let (v, vc) = cx.pair(&ks, dt, 1.0).map_err(e)?;
            let o = Sdpa { is_causal: causal, enable_gqa: gqa, ..Sdpa::default() };
            same(
                &format!("sdpa {dt} {qs:?} {ks:?} causal={causal} gqa={gqa}"),
                &q.scaled_dot_product_attention(&k, &v, &o).map_err(e)?,
                &qc.scaled_dot_product_attention(&kc, &vc, &o).map_err(e)?,
                t,
            )?;
        }
        let (q, qc) = cx.pair(&[2, 4, 3, 16], dt, 1.0).map_err(e)?;
        let (k, kc) = cx.pair(&[2, 2, 9, 16], dt, 1.0).map_err(e)?;
        let (v, vc) = cx.pair(&[2, 2, 9, 16], dt, 1.0).map_err(e)?;
        let (add, addc) = cx.pair(&[1, 4, 3, 9], DType::F32, 2.0).map_err(e)?;
        let keep: Vec<f32> =
            (0..27).map(|i| if i / 9 == 1 { 0.0 } else { (i % 3 != 0) as u8 as f32 }).collect();
        let keepc = Tensor::from_vec(keep, &[3, 9], CPU).and_then(|m| m.to_dtype(DType::Bool)).map_err(e)?;
        let keepg = keepc.to_device(cx.dev).map_err(e)?;
        for (name, m, mc) in [("additive", &add, &addc), ("bool", &keepg, &keepc)] {
            let (o, oc) = (
                Sdpa { attn_mask: Some(m), enable_gqa: true, ..Sdpa::default() },
                Sdpa { attn_mask: Some(mc), enable_gqa: true, ..Sdpa::default() },
            );
            same(
                &format!("sdpa {dt} {name} mask"),
                &q.scaled_dot_product_attention(&k, &v, &o).map_err(e)?,
                &qc.scaled_dot_product_attention(&kc, &vc, &oc).map_err(e)?,
                t,
            )?;
        }
    }
    Ok(())
}

/// pad in every mode on odd sizes, several dims at once, constant with cropping, a
/// non-contiguous input and an integer dtype.
fn padding(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in [DType::F32, DType::BF16, DType::I64] {
        let (x, xc) = cx.pair(&[2, 3, 7, 9], dt, 4.0).map_err(e)?;
        let (xt, xtc) = (x.transpose(2, 3).map_err(e)?, xc.transpose(2, 3).map_err(e)?);
        for (pad, mode) in [
            (vec![1, 2, 3, 0], PadMode::Constant(0.5)),
            (vec![2, -1, 0, 1, 1, 1], PadMode::Constant(-3.0)),
            (vec![2, 2, 1, 1], PadMode::Reflect),
            (vec![6, 0, 1, 6], PadMode::Reflect),
            (vec![2, 1, 1, 2, 0, 3], PadMode::Replicate),
            (vec![3, 7, 0, 2], PadMode::Circular),
        ] {
            both(&format!("pad {dt} {pad:?} {mode:?}"), &x, &xc, 0.0, |t| t.pad(&pad, mode))?;
            both(&format!("pad {dt} transposed {pad:?} {mode:?}"), &xt, &xtc, 0.0, |t| t.pad(&pad, mode))?;
        }
    }
    Ok(())
}

/// conv1d / conv2d / conv3d with padding, stride, dilation, groups and bias on odd sizes.
fn convolution(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in [DType::F32, DType::BF16] {
        let t = tol_of(dt).max(1e-5) * 4.0;
        let p = |s: &[usize], pad: &[usize], dil: &[usize], g| Conv {
            stride: s.to_vec(),
            padding: pad.to_vec(),
            dilation: dil.to_vec(),
            groups: g,
        };
        for (xs, ws, cp) in [
            (vec![2, 3, 13, 11], vec![5, 3, 3, 3], p(&[1], &[1], &[1], 1)),
            (vec![1, 6, 17, 9], vec![4, 3, 3, 2], p(&[2, 1], &[0, 1], &[1, 2], 2)),
            (vec![1, 4, 5, 9, 7], vec![3, 4, 3, 3, 3], p(&[1], &[0, 1, 1], &[1], 1)),
            (vec![2, 5, 31], vec![5, 1, 4], p(&[3], &[2], &[1], 5)),
        ] {
            let (x, xc) = cx.pair(&xs, dt, 1.0).map_err(e)?;
            let (w, wc) = cx.pair(&ws, dt, 1.0).map_err(e)?;
            let (b, bc) = cx.pair(&ws[..1], dt, 1.0).map_err(e)?;
            let f = match xs.len() {
                3 => Tensor::conv1d,
                4 => Tensor::conv2d,
                _ => Tensor::conv3d,
            };
            same(
                &format!("conv {dt} {xs:?} * {ws:?} {cp:?}"),
                &f(&x, &w, Some(&b), &cp).map_err(e)?,
                &f(&xc, &wc, Some(&bc), &cp).map_err(e)?,
                t,
            )?;
        }
    }
    Ok(())
}

fn indexing(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in [DType::F32, DType::BF16, DType::I64, DType::U8] {
        let (x, xc) = cx.pair(&[9, 13, 5], dt, 10.0).map_err(e)?;
        let idx = Tensor::from_slice(&[3i64, -1, 0, 3, 8], &[5], CPU).map_err(e)?;
        let ig = idx.to_device(cx.dev).map_err(e)?;
        for d in [0isize, 2] {
            same(
                &format!("index_select {dt} dim {d}"),
                &x.index_select(
                    d,
                    &ig.narrow(0, 0, if d == 2 { 4 } else { 5 })
                        .map_err(e)?
                        .remainder_scalar(5.0)
                        .map_err(e)?,
                )
                .map_err(e)?,
                &xc.index_select(
                    d,
                    &idx.narrow(0, 0, if d == 2 { 4 } else { 5 })
                        .map_err(e)?
                        .remainder_scalar(5.0)
                        .map_err(e)?,
                )
                .map_err(e)?,
                0.0,
            )?;
        }
        let gi = Tensor::from_slice(
            &(0..9 * 4 * 5).map(|i: i32| (i * 7) % 13).collect::<Vec<_>>(),
            &[9, 4, 5],
            CPU,
        )
        .map_err(e)?;
        same(
            &format!("gather {dt}"),
            &x.gather(1, &gi.to_device(cx.dev).map_err(e)?).map_err(e)?,
            &xc.gather(1, &gi).map_err(e)?,
            0.0,
        )?;
        let ti = Tensor::from_slice(&[0i64, 584, -1, 77, 77], &[5], CPU).map_err(e)?;
        same(
            &format!("take {dt}"),
            &x.transpose(0, 2).map_err(e)?.take(&ti.to_device(cx.dev).map_err(e)?).map_err(e)?,
            &xc.transpose(0, 2).map_err(e)?.take(&ti).map_err(e)?,
            0.0,
        )?;
        let (src, srcc) = cx.pair(&[5], dt, 3.0).map_err(e)?;
        for acc in [false, true] {
            if acc && dt == DType::U8 {
                continue;
            }
            let (y, yc) = (x.copy().map_err(e)?, xc.copy().map_err(e)?);
            y.put_(&ti.to_device(cx.dev).map_err(e)?, &src, acc).map_err(e)?;
            yc.put_(&ti, &srcc, acc).map_err(e)?;
            same(&format!("put_ {dt} accumulate={acc}"), &y, &yc, tol_of(dt))?;
        }
        // index_copy_ along every dim (last, first, a wrapped negative index) over a random
        // destination, then into a transposed view from a transposed source.
        for d in 0..3 {
            let n = x.shape()[d] as i64;
            let ii = Tensor::from_slice(&[n - 1, 0, -2], &[3], CPU).map_err(e)?;
            let mut sh = x.shape().to_vec();
            sh[d] = 3;
            let (s, sc) = cx.pair(&sh, dt, 3.0).map_err(e)?;
            let (y, yc) = (x.copy().map_err(e)?, xc.copy().map_err(e)?);
            y.index_copy_(d as isize, &ii.to_device(cx.dev).map_err(e)?, &s).map_err(e)?;
            yc.index_copy_(d as isize, &ii, &sc).map_err(e)?;
            same(&format!("index_copy_ {dt} dim {d}"), &y, &yc, 0.0)?;
        }
        let ii = Tensor::from_slice(&[4i64, 11, 2], &[3], CPU).map_err(e)?;
        let (s, sc) = cx.pair(&[9, 3, 5], dt, 3.0).map_err(e)?;
        let (y, yc) = (x.copy().map_err(e)?, xc.copy().map_err(e)?);
        let (st, stc) = (s.transpose(0, 2).map_err(e)?, sc.transpose(0, 2).map_err(e)?);
        y.transpose(0, 2).map_err(e)?.index_copy_(1, &ii.to_device(cx.dev).map_err(e)?, &st).map_err(e)?;
        yc.transpose(0, 2).map_err(e)?.index_copy_(1, &ii, &stc).map_err(e)?;
        same(&format!("index_copy_ {dt} views"), &y, &yc, 0.0)?;
        let parts = [x.clone(), x.narrow(1, 2, 3).map_err(e)?];
        let partsc = [xc.clone(), xc.narrow(1, 2, 3).map_err(e)?];
        same(
            &format!("cat {dt}"),
            &Tensor::cat(&parts, 1).map_err(e)?,
            &Tensor::cat(&partsc, 1).map_err(e)?,
            0.0,
        )?;
        same(
            &format!("stack {dt}"),
            &Tensor::stack(&[x.clone(), x.clone()], 3).map_err(e)?,
            &Tensor::stack(&[xc.clone(), xc.clone()], 3).map_err(e)?,
            0.0,
        )?;
    }
    Ok(())
}

fn rotary(cx: &mut Ctx) -> std::result::Result<(), String> {
    use kiln::{HeadNorm, RotaryStart};
    // A [B, T, H, D + 3] projection narrowed (an offset) and seen as [B, H, T, D], with full
    // and partial tables, started at a host position and at one read on the device.
    for dt in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        for (d, r) in [(128, 128), (80, 80), (64, 32), (6, 2)] {
            let (p, t_len) = (37, 5);
            let (x, xc) = cx.pair(&[2, t_len, 7, d + 3], dt, 2.0).map_err(e)?;
            let view = |x: &Tensor| x.narrow(3, 3, d).and_then(|x| x.transpose(1, 2));
            let (x, xc) = (view(&x).map_err(e)?, view(&xc).map_err(e)?);
            let (cos, cosc) = cx.pair(&[p, r], dt, 1.0).map_err(e)?;
            let (sin, sinc) = cx.pair(&[p, r], dt, 1.0).map_err(e)?;
            let want = xc.rotary_embedding(&cosc, &sinc, RotaryStart::At(30)).map_err(e)?;
            let name = format!("rotary {dt} d{d} r{r}");
            same(&name, &x.rotary_embedding(&cos, &sin, RotaryStart::At(30)).map_err(e)?, &want, tol_of(dt))?;
            let start =
                Tensor::from_slice(&[7i64, 30], &[2], CPU).map_err(e)?.to_device(cx.dev).map_err(e)?;
            let start = start.narrow(0, 1, 1).map_err(e)?;
            let got = x.rotary_embedding(&cos, &sin, RotaryStart::Device(&start)).map_err(e)?;
            same(&format!("{name} device start"), &got, &want, tol_of(dt))?;
            // Each head RMS-normed first: heads 0..5 by one weight, 5..7 by another (views
            // at an offset), against the CPU's rms_norm + cat + rotary.
            let (w, wc) = cx.pair(&[2, d], dt, 1.0).map_err(e)?;
            let halves = |w: &Tensor| -> std::result::Result<[Tensor; 2], String> {
                let one = |i| w.narrow(0, i, 1).and_then(|w| w.reshape(&[d])).map_err(e);
                Ok([one(0)?, one(1)?])
            };
            let ([w0, w1], [c0, c1]) = (halves(&w)?, halves(&wc)?);
            let norm = |a, b| HeadNorm { weights: [a, b], split: 5, eps: 1e-6 };
            let want = xc.rms_norm_rotary(norm(&c0, &c1), &cosc, &sinc, RotaryStart::At(30)).map_err(e)?;
            let got =
                x.rms_norm_rotary(norm(&w0, &w1), &cos, &sin, RotaryStart::Device(&start)).map_err(e)?;
            same(&format!("rms_norm_rotary {dt} d{d} r{r}"), &got, &want, tol_of(dt))?;
        }
    }
    // A device start past the tables turns the rotated dims to NaN instead of reading past.
    let (x, _) = cx.pair(&[1, 2, 1, 8], DType::F32, 1.0).map_err(e)?;
    let (cos, _) = cx.pair(&[4, 4], DType::F32, 1.0).map_err(e)?;
    let start = Tensor::from_slice(&[4i64], &[1], CPU).map_err(e)?.to_device(cx.dev).map_err(e)?;
    let got =
        x.rotary_embedding(&cos, &cos, RotaryStart::Device(&start)).map_err(e)?.to_f64_vec().map_err(e)?;
    let want_nan: Vec<bool> = (0..16).map(|i| i % 8 < 4).collect();
    if got.iter().map(|v| v.is_nan()).collect::<Vec<_>>() != want_nan {
        return Err(format!("rotary past the tables: {got:?} (NaN expected in dims 0..4)"));
    }
    Ok(())
}

fn creation(cx: &mut Ctx) -> std::result::Result<(), String> {
    for dt in [DType::F32, DType::BF16, DType::F16, DType::F64, DType::F8E4M3] {
        let tol = if dt == DType::F8E4M3 { 0.0 } else { tol_of(dt).max(1e-6) };
        same(
            &format!("randn {dt}"),
            &Tensor::randn(&[1001], 9, dt, cx.dev).map_err(e)?,
            &Tensor::randn(&[1001], 9, dt, CPU).map_err(e)?,
            tol,
        )
        .or_else(|m| if dt == DType::F8E4M3 { Ok(()) } else { Err(m) })?;
        same(
            &format!("rand {dt}"),
            &Tensor::rand(&[1001], 9, dt, cx.dev).map_err(e)?,
            &Tensor::rand(&[1001], 9, dt, CPU).map_err(e)?,
            0.0,
        )?;
        same(
            &format!("full {dt}"),
            &Tensor::full(&[3, 7], 0.3, dt, cx.dev).map_err(e)?,
            &Tensor::full(&[3, 7], 0.3, dt, CPU).map_err(e)?,
            0.0,
        )?;
    }
    for dt in [DType::I64, DType::U8, DType::Bool] {
        same(
            &format!("full {dt}"),
            &Tensor::full(&[5], 1.0, dt, cx.dev).map_err(e)?,
            &Tensor::full(&[5], 1.0, dt, CPU).map_err(e)?,
            0.0,
        )?;
    }
    // Made on the device (graph-capturable): every dtype cast as the CPU casts, odd lengths.
    let ranges = [
        (0.0, 10.0, 0.5, DType::F32),
        (3.0, 1000.0, 7.0, DType::I32),
        (-5.0, 5.0, 0.25, DType::BF16),
        (1000.0, 5099.0, 1.0, DType::F16),
        (10.0, -3.0, -1.5, DType::I64),
        (0.0, 3.0, 1.0, DType::U8),
    ];
    for (a, b, step, dt) in ranges {
        same(
            &format!("arange {a}..{b} step {step} {dt}"),
            &Tensor::arange(a, b, step, dt, cx.dev).map_err(e)?,
            &Tensor::arange(a, b, step, dt, CPU).map_err(e)?,
            0.0,
        )?;
    }
    Ok(())
}

/// gated_delta_step (one Gated DeltaNet decode token) against the CPU's loops: every
/// compiled key dim, value dims below and past a warp, GQA-style shared key heads, bf16 /
/// f16 / f32 inputs, inputs sliced from one row and a state at an offset; the output and
/// the state updated in place. f32 within 1e-4 of the largest value
/// (the kernel's rsqrt / exp are the fast intrinsics and its sums run in another order).
fn gated_delta(cx: &mut Ctx) -> std::result::Result<(), String> {
    use kiln::GatedDelta;
    for (dt, tol) in
        [(DType::F32, 1e-4), (DType::BF16, tol_of(DType::BF16)), (DType::F16, tol_of(DType::F16))]
    {
        for (dk, dv) in [(16, 16), (32, 40), (64, 96), (128, 128)] {
            let (batch, hk, hv) = (2, 2, 6);
            let (qkv, qkvc) = cx.pair(&[batch, 2 * hk * dk + hv * dv], dt, 1.0).map_err(e)?;
            let (b, bc) = cx.pair(&[batch, hv], dt, 1.0).map_err(e)?;
            let (a, ac) = cx.pair(&[batch, hv], dt, 1.0).map_err(e)?;
            let (z, zc) = cx.pair(&[batch, hv * dv], dt, 1.0).map_err(e)?;
            let (s, sc) = cx.pair(&[batch, hv, dk, dv], DType::F32, 0.1).map_err(e)?;
            let (neg_a, nc) = cx.pair(&[hv], DType::F32, 1.0).map_err(e)?;
            let (dt_bias, dc) = cx.pair(&[hv], DType::F32, 1.0).map_err(e)?;
            let (w, wc) = cx.pair(&[dv], DType::F32, 1.0).map_err(e)?;
            let p = |n, d, w| GatedDelta { neg_a: n, dt_bias: d, norm: w, eps: 1e-6, key_heads: hk };
            let y = qkv.gated_delta_step(&b, &a, &z, &s, p(&neg_a, &dt_bias, &w)).map_err(e)?;
            let yc = qkvc.gated_delta_step(&bc, &ac, &zc, &sc, p(&nc, &dc, &wc)).map_err(e)?;
            let name = format!("gated_delta_step {dt} dk{dk} dv{dv}");
            same(&format!("{name} y"), &y, &yc, tol)?;
            same(&format!("{name} state"), &s, &sc, 1e-4)?;
            // Batch 1 with b, a and z slices of one projection row (read at their offsets).
            let n = 2 * hk * dk + hv * dv;
            let (row, rowc) = cx.pair(&[1, n + hv * dv + 2 * hv], dt, 1.0).map_err(e)?;
            let parts = |r: &Tensor| -> kiln::Result<[Tensor; 4]> {
                Ok([
                    r.narrow(1, 0, n)?,
                    r.narrow(1, n + hv * dv, hv)?,
                    r.narrow(1, n + hv * dv + hv, hv)?,
                    r.narrow(1, n, hv * dv)?,
                ])
            };
            let ([q1, b1, a1, z1], [q1c, b1c, a1c, z1c]) =
                (parts(&row).map_err(e)?, parts(&rowc).map_err(e)?);
            let (s1, s1c) = (s.narrow(0, 1, 1).map_err(e)?, sc.narrow(0, 1, 1).map_err(e)?);
            let y = q1.gated_delta_step(&b1, &a1, &z1, &s1, p(&neg_a, &dt_bias, &w)).map_err(e)?;
            let yc = q1c.gated_delta_step(&b1c, &a1c, &z1c, &s1c, p(&nc, &dc, &wc)).map_err(e)?;
            same(&format!("{name} sliced y"), &y, &yc, tol)?;
            same(&format!("{name} sliced state"), &s, &sc, 1e-4)?;
        }
    }
    Ok(())
}

/// causal_conv1d_update against the CPU's loops: decode (T = 1) and prompts over several
/// of the kernel's 64-step chunks (the new state then goes through a fresh buffer), 2 to 8
/// taps, odd channel counts, batch 1 and 2, x sliced from a wider row, bias or none, SiLU
/// or none; y and the state updated in place.
fn causal_conv(cx: &mut Ctx) -> std::result::Result<(), String> {
    for (dt, tol) in [
        (DType::F32, 1e-5),
        (DType::F64, 1e-12),
        (DType::BF16, tol_of(DType::BF16)),
        (DType::F16, tol_of(DType::F16)),
    ] {
        for (b, t, c, k) in [(1, 1, 7, 4), (2, 1, 130, 3), (1, 70, 33, 4), (2, 150, 64, 2), (1, 3, 40, 8)] {
            for (with_bias, silu) in [(true, false), (false, true)] {
                let slice = |x: Tensor| x.narrow(2, 2, c);
                let (x, xc) = cx.pair(&[b, t, c + 5], dt, 1.0).map_err(e)?;
                let (x, xc) = (slice(x).map_err(e)?, slice(xc).map_err(e)?);
                let (w, wc) = cx.pair(&[c, k], dt, 0.5).map_err(e)?;
                let (bias, biasc) = cx.pair(&[c], dt, 1.0).map_err(e)?;
                let (s, sc) = cx.pair(&[b, k - 1, c], dt, 1.0).map_err(e)?;
                let (bias, biasc) = if with_bias { (Some(&bias), Some(&biasc)) } else { (None, None) };
                let y = x.causal_conv1d_update(&s, &w, bias, silu).map_err(e)?;
                let yc = xc.causal_conv1d_update(&sc, &wc, biasc, silu).map_err(e)?;
                let name =
                    format!("causal_conv1d_update {dt} [{b}, {t}, {c}] k{k} bias {with_bias} silu {silu}");
                same(&format!("{name} y"), &y, &yc, tol)?;
                same(&format!("{name} state"), &s, &sc, tol)?;
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("casts", casts),
        ("binary", binary),
        ("unary", unary),
        ("where_frexp", where_frexp),
        ("reductions", reductions),
        ("softmax_norm", softmax_norm),
        ("matmul", matmul),
        ("attention", attention),
        ("padding", padding),
        ("convolution", convolution),
        ("indexing", indexing),
        ("rotary", rotary),
        ("gated_delta", gated_delta),
        ("causal_conv", causal_conv),
        ("creation", creation),
    ];
    kiln::testing::run("gpu_parity", cases)
}
