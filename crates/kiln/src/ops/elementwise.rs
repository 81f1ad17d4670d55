//! Elementwise ops with PyTorch's type promotion and broadcasting.

use super::{BinaryOp, UnaryOp};
use crate::cpu;
use crate::error::{Error, Result};
use crate::layout::broadcast_shapes;
use crate::storage::Storage;
use crate::{DType, Tensor};

impl Tensor {
    /// Any binary op: promotes dtypes (integer true division and the special functions
    /// give float32), broadcasts shapes, and returns bool for comparisons.
    pub fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        self.check_same_device(rhs, op.name())?;
        let mut dt = DType::promote(self.dtype, rhs.dtype);
        if matches!(op, BinaryOp::Div | BinaryOp::LaguerrePolynomialL) && !dt.is_float() && !dt.is_complex() {
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
        let storage = match (&*a.read(), &*b.read()) {
            (Storage::Cpu(x), Storage::Cpu(y)) => {
                Storage::Cpu(cpu::elementwise::binary(op, x, &a.layout, y, &b.layout, dt, out))
            }
            (Storage::Cuda(x), Storage::Cuda(y)) => {
                Storage::Cuda(crate::cuda::ops::binary(op, x, &a.layout, y, &b.layout, dt, out)?)
            }
            _ => unreachable!("devices checked above"),
        };
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

    pub fn binary_scalar(&self, op: BinaryOp, v: f64) -> Result<Tensor> {
        self.binary(op, &self.scalar_like(v)?)
    }

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
        let storage = match &*x.read() {
            Storage::Cpu(b) => Storage::Cpu(cpu::elementwise::unary(op, b, &x.layout, dt)),
            Storage::Cuda(b) => Storage::Cuda(crate::cuda::ops::unary(op, b, &x.layout, dt)?),
        };
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
        let storage = match (&*c.read(), &*a.read(), &*b.read()) {
            (Storage::Cpu(c_), Storage::Cpu(x), Storage::Cpu(y)) => {
                Storage::Cpu(cpu::elementwise::where_(c_, &c.layout, x, &a.layout, y, &b.layout, dt))
            }
            (Storage::Cuda(c_), Storage::Cuda(x), Storage::Cuda(y)) => {
                Storage::Cuda(crate::cuda::ops::where_(c_, &c.layout, x, &a.layout, y, &b.layout, dt)?)
            }
            _ => unreachable!("devices checked above"),
        };
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
        let (m, e) = match &*self.read() {
            Storage::Cpu(b) => {
                let (m, e) = cpu::elementwise::frexp(b, &self.layout, self.dtype);
                (Storage::Cpu(m), Storage::Cpu(e))
            }
            Storage::Cuda(b) => {
                let (m, e) = crate::cuda::ops::frexp(b, &self.layout, self.dtype)?;
                (Storage::Cuda(m), Storage::Cuda(e))
            }
        };
        Ok((
            Tensor::from_storage(m, self.shape(), self.dtype, self.device),
            Tensor::from_storage(e, self.shape(), DType::I32, self.device),
        ))
    }
}

macro_rules! binary_methods {
    ($($name:ident, $scalar:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.binary(BinaryOp::$op, rhs)
                }
                pub fn $scalar(&self, v: f64) -> Result<Tensor> {
                    self.binary_scalar(BinaryOp::$op, v)
                }
            )*
        }
    };
}

binary_methods! {
    add, add_scalar => Add;
    sub, sub_scalar => Sub;
    mul, mul_scalar => Mul;
    div, div_scalar => Div;
    pow, pow_scalar => Pow;
    minimum, minimum_scalar => Minimum;
    maximum, maximum_scalar => Maximum;
    remainder, remainder_scalar => Remainder;
    heaviside, heaviside_scalar => Heaviside;
    special_laguerre_polynomial_l, special_laguerre_polynomial_l_scalar => LaguerrePolynomialL;
    eq, eq_scalar => Eq;
    ne, ne_scalar => Ne;
    lt, lt_scalar => Lt;
    le, le_scalar => Le;
    gt, gt_scalar => Gt;
    ge, ge_scalar => Ge;
}

macro_rules! unary_methods {
    ($($name:ident => $op:ident;)*) => {
        impl Tensor {
            $(
                pub fn $name(&self) -> Result<Tensor> {
                    self.unary(UnaryOp::$op)
                }
            )*
        }
    };
}

unary_methods! {
    neg => Neg; abs => Abs; exp => Exp; log => Log; sqrt => Sqrt; rsqrt => Rsqrt;
    sin => Sin; cos => Cos; tanh => Tanh; sigmoid => Sigmoid; silu => Silu; gelu => Gelu;
    gelu_tanh => GeluTanh; relu => Relu; reciprocal => Recip; square => Square;
    floor => Floor; ceil => Ceil; round => Round; sign => Sign; erf => Erf;
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

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
