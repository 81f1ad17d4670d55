//! The PyTorch fixture cases of `ops.json` (made by `torch` in `fixtures/make_*.py`), run
//! against kiln's ops on one device: `kiln check` and the bench's correctness suite print
//! them, and the tests below hold the CPU to them.

mod linalg;

use crate::io::safetensors::SafetensorsFile;
use crate::{DType, Device, Result, Tensor};
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

#[derive(Debug, Deserialize)]
struct OpsFile {
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize, Clone)]
struct Case {
    pub case: String,
    pub op: String,
    #[serde(default)]
    pub args: serde_json::Value,
    pub n_in: usize,
    pub n_out: usize,
}

/// How one fixture case went.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every output matched the PyTorch reference within tolerance.
    Pass {
        /// Largest absolute difference from the reference over the finite elements.
        max_err: f64,
    },
    /// A mismatch or error, described.
    Fail(String),
    /// kiln has no implementation of the op on this device.
    NotImplemented,
}

/// One case's result, as `kiln check` prints it.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case's name in `ops.json`.
    pub case: String,
    /// The op it exercises.
    pub op: String,
    /// How it went.
    pub outcome: Outcome,
}

/// What an implemented case computes: outputs plus the tolerance to compare them with.
struct Computed {
    outputs: Vec<Tensor>,
    atol: f64,
    rtol: f64,
}

fn arg_f64(c: &Case, k: &str) -> Option<f64> {
    c.args.get(k).and_then(|v| v.as_f64())
}

/// Ops kiln computes on the CPU only (a CUDA tensor gets `Error::NotImplemented`).
const CPU_ONLY: [&str; 1] = ["interpolate"];

/// The inputs (`in0…`) `compute` reads for `op`: a case declaring fewer is a FAIL naming
/// it, not an index out of bounds.
fn inputs_needed(op: &str) -> usize {
    match op {
        "logspace" => 0,
        "put_" | "sdpa" | "grouped_mm" | "solve_backward" | "solve_triangular_backward" => 3,
        "scaled_mm" | "batch_norm" => 4,
        "rms_norm"
        | "take"
        | "mse_loss"
        | "conv2d"
        | "conv3d"
        | "heaviside"
        | "interpolate"
        | "special.laguerre_polynomial_l"
        | "solve_triangular"
        | "lstsq"
        | "lu_solve"
        | "det_backward"
        | "inv_backward" => 2,
        op if op.starts_with("lt/le/gt/ge/eq on uint32") => 2,
        _ => 1,
    }
}

/// Computes one case, or `None` when kiln does not have the op yet.
fn compute(c: &Case, ins: &[Tensor], device: Device) -> Option<Result<Computed>> {
    let dim = c.args.get("dim").and_then(|v| v.as_i64()).unwrap_or(-1) as isize;
    let r = |x: Result<Vec<Tensor>>| Some(x.map(|outputs| Computed { outputs, atol: 1e-5, rtol: 1e-4 }));
    // Ops without GPU kernels yet: on a GPU these cases are not implemented, not failed.
    if device != Device::Cpu && CPU_ONLY.contains(&c.op.as_str()) {
        return None;
    }
    match c.op.as_str() {
        "softmax" => r(ins[0].softmax(dim).map(|t| vec![t])),
        "log_softmax" => r(ins[0].log_softmax(dim).map(|t| vec![t])),
        "to_dtype" => {
            let dt = DType::parse(c.args.get("dtype")?.as_str()?)?;
            r((|| {
                let y = ins[0].to_dtype(dt)?;
                // Stored as raw bits: float8 as u8, bf16 as i16.
                let bits = Tensor::from_raw_bytes(
                    &y.to_raw_bytes()?,
                    y.shape(),
                    if dt.size() == 1 { DType::U8 } else { DType::I16 },
                    Device::Cpu,
                )?;
                let mut outs = vec![bits];
                if c.n_out > 1 {
                    outs.push(y.to_dtype(DType::F32)?);
                }
                Ok(outs)
            })())
            .map(|c| {
                c.map(|mut c| {
                    c.atol = 0.0;
                    c.rtol = 0.0;
                    c
                })
            })
        }
        "std_mean" | "var_mean" => {
            let corr = arg_f64(c, "correction").unwrap_or(1.0);
            let f = if c.op == "std_mean" { Tensor::std_mean } else { Tensor::var_mean };
            r(f(&ins[0], &[dim], corr, false).map(|(a, b)| vec![a, b]))
        }
        "rms_norm" => {
            let w = &ins[1];
            r(ins[0].rms_norm(w.shape(), Some(w), arg_f64(c, "eps")).map(|t| vec![t]))
        }
        "take" => r(ins[0].take(&ins[1]).map(|t| vec![t])),
        "put_" => {
            let acc = c.args.get("accumulate").and_then(|v| v.as_bool()).unwrap_or(false);
            r((|| {
                let x = ins[0].copy()?;
                x.put_(&ins[1], &ins[2], acc)?;
                Ok(vec![x])
            })())
        }
        "topk" => {
            // "softmax then top-k": the fused router.
            let k = c.args.get("k")?.as_u64()? as usize;
            r(ins[0].router_topk(k, crate::Router::Softmax, None).map(|(v, i)| vec![v, i]))
        }
        "bincount" => {
            let minlength = c.args.get("minlength").and_then(|v| v.as_u64()).unwrap_or(0) as usize;
            r(ins[0].bincount(ins.get(1), minlength).map(|t| vec![t]))
        }
        "mse_loss" => {
            let red = match c.args.get("reduction").and_then(|v| v.as_str()).unwrap_or("mean") {
                "sum" => crate::Reduction::Sum,
                "none" => crate::Reduction::None,
                _ => crate::Reduction::Mean,
            };
            // kiln's reduced loss is 0-dim, as PyTorch's; the fixture stores it as [1].
            r(ins[0]
                .mse_loss(&ins[1], red)
                .and_then(|t| if t.rank() == 0 { t.reshape(&[1]) } else { Ok(t) })
                .map(|t| vec![t]))
        }
        "scaled_mm" => r(scaled_mm(ins, &c.args).map(|t| vec![t])),
        "conv2d" | "conv3d" => {
            // An int, or one value per spatial dim.
            let per_dim = |k: &str, default: usize| -> Option<Vec<usize>> {
                match c.args.get(k) {
                    None => Some(vec![default]),
                    Some(v) if v.is_u64() => Some(vec![v.as_u64()? as usize]),
                    Some(v) => v.as_array()?.iter().map(|x| x.as_u64().map(|x| x as usize)).collect(),
                }
            };
            let p = crate::Conv {
                stride: per_dim("stride", 1)?,
                padding: per_dim("padding", 0)?,
                dilation: per_dim("dilation", 1)?,
                groups: c.args.get("groups").and_then(|v| v.as_u64()).unwrap_or(1) as usize,
            };
            let f = if c.op == "conv2d" { Tensor::conv2d } else { Tensor::conv3d };
            r(f(&ins[0], &ins[1], ins.get(2), &p).map(|t| vec![t]))
        }
        "group_norm" => {
            let groups = c.args.get("num_groups")?.as_u64()? as usize;
            let eps = arg_f64(c, "eps").unwrap_or(1e-5);
            r(ins[0].group_norm(groups, ins.get(1), ins.get(2), eps).map(|t| vec![t]))
        }
        "pad" => {
            let amounts: Vec<isize> = c
                .args
                .get("pad")?
                .as_array()?
                .iter()
                .map(|v| v.as_i64().map(|x| x as isize))
                .collect::<Option<_>>()?;
            let mode =
                crate::PadMode::parse(c.args.get("mode")?.as_str()?, arg_f64(c, "value").unwrap_or(0.0))?;
            r(ins[0].pad(&amounts, mode).map(|t| vec![t]))
        }
        "sdpa" => {
            let flag = |k: &str| c.args.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
            let o = crate::Sdpa {
                attn_mask: ins.get(3),
                is_causal: flag("is_causal"),
                enable_gqa: flag("enable_gqa"),
                ..crate::Sdpa::default()
            };
            r(ins[0].scaled_dot_product_attention(&ins[1], &ins[2], &o).map(|t| vec![t]))
        }
        "heaviside" => r(ins[0].heaviside(&ins[1]).map(|t| vec![t])),
        // f64 recurrence vs PyTorch's f32 one: ~1e-6 relative at n = 30 (values to 2.4e5).
        "special.laguerre_polynomial_l" => r(ins[0].special_laguerre_polynomial_l(&ins[1]).map(|t| vec![t]))
            .map(|c| c.map(|c| Computed { atol: 1e-5, rtol: 1e-5, ..c })),
        "interpolate" => {
            let mode = crate::InterpolateMode::parse(c.args.get("mode")?.as_str()?)?;
            let resize = match (c.args.get("scale_factor").and_then(|v| v.as_f64()), c.args.get("size")) {
                (Some(s), _) => crate::Resize::Scale(vec![s]),
                (None, Some(v)) => crate::Resize::Size(
                    v.as_array()?.iter().map(|x| x.as_u64().map(|x| x as usize)).collect::<Option<_>>()?,
                ),
                (None, None) => return None,
            };
            let ac = c.args.get("align_corners").and_then(|v| v.as_bool());
            // in1 = grad_output; out1 = grad_input.
            r((|| {
                let y = ins[0].interpolate(&resize, mode, ac)?;
                Ok(vec![y, ins[1].interpolate_backward(ins[0].shape(), &resize, mode, ac)?])
            })())
        }
        "batch_norm" => {
            let eps = arg_f64(c, "eps").unwrap_or(1e-5);
            // in0..3 = x, weight, bias, grad_output; out0..3 = y, grad input, weight, bias.
            r((|| {
                let (y, mean, invstd) = ins[0].batch_norm_train(Some(&ins[1]), Some(&ins[2]), eps)?;
                let (gx, gw, gb) = ins[3].batch_norm_backward(&ins[0], Some(&ins[1]), &mean, &invstd)?;
                Ok(vec![y, gx, gw, gb])
            })())
        }
        "grouped_mm" => r(ins[0].grouped_mm(&ins[1], &ins[2]).map(|t| vec![t])),
        "frexp" => r(ins[0].frexp().map(|(m, e)| vec![m, e])),
        "logspace" => {
            let (s, e, n, b) =
                (arg_f64(c, "start")?, arg_f64(c, "end")?, arg_f64(c, "steps")?, arg_f64(c, "base")?);
            r(Tensor::logspace(s, e, n as usize, b, DType::F32, device).map(|t| vec![t]))
        }
        op if linalg::OPS.contains(&op) => {
            Some(linalg::compute(&c.case, op, &c.args, ins).map(|(outputs, atol, rtol)| Computed {
                outputs,
                atol,
                rtol,
            }))
        }
        op if op.starts_with("lt/le/gt/ge/eq on uint32") => r((|| {
            let (a, b) = (ins[0].to_dtype(DType::U32)?, ins[1].to_dtype(DType::U32)?);
            Ok(vec![a.lt(&b)?, a.le(&b)?, a.gt(&b)?, a.ge(&b)?])
        })()),
        _ => None,
    }
}

/// The `scaled_mm` fixture: in0 / in2 are float8_e4m3fn bytes stored as u8; b (`[K, N]`)
/// is stored row-major, so it is laid out column-major first, as `torch._scaled_mm` wants.
fn scaled_mm(ins: &[Tensor], args: &Value) -> Result<Tensor> {
    let fp8 = |t: &Tensor| Tensor::from_raw_bytes(&t.to_raw_bytes()?, t.shape(), DType::F8E4M3, t.device());
    let out = args.get("out_dtype").and_then(|v| v.as_str()).and_then(DType::parse).unwrap_or(DType::F32);
    let b = fp8(&ins[2])?.t()?.contiguous()?.t()?;
    fp8(&ins[0])?.scaled_mm(&b, &ins[1], &ins[3], out, None)
}

/// Compares an output with its golden tensor: same shape; integer and bool dtypes
/// exactly, floats within `atol + rtol·|want|`, NaN only where NaN is expected.
fn compare(got: &Tensor, want: &Tensor, atol: f64, rtol: f64) -> std::result::Result<f64, String> {
    if got.shape() != want.shape() {
        return Err(format!("shape {:?}, expected {:?}", got.shape(), want.shape()));
    }
    let g = got.to_f64_vec().map_err(|e| e.to_string())?;
    let w = want.to_f64_vec().map_err(|e| e.to_string())?;
    let mut max_err: f64 = 0.0;
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if a.is_nan() || b.is_nan() {
            if a.is_nan() != b.is_nan() {
                return Err(format!("element {i}: got {a}, expected {b}"));
            }
            continue;
        }
        if a.is_infinite() || b.is_infinite() {
            if a != b {
                return Err(format!("element {i}: got {a}, expected {b}"));
            }
            continue;
        }
        let err = (a - b).abs();
        max_err = max_err.max(err);
        if err > atol + rtol * b.abs() {
            return Err(format!("element {i}: got {a}, expected {b} (|Δ| = {err:.3e})"));
        }
    }
    Ok(max_err)
}

/// Runs every case of `dir/ops.json` on `device`.
pub fn run(dir: &Path, device: Device) -> Result<Vec<CaseResult>> {
    let json_path = dir.join("ops.json");
    let text = std::fs::read_to_string(&json_path)
        .map_err(|e| crate::Error::Io { path: json_path.display().to_string(), source: e })?;
    let ops: OpsFile = serde_json::from_str(&text)
        .map_err(|e| crate::Error::File { path: json_path.display().to_string(), msg: e.to_string() })?;
    let file = SafetensorsFile::open(dir.join("ops.safetensors"))?;
    let mut results = Vec::new();
    for c in ops.cases {
        let outcome = run_case(&c, &file, device);
        results.push(CaseResult { case: c.case.clone(), op: c.op.clone(), outcome });
    }
    Ok(results)
}

/// The first output's shape that a case's args give, for ops whose output size the args
/// set (conv padding / stride / dilation, pad amounts), without running them; `None` for
/// other ops and args the op itself will refuse.
fn predicted_shape(c: &Case, ins: &[Tensor]) -> Option<Vec<usize>> {
    let x = ins.first()?.shape();
    match c.op.as_str() {
        "conv2d" | "conv3d" => {
            let (w, spatial) = (ins.get(1)?.shape(), x.len().checked_sub(2)?);
            let arg = |k: &str, default: u64| -> Option<Vec<u64>> {
                let v = match c.args.get(k) {
                    None => vec![default],
                    Some(v) if v.is_u64() => vec![v.as_u64()?],
                    Some(v) => v.as_array()?.iter().map(|x| x.as_u64()).collect::<Option<_>>()?,
                };
                Some(if v.len() == 1 { vec![v[0]; spatial] } else { v })
            };
            let (s, p, d) = (arg("stride", 1)?, arg("padding", 0)?, arg("dilation", 1)?);
            if w.len() != x.len() || [&s, &p, &d].iter().any(|v| v.len() != spatial) {
                return None;
            }
            let mut out = vec![x[0], w[0]];
            for i in 0..spatial {
                let span = d[i].checked_mul((w[2 + i] as u64).checked_sub(1)?)?.checked_add(1)?;
                let padded = (x[2 + i] as u64).checked_add(p[i].checked_mul(2)?)?;
                out.push((padded.checked_sub(span)? / s[i].max(1) + 1) as usize);
            }
            Some(out)
        }
        "pad" => {
            let amounts = c.args.get("pad")?.as_array()?;
            let mut out = x.to_vec();
            for (i, pair) in amounts.chunks(2).enumerate() {
                let dim = x.len().checked_sub(i + 1)?;
                let total = pair.iter().try_fold(0i64, |t, v| t.checked_add(v.as_i64()?))?;
                out[dim] = usize::try_from((out[dim] as i64).checked_add(total)?).ok()?;
            }
            Some(out)
        }
        _ => None,
    }
}

fn run_case(c: &Case, file: &SafetensorsFile, device: Device) -> Outcome {
    let needed = inputs_needed(&c.op);
    if c.n_in < needed {
        return Outcome::Fail(format!("n_in is {} but {} reads {needed} inputs", c.n_in, c.op));
    }
    let load = |kind: &str, n: usize, dev: Device| -> Result<Vec<Tensor>> {
        (0..n).map(|i| file.load(&format!("{}/{kind}{i}", c.case), dev)).collect()
    };
    let ins = match load("in", c.n_in, device) {
        Ok(v) => v,
        Err(e) => return Outcome::Fail(format!("loading inputs: {e}")),
    };
    let wants = match load("out", c.n_out, Device::Cpu) {
        Ok(v) => v,
        Err(e) => return Outcome::Fail(format!("loading outputs: {e}")),
    };
    // Args that give another output shape than the fixture's fail before the op runs: a
    // corrupted padding of millions would otherwise compute for many seconds first.
    if let (Some(got), Some(want)) = (predicted_shape(c, &ins), wants.first()) {
        if got != want.shape() {
            return Outcome::Fail(format!("args give out0 shape {got:?}, expected {:?}", want.shape()));
        }
    }
    let computed = match compute(c, &ins, device) {
        None => return Outcome::NotImplemented,
        // An op (or one it is composed of) without a kernel on this backend yet.
        Some(Err(crate::Error::NotImplemented { .. })) if device != Device::Cpu => {
            return Outcome::NotImplemented
        }
        Some(Err(e)) => return Outcome::Fail(e.to_string()),
        Some(Ok(x)) => x,
    };
    if computed.outputs.len() != wants.len() {
        return Outcome::Fail(format!("{} outputs, expected {}", computed.outputs.len(), wants.len()));
    }
    let mut worst: f64 = 0.0;
    for (i, (g, w)) in computed.outputs.iter().zip(&wants).enumerate() {
        match compare(g, w, computed.atol, computed.rtol) {
            Ok(e) => worst = worst.max(e),
            Err(msg) => return Outcome::Fail(format!("out{i}: {msg}")),
        }
    }
    Outcome::Pass { max_err: worst }
}

/// `N passed, N failed, N skipped` over a set of results.
pub fn summary(results: &[CaseResult]) -> (usize, usize, usize) {
    let mut s = (0, 0, 0);
    for r in results {
        match r.outcome {
            Outcome::Pass { .. } => s.0 += 1,
            Outcome::Fail(_) => s.1 += 1,
            Outcome::NotImplemented => s.2 += 1,
        }
    }
    s
}

/// `$KILN_FIXTURES`, else the repository's `fixtures/`.
pub fn default_dir() -> std::path::PathBuf {
    crate::settings::FIXTURES
        .get()
        .ok()
        .flatten()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue "Foundation I": every case of an op kiln has passes on the CPU, and the
    /// named ones exist and pass.
    /// Issue 37: a case short of inputs, or with impossible sizes, is a FAIL naming it.
    #[test]
    fn bad_cases_fail_without_panicking() {
        let dir = default_dir();
        let file = SafetensorsFile::open(dir.join("ops.safetensors")).unwrap();
        let case = |op: &str, name: &str, n_in: usize, args: serde_json::Value| Case {
            case: name.into(),
            op: op.into(),
            args,
            n_in,
            n_out: 1,
        };
        for (c, want) in [
            (case("rms_norm", "rms_norm", 1, serde_json::json!({})), "reads 2 inputs"),
            (case("scaled_mm", "scaled_mm_rowwise", 2, serde_json::json!({})), "reads 4 inputs"),
            (
                case("pad", "pad_constant", 1, serde_json::json!({"pad": [1, i64::MAX], "mode": "constant"})),
                "overflows",
            ),
            (
                case(
                    "logspace",
                    "logspace",
                    0,
                    serde_json::json!({"start": 0, "end": 1, "steps": 1e18, "base": 10}),
                ),
                "cannot allocate",
            ),
            (case("bincount", "bincount", 1, serde_json::json!({"minlength": 1u64 << 62})), "overflows"),
            (
                case("conv3d", "conv3d_causal", 3, serde_json::json!({"padding": [0, 1_000_000, 1]})),
                "args give out0 shape",
            ),
            (
                case(
                    "pad",
                    "pad_constant",
                    1,
                    serde_json::json!({"pad": [1, 1i64 << 40], "mode": "constant"}),
                ),
                "args give",
            ),
        ] {
            match run_case(&c, &file, Device::Cpu) {
                Outcome::Fail(msg) => assert!(msg.contains(want), "{}: {msg}", c.case),
                other => panic!("{}: {other:?}", c.case),
            }
        }
    }

    #[test]
    fn cpu_fixtures_pass() {
        let results = run(&default_dir(), Device::Cpu).unwrap();
        let failed: Vec<_> = results.iter().filter(|r| matches!(r.outcome, Outcome::Fail(_))).collect();
        assert!(failed.is_empty(), "{failed:#?}");
        for case in [
            "softmax_lastdim",
            "log_softmax_lastdim",
            "softmax_dim1",
            "to_float8_e4m3fn",
            "to_bfloat16",
            "std_mean_dim1",
            "var_mean_dim0_corr0",
            "unsigned_compare_u32",
            "rms_norm",
            "take",
            "put_accumulate",
            "put_overwrite",
            "heaviside",
            "frexp",
            "logspace",
            "bincount",
            "bincount_weighted",
            "mse_loss_mean",
            "mse_loss_sum",
            "router_softmax_topk8",
            "scaled_mm_tensorwise",
            "scaled_mm_rowwise",
            "sdpa_broadcast_batch",
            "sdpa_gqa_causal",
            "sdpa_decode_mask",
            "pad_constant",
            "pad_reflect",
            "pad_replicate",
            "pad_constant_5d_causal",
            "group_norm",
            "conv2d_pad1",
            "conv2d_stride2",
            "conv3d_causal",
            "solve_triangular_lower_b3_32_rhs8",
            "inv_batched_4x4",
            "inv_batched_3x3",
            "qr_reduced",
            "svd_illconditioned_full_f64",
            "pinv_illconditioned_f64",
            "svdvals_huge_f32",
            "svdvals_tiny_f32",
            "lstsq",
            "lu_factor_c64",
            "lu_solve_c64",
            "det_c64",
            "det_backward_f64",
            "det_backward_c64",
            "inv_backward_4x4",
            "solve_backward_c64",
            "solve_triangular_backward_64_rhs8",
            "solve_triangular_unit_b8_16",
            "solve_triangular_unit_b8_32",
            "interpolate_nearest_noac",
            "interpolate_bilinear_noac",
            "interpolate_bilinear_ac",
            "batch_norm_train_fwd_bwd",
            "laguerre_polynomial_l",
            "grouped_mm_2d3d",
        ] {
            let r = results.iter().find(|r| r.case == case).unwrap_or_else(|| panic!("no case {case}"));
            assert!(matches!(r.outcome, Outcome::Pass { .. }), "{case}: {:?}", r.outcome);
        }
    }
}
