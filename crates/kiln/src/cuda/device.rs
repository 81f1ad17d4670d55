//! The device registry and [`CudaDevice`]: context, default stream, properties, memory, copies and
//! the cuBLAS handle.

use std::collections::hash_map::{Entry, HashMap};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cudarc::cublas::CudaBlas;
use cudarc::driver::result as dresult;
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{CudaContext, CudaStream};

use super::allocator::{self, DeviceBuffer, DriverPeakProbe, MemoryStats, Pool};
use super::availability::{self, quiet_catch};
use super::kernels::KernelCache;
use super::stream::{self, Capture, Stream};
use crate::error::{Error, Result};

/// Static properties of a device, read once when it is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProps {
    /// Device name as the driver reports it, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub name: String,
    /// Compute capability, major part (9 for sm_90).
    pub cc_major: i32,
    /// Compute capability, minor part.
    pub cc_minor: i32,
    /// Number of streaming multiprocessors.
    pub sm_count: i32,
    /// Total device memory in bytes.
    pub total_mem: usize,
    /// L2 cache size in bytes.
    pub l2_bytes: i32,
    /// Default static shared memory per block (48 KiB).
    pub max_shared_mem_per_block: i32,
    /// Shared memory per block a kernel may opt in to (`cuFuncSetAttribute`).
    pub max_shared_mem_per_block_optin: i32,
    /// Most threads a block may have.
    pub max_threads_per_block: i32,
    /// Threads per warp (32 on every current GPU).
    pub warp_size: i32,
}

/// One CUDA device: its primary context, a default stream, the caching allocator, the kernel
/// cache and a lazily created cuBLAS handle. Get it with [`device`].
pub struct CudaDevice {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    default_stream: Stream,
    props: DeviceProps,
    driver_version: i32,
    nvrtc_version: (i32, i32),
    pool: Arc<Pool>,
    pub(crate) kernels: KernelCache,
    blas: Mutex<Option<BlasSlot>>,
    capture: Mutex<Option<Capture>>,
    /// Tests set this so every new buffer starts as 0xFF bytes (NaN / -1 / true): an
    /// element a kernel forgets to write then shows up.
    poison: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice").field("ordinal", &self.ordinal).field("name", &self.props.name).finish()
    }
}

/// The device `cuda:{ordinal}`, opened on first use and shared afterwards.
pub fn device(ordinal: usize) -> Result<Arc<CudaDevice>> {
    static REGISTRY: OnceLock<Mutex<HashMap<usize, Arc<CudaDevice>>>> = OnceLock::new();
    availability::availability().map_err(Error::CudaUnavailable)?;
    let mut reg = REGISTRY.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(dev) = reg.get(&ordinal) {
        return Ok(dev.clone());
    }
    let dev = Arc::new(CudaDevice::open(ordinal)?);
    reg.insert(ordinal, dev.clone());
    Ok(dev)
}

impl CudaDevice {
    fn open(ordinal: usize) -> Result<Self> {
        let count = CudaContext::device_count()?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::CudaUnavailable(format!("no device cuda:{ordinal} ({count} present)")));
        }
        let ctx = CudaContext::new(ordinal)?;
        // SAFETY: kiln passes raw device pointers and orders work across streams itself (module
        // docs); cudarc's per-slice events would only add overhead and break graph capture.
        unsafe { ctx.disable_event_tracking() };
        // A created stream, not the legacy NULL stream: the NULL stream cannot be captured and
        // synchronises with every other blocking stream.
        let default_stream = Stream::from_raw(ctx.new_stream()?);
        let (cc_major, cc_minor) = ctx.compute_capability()?;
        let props = DeviceProps {
            name: ctx.name()?,
            cc_major,
            cc_minor,
            sm_count: ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            total_mem: ctx.total_mem()?,
            l2_bytes: ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
            max_shared_mem_per_block: ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
            max_shared_mem_per_block_optin: ctx
                .attribute(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            max_threads_per_block: ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            warp_size: ctx.attribute(Attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        };
        let driver_version = availability::driver_version().map_err(Error::CudaUnavailable)?;
        let nvrtc_version = availability::nvrtc_version().map_err(Error::CudaUnavailable)?;
        Ok(CudaDevice {
            ordinal,
            pool: Pool::new(ctx.clone()),
            ctx,
            default_stream,
            props,
            driver_version,
            nvrtc_version,
            kernels: KernelCache::default(),
            blas: Mutex::new(None),
            capture: Mutex::new(None),
            poison: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The device's ordinal: `i` of `Device::Cuda(i)`.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's primary context (cudarc), for driver calls kiln does not wrap.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Static properties read when the device was opened.
    pub fn props(&self) -> &DeviceProps {
        &self.props
    }

    /// `cuDriverGetVersion`: newest CUDA version the driver supports, e.g. 13000.
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// NVRTC (major, minor).
    pub fn nvrtc_version(&self) -> (i32, i32) {
        self.nvrtc_version
    }

    /// NVRTC target for this device: `sm_{major}{minor}`, with the `a` suffix (arch-specific
    /// features such as wgmma) from compute capability 9.0 on, e.g. `sm_90a` on an H200.
    pub fn arch(&self) -> String {
        super::kernels::arch_name(self.props.cc_major, self.props.cc_minor)
    }

    /// The device's default stream (a non-blocking stream created with the device).
    pub fn default_stream(&self) -> &Stream {
        &self.default_stream
    }

    /// The calling thread's current stream for this device: the innermost
    /// [`with_stream`](super::with_stream) override, else the default stream. All allocations,
    /// copies and launches of this module go there.
    pub fn stream(&self) -> Stream {
        match stream::current_override(self.ordinal) {
            Some(s) => Stream::from_raw(s),
            None => self.default_stream.clone(),
        }
    }

    /// Blocks the host until all work on all streams of this device is done.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.ctx.synchronize()?)
    }

    /// Runs `f` between `cuProfilerStart` and `cuProfilerStop`, the range that
    /// `ncu --profile-from-start off` profiles (without a profiler both calls do nothing).
    /// The device is idle at both ends, so the range holds exactly the kernels `f` queues.
    pub fn profiler_range<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.ctx.bind_to_thread()?;
        self.synchronize()?;
        // SAFETY: takes no arguments; this device's context is current on this thread.
        unsafe { cudarc::driver::sys::cuProfilerStart() }.result()?;
        let r = f().and_then(|r| self.synchronize().map(|()| r));
        // SAFETY: as above; stopping without a start is harmless.
        unsafe { cudarc::driver::sys::cuProfilerStop() }.result()?;
        r
    }

    pub(crate) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    pub(crate) fn capture_slot(&self) -> MutexGuard<'_, Option<Capture>> {
        self.capture.lock().unwrap_or_else(|e| e.into_inner())
    }

    // ---- memory -------------------------------------------------------------------------------

    /// `bytes` of uninitialised device memory, ordered on the current stream. Zero bytes gives a
    /// null buffer without touching the driver. On out-of-memory the cache is emptied once and the
    /// allocation retried.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        let buf = self.pool.alloc(bytes, &self.stream())?;
        if self.poison.load(std::sync::atomic::Ordering::Relaxed) && !buf.is_empty() {
            // SAFETY: the range is exactly the buffer just allocated.
            unsafe { self.memset_d8(buf.ptr(), 0xFF, buf.len())? };
        }
        Ok(buf)
    }

    /// Fill every later allocation with 0xFF bytes (for tests that catch unwritten output).
    pub fn set_poison(&self, on: bool) {
        self.poison.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Like [`CudaDevice::alloc`], then zero-filled (async).
    pub fn alloc_zeroed(&self, bytes: usize) -> Result<DeviceBuffer> {
        let buf = self.alloc(bytes)?;
        // SAFETY: `buf` was just allocated with at least `bytes` bytes and is ordered on the
        // current stream, where the memset goes.
        unsafe { self.memset_d8(buf.ptr(), 0, bytes) }?;
        Ok(buf)
    }

    /// Frees all cached (unused) blocks. Synchronises the device.
    pub fn empty_cache(&self) -> Result<()> {
        self.pool.empty_cache(&self.stream())
    }

    /// The caching allocator's current counters and peaks.
    pub fn memory_stats(&self) -> MemoryStats {
        self.pool.stats()
    }

    /// Sets the peaks of [`MemoryStats`] to the current values.
    pub fn reset_peak(&self) {
        self.pool.reset_peak()
    }

    /// `(free, total)` device memory in bytes according to the driver (all processes).
    pub fn driver_mem_info(&self) -> Result<(usize, usize)> {
        self.ctx.bind_to_thread()?;
        allocator::driver_mem_info(&self.ctx)
    }

    /// Starts sampling driver-used memory (see [`DriverPeakProbe`]).
    pub fn driver_peak_probe(&self) -> Result<DriverPeakProbe> {
        DriverPeakProbe::start(self.ctx.clone())
    }

    // ---- copies -------------------------------------------------------------------------------

    /// Copies host bytes to a new device buffer (async on the current stream). `src` is ordinary
    /// pageable memory, which the driver stages before returning, so it may be reused at once.
    pub fn htod(&self, src: &[u8]) -> Result<DeviceBuffer> {
        let buf = self.alloc(src.len())?;
        // SAFETY: `buf` holds at least `src.len()` bytes, is ordered on the current stream, and
        // `src` is pageable host memory that the driver copies out before returning.
        unsafe { self.htod_copy(src, buf.ptr()) }?;
        Ok(buf)
    }

    /// Copies `src` to device address `dst` (async on the current stream).
    ///
    /// # Safety
    /// `dst..dst + src.len()` must be live device memory of this device not in use by unordered
    /// work; `src` must be pageable (not page-locked) host memory.
    pub unsafe fn htod_copy(&self, src: &[u8], dst: u64) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let stream = self.stream();
        if stream.is_capturing()? {
            // A replay would copy whatever the host memory then holds, or nothing at all.
            return Err(Error::Cuda("htod: cannot copy host values into a graph capture".into()));
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: the caller guarantees `dst` covers `src.len()` bytes; pageable `src` is staged by
        // the driver before the call returns.
        unsafe { dresult::memcpy_htod_async(dst, src, stream.cu_stream()) }?;
        Ok(())
    }

    /// Reads `len` bytes at `byte_offset` of `buf` back to the host. This is a host
    /// synchronisation: it waits for all work queued on the current stream.
    pub fn dtoh(&self, buf: &DeviceBuffer, byte_offset: usize, len: usize) -> Result<Vec<u8>> {
        if byte_offset.checked_add(len).is_none_or(|end| end > buf.len()) {
            let msg = format!("bytes {byte_offset}..+{len} out of a {}-byte buffer", buf.len());
            return Err(Error::invalid("dtoh", msg));
        }
        let mut out = vec![0u8; len];
        // SAFETY: `byte_offset..byte_offset + len` lies within `buf` (checked above).
        unsafe { self.dtoh_copy(buf.ptr() + byte_offset as u64, &mut out) }?;
        Ok(out)
    }

    /// Copies `dst.len()` bytes from device address `src` into `dst` and waits for it (host sync of
    /// the current stream).
    ///
    /// # Safety
    /// `src..src + dst.len()` must be live device memory of this device.
    pub unsafe fn dtoh_copy(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let stream = self.stream();
        if stream.is_capturing()? {
            return Err(Error::Cuda("dtoh: cannot read back to the host during graph capture".into()));
        }
        self.ctx.bind_to_thread()?;
        // SAFETY: the caller guarantees the source range; `dst` stays borrowed until the stream
        // synchronisation below has completed the copy.
        unsafe { dresult::memcpy_dtoh_async(dst, src, stream.cu_stream()) }?;
        stream.synchronize()?;
        Ok(())
    }

    /// Copies `bytes` from device address `src` to `dst` (async on the current stream).
    ///
    /// # Safety
    /// Both ranges must be live device memory of this device, not in use by unordered work.
    pub unsafe fn dtod(&self, src: u64, dst: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.stream();
        self.ctx.bind_to_thread()?;
        // SAFETY: ranges guaranteed by the caller.
        unsafe { dresult::memcpy_dtod_async(dst, src, bytes, stream.cu_stream()) }?;
        Ok(())
    }

    /// Sets `bytes` bytes at device address `dst` to `value` (async on the current stream).
    ///
    /// # Safety
    /// The range must be live device memory of this device, not in use by unordered work.
    pub unsafe fn memset_d8(&self, dst: u64, value: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.stream();
        self.ctx.bind_to_thread()?;
        // SAFETY: range guaranteed by the caller.
        unsafe { dresult::memset_d8_async(dst, value, bytes, stream.cu_stream()) }?;
        Ok(())
    }

    // ---- cuBLAS -------------------------------------------------------------------------------

    /// The device's cuBLAS handle, created on first use, bound to the current stream with a
    /// workspace of its own for that stream (so captured GEMMs allocate nothing). The guard holds
    /// the handle's lock: keep it only while enqueuing cuBLAS calls.
    pub fn cublas(&self) -> Result<BlasGuard<'_>> {
        let mut slot = self.blas.lock().unwrap_or_else(|e| e.into_inner());
        self.ctx.bind_to_thread()?;
        if slot.is_none() {
            let stream = self.default_stream.raw().clone();
            let blas =
                quiet_catch("no libcublas", || CudaBlas::new(stream)).map_err(Error::CudaUnavailable)??;
            *slot = Some(BlasSlot { blas, workspaces: HashMap::new() });
        }
        let Some(BlasSlot { blas, workspaces }) = slot.as_mut() else { unreachable!("filled above") };
        let stream: Arc<CudaStream> = self.stream().raw().clone();
        let key = stream.cu_stream() as usize;
        let ws = match workspaces.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(self.alloc(CUBLAS_WORKSPACE_BYTES)?),
        };
        // SAFETY: the handle is used only under this lock, and the stream and workspace set here
        // are what every call made through the guard runs with; the workspace is owned by the slot
        // (alive as long as the handle) and used only on `stream`.
        unsafe {
            blas.set_stream(stream)?;
            cudarc::cublas::sys::cublasSetWorkspace_v2(*blas.handle(), ws.ptr() as *mut _, ws.len())
                .result()?;
        }
        Ok(BlasGuard { slot })
    }
}

/// Workspace per (handle, stream): 32 MiB, what cuBLAS recommends for Hopper.
const CUBLAS_WORKSPACE_BYTES: usize = 32 << 20;

struct BlasSlot {
    blas: CudaBlas,
    /// Per-stream workspaces (`CUstream` as usize → buffer).
    workspaces: HashMap<usize, DeviceBuffer>,
}

/// Locked access to a device's cuBLAS handle, bound to the stream that was current when taken.
pub struct BlasGuard<'a> {
    slot: MutexGuard<'a, Option<BlasSlot>>,
}

impl Deref for BlasGuard<'_> {
    type Target = CudaBlas;
    fn deref(&self) -> &CudaBlas {
        match self.slot.as_ref() {
            Some(s) => &s.blas,
            None => unreachable!("BlasGuard is only made with a filled slot"),
        }
    }
}

impl std::fmt::Debug for BlasGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BlasGuard")
    }
}
