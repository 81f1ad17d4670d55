#!/usr/bin/env bash
# Runs on the GPU machine from the repo root, over binaries staged by stage-gpu.sh, and
# ends with a short table. Every step has a time limit so one hang cannot eat the call.
# Usage: bash .gpu/gpu-test.sh [tests|bench|sanitize|profile|all|suite:NAME|decode:PRESET|steps:PRESET|long:PRESET|sweep:SUITE] ...
#   (default: tests bench). KILN_GPU_ONLY=REGEX keeps the test binaries and kernel families
#   (sanitize) whose names match it.
#   tests:    unit tests, every gpu_* parity binary, fixtures (ops + models) on CUDA,
#             kiln generate on the fixture llama
#   bench:    `kiln bench` (the default set: every suite, PyTorch peers in the same call)
#             with charts, decode for every preset, the Wan VAEs; JSON in results/
#   sanitize: compute-sanitizer memcheck over every gpu_* binary, racecheck over the cases of
#             every kernel family that uses shared memory (RACECHECK below); SANITIZE_JOBS
#             (default 8) of them at a time
#   profile:  ncu over the reductions suite's small-row kernels and the fp8 decode kernel
#   suite:NAME     one `kiln bench --suite NAME` with its PyTorch peer
#   decode:PRESET  `kiln bench --suite decode --preset PRESET` with its PyTorch peer
#                  (DECODE_PEER=none: kiln alone)
#   steps:PRESET   ncu's time per kernel of one decode step of PRESET (bench/ncu_steps.py)
#   long:PRESET    `kiln bench --suite long --preset PRESET`: 10,000 tokens, memory flat?
#   sweep:SUITE    `KILN_GEMV_SWEEP=1 kiln bench --suite SUITE --peer none` (linear or
#                  experts): every GEMV variant per shape, for the policy in cuda/ops/gemv.rs
# $OUT gets two files, refreshed after every step so a call cut short still brings back
# what ran: kiln-gpu.tgz (logs/ and results/*.json) and table.txt.
set -uo pipefail
[ -f .gpu/bundle.tar.xz ] && [ ! -f .gpu/kiln ] && tar xJf .gpu/bundle.tar.xz -C .gpu
OUT=${OUT:-/tmp/kiln-out}
LOG=/tmp/kiln/logs
RES=/tmp/kiln/results
mkdir -p "$OUT" "$LOG" "$RES"
: >"$LOG/rows.txt"
export KILN_FIXTURES="$PWD/.gpu/fixtures" KILN_CACHE_DIR=/tmp/kiln-cache KILN_COMMIT="$(cat .gpu/COMMIT)"
export KILN_BENCH_DIR="$PWD/.gpu"
ONLY=${KILN_GPU_ONLY:-.}
wanted() { [[ "$1" =~ $ONLY ]]; }
run() { # name, seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s%N)
  timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  local dt=$(( ($(date +%s%N) - t0) / 100000000 ))
  dt="$((dt / 10)).$((dt % 10))"
  local last=$(grep -E "passed|test result|ERROR SUMMARY|of copy|skipped|tokens/s|geomean" "$LOG/$name.log" | tail -1 | cut -c1-70)
  printf '%-24s rc=%-3s %6ss  %s\n' "$name" "$rc" "$dt" "$last" >>"$LOG/rows.txt"
  [ -n "${PARALLEL:-}" ] || snapshot
}
snapshot() { cp "$LOG/rows.txt" "$OUT/table.txt"; tar czf "$OUT/kiln-gpu.tgz" -C /tmp kiln; }
# Runs `run ARGS...` in the background, at most SANITIZE_JOBS at a time (one GPU serves them
# all: compute-sanitizer is CPU-bound, so they overlap well).
spawn() {
  while [ "$(jobs -rp | wc -l)" -ge "${SANITIZE_JOBS:-8}" ]; do wait -n; done
  run "$@" &
}
tests() {
  run info 60 .gpu/kiln info
  for t in .gpu/tests/*; do
    n=$(basename "$t")
    wanted "$n" || continue
    case "$n" in gpu_*|both_*) run "$n" 300 "$t";; *) run "$n" 300 "$t" --test-threads=8;; esac
  done
  run check_cuda 300 .gpu/kiln check --fixtures .gpu/fixtures --device cuda
  run generate_llama 120 .gpu/kiln generate --model .gpu/fixtures/models/llama --prompt "Hello" \
    --max-tokens 16 --device cuda
}
bench() {
  # The default set (every suite, PyTorch beside kiln, llama-3.1-8b decode), charts, then
  # decode and memory for every preset, and llama-3.1-8b with FP8 weights.
  run bench_default 300 .gpu/kiln bench --json "$RES/default.json" --plot "$RES/plots"
  run decode_all 300 .gpu/kiln bench --suite decode --preset all --json "$RES/decode-all.json"
  # FP8 weights (--quantize fp8 on load) beside the bf16 figures above: tokens/s and memory.
  run decode_fp8 300 .gpu/kiln bench --suite decode --preset llama-3.1-8b-fp8 --json "$RES/decode-fp8.json"
  # The Wan VAEs at their released widths on 9 frames of 480×832: seconds and memory peaks.
  run vae 300 .gpu/kiln bench --suite vae --json "$RES/vae.json"
}
profile() {
  # Nsight Compute (clocks untouched) on the kernels that sit far above their floor, one
  # kernel name per pass so that the first launches of one do not use up the count.
  for k in softmax_cluster var_mean topk_stage router_topk; do
    run "ncu_$k" 120 ncu --clock-control none -k "regex:$k" -c 3 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      .gpu/kiln bench --suite reductions --peer none
  done
  run ncu_fp8_gemv 240 ncu --clock-control none -k "regex:fp8_gemv" -c 4 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    .gpu/kiln bench --suite fp8 --peer none
}
# Racecheck is slow (a whole binary ran past 150 s), so it runs per kernel family: each
# family whose source uses shared memory (stage-gpu.sh lists them in shared_kernels.txt)
# with the parity cases that launch it. A family missing here fails the step by name.
declare -A RACECHECK=(
  [attention_decode]="gpu_attention shapes device_length"
  [attention_prefill]="gpu_prefill model_views"
  [bincount]="gpu_reductions bincount"
  [expert_groups]="gpu_linear expert_groups"
  [fp8_gemm]="gpu_fp8 own_gemm"
  [fp8_linear]="gpu_fp8 decode_kernel w8a16 experts"
  [gated_delta]="gpu_parity gated_delta"
  [gemv]="gpu_linear shapes experts_sum swiglu"
  [linalg_inv]="gpu_linalg inv"
  [linalg_lu]="gpu_linalg lu"
  [linalg_trsm]="gpu_linalg solve_triangular"
  [grouped_mm]="gpu_linear grouped"
  [reduce]="gpu_reductions var_mean mse_loss"
  [rotary]="both_rotary"
  [scaled_mm]="gpu_fp8 layouts"
  [softmax]="gpu_reductions softmax_special softmax_long_rows"
  [topk]="gpu_reductions topk router"
)
sanitize() {
  # gpu_limits runs the device out of memory on purpose (that API error is its subject), so
  # it runs alone, before the others share the GPU.
  if wanted gpu_limits && [ -x .gpu/tests/gpu_limits ]; then
    run memcheck_gpu_limits 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 .gpu/tests/gpu_limits
  fi
  PARALLEL=1
  for t in .gpu/tests/gpu_* .gpu/tests/both_*; do
    local n=$(basename "$t")
    wanted "$n" && [ "$n" != gpu_limits ] || continue
    spawn "memcheck_$n" 540 compute-sanitizer --tool memcheck --error-exitcode 9 "$t"
  done
  for family in $(cat .gpu/shared_kernels.txt); do
    wanted "$family" || continue
    local cases=${RACECHECK[$family]:-}
    if [ -z "$cases" ]; then
      run "racecheck_$family" 5 sh -c "echo 'FAIL  racecheck: no case listed for $family (gpu-test.sh RACECHECK)'; exit 9"
      continue
    fi
    set -- $cases
    local bin=$1; shift
    spawn "racecheck_$family" 540 compute-sanitizer --tool racecheck --racecheck-report hazard \
      --error-exitcode 9 ".gpu/tests/$bin" "$@"
  done
  wait
  PARALLEL=
  snapshot
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader > "$LOG/gpu.txt"
modes=("$@"); [ ${#modes[@]} -eq 0 ] && modes=(tests bench)
for m in "${modes[@]}"; do
  case "$m" in tests) tests;; bench) bench;; sanitize) sanitize;; profile) profile;; all) tests; bench; sanitize;;
    suite:*) run "${m/:/_}" 300 .gpu/kiln bench --suite "${m#suite:}" --json "$RES/${m#suite:}.json";;
    decode:*) run "${m/:/_}" 400 .gpu/kiln bench --suite decode --preset "${m#decode:}" ${DECODE_PEER:+--peer "$DECODE_PEER"} --json "$RES/decode-${m#decode:}.json";;
    steps:*) run "${m/:/_}" 400 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
        .gpu/kiln bench --suite decode --preset "${m#steps:}" --peer none \
        && python3 .gpu/ncu_steps.py "$LOG/${m/:/_}.log" >"$RES/steps-${m#steps:}.txt"; snapshot;;
    sweep:*) KILN_GEMV_SWEEP=1 run "${m/:/_}" 400 .gpu/kiln bench --suite "${m#sweep:}" --peer none --json "$RES/sweep-${m#sweep:}.json";;
    long:*) run "${m/:/_}" 400 .gpu/kiln bench --suite long --preset "${m#long:}" --json "$RES/long-${m#long:}.json";;
    *) echo "unknown mode $m"; exit 2;; esac
done
grep -h "^FAIL\|panicked" "$LOG"/*.log | head -30 | cut -c1-200
echo "== $(cat "$LOG/gpu.txt") commit $KILN_COMMIT"
cat "$LOG/rows.txt"
