//! Op definitions: shape / dtype / device rules checked once here, then each backend
//! computes (`cpu::*` or `cuda::ops::*`). A GPU op that has no kernel yet returns
//! `Error::NotImplemented`; nothing falls back to the CPU silently.

mod attention;
mod cast;
mod conv;
mod create;
mod elementwise;
mod experts;
mod histogram;
mod index;
mod interpolate;
mod linalg;
mod linalg_grad;
mod loss;
mod lu;
mod matmul;
mod nn;
mod pad;
mod reduce;
mod topk;
mod view;

pub use attention::Sdpa;
pub use conv::Conv;
pub use create::RandKind;
pub use experts::ExpertGroups;
pub use interpolate::{InterpolateMode, Resize};
pub use loss::Reduction;
pub use pad::PadMode;
pub use topk::Router;

/// Binary elementwise ops (PyTorch names in `Tensor` methods).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Minimum,
    Maximum,
    Remainder,
    Heaviside,
    /// `torch.special.laguerre_polynomial_l(x, n)`: Lₙ(x), n truncated to an integer.
    LaguerrePolynomialL,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge)
    }

    pub fn name(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            Pow => "pow",
            Minimum => "minimum",
            Maximum => "maximum",
            Remainder => "remainder",
            Heaviside => "heaviside",
            LaguerrePolynomialL => "special_laguerre_polynomial_l",
            Eq => "eq",
            Ne => "ne",
            Lt => "lt",
            Le => "le",
            Gt => "gt",
            Ge => "ge",
        }
    }
}

/// Unary elementwise ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Silu,
    Gelu,
    GeluTanh,
    Relu,
    Recip,
    Square,
    Floor,
    Ceil,
    Round,
    Sign,
    Erf,
}

impl UnaryOp {
    /// Ops that keep integer dtypes; the rest compute in floating point.
    pub fn keeps_int(self) -> bool {
        use UnaryOp::*;
        matches!(self, Neg | Abs | Relu | Square | Sign | Floor | Ceil | Round)
    }

    pub fn name(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Exp => "exp",
            Log => "log",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Sin => "sin",
            Cos => "cos",
            Tanh => "tanh",
            Sigmoid => "sigmoid",
            Silu => "silu",
            Gelu => "gelu",
            GeluTanh => "gelu_tanh",
            Relu => "relu",
            Recip => "reciprocal",
            Square => "square",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Sign => "sign",
            Erf => "erf",
        }
    }
}

/// Reductions over a set of dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Mean,
    Max,
    Min,
    ArgMax,
    ArgMin,
}
