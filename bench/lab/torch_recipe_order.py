"""Does the order of recipes at 8192^3 decide which one is slower? Same method as the fp8
suite's peer (graph of 20, 10 replays, median), recipes in several orders, SM clock and
power read after each.
"""
import os, statistics, subprocess, sys, time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_timing import graph_samples_us  # noqa: E402
e4m3 = torch.float8_e4m3fn
m = n = k = 8192
a = torch.randn(m, k, device="cuda").to(e4m3)
w = torch.randn(n, k, device="cuda").to(e4m3)
wt = w.t()
scales = {"T": (torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")),
          "R": (torch.rand(m, 1, device="cuda"), torch.rand(1, n, device="cuda"))}
def smi():
    return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()
def one(r):
    sa, sb = scales[r]
    fn = lambda _: torch._scaled_mm(a, wt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    s = graph_samples_us(fn, 20, 10)
    return statistics.median(s), s[0], s[-1]
print("start", smi())
for order in ["TRTRTR", "RTRTRT", "TTTRRR"]:
    out = []
    for r in order:
        med, lo, hi = one(r)
        out.append(f"{r} {med:.1f} [{lo:.1f}-{hi:.1f}] ({smi()})")
    print(order); print("\n".join("  " + o for o in out))
    time.sleep(3)
