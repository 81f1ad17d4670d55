#!/usr/bin/env bash
# GPU machine, repo root, with stage-gpu.sh's bundle unpacked in .gpu: `kiln bench --suite fp8
# --peer none` once per kernel variant and round, variants in turn so that the power-limited
# clock's drift falls on all of them alike. LAB_VARIANTS="- dir ..." ("-" = the built-in
# kernels; a dir holds variant sources, compiled through KILN_KERNEL_DIR), LAB_ROUNDS (3),
# LAB_DEFINES="name:MACRO=value,MACRO=value ..." (more variants: the tree's fp8_gemm.cu with
# those #defines rewritten, e.g. "c4:FG_CLUSTER=4"), LAB_BINARIES="name:kiln-binary:dir ..." (more
# variants: another build of kiln, whose launcher matches the kernel source in dir, with that
# build's gpu_fp8 test binary beside it).
# Ends with the median µs per variant of kiln's FP8 GEMM (forced) and cuBLASLt on the large
# shapes. JSON per run under $OUT/variants/.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/variants"
# A variant is name|binary|kernel dir ("" = the built-in sources).
variants=""
for v in ${LAB_VARIANTS:--}; do
  [ "$v" = - ] && variants="$variants builtin|.gpu/kiln|" || variants="$variants $(basename "$v")|.gpu/kiln|$(realpath "$v")"
done
for spec in ${LAB_BINARIES:-}; do
  IFS=: read -r name bin dir <<<"$spec"
  variants="$variants $name|$bin|$(realpath "$dir")"
done
for spec in ${LAB_DEFINES:-}; do
  name=${spec%%:*} dir=/tmp/lab-variants/${spec%%:*}
  mkdir -p "$dir" && cp crates/kiln/src/cuda/kernels/fp8_gemm.cu "$dir/"
  IFS=, read -ra defs <<<"${spec#*:}"
  for d in "${defs[@]}"; do
    grep -q "^#define ${d%%=*} " "$dir/fp8_gemm.cu" || { echo "$name: no #define ${d%%=*}"; exit 2; }
    sed -i "s/^#define ${d%%=*} .*/#define ${d%%=*} ${d#*=}/" "$dir/fp8_gemm.cu"
  done
  variants="$variants $name|.gpu/kiln|$dir"
done
export KILN_FIXTURES=$PWD/.gpu/fixtures KILN_CACHE_DIR=/tmp/kiln-cache KILN_COMMIT=$(cat .gpu/COMMIT)
echo "$(date -u '+%F %H:%M UTC'), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), kiln $KILN_COMMIT"
# Each variant first passes gpu_fp8's checks of kiln's GEMM against the CPU backend (its
# build's test binary).
for v in $variants; do
  IFS='|' read -r name bin dir <<<"$v"
  [ -z "$dir" ] && continue
  tests=$([ "$bin" = .gpu/kiln ] && echo .gpu/tests/gpu_fp8 || echo "$(dirname "$bin")/gpu_fp8")
  KILN_KERNEL_DIR=$dir timeout 120 "$tests" own_gemm >"$OUT/variants/$name-check.txt" 2>&1
  echo "$name gpu_fp8 own_gemm: rc=$? $(grep -E 'passed|FAIL' "$OUT/variants/$name-check.txt" | tail -3)"
done
for r in $(seq 1 "${LAB_ROUNDS:-3}"); do
  for v in $variants; do
    IFS='|' read -r name bin dir <<<"$v"
    KILN_KERNEL_DIR=$dir timeout 120 "$bin" bench --suite fp8 --peer none \
      --json "$OUT/variants/$name-$r.json" > "$OUT/variants/$name-$r.txt" 2>&1 || echo "$name round $r: rc=$?"
  done
done
python3 - "$OUT/variants" <<'PY'
import json, sys, glob, os, statistics
runs = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name = os.path.basename(f).rsplit("-", 1)[0]
    s = json.load(open(f))["suites"]["fp8"]
    for key, tag in (("op_latency_own_gemm", "kiln"), ("op_latency_cublaslt", "cuBLASLt")):
        for r in s[key]:
            runs.setdefault((r["name"], tag), {}).setdefault(name, []).append(r["us"])
names = sorted({n for v in runs.values() for n in v})
print(f"{'median µs (rounds)':<48}" + "".join(f"{n:>16}" for n in names))
for (case, tag), by in sorted(runs.items()):
    cells = "".join(f"{statistics.median(by[n]):>10.1f} ({len(by[n])})" if n in by else f"{'-':>16}" for n in names)
    print(f"{case + ' ' + tag:<48}{cells}")
PY
