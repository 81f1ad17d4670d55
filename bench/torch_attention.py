"""PyTorch peer of `kiln bench --suite attention` (run by `torch_peer.py --suite attention`):
F.scaled_dot_product_attention(q, k, v, enable_gqa=True) at decode (one query per head) over
the shapes given as JSON on stdin, timed exactly as the kiln suite times them.

Input, `run`'s spec (written by crates/kiln-bench/src/attention.rs):
  {"reps": 20, "shapes": [{"name", "hq", "hkv", "d", "s", "copies", "calls"}, ...]}
Method per shape: bf16 q [1, Hq, 1, D]; C copies of k, v [1, Hkv, S, D] so that the working
set exceeds the 50 MB L2; one CUDA graph captures S calls cycling through the copies; after
warm-up, `reps` replays are each timed with CUDA events; the figure is the median / calls.
Output, `run`'s result: {"torch", "cuda", "device", "results": [{"name", "us", "min_us"}, ...]}.
"""

import torch
import torch.nn.functional as F
from torch_timing import graph_samples_us, peer_results


def time_shape(spec, reps):
    hq, hkv, d, s, copies, calls = (spec[k] for k in ("hq", "hkv", "d", "s", "copies", "calls"))
    dev, dt = torch.device("cuda"), torch.bfloat16
    q = torch.randn(1, hq, 1, d, device=dev, dtype=dt)
    ks = [torch.randn(1, hkv, s, d, device=dev, dtype=dt) for _ in range(copies)]
    vs = [torch.randn(1, hkv, s, d, device=dev, dtype=dt) for _ in range(copies)]
    samples = graph_samples_us(
        lambda i: F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies], enable_gqa=True),
        calls, reps, min(copies, 3))
    del ks, vs
    torch.cuda.empty_cache()
    return samples[len(samples) // 2], samples[0]


def run(spec):
    reps = spec.get("reps", 20)
    results = []
    for s in spec["shapes"]:
        us, min_us = time_shape(s, reps)
        results.append({"name": s["name"], "us": us, "min_us": min_us})
    return peer_results(results)
