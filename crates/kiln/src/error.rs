//! Typed errors. Library code returns these; it never panics on bad input.

use crate::{DType, Device};

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: shapes {lhs:?} and {rhs:?} do not match")]
    ShapeMismatch { op: &'static str, lhs: Vec<usize>, rhs: Vec<usize> },
    #[error("{op}: {msg}")]
    BadShape { op: &'static str, msg: String },
    #[error("{op}: dtype {got} not supported (expected {expected})")]
    DTypeNotSupported { op: &'static str, got: DType, expected: &'static str },
    #[error("{op}: dtypes {lhs} and {rhs} do not match")]
    DTypeMismatch { op: &'static str, lhs: DType, rhs: DType },
    #[error("{op}: tensors on different devices ({lhs} and {rhs})")]
    DeviceMismatch { op: &'static str, lhs: Device, rhs: Device },
    #[error("dim {dim} out of range for a tensor of rank {rank}")]
    DimOutOfRange { dim: isize, rank: usize },
    #[error("{op}: index {index} out of range for a dim of size {size}")]
    IndexOutOfRange { op: &'static str, index: i64, size: usize },
    #[error("{op}: {msg}")]
    InvalidArgument { op: &'static str, msg: String },
    #[error("{path}: {msg}")]
    File { path: String, msg: String },
    #[error("io error on {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("CUDA is not available: {0}")]
    CudaUnavailable(String),
    #[error("CUDA error: {0}")]
    Cuda(String),
    /// The device could not give `requested` bytes, even after the pool released its free
    /// blocks; the three memory levels at that moment say whose memory it is.
    #[error(
        "cuda:{ordinal}: out of memory allocating {requested} B (live {live} B, pool {reserved} B, driver {driver_used} of {driver_total} B used)"
    )]
    CudaOutOfMemory {
        ordinal: usize,
        requested: usize,
        live: u64,
        reserved: u64,
        driver_used: usize,
        driver_total: usize,
    },
    /// A kernel launch the driver refused (bad configuration, too many resources, …);
    /// `site` is the launcher's module and line.
    #[error("kernel launch at {site} failed: {msg}")]
    KernelLaunch { site: &'static str, msg: String },
    #[error("kernel {name} failed to compile:\n{log}")]
    KernelCompile { name: String, log: String },
    #[error("{op}: the byte size of shape {shape:?} overflows")]
    SizeOverflow { op: &'static str, shape: Vec<usize> },
    #[error("{op}: cannot allocate {bytes} B of host memory")]
    HostOutOfMemory { op: &'static str, bytes: usize },
    #[error("{op} is not implemented on {device} for {dtype}")]
    NotImplemented { op: &'static str, device: Device, dtype: DType },
}

impl Error {
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument { op, msg: msg.into() }
    }
    pub fn bad_shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::BadShape { op, msg: msg.into() }
    }
}

impl From<cudarc::driver::DriverError> for Error {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Error::Cuda(e.to_string())
    }
}

impl From<cudarc::cublas::result::CublasError> for Error {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        Error::Cuda(format!("cuBLAS: {e:?}"))
    }
}
