#!/usr/bin/env bash
# GPU machine, repo root: bench/lab/gemv_pdl_lab.cu over the tree's kernels, twice; with
# LAB_OLD="<dir> ..." also over the scaled_mm.cu in each <dir> (other kernels, same harness).
set -uo pipefail
OUT=${OUT:-/tmp/out}
build() { nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I"$1" -Icrates/kiln/src/cuda/kernels -Ibench/lab \
  bench/lab/gemv_pdl_lab.cu -o "$2"; }
build crates/kiln/src/cuda/kernels /tmp/pdl_lab || exit 1
i=0; for d in ${LAB_OLD:-}; do build "$d" /tmp/pdl_old$i || exit 1; i=$((i + 1)); done
echo "$(date -u '+%F %H:%M UTC'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" | tee $OUT/pdl_lab.txt
for r in 60 200; do
  echo "== tree kernels, LAB_REPS=$r" | tee -a $OUT/pdl_lab.txt
  LAB_REPS=$r /tmp/pdl_lab | tee -a $OUT/pdl_lab.txt
  i=0; for d in ${LAB_OLD:-}; do
    echo "== $d kernels, LAB_REPS=$r" | tee -a $OUT/pdl_lab.txt; LAB_REPS=$r /tmp/pdl_old$i | tee -a $OUT/pdl_lab.txt; i=$((i + 1))
  done
done
