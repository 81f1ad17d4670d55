#!/usr/bin/env bash
# Here (not on the GPU machine): writes .gpu-lab/fp8-gemm-split/split{4,8}/fp8_gemm.cu, the
# tree's kernel with split.patch applied and K blocks grouped in fours or eights, for
# `device run` with carry [".gpu", ".gpu-lab/fp8-gemm-split"] and run.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
lab=.gpu-lab/fp8-gemm-split
rm -rf "$lab" && mkdir -p "$lab/patched"
cp crates/kiln/src/cuda/kernels/fp8_gemm.cu "$lab/patched/"
git apply --directory="$lab/patched" -p6 bench/lab/fp8-gemm-split/split.patch
for u in 4 8; do
  mkdir -p "$lab/split$u"
  sed "s/^#define FG_UNROLL 4$/#define FG_UNROLL $u/" "$lab/patched/fp8_gemm.cu" > "$lab/split$u/fp8_gemm.cu"
  grep -q "^#define FG_UNROLL $u$" "$lab/split$u/fp8_gemm.cu"
done
rm -r "$lab/patched"
ls "$lab"/*
