//! FP8 on the GPU against the CPU backend: the quantisers (bit for bit), `scaled_mm` on the
//! decode kernel (M ≤ 16), on kiln's Hopper GEMM and on cuBLASLt (both scale recipes, the row-wise epilogue path,
//! every output dtype, bias, odd M and N, unaligned views, K = 0, empty), and
//! the decode kernel on frozen weights (dependent launch, chained layers, in a CUDA graph),
//! `linear_fp8`: on its FP8 path against the CPU's, and at decode (≤ 16 bf16 / f16 rows, the
//! w8a16 kernel) against `x.linear(w.dequantize())` in f32, and the FP8 MoE decode kernels
//! (`expert_swiglu_fp8`, `expert_linear_sum_fp8`) against the CPU's composed path. See
//! `common/mod.rs` for the harness.

use kiln::cuda::ops::W8A16_MAX_M;
use kiln::fp8::{column_scale, quantize, Granularity};
use kiln::testing::{e, same, tol_of, Case, Ctx, CPU};
use kiln::{DType, Tensor};
use std::process::ExitCode;

type R = std::result::Result<(), String>;

/// FP8 tensor cores accumulate in f32 with a shortened alignment step; f32 outputs get
/// 1e-3 of the output's scale, 16-bit ones their own rounding.
fn tol(out: DType) -> f64 {
    if out == DType::F32 {
        1e-3
    } else {
        tol_of(out)
    }
}

fn quantizers(cx: &mut Ctx) -> R {
    for dt in [DType::BF16, DType::F16, DType::F32] {
        for shape in [[37, 100], [1, 4096], [5, 1], [3, 2000]] {
            let (g, c) = cx.pair(&shape, dt, 3.0).map_err(e)?;
            for gran in [Granularity::Row, Granularity::Tensor] {
                let (qg, sg) = quantize(&g, gran).map_err(e)?;
                let (qc, sc) = quantize(&c, gran).map_err(e)?;
                let name = format!("quantize {gran:?} {dt} {shape:?}");
                same(&format!("{name} values"), &qg, &qc, 0.0)?;
                same(&format!("{name} scales"), &sg, &sc, 0.0)?;
            }
        }
    }
    // A zero row gets the EPS scale, not NaN; a non-contiguous input is read correctly.
    let z = Tensor::zeros(&[2, 64], DType::BF16, cx.dev).map_err(e)?;
    let (q, s) = quantize(&z, Granularity::Row).map_err(e)?;
    let (qc, sc) = quantize(&z.to_device(CPU).map_err(e)?, Granularity::Row).map_err(e)?;
    same("quantize zero rows", &q, &qc, 0.0)?;
    same("quantize zero scales", &s, &sc, 0.0)?;
    let (g, c) = cx.pair(&[64, 33], DType::BF16, 2.0).map_err(e)?;
    let (qg, sg) = quantize(&g.t().map_err(e)?, Granularity::Row).map_err(e)?;
    let (qc, sc) = quantize(&c.t().map_err(e)?, Granularity::Row).map_err(e)?;
    same("quantize transposed", &qg, &qc, 0.0)?;
    same("quantize transposed scales", &sg, &sc, 0.0)
}

/// One product on both devices: a `[m, k]` (dtype `adt`) times the `[n, k]` weight's `.t()`.
#[allow(clippy::too_many_arguments)]
fn check(
    cx: &mut Ctx,
    m: usize,
    n: usize,
    k: usize,
    adt: DType,
    bdt: DType,
    rowwise: bool,
    out: DType,
    bias: bool,
) -> R {
    let (a, ac) = cx.pair(&[m, k], adt, 40.0).map_err(e)?;
    let (w, wc) = cx.pair(&[n, k], bdt, 40.0).map_err(e)?;
    let (sa_shape, sb_shape): (Vec<usize>, Vec<usize>) =
        if rowwise { (vec![m, 1], vec![1, n]) } else { (vec![], vec![]) };
    let (sa, sac) = cx.pair(&sa_shape, DType::F32, 0.01).map_err(e)?;
    let (sb, sbc) = cx.pair(&sb_shape, DType::F32, 0.01).map_err(e)?;
    let (bg, bc) = cx.pair(&[n], out, 3.0).map_err(e)?;
    let (bg, bc) = if bias { (Some(&bg), Some(&bc)) } else { (None, None) };
    let name = format!(
        "scaled_mm {m}x{k}x{n} {adt}x{bdt} {} -> {out} bias={bias}",
        if rowwise { "row" } else { "tensor" }
    );
    let g = a.scaled_mm(&w.t().map_err(e)?, &sa, &sb, out, bg).map_err(|x| format!("{name}: {x}"))?;
    let c = ac.scaled_mm(&wc.t().map_err(e)?, &sac, &sbc, out, bc).map_err(e)?;
    same(&name, &g, &c, tol(out))
}

fn decode_kernel(cx: &mut Ctx) -> R {
    let pairs =
        [(DType::F8E4M3, DType::F8E4M3), (DType::F8E4M3, DType::F8E5M2), (DType::F8E5M2, DType::F8E4M3)];
    for m in [1, 3, 8, 9, 16] {
        for (n, k) in [(1, 16), (37, 208), (129, 64), (64, 4096)] {
            for rowwise in [false, true] {
                for out in [DType::BF16, DType::F16, DType::F32] {
                    check(cx, m, n, k, DType::F8E4M3, DType::F8E4M3, rowwise, out, false)?;
                    if out != DType::F32 {
                        check(cx, m, n, k, DType::F8E4M3, DType::F8E4M3, rowwise, out, true)?;
                    }
                }
            }
        }
    }
    for (adt, bdt) in pairs {
        check(cx, 5, 77, 320, adt, bdt, true, DType::BF16, true)?;
    }
    Ok(())
}

/// One layer of a decode chain: `x` quantised (the kernel right before the product makes
/// its activation and scales), times the `[n, k]` weight `w` with weight scales `sb`.
fn chain_layer(x: &Tensor, w: &Tensor, sb: &Tensor, gran: Granularity) -> kiln::Result<Tensor> {
    let (q, s) = quantize(x, gran)?;
    q.scaled_mm(&w.t()?, &s, sb, DType::BF16, None)
}

/// The decode kernel on frozen weights, launched to start before the kernel ahead of it
/// finishes and read the weight early: chains of layers whose activations and scales the
/// kernel right before makes, eagerly and replayed as a CUDA graph (twice), each layer
/// against the CPU given the GPU's own input to it.
fn frozen_weights(cx: &mut Ctx) -> R {
    let dev = kiln::cuda::device(0).map_err(e)?;
    for m in [1, 3, 9, 16] {
        // K of the first layer, then each layer's N: layers alternate row- and tensor-wise;
        // those with K = 4096 run the `_early` kernel (KW > 1), the others the plain one.
        let dims = [4096, 208, 4096, 4096, 37];
        let mut ws = Vec::new();
        for (i, d) in dims.windows(2).enumerate() {
            let (w, wc) = cx.pair(&[d[1], d[0]], DType::F8E4M3, 40.0).map_err(e)?;
            w.freeze().map_err(e)?;
            if !w.t().map_err(e)?.is_frozen() {
                return Err("a view of a frozen weight is not frozen".into());
            }
            let gran = if i % 2 == 0 { Granularity::Row } else { Granularity::Tensor };
            let sb_shape = if gran == Granularity::Row { vec![1, d[1]] } else { vec![] };
            let (sb, sbc) = cx.pair(&sb_shape, DType::F32, 0.01).map_err(e)?;
            ws.push((w, wc, sb, sbc, gran));
        }
        let (x0, _) = cx.pair(&[m, dims[0]], DType::BF16, 2.0).map_err(e)?;
        let run = || -> kiln::Result<Vec<Tensor>> {
            let mut xs = vec![x0.clone()];
            for (w, _, sb, _, gran) in &ws {
                let y = chain_layer(xs.last().expect("x0"), w, sb, *gran)?;
                xs.push(y);
            }
            Ok(xs)
        };
        let check_all = |xs: &[Tensor], how: &str| -> R {
            for (i, (_, wc, _, sbc, gran)) in ws.iter().enumerate() {
                let xc = xs[i].to_device(CPU).map_err(e)?;
                let c = chain_layer(&xc, wc, sbc, *gran).map_err(e)?;
                same(&format!("frozen chain m={m} layer {i} ({how})"), &xs[i + 1], &c, tol(DType::BF16))?;
            }
            Ok(())
        };
        check_all(&run().map_err(e)?, "eager")?;
        dev.begin_capture().map_err(e)?;
        let captured = run();
        let graph = dev.end_capture().map_err(e)?;
        let xs = captured.map_err(e)?;
        graph.replay().map_err(e)?;
        graph.replay().map_err(e)?;
        check_all(&xs, "graph")?;
    }
    // Frozen storage refuses in-place writes on the GPU as well.
    let (w, _) = cx.pair(&[4, 16], DType::F8E4M3, 1.0).map_err(e)?;
    w.freeze().map_err(e)?;
    match w.copy_(&w.clone()) {
        Err(x) if x.to_string().contains("frozen") => Ok(()),
        other => Err(format!("copy_ into a frozen tensor: {other:?}")),
    }
}

fn cublaslt(cx: &mut Ctx) -> R {
    for force_epilogue in [false, true] {
        let _epilogue = kiln::settings::FP8_FORCE_EPILOGUE.scoped(force_epilogue);
        for (m, n, k) in [(17, 64, 32), (33, 37, 512), (100, 129, 256), (256, 256, 1024)] {
            for rowwise in [false, true] {
                for out in [DType::BF16, DType::F16, DType::F32] {
                    check(cx, m, n, k, DType::F8E4M3, DType::F8E4M3, rowwise, out, false)?;
                    if out != DType::F32 {
                        check(cx, m, n, k, DType::F8E4M3, DType::F8E4M3, rowwise, out, true)?;
                    }
                }
            }
        }
        check(cx, 64, 48, 128, DType::F8E5M2, DType::F8E4M3, true, DType::BF16, true)?;
    }
    Ok(())
}

/// kiln's Hopper FP8 GEMM, forced on so that small and odd shapes reach it: M and N off its
/// 128×192 tile and its clusters of two tiles, K off its 128-byte block (the copy engine
/// zero-fills the rest), both recipes, every output dtype, bias.
fn own_gemm(cx: &mut Ctx) -> R {
    use kiln::cuda::ops::{own_fp8_gemm_launches, Fp8Gemm};
    let props = kiln::cuda::device(0).map_err(e)?.props().clone();
    if (props.cc_major, props.cc_minor) != (9, 0) {
        println!(
            "  own_gemm: not run, the kernel needs compute capability 9.0 (this GPU is {}.{})",
            props.cc_major, props.cc_minor
        );
        return Ok(());
    }
    let _own = kiln::settings::FP8_GEMM.scoped(Fp8Gemm::Own);
    let before = own_fp8_gemm_launches();
    // Served: output rows a multiple of 16 bytes (the copy engine stores them), partial
    // tiles in M and N. Not served (cuBLASLt instead): N = 129 and 257, odd row lengths.
    let served = [
        (17, 64, 32),
        (100, 136, 256),
        (129, 264, 208),
        (300, 520, 1008),
        (256, 384, 1024),
        (1000, 200, 4096),
        // 10 K blocks, the last partial: a consumer loop that groups K blocks (in fours or
        // eights) ends with a remainder.
        (192, 208, 1168),
        // 102 cluster tiles: on an H200's 66 clusters most run two through the persistent
        // loop (the staging buffers and scales of one tile reused by the next).
        (4100, 968, 144),
    ];
    let shapes = served.iter().chain(&[(100, 129, 256), (129, 257, 208)]).copied().collect::<Vec<_>>();
    let mut run = || -> R {
        for &(m, n, k) in &shapes {
            for rowwise in [false, true] {
                for out in [DType::BF16, DType::F16, DType::F32] {
                    check(cx, m, n, k, DType::F8E4M3, DType::F8E4M3, rowwise, out, false)?;
                    if out != DType::F32 {
                        check(cx, m, n, k, DType::F8E4M3, DType::F8E4M3, rowwise, out, true)?;
                    }
                }
            }
        }
        Ok(())
    };
    run()?;
    let launches = own_fp8_gemm_launches() - before;
    if launches != (served.len() * 10) as u64 {
        return Err(format!("own_gemm: the kernel ran {launches} times, expected {}", served.len() * 10));
    }
    Ok(())
}

/// Operands at odd offsets and leading dims (copied aligned first), K = 0, empty M.
fn layouts(cx: &mut Ctx) -> R {
    for m in [2, 40] {
        let (n, k) = (24, 48);
        let (a, ac) = cx.pair(&[m, k + 1], DType::F8E4M3, 40.0).map_err(e)?;
        let (w, wc) = cx.pair(&[n, k + 3], DType::F8E4M3, 40.0).map_err(e)?;
        let (sa, sac) = cx.pair(&[], DType::F32, 0.01).map_err(e)?;
        let cut = |t: &Tensor, s: usize| t.narrow(1, s, k);
        let g = cut(&a, 1)
            .map_err(e)?
            .scaled_mm(&cut(&w, 3).map_err(e)?.t().map_err(e)?, &sa, &sa, DType::BF16, None)
            .map_err(e)?;
        let c = cut(&ac, 1)
            .map_err(e)?
            .scaled_mm(&cut(&wc, 3).map_err(e)?.t().map_err(e)?, &sac, &sac, DType::BF16, None)
            .map_err(e)?;
        same(&format!("scaled_mm unaligned views M={m}"), &g, &c, tol_of(DType::BF16))?;
    }
    for m in [0, 3, 20] {
        check(cx, m, 16, 0, DType::F8E4M3, DType::F8E4M3, false, DType::BF16, true)?;
        check(cx, m, 16, 0, DType::F8E4M3, DType::F8E4M3, true, DType::F32, false)?;
    }
    Ok(())
}

fn linear(cx: &mut Ctx) -> R {
    for (lead, n, k) in [(vec![1], 300, 256), (vec![2, 3], 64, 96), (vec![5, 7], 200, 512)] {
        let mut xs = lead.clone();
        xs.push(k);
        let (x, xc) = cx.pair(&xs, DType::BF16, 1.0).map_err(e)?;
        let (w, wc) = cx.pair(&[n, k], DType::BF16, 0.05).map_err(e)?;
        let (b, bc) = cx.pair(&[n], DType::BF16, 1.0).map_err(e)?;
        for gran in [Granularity::Tensor, Granularity::Row] {
            let (q, s) = quantize(&w, gran).map_err(e)?;
            let (qc, sc) = quantize(&wc, gran).map_err(e)?;
            same("FP8 weight values", &q, &qc, 0.0)?;
            let g = x.linear_fp8(&q, &s, Some(&b)).map_err(e)?;
            // ≤ 16 rows run the w8a16 kernel, which does not quantise x: its reference is
            // the dequantised product; more rows run the FP8 path on both devices.
            let c = if lead.iter().product::<usize>() <= W8A16_MAX_M {
                dequantised_linear(&xc, (&qc, &sc), Some(&bc)).map_err(e)?
            } else {
                xc.linear_fp8(&qc, &sc, Some(&bc)).map_err(e)?
            };
            same(&format!("linear_fp8 {xs:?}x[{n},{k}] {gran:?}"), &g, &c, tol_of(DType::BF16))?;
        }
    }
    Ok(())
}

/// An FP8 weight and its scale, as `quantize` returns them.
type Fp8<'a> = (&'a Tensor, &'a Tensor);

/// `weight · scale` in f32.
fn dequantize((q, s): Fp8<'_>) -> kiln::Result<Tensor> {
    q.to_dtype(DType::F32)?.mul(s)
}

/// `F.linear(x, w.dequantize())` on the CPU in f32, rounded once to x's dtype.
fn dequantised_linear(xc: &Tensor, wc: Fp8<'_>, bc: Option<&Tensor>) -> kiln::Result<Tensor> {
    let b32 = bc.map(|b| b.to_dtype(DType::F32)).transpose()?;
    xc.to_dtype(DType::F32)?.linear(&dequantize(wc)?, b32.as_ref())?.to_dtype(xc.dtype())
}

/// `linear_fp8` at decode on the w8a16 kernel against `x.linear(w.dequantize())` computed in
/// f32 on the CPU and rounded once: bf16 and f16 x, 1–16 rows, odd N, short and long K,
/// per-row and per-tensor scales (the latter also broadcast to `[1, N]`, as `Fp8Weight`
/// passes it), with and without bias. Tolerance: the output's rounding
/// (both sides round once, so they may differ by an ulp) plus f32 summation order.
fn w8a16(cx: &mut Ctx) -> R {
    let shapes = [(1, 16), (7, 48), (33, 1040), (200, 4096), (4104, 4096), (200, 16), (1, 1040), (4104, 48)];
    for (n, k) in shapes {
        let (_, wc) = cx.pair(&[n, k], DType::F32, 0.05).map_err(e)?;
        let (qt, st) = quantize(&wc, Granularity::Tensor).map_err(e)?;
        let (qr, sr) = quantize(&wc, Granularity::Row).map_err(e)?;
        let st_col = column_scale(&st, n).map_err(e)?; // as `Fp8Weight` passes it
                                                       // (form, weight, the scale linear_fp8 gets, the scale the reference dequantises by)
        let forms = [("Row", &qr, &sr, &sr), ("Tensor", &qt, &st, &st), ("Tensor [1, N]", &qt, &st_col, &st)];
        for (form, qc, sc, s_ref) in forms {
            // One quantised weight, bit-identical on both devices.
            let (q, s) = (qc.to_device(cx.dev).map_err(e)?, sc.to_device(cx.dev).map_err(e)?);
            let w32 = dequantize((qc, s_ref)).map_err(e)?;
            for dt in [DType::BF16, DType::F16] {
                let (b, bc) = cx.pair(&[n], dt, 1.0).map_err(e)?;
                for m in [1, 2, 5, 8, 9, 16] {
                    let (x, xc) = cx.pair(&[m, k], dt, 1.0).map_err(e)?;
                    let y32 = xc.to_dtype(DType::F32).map_err(e)?.linear(&w32, None).map_err(e)?;
                    for bias in [false, true] {
                        let name = format!("w8a16 {m}x[{n},{k}] {dt} {form} bias={bias}");
                        let g =
                            x.linear_fp8(&q, &s, bias.then_some(&b)).map_err(|x| format!("{name}: {x}"))?;
                        let c = if bias {
                            y32.add(&bc.to_dtype(DType::F32).map_err(e)?).map_err(e)?
                        } else {
                            y32.clone()
                        };
                        same(&name, &g, &c.to_dtype(dt).map_err(e)?, tol_of(dt))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The w8a16 kernel on views: x at an aligned offset (read in place) or an odd one (copied),
/// leading dims, a strided bias and a bias of another dtype (added afterwards); and K not a
/// multiple of 16, which the kernel declines and `linear_fp8` refuses on either device.
fn w8a16_views(cx: &mut Ctx) -> R {
    let (n, k, m) = (37, 64, 6);
    let (_, wc) = cx.pair(&[n, k], DType::F32, 0.05).map_err(e)?;
    let (qc, sc) = quantize(&wc, Granularity::Row).map_err(e)?;
    let (q, s) = (qc.to_device(cx.dev).map_err(e)?, sc.to_device(cx.dev).map_err(e)?);
    for dt in [DType::BF16, DType::F16] {
        let (flat, flatc) = cx.pair(&[m * k + 8], dt, 1.0).map_err(e)?;
        for off in [8, 1] {
            let at = |t: &Tensor| t.narrow(0, off, m * k).and_then(|v| v.view(&[m, k]));
            let (x, xc) = (at(&flat).map_err(e)?, at(&flatc).map_err(e)?);
            let g = x.linear_fp8(&q, &s, None).map_err(e)?;
            let c = dequantised_linear(&xc, (&qc, &sc), None).map_err(e)?;
            same(&format!("w8a16 x at offset {off} {dt}"), &g, &c, tol_of(dt))?;
        }
        let (x, xc) = cx.pair(&[2, 3, k], dt, 1.0).map_err(e)?;
        let (b2, b2c) = cx.pair(&[2 * n], dt, 1.0).map_err(e)?;
        let (bs, bsc) = (b2.slice(0, 0, 2 * n, 2).map_err(e)?, b2c.slice(0, 0, 2 * n, 2).map_err(e)?);
        let g = x.linear_fp8(&q, &s, Some(&bs)).map_err(e)?;
        let c = dequantised_linear(&xc, (&qc, &sc), Some(&bsc)).map_err(e)?;
        if g.shape() != [2, 3, n] {
            return Err(format!("w8a16 [2, 3, {k}]: shape {:?}", g.shape()));
        }
        same(&format!("w8a16 [2, 3, {k}] strided bias {dt}"), &g, &c, tol_of(dt))?;
        let (b32, b32c) = cx.pair(&[n], DType::F32, 1.0).map_err(e)?;
        let g = x.linear_fp8(&q, &s, Some(&b32)).map_err(e)?;
        let c = dequantised_linear(&xc, (&qc, &sc), None).map_err(e)?.add(&b32c).map_err(e)?;
        same(&format!("w8a16 f32 bias {dt}"), &g, &c, tol_of(dt))?;
    }
    // K = 40: not the kernel's; the FP8 path's scaled_mm needs K % 16 == 0 on both devices.
    let (_, wc) = cx.pair(&[24, 40], DType::F32, 0.05).map_err(e)?;
    let (qc, sc) = quantize(&wc, Granularity::Row).map_err(e)?;
    let (q, s) = (qc.to_device(cx.dev).map_err(e)?, sc.to_device(cx.dev).map_err(e)?);
    let (x, xc) = cx.pair(&[3, 40], DType::BF16, 1.0).map_err(e)?;
    match (x.linear_fp8(&q, &s, None), xc.linear_fp8(&qc, &sc, None)) {
        (Err(g), Err(c)) if g.to_string() == c.to_string() => Ok(()),
        (g, c) => Err(format!("linear_fp8 K = 40: GPU {g:?} vs CPU {c:?}")),
    }
}

/// Stacked FP8 experts `[ne, n, k]` quantised per row on the CPU (values, `[ne, n]` scales),
/// bit-identical on both devices: (GPU values, GPU scales, CPU values, CPU scales).
fn fp8_experts(cx: &mut Ctx, ne: usize, n: usize, k: usize) -> std::result::Result<[Tensor; 4], String> {
    let (_, wc) = cx.pair(&[ne * n, k], DType::F32, 0.05).map_err(e)?;
    let (q, s) = quantize(&wc, Granularity::Row).map_err(e)?;
    let (q, s) = (q.reshape(&[ne, n, k]).map_err(e)?, s.reshape(&[ne, n]).map_err(e)?);
    Ok([q.to_device(cx.dev).map_err(e)?, s.to_device(cx.dev).map_err(e)?, q, s])
}

/// `[t, k]` int64 expert indices on both devices.
fn ids(cx: &Ctx, v: Vec<i64>, t: usize, k: usize) -> std::result::Result<(Tensor, Tensor), String> {
    let c = Tensor::from_vec(v, &[t, k], CPU).map_err(e)?;
    Ok((c.to_device(cx.dev).map_err(e)?, c))
}

/// The FP8 MoE decode kernels (`expert_swiglu_fp8`, `expert_linear_sum_fp8`) against the
/// CPU's composed path on the same quantised experts: bf16 and f16, odd N, K with and
/// without a partial last step (and one not a multiple of 16, which the GPU composes too),
/// 1–3 tokens, k from 1 to 10 (more slots than a row group's warps), x per token or per
/// slot, negative indices, every variant forced, and an index out of range (zero SwiGLU
/// row, nothing added to the sum).
fn experts(cx: &mut Ctx) -> R {
    for (ne, h, i) in [(5, 48, 37), (4, 208, 80), (16, 2048, 768), (3, 1040, 32), (7, 33, 64)] {
        let [gu, gus, guc, gusc] = fp8_experts(cx, ne, 2 * i, h)?;
        let [dn, dns, dnc, dnsc] = fp8_experts(cx, ne, h, i)?;
        for dt in [DType::BF16, DType::F16] {
            for (t, k) in [(1, 1), (1, 8), (3, 3), (2, 10)] {
                let name = format!("{dt} {t}x{k} of {ne} experts, H {h}, I {i}");
                let v = (0..t * k).map(|j| ((j * 7 + t) % (2 * ne)) as i64 - ne as i64).collect();
                let (id, idc) = ids(cx, v, t, k)?;
                let (x, xc) = cx.pair(&[t, h], dt, 1.0).map_err(e)?;
                let g = x.expert_swiglu_fp8(&gu, &gus, &id).map_err(|er| format!("{name}: {er}"))?;
                let c = xc.expert_swiglu_fp8(&guc, &gusc, &idc).map_err(e)?;
                same(&format!("swiglu {name}"), &g, &c, tol_of(dt))?;
                let (xs, xsc) = cx.pair(&[t, k, h], dt, 1.0).map_err(e)?;
                let g = xs.expert_swiglu_fp8(&gu, &gus, &id).map_err(e)?;
                same(
                    &format!("swiglu per slot {name}"),
                    &g,
                    &xsc.expert_swiglu_fp8(&guc, &gusc, &idc).map_err(e)?,
                    tol_of(dt),
                )?;
                let (a, ac) = cx.pair(&[t, k, i], dt, 1.0).map_err(e)?;
                let (r, rc) = cx.pair(&[t, k], DType::F32, 1.0).map_err(e)?;
                let g = a.expert_linear_sum_fp8(&dn, &dns, &id, &r).map_err(|er| format!("{name}: {er}"))?;
                let c = ac.expert_linear_sum_fp8(&dnc, &dnsc, &idc, &rc).map_err(e)?;
                same(&format!("sum {name}"), &g, &c, tol_of(dt))?;
            }
        }
    }
    // Every variant the override can force, on one Qwen-like shape.
    let (ne, h, i, t, k) = (6, 256, 96, 2, 5);
    let [gu, gus, guc, gusc] = fp8_experts(cx, ne, 2 * i, h)?;
    let [dn, dns, dnc, dnsc] = fp8_experts(cx, ne, h, i)?;
    let (id, idc) = ids(cx, vec![0, 5, 2, 2, 1, 3, 4, 0, 1, 5], t, k)?;
    let (x, xc) = cx.pair(&[t, h], DType::BF16, 1.0).map_err(e)?;
    let (a, ac) = cx.pair(&[t, k, i], DType::BF16, 1.0).map_err(e)?;
    let (r, rc) = cx.pair(&[t, k], DType::F32, 1.0).map_err(e)?;
    let want_act = xc.expert_swiglu_fp8(&guc, &gusc, &idc).map_err(e)?;
    let want_sum = ac.expert_linear_sum_fp8(&dnc, &dnsc, &idc, &rc).map_err(e)?;
    for rt in [1, 2] {
        for kw in [1, 2, 4, 8] {
            for warps in [kw, 8] {
                let v = kiln::cuda::ops::Fp8LinearVariant { rt, kw, warps };
                let _forced = kiln::settings::FP8_LINEAR_VARIANT.scoped(Some(v));
                let g = x.expert_swiglu_fp8(&gu, &gus, &id).map_err(|er| format!("swiglu {v}: {er}"))?;
                same(&format!("swiglu {v}"), &g, &want_act, tol_of(DType::BF16))?;
                let g = a.expert_linear_sum_fp8(&dn, &dns, &id, &r).map_err(|er| format!("sum {v}: {er}"))?;
                same(&format!("sum {v}"), &g, &want_sum, tol_of(DType::BF16))?;
            }
        }
    }
    // Slot 1 names expert `ne`: the GPU gives it a zero SwiGLU row and adds nothing for it
    // (the CPU refuses it), so the sum is that of slots 0 and 2 alone.
    let (bad, _) = ids(cx, vec![1, ne as i64, 0], 1, 3)?;
    let (_, goodc) = ids(cx, vec![1, 0], 1, 2)?;
    let act = x.narrow(0, 0, 1).and_then(|x| x.expert_swiglu_fp8(&gu, &gus, &bad)).map_err(e)?;
    let row =
        act.narrow(1, 1, 1).and_then(|a| a.abs()?.max(&[], false)?.to_dtype(DType::F64)?.to_vec::<f64>());
    if row.map_err(e)? != [0.0] {
        return Err("swiglu: a slot out of range must give a zero row".into());
    }
    let (a3, a3c) = cx.pair(&[1, 3, i], DType::BF16, 1.0).map_err(e)?;
    let (r3, r3c) = cx.pair(&[1, 3], DType::F32, 1.0).map_err(e)?;
    let pick =
        |t: &Tensor| Tensor::from_vec(vec![0i64, 2], &[2], CPU).and_then(|idx| t.index_select(1, &idx));
    let g = a3.expert_linear_sum_fp8(&dn, &dns, &bad, &r3).map_err(e)?;
    let c = pick(&a3c).and_then(|a| a.expert_linear_sum_fp8(&dnc, &dnsc, &goodc, &pick(&r3c)?)).map_err(e)?;
    same("sum beside a bad slot", &g, &c, tol_of(DType::BF16))
}

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("quantizers", quantizers),
        ("decode_kernel", decode_kernel),
        ("frozen_weights", frozen_weights),
        ("cublaslt", cublaslt),
        ("own_gemm", own_gemm),
        ("layouts", layouts),
        ("linear", linear),
        ("w8a16", w8a16),
        ("w8a16_views", w8a16_views),
        ("experts", experts),
    ];
    kiln::testing::run("gpu_fp8", cases)
}
