//! Elementwise ops with PyTorch's type promotion and broadcasting.
//!
//! Each op is one line of a table below (`binary_ops!` / `unary_ops!`): its variant, its
//! PyTorch name, its `Tensor` method(s) and its dtype rule. The backends compute it by
//! that variant: `cpu/elementwise.rs` in f64 (or i128), `cuda/kernels/elementwise.cu`
//! under the `#define` the kernels are given for it ([`kernel_op_codes`]).
//! CONTRIBUTING.md ("Adding an op") walks through adding one.

use crate::backend::{buf, on_backend, Backend};
use crate::error::{Error, Result};
use crate::layout::broadcast_shapes;
use crate::{DType, Tensor};

/// How a binary op treats dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BinaryKind {
    /// Computes in the promoted dtype.
    Arith,
    /// Integer inputs compute in float32 (true division, special functions).
    Float,
    /// Returns bool.
    Compare,
}

/// How a unary op treats dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UnaryKind {
    /// Integer inputs keep their dtype.
    KeepsInt,
    /// Integer inputs compute in their float dtype.
    Float,
}

macro_rules! binary_ops {
    ($($(#[$doc:meta])* $op:ident $name:literal $kind:ident => $method:ident, $scalar:ident;)*) => {
        /// Binary elementwise ops (PyTorch names in `Tensor` methods).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum BinaryOp { $($(#[$doc])* $op,)* }

        impl BinaryOp {
            /// Every op, in the order of their kernel op codes.
            pub const ALL: &'static [BinaryOp] = &[$(BinaryOp::$op,)*];

            /// PyTorch's name of the op.
            pub fn name(self) -> &'static str {
                match self { $(BinaryOp::$op => $name,)* }
            }

            fn kind(self) -> BinaryKind {
                match self { $(BinaryOp::$op => BinaryKind::$kind,)* }
            }
        }

        impl Tensor {
            $(
                #[doc = concat!("`torch.", $name, "(self, rhs)`, broadcasting.")]
                pub fn $method(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.binary(BinaryOp::$op, rhs)
                }
                #[doc = concat!("`torch.", $name, "(self, v)` with a Python scalar.")]
                pub fn $scalar(&self, v: f64) -> Result<Tensor> {
                    self.binary_scalar(BinaryOp::$op, v)
                }
            )*
        }
    };
}

macro_rules! unary_ops {
    ($($(#[$doc:meta])* $op:ident $name:literal $kind:ident => $method:ident;)*) => {
        /// Unary elementwise ops.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum UnaryOp { $($(#[$doc])* $op,)* }

        impl UnaryOp {
            /// Every op, in the order of their kernel op codes.
            pub const ALL: &'static [UnaryOp] = &[$(UnaryOp::$op,)*];

            /// PyTorch's name of the op.
            pub fn name(self) -> &'static str {
                match self { $(UnaryOp::$op => $name,)* }
            }

            /// Ops that keep integer dtypes; the rest compute in floating point.
            pub fn keeps_int(self) -> bool {
                match self { $(UnaryOp::$op => UnaryKind::$kind == UnaryKind::KeepsInt,)* }
            }
        }

        impl Tensor {
            $(
                #[doc = concat!("`torch.", $name, "(self)`.")]
                pub fn $method(&self) -> Result<Tensor> {
                    self.unary(UnaryOp::$op)
                }
            )*
        }
    };
}

binary_ops! {
    /// x + y.
    Add "add" Arith => add, add_scalar;
    /// x − y.
    Sub "sub" Arith => sub, sub_scalar;
    /// x · y.
    Mul "mul" Arith => mul, mul_scalar;
    /// x / y: true division (integers give float32).
    Div "div" Float => div, div_scalar;
    /// xʸ (integers: 0 for a negative exponent).
    Pow "pow" Arith => pow, pow_scalar;
    /// The smaller of x and y; NaN if either is NaN.
    Minimum "minimum" Arith => minimum, minimum_scalar;
    /// The larger of x and y; NaN if either is NaN.
    Maximum "maximum" Arith => maximum, maximum_scalar;
    /// x mod y with the divisor's sign (Python's `%`).
    Remainder "remainder" Arith => remainder, remainder_scalar;
    /// Step function: y where x is 0, else 1 for x > 0 and 0 otherwise (NaN too).
    Heaviside "heaviside" Arith => heaviside, heaviside_scalar;
    /// `torch.special.laguerre_polynomial_l(x, n)`: Lₙ(x), n truncated to an integer.
    LaguerrePolynomialL "special_laguerre_polynomial_l" Float
        => special_laguerre_polynomial_l, special_laguerre_polynomial_l_scalar;
    /// `log(exp(x) + exp(y))` without overflow.
    LogAddExp "logaddexp" Float => logaddexp, logaddexp_scalar;
    /// `sqrt(x² + y²)` without overflow or underflow in between; infinite if either is.
    Hypot "hypot" Float => hypot, hypot_scalar;
    /// `silu(x) · y`, SwiGLU's activation of a gate and an up projection in one pass
    /// (vLLM's `silu_and_mul` over the two halves).
    SiluMul "silu_mul" Float => silu_mul, silu_mul_scalar;
    /// x == y (bool).
    Eq "eq" Compare => eq, eq_scalar;
    /// x != y (bool).
    Ne "ne" Compare => ne, ne_scalar;
    /// x < y (bool).
    Lt "lt" Compare => lt, lt_scalar;
    /// x <= y (bool).
    Le "le" Compare => le, le_scalar;
    /// x > y (bool).
    Gt "gt" Compare => gt, gt_scalar;
    /// x >= y (bool).
    Ge "ge" Compare => ge, ge_scalar;
}

unary_ops! {
    /// −x.
    Neg "neg" KeepsInt => neg;
    /// |x|.
    Abs "abs" KeepsInt => abs;
    /// eˣ.
    Exp "exp" Float => exp;
    /// Natural logarithm.
    Log "log" Float => log;
    /// Square root.
    Sqrt "sqrt" Float => sqrt;
    /// 1 / √x.
    Rsqrt "rsqrt" Float => rsqrt;
    /// Sine.
    Sin "sin" Float => sin;
    /// Cosine.
    Cos "cos" Float => cos;
    /// Hyperbolic tangent.
    Tanh "tanh" Float => tanh;
    /// 1 / (1 + e⁻ˣ).
    Sigmoid "sigmoid" Float => sigmoid;
    /// x · sigmoid(x) (SiLU, swish).
    Silu "silu" Float => silu;
    /// Exact GELU: x · Φ(x), through erf.
    Gelu "gelu" Float => gelu;
    /// GELU's tanh approximation (`approximate="tanh"`).
    GeluTanh "gelu_tanh" Float => gelu_tanh;
    /// max(x, 0); NaN stays NaN.
    Relu "relu" KeepsInt => relu;
    /// 1 / x.
    Recip "reciprocal" Float => reciprocal;
    /// x².
    Square "square" KeepsInt => square;
    /// Rounds down (integers unchanged).
    Floor "floor" KeepsInt => floor;
    /// Rounds up (integers unchanged).
    Ceil "ceil" KeepsInt => ceil;
    /// Rounds to nearest, ties to even (integers unchanged).
    Round "round" KeepsInt => round;
    /// −1, 0 or 1 by the sign of x; NaN stays NaN.
    Sign "sign" KeepsInt => sign;
    /// The error function.
    Erf "erf" Float => erf;
}

impl BinaryOp {
    /// Ops whose result is bool.
    pub fn is_comparison(self) -> bool {
        self.kind() == BinaryKind::Compare
    }
}

/// `#define BIN_<NAME> <code>` and `#define UN_<NAME> <code>` for every op, given to the
/// CUDA kernels so their `switch` names the ops the tables above number.
pub(crate) fn kernel_op_codes() -> String {
    let bin = BinaryOp::ALL.iter().map(|&op| (format!("BIN_{}", op.name()), op as i32));
    let un = UnaryOp::ALL.iter().map(|&op| (format!("UN_{}", op.name()), op as i32));
    bin.chain(un).map(|(n, c)| format!("#define {} {c}\n", n.to_uppercase())).collect()
}

impl Tensor {
    /// Any binary op: promotes dtypes (integer true division and the special functions
    /// give float32), broadcasts shapes, and returns bool for comparisons.
    pub fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        self.check_same_device(rhs, op.name())?;
        let mut dt = DType::promote(self.dtype, rhs.dtype);
        if op.kind() == BinaryKind::Float && !dt.is_float() && !dt.is_complex() {
            dt = DType::F32;
        }
        if dt.is_complex()
            && !matches!(
                op,
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Eq | BinaryOp::Ne
            )
        {
            return Err(Error::DTypeNotSupported { op: op.name(), got: dt, expected: "a real dtype" });
        }
        let out = if op.is_comparison() { DType::Bool } else { dt };
        let shape = broadcast_shapes(self.shape(), rhs.shape())?;
        let a = self.to_dtype(dt)?.broadcast_to(&shape)?;
        let b = rhs.to_dtype(dt)?.broadcast_to(&shape)?;
        let yg = b.read();
        let storage = on_backend!(&*a.read(), |B, x| {
            B::wrap(B::binary(op, x, &a.layout, buf::<B>(&yg, op.name())?, &b.layout, dt, out)?)
        });
        Ok(Tensor::from_storage(storage, &shape, out, self.device))
    }

    /// A 0-dim tensor holding `v` with the dtype PyTorch gives a Python scalar next to
    /// this tensor: this tensor's dtype, or float32 for a fractional value and an
    /// integer tensor.
    pub fn scalar_like(&self, v: f64) -> Result<Tensor> {
        let dt = if !self.dtype.is_float() && !self.dtype.is_complex() && v.fract() != 0.0 {
            DType::F32
        } else if self.dtype == DType::Bool && v != 0.0 && v != 1.0 {
            DType::I64
        } else {
            self.dtype
        };
        Tensor::scalar(v, dt, self.device)
    }

    /// `op(self, v)` with `v` a Python scalar, which takes the dtype [`Tensor::scalar_like`]
    /// gives it.
    pub fn binary_scalar(&self, op: BinaryOp, v: f64) -> Result<Tensor> {
        self.binary(op, &self.scalar_like(v)?)
    }

    /// Any unary op; ops other than [`UnaryOp::keeps_int`] ones compute integer inputs in float.
    /// Complex inputs are refused.
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        if self.dtype.is_complex() {
            return Err(Error::DTypeNotSupported {
                op: op.name(),
                got: self.dtype,
                expected: "a real dtype",
            });
        }
        let dt = if op.keeps_int() { self.dtype } else { self.dtype.to_float() };
        let x = self.to_dtype(dt)?;
        let storage = on_backend!(&*x.read(), |B, b| B::wrap(B::unary(op, b, &x.layout, dt)?));
        Ok(Tensor::from_storage(storage, self.shape(), dt, self.device))
    }

    /// `where(cond, self, other)`: elements of `self` where `cond` is true.
    pub fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.check_same_device(b, "where")?;
        a.check_same_device(cond, "where")?;
        let dt = DType::promote(a.dtype, b.dtype);
        let shape = broadcast_shapes(&broadcast_shapes(cond.shape(), a.shape())?, b.shape())?;
        let c = cond.to_dtype(DType::Bool)?.broadcast_to(&shape)?;
        let a = a.to_dtype(dt)?.broadcast_to(&shape)?;
        let b = b.to_dtype(dt)?.broadcast_to(&shape)?;
        let (xg, yg) = (a.read(), b.read());
        let storage = on_backend!(&*c.read(), |B, cb| {
            let (x, y) = (buf::<B>(&xg, "where")?, buf::<B>(&yg, "where")?);
            B::wrap(B::where_(cb, &c.layout, x, &a.layout, y, &b.layout, dt)?)
        });
        Ok(Tensor::from_storage(storage, &shape, dt, a.device))
    }

    /// Mantissa in [0.5, 1) (this dtype) and exponent (int32) with x = m · 2^e.
    pub fn frexp(&self) -> Result<(Tensor, Tensor)> {
        if !self.dtype.is_float() {
            return Err(Error::DTypeNotSupported {
                op: "frexp",
                got: self.dtype,
                expected: "a floating dtype",
            });
        }
        let (m, e) = on_backend!(&*self.read(), |B, b| {
            let (m, e) = B::frexp(b, &self.layout, self.dtype)?;
            (B::wrap(m), B::wrap(e))
        });
        Ok((
            Tensor::from_storage(m, self.shape(), self.dtype, self.device),
            Tensor::from_storage(e, self.shape(), DType::I32, self.device),
        ))
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    /// logaddexp against log(exp(a) + exp(b)) where that does not overflow, and PyTorch's
    /// values where it does: equal infinities give themselves, NaN propagates.
    #[test]
    fn logaddexp_is_stable() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let a = [0.5, -3.0, 2.0, 1000.0, -1000.0, -inf, inf, -inf, nan, 7.0];
        let b = [1.5, 4.0, 2.0, 1000.0, -1001.0, -inf, inf, 3.0, 1.0, -inf];
        let want = |x: f64, y: f64| match (x, y) {
            (1000.0, 1000.0) => 1000.0 + std::f64::consts::LN_2,
            (-1000.0, _) => -1000.0 + (-1.0f64).exp().ln_1p(),
            _ => (x.exp() + y.exp()).ln(),
        };
        let t = |v: &[f64]| Tensor::from_vec(v.to_vec(), &[v.len()], Device::Cpu).unwrap();
        let y = t(&a).logaddexp(&t(&b)).unwrap().to_f64_vec().unwrap();
        for ((&x, &z), got) in a.iter().zip(&b).zip(y) {
            let w = want(x, z);
            assert!(
                got == w || (got - w).abs() < 1e-12 || (got.is_nan() && w.is_nan()),
                "{x} {z}: {got} vs {w}"
            );
        }
        let i = Tensor::from_vec(vec![1i64, 2], &[2], Device::Cpu).unwrap();
        assert_eq!(i.logaddexp_scalar(0.0).unwrap().dtype(), DType::F32);
    }

    /// hypot against the formula where it does not overflow, with values whose squares
    /// overflow f32 (the f32 result must still be exact), and IEEE's edge cases: an
    /// infinity wins over NaN.
    #[test]
    fn hypot_does_not_overflow() {
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let a = [3.0, -5.0, 0.0, 3e30, 1e-30, inf, nan, nan, -inf];
        let b = [4.0, 12.0, -0.0, -4e30, 1e-30, nan, inf, 1.0, 2.0];
        let want = [5.0, 13.0, 0.0, 5e30, 1e-30 * std::f64::consts::SQRT_2, inf, inf, nan, inf];
        let t = |v: &[f64]| Tensor::from_vec(v.to_vec(), &[v.len()], Device::Cpu).unwrap();
        for dt in [DType::F64, DType::F32] {
            let y = t(&a).to_dtype(dt).unwrap().hypot(&t(&b).to_dtype(dt).unwrap()).unwrap();
            assert_eq!(y.dtype(), dt);
            let tol = if dt == DType::F64 { 1e-15 } else { 1e-7 };
            for ((x, z), (got, w)) in a.iter().zip(&b).zip(y.to_f64_vec().unwrap().into_iter().zip(want)) {
                let ok = got == w || (got - w).abs() <= tol * w.abs() || (got.is_nan() && w.is_nan());
                assert!(ok, "{dt} hypot({x}, {z}) = {got}, expected {w}");
            }
        }
    }

    /// silu_mul equals silu(x) · y (the two ops it fuses), broadcasts, and keeps PyTorch's
    /// silu edge values: silu(-inf) · y is NaN (−inf · 0), silu(inf) · y is inf · y.
    #[test]
    fn silu_mul_is_silu_times_y() {
        let x = Tensor::from_vec(vec![-3.0f64, -0.5, 0.0, 0.7, 9.0, 40.0], &[2, 3], Device::Cpu).unwrap();
        let y = Tensor::from_vec(vec![2.0f64, -1.5, 0.25], &[3], Device::Cpu).unwrap();
        let got = x.silu_mul(&y).unwrap().to_f64_vec().unwrap();
        let want = x.silu().unwrap().mul(&y).unwrap().to_f64_vec().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-15 * w.abs().max(1.0), "{g} vs {w}");
        }
        let edge = Tensor::from_vec(vec![f64::NEG_INFINITY, f64::INFINITY], &[2], Device::Cpu).unwrap();
        let two = Tensor::from_vec(vec![2.0f64, 2.0], &[2], Device::Cpu).unwrap();
        let e = edge.silu_mul(&two).unwrap().to_f64_vec().unwrap();
        assert!(e[0].is_nan() && e[1] == f64::INFINITY, "{e:?}");
        let i = Tensor::from_vec(vec![1i64, 2], &[2], Device::Cpu).unwrap();
        assert_eq!(i.silu_mul(&i).unwrap().dtype(), DType::F32);
    }

    /// Closed forms L₂(x) = (x² − 4x + 2)/2 and L₃(x) = (−x³ + 9x² − 18x + 6)/6; n is
    /// truncated to an integer, negative (or NaN) n gives 0, x = 0 gives 1; integer inputs
    /// compute in f32; n broadcasts.
    #[test]
    fn laguerre_polynomial_l_follows_pytorch() {
        let x = Tensor::from_vec(vec![0.5f64, 2.0, 0.0, 3.0, 3.0, 1.5, -1.0], &[7], Device::Cpu).unwrap();
        let n =
            Tensor::from_vec(vec![2.0f64, 3.0, -1.0, 2.9, -0.5, f64::NAN, 1.0], &[7], Device::Cpu).unwrap();
        let y = x.special_laguerre_polynomial_l(&n).unwrap().to_f64_vec().unwrap();
        let want = [0.125, -1.0 / 3.0, 0.0, (9.0 - 12.0 + 2.0) / 2.0, 1.0, 0.0, 2.0];
        assert!(y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12), "{y:?}");
        let xi = Tensor::from_vec(vec![1i32, 2], &[2, 1], Device::Cpu).unwrap();
        let ni = Tensor::from_vec(vec![0i64, 1, 2], &[3], Device::Cpu).unwrap();
        let y = xi.special_laguerre_polynomial_l(&ni).unwrap();
        assert_eq!((y.dtype(), y.shape()), (DType::F32, &[2, 3][..]));
        assert_eq!(y.to_f64_vec().unwrap(), vec![1.0, 0.0, -0.5, 1.0, -1.0, -1.0]);
        let c = Tensor::zeros(&[2], DType::C64, Device::Cpu).unwrap();
        assert!(c.special_laguerre_polynomial_l(&c).is_err());
    }
}
