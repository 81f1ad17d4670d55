#!/usr/bin/env bash
# Call 2: decode with kernel-source variants (KILN_KERNEL_DIR), kiln alone, same machine.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/call2"
[ -f .gpu/bundle.tar.xz ] && [ ! -f .gpu/kiln ] && tar xJf .gpu/bundle.tar.xz -C .gpu
export KILN_CACHE_DIR=/tmp/kiln-cache KILN_COMMIT="$(cat .gpu/COMMIT)" KILN_BENCH_DIR="$PWD/.gpu"
for preset in ${PRESETS:-qwen3-30b-a3b llama-3.1-8b}; do
  for v in ${VARIANTS:-base pf1 tiles4 pfall base2}; do
    env=(env -u KILN_KERNEL_DIR); [[ "$v" != base* ]] && env=(env KILN_KERNEL_DIR="$PWD/.gpu-exp/$v")
    t0=$(date +%s)
    "${env[@]}" timeout 300 .gpu/kiln bench --suite decode --preset $preset --peer none \
      --json "$OUT/call2/$preset-$v.json" > "$OUT/call2/$preset-$v.log" 2>&1
    echo "$preset $v rc=$? $(( $(date +%s) - t0 ))s: $(grep -E '^ *graph context' "$OUT/call2/$preset-$v.log" | sed 's/  */ /g' | tr '\n' ';')"
  done
done | tee "$OUT/call2/summary.txt"
