//! Stream-ordered caching allocator and driver-level memory probes.
//!
//! Blocks come from `cuMemAllocAsync` on the allocating stream and go back to a free list when
//! their [`DeviceBuffer`] drops; they are handed to the driver again only by
//! [`CudaDevice::empty_cache`](super::CudaDevice::empty_cache) (or once on out-of-memory).
//! Free lists are kept per stream: a block freed after use on stream S is reused only by
//! allocations on S, so reuse is ordered after its last use without events. A buffer used on a
//! stream other than the one it was allocated on must not be dropped before that use is ordered
//! back (record an event there and make the allocating stream wait on it), as with any
//! stream-ordered allocator.
//!
//! Graph capture: blocks allocated or freed on the capturing stream while a capture is active go to
//! a private pool owned by the resulting [`Graph`](super::Graph), so memory a replay touches is
//! never handed to other work while the graph is alive. During capture, new blocks come from
//! `cuMemAlloc` (not the stream-ordered allocator, which would turn into graph allocation nodes).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use cudarc::driver::result::{self as dresult, DriverError};
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{Error, Result};

/// Requests up to this size are rounded to [`SMALL_ROUND`] multiples, larger ones to [`LARGE_ROUND`].
pub(crate) const SMALL_LIMIT: usize = 1 << 20;
pub(crate) const SMALL_ROUND: usize = 512;
pub(crate) const LARGE_ROUND: usize = 2 << 20;

/// The block size a request of `bytes` (> 0) gets, or `None` on overflow.
pub(crate) fn round_size(bytes: usize) -> Option<usize> {
    let unit = if bytes <= SMALL_LIMIT { SMALL_ROUND } else { LARGE_ROUND };
    bytes.checked_next_multiple_of(unit)
}

/// Largest free block a request rounded to `size` may take: exact for small sizes, up to 25% larger
/// for large ones.
pub(crate) fn max_reuse_size(size: usize) -> usize {
    if size <= SMALL_LIMIT {
        size
    } else {
        size + size / 4
    }
}

/// Allocator counters of one device, in bytes of rounded blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in blocks held by live [`DeviceBuffer`]s (rounded block sizes).
    pub live_bytes: u64,
    /// Highest `live_bytes` since the device was opened or the last
    /// [`CudaDevice::reset_peak`](super::CudaDevice::reset_peak).
    pub peak_live_bytes: u64,
    /// Bytes obtained from the driver and not yet given back (live + cached).
    pub reserved_bytes: u64,
    /// Highest `reserved_bytes` since the device was opened or the last
    /// [`CudaDevice::reset_peak`](super::CudaDevice::reset_peak).
    pub peak_reserved_bytes: u64,
    /// Calls to `alloc`, zero-byte ones included.
    pub alloc_count: u64,
    /// Allocations that went to the driver.
    pub driver_alloc_count: u64,
    /// Allocations served from a cached block.
    pub reuse_count: u64,
}

#[derive(Debug)]
struct Block {
    ptr: sys::CUdeviceptr,
    size: usize,
    /// From `cuMemAlloc` (during graph capture) rather than `cuMemAllocAsync`.
    sync_alloc: bool,
}

type FreeList = BTreeMap<usize, Vec<Block>>;

fn take(list: &mut FreeList, size: usize) -> Option<Block> {
    let found = list.range_mut(size..=max_reuse_size(size)).find(|(_, v)| !v.is_empty())?.0;
    let found = *found;
    let blocks = list.get_mut(&found)?;
    let block = blocks.pop();
    if blocks.is_empty() {
        list.remove(&found);
    }
    block
}

fn put(list: &mut FreeList, block: Block) {
    list.entry(block.size).or_default().push(block);
}

#[derive(Default)]
struct PoolState {
    /// General free lists, keyed by the stream (`CUstream` as usize) the block was last used on.
    free: HashMap<usize, FreeList>,
    /// Private pools of graphs (captured or being captured), by pool id.
    private: HashMap<u64, FreeList>,
    /// Active capture: (stream key, private pool id).
    capture: Option<(usize, u64)>,
    next_pool_id: u64,
    stats: MemoryStats,
}

/// The caching allocator of one device.
pub(crate) struct Pool {
    ctx: Arc<CudaContext>,
    state: Mutex<PoolState>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("ordinal", &self.ctx.ordinal()).field("stats", &self.stats()).finish()
    }
}

fn stream_key(stream: &CudaStream) -> usize {
    stream.cu_stream() as usize
}

fn is_oom(e: &DriverError) -> bool {
    e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
}

impl Pool {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Arc<Self> {
        Arc::new(Pool { ctx, state: Mutex::new(PoolState::default()) })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A panic while holding the lock leaves counters possibly stale, never unsound.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    pub(crate) fn reset_peak(&self) {
        let mut st = self.lock();
        st.stats.peak_live_bytes = st.stats.live_bytes;
        st.stats.peak_reserved_bytes = st.stats.reserved_bytes;
    }

    /// A buffer of `bytes` bytes (uninitialised) usable in order on `stream`.
    pub(crate) fn alloc(self: &Arc<Self>, bytes: usize, stream: &CudaStream) -> Result<DeviceBuffer> {
        let key = stream_key(stream);
        let mut st = self.lock();
        st.stats.alloc_count += 1;
        if bytes == 0 {
            return Ok(DeviceBuffer {
                ptr: 0,
                len: 0,
                block_size: 0,
                sync_alloc: false,
                stream: key,
                ordinal: self.ctx.ordinal(),
                pool: None,
            });
        }
        let size = round_size(bytes)
            .ok_or_else(|| Error::Cuda(format!("allocation of {bytes} bytes overflows the block size")))?;
        let capture = st.capture.filter(|&(k, _)| k == key).map(|(_, id)| id);
        let mut reused = match capture {
            Some(id) => st.private.get_mut(&id).and_then(|l| take(l, size)),
            None => None,
        };
        if reused.is_none() {
            reused = st.free.get_mut(&key).and_then(|l| take(l, size));
        }
        let block = match reused {
            Some(b) => {
                st.stats.reuse_count += 1;
                b
            }
            None => {
                let b = match self.driver_alloc(size, stream, capture.is_some()) {
                    Err(e) if is_oom(&e) && capture.is_none() => {
                        self.release_free_blocks(&mut st, stream)?;
                        self.driver_alloc(size, stream, false)
                    }
                    other => other,
                }
                .map_err(|e| {
                    if !is_oom(&e) {
                        return Error::from(e);
                    }
                    let (free, total) = driver_mem_info(&self.ctx).unwrap_or((0, 0));
                    Error::CudaOutOfMemory {
                        ordinal: self.ctx.ordinal(),
                        requested: bytes,
                        live: st.stats.live_bytes,
                        reserved: st.stats.reserved_bytes,
                        driver_used: total - free,
                        driver_total: total,
                    }
                })?;
                st.stats.driver_alloc_count += 1;
                st.stats.reserved_bytes += b.size as u64;
                st.stats.peak_reserved_bytes = st.stats.peak_reserved_bytes.max(st.stats.reserved_bytes);
                b
            }
        };
        st.stats.live_bytes += block.size as u64;
        st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.stats.live_bytes);
        Ok(DeviceBuffer {
            ptr: block.ptr,
            len: bytes,
            block_size: block.size,
            sync_alloc: block.sync_alloc,
            stream: key,
            ordinal: self.ctx.ordinal(),
            pool: Some(self.clone()),
        })
    }

    fn driver_alloc(
        &self,
        size: usize,
        stream: &CudaStream,
        capturing: bool,
    ) -> std::result::Result<Block, DriverError> {
        self.ctx.bind_to_thread()?;
        if capturing || !self.ctx.has_async_alloc() {
            // SAFETY: plain device allocation of `size` bytes; the pointer is owned by the new block.
            let ptr = unsafe { dresult::malloc_sync(size) }?;
            Ok(Block { ptr, size, sync_alloc: true })
        } else {
            // SAFETY: `stream` is a live stream of this context; the block is used in order on it
            // (module docs) and freed only through `release_free_blocks`.
            let ptr = unsafe { dresult::malloc_async(stream.cu_stream(), size) }?;
            Ok(Block { ptr, size, sync_alloc: false })
        }
    }

    fn give_back(&self, block: Block, key: usize) {
        let size = block.size;
        let mut st = self.lock();
        st.stats.live_bytes = st.stats.live_bytes.saturating_sub(size as u64);
        // Freed on the capturing stream during capture: the graph may touch it on replay.
        let private = st.capture.filter(|&(k, _)| k == key).map(|(_, id)| id);
        match private.and_then(|id| st.private.get_mut(&id)) {
            Some(list) => put(list, block),
            None => put(st.free.entry(key).or_default(), block),
        }
    }

    /// Frees every cached block of the general free lists (not graphs' private pools).
    pub(crate) fn empty_cache(&self, stream: &CudaStream) -> Result<()> {
        let mut st = self.lock();
        if st.capture.is_some() {
            return Err(Error::Cuda("empty_cache: not allowed while a graph capture is active".into()));
        }
        self.release_free_blocks(&mut st, stream)
    }

    fn release_free_blocks(&self, st: &mut PoolState, stream: &CudaStream) -> Result<()> {
        let blocks: Vec<Block> = st.free.drain().flat_map(|(_, list)| list.into_values().flatten()).collect();
        if blocks.is_empty() {
            return Ok(());
        }
        // Last uses may be on any stream: wait for all of them before handing memory back.
        self.ctx.synchronize()?;
        let mut first_err = None;
        for b in blocks {
            // SAFETY: the block is in no free list and no DeviceBuffer any more, and the context
            // has been synchronised, so nothing uses it; each block is freed exactly once, with the
            // call matching how it was allocated.
            let r = unsafe {
                if b.sync_alloc {
                    dresult::free_sync(b.ptr)
                } else {
                    dresult::free_async(b.ptr, stream.cu_stream())
                }
            };
            match r {
                Ok(()) => st.stats.reserved_bytes = st.stats.reserved_bytes.saturating_sub(b.size as u64),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        stream.synchronize()?;
        self.trim_driver_pool();
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Hands memory the driver's default pool keeps after frees back to the system.
    fn trim_driver_pool(&self) {
        if !self.ctx.has_async_alloc() {
            return;
        }
        // SAFETY: queries the device's default memory pool and trims it; both calls only take
        // handles owned by the driver.
        let _ = unsafe {
            dresult::device::get_default_mem_pool(self.ctx.cu_device())
                .and_then(|pool| dresult::mem_pool::trim_to(pool, 0))
        };
    }

    /// Starts routing allocations on `stream` to a new private pool; returns its id.
    pub(crate) fn begin_capture(&self, stream: &CudaStream) -> Result<u64> {
        let mut st = self.lock();
        if st.capture.is_some() {
            return Err(Error::Cuda("a graph capture is already active on this device".into()));
        }
        st.next_pool_id += 1;
        let id = st.next_pool_id;
        st.private.insert(id, FreeList::new());
        st.capture = Some((stream_key(stream), id));
        Ok(id)
    }

    /// Ends routing; the private pool stays reserved until [`Pool::release_private`].
    pub(crate) fn end_capture(&self) {
        self.lock().capture = None;
    }

    /// Moves a graph's private blocks back to the general free list of `stream_key`.
    pub(crate) fn release_private(&self, id: u64, stream: usize) {
        let mut st = self.lock();
        if st.capture.is_some_and(|(_, active)| active == id) {
            st.capture = None;
        }
        if let Some(list) = st.private.remove(&id) {
            let general = st.free.entry(stream).or_default();
            for b in list.into_values().flatten() {
                put(general, b);
            }
        }
    }
}

/// Device memory from the caching allocator: a raw device pointer and its length. Dropping it
/// returns the block to the allocator (no driver call). Work on the buffer must be ordered on the
/// stream it was allocated on, or ordered back to it before the drop (see the module docs).
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    block_size: usize,
    sync_alloc: bool,
    stream: usize,
    ordinal: usize,
    pool: Option<Arc<Pool>>,
}

impl DeviceBuffer {
    /// Device address (0 for a zero-byte buffer).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Requested length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is zero bytes long.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ordinal of the device the memory is on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Size of the underlying cached block (≥ `len`).
    pub fn block_size(&self) -> usize {
        self.block_size
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .field("block_size", &self.block_size())
            .finish()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            let block = Block { ptr: self.ptr, size: self.block_size, sync_alloc: self.sync_alloc };
            pool.give_back(block, self.stream);
        }
    }
}

/// `(free, total)` device memory in bytes as the driver sees it (all processes).
pub(crate) fn driver_mem_info(ctx: &CudaContext) -> Result<(usize, usize)> {
    Ok(ctx.mem_get_info()?)
}

/// Samples driver-used device memory (`total - free`, all processes) on a background thread every
/// ~1 ms while alive, and on each [`DriverPeakProbe::sample`]; [`DriverPeakProbe::finish`] returns
/// the peak seen.
pub struct DriverPeakProbe {
    ctx: Arc<CudaContext>,
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn sample_used(ctx: &CudaContext, peak: &AtomicU64) -> bool {
    match ctx.mem_get_info() {
        Ok((free, total)) => {
            peak.fetch_max(total.saturating_sub(free) as u64, Ordering::Relaxed);
            true
        }
        Err(_) => false,
    }
}

impl DriverPeakProbe {
    pub(crate) fn start(ctx: Arc<CudaContext>) -> Result<Self> {
        let peak = Arc::new(AtomicU64::new(0));
        if !sample_used(&ctx, &peak) {
            ctx.mem_get_info()?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (ctx, peak, stop) = (ctx.clone(), peak.clone(), stop.clone());
            std::thread::Builder::new()
                .name("kiln-mem-probe".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if !sample_used(&ctx, &peak) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
                .map_err(|e| Error::Cuda(format!("cannot start the memory probe thread: {e}")))?
        };
        Ok(DriverPeakProbe { ctx, peak, stop, thread: Some(thread) })
    }

    /// Takes one sample now, on the calling thread.
    pub fn sample(&self) {
        sample_used(&self.ctx, &self.peak);
    }

    /// Peak so far, in bytes.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Stops sampling (after a last sample) and returns the peak driver-used bytes.
    pub fn finish(mut self) -> u64 {
        self.stop_thread();
        self.sample();
        self.peak()
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DriverPeakProbe {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(round_size(1), Some(512));
        assert_eq!(round_size(512), Some(512));
        assert_eq!(round_size(513), Some(1024));
        assert_eq!(round_size(SMALL_LIMIT), Some(SMALL_LIMIT));
        assert_eq!(round_size(SMALL_LIMIT + 1), Some(LARGE_ROUND));
        assert_eq!(round_size(LARGE_ROUND + 1), Some(2 * LARGE_ROUND));
        assert_eq!(round_size(usize::MAX), None);
    }

    fn block(size: usize) -> Block {
        Block { ptr: size as u64, size, sync_alloc: false }
    }

    #[test]
    fn reuse_rules() {
        let mut list = FreeList::new();
        put(&mut list, block(1024));
        assert!(take(&mut list, 512).is_none(), "small sizes reuse exact buckets only");
        assert_eq!(take(&mut list, 1024).map(|b| b.size), Some(1024));
        assert!(list.is_empty());

        let mb = 1 << 20;
        put(&mut list, block(10 * mb));
        assert!(take(&mut list, 6 * mb).is_none(), "more than 25% larger");
        assert_eq!(take(&mut list, 8 * mb).map(|b| b.size), Some(10 * mb));
        put(&mut list, block(8 * mb));
        put(&mut list, block(10 * mb));
        assert_eq!(take(&mut list, 8 * mb).map(|b| b.size), Some(8 * mb), "smallest fit first");
    }
}
