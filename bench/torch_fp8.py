"""PyTorch peer of `kiln bench --suite fp8` (run by `torch_peer.py --suite fp8`):
torch._scaled_mm on the same shapes, recipes, weight rotation and timing method (20 calls
captured in one CUDA graph, replayed; median of CUDA-event timings / 20). `run` takes the
spec the kiln suite passes on stdin,
    {"shapes": [[M, N, K], ...], "gemv_max_m": 16}
and returns {"suite": "fp8", ..., "op_latency": [...]}; kiln adds its own figures and the
ratio torch_us / kiln_us.
"""
import math
import statistics

import torch
from torch_timing import graph_samples_us

ROTATE_BYTES = 128 << 20
BANDWIDTH = 4.13e12
PER_GRAPH = 20


def name(m, n, k, recipe):
    return f"scaled_mm {m}x{k}x{n} {recipe}"


def graph_median_us(fn, reps):
    return statistics.median(graph_samples_us(lambda _: fn(), PER_GRAPH, reps))


def case(m, n, k, rowwise, gemv_max_m):
    dev = "cuda"
    e4m3 = torch.float8_e4m3fn
    copies = max(1, math.ceil(ROTATE_BYTES / (n * k))) if m <= gemv_max_m else 1
    a = torch.randn(m, k, device=dev).to(e4m3)
    ws = [torch.randn(n, k, device=dev).to(e4m3) for _ in range(copies)]
    if rowwise:
        sa, sb = torch.rand(m, 1, device=dev), torch.rand(1, n, device=dev)
    else:
        sa, sb = torch.tensor(0.5, device=dev), torch.tensor(0.25, device=dev)
    wts = [w.t() for w in ws]
    it = [0]

    def fn():
        it[0] += 1
        torch._scaled_mm(a, wts[it[0] % copies], scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    us = graph_median_us(fn, 10 if m >= 4096 else 50)
    recipe = "rowwise" if rowwise else "tensorwise"
    byts = m * k + n * k + m * n * 2
    return {
        "name": name(m, n, k, recipe), "m": m, "n": n, "k": k, "recipe": recipe,
        "out_dtype": "bfloat16", "graph": True, "weight_copies": copies, "us": us,
        "floor_us": byts / BANDWIDTH * 1e6, "tflops": 2 * m * n * k / (us * 1e-6) / 1e12,
    }


def run(spec):
    results = []
    for m, n, k in spec["shapes"]:
        for rowwise in (False, True):
            try:
                results.append(case(m, n, k, rowwise, spec["gemv_max_m"]))
            except RuntimeError as e:  # e.g. a recipe this torch build lacks
                results.append({"name": name(m, n, k, "rowwise" if rowwise else "tensorwise"), "error": str(e)})
    return {
        "suite": "fp8", "peer": "torch._scaled_mm", "torch": torch.__version__,
        "device": torch.cuda.get_device_name(), "method": "CUDA graph of 20 calls replayed; median / 20",
        "op_latency": results,
    }
