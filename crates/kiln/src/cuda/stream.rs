//! Streams, the per-thread current stream, events and CUDA graphs.

use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

use cudarc::driver::result as dresult;
use cudarc::driver::sys;
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream};

use super::device::CudaDevice;
use crate::error::{Error, Result};

/// A CUDA stream of one device; cheap to clone. Derefs to cudarc's [`CudaStream`], so
/// `stream.launch_builder(&func)` works directly.
#[derive(Clone, Debug)]
pub struct Stream {
    inner: Arc<CudaStream>,
}

impl Stream {
    pub(crate) fn from_raw(inner: Arc<CudaStream>) -> Self {
        Stream { inner }
    }

    /// The cudarc stream.
    pub fn raw(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// Device ordinal this stream belongs to.
    pub fn ordinal(&self) -> usize {
        self.inner.context().ordinal()
    }

    /// Blocks the host until all work queued on this stream is done.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.inner.synchronize()?)
    }

    /// Makes later work on this stream wait until `event` (as last recorded) has completed.
    /// Does not block the host.
    pub fn wait(&self, event: &Event) -> Result<()> {
        Ok(self.inner.wait(&event.inner)?)
    }

    /// Records a new timing-capable event at the current end of this stream.
    pub fn record(&self) -> Result<Event> {
        let ev = Event::new(self.inner.context(), true)?;
        ev.record(self)?;
        Ok(ev)
    }

    /// Whether this stream is being captured into a graph.
    pub fn is_capturing(&self) -> Result<bool> {
        let status = self.inner.capture_status()?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }
}

impl Deref for Stream {
    type Target = CudaStream;
    fn deref(&self) -> &CudaStream {
        &self.inner
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

thread_local! {
    /// Stack of (device ordinal, stream) pushed by `with_stream`.
    static CURRENT: RefCell<Vec<(usize, Arc<CudaStream>)>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current stream for `ordinal`, if one was set with [`with_stream`].
pub(crate) fn current_override(ordinal: usize) -> Option<Arc<CudaStream>> {
    CURRENT.with(|c| c.borrow().iter().rev().find(|(o, _)| *o == ordinal).map(|(_, s)| s.clone()))
}

struct PopOnDrop;

impl Drop for PopOnDrop {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            c.borrow_mut().pop();
        });
    }
}

/// Runs `f` with `stream` as the calling thread's current stream of its device: allocations,
/// copies and launches through [`CudaDevice::stream`] go to it. Nests; restored on return and on
/// panic. Thread-local: threads spawned inside `f` (rayon workers too) still see the default.
pub fn with_stream<R>(stream: &Stream, f: impl FnOnce() -> R) -> R {
    CURRENT.with(|c| c.borrow_mut().push((stream.ordinal(), stream.inner.clone())));
    let _pop = PopOnDrop;
    f()
}

/// A CUDA event.
#[derive(Debug)]
pub struct Event {
    inner: CudaEvent,
}

impl Event {
    fn new(ctx: &Arc<cudarc::driver::CudaContext>, timing: bool) -> Result<Self> {
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        Ok(Event { inner: ctx.new_event(Some(flags))? })
    }

    /// A new event on `dev`. Timing events can be used with [`Event::elapsed_ms`]; events without
    /// timing are cheaper for pure cross-stream ordering.
    pub fn on(dev: &CudaDevice, timing: bool) -> Result<Self> {
        Event::new(dev.context(), timing)
    }

    /// Captures the work queued on `stream` so far.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        Ok(self.inner.record(stream)?)
    }

    /// Milliseconds between `self` and the later event `end` (both recorded, `end` completed).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        Ok(self.inner.elapsed_ms(&end.inner)?)
    }

    /// Blocks the host until the recorded work is done.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.inner.synchronize()?)
    }

    /// Whether the recorded work is done (does not block).
    pub fn is_complete(&self) -> Result<bool> {
        Ok(self.inner.try_is_complete()?)
    }

    /// The cudarc event.
    pub fn raw(&self) -> &CudaEvent {
        &self.inner
    }
}

/// Capture in progress on a device.
#[derive(Debug)]
pub(crate) struct Capture {
    pub(crate) stream: Stream,
    pub(crate) pool_id: u64,
}

/// An instantiated CUDA graph. Memory allocated or freed on the capturing stream during capture
/// stays reserved for it (a private pool) until it is dropped. Buffers created before capture and
/// used by it must outlive it.
pub struct Graph {
    graph: ManuallyDrop<CudaGraph>,
    dev: Arc<CudaDevice>,
    pool_id: u64,
    /// The capturing stream; the private pool's blocks go back to its free list.
    stream_key: usize,
    /// Replayed on a stream other than the capturing one: synchronise before releasing memory.
    replayed_elsewhere: Cell<bool>,
}

// SAFETY: CudaGraph holds driver handles that must not be used from two threads at once. `Graph`
// is not `Sync` (it holds a `Cell`), so only its one owner uses them; the handles are not tied to
// the thread that made them, so moving the owner to another thread is sound.
unsafe impl Send for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("ordinal", &self.dev.ordinal()).field("pool", &self.pool_id).finish()
    }
}

impl Graph {
    /// Launches the graph on the device's current stream.
    pub fn replay(&self) -> Result<()> {
        self.replay_on(&self.dev.stream())
    }

    /// Launches the graph on `stream`.
    pub fn replay_on(&self, stream: &Stream) -> Result<()> {
        self.dev.context().bind_to_thread()?;
        if stream.cu_stream() as usize != self.stream_key {
            self.replayed_elsewhere.set(true);
        }
        // SAFETY: the exec handle is owned by `self.graph` and alive; `stream` is a live stream of
        // the same context.
        unsafe { dresult::graph::launch(self.graph.cu_graph_exec(), stream.cu_stream()) }?;
        Ok(())
    }

    /// Nodes of the graph (kernels, copies, memsets): what one replay launches.
    pub fn node_count(&self) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: the graph handle is owned by `self.graph` and alive; a null node array asks
        // for the count alone.
        unsafe { sys::cuGraphGetNodes(self.graph.cu_graph(), std::ptr::null_mut(), &mut n) }.result()?;
        Ok(n)
    }

    /// Uploads the graph to the device ahead of the first replay.
    pub fn upload(&self) -> Result<()> {
        Ok(self.graph.upload()?)
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: `graph` is dropped exactly once, here, and not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.graph) };
        if self.replayed_elsewhere.get() {
            let ctx = self.dev.context();
            ctx.record_err(ctx.synchronize());
        }
        self.dev.pool().release_private(self.pool_id, self.stream_key);
    }
}

impl CudaDevice {
    /// A new non-blocking stream on this device.
    pub fn new_stream(&self) -> Result<Stream> {
        Ok(Stream::from_raw(self.context().new_stream()?))
    }

    /// A new event on this device (see [`Event::on`]).
    pub fn new_event(&self, timing: bool) -> Result<Event> {
        Event::on(self, timing)
    }

    /// Starts capturing the current stream into a graph (relaxed capture mode). Until
    /// [`CudaDevice::end_capture`], allocations on that stream come from the graph's private pool and
    /// host-synchronising calls on it (e.g. `dtoh`) fail.
    pub fn begin_capture(self: &Arc<Self>) -> Result<()> {
        let stream = self.stream();
        let mut slot = self.capture_slot();
        if slot.is_some() {
            return Err(Error::Cuda("begin_capture: a capture is already active on this device".into()));
        }
        let pool_id = self.pool().begin_capture(&stream)?;
        if let Err(e) = stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) {
            self.pool().release_private(pool_id, stream.cu_stream() as usize);
            return Err(e.into());
        }
        *slot = Some(Capture { stream, pool_id });
        Ok(())
    }

    /// Ends the capture started by [`CudaDevice::begin_capture`] and instantiates the graph.
    pub fn end_capture(self: &Arc<Self>) -> Result<Graph> {
        let Capture { stream, pool_id } = self
            .capture_slot()
            .take()
            .ok_or_else(|| Error::Cuda("end_capture: no capture is active on this device".into()))?;
        let stream_key = stream.cu_stream() as usize;
        let pool = self.pool();
        pool.end_capture();
        let flags = sys::CUgraphInstantiate_flags(0);
        match stream.raw().end_capture(flags) {
            Ok(Some(graph)) => Ok(Graph {
                graph: ManuallyDrop::new(graph),
                dev: self.clone(),
                pool_id,
                stream_key,
                replayed_elsewhere: Cell::new(false),
            }),
            Ok(None) => {
                pool.release_private(pool_id, stream_key);
                Err(Error::Cuda("end_capture: the capture produced no graph".into()))
            }
            Err(e) => {
                pool.release_private(pool_id, stream_key);
                Err(Error::Cuda(format!("end_capture: capture failed: {e}")))
            }
        }
    }
}
