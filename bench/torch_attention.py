"""PyTorch peer of `kiln bench --suite attention` (run by `torch_peer.py --suite attention`):
F.scaled_dot_product_attention(q, k, v, enable_gqa=True) at decode (one query per head) and
at prefill (flash backend) over the shapes given as JSON on stdin, timed exactly as the kiln
suite times them.

Input, `run`'s spec (written by crates/kiln-bench/src/attention.rs):
  {"reps": 20, "shapes": [{"name", "hq", "hkv", "d", "s", "copies", "calls"}, ...],
   "prefill_calls": 5, "prefill_reps": 10,
   "prefill": [{"name", "dtype", "b", "hq", "hkv", "d", "l", "s", "causal"}, ...]}
Method per decode shape: bf16 q [1, Hq, 1, D]; C copies of k, v [1, Hkv, S, D] so that the
working set exceeds the 50 MB L2; one CUDA graph captures S calls cycling through the copies;
after warm-up, `reps` replays are each timed with CUDA events; the figure is the median /
calls. Prefill: q [B, Hq, L, D], k, v [B, Hkv, S, D], is_causal as given, under
sdpa_kernel(FLASH_ATTENTION); a graph of `prefill_calls` calls, `prefill_reps` replays. If the
flash backend refuses enable_gqa, the key / value heads are repeated before timing (noted as
"repeated_kv").
Output, `run`'s result: {"torch", "cuda", "device", "results": [{"name", "us", "min_us"}, ...]}.
"""

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
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


def time_prefill(spec, calls, reps):
    b, hq, hkv, d, l, s = (spec[k] for k in ("b", "hq", "hkv", "d", "l", "s"))
    dev, dt = torch.device("cuda"), {"bfloat16": torch.bfloat16, "float16": torch.float16}[spec["dtype"]]
    q = torch.randn(b, hq, l, d, device=dev, dtype=dt)
    k = torch.randn(b, hkv, s, d, device=dev, dtype=dt)
    v = torch.randn(b, hkv, s, d, device=dev, dtype=dt)
    repeated = False
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            samples = graph_samples_us(
                lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=spec["causal"], enable_gqa=hq != hkv),
                calls, reps)
        except RuntimeError:
            repeated = True
            k, v = (t.repeat_interleave(hq // hkv, dim=1) for t in (k, v))
            samples = graph_samples_us(
                lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=spec["causal"]), calls, reps)
    del q, k, v
    torch.cuda.empty_cache()
    return samples[len(samples) // 2], samples[0], repeated


def run(spec):
    reps = spec.get("reps", 20)
    results = []
    for s in spec["shapes"]:
        us, min_us = time_shape(s, reps)
        results.append({"name": s["name"], "us": us, "min_us": min_us})
    for s in spec.get("prefill", []):
        us, min_us, repeated = time_prefill(s, spec.get("prefill_calls", 5), spec.get("prefill_reps", 10))
        results.append({"name": s["name"], "us": us, "min_us": min_us, "repeated_kv": repeated})
    return peer_results(results)
