#!/usr/bin/env bash
# Runs on the GPU machine from the repo root, over binaries staged by stage-gpu.sh:
# unit tests, GPU parity, fixtures on CUDA, compute-sanitizer, then a short table.
# Usage: bash .gpu/gpu-test.sh [quick]   (quick: no sanitizer)
set -uo pipefail
OUT=${OUT:-/tmp/kiln-out}
LOG=/tmp/kiln-logs
mkdir -p "$OUT" "$LOG"
export KILN_FIXTURES="$PWD/.gpu/fixtures" KILN_CACHE_DIR=/tmp/kiln-cache KILN_COMMIT="$(cat .gpu/COMMIT)"
declare -a rows
run() { # name, command...
  local name=$1; shift
  local t0=$(date +%s%N)
  "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  local dt=$(( ($(date +%s%N) - t0) / 100000000 ))
  dt="$((dt / 10)).$((dt % 10))"
  local last=$(grep -E "passed|test result|ERROR SUMMARY|of copy|skipped" "$LOG/$name.log" | tail -1)
  rows+=("$(printf '%-22s rc=%-3s %6ss  %s' "$name" "$rc" "$dt" "$last")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader > "$LOG/gpu.txt"
run info .gpu/kiln info
for t in .gpu/tests/*; do
  n=$(basename "$t")
  case "$n" in gpu_parity) continue;; esac
  run "$n" "$t" --test-threads=4
done
run gpu_parity .gpu/tests/gpu_parity
run check_cuda .gpu/kiln check --fixtures .gpu/fixtures --device cuda
# Runtime figures: the first run compiles every kernel (cold cache), the second loads them.
rm -rf "$KILN_CACHE_DIR"
run bench_runtime_cold .gpu/kiln bench --suite runtime --json "$LOG/runtime_cold.json"
run bench_runtime_warm .gpu/kiln bench --suite runtime --json "$LOG/runtime_warm.json"
if [ "${1:-}" != quick ] && command -v compute-sanitizer >/dev/null; then
  run memcheck timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/tests/gpu_parity
  run racecheck timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 .gpu/tests/gpu_parity reductions softmax_norm
fi
tar czf "$OUT/logs.tgz" -C /tmp kiln-logs
grep -h "^FAIL" "$LOG"/*.log | head -20
echo "== $(cat "$LOG/gpu.txt")"
printf '%s\n' "${rows[@]}"
