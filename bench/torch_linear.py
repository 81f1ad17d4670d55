"""PyTorch peer of `kiln bench --suite linear` (run by `torch_peer.py --suite linear`):
F.linear over the shapes given as JSON on stdin, timed exactly as the kiln suite times them.

Input, `run`'s spec (written by crates/kiln-bench/src/linear.rs):
  {"rows": 1, "dtype": "bfloat16", "reps": 20,
   "shapes": [{"name": "...", "n": N, "k": K, "bias": true, "copies": C, "calls": S}, ...]}
Method per shape: C copies of weight [N, K] (and bias [N]) so that the working set exceeds
the 50 MB L2; one CUDA graph captures S calls F.linear(x, w[i % C], b[i % C]); after one
warm-up replay, `reps` replays are each timed with CUDA events; the figure is the median
replay time / S.
Output, `run`'s result: {"torch": version, "device": name, "results": [{"name", "us", "min_us"}, ...]}.
"""

import torch
import torch.nn.functional as F
from torch_timing import graph_samples_us, peer_results


def time_shape(spec, rows, dtype, reps):
    n, k, copies, calls = spec["n"], spec["k"], spec["copies"], spec["calls"]
    dev = torch.device("cuda")
    ws = [torch.randn(n, k, device=dev, dtype=dtype) for _ in range(copies)]
    bs = [torch.randn(n, device=dev, dtype=dtype) if spec["bias"] else None for _ in range(copies)]
    x = torch.randn(rows, k, device=dev, dtype=dtype)
    samples = graph_samples_us(lambda i: F.linear(x, ws[i % copies], bs[i % copies]), calls, reps, min(copies, 3))
    del ws, bs
    torch.cuda.empty_cache()
    return samples[len(samples) // 2], samples[0]


def run(spec):
    dtype = getattr(torch, spec.get("dtype", "bfloat16"))
    rows, reps = spec.get("rows", 1), spec.get("reps", 20)
    results = []
    for s in spec["shapes"]:
        us, min_us = time_shape(s, rows, dtype, reps)
        results.append({"name": s["name"], "us": us, "min_us": min_us})
    return peer_results(results)
