//! The CPU's decode-time GEMV (`kiln::cpu::gemv`, taken by `Tensor::linear` and `matmul`
//! for up to 8 rows against a contiguous weight) against f64 references, and the device
//! names `Device::parse` accepts.

use half::{bf16, f16};
use kiln::cpu::gemv::{linear, MAX_ROWS};
use kiln::{DType, Device, Tensor};

/// `x [rows, k] @ w [n, k].T + bias` in f64.
fn reference(x: &[f32], w: &[f32], bias: &[f32], rows: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0f64; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let s: f64 = (0..k).map(|i| x[r * k + i] as f64 * w[j * k + i] as f64).sum();
            y[r * n + j] = s + bias[j] as f64;
        }
    }
    y
}

fn close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((*g as f64 - w).abs() <= tol * (1.0 + w.abs()), "{g} vs {w}");
    }
}

/// Odd sizes (tails of the 16-lane loop and of the 32-row task split), bf16 and f16
/// weights widened exactly, a bias; no rows gives nothing.
#[test]
fn kernel_matches_f64_reference() {
    let (rows, k, n) = (3, 37, 71);
    let x: Vec<f32> = (0..rows * k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 11 % 17) as f32 - 8.0) / 8.0).collect();
    let bias: Vec<f32> = (0..n).map(|j| j as f32 / 10.0).collect();
    close(&linear(&x, rows, k, &w, n, Some(&bias)), &reference(&x, &w, &bias, rows, k, n), 1e-5);
    let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
    let wb32: Vec<f32> = wb.iter().map(|v| v.to_f32()).collect();
    close(&linear(&x, rows, k, &wb, n, Some(&bias)), &reference(&x, &wb32, &bias, rows, k, n), 1e-5);
    let wh: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
    let wh32: Vec<f32> = wh.iter().map(|v| v.to_f32()).collect();
    close(&linear(&x, rows, k, &wh, n, Some(&bias)), &reference(&x, &wh32, &bias, rows, k, n), 1e-5);
    assert!(linear::<f32>(&[], 0, 5, &w[..15], 3, None).is_empty());
}

/// Through `Tensor::linear` on random inputs: the GEMV rows (1 and MAX_ROWS) and the GEMM
/// rows (MAX_ROWS + 1) agree with f64, in f32 and in bf16 (the GEMV rounded once).
#[test]
fn linear_takes_the_fast_path_and_agrees_with_f64() {
    let (k, n) = (45, 33);
    for rows in [1, MAX_ROWS, MAX_ROWS + 1] {
        let x = Tensor::randn(&[rows, k], 1, DType::F32, Device::Cpu).unwrap();
        let w = Tensor::randn(&[n, k], 2, DType::F32, Device::Cpu).unwrap();
        let b = Tensor::randn(&[n], 3, DType::F32, Device::Cpu).unwrap();
        let (xv, wv, bv) =
            (x.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let want = reference(&xv, &wv, &bv, rows, k, n);
        let y = x.linear(&w, Some(&b)).unwrap();
        assert_eq!(y.shape(), &[rows, n]);
        close(&y.to_vec::<f32>().unwrap(), &want, 1e-5);
        // bf16: inputs rounded to bf16 first, the result rounded once.
        let [xb, wb, bb] = [&x, &w, &b].map(|t| t.to_dtype(DType::BF16).unwrap());
        let want = reference(
            &xb.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            &wb.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            &bb.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(),
            rows,
            k,
            n,
        );
        let y = xb.linear(&wb, Some(&bb)).unwrap().to_dtype(DType::F32).unwrap();
        // The GEMV rounds once; the reference GEMM rounds the product, then the sum with
        // the bias: one bf16 step more.
        let tol = if rows > MAX_ROWS { 2f64.powi(-7) } else { 2f64.powi(-8) };
        close(&y.to_vec::<f32>().unwrap(), &want, tol);
    }
}

/// Only the documented names parse; anything else (a bare "gpu" included) is an unknown
/// device, not a request for CUDA that later fails as "not available".
#[test]
fn device_names() {
    assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
    assert_eq!(Device::parse("cuda").unwrap(), Device::Cuda(0));
    assert_eq!(Device::parse("cuda:1").unwrap(), Device::Cuda(1));
    for bad in ["gpu", "cuda:x", "metal", ""] {
        let e = Device::parse(bad).unwrap_err().to_string();
        assert!(e.contains("unknown device"), "{bad}: {e}");
    }
}
