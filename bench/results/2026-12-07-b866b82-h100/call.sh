#!/usr/bin/env bash
# Session 49, call 1: the FP8 expert kernels' first GPU run. Parity first, then decode
# FP8 vs bf16, the experts sweep, sanitizers, the rest of the parity binaries.
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/s49a; mkdir -p $R
[ -f .gpu/kiln ] || tar xJf .gpu/bundle.tar.xz -C .gpu
pack() { tar czf "$OUT/s49a.tgz" -C /tmp s49a 2>/dev/null; }
export KILN_FIXTURES="$PWD/.gpu/fixtures" KILN_CACHE_DIR=/tmp/kiln-cache KILN_BENCH_DIR="$PWD/.gpu" KILN_COMMIT="$(cat .gpu/COMMIT)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
cat .gpu/COMMIT | tee -a $R/gpu.txt
step() { local name=$1 lim=$2; shift 2; local t0=$(date +%s); timeout $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - t0 ))s $(grep -E 'test result|ERROR SUMMARY|RACECHECK SUMMARY' $R/$name.log | tail -1)" | tee -a $R/summary.txt; pack; }
dec() { step decode-$1 100 .gpu/kiln bench --suite decode --preset $1 --peer none --json $R/decode-$1.json
  grep -E '^ *(graph|eager) context|nodes per step|floor' $R/decode-$1.log | sed 's/  */ /g' | tee -a $R/summary.txt; pack; }
step gpu_fp8_experts 60 .gpu/tests/gpu_fp8 experts
grep -E "FAIL|panicked|max" $R/gpu_fp8_experts.log | head -20
step gpu_fp8 90 .gpu/tests/gpu_fp8
grep -E "FAIL|panicked" $R/gpu_fp8.log | head -10
dec qwen3-30b-a3b-fp8
dec qwen3-30b-a3b
KILN_GEMV_SWEEP=1 step experts 100 .gpu/kiln bench --suite experts --json $R/experts.json
tail -30 $R/experts.log
step memcheck_experts 60 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/tests/gpu_fp8 experts
step racecheck_experts 90 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 .gpu/tests/gpu_fp8 experts
step gpu_models 60 .gpu/tests/gpu_models
dec qwen3.6-35b-a3b-fp8
dec lfm2-8b-a1b-fp8
cat $R/summary.txt
