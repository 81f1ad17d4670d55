//! The `torch.linalg` cases of the fixtures (`inv`, `solve_triangular`, `qr`, `svd`,
//! `svdvals`, `pinv`, `lstsq`, `lu_factor`, `lu_solve`, `det` and the backward ops of
//! `det`, `inv`, `solve` and `solve_triangular`), run through kiln's linalg ops. The SVD
//! case stores only the singular values, so its factors are checked here: `U diag(S) Vh`
//! rebuilds the input and U, Vh are orthogonal (their signs are free). The complex cases
//! (named `*_c64`) store complex64 as f32 `[..., 2]` (re, im): viewed as `DType::C64` and
//! back here.

use kiln::{DType, Error, Result, Tensor};
use serde_json::Value;

/// The ops this module runs.
pub const OPS: [&str; 14] = [
    "inv",
    "solve_triangular",
    "qr",
    "svd",
    "svdvals",
    "pinv",
    "lstsq",
    "lu_factor",
    "lu_solve",
    "det",
    "det_backward",
    "inv_backward",
    "solve_backward",
    "solve_triangular_backward",
];

/// A fixture's f32 `[..., 2]` (re, im) as complex64 `[...]` (a view of the same storage).
fn to_complex(t: &Tensor) -> Result<Tensor> {
    t.contiguous()?.view_as_complex()
}

/// complex64 `[...]` as the fixtures store it: f32 `[..., 2]`.
fn from_complex(t: &Tensor) -> Result<Tensor> {
    t.view_as_real()
}

/// Largest |x − y| over two tensors of one shape.
fn max_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    let (x, y) = (a.to_f64_vec()?, b.to_f64_vec()?);
    Ok(x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max))
}

/// Largest |Mᵀ M − I| (or |M Mᵀ − I| with `rows`) over a batch of matrices.
fn orthogonality_error(m: &Tensor, rows: bool) -> Result<f64> {
    let mt = m.transpose(-1, -2)?;
    let g = if rows { m.matmul(&mt)? } else { mt.matmul(m)? };
    let n = g.size(-1)?;
    let v = g.to_f64_vec()?;
    Ok(v.iter()
        .enumerate()
        .map(|(k, &x)| (x - if k % n == (k / n) % n { 1.0 } else { 0.0 }).abs())
        .fold(0.0, f64::max))
}

/// The case's outputs and the (atol, rtol) to compare them with.
pub fn compute(case: &str, op: &str, args: &Value, ins: &[Tensor]) -> Result<(Vec<Tensor>, f64, f64)> {
    let flag = |k: &str, default: bool| args.get(k).and_then(|v| v.as_bool()).unwrap_or(default);
    let complex = case.ends_with("_c64");
    // The inputs as kiln computes with them, and an output as the fixture stores it.
    let inputs = || -> Result<Vec<Tensor>> {
        ins.iter().map(|t| if complex { to_complex(t) } else { Ok(t.clone()) }).collect()
    };
    let stored = |t: Tensor| if complex { from_complex(&t) } else { Ok(t) };
    let outputs = match op {
        "inv" => vec![ins[0].linalg_inv()?],
        "solve_triangular" => {
            vec![ins[0].linalg_solve_triangular(
                &ins[1],
                flag("upper", false),
                flag("left", true),
                flag("unitriangular", false),
            )?]
        }
        "qr" => {
            let (q, r) = ins[0].linalg_qr()?;
            vec![q, r]
        }
        "svd" => {
            let a = &ins[0];
            let (u, s, vh) = a.linalg_svd(flag("full_matrices", true))?;
            let k = s.size(-1)?;
            let us = u.narrow(-1, 0, k)?.mul(&s.unsqueeze(-2)?)?;
            let rebuilt = max_diff(&us.matmul(&vh.narrow(-2, 0, k)?)?, a)?;
            let scale = a.abs()?.max(&[], false)?.item()?;
            let tol = if a.dtype() == DType::F64 { 1e-12 } else { 1e-5 };
            let ortho = orthogonality_error(&u, false)?.max(orthogonality_error(&vh, true)?);
            if rebuilt > tol * scale || ortho > tol {
                return Err(Error::invalid(
                    "svd",
                    format!("U S Vh off by {rebuilt:.2e}, orthogonality by {ortho:.2e}"),
                ));
            }
            vec![s]
        }
        "svdvals" => vec![ins[0].linalg_svdvals()?],
        "pinv" => {
            // The ill-conditioned case keeps σ = 1e-9 beside σ_max = 1e3: any SVD computes
            // that σ to ± eps · σ_max, 2e-4 of itself, so two correct pinvs differ by that
            // much in their largest entries. Held to 1e-3 of the largest entry: keeping
            // σ = 1e-12 (below the cutoff) or dropping σ = 1e-9 is off by far more.
            let p = ins[0].linalg_pinv()?;
            let scale = p.abs()?.max(&[], false)?.item()?;
            return Ok((vec![p], 1e-3 * scale, 0.0));
        }
        "lstsq" => vec![ins[0].linalg_lstsq(&ins[1])?],
        "lu_factor" => {
            let (lu, pivots) = to_complex(&ins[0])?.linalg_lu_factor()?;
            vec![from_complex(&lu)?, pivots]
        }
        // The case gives A and B: lu_solve of A's factors.
        "lu_solve" => {
            let (lu, pivots) = to_complex(&ins[0])?.linalg_lu_factor()?;
            vec![from_complex(&lu.linalg_lu_solve(&pivots, &to_complex(&ins[1])?)?)?]
        }
        // The 0-dim determinant is stored as [1] (then [1, 2] as re, im).
        "det" => vec![from_complex(&to_complex(&ins[0])?.linalg_det()?.reshape(&[1])?)?],
        "det_backward" => {
            let x = inputs()?;
            vec![stored(x[0].linalg_det_backward(&x[1])?)?]
        }
        "inv_backward" => {
            let x = inputs()?;
            vec![stored(x[0].linalg_inv_backward(&x[1])?)?]
        }
        "solve_backward" => {
            let x = inputs()?;
            let (ga, gb) = x[0].linalg_solve_backward(&x[1], &x[2])?;
            vec![stored(ga)?, stored(gb)?]
        }
        "solve_triangular_backward" => {
            let x = inputs()?;
            let (ga, gb) = x[0].linalg_solve_triangular_backward(
                &x[1],
                &x[2],
                flag("upper", false),
                flag("left", true),
                flag("unitriangular", false),
            )?;
            vec![stored(ga)?, stored(gb)?]
        }
        other => return Err(Error::invalid("fixtures", format!("{other} is not a linalg op"))),
    };
    // The LU family computes in complex128 against LAPACK's complex64: within ~1e-6 of
    // each value (det 1.2e5 is off by 3e-2), so held to 1e-5 relative.
    let rtol = if matches!(op, "lu_factor" | "lu_solve" | "det") { 1e-5 } else { 1e-4 };
    Ok((outputs, 1e-5, rtol))
}
