#!/usr/bin/env bash
# Runs on the GPU machine from the repo root, over binaries staged by stage-gpu.sh:
# unit tests, GPU parity, fixtures on CUDA, compute-sanitizer, then a short table.
# Usage: bash .gpu/gpu-test.sh [quick]   (quick: no sanitizer)
set -uo pipefail
OUT=${OUT:-/tmp/kiln-out}
mkdir -p "$OUT"
export KILN_FIXTURES="$PWD/.gpu/fixtures" KILN_CACHE_DIR="$OUT/cache"
declare -a rows
run() { # name, command...
  local name=$1; shift
  local t0=$(date +%s.%N)
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  local dt=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
  local last=$(grep -E "passed|test result|ERROR SUMMARY|summary" "$OUT/$name.log" | tail -1)
  rows+=("$(printf '%-22s rc=%-3s %6ss  %s' "$name" "$rc" "$dt" "$last")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader > "$OUT/gpu.txt"
run info .gpu/kiln info
for t in .gpu/tests/*; do
  n=$(basename "$t")
  case "$n" in gpu_parity) continue;; esac
  run "$n" "$t" --test-threads=4
done
run gpu_parity .gpu/tests/gpu_parity
run check_cuda .gpu/kiln check --fixtures .gpu/fixtures --device cuda
if [ "${1:-}" != quick ] && command -v compute-sanitizer >/dev/null; then
  run memcheck compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/tests/gpu_parity
  run racecheck compute-sanitizer --tool racecheck --error-exitcode 9 .gpu/tests/gpu_parity reductions softmax_norm
fi
grep -h "^FAIL" "$OUT"/*.log | head -20
echo "== $(cat "$OUT/gpu.txt")"
printf '%s\n' "${rows[@]}"
