#!/usr/bin/env bash
# Call 3: the norm / rotary kernel sources of .gpu-exp/fast under the parity tests, then
# decode with each (KILN_KERNEL_DIR), kiln alone, same machine.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/call3"
[ -f .gpu/bundle.tar.xz ] && [ ! -f .gpu/kiln ] && tar xJf .gpu/bundle.tar.xz -C .gpu
export KILN_FIXTURES="$PWD/.gpu/fixtures"
for t in both_rotary gpu_parity gpu_models gpu_reductions; do
  KILN_KERNEL_DIR=$PWD/.gpu-exp/fast timeout 200 .gpu/tests/$t > "$OUT/call3/$t.log" 2>&1
  echo "$t rc=$? $(grep -E 'passed|FAIL' "$OUT/call3/$t.log" | tail -3 | tr '\n' ' ')"
done | tee "$OUT/call3/tests.txt"
KILN_KERNEL_DIR=$PWD/.gpu-exp/fast timeout 100 .gpu/kiln check --fixtures .gpu/fixtures --device cuda 2>&1 | tail -2
OUT=$OUT/call3x PRESETS="qwen3-30b-a3b llama-3.1-8b" VARIANTS="base fast norm rot base2" bash .gpu-exp/call2.sh
