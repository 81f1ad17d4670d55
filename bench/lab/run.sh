#!/usr/bin/env bash
# On the GPU machine, from the repo root: builds bench/lab/gemv_lab.cu with nvcc over the
# tree's kernels and runs it; the first line gives device, driver, clocks and the commit
# (KILN_COMMIT, as stage-gpu.sh records it in .gpu/COMMIT).
set -euo pipefail
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -Icrates/kiln/src/cuda/kernels -Ibench/lab \
  bench/lab/gemv_lab.cu -o /tmp/gemv_lab
echo "commit ${KILN_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null || echo unknown)}, $(date -u '+%F %H:%M UTC'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
/tmp/gemv_lab
