"""PyTorch peer of `kiln bench --suite grouped` (run by `torch_peer.py --suite grouped`):
torch._grouped_mm over the workloads given as JSON on stdin, timed as the kiln suite times them.

Input, `run`'s spec (written by crates/kiln-bench/src/grouped.rs):
  {"calls": 20, "reps": 20,
   "shapes": [{"name": "...", "m": M, "n": N, "k": K, "ends": [int32 group ends]}, ...]}
Method per workload: bf16 a [M, K] and weights [G, N, K] seen as [G, K, N] (transposed view);
offs = the given ends (int32, on the GPU); one CUDA graph captures `calls` calls; after one
warm-up replay, `reps` replays are each timed with CUDA events; the figure is the median
replay time / calls.
Output: {"torch": version, "cuda": version, "device": name, "results": [{"name", "us", "min_us"}, ...]}.
"""

import torch
from torch_timing import graph_samples_us, run_shapes


def time_shape(spec, calls, reps):
    dev = torch.device("cuda")
    m, n, k, ends = spec["m"], spec["n"], spec["k"], spec["ends"]
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(len(ends), n, k, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    offs = torch.tensor(ends, device=dev, dtype=torch.int32)
    samples = graph_samples_us(lambda i: torch._grouped_mm(a, b, offs=offs), calls, reps, 1)
    del a, b
    torch.cuda.empty_cache()
    return samples[len(samples) // 2], samples[0]


def run(spec):
    return run_shapes(spec, time_shape)
