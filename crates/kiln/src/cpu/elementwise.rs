//! Elementwise kernels. Real floats compute in f64 and round once to the output dtype
//! (for +, −, ×, ÷ and sqrt this equals PyTorch's f32-then-round result); integers
//! compute in i128 and wrap back, so u64 / i64 stay exact.

use super::{CpuBuffer, PAR_MIN};
use crate::dtype::Elem;
use crate::layout::Layout;
use crate::ops::{BinaryOp, UnaryOp};
use crate::DType;
use num_complex::Complex64;
use rayon::prelude::*;

pub fn binary_f64(op: BinaryOp, a: f64, b: f64) -> f64 {
    use BinaryOp::*;
    let t = |c: bool| c as u8 as f64;
    match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / b,
        Pow => a.powf(b),
        // PyTorch propagates NaN through minimum / maximum.
        Minimum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.min(b)
            }
        }
        Maximum => {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        }
        // Python's modulo: the result has the divisor's sign.
        Remainder => {
            let r = a % b;
            if r != 0.0 && (r < 0.0) != (b < 0.0) {
                r + b
            } else {
                r
            }
        }
        // PyTorch: input == 0 ? values : input > 0 (so NaN gives 0).
        Heaviside => {
            if a == 0.0 {
                b
            } else {
                t(a > 0.0)
            }
        }
        LaguerrePolynomialL => laguerre_polynomial_l(a, b),
        // PyTorch: equal infinities give themselves (inf − inf would be NaN).
        LogAddExp if a == b && a.is_infinite() => a,
        LogAddExp => a.max(b) + (-(a - b).abs()).exp().ln_1p(),
        Hypot => a.hypot(b),
        SiluMul => a / (1.0 + (-a).exp()) * b,
        Eq => t(a == b),
        Ne => t(a != b),
        Lt => t(a < b),
        Le => t(a <= b),
        Gt => t(a > b),
        Ge => t(a >= b),
    }
}

/// PyTorch's `laguerre_polynomial_l_forward(x, n)`: n cast to int64 (x86 turns NaN and
/// out-of-range values into i64::MIN, a negative n), then Lₙ(0) = L₀ = 1, L₁ = 1 − x and
/// (k + 1) Lₖ₊₁ = (2k + 1 − x) Lₖ − k Lₖ₋₁. Computed in f64 (PyTorch: in the input's dtype,
/// so f32 results differ by its rounding, ~1e-6 relative at n = 30).
fn laguerre_polynomial_l(x: f64, n: f64) -> f64 {
    let n = if n.is_nan() || n.abs() >= 9.2e18 { i64::MIN } else { n as i64 };
    match () {
        _ if n < 0 => 0.0,
        _ if x == 0.0 || n == 0 => 1.0,
        _ if n == 1 => 1.0 - x,
        _ => {
            let (mut p, mut q) = (1.0, 1.0 - x);
            for k in 1..n {
                let k = k as f64;
                (p, q) = (q, ((k + k + (1.0 - x)) * q - k * p) / (k + 1.0));
            }
            q
        }
    }
}

pub fn binary_i128(op: BinaryOp, a: i128, b: i128) -> i128 {
    use BinaryOp::*;
    let t = |c: bool| c as i128;
    match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        // Integer division by zero is rejected in `ops` before it gets here.
        // Floor division (integer true division is promoted to float in `ops`).
        Div => match (a.checked_div(b), a.checked_rem(b)) {
            (Some(q), Some(r)) if r != 0 && ((a < 0) != (b < 0)) => q - 1,
            (Some(q), _) => q,
            _ => 0,
        },
        Pow => {
            if b < 0 {
                0
            } else {
                a.wrapping_pow(b.min(u32::MAX as i128) as u32)
            }
        }
        Minimum => a.min(b),
        Maximum => a.max(b),
        Remainder => {
            let r = a.checked_rem(b).unwrap_or(0);
            if r != 0 && (r < 0) != (b < 0) {
                r + b
            } else {
                r
            }
        }
        Heaviside => {
            if a == 0 {
                b
            } else {
                t(a > 0)
            }
        }
        Eq => t(a == b),
        Ne => t(a != b),
        Lt => t(a < b),
        Le => t(a <= b),
        Gt => t(a > b),
        Ge => t(a >= b),
        // Float ops (`div` aside) are promoted to float in `ops` before they get here; kept total.
        _ => binary_f64(op, a as f64, b as f64) as i128,
    }
}

fn binary_c64(op: BinaryOp, a: Complex64, b: Complex64) -> Complex64 {
    use BinaryOp::*;
    let t = |c: bool| Complex64::new(c as u8 as f64, 0.0);
    match op {
        Add => a + b,
        Sub => a - b,
        Mul => a * b,
        Div => a / b,
        Pow => a.powc(b),
        Eq => t(a == b),
        Ne => t(a != b),
        _ => Complex64::new(f64::NAN, f64::NAN),
    }
}

pub fn unary_f64(op: UnaryOp, x: f64) -> f64 {
    use UnaryOp::*;
    match op {
        Neg => -x,
        Abs => x.abs(),
        Exp => x.exp(),
        Log => x.ln(),
        Sqrt => x.sqrt(),
        Rsqrt => 1.0 / x.sqrt(),
        Sin => x.sin(),
        Cos => x.cos(),
        Tanh => x.tanh(),
        Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Silu => x / (1.0 + (-x).exp()),
        Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Relu => {
            if x.is_nan() {
                x
            } else {
                x.max(0.0)
            }
        }
        Recip => 1.0 / x,
        Square => x * x,
        Floor => x.floor(),
        Ceil => x.ceil(),
        Round => x.round_ties_even(),
        Sign => {
            if x.is_nan() {
                x
            } else if x == 0.0 {
                0.0
            } else {
                x.signum()
            }
        }
        Erf => erf(x),
    }
}

fn unary_i128(op: UnaryOp, x: i128) -> i128 {
    use UnaryOp::*;
    match op {
        Neg => x.wrapping_neg(),
        Abs => x.abs(),
        Relu => x.max(0),
        Square => x.wrapping_mul(x),
        Sign => x.signum(),
        _ => x,
    }
}

/// erf by W. J. Cody's rational approximations is overkill for a reference; this
/// series/continued-fraction pair is accurate to ~1e-15 in f64.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    let r = if ax < 2.5 {
        // Maclaurin series.
        let (mut term, mut sum, x2) = (ax, ax, ax * ax);
        for n in 1..80 {
            term *= -x2 / n as f64;
            let add = term / (2 * n + 1) as f64;
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // Continued fraction for erfc, evaluated bottom-up.
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        1.0 - (-ax * ax).exp() / std::f64::consts::PI.sqrt() / (ax + f)
    };
    r.copysign(x)
}

/// `out[i] = f(a[i], b[i])` over two layouts already broadcast to one shape.
fn zip_map<A: Elem, B: Elem, O: Elem>(
    a: &[A],
    la: &Layout,
    b: &[B],
    lb: &Layout,
    f: impl Fn(A, B) -> O + Sync,
) -> Vec<O> {
    let n = la.numel();
    if la.is_contiguous() && lb.is_contiguous() {
        let (a, b) = (&a[la.offset..la.offset + n], &b[lb.offset..lb.offset + n]);
        if n >= PAR_MIN {
            return a.par_iter().zip(b.par_iter()).map(|(&x, &y)| f(x, y)).collect();
        }
        return a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect();
    }
    la.offsets().zip(lb.offsets()).map(|(i, j)| f(a[i], b[j])).collect()
}

/// +, −, ×, ÷ of contiguous real floats with the op chosen once outside the loop, so
/// the loop vectorises (the generic path dispatches on `op` per element).
fn arith_fast_path<T: Elem, O: Elem>(
    op: BinaryOp,
    x: &[T],
    la: &Layout,
    y: &[T],
    lb: &Layout,
    dt: DType,
    out: DType,
) -> Option<Vec<O>> {
    if !dt.is_float() || out != dt || !la.is_contiguous() || !lb.is_contiguous() {
        return None;
    }
    let f = |g: fn(f64, f64) -> f64| {
        zip_map(x, la, y, lb, move |p: T, q: T| O::from_f64(g(p.to_f64(), q.to_f64())))
    };
    Some(match op {
        BinaryOp::Add => f(|a, b| a + b),
        BinaryOp::Sub => f(|a, b| a - b),
        BinaryOp::Mul => f(|a, b| a * b),
        BinaryOp::Div => f(|a, b| a / b),
        _ => return None,
    })
}

/// Binary op on inputs of one compute dtype `dt`, writing `out` (dt, or bool for
/// comparisons). Layouts must already be broadcast to the output shape.
pub fn binary(
    op: BinaryOp,
    a: &CpuBuffer,
    la: &Layout,
    b: &CpuBuffer,
    lb: &Layout,
    dt: DType,
    out: DType,
) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let (x, y) = (a.as_slice::<T>(), b.as_slice::<T>());
        crate::with_dtype!(out, O, {
            let v: Vec<O> = if let Some(v) = arith_fast_path(op, x, la, y, lb, dt, out) {
                v
            } else if dt.is_complex() {
                zip_map(x, la, y, lb, |p, q| {
                    let r = binary_c64(
                        op,
                        Complex64::new(p.to_f64(), p.im()),
                        Complex64::new(q.to_f64(), q.im()),
                    );
                    O::from_complex(r.re, r.im)
                })
            } else if dt.is_float() {
                zip_map(x, la, y, lb, |p, q| O::from_f64(binary_f64(op, p.to_f64(), q.to_f64())))
            } else {
                zip_map(x, la, y, lb, |p, q| O::from_i128(binary_i128(op, p.to_i128(), q.to_i128())))
            };
            CpuBuffer::from_vec(v)
        })
    })
}

/// Unary op; `dt` is both the input's and the output's dtype.
pub fn unary(op: UnaryOp, a: &CpuBuffer, la: &Layout, dt: DType) -> CpuBuffer {
    crate::with_dtype!(dt, T, {
        let x = a.as_slice::<T>();
        let v: Vec<T> = if dt.is_float() {
            super::map_strided(x, la, |p| T::from_f64(unary_f64(op, p.to_f64())))
        } else {
            super::map_strided(x, la, |p| T::from_i128(unary_i128(op, p.to_i128())))
        };
        CpuBuffer::from_vec(v)
    })
}

/// `where(cond, a, b)` with all three layouts broadcast to one shape; a, b of dtype `dt`.
pub fn where_(
    c: &CpuBuffer,
    lc: &Layout,
    a: &CpuBuffer,
    la: &Layout,
    b: &CpuBuffer,
    lb: &Layout,
    dt: DType,
) -> CpuBuffer {
    let cond = c.as_slice::<crate::dtype::Bool>();
    crate::with_dtype!(dt, T, {
        let (x, y) = (a.as_slice::<T>(), b.as_slice::<T>());
        let v: Vec<T> = lc
            .offsets()
            .zip(la.offsets())
            .zip(lb.offsets())
            .map(|((k, i), j)| if cond[k].0 != 0 { x[i] } else { y[j] })
            .collect();
        CpuBuffer::from_vec(v)
    })
}

/// `frexp`: mantissa in [0.5, 1) with the input's dtype, exponent as i32.
pub fn frexp(a: &CpuBuffer, la: &Layout, dt: DType) -> (CpuBuffer, CpuBuffer) {
    crate::with_dtype!(dt, T, {
        let x = a.as_slice::<T>();
        let m: Vec<T> = super::map_strided(x, la, |p| T::from_f64(frexp_f64(p.to_f64()).0));
        let e: Vec<i32> = super::map_strided(x, la, |p| frexp_f64(p.to_f64()).1);
        (CpuBuffer::from_vec(m), CpuBuffer::from_vec(e))
    })
}

/// C's frexp: x = m · 2^e with |m| in [0.5, 1); zero, inf and NaN give (x, 0).
pub fn frexp_f64(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7FF) as i32;
    if exp == 0 {
        // Subnormal: scale into the normal range first.
        let (m, e) = frexp_f64(x * 2f64.powi(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7FF << 52)) | (1022 << 52));
    (m, exp - 1022)
}
