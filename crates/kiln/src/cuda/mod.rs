//! CUDA runtime layer: device registry, caching allocator, NVRTC kernel cache, streams, events and
//! graphs. Everything loads the CUDA libraries at run time (cudarc `dynamic-loading`), so the crate
//! builds and runs on machines with no GPU; [`availability`] says why CUDA cannot be used there.
//!
//! Ordering model: cudarc's per-buffer event tracking is off. Buffers are raw device pointers
//! ([`DeviceBuffer`]) and all work (allocation, copies, launches) goes to the calling thread's
//! current stream of the device ([`CudaDevice::stream`]); code that uses several streams orders them
//! itself with [`Event`]s and [`Stream::wait`].
//!
//! Launching a kernel with raw pointers and scalars:
//! ```ignore
//! static ADD: KernelSource = KernelSource { name: "add", src: r#"
//! extern "C" __global__ void add_f32(const float* a, const float* b, float* out, long long n) {
//!     long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) out[i] = a[i] + b[i];
//! }"# };
//! let dev = kiln::cuda::device(0)?;
//! let func = dev.function(&ADD, "add_f32")?;
//! let (pa, pb, po, n) = (a.ptr(), b.ptr(), out.ptr(), len as i64);
//! let stream = dev.stream();
//! let mut launch = stream.launch_builder(&func);
//! launch.arg(&pa).arg(&pb).arg(&po).arg(&n);
//! // SAFETY: argument types match the kernel; the buffers hold `len` f32s.
//! unsafe { launch.launch(launch_cfg(len, 256)) }?;
//! ```

mod allocator;
mod availability;
mod backend;
mod device;
mod info;
mod kernels;
mod launch;
mod readback;
mod stream;

pub use allocator::{DeviceBuffer, DriverPeakProbe, MemoryStats};
pub use availability::availability;
pub(crate) use backend::Cuda;
pub use device::{device, BlasGuard, CudaDevice, DeviceProps};
pub use info::DeviceInfo;
pub use kernels::{
    compile_check, compile_to_ptx_check, kernel_cache_stats, kernel_overrides, launch_cfg, KernelCacheStats,
    KernelLoad, KernelLoadKind, KernelOverride, KernelSource, Strided, MAX_RANK, PRELUDE,
};
pub(crate) use launch::{dependent_launch, kernel_args, launch, Launch};
pub use readback::Readback;
pub use stream::{with_stream, Event, Graph, Stream};

/// Re-exports of the cudarc types that appear in this module's API.
pub use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};

pub mod ops;

/// The CUDA device behind a `Device::Cuda(i)` (an error for the CPU).
pub fn device_of(d: crate::Device) -> crate::Result<std::sync::Arc<CudaDevice>> {
    match d {
        crate::Device::Cuda(i) => device(i),
        crate::Device::Cpu => Err(crate::Error::invalid("cuda", "the CPU is not a CUDA device")),
    }
}
