//! Typed errors. Library code returns these; it never panics on bad input.

use crate::{DType, Device};

/// `Result` with kiln's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Every error kiln returns. `op` fields name the operation that refused its input (e.g.
/// `"matmul"`), as the message shows first.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Two shapes that must agree (or broadcast) do not.
    #[error("{op}: shapes {lhs:?} and {rhs:?} do not match")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's shape.
        lhs: Vec<usize>,
        /// The second operand's shape.
        rhs: Vec<usize>,
    },
    /// A shape the operation cannot take, for the reason in `msg`.
    #[error("{op}: {msg}")]
    BadShape {
        /// The operation.
        op: &'static str,
        /// What is wrong with the shape.
        msg: String,
    },
    /// The operation does not take this dtype.
    #[error("{op}: dtype {got} not supported (expected {expected})")]
    DTypeNotSupported {
        /// The operation.
        op: &'static str,
        /// The dtype it was given.
        got: DType,
        /// The dtypes it takes, in words.
        expected: &'static str,
    },
    /// Operands that must share a dtype do not.
    #[error("{op}: dtypes {lhs} and {rhs} do not match")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The dtype the other must match (usually the first operand's).
        lhs: DType,
        /// The dtype that does not match it.
        rhs: DType,
    },
    /// Operands are on different devices; kiln never moves data implicitly.
    #[error("{op}: tensors on different devices ({lhs} and {rhs})")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's device.
        lhs: Device,
        /// The second operand's device.
        rhs: Device,
    },
    /// A dim index outside `-rank..rank`.
    #[error("dim {dim} out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        /// The dim as given (negative counts from the end).
        dim: isize,
        /// The tensor's rank.
        rank: usize,
    },
    /// An element index outside its dim.
    #[error("{op}: index {index} out of range for a dim of size {size}")]
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The index as given.
        index: i64,
        /// The size of the dim it indexes.
        size: usize,
    },
    /// An argument other than a shape or dtype is invalid (see [`Error::invalid`]).
    #[error("{op}: {msg}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// A file's contents are unusable (corrupt, truncated, unsupported).
    #[error("{path}: {msg}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        msg: String,
    },
    /// Opening or reading a file failed.
    #[error("io error on {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// CUDA cannot be used here (no driver, no device, missing library); the text says why.
    #[error("CUDA is not available: {0}")]
    CudaUnavailable(String),
    /// A CUDA driver, NVRTC or cuBLAS call failed; the text is the library's error.
    #[error("CUDA error: {0}")]
    Cuda(String),
    /// The device could not give `requested` bytes, even after the pool released its free
    /// blocks; the three memory levels at that moment say whose memory it is.
    #[error(
        "cuda:{ordinal}: out of memory allocating {requested} B (live {live} B, pool {reserved} B, driver {driver_used} of {driver_total} B used)"
    )]
    CudaOutOfMemory {
        /// The device's ordinal.
        ordinal: usize,
        /// Bytes the allocation asked for.
        requested: usize,
        /// Bytes held by live buffers
        /// ([`MemoryStats::live_bytes`](crate::cuda::MemoryStats::live_bytes)).
        live: u64,
        /// Bytes the pool held from the driver, live and cached
        /// ([`MemoryStats::reserved_bytes`](crate::cuda::MemoryStats::reserved_bytes)).
        reserved: u64,
        /// Device memory in use by every process (`total - free` from the driver).
        driver_used: usize,
        /// The device's total memory.
        driver_total: usize,
    },
    /// A kernel launch the driver refused (bad configuration, too many resources, …);
    /// `site` is the launcher's module and line.
    #[error("kernel launch at {site} failed: {msg}")]
    KernelLaunch {
        /// `module::path:line` of the launch.
        site: &'static str,
        /// The driver's error.
        msg: String,
    },
    /// NVRTC rejected a kernel source.
    #[error("kernel {name} failed to compile:\n{log}")]
    KernelCompile {
        /// The source's [`KernelSource::name`](crate::cuda::KernelSource::name).
        name: String,
        /// NVRTC's compile log.
        log: String,
    },
    /// The byte size of a shape does not fit in `usize`.
    #[error("{op}: the byte size of shape {shape:?} overflows")]
    SizeOverflow {
        /// The operation.
        op: &'static str,
        /// The shape asked for.
        shape: Vec<usize>,
    },
    /// A host allocation failed (reported instead of aborting the process).
    #[error("{op}: cannot allocate {bytes} B of host memory")]
    HostOutOfMemory {
        /// The operation.
        op: &'static str,
        /// Bytes asked for.
        bytes: usize,
    },
    /// The operation has no kernel for this device and dtype; kiln does not fall back to the
    /// CPU silently.
    #[error("{op} is not implemented on {device} for {dtype}")]
    NotImplemented {
        /// The operation.
        op: &'static str,
        /// The device it was asked on.
        device: Device,
        /// The dtype it was asked for.
        dtype: DType,
    },
}

impl Error {
    /// An [`Error::InvalidArgument`] of `op`.
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument { op, msg: msg.into() }
    }
    /// An [`Error::BadShape`] of `op`.
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
