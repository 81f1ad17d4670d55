//! Timing with CUDA events: warm-up, then one event pair per repeat; median, min, max.

use kiln::cuda::CudaDevice;
use kiln::Result;
use serde::Serialize;

/// Summary of one timing: milliseconds per call over the measured repeats.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Stats {
    /// Median time per call.
    pub median_ms: f64,
    /// Fastest call.
    pub min_ms: f64,
    /// Slowest call.
    pub max_ms: f64,
    /// Calls run before measuring.
    pub warmup: usize,
    /// Measured calls.
    pub reps: usize,
}

impl Stats {
    pub(crate) fn from_samples(mut v: Vec<f64>, warmup: usize) -> Stats {
        v.sort_by(f64::total_cmp);
        let reps = v.len();
        Stats { median_ms: v[reps / 2], min_ms: v[0], max_ms: v[reps - 1], warmup, reps }
    }
}

/// Times `f` (which enqueues GPU work on the current stream) `reps` times after `warmup`
/// calls, each between two events.
pub fn gpu_median_ms(
    dev: &CudaDevice,
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Stats> {
    for _ in 0..warmup {
        f()?;
    }
    let stream = dev.stream();
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let (a, b) = (dev.new_event(true)?, dev.new_event(true)?);
        a.record(&stream)?;
        f()?;
        b.record(&stream)?;
        b.synchronize()?;
        samples.push(a.elapsed_ms(&b)? as f64);
    }
    Ok(Stats::from_samples(samples, warmup))
}

/// Times `f` by CUDA-graph replay, as the PyTorch reference figures are taken: `per_graph`
/// calls captured in one graph, the graph replayed `reps` times between events; each
/// sample is one replay's time divided by `per_graph`. Launch gaps vanish, so this is
/// (close to) kernel time. `f` must not allocate new memory or sync with the host.
pub fn graph_median_ms(
    dev: &std::sync::Arc<CudaDevice>,
    per_graph: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Stats> {
    f()?; // warm-up outside the graph: kernels compiled, pools filled
    dev.begin_capture()?;
    let captured: Result<()> = (0..per_graph).try_for_each(|_| f());
    let graph = dev.end_capture()?;
    captured?;
    graph.replay()?;
    let stream = dev.stream();
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let (a, b) = (dev.new_event(true)?, dev.new_event(true)?);
        a.record(&stream)?;
        graph.replay()?;
        b.record(&stream)?;
        b.synchronize()?;
        samples.push(a.elapsed_ms(&b)? as f64 / per_graph as f64);
    }
    Ok(Stats::from_samples(samples, 1))
}
