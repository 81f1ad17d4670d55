//! The linalg kernels on the GPU against the CPU backend (`linalg_inv.cu`, `linalg_trsm.cu`,
//! `linalg_lu.cu`) on fresh random inputs: every size the closed-form inverse takes (batches
//! over several blocks, singular matrices), triangular solves of odd sizes in every (upper,
//! left, unitriangular) form with batch broadcasting and non-contiguous operands, LU factors,
//! pivots, determinants and solves for f32 / f64 / complex64 on both kernel paths (shared
//! memory and one launch per column), the backward ops composed of them, and the errors of
//! what has no kernel yet.

use kiln::testing::{e, same, Ctx, CPU};
use kiln::{DType, Tensor};
use std::process::ExitCode;

type R = std::result::Result<(), String>;

const DTYPES: [DType; 2] = [DType::F32, DType::F64];

fn tol(dt: DType) -> f64 {
    if dt == DType::F64 {
        1e-12
    } else {
        2e-5
    }
}

/// `[.., n, n]` on the GPU and the CPU: random entries of size ~1/n plus 2·I, so every
/// leading minor is well conditioned (inverses and triangular solves stay accurate).
fn matrices(cx: &mut Ctx, lead: &[usize], n: usize, dt: DType) -> kiln::Result<(Tensor, Tensor)> {
    let shape = [lead, &[n, n]].concat();
    let eye: Vec<f64> = (0..n * n).map(|k| if k % (n + 1) == 0 { 2.0 } else { 0.0 }).collect();
    let eye = Tensor::from_vec(eye, &[n, n], CPU)?;
    let (_, c) = cx.pair(&shape, DType::F64, 1.0 / n as f64)?;
    let c = c.add(&eye)?.to_dtype(dt)?;
    Ok((c.to_device(cx.dev)?, c))
}

/// Every closed-form size, batched, unbatched and transposed (a non-contiguous view);
/// a singular matrix is an error; 5 × 5 has no kernel yet and says so.
fn inv(cx: &mut Ctx) -> R {
    for dt in DTYPES {
        for n in 1..=4 {
            for lead in [&[][..], &[7], &[3, 5], &[0]] {
                let (g, c) = matrices(cx, lead, n, dt).map_err(e)?;
                let name = format!("inv {dt} {lead:?} {n}x{n}");
                same(&name, &g.linalg_inv().map_err(e)?, &c.linalg_inv().map_err(e)?, tol(dt))?;
                let (gt, ct) = (g.transpose(-1, -2).map_err(e)?, c.transpose(-1, -2).map_err(e)?);
                let name = format!("{name} transposed");
                same(&name, &gt.linalg_inv().map_err(e)?, &ct.linalg_inv().map_err(e)?, tol(dt))?;
            }
        }
        let (g, _) = matrices(cx, &[9], 3, dt).map_err(e)?;
        // Matrix 6 gets a zero row: singular, and the first to be.
        let zero_row = Tensor::zeros(&[1, 1, 3], dt, cx.dev).map_err(e)?;
        g.narrow(0, 6, 1).map_err(e)?.narrow(1, 1, 1).map_err(e)?.copy_(&zero_row).map_err(e)?;
        let msg = g.linalg_inv().err().map(|x| x.to_string()).unwrap_or_default();
        if !msg.contains("matrix 6 is singular") {
            return Err(format!("singular {dt}: got {msg:?}"));
        }
        for n in [3, 4] {
            let (g, c) = matrices(cx, &[301], n, dt).map_err(e)?;
            let name = format!("inv {dt} [301] {n}x{n}");
            same(&name, &g.linalg_inv().map_err(e)?, &c.linalg_inv().map_err(e)?, tol(dt))?;
            // Singular matrices 200 and 290 (other blocks): the first is named.
            let zero_row = Tensor::zeros(&[1, 1, n], dt, cx.dev).map_err(e)?;
            for m in [290, 200] {
                g.narrow(0, m, 1).map_err(e)?.narrow(1, 1, 1).map_err(e)?.copy_(&zero_row).map_err(e)?;
            }
            let msg = g.linalg_inv().err().map(|x| x.to_string()).unwrap_or_default();
            if !msg.contains("matrix 200 is singular") {
                return Err(format!("singular {dt} {n}x{n} in [301]: got {msg:?}"));
            }
            let name = format!("inv {dt} [301] {n}x{n} after a singular call");
            let (g, c) = matrices(cx, &[301], n, dt).map_err(e)?;
            same(&name, &g.linalg_inv().map_err(e)?, &c.linalg_inv().map_err(e)?, tol(dt))?;
        }
        let (g, c) = matrices(cx, &[2], 0, dt).map_err(e)?;
        same(&format!("inv {dt} [2, 0, 0]"), &g.linalg_inv().map_err(e)?, &c.linalg_inv().map_err(e)?, 0.0)?;
        let (g, _) = matrices(cx, &[2], 5, dt).map_err(e)?;
        if !matches!(g.linalg_inv(), Err(kiln::Error::NotImplemented { .. })) {
            return Err(format!("inv {dt} 5x5 must be NotImplemented on CUDA"));
        }
    }
    Ok(())
}

/// Odd and edge sizes up to 64 with 1, 8 and 13 right-hand sides, every form; A
/// broadcast over B's batch, transposed operands; 65 has no kernel yet and says so.
fn solve_triangular(cx: &mut Ctx) -> R {
    for dt in DTYPES {
        for n in [1, 5, 16, 17, 31, 32, 33, 64] {
            let (ga, ca) = matrices(cx, &[3], n, dt).map_err(e)?;
            // 130: right-hand sides over two blocks.
            for k in [1, 8, 13, 130] {
                for (upper, left, unit) in (0..8).map(|f| (f & 1 != 0, f & 2 != 0, f & 4 != 0)) {
                    let shape = if left { [2, 3, n, k] } else { [2, 3, k, n] };
                    let (gb, cb) = cx.pair(&shape, dt, 1.0).map_err(e)?;
                    let name =
                        format!("solve_triangular {dt} n {n} k {k} upper {upper} left {left} unit {unit}");
                    let solve = |a: &Tensor, b: &Tensor| a.linalg_solve_triangular(b, upper, left, unit);
                    same(&name, &solve(&ga, &gb).map_err(e)?, &solve(&ca, &cb).map_err(e)?, tol(dt))?;
                    if k == 13 {
                        let t = |x: &Tensor| x.transpose(-1, -2);
                        let (gt, ct) = (t(&ga).map_err(e)?, t(&ca).map_err(e)?);
                        let name = format!("{name} A transposed");
                        same(&name, &solve(&gt, &gb).map_err(e)?, &solve(&ct, &cb).map_err(e)?, tol(dt))?;
                    }
                }
            }
        }
        let (ga, _) = matrices(cx, &[], 65, dt).map_err(e)?;
        let (gb, _) = cx.pair(&[65, 2], dt, 1.0).map_err(e)?;
        if !matches!(
            ga.linalg_solve_triangular(&gb, false, true, false),
            Err(kiln::Error::NotImplemented { .. })
        ) {
            return Err(format!("solve_triangular {dt} 65x65 must be NotImplemented on CUDA"));
        }
    }
    Ok(())
}

/// The Gated DeltaNet's batches: 16 / 32 / 64-square unit-lower systems, 256 right-hand
/// sides (values and keys side by side), over heads × chunks.
fn delta_net_solves(cx: &mut Ctx) -> R {
    for c in [16, 32, 64] {
        let (ga, ca) = matrices(cx, &[2, 4, 3], c, DType::F32).map_err(e)?;
        let (gb, cb) = cx.pair(&[2, 4, 3, c, 256], DType::F32, 1.0).map_err(e)?;
        let solve = |a: &Tensor, b: &Tensor| a.linalg_solve_triangular(b, false, true, true);
        same(
            &format!("delta net chunk {c}"),
            &solve(&ga, &gb).map_err(e)?,
            &solve(&ca, &cb).map_err(e)?,
            2e-5,
        )?;
    }
    Ok(())
}

const LU_DTYPES: [DType; 3] = [DType::F32, DType::F64, DType::C64];

/// `[.., m, n]` random (unconditioned: pivoting matters) on the GPU and the CPU; complex64
/// from pairs of f32.
fn general(cx: &mut Ctx, shape: &[usize], dt: DType) -> kiln::Result<(Tensor, Tensor)> {
    if dt != DType::C64 {
        return cx.pair(shape, dt, 1.0);
    }
    let (_, c) = cx.pair(&[shape, &[2]].concat(), DType::F32, 1.0)?;
    let c = Tensor::from_raw_bytes(&c.to_raw_bytes()?, shape, DType::C64, CPU)?;
    Ok((c.to_device(cx.dev)?, c))
}

/// A complex tensor as f32 pairs on the CPU (`same` compares real dtypes); others as they are.
fn real(t: &Tensor) -> kiln::Result<Tensor> {
    if t.dtype() != DType::C64 {
        return Ok(t.clone());
    }
    Tensor::from_raw_bytes(&t.to_raw_bytes()?, &[t.shape(), &[2]].concat(), DType::F32, CPU)
}

fn same_c(name: &str, g: &Tensor, c: &Tensor, tol: f64) -> R {
    same(name, &real(g).map_err(e)?, &real(c).map_err(e)?, tol)
}

/// Factors and pivots (exactly: the kernel does the CPU's operations in its order), det,
/// and solves with broadcast batches, on square and rectangular matrices over both paths
/// (≥ 72 × 72 real, ≥ 51 × 51 complex: one launch per column); singular matrices factor
/// with a zero pivot and det 0.
fn lu(cx: &mut Ctx) -> R {
    for dt in LU_DTYPES {
        for (m, n) in [
            (1, 1),
            (3, 3),
            (5, 5),
            (17, 17),
            (33, 33),
            (64, 64),
            (100, 100),
            (257, 257),
            (5, 3),
            (3, 7),
            (90, 70),
            (60, 110),
        ] {
            let (g, c) = general(cx, &[2, m, n], dt).map_err(e)?;
            let name = format!("lu_factor {dt} {m}x{n}");
            let ((gl, gp), (cl, cp)) = (g.linalg_lu_factor().map_err(e)?, c.linalg_lu_factor().map_err(e)?);
            same(&format!("{name} pivots"), &gp, &cp, 0.0)?;
            same_c(&name, &gl, &cl, 1e-12)?;
            if m != n {
                continue;
            }
            let name = format!("det {dt} {n}x{n}");
            same_c(&name, &g.linalg_det().map_err(e)?, &c.linalg_det().map_err(e)?, 1e-12)?;
            for k in [1, 8, 40] {
                let (gb, cb) = general(cx, &[3, 1, n, k], dt).map_err(e)?;
                let name = format!("lu_solve {dt} {n}x{n} k {k}");
                let (gx, cx_) =
                    (gl.linalg_lu_solve(&gp, &gb).map_err(e)?, cl.linalg_lu_solve(&cp, &cb).map_err(e)?);
                same_c(&name, &gx, &cx_, if dt == DType::F64 { 1e-9 } else { 1e-4 })?;
            }
        }
        for n in [3, 80] {
            // Matrix 1 of 3 gets a zero row: a zero pivot, det 0.
            let (g, _) = general(cx, &[3, n, n], dt).map_err(e)?;
            let zero_row = Tensor::zeros(&[1, 1, n], dt, cx.dev).map_err(e)?;
            g.narrow(0, 1, 1).map_err(e)?.narrow(1, 2, 1).map_err(e)?.copy_(&zero_row).map_err(e)?;
            let c = g.to_device(CPU).map_err(e)?;
            let name = format!("singular {dt} {n}x{n}");
            let ((gl, gp), (cl, cp)) = (g.linalg_lu_factor().map_err(e)?, c.linalg_lu_factor().map_err(e)?);
            same(&format!("{name} pivots"), &gp, &cp, 0.0)?;
            same_c(&name, &gl, &cl, 1e-12)?;
            same_c(&format!("{name} det"), &g.linalg_det().map_err(e)?, &c.linalg_det().map_err(e)?, 1e-12)?;
        }
        let (g, c) = general(cx, &[2, 0, 0], dt).map_err(e)?;
        same_c(
            &format!("det {dt} [2, 0, 0]"),
            &g.linalg_det().map_err(e)?,
            &c.linalg_det().map_err(e)?,
            0.0,
        )?;
    }
    Ok(())
}

/// The backward ops composed of the kernels above (inverse, triangular solve, matmul).
fn backward(cx: &mut Ctx) -> R {
    for dt in DTYPES {
        let (ga, ca) = matrices(cx, &[5], 4, dt).map_err(e)?;
        let (gg, cg) = cx.pair(&[5, 4, 4], dt, 1.0).map_err(e)?;
        let name = format!("inv_backward {dt}");
        same(
            &name,
            &ga.linalg_inv_backward(&gg).map_err(e)?,
            &ca.linalg_inv_backward(&cg).map_err(e)?,
            tol(dt),
        )?;
        let (ga, ca) = matrices(cx, &[3], 33, dt).map_err(e)?;
        let (gb, cb) = cx.pair(&[3, 33, 8], dt, 1.0).map_err(e)?;
        let (gg, cg) = cx.pair(&[3, 33, 8], dt, 1.0).map_err(e)?;
        let (gx, gy) = ga.linalg_solve_triangular_backward(&gb, &gg, false, true, false).map_err(e)?;
        let (cx_, cy) = ca.linalg_solve_triangular_backward(&cb, &cg, false, true, false).map_err(e)?;
        same(&format!("solve_triangular_backward {dt} grad A"), &gx, &cx_, tol(dt))?;
        same(&format!("solve_triangular_backward {dt} grad B"), &gy, &cy, tol(dt))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cases: &[kiln::testing::Case] = &[
        ("inv", inv),
        ("solve_triangular", solve_triangular),
        ("delta_net_solves", delta_net_solves),
        ("lu", lu),
        ("backward", backward),
    ];
    kiln::testing::run("gpu_linalg", cases)
}
