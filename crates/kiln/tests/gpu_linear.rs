//! Decode-time `linear` on the GPU (the GEMV kernels of cuda/ops/gemv.rs, and the cuBLAS
//! path they hand over to), `linear_swiglu`, `expert_linear`, `expert_swiglu` and
//! `expert_linear_sum` (their experts kernels) and `grouped_mm` against the CPU backend: odd N and K, 1–8 rows, bias or none,
//! non-contiguous x / bias / weight views, all three dtypes, and every kernel variant
//! forced through the override. See `common/mod.rs` for the harness.

use kiln::cuda::ops::gemv::{self, Variant, TILES};
use kiln::testing::{e, same, tol_of, Case, Ctx};
use kiln::{DType, Device, Tensor};
use std::process::ExitCode;

type Res = std::result::Result<(), String>;

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Relative tolerance: f32 sums of 4097 products in another order need more than tol_of.
fn tol(dt: DType) -> f64 {
    if dt == DType::F32 {
        2e-5
    } else {
        tol_of(dt)
    }
}

/// A GPU tensor and its CPU twin.
struct Pair {
    g: Tensor,
    c: Tensor,
}

impl Pair {
    fn new(cx: &mut Ctx, shape: &[usize], dt: DType) -> std::result::Result<Pair, String> {
        let (g, c) = cx.pair(shape, dt, 1.0).map_err(e)?;
        Ok(Pair { g, c })
    }

    fn map(&self, f: impl Fn(&Tensor) -> kiln::Result<Tensor>) -> std::result::Result<Pair, String> {
        Ok(Pair { g: f(&self.g).map_err(e)?, c: f(&self.c).map_err(e)? })
    }
}

/// `x.linear(w, b)` on both devices, compared.
fn check(name: &str, x: &Pair, w: &Pair, b: Option<&Pair>) -> Res {
    let gpu = x.g.linear(&w.g, b.map(|b| &b.g)).map_err(|er| format!("{name}: {er}"))?;
    let cpu = x.c.linear(&w.c, b.map(|b| &b.c)).map_err(|er| format!("{name}: {er}"))?;
    same(name, &gpu, &cpu, tol(x.c.dtype()))
}

/// Odd and aligned N / K, every row count 1..=8, bias or none, each dtype (table variants).
fn shapes(cx: &mut Ctx) -> Res {
    let nk = [
        (1, 1),
        (7, 7),
        (129, 129),
        (1000, 1000),
        (7, 4097),
        (129, 4096),
        (1000, 4097),
        (4097, 129),
        (128, 2048),
    ];
    for dt in DTYPES {
        for (n, k) in nk {
            let w = Pair::new(cx, &[n, k], dt)?;
            let b = Pair::new(cx, &[n], dt)?;
            for rows in 1..=8 {
                let x = Pair::new(cx, &[rows, k], dt)?;
                check(&format!("{dt} {rows}x[{n}, {k}]"), &x, &w, None)?;
                check(&format!("{dt} {rows}x[{n}, {k}] bias"), &x, &w, Some(&b))?;
            }
        }
    }
    Ok(())
}

/// Views of x, bias and weight: direct strided rows, copied x, offset weights, and the
/// shapes that go to cuBLAS instead.
fn views(cx: &mut Ctx) -> Res {
    for dt in DTYPES {
        for (n, k) in [(200, 512), (33, 129)] {
            let w = Pair::new(cx, &[n, k], dt)?;
            let b = Pair::new(cx, &[n], dt)?;
            let name = |what: &str| format!("{dt} [{n}, {k}] {what}");
            let x1 = Pair::new(cx, &[k], dt)?;
            check(&name("x rank 1"), &x1, &w, Some(&b))?;
            let x3 = Pair::new(cx, &[2, 3, k], dt)?;
            check(&name("x [2, 3, K]"), &x3, &w, Some(&b))?;
            let wide = Pair::new(cx, &[4, 2 * k + 3], dt)?;
            check(&name("x rows 2K+3 apart"), &wide.map(|t| t.narrow(1, 0, k))?, &w, Some(&b))?;
            check(&name("x at offset 3"), &wide.map(|t| t.narrow(1, 3, k))?, &w, None)?;
            let even = Pair::new(cx, &[3, 2 * k], dt)?;
            check(&name("x rows 2K apart"), &even.map(|t| t.narrow(1, k, k))?, &w, Some(&b))?;
            let xt = Pair::new(cx, &[k, 5], dt)?;
            check(&name("x transposed"), &xt.map(|t| t.t())?, &w, Some(&b))?;
            let xp = Pair::new(cx, &[3, 2, k], dt)?;
            check(&name("x leading dims permuted"), &xp.map(|t| t.transpose(0, 1))?, &w, Some(&b))?;
            let row = Pair::new(cx, &[1, k], dt)?;
            check(&name("x broadcast rows"), &row.map(|t| t.expand(&[4, k]))?, &w, Some(&b))?;
            let b2 = Pair::new(cx, &[2 * n], dt)?;
            check(&name("bias stride 2"), &x3, &w, Some(&b2.map(|t| t.slice(0, 0, 2 * n, 2))?))?;
            let wb = Pair::new(cx, &[n + 1, k], dt)?;
            check(&name("weight rows from 1"), &x3, &wb.map(|t| t.narrow(0, 1, n))?, Some(&b))?;
            // cuBLAS: transposed weight, 0 and 9 rows, a bias that is not [N].
            let wt = Pair::new(cx, &[k, n], dt)?.map(|t| t.t())?;
            if gemv::declines(1, n, k, wt.g.layout(), dt).is_none() {
                return Err(name("a transposed weight must go to cuBLAS"));
            }
            check(&name("weight transposed"), &x3, &wt, Some(&b))?;
            check(&name("x [0, K]"), &Pair::new(cx, &[0, k], dt)?, &w, Some(&b))?;
            check(&name("x [9, K]"), &Pair::new(cx, &[9, k], dt)?, &w, Some(&b))?;
            check(&name("bias [1]"), &x3, &w, Some(&Pair::new(cx, &[1], dt)?))?;
            // matmul against w.t() takes the GEMV path too.
            for x in [&x1, &x3] {
                let gpu = x.g.matmul(&w.g.t().map_err(e)?).map_err(e)?;
                let cpu = x.c.matmul(&w.c.t().map_err(e)?).map_err(e)?;
                same(&name(&format!("matmul {:?} @ w.t()", x.c.shape())), &gpu, &cpu, tol(dt))?;
            }
        }
    }
    Ok(())
}

/// Every compiled tile under several block layouts (split-K by 1, 2, 3, 4, 16 warps),
/// forced through the override, on shapes whose N is not a multiple of a block's rows.
fn variants(cx: &mut Ctx) -> Res {
    let layouts = [(1, 1), (1, 4), (2, 2), (3, 6), (4, 8), (16, 16)];
    // Inputs and CPU results once; each variant is compared against them.
    let mut cases = Vec::new();
    for dt in DTYPES {
        for (n, k) in [(37, 1000), (130, 4096), (5, 4097)] {
            let w = Pair::new(cx, &[n, k], dt)?;
            let b = Pair::new(cx, &[n], dt)?;
            for (i, rows) in [1, 3, 8].into_iter().enumerate() {
                let x = Pair::new(cx, &[rows, k], dt)?;
                let bias = (i != 1).then_some(&b);
                let cpu = x.c.linear(&w.c, bias.map(|b| &b.c)).map_err(e)?;
                cases.push((
                    format!("{dt} {rows}x[{n}, {k}]"),
                    x.g,
                    w.g.clone(),
                    bias.map(|b| b.g.clone()),
                    cpu,
                ));
            }
        }
    }
    for &(vec, rows, unroll) in TILES {
        for (split, warps) in layouts {
            let v = Variant::new(vec, rows, unroll, split, warps);
            let _forced = kiln::settings::GEMV_VARIANT.scoped(Some(v));
            for (name, x, w, b, cpu) in &cases {
                if gemv::choose(x.shape()[0], w.shape()[0], w.shape()[1]).map_err(e)? != v {
                    return Err(format!("{v}: the override did not take"));
                }
                let gpu = x.linear(w, b.as_ref()).map_err(|er| format!("{v} {name}: {er}"))?;
                same(&format!("{v} {name}"), &gpu, cpu, tol(cpu.dtype()))?;
            }
        }
    }
    Ok(())
}

/// Given expert indices `[t, k]` on both devices.
fn ids_of(cx: &Ctx, v: Vec<i64>, t: usize, k: usize, dt: DType) -> std::result::Result<Pair, String> {
    let c = Tensor::from_vec(v, &[t, k], Device::Cpu).and_then(|c| c.to_dtype(dt)).map_err(e)?;
    Ok(Pair { g: c.to_device(cx.dev).map_err(e)?, c })
}

/// Fresh `[t, k]` expert indices in `[0, ne)` (repeats allowed, as top-k over several
/// tokens gives) of dtype `dt`.
fn expert_ids(cx: &mut Ctx, t: usize, k: usize, ne: usize, dt: DType) -> std::result::Result<Pair, String> {
    cx.seed += 1;
    let v = (0..t * k).map(|i| ((cx.seed as usize * 7919 + i * 104729) % ne) as i64).collect();
    ids_of(cx, v, t, k, dt)
}

/// `x.expert_linear(w, ids)` on both devices, compared.
fn check_experts(name: &str, x: &Pair, w: &Pair, ids: &Pair) -> Res {
    let gpu = x.g.expert_linear(&w.g, &ids.g).map_err(|er| format!("{name}: {er}"))?;
    let cpu = x.c.expert_linear(&w.c, &ids.c).map_err(|er| format!("{name}: {er}"))?;
    same(name, &gpu, &cpu, tol(x.c.dtype()))
}

/// The experts kernel (MoE decode): odd N and K, x a row per token or per slot, strided
/// x, int32 / strided / negative indices, every tile forced, the composed path for weights
/// it declines, and a zero row for an index out of range.
fn experts(cx: &mut Ctx) -> Res {
    let narrow = |t: &Tensor, s: usize| t.narrow(1, s, 1).map_err(e);
    for dt in DTYPES {
        for (ne, n, k) in [(5, 37, 1000), (3, 130, 4096), (4, 7, 4097), (16, 192, 256)] {
            let w = Pair::new(cx, &[ne, n, k], dt)?;
            for (t, slots) in [(1, 1), (1, 4), (3, 2), (2, 8)] {
                let ids = expert_ids(cx, t, slots, ne, DType::I64)?;
                let name = |what: &str| format!("{dt} {t}x{slots} of [{ne}, {n}, {k}] {what}");
                check_experts(&name("x [T, K]"), &Pair::new(cx, &[t, k], dt)?, &w, &ids)?;
                check_experts(&name("x [T, k, K]"), &Pair::new(cx, &[t, slots, k], dt)?, &w, &ids)?;
                let xt = Pair::new(cx, &[k, t], dt)?.map(|x| x.t())?;
                check_experts(&name("x transposed"), &xt, &w, &ids)?;
                let i32s = expert_ids(cx, t, slots, ne, DType::I32)?;
                check_experts(&name("int32 ids"), &Pair::new(cx, &[t, k], dt)?, &w, &i32s)?;
            }
        }
        let (ne, n, k) = (6, 33, 129);
        let w = Pair::new(cx, &[ne, n, k], dt)?;
        let x = Pair::new(cx, &[2, k], dt)?;
        let wide = expert_ids(cx, 3, 4, ne, DType::I64)?;
        let strided = wide.map(|t| t.slice(0, 0, 3, 2)?.narrow(1, 1, 3))?;
        check_experts(&format!("{dt} strided ids"), &x, &w, &strided)?;
        let neg = ids_of(cx, vec![-1, 2, -6, 0], 2, 2, DType::I64)?;
        check_experts(&format!("{dt} negative ids"), &x, &w, &neg)?;
        let ws = Pair::new(cx, &[ne, n, k + 5], dt)?.map(|t| t.narrow(2, 2, k))?;
        if gemv::experts_declines(6, ws.g.layout(), dt).is_none() {
            return Err("strided weights must take the composed path".into());
        }
        check_experts(
            &format!("{dt} strided weights (composed)"),
            &x,
            &ws,
            &expert_ids(cx, 2, 3, ne, DType::I64)?,
        )?;
        // Slot 1 names expert `ne`: a zero row on the GPU (the CPU refuses it); slots 0 and
        // 2 are as without it.
        let bad = ids_of(cx, vec![1, ne as i64, 0], 1, 3, DType::I64)?;
        let good = ids_of(cx, vec![1, 0], 1, 2, DType::I64)?;
        let x1 = Pair::new(cx, &[1, k], dt)?;
        let got = x1.g.expert_linear(&w.g, &bad.g).map_err(e)?;
        let cpu = x1.c.expert_linear(&w.c, &good.c).map_err(e)?;
        same(&format!("{dt} slot 0 beside a bad one"), &narrow(&got, 0)?, &narrow(&cpu, 0)?, tol(dt))?;
        same(&format!("{dt} slot 2 beside a bad one"), &narrow(&got, 2)?, &narrow(&cpu, 1)?, tol(dt))?;
        let zero = Tensor::zeros(&[1, 1, n], dt, Device::Cpu).map_err(e)?;
        same(&format!("{dt} out-of-range slot"), &narrow(&got, 1)?, &zero, 0.0)?;
    }
    // Every compiled tile under a few layouts.
    let (ne, n, k) = (4, 37, 1000);
    let w = Pair::new(cx, &[ne, n, k], DType::BF16)?;
    let x = Pair::new(cx, &[2, k], DType::BF16)?;
    let ids = expert_ids(cx, 2, 3, ne, DType::I64)?;
    let cpu = x.c.expert_linear(&w.c, &ids.c).map_err(e)?;
    for &(vec, rows, unroll) in TILES {
        for (split, warps) in [(1, 4), (3, 6), (16, 16)] {
            let v = Variant::new(vec, rows, unroll, split, warps);
            let _forced = kiln::settings::GEMV_VARIANT.scoped(Some(v));
            let gpu = x.g.expert_linear(&w.g, &ids.g).map_err(|er| format!("experts {v}: {er}"))?;
            same(&format!("experts {v}"), &gpu, &cpu, tol(DType::BF16))?;
        }
    }
    Ok(())
}

/// `linear_swiglu` (gate_up GEMV storing SwiGLU; one launch for ≤ 8 rows on CUDA) against
/// the CPU's linear + silu_mul: odd I and K, K whose rows are not 16-byte aligned (the
/// composed path), 1–8 rows and 9 (cuBLAS, composed), x sliced from wider rows, each
/// dtype, every tile forced.
fn swiglu(cx: &mut Ctx) -> Res {
    for dt in DTYPES {
        for (i, k) in [(7, 8), (129, 1000), (1000, 128), (1536, 4096), (33, 4097)] {
            let w = Pair::new(cx, &[2 * i, k], dt)?;
            // A fresh weight is 256-byte aligned: K alone decides between the pair kernel
            // and the composed path.
            if (k * dt.size()).is_multiple_of(16) != gemv::pairs_decline(2 * i, k, 0, dt).is_none() {
                return Err(format!("{dt} [{}, {k}]: pair kernel choice is off", 2 * i));
            }
            for rows in [1, 3, 8, 9] {
                let name = format!("{dt} linear_swiglu {rows}x[{}, {k}]", 2 * i);
                let x = Pair::new(cx, &[rows, k + 3], dt)?.map(|x| x.narrow(1, 1, k))?;
                let gpu = x.g.linear_swiglu(&w.g).map_err(|er| format!("{name}: {er}"))?;
                let cpu = x.c.linear_swiglu(&w.c).map_err(|er| format!("{name}: {er}"))?;
                same(&name, &gpu, &cpu, tol(dt))?;
            }
        }
    }
    let (i, k) = (37, 1000);
    let (w, x) = (Pair::new(cx, &[2 * i, k], DType::BF16)?, Pair::new(cx, &[2, k], DType::BF16)?);
    let cpu = x.c.linear_swiglu(&w.c).map_err(e)?;
    for &(vec, rows, unroll) in TILES {
        for (split, warps) in [(1, 4), (3, 6), (16, 16)] {
            let v = Variant::new(vec, rows, unroll, split, warps);
            let _forced = kiln::settings::GEMV_VARIANT.scoped(Some(v));
            let gpu = x.g.linear_swiglu(&w.g).map_err(|er| format!("swiglu {v}: {er}"))?;
            same(&format!("swiglu {v}"), &gpu, &cpu, tol(DType::BF16))?;
        }
    }
    Ok(())
}

/// `x.expert_linear_sum(down, ids, weights)` on both devices, compared.
fn check_sum(name: &str, x: &Pair, w: &Pair, ids: &Pair, r: &Pair) -> Res {
    let gpu = x.g.expert_linear_sum(&w.g, &ids.g, &r.g).map_err(|er| format!("{name}: {er}"))?;
    let cpu = x.c.expert_linear_sum(&w.c, &ids.c, &r.c).map_err(|er| format!("{name}: {er}"))?;
    same(name, &gpu, &cpu, tol(x.c.dtype()))
}

/// `x.expert_swiglu(gate_up, ids)` on both devices, compared.
fn check_swiglu(name: &str, x: &Pair, w: &Pair, ids: &Pair) -> Res {
    let gpu = x.g.expert_swiglu(&w.g, &ids.g).map_err(|er| format!("{name}: {er}"))?;
    let cpu = x.c.expert_swiglu(&w.c, &ids.c).map_err(|er| format!("{name}: {er}"))?;
    same(name, &gpu, &cpu, tol(x.c.dtype()))
}

/// MoE decode's two launches: the gate_up experts storing SwiGLU (`expert_swiglu`), then
/// the down projection + routed sum (`expert_linear_sum`): odd N and I, 1–3 tokens, k from
/// 1 to 10 (more slots than a row group's warps), strided x, int32 / negative ids, router
/// weights in the model dtype, every tile forced, the composed path for weights it
/// declines, and a zero row / nothing added for an index out of range.
fn experts_sum(cx: &mut Ctx) -> Res {
    for dt in DTYPES {
        for (ne, n, i) in [(5, 37, 100), (3, 130, 512), (4, 7, 129), (16, 2048, 768)] {
            let (w, gu) = (Pair::new(cx, &[ne, n, i], dt)?, Pair::new(cx, &[ne, 2 * i, n], dt)?);
            for (t, k) in [(1, 1), (1, 8), (3, 3), (2, 10)] {
                let name = |what: &str| format!("{dt} {t}x{k} of [{ne}, {n}, {i}] {what}");
                let ids = expert_ids(cx, t, k, ne, DType::I64)?;
                check_swiglu(&name("swiglu"), &Pair::new(cx, &[t, n], dt)?, &gu, &ids)?;
                let r = Pair::new(cx, &[t, k], DType::F32)?;
                check_sum(&name("contiguous"), &Pair::new(cx, &[t, k, i], dt)?, &w, &ids, &r)?;
                let xs = Pair::new(cx, &[t, k, i + 3], dt)?.map(|x| x.narrow(2, 1, i))?;
                check_sum(&name("strided x"), &xs, &w, &ids, &r)?;
                let i32s = expert_ids(cx, t, k, ne, DType::I32)?;
                let rd = Pair::new(cx, &[t, k], dt)?;
                check_sum(
                    &name("int32 ids, weights in dtype"),
                    &Pair::new(cx, &[t, k, i], dt)?,
                    &w,
                    &i32s,
                    &rd,
                )?;
            }
        }
        let (ne, n, i) = (6, 33, 129);
        let w = Pair::new(cx, &[ne, n, i], dt)?;
        let x = Pair::new(cx, &[2, 2, i], dt)?;
        let r = Pair::new(cx, &[2, 2], DType::F32)?;
        let neg = ids_of(cx, vec![-1, 2, -6, 0], 2, 2, DType::I64)?;
        check_sum(&format!("{dt} negative ids"), &x, &w, &neg, &r)?;
        let gu = Pair::new(cx, &[ne, 2 * i, 64], dt)?;
        check_swiglu(&format!("{dt} swiglu negative ids"), &Pair::new(cx, &[2, 64], dt)?, &gu, &neg)?;
        let ws = Pair::new(cx, &[ne, n, i + 5], dt)?.map(|t| t.narrow(2, 2, i))?;
        if gemv::experts_sum_declines(2, 2, ws.g.layout(), dt).is_none() {
            return Err("strided weights must take the composed path".into());
        }
        check_sum(
            &format!("{dt} strided weights (composed)"),
            &x,
            &ws,
            &expert_ids(cx, 2, 2, ne, DType::I64)?,
            &r,
        )?;
        // Slot 1 names expert `ne`: it adds nothing on the GPU (the CPU refuses it), so the
        // sum is that of slots 0 and 2 alone; its SwiGLU row is zero.
        let bad = ids_of(cx, vec![1, ne as i64, 0], 1, 3, DType::I64)?;
        let good = ids_of(cx, vec![1, 0], 1, 2, DType::I64)?;
        let (x3, r3) = (Pair::new(cx, &[1, 3, i], dt)?, Pair::new(cx, &[1, 3], DType::F32)?);
        let pick = |t: &Tensor| {
            let idx = Tensor::from_vec(vec![0i64, 2], &[2], t.device())?;
            t.index_select(1, &idx)
        };
        let got = x3.g.expert_linear_sum(&w.g, &bad.g, &r3.g).map_err(e)?;
        let cpu = pick(&x3.c).and_then(|x| x.expert_linear_sum(&w.c, &good.c, &pick(&r3.c)?)).map_err(e)?;
        same(&format!("{dt} sum beside a bad slot"), &got, &cpu, tol(dt))?;
        let row = Pair::new(cx, &[1, 64], dt)?;
        let act = row.g.expert_swiglu(&gu.g, &bad.g).and_then(|a| a.narrow(1, 1, 1)?.abs()?.max(&[], false));
        if act.and_then(|m| m.to_dtype(DType::F64)?.to_vec::<f64>()).map_err(e)? != [0.0] {
            return Err(format!("{dt} swiglu: a slot out of range must give a zero row"));
        }
    }
    // Every compiled tile under a few layouts.
    let (ne, n, i) = (4, 37, 1000);
    let w = Pair::new(cx, &[ne, n, i], DType::BF16)?;
    let gu = Pair::new(cx, &[ne, 2 * i, n + 3], DType::BF16)?;
    let x = Pair::new(cx, &[2, 3, i], DType::BF16)?;
    let xh = Pair::new(cx, &[2, n + 3], DType::BF16)?;
    let r = Pair::new(cx, &[2, 3], DType::F32)?;
    let ids = expert_ids(cx, 2, 3, ne, DType::I64)?;
    let cpu = x.c.expert_linear_sum(&w.c, &ids.c, &r.c).map_err(e)?;
    let cpu_act = xh.c.expert_swiglu(&gu.c, &ids.c).map_err(e)?;
    for &(vec, rows, unroll) in TILES {
        for (split, warps) in [(1, 4), (3, 6), (16, 16)] {
            let v = Variant::new(vec, rows, unroll, split, warps);
            let _forced = kiln::settings::GEMV_VARIANT.scoped(Some(v));
            let gpu =
                x.g.expert_linear_sum(&w.g, &ids.g, &r.g).map_err(|er| format!("experts sum {v}: {er}"))?;
            same(&format!("experts sum {v}"), &gpu, &cpu, tol(DType::BF16))?;
            let act = xh.g.expert_swiglu(&gu.g, &ids.g).map_err(|er| format!("experts swiglu {v}: {er}"))?;
            same(&format!("experts swiglu {v}"), &act, &cpu_act, tol(DType::BF16))?;
        }
    }
    Ok(())
}

/// `grouped_mm` (group ends read on the device) against the CPU backend: odd M, N and K
/// (K off the kernel's 32-deep step), K and N multiples of 8 (16-byte loads), empty
/// groups, rows past the last end (zeros), a transposed `[G, N, K]` weight view (F.linear's
/// expert layout), more groups than the kernel's 128-thread scan takes at once, and a
/// capture in a CUDA graph, which a host read of the ends would break.
fn grouped(cx: &mut Ctx) -> Res {
    let many: Vec<i32> = (1..=200).map(|g| (g * 1000 / 200 - (g % 3) * 2).max(0)).collect();
    let cases: [(usize, usize, usize, Vec<i32>); 6] = [
        (1, 16, 8, vec![1]),
        // K and N multiples of 8, several K steps and a partial one: 16-byte loads.
        (515, 136, 264, vec![3, 130, 130, 400, 515]),
        (37, 40, 70, vec![5, 5, 20, 33]),
        (300, 96, 130, vec![0, 64, 65, 200, 300]),
        (129, 1, 3, vec![100, 129]),
        (1000, 72, 66, many),
    ];
    for dt in DTYPES {
        for (m, k, n, ends) in &cases {
            let g = ends.len();
            let a = Pair::new(cx, &[*m, *k], dt)?;
            let offs = Tensor::from_vec(ends.clone(), &[g], Device::Cpu).map_err(e)?;
            let offs = Pair { g: offs.to_device(cx.dev).map_err(e)?, c: offs };
            let b = Pair::new(cx, &[g, *k, *n], dt)?;
            let bt = Pair::new(cx, &[g, *n, *k], dt)?.map(|t| t.transpose(1, 2))?;
            for (what, b) in [("b", &b), ("b transposed", &bt)] {
                let name = format!("{dt} {m}x{k} · {g}x{k}x{n} {what}");
                let gpu = a.g.grouped_mm(&b.g, &offs.g).map_err(|er| format!("{name}: {er}"))?;
                let cpu = a.c.grouped_mm(&b.c, &offs.c).map_err(|er| format!("{name}: {er}"))?;
                same(&name, &gpu, &cpu, tol(dt))?;
            }
        }
    }
    let dev = kiln::cuda::device(0).map_err(e)?;
    let a = Pair::new(cx, &[50, 24], DType::BF16)?;
    let b = Pair::new(cx, &[3, 24, 40], DType::BF16)?;
    let offs = Tensor::from_vec(vec![10i32, 10, 45], &[3], Device::Cpu).map_err(e)?;
    let offs = Pair { g: offs.to_device(cx.dev).map_err(e)?, c: offs };
    dev.begin_capture().map_err(e)?;
    let captured = a.g.grouped_mm(&b.g, &offs.g);
    let graph = dev.end_capture().map_err(e)?;
    let y = captured.map_err(e)?;
    graph.replay().map_err(e)?;
    same("grouped_mm in a CUDA graph", &y, &a.c.grouped_mm(&b.c, &offs.c).map_err(e)?, tol(DType::BF16))
}

/// `expert_groups` (a counting sort on the device) against the CPU's stable sort: the same
/// group ends, a permutation whose rows name each pair's token inside its expert's group
/// (the GPU's order within a group is free), and a mixture-of-experts layer run through it
/// (gather, two `grouped_mm`s, scatter back) equal to the CPU's. Sizes past the kernel's
/// 1024 threads in pairs and in experts, one expert, negative indices.
fn expert_groups(cx: &mut Ctx) -> Res {
    for (t, k, ne) in [(1, 1, 1), (5, 2, 3), (700, 8, 128), (3001, 4, 1500), (64, 8, 7)] {
        cx.seed += 1;
        let mut state = cx.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let idx: Vec<i64> = (0..t * k)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Skewed towards low experts (as routers are), a few negative (wrapped).
                let e = ((state >> 11) % ne as u64).min((state >> 40) % ne as u64) as i64;
                if state.is_multiple_of(17) {
                    e - ne as i64
                } else {
                    e
                }
            })
            .collect();
        let name = format!("expert_groups {t}x{k} of {ne}");
        let c = Tensor::from_vec(idx.clone(), &[t, k], Device::Cpu).map_err(e)?;
        let gg = c.to_device(cx.dev).map_err(e)?.expert_groups(ne).map_err(|er| format!("{name}: {er}"))?;
        let cg = c.expert_groups(ne).map_err(e)?;
        let ends = gg.ends.to_vec::<i32>().map_err(e)?;
        if ends != cg.ends.to_vec::<i32>().map_err(e)? {
            return Err(format!("{name}: group ends differ"));
        }
        let (rows, slot_rows) =
            (gg.rows.to_vec::<i64>().map_err(e)?, gg.slot_rows.to_vec::<i64>().map_err(e)?);
        let mut seen = vec![false; t * k];
        for (s, &p) in slot_rows.iter().enumerate() {
            let ex = idx[s].rem_euclid(ne as i64) as usize;
            let (lo, hi) = (if ex == 0 { 0 } else { ends[ex - 1] as i64 }, ends[ex] as i64);
            if p < lo || p >= hi || seen[p as usize] || rows[p as usize] != (s / k) as i64 {
                return Err(format!("{name}: pair {s} (expert {ex}) got row {p}, groups {lo}..{hi}"));
            }
            seen[p as usize] = true;
        }
        let (h, inter) = (40, 24);
        let x = Pair::new(cx, &[t, h], DType::BF16)?;
        let up = Pair::new(cx, &[ne, inter, h], DType::BF16)?.map(|w| w.transpose(1, 2))?;
        let down = Pair::new(cx, &[ne, h, inter], DType::BF16)?.map(|w| w.transpose(1, 2))?;
        let layer = |x: &Tensor, up: &Tensor, down: &Tensor, g: &kiln::ExpertGroups| {
            let hid = x.index_select(0, &g.rows)?.grouped_mm(up, &g.ends)?.silu()?;
            hid.grouped_mm(down, &g.ends)?.index_select(0, &g.slot_rows)
        };
        let gpu = layer(&x.g, &up.g, &down.g, &gg).map_err(|er| format!("{name}: {er}"))?;
        let cpu = layer(&x.c, &up.c, &down.c, &cg).map_err(|er| format!("{name}: {er}"))?;
        same(&format!("{name} layer"), &gpu, &cpu, 2.0 * tol(DType::BF16))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cases: &[Case] = &[
        ("shapes", shapes),
        ("views", views),
        ("variants", variants),
        ("experts", experts),
        ("experts_sum", experts_sum),
        ("swiglu", swiglu),
        ("grouped", grouped),
        ("expert_groups", expert_groups),
    ];
    kiln::testing::run("gpu_linear", cases)
}
