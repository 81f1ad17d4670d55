//! Op definitions: shape / dtype / device rules checked once here, then the backend that
//! holds the operands computes, through the `Backend` trait of `backend.rs`. A kernel
//! only one backend has is taken through a `Route`; a GPU op with no kernel yet returns
//! `Error::NotImplemented`; nothing falls back to the CPU silently.

mod attention;
mod cast;
mod causal_conv;
mod conv;
mod create;
mod elementwise;
mod experts;
mod experts_fp8;
mod gated_delta;
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
pub(crate) mod quantize;
mod reduce;
mod rotary;
pub(crate) mod scaled_mm;
mod topk;
mod view;

pub use attention::Sdpa;
pub use causal_conv::CAUSAL_CONV_MAX_TAPS;
pub use conv::Conv;
pub use create::RandKind;
pub(crate) use elementwise::kernel_op_codes;
pub use elementwise::{BinaryOp, UnaryOp};
pub use experts::ExpertGroups;
pub use gated_delta::GatedDelta;
pub use index::Scatter;
pub(crate) use index::{wrap_index, Gather};
pub use interpolate::{InterpolateMode, Resize};
pub use loss::Reduction;
pub use pad::PadMode;
pub use rotary::{HeadNorm, KvSlots, RotaryStart};
pub use topk::Router;

/// `scale_a` / `scale_b` shapes `torch._scaled_mm` accepts (`Tensor::scaled_mm`, which tells
/// the CUDA launchers which one it validated; public as `kiln::fp8::Recipe`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recipe {
    /// One f32 scale per operand (each a one-element tensor).
    TensorWise,
    /// `scale_a` `[M, 1]` (per row of a) and `scale_b` `[1, N]` (per column of b).
    RowWise,
}

/// Reductions over a set of dims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (integers and bool give int64).
    Sum,
    /// Product (integers and bool give int64).
    Prod,
    /// Arithmetic mean (floating dtypes only).
    Mean,
    /// Largest value.
    Max,
    /// Smallest value.
    Min,
    /// Index of the first largest value, as int64.
    ArgMax,
    /// Index of the first smallest value, as int64.
    ArgMin,
}
