"""PyTorch peer of `kiln bench --suite linalg` (run by `torch_peer.py --suite linalg`):
torch.linalg.inv, torch.linalg.solve_triangular and torch.linalg.lu_factor over the workloads given as JSON on stdin,
timed as the kiln suite times them.

Input, written by crates/kiln-bench/src/linalg.rs:
  {"calls": 20, "reps": 20,
   "shapes": [{"name": "...", "op": "inv" | "solve_triangular" | "lu_factor", "batch": B, "n": N,
               "k": K, "unit": bool, "complex": bool, "timing": "eager" | "graph"}, ...]}
Method per workload: f32; A = randn / n + 2 I, B = randn [B, N, K]; solves lower, left;
lu_factor: A = randn (complex64 when "complex").
"graph": one CUDA graph captures `calls` calls, `reps` replays each timed with CUDA events,
median replay time / calls. "eager": 3 warm-up calls, then `reps` calls each between two CUDA
events (synchronised after each), median.
Output: {"torch": version, "cuda": version, "device": name, "results": [{"name", "us", "min_us"}, ...]}.
"""

import torch
from torch_timing import eager_samples_us, graph_samples_us, run_shapes


def time_shape(spec, calls, reps):
    dev = torch.device("cuda")
    bsz, n, k = spec["batch"], spec["n"], spec["k"]
    a = torch.randn(bsz, n, n, device=dev) / n + 2 * torch.eye(n, device=dev)
    if spec["op"] == "inv":
        fn = lambda: torch.linalg.inv(a)
    elif spec["op"] == "lu_factor":
        dt = torch.complex64 if spec.get("complex") else torch.float32
        g = torch.randn(bsz, n, n, device=dev, dtype=dt)
        # lu_factor_ex: no info check (a host sync that graphs refuse); kiln does not check either.
        fn = lambda: torch.linalg.lu_factor_ex(g)
    else:
        b = torch.randn(bsz, n, k, device=dev)
        unit = spec["unit"]
        fn = lambda: torch.linalg.solve_triangular(a, b, upper=False, left=True, unitriangular=unit)
    if spec["timing"] == "graph":
        samples = graph_samples_us(lambda i: fn(), calls, reps, 1)
    else:
        samples = eager_samples_us(fn, reps)
    torch.cuda.empty_cache()
    return samples[len(samples) // 2], samples[0]


def run(spec):
    return run_shapes(spec, time_shape)
