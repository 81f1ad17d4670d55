//! The test harness of kiln and of crates that add kernels of their own.
//!
//! - GPU parity: GPU results against the CPU backend (the reference of every kernel) on
//!   fresh random inputs, with device allocations poisoned (0xFF bytes) so an element a
//!   kernel forgets to write fails the comparison. kiln's `gpu_*` test binaries
//!   (`harness = false`) and kiln-models' are lists of [`Case`]s given to [`run`]. Without
//!   a GPU, [`run`] prints that its cases were skipped and passes nothing.
//! - One body for every device: [`device_cases!`](crate::device_cases) makes a `both_*`
//!   binary's `main`, which runs each case on the CPU and then on cuda:0 ([`run_each`]),
//!   the device under test being [`Ctx::dev`] and the reference the CPU twin.
//! - [`fixtures`]: the PyTorch fixture cases of the ops.

pub mod fixtures;

use crate::{DType, Device, Result, Tensor};
use std::process::ExitCode;

/// The reference device.
pub const CPU: Device = Device::Cpu;

/// Compares a GPU result with the CPU one: shapes and dtypes equal; integer and bool
/// bytes exactly; floats within `tol` relative to the row's scale, NaN where NaN.
pub fn same(name: &str, gpu: &Tensor, cpu: &Tensor, tol: f64) -> std::result::Result<(), String> {
    if gpu.shape() != cpu.shape() || gpu.dtype() != cpu.dtype() {
        return Err(format!(
            "{name}: GPU {:?} {} vs CPU {:?} {}",
            gpu.shape(),
            gpu.dtype(),
            cpu.shape(),
            cpu.dtype()
        ));
    }
    let (g, c) =
        (gpu.to_raw_bytes().map_err(|e| e.to_string())?, cpu.to_raw_bytes().map_err(|e| e.to_string())?);
    if !cpu.dtype().is_float() {
        if let Some(i) = g.iter().zip(&c).position(|(a, b)| a != b) {
            let (gv, cv) = (gpu.to_f64_vec().unwrap_or_default(), cpu.to_f64_vec().unwrap_or_default());
            let e = i / cpu.dtype().size();
            return Err(format!("{name}: element {e}: GPU {:?} vs CPU {:?} (exact)", gv.get(e), cv.get(e)));
        }
        return Ok(());
    }
    let (g, c) = (gpu.to_f64_vec().map_err(|e| e.to_string())?, cpu.to_f64_vec().map_err(|e| e.to_string())?);
    let scale = c.iter().filter(|v| v.is_finite()).fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
    for (i, (a, b)) in g.iter().zip(&c).enumerate() {
        // Exact checks (tol 0) still let NaN match NaN: payload and sign are not specified.
        let ok = if b.is_nan() {
            a.is_nan()
        } else if b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= tol * scale.max(b.abs())
        };
        if !ok {
            return Err(format!("{name}: element {i}: GPU {a} vs CPU {b} (tol {tol:e} of {scale:.3e})"));
        }
    }
    Ok(())
}

/// The relative tolerance of one computation in `dt` against the f64 reference (0 for
/// integers and bool: exact).
pub fn tol_of(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-12,
        DType::F32 => 2e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

/// What a case gets: the device under test and a seed that each [`Ctx::pair`] advances.
pub struct Ctx {
    /// The device the case runs on: `cuda:0` in [`run`], each device in turn in [`run_each`].
    pub dev: Device,
    /// The last seed used.
    pub seed: u64,
}

impl Ctx {
    /// Fresh random values (never zeros) of `dtype`: on the device under test and their CPU
    /// twin, identical.
    pub fn pair(&mut self, shape: &[usize], dtype: DType, scale: f64) -> Result<(Tensor, Tensor)> {
        self.seed += 1;
        let base = Tensor::randn(shape, self.seed, DType::F64, CPU)?.mul_scalar(scale)?;
        let base = if dtype.is_float() { base } else { base.round()? };
        let c = base.to_dtype(dtype)?;
        Ok((c.to_device(self.dev)?, c))
    }
}

/// A GPU tensor and its CPU twin (the pairs [`Ctx::pair`] makes).
pub type Pair<'a> = (&'a Tensor, &'a Tensor);

/// `scaled_dot_product_attention` of the GPU tensors with `o` against the composed CPU
/// path on f32 copies of their CPU twins with `oc` (`o` with CPU masks), compared in the
/// GPU inputs' dtype within `tol` ([`same`]). The attention kernels compute in f32 from
/// the same inputs, so only their roundings and summation order differ.
pub fn sdpa_matches_cpu(
    name: &str,
    (q, qc): Pair,
    (k, kc): Pair,
    (v, vc): Pair,
    o: &crate::Sdpa,
    oc: &crate::Sdpa,
    tol: f64,
) -> std::result::Result<(), String> {
    let gpu = q.scaled_dot_product_attention(k, v, o).map_err(e)?;
    let f32_of = |t: &Tensor| t.to_dtype(DType::F32);
    let cpu =
        f32_of(qc).and_then(|q| q.scaled_dot_product_attention(&f32_of(kc)?, &f32_of(vc)?, oc)).map_err(e)?;
    same(name, &gpu.to_device(CPU).map_err(e)?, &cpu.to_dtype(q.dtype()).map_err(e)?, tol)
}

/// A named case: `Err` carries what differed.
pub type Case = (&'static str, fn(&mut Ctx) -> std::result::Result<(), String>);

/// An error as a case's failure message (`.map_err(e)?`).
pub fn e(x: crate::Error) -> String {
    x.to_string()
}

/// Runs `f` on both tensors and compares.
pub fn both(
    name: &str,
    g: &Tensor,
    c: &Tensor,
    tol: f64,
    f: impl Fn(&Tensor) -> Result<Tensor>,
) -> std::result::Result<(), String> {
    let (gr, cr) = (f(g).map_err(e)?, f(c).map_err(e)?);
    same(name, &gr, &cr, tol)
}

/// Runs the named cases (or those named on the command line) on cuda:0 and prints
/// one line per case, then `N passed, N failed`.
pub fn run(binary: &str, cases: &[Case]) -> ExitCode {
    if let Err(why) = crate::cuda::availability() {
        println!("{binary}: {} cases skipped (no CUDA device: {why})", cases.len());
        return ExitCode::SUCCESS;
    }
    let (passed, failed) = run_on(Device::Cuda(0), "", cases);
    verdict(passed, failed)
}

/// Runs the cases (or those named on the command line) on the CPU, then on cuda:0 where
/// there is one (else says they were skipped there), one line per case and device, then
/// `N passed, N failed`. What [`device_cases!`](crate::device_cases) calls.
pub fn run_each(binary: &str, cases: &[Case]) -> ExitCode {
    let (mut passed, mut failed) = run_on(CPU, " (cpu)", cases);
    match crate::cuda::availability() {
        Err(why) => println!("{binary}: {} cases skipped on CUDA (no CUDA device: {why})", cases.len()),
        Ok(()) => {
            let (p, f) = run_on(Device::Cuda(0), " (cuda)", cases);
            (passed, failed) = (passed + p, failed + f);
        }
    }
    verdict(passed, failed)
}

/// Runs the selected cases on `dev` (poisoned if a GPU), `tag` after each case's name.
fn run_on(dev: Device, tag: &str, cases: &[Case]) -> (usize, usize) {
    if let Device::Cuda(i) = dev {
        crate::cuda::device(i).expect("availability() said the device works").set_poison(true);
    }
    let mut cx = Ctx { dev, seed: 1000 };
    // Optional case names on the command line run a subset (e.g. under racecheck).
    let only: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, f) in cases.iter().filter(|(n, _)| only.is_empty() || only.iter().any(|o| o == n)) {
        match f(&mut cx) {
            Ok(()) => {
                passed += 1;
                println!("pass  {name}{tag}");
            }
            Err(msg) => {
                failed += 1;
                println!("FAIL  {name}{tag}: {msg}");
            }
        }
    }
    (passed, failed)
}

fn verdict(passed: usize, failed: usize) -> ExitCode {
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The `main` of a `harness = false` test binary whose cases each run on every device
/// from one body ([`run_each`]): `kiln::device_cases!(case_a, case_b);`, each case a
/// `fn(&mut Ctx) -> Result<(), String>` computing on [`Ctx::dev`] and checking against the
/// CPU (its twins from [`Ctx::pair`], or a composition of other ops).
#[macro_export]
macro_rules! device_cases {
    ($($case:ident),+ $(,)?) => {
        fn main() -> std::process::ExitCode {
            $crate::testing::run_each(env!("CARGO_CRATE_NAME"), &[$((stringify!($case), $case)),+])
        }
    };
}
