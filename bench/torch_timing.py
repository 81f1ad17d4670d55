"""The timing method every PyTorch peer shares with kiln's timing::graph_median_ms:
`calls` calls captured in one CUDA graph after warm-up, `reps` replays each timed with CUDA
events, µs per call."""
import torch


def graph_samples_us(fn, calls, reps, warmups=3):
    """fn(i) for i in range(calls) captured in one graph; sorted µs per call of each replay."""
    fn(0)  # warm-up outside the graph
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(warmups):  # cuBLAS handles and workspaces, off the capture
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e3 / calls)
    return sorted(samples)


def eager_samples_us(fn, reps, warmups=3):
    """fn() called `reps` times after `warmups`, each between two CUDA events; sorted µs."""
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e3)
    return sorted(samples)


def run_shapes(spec, time_shape):
    """A peer suite over spec["shapes"]: time_shape(shape, calls, reps) -> (median µs, min µs)."""
    calls, reps = spec.get("calls", 20), spec.get("reps", 20)
    results = []
    for s in spec["shapes"]:
        us, min_us = time_shape(s, calls, reps)
        results.append({"name": s["name"], "us": us, "min_us": min_us})
    return peer_results(results)


def peer_results(results):
    """A peer suite's output: its per-workload results with the torch build and device."""
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "results": results,
    }
