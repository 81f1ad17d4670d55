//! kiln: a tensor runtime with PyTorch semantics, a CPU reference backend and a CUDA
//! backend of dedicated kernels.

pub mod alloc_check;
mod backend;
pub mod convert;
pub mod cpu;
pub mod cuda;
pub mod device;
pub mod dtype;
pub mod error;
pub mod fp8;
pub mod io;
pub mod layout;
pub mod ops;
pub mod settings;
mod storage;
mod tensor;
pub mod testing;

pub use device::Device;
pub use dtype::{DType, Elem};
pub use error::{Error, Result};
pub use ops::{
    BinaryOp, Conv, ExpertGroups, GatedDelta, HeadNorm, InterpolateMode, KvSlots, PadMode, RandKind,
    ReduceOp, Reduction, Resize, RotaryStart, Router, Sdpa, UnaryOp,
};
pub use tensor::Tensor;
