//! GPU op launchers: the CUDA half of each op in `crate::ops`. Each file serves one
//! kernel family (`kernels/<family>.cu`); shapes and dtypes were checked in `ops`.

/// Launches kernel `f` on `stream` (a `Stream`) with launch config `cfg` and the
/// arguments in order (each passed by reference, as cudarc wants). Unsafe as the launch
/// is: call it inside `unsafe` with a SAFETY note on what the kernel reads and writes.
/// A refused launch is [`crate::Error::KernelLaunch`] naming this call's module and line.
macro_rules! launch {
    ($stream:expr, $f:expr, $cfg:expr; $($arg:expr),* $(,)?) => {
        $stream.raw().launch_builder(&$f)$(.arg(&$arg))*.launch($cfg).map_err(launch_error!())
    };
}

/// [`launch!`] for kernels that call `kiln_after_previous_kernel()` (common.cuh) before
/// their first global access, taking the device (`&CudaDevice`) instead of a stream: on
/// sm_90+ they may start while the kernel before them finishes (programmatic dependent
/// launch, [`crate::cuda::Launch::after_previous`]), so a decode step's chain of small
/// kernels overlaps each one's launch with the previous one's tail.
macro_rules! launch_after {
    ($dev:expr, $f:expr, $cfg:expr; $($arg:expr),* $(,)?) => {{
        let dev: &$crate::cuda::CudaDevice = &$dev;
        let how = $crate::cuda::Launch { after_previous: $crate::cuda::dependent_launch(dev)?, ..Default::default() };
        $crate::cuda::launch(&dev.stream(), &$f, $cfg, how, &mut [$(&$arg as *const _ as *mut std::ffi::c_void),*])
    }};
}

/// The `map_err` of a launch: the driver's error as [`crate::Error::KernelLaunch`] at the
/// module and line where it is written.
macro_rules! launch_error {
    () => {
        |e: cudarc::driver::DriverError| $crate::Error::KernelLaunch {
            site: concat!(module_path!(), ":", line!()),
            msg: e.to_string(),
        }
    };
}

pub mod attention_decode;
pub mod attention_prefill;
mod causal_conv;
mod copy;
mod elementwise;
mod expert_groups;
mod fp8_experts;
mod fp8_gemm;
mod fp8_linear;
mod gated_delta;
pub mod gemv;
mod grouped_mm;
mod histogram;
mod index;
mod linalg_inv;
mod linalg_lu;
mod linalg_trsm;
mod loss;
mod matmul;
mod reduce;
mod rotary;
mod scaled_mm;
mod topk;

pub(crate) use causal_conv::causal_conv;
pub use copy::{arange, cast, copy_into, fill, rand};
pub(crate) use elementwise::{binary, frexp, unary, where_};
pub use expert_groups::{expert_groups, EXPERT_GROUPS_MAX};
pub use fp8_experts::experts_declines as fp8_experts_declines;
pub(crate) use fp8_experts::{
    expert_linear_sum as fp8_expert_linear_sum, expert_swiglu as fp8_expert_swiglu, Fp8Experts,
};
pub use fp8_gemm::{fp8_gemm_choice, own_fp8_gemm_launches, Fp8Gemm};
pub use fp8_linear::{
    choose as fp8_linear_choose, declines as fp8_linear_declines, Variant as Fp8LinearVariant, W8A16_MAX_M,
};
pub(crate) use fp8_linear::{fp8_linear, Fp8Linear};
pub use gated_delta::fits as gated_delta_fits;
pub(crate) use gated_delta::{gated_delta_step, GatedDeltaBuffers};
pub use grouped_mm::grouped_mm;
pub use histogram::{bincount, decode_range, value_range_i64};
pub use index::scatter;
pub(crate) use index::{gather, index_select, take};
pub use linalg_inv::{inv_small, INV_MAX_N};
pub use linalg_lu::{lu_factor, lu_solve};
pub use linalg_trsm::{trsm_small, TRSM_MAX_N};
pub use loss::mse_loss;
pub use matmul::matmul;
pub use reduce::{add_rms_norm, BlockSync, SoftmaxPath};
pub(crate) use reduce::{reduce, rms_norm, softmax, var_mean};
pub(crate) use rotary::{max_head_dim as rotary_max_head_dim, rotary};
pub(crate) use scaled_mm::scaled_mm;
pub use scaled_mm::{cublaslt_tunings, quantize_rows, LtTuning, GEMV_MAX_M};
pub use topk::{router_topk, topk};

pub(crate) use super::Strided;

/// A buffer and the element its contiguous view starts at.
pub(crate) type At<'a> = (&'a DeviceBuffer, usize);

/// The device address of an [`At`]'s first element, for elements of `size` bytes.
fn at_ptr((buf, at): At, size: usize) -> u64 {
    buf.ptr() + (at * size) as u64
}
use super::{CudaDevice, DeviceBuffer, KernelSource};
use crate::error::{Error, Result};
use crate::{DType, Device};
use cudarc::driver::LaunchConfig;
use std::sync::Arc;

macro_rules! kernel_source {
    ($name:literal) => {
        KernelSource { name: $name, src: include_str!(concat!("../kernels/", $name, ".cu")) }
    };
}

pub(crate) const ATTENTION_DECODE: KernelSource = kernel_source!("attention_decode");
pub(crate) const ATTENTION_PREFILL: KernelSource = kernel_source!("attention_prefill");
pub(crate) const COPY: KernelSource = kernel_source!("copy");
pub(crate) const ELEMENTWISE: KernelSource = kernel_source!("elementwise");
pub(crate) const INDEX: KernelSource = kernel_source!("index");
pub(crate) const REDUCE: KernelSource = kernel_source!("reduce");
pub(crate) const SOFTMAX: KernelSource = kernel_source!("softmax");
pub(crate) const NORM: KernelSource = kernel_source!("norm");
pub(crate) const GEMV: KernelSource = kernel_source!("gemv");
pub(crate) const TOPK: KernelSource = kernel_source!("topk");
pub(crate) const BINCOUNT: KernelSource = kernel_source!("bincount");
pub(crate) const LOSS: KernelSource = kernel_source!("loss");
pub(crate) const SCALED_MM: KernelSource = kernel_source!("scaled_mm");
pub(crate) const FP8_LINEAR: KernelSource = kernel_source!("fp8_linear");
pub(crate) const FP8_GEMM: KernelSource = kernel_source!("fp8_gemm");
pub(crate) const GROUPED_MM: KernelSource = kernel_source!("grouped_mm");
pub(crate) const EXPERT_GROUPS: KernelSource = kernel_source!("expert_groups");
pub(crate) const LINALG_INV: KernelSource = kernel_source!("linalg_inv");
pub(crate) const LINALG_TRSM: KernelSource = kernel_source!("linalg_trsm");
pub(crate) const LINALG_LU: KernelSource = kernel_source!("linalg_lu");
pub(crate) const ROTARY: KernelSource = kernel_source!("rotary");
pub(crate) const GATED_DELTA: KernelSource = kernel_source!("gated_delta");
pub(crate) const CAUSAL_CONV: KernelSource = kernel_source!("causal_conv");

/// Every kernel source, for the CI compile check and cache warm-up.
pub const ALL_SOURCES: &[KernelSource] = &[
    ATTENTION_DECODE,
    ATTENTION_PREFILL,
    COPY,
    ELEMENTWISE,
    INDEX,
    REDUCE,
    SOFTMAX,
    NORM,
    GEMV,
    TOPK,
    BINCOUNT,
    LOSS,
    SCALED_MM,
    FP8_LINEAR,
    FP8_GEMM,
    GROUPED_MM,
    EXPERT_GROUPS,
    LINALG_INV,
    LINALG_TRSM,
    LINALG_LU,
    ROTARY,
    GATED_DELTA,
    CAUSAL_CONV,
];

/// The kernel-name suffix of a dtype in the elementwise / reduction families.
pub(crate) fn suffix(op: &'static str, dt: DType) -> Result<&'static str> {
    Ok(match dt {
        DType::Bool => "bool",
        DType::U8 => "u8",
        DType::U16 => "u16",
        DType::U32 => "u32",
        DType::U64 => "u64",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F32 => "f32",
        DType::F64 => "f64",
        _ => return Err(Error::NotImplemented { op, device: Device::Cuda(0), dtype: dt }),
    })
}

/// Suffix by element size, for kernels that only move bytes.
pub(crate) fn size_suffix(dt: DType) -> &'static str {
    match dt.size() {
        1 => "b1",
        2 => "b2",
        4 => "b4",
        _ => "b8",
    }
}

/// dtype code as `kernels/copy.cu` numbers them (kiln::DType order).
pub(crate) fn dtype_code(op: &'static str, dt: DType) -> Result<i32> {
    if dt.is_complex() {
        return Err(Error::NotImplemented { op, device: Device::Cuda(0), dtype: dt });
    }
    Ok(DType::ALL.iter().position(|&d| d == dt).expect("every dtype is in ALL") as i32)
}

/// The device a buffer belongs to.
pub(crate) fn dev_of(b: &DeviceBuffer) -> Result<Arc<CudaDevice>> {
    super::device(b.ordinal())
}

/// Grid-stride launch shape for `n` elements: 256 threads, at most 16 blocks per SM.
pub(crate) fn grid(dev: &CudaDevice, n: usize) -> LaunchConfig {
    let max_blocks = dev.props().sm_count as usize * 16;
    let blocks = n.div_ceil(256).clamp(1, max_blocks.max(1));
    LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

/// One block per row (up to 65535·8 rows in flight; kernels loop over the rest).
pub(crate) fn rows_grid(outer: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (outer.clamp(1, 1 << 19) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Threads per row block: enough for the row, a multiple of 32, at most 1024.
pub(crate) fn row_threads(r: usize) -> u32 {
    (r.div_ceil(32) * 32).clamp(32, 1024).next_power_of_two().min(1024) as u32
}
