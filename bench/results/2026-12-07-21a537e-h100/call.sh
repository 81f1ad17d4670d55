#!/usr/bin/env bash
# Session 50, call 1: parity + sanitizers over the launcher refactor (gemv, fp8_linear,
# fp8_experts) and the new FP8 expert variants; decode FP8 vs bf16; experts suite.
set -u
OUT=${OUT:-/tmp/out}
[ -f .gpu/kiln ] || tar xJf .gpu/bundle.tar.xz -C .gpu
R=/tmp/s50a; mkdir -p $R
pack() { tar czf "$OUT/s50a.tgz" -C /tmp s50a kiln 2>/dev/null; }
export KILN_FIXTURES="$PWD/.gpu/fixtures" KILN_CACHE_DIR=/tmp/kiln-cache KILN_BENCH_DIR="$PWD/.gpu" KILN_COMMIT="$(cat .gpu/COMMIT)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader | tee $R/gpu.txt
cat .gpu/COMMIT | tee -a $R/gpu.txt
step() { local name=$1 lim=$2; shift 2; local t0=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - t0 ))s $(grep -E 'test result|ERROR SUMMARY|RACECHECK SUMMARY|passed' $R/$name.log | tail -1 | cut -c1-80)" | tee -a $R/summary.txt; pack; }
dec() { step decode-$1 120 .gpu/kiln bench --suite decode --preset $1 --peer none --json $R/decode-$1.json
  grep -E '^ *(graph|eager) context|nodes per step' $R/decode-$1.log | sed 's/  */ /g' | tee -a $R/summary.txt; pack; }
# Warm the kernel cache (a cold NVRTC compile of every family took > 60 s on the H100).
step gpu_fp8 240 .gpu/tests/gpu_fp8
grep -E "FAIL|panicked" $R/gpu_fp8.log | head -10
dec qwen3-30b-a3b-fp8
dec qwen3-30b-a3b
step experts 120 .gpu/kiln bench --suite experts --json $R/experts.json
grep -E "fp8|gate_up|down" $R/experts.log | tail -14
KILN_GPU_ONLY='gpu_linear|gpu_models|gpu_parity|kiln-lib' timeout 200 bash .gpu/gpu-test.sh tests > $R/tests.log 2>&1; tail -12 $R/tests.log | tee -a $R/summary.txt; pack
KILN_GPU_ONLY='gpu_fp8|gpu_linear|fp8_linear|gemv' timeout 150 bash .gpu/gpu-test.sh sanitize > $R/sanitize.log 2>&1; tail -8 $R/sanitize.log | tee -a $R/summary.txt; pack
dec lfm2-8b-a1b-fp8
dec qwen3.6-35b-a3b-fp8
cat $R/summary.txt
