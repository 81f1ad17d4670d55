"""Per-kernel time of the decode bench's profiled steps, from Nsight Compute's CSV.

Run by `gpu-test.sh steps:PRESET`:
  ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
      kiln bench --suite decode --preset PRESET --peer none > steps.csv
The decode bench profiles two steps (`profiler_range`): one eager step, then the step a
graph captures (length read on the device). Each begins with the embedding's gather, which
is where this splits them. ncu serialises kernels and flushes caches between them, so the
sums exceed a graph replay's time; the shares and per-launch times are what it is for.
"""

import csv
import sys
from collections import OrderedDict


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            yield r["Kernel Name"], float(r["Metric Value"].replace(",", "")), r.get("Metric Unit", "ns")


def main(path):
    steps, cur = [], None
    for name, value, unit in rows(path):
        us = value / 1000.0 if unit in ("ns", "nsecond") else value
        if cur is None or (name.startswith("index_select") and cur["n"] > 8):
            cur = {"n": 0, "us": 0.0, "k": OrderedDict()}
            steps.append(cur)
        cur["n"] += 1
        cur["us"] += us
        c, t = cur["k"].get(name, (0, 0.0))
        cur["k"][name] = (c + 1, t + us)
    titles = ["eager step", "device-length step (the graph's kernels)"]
    for i, s in enumerate(steps):
        print(f"{titles[i] if i < 2 else f'step {i}'}: {s['n']} kernels, {s['us']:.0f} us")
        print(f"  {'kernel':<56} {'count':>5} {'total us':>9} {'avg us':>7}")
        for name, (c, t) in sorted(s["k"].items(), key=lambda kv: -kv[1][1]):
            print(f"  {name[:56]:<56} {c:>5} {t:>9.1f} {t / c:>7.2f}")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
