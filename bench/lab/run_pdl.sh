#!/usr/bin/env bash
# GPU machine, repo root: bench/lab/gemv_pdl_lab.cu, twice.
set -uo pipefail
OUT=${OUT:-/tmp/out}
nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -Icrates/kiln/src/cuda/kernels -Ibench/lab \
  bench/lab/gemv_pdl_lab.cu -o /tmp/pdl_lab || exit 1
echo "$(date -u '+%F %H:%M UTC'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" | tee $OUT/pdl_lab.txt
/tmp/pdl_lab | tee -a $OUT/pdl_lab.txt
echo "== LAB_REPS=200" | tee -a $OUT/pdl_lab.txt
LAB_REPS=200 /tmp/pdl_lab | tee -a $OUT/pdl_lab.txt
