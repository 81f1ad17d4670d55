//! The reductions family on the GPU against the CPU backend: softmax / log_softmax on every
//! path (warp, block, split rows, two-launch fallback, cluster, poll), var_mean / std_mean, mse_loss,
//! bincount, top-k and the fused routers; odd sizes, -inf rows, NaN, ties, long single
//! rows, non-last dims, softmaxes reading their producer's output back to back (dependent
//! launch), and the same ops captured in a CUDA graph. See `common/mod.rs`.

use kiln::cuda::ops::{BlockSync, SoftmaxPath};
use kiln::settings;
use kiln::testing::{both, e, same, tol_of, Case, Ctx, CPU};
use kiln::{DType, Reduction, Router, Tensor};
use std::process::ExitCode;

type R = std::result::Result<(), String>;

const FLOATS: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// Runs `f` under every softmax path (and the two-launch fallback), restoring the defaults.
fn each_path(mut f: impl FnMut(&str) -> R) -> R {
    let modes = [
        ("auto", None, BlockSync::OneLaunch),
        ("rows", Some(SoftmaxPath::Rows), BlockSync::OneLaunch),
        ("warp", Some(SoftmaxPath::Warp), BlockSync::OneLaunch),
        ("split", Some(SoftmaxPath::Split), BlockSync::OneLaunch),
        ("split-2launch", Some(SoftmaxPath::Split), BlockSync::MultiLaunch),
        ("cluster", Some(SoftmaxPath::Cluster), BlockSync::OneLaunch),
        ("poll", Some(SoftmaxPath::Poll), BlockSync::OneLaunch),
    ];
    let mut out = Ok(());
    for (name, path, sync) in modes {
        let _path = settings::SOFTMAX_PATH.scoped(path);
        let _sync = settings::BLOCK_SYNC.scoped(sync);
        out = f(name);
        if out.is_err() {
            break;
        }
    }
    out
}

fn softmax_shapes(cx: &mut Ctx) -> R {
    let shapes: [&[usize]; 9] = [
        &[3, 1],
        &[5, 33],
        &[7, 129],
        &[64, 1000],
        &[2, 1025],
        &[3, 5000],
        &[300, 2049],
        &[1, 40001],
        &[2, 3, 77],
    ];
    for dt in FLOATS {
        for shape in shapes {
            let (g, c) = cx.pair(shape, dt, 3.0).map_err(e)?;
            each_path(|p| {
                let t = tol_of(dt).max(4e-6);
                both(&format!("softmax {dt} {shape:?} {p}"), &g, &c, t, |x| x.softmax(-1))?;
                both(&format!("log_softmax {dt} {shape:?} {p}"), &g, &c, t, |x| x.log_softmax(-1))
            })?;
        }
    }
    Ok(())
}

fn softmax_long_rows(cx: &mut Ctx) -> R {
    for shape in [[1usize, 128256], [1, 151936], [1, 262144], [32, 128256], [5, 1_000_003]] {
        for dt in [DType::F32, DType::BF16] {
            let (g, c) = cx.pair(&shape, dt, 4.0).map_err(e)?;
            each_path(|p| {
                if p == "rows" || p == "warp" {
                    return Ok(()); // the same kernels as the medium rows; slow on these
                }
                let t = tol_of(dt).max(4e-6);
                both(&format!("softmax {dt} {shape:?} {p}"), &g, &c, t, |x| x.softmax(-1))?;
                both(&format!("log_softmax {dt} {shape:?} {p}"), &g, &c, t, |x| x.log_softmax(-1))
            })?;
        }
    }
    // Huge logits: the max subtraction must keep exp finite.
    let (g, c) = cx.pair(&[3, 70000], DType::F32, 1e4).map_err(e)?;
    both("softmax huge logits", &g, &c, 4e-6, |x| x.softmax(-1))
}

fn softmax_dims(cx: &mut Ctx) -> R {
    for dt in [DType::F32, DType::BF16] {
        let (g, c) = cx.pair(&[37, 29, 5], dt, 2.0).map_err(e)?;
        for dim in [0isize, 1, 2, -2] {
            let t = tol_of(dt).max(4e-6);
            both(&format!("softmax {dt} dim {dim}"), &g, &c, t, |x| x.softmax(dim))?;
            both(&format!("log_softmax {dt} dim {dim}"), &g, &c, t, |x| x.log_softmax(dim))?;
        }
        both(&format!("softmax {dt} transposed view"), &g, &c, tol_of(dt).max(4e-6), |x| {
            x.transpose(0, 2)?.softmax(-1)
        })?;
    }
    let (g, c) = cx.pair(&[0, 7], DType::F32, 1.0).map_err(e)?;
    both("softmax empty", &g, &c, 0.0, |x| x.softmax(-1))
}

/// Rows with -inf, NaN and +inf at short, medium and split lengths.
fn softmax_special(cx: &mut Ctx) -> R {
    for r in [7usize, 1000, 3000, 100_000] {
        let mut v: Vec<f32> = Tensor::randn(&[6, r], 77, DType::F32, CPU).map_err(e)?.to_vec().map_err(e)?;
        v[..r].iter_mut().for_each(|x| *x = f32::NEG_INFINITY); // row 0: all -inf
        v[r + r / 2] = f32::NAN; // row 1: one NaN
        v[2 * r + 1] = f32::INFINITY; // row 2: one +inf
        v[3 * r..4 * r].iter_mut().step_by(2).for_each(|x| *x = f32::NEG_INFINITY); // row 3: half -inf
        v[5 * r - 1] = f32::NEG_INFINITY; // row 4: one -inf
        v[5 * r..5 * r + 2 * r / 5].iter_mut().for_each(|x| *x = f32::NEG_INFINITY); // row 5: -inf chunks
        let c = Tensor::from_vec(v, &[6, r], CPU).map_err(e)?;
        let g = c.to_device(cx.dev).map_err(e)?;
        each_path(|p| {
            both(&format!("softmax special r={r} {p}"), &g, &c, 4e-6, |x| x.softmax(-1))?;
            both(&format!("log_softmax special r={r} {p}"), &g, &c, 4e-6, |x| x.log_softmax(-1))
        })?;
    }
    Ok(())
}

/// Softmaxes that read what the kernel just before them wrote, back to back: the cluster
/// and poll kernels are launched as programmatic dependents, so each must wait for its
/// producer (an elementwise kernel, or another softmax that lets it start early) before
/// reading. Checked with the dependent launch on and off.
fn softmax_chains(cx: &mut Ctx) -> R {
    for shape in [[1usize, 128256], [2, 128256], [4, 32000], [64, 8192], [1, 32000]] {
        let (g, c) = cx.pair(&shape, DType::F32, 3.0).map_err(e)?;
        for pdl in [true, false] {
            let _pdl = settings::AFTER_PREVIOUS.scoped(pdl);
            let r = each_path(|p| {
                both(&format!("softmax chain {shape:?} {p} pdl {pdl}"), &g, &c, 2e-5, |x| {
                    let y = x.mul_scalar(2.0)?.softmax(-1)?.mul_scalar(shape[1] as f64)?;
                    y.log_softmax(-1)?.softmax(-1)?.mul_scalar(shape[1] as f64)?.softmax(-1)
                })
            });
            r?;
        }
    }
    Ok(())
}

fn var_mean(cx: &mut Ctx) -> R {
    let cases: [(&[usize], isize); 8] = [
        (&[32, 4096], -1),
        (&[6, 300], 1),
        (&[6, 300], 0),
        (&[1, 1_000_003], 1),
        (&[3, 1], 1),
        (&[7, 5, 2049], 1),
        (&[2, 300_001], -1),
        (&[0, 5], 1),
    ];
    for dt in FLOATS {
        for (shape, dim) in cases {
            for offset in [0.0, 10.0] {
                let (g, c) = cx.pair(shape, dt, 1.0).map_err(e)?;
                let (g, c) = (g.add_scalar(offset).map_err(e)?, c.add_scalar(offset).map_err(e)?);
                // f32 states in the kernel: a little looser than one rounding.
                let t = match dt {
                    DType::F32 => 5e-5,
                    DType::F64 => 1e-10,
                    _ => tol_of(dt) * 2.0,
                };
                for corr in [0.0, 1.0, 2.5] {
                    for sync in [BlockSync::OneLaunch, BlockSync::MultiLaunch] {
                        let _sync = settings::BLOCK_SYNC.scoped(sync);
                        let name =
                            format!("var_mean {dt} {shape:?} dim {dim} +{offset} corr {corr} {sync:?}");
                        let r = (g.var_mean(&[dim], corr, false), c.var_mean(&[dim], corr, false));
                        let ((gv, gm), (cv, cm)) = (r.0.map_err(e)?, r.1.map_err(e)?);
                        same(&format!("{name} var"), &gv, &cv, t)?;
                        same(&format!("{name} mean"), &gm, &cm, t)?;
                    }
                }
                let ((gs, gm), (cs, cm)) =
                    (g.std_mean(&[dim], 1.0, true).map_err(e)?, c.std_mean(&[dim], 1.0, true).map_err(e)?);
                same(&format!("std_mean {dt} {shape:?} keepdim"), &gs, &cs, t)?;
                same(&format!("std_mean mean {dt} {shape:?} keepdim"), &gm, &cm, t)?;
            }
        }
    }
    Ok(())
}

fn mse_loss(cx: &mut Ctx) -> R {
    let shapes: [(&[usize], &[usize]); 6] = [
        (&[5, 9], &[5, 9]),
        (&[64], &[64]),
        (&[1_000_003], &[1_000_003]),
        (&[0], &[0]),
        (&[7, 1, 33], &[5, 33]),
        (&[4097], &[1]),
    ];
    for dt in FLOATS {
        for (sa, sb) in shapes {
            let (a, ac) = cx.pair(sa, dt, 2.0).map_err(e)?;
            let (b, bc) = cx.pair(sb, dt, 2.0).map_err(e)?;
            for red in [Reduction::None, Reduction::Mean, Reduction::Sum] {
                for sync in [BlockSync::OneLaunch, BlockSync::MultiLaunch] {
                    let _sync = settings::BLOCK_SYNC.scoped(sync);
                    let r = (a.mse_loss(&b, red), ac.mse_loss(&bc, red));
                    let name = format!("mse_loss {dt} {sa:?} {sb:?} {red:?} {sync:?}");
                    same(&name, &r.0.map_err(e)?, &r.1.map_err(e)?, tol_of(dt))?;
                }
            }
        }
    }
    Ok(())
}

/// splitmix64: well-spread bins from an index.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn ints(v: Vec<i64>) -> std::result::Result<Tensor, String> {
    let n = v.len();
    Tensor::from_vec(v, &[n], CPU).map_err(e)
}

fn bincount(cx: &mut Ctx) -> R {
    let n = 4 << 20;
    let hash = |i: u64, m: u64| (mix(i) % m) as i64;
    let inputs = [
        ("one bin", (0..n).map(|_| 3i64).collect::<Vec<_>>(), 1024usize),
        ("uniform 1024", (0..n as u64).map(|i| hash(i, 1024)).collect(), 1024),
        ("small", (0..1000u64).map(|i| hash(i, 10)).collect(), 12),
        ("odd 4099", (0..4099u64).map(|i| hash(i, 37)).collect(), 37),
        ("100k bins", (0..300_000u64).map(|i| hash(i, 100_000)).collect(), 100_000),
        ("two hot bins", (0..1_000_001u64).map(|i| (i % 2) as i64 * 5).collect(), 6),
        ("out of range", (0..5000u64).map(|i| hash(i, 40) - 10).collect(), 20),
        ("empty", vec![], 5),
    ];
    for (name, v, nbins) in inputs {
        let c = ints(v)?;
        let g = c.to_device(cx.dev).map_err(e)?;
        let m = c.numel();
        let (w32, w32c) = cx.pair(&[m], DType::F32, 1.0).map_err(e)?;
        let (w32, w32c) = (w32.abs().map_err(e)?, w32c.abs().map_err(e)?);
        let (w16, w16c) = cx.pair(&[m], DType::F16, 1.0).map_err(e)?;
        for sync in [BlockSync::OneLaunch, BlockSync::MultiLaunch] {
            let _sync = settings::BLOCK_SYNC.scoped(sync);
            let res = (|| {
                both(&format!("bincount_bounded {name} {sync:?}"), &g, &c, 0.0, |x| {
                    x.bincount_bounded(None, nbins)
                })?;
                same(
                    &format!("bincount_bounded f32 weights {name} {sync:?}"),
                    &g.bincount_bounded(Some(&w32), nbins).map_err(e)?,
                    &c.bincount_bounded(Some(&w32c), nbins).map_err(e)?,
                    2e-5,
                )?;
                same(
                    &format!("bincount_bounded f16 weights (f64 out) {name} {sync:?}"),
                    &g.bincount_bounded(Some(&w16), nbins).map_err(e)?,
                    &c.bincount_bounded(Some(&w16c), nbins).map_err(e)?,
                    1e-12,
                )
            })();
            res?;
        }
        if name != "out of range" {
            both(&format!("bincount {name}"), &g, &c, 0.0, |x| x.bincount(None, 7))?;
        } else if g.bincount(None, 0).is_ok() {
            return Err("bincount of negative values must fail".into());
        }
    }
    let c = ints(vec![1, 1, 4, 0]).map_err(|m| m.to_string())?.to_dtype(DType::I32).map_err(e)?;
    both("bincount i32 input", &c.to_device(cx.dev).map_err(e)?, &c, 0.0, |x| x.bincount(None, 0))
}

fn topk(cx: &mut Ctx) -> R {
    let cases: [(&[usize], usize); 10] = [
        (&[4, 128], 8),
        (&[7, 1000], 1),
        (&[7, 1000], 5),
        (&[7, 1000], 64),
        (&[3, 50000], 64),
        (&[3, 50000], 1),
        (&[1, 128256], 50),
        (&[1, 262144], 64),
        (&[200, 33], 33),
        (&[5, 1025], 0),
    ];
    let dts = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::I16, DType::U8];
    for dt in dts {
        for (shape, k) in cases {
            // Scale 2 on integers: many ties, which must resolve to the lower index.
            let (g, c) = cx.pair(shape, dt, if dt.is_float() { 3.0 } else { 2.0 }).map_err(e)?;
            for largest in [true, false] {
                let name = format!("topk {dt} {shape:?} k={k} largest={largest}");
                let (gv, gi) = g.topk(k, -1, largest).map_err(e)?;
                let (cv, ci) = c.topk(k, -1, largest).map_err(e)?;
                same(&format!("{name} values"), &gv, &cv, 0.0)?;
                same(&format!("{name} indices"), &gi, &ci, 0.0)?;
            }
        }
    }
    // Ties in floats (rounded), NaN, ±0, and a non-last dim.
    let mut v: Vec<f32> = Tensor::randn(&[3, 3000], 5, DType::F32, CPU)
        .map_err(e)?
        .mul_scalar(2.0)
        .map_err(e)?
        .round()
        .map_err(e)?
        .to_vec()
        .map_err(e)?;
    v[10] = f32::NAN;
    v[20] = f32::NAN;
    v[3000 + 7] = -0.0;
    v[6000..6100].iter_mut().for_each(|x| *x = 0.0);
    let c = Tensor::from_vec(v, &[3, 3000], CPU).map_err(e)?;
    let g = c.to_device(cx.dev).map_err(e)?;
    for (k, largest, dim) in
        [(64, true, -1isize), (64, false, -1), (2, true, 0), (3, false, 0), (17, true, 1)]
    {
        let name = format!("topk ties/NaN k={k} largest={largest} dim={dim}");
        let (gv, gi) = g.topk(k, dim, largest).map_err(e)?;
        let (cv, ci) = c.topk(k, dim, largest).map_err(e)?;
        same(&format!("{name} values"), &gv, &cv, 0.0)?;
        same(&format!("{name} indices"), &gi, &ci, 0.0)?;
    }
    // What the GPU does not take must say so, not compute something else.
    let (g, _) = cx.pair(&[4, 100], DType::F64, 1.0).map_err(e)?;
    if g.topk(3, -1, true).is_ok() {
        return Err("topk of f64 on the GPU should be NotImplemented".into());
    }
    let (g, _) = cx.pair(&[4, 100], DType::F32, 1.0).map_err(e)?;
    if g.topk(65, -1, true).is_ok() {
        return Err("topk with k = 65 on the GPU should fail".into());
    }
    Ok(())
}

fn router(cx: &mut Ctx) -> R {
    // Warp kernel (r <= 256, k <= 32): the first four and the last two; block kernel: the rest.
    let cases: [(&[usize], usize); 9] = [
        (&[1, 128], 8),
        (&[1, 256], 8),
        (&[4, 128], 8),
        (&[9, 200], 8),
        (&[16, 384], 8),
        (&[3, 2048], 64),
        (&[2, 256], 33),
        (&[3, 64], 32),
        (&[2, 5, 60], 1),
    ];
    for dt in [DType::F32, DType::BF16] {
        for (shape, k) in cases {
            let r = *shape.last().unwrap_or(&1);
            let (g, c) = cx.pair(shape, dt, 2.0).map_err(e)?;
            let (b, bc) = cx.pair(&[r], DType::F32, 0.5).map_err(e)?;
            let routers = [
                ("softmax", Router::Softmax, Router::Softmax),
                ("sigmoid", Router::Sigmoid { bias: None }, Router::Sigmoid { bias: None }),
                ("sigmoid+bias", Router::Sigmoid { bias: Some(&b) }, Router::Sigmoid { bias: Some(&bc) }),
            ];
            for (name, rg, rc) in routers {
                for norm in [None, Some(0.0), Some(1e-6)] {
                    let n = format!("router {name} {dt} {shape:?} k={k} norm={norm:?}");
                    let (gw, gi) = g.router_topk(k, rg, norm).map_err(e)?;
                    let (cw, ci) = c.router_topk(k, rc, norm).map_err(e)?;
                    same(&format!("{n} indices"), &gi, &ci, 0.0)?;
                    same(&format!("{n} weights"), &gw, &cw, 1e-5)?;
                }
            }
        }
    }
    // A NaN row ranks by index; a -inf logit never wins.
    let mut v: Vec<f32> = Tensor::randn(&[2, 64], 3, DType::F32, CPU).map_err(e)?.to_vec().map_err(e)?;
    v[5] = f32::NAN;
    v[64] = f32::NEG_INFINITY;
    let c = Tensor::from_vec(v, &[2, 64], CPU).map_err(e)?;
    let g = c.to_device(cx.dev).map_err(e)?;
    let ((gw, gi), (cw, ci)) = (
        g.router_topk(4, Router::Softmax, None).map_err(e)?,
        c.router_topk(4, Router::Softmax, None).map_err(e)?,
    );
    same("router NaN indices", &gi, &ci, 0.0)?;
    same("router NaN weights", &gw, &cw, 1e-5)
}

/// The decode-path ops captured in a CUDA graph and replayed: on the default stream (one
/// launch each, cooperative where chunks meet) and on a fresh stream, whose capture begins
/// before it has sync words (the two-launch fallback).
fn graph_capture(cx: &mut Ctx) -> R {
    let dev = kiln::cuda::device(0).map_err(e)?;
    let (x, xc) = cx.pair(&[1, 128256], DType::F32, 3.0).map_err(e)?;
    let (l, lc) = cx.pair(&[1, 128], DType::F32, 2.0).map_err(e)?;
    let (v, vc) = cx.pair(&[32, 4096], DType::F32, 1.0).map_err(e)?;
    let bc = ints((0..100_000u64).map(|i| (mix(i) % 1024) as i64).collect())?;
    let b = bc.to_device(cx.dev).map_err(e)?;
    let run = || -> kiln::Result<Vec<Tensor>> {
        let (w, i) = l.router_topk(8, Router::Softmax, Some(0.0))?;
        let (var, mean) = v.var_mean(&[-1], 1.0, false)?;
        Ok(vec![x.softmax(-1)?, x.log_softmax(-1)?, w, i, var, mean, b.bincount_bounded(None, 1024)?])
    };
    let want = {
        let (w, i) = lc.router_topk(8, Router::Softmax, Some(0.0)).map_err(e)?;
        let (var, mean) = vc.var_mean(&[-1], 1.0, false).map_err(e)?;
        vec![
            xc.softmax(-1).map_err(e)?,
            xc.log_softmax(-1).map_err(e)?,
            w,
            i,
            var,
            mean,
            bc.bincount_bounded(None, 1024).map_err(e)?,
        ]
    };
    let fresh = dev.new_stream().map_err(e)?;
    for (name, stream) in [("default stream", None), ("fresh stream", Some(&fresh))] {
        let capture = || -> kiln::Result<(kiln::cuda::Graph, Vec<Tensor>)> {
            if stream.is_none() {
                run()?; // warm-up: kernels compiled, sync words made
            }
            dev.begin_capture()?;
            let outs = run();
            let graph = dev.end_capture()?;
            Ok((graph, outs?))
        };
        let (graph, outs) = match stream {
            Some(s) => kiln::cuda::with_stream(s, capture),
            None => capture(),
        }
        .map_err(e)?;
        match stream {
            Some(s) => graph.replay_on(s),
            None => graph.replay(),
        }
        .map_err(e)?;
        dev.synchronize().map_err(e)?;
        for (k, (g, c)) in outs.iter().zip(&want).enumerate() {
            same(&format!("graph {name} output {k}"), g, c, 5e-5)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("softmax_shapes", softmax_shapes),
        ("softmax_long_rows", softmax_long_rows),
        ("softmax_dims", softmax_dims),
        ("softmax_special", softmax_special),
        ("softmax_chains", softmax_chains),
        ("var_mean", var_mean),
        ("mse_loss", mse_loss),
        ("bincount", bincount),
        ("topk", topk),
        ("router", router),
        ("graph_capture", graph_capture),
    ];
    kiln::testing::run("gpu_reductions", cases)
}
