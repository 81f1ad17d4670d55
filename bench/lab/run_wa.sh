#!/usr/bin/env bash
# GPU machine, repo root: the weights-as-A candidate lab, then kernel durations by ncu
# for the tree's kernel, the candidate and PyTorch's _scaled_mm at 1x4096x4096.
set -uo pipefail
OUT=${OUT:-/tmp/out}
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -Icrates/kiln/src/cuda/kernels -Ibench/lab \
  bench/lab/gemv_wa_lab.cu -o /tmp/wa_lab || exit 1
echo "$(date -u '+%F %H:%M UTC'), $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader)"
/tmp/wa_lab | tee $OUT/wa_lab.txt
LAB_REPS=200 /tmp/wa_lab | tee $OUT/wa_lab2.txt
cat > /tmp/t.py <<'PY'
import torch
a = torch.randn(1, 4096, device="cuda").to(torch.float8_e4m3fn)
ws = [torch.randn(4096, 4096, device="cuda").to(torch.float8_e4m3fn) for _ in range(8)]
s = torch.tensor(1.0, device="cuda")
for i in range(40):
    torch._scaled_mm(a, ws[i % 8].t(), s, s, out_dtype=torch.bfloat16)
torch.cuda.synchronize()
PY
timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum -c 60 /tmp/wa_lab 1 > $OUT/ncu_lab.txt 2>&1
timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum -c 40 python3 /tmp/t.py > $OUT/ncu_torch.txt 2>&1
python3 - <<'PY'
import re, os, collections
for f in ["ncu_lab.txt", "ncu_torch.txt"]:
    d = collections.defaultdict(list); k = None
    for line in open(os.path.join(os.environ.get("OUT", "/tmp/out"), f)):
        m = re.match(r"\s+(\S+?)(?:<.*>)?\s*\(\d+, \d+, \d+\)x", line)
        if m: k = line.strip().split(" (")[0][:60]
        m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", line)
        if m and k:
            v = float(m.group(2).replace(",", "")); v = v / 1000 if m.group(1) == "ns" else v
            d[k].append(v)
    for k, v in d.items():
        v.sort(); print(f"{f}: {k}: n {len(v)} median {v[len(v)//2]:.2f} us min {v[0]:.2f}")
PY
