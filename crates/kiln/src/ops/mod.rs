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
pub(crate) use elementwise::kernel_op_codes;
pub use elementwise::{BinaryOp, UnaryOp};
pub use experts::ExpertGroups;
pub use interpolate::{InterpolateMode, Resize};
pub use loss::Reduction;
pub use pad::PadMode;
pub use topk::Router;

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
