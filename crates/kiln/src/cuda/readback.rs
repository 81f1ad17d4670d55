//! Reading a few bytes of a device tensor back without stopping the stream: the copy lands in
//! page-locked host memory and an event says when. A decode loop queues step t + 1 before it
//! waits for step t's token, so the GPU never idles on the host's read.

use std::sync::Arc;

use cudarc::driver::result as dresult;

use super::device::CudaDevice;
use super::stream::Event;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::Tensor;

/// A page-locked host slot of a fixed size and the event of the last copy into it.
pub struct Readback {
    dev: Arc<CudaDevice>,
    host: *mut u8,
    len: usize,
    done: Event,
    queued: bool,
}

// SAFETY: the page-locked allocation is owned by this value alone and is not tied to a thread.
unsafe impl Send for Readback {}

impl Readback {
    /// A slot of `len` bytes for tensors of device `dev`.
    pub fn new(dev: &Arc<CudaDevice>, len: usize) -> Result<Self> {
        dev.context().bind_to_thread()?;
        // SAFETY: a plain page-locked allocation of `len` (≥ 1) bytes, freed in `drop`.
        let host = unsafe { dresult::malloc_host(len.max(1), 0) }? as *mut u8;
        Ok(Readback { dev: dev.clone(), host, len, done: Event::on(dev, false)?, queued: false })
    }

    /// Queues a copy of the contiguous tensor `t` (at most the slot's size, on this device)
    /// on the current stream, after the work queued so far. Does not wait.
    pub fn queue(&mut self, t: &Tensor) -> Result<()> {
        let bytes = t.nbytes();
        if bytes > self.len || !t.is_contiguous() {
            return Err(Error::invalid(
                "readback",
                format!("{bytes} bytes (contiguous: {}) into a {}-byte slot", t.is_contiguous(), self.len),
            ));
        }
        self.wait()?; // the slot is not overwritten while an earlier copy is still landing
        let src = match &*t.read() {
            Storage::Cuda(b) => b.ptr() + (t.layout().offset * t.dtype().size()) as u64,
            Storage::Cpu(_) => return Err(Error::invalid("readback", "the tensor is on the CPU")),
        };
        let stream = self.dev.stream();
        self.dev.context().bind_to_thread()?;
        // SAFETY: the page-locked host slot holds `bytes` and no other reference to it is live
        // (the previous copy into it was waited for just above).
        let dst = unsafe { std::slice::from_raw_parts_mut(self.host, bytes) };
        // SAFETY: `src..src + bytes` is the live tensor's memory on this device; `dst` stays
        // allocated until the event below completes (`wait`, `drop`).
        unsafe { dresult::memcpy_dtoh_async(dst, src, stream.cu_stream()) }?;
        self.done.record(&stream)?;
        self.queued = true;
        Ok(())
    }

    /// Waits for the last queued copy and returns the slot's bytes.
    pub fn wait(&mut self) -> Result<&[u8]> {
        if self.queued {
            self.done.synchronize()?;
            self.queued = false;
        }
        // SAFETY: no copy into the slot is in flight; it holds `len` initialised-or-copied bytes
        // (page-locked memory from the driver is readable whatever it holds).
        Ok(unsafe { std::slice::from_raw_parts(self.host, self.len) })
    }
}

impl Drop for Readback {
    fn drop(&mut self) {
        let ctx = self.dev.context();
        if self.queued {
            ctx.record_err(self.done.raw().synchronize());
        }
        // SAFETY: allocated by `malloc_host` in `new`; no copy into it is in flight any more.
        ctx.record_err(unsafe { dresult::free_host(self.host as *mut _) });
    }
}
