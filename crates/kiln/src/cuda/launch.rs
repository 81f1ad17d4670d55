//! Kernel launches with the attributes cudarc's launch builder does not set, through
//! `cuLaunchKernelEx`: a thread-block cluster sized at launch, a cooperative (co-resident)
//! grid, and programmatic dependent launch.

use std::ffi::c_void;

use cudarc::driver::sys::{
    self, CUfunction_attribute as FuncAttr, CUlaunchAttribute, CUlaunchAttributeID as Id, CUlaunchConfig,
};
use cudarc::driver::{CudaFunction, LaunchConfig};

use super::{CudaDevice, Stream};
use crate::settings;

/// What a launch asks for beyond its grid.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Launch {
    /// Blocks per cluster (sm_90+); sizes above the portable 8 are allowed on the function.
    pub cluster: Option<u32>,
    /// Every block resident at once; the caller keeps the grid within what fits.
    pub cooperative: bool,
    /// The kernel may start while the previous kernel on the stream still runs (programmatic
    /// stream serialization): only for kernels that call `kiln_wait_previous_kernel()`
    /// (common.cuh; most through `kiln_after_previous_kernel()`) before any global memory
    /// access other than reads of frozen storage (`Tensor::freeze`).
    pub after_previous: bool,
}

/// Whether a launch on `dev` uses programmatic dependent launch ([`Launch::after_previous`]):
/// switched on ([`settings::AFTER_PREVIOUS`]; benchmarks measure both) and sm_90+ (the
/// `griddepcontrol` instructions and the launch attribute are Hopper's).
pub(crate) fn dependent_launch(dev: &CudaDevice) -> crate::error::Result<bool> {
    Ok(settings::AFTER_PREVIOUS.get()? && dev.props().cc_major >= 9)
}

/// Kernel arguments as `cuLaunchKernelEx` takes them: a pointer to each value, which must be
/// a named local of the kernel parameter's type (a temporary would not outlive the array).
macro_rules! kernel_args {
    ($($a:ident),* $(,)?) => { [$(&$a as *const _ as *mut std::ffi::c_void),*] };
}
pub(crate) use kernel_args;

/// Launches `f` on `stream` as `how` says.
///
/// # Safety
/// As any kernel launch: `args` point at values of the kernel's parameter types, in order,
/// and the kernel stays inside the memory they describe; `how` holds for the kernel (see
/// [`Launch`]). A launch the driver refuses is [`crate::Error::KernelLaunch`] naming the
/// caller's file.
#[track_caller]
pub(crate) unsafe fn launch(
    stream: &Stream,
    f: &CudaFunction,
    cfg: LaunchConfig,
    how: Launch,
    args: &mut [*mut c_void],
) -> crate::Result<()> {
    let site = std::panic::Location::caller().file();
    let raw = stream.raw();
    raw.context().bind_to_thread()?;
    let mut attrs: Vec<CUlaunchAttribute> = Vec::with_capacity(3);
    let attr = |id: Id| {
        // SAFETY: a plain C struct of integers and a union of them: all-zero is valid.
        let mut a: CUlaunchAttribute = unsafe { std::mem::zeroed() };
        a.id = id;
        a
    };
    if let Some(c) = how.cluster {
        if c > 8 {
            // SAFETY: a valid function handle and attribute.
            unsafe {
                sys::cuFuncSetAttribute(
                    f.cu_function(),
                    FuncAttr::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                    1,
                )
            }
            .result()?;
        }
        let mut a = attr(Id::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
        a.value.clusterDim.x = c;
        a.value.clusterDim.y = 1;
        a.value.clusterDim.z = 1;
        attrs.push(a);
    }
    if how.cooperative {
        let mut a = attr(Id::CU_LAUNCH_ATTRIBUTE_COOPERATIVE);
        a.value.cooperative = 1;
        attrs.push(a);
    }
    if how.after_previous {
        let mut a = attr(Id::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
        a.value.programmaticStreamSerializationAllowed = 1;
        attrs.push(a);
    }
    let config = CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: raw.cu_stream(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    };
    // SAFETY: the caller vouches for the arguments; `config` and `attrs` outlive the call.
    unsafe { sys::cuLaunchKernelEx(&config, f.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) }
        .result()
        .map_err(|e| crate::Error::KernelLaunch { site, msg: e.to_string() })
}
