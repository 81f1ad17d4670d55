#!/usr/bin/env bash
# Call 4: parity tests of the new build; decode A/B on one machine: the build before this
# session's changes (old), the new one, the new one with KILN_NORM_LINEAR=0; sanitizers
# over the changed kernel families.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/ab"
OUT=$OUT/tests bash .gpu/gpu-test.sh tests > /dev/null 2>&1
cat "$OUT/tests/table.txt"
xz -dc .gpu-exp/old/kiln.xz > /tmp/kiln-old && chmod +x /tmp/kiln-old
export KILN_CACHE_DIR=/tmp/kiln-cache KILN_BENCH_DIR="$PWD/.gpu"
for preset in qwen3-30b-a3b llama-3.1-8b; do
  for v in old new nonorm old2 new2; do
    bin=.gpu/kiln; [[ $v == old* ]] && bin=/tmp/kiln-old
    norm=1; [ $v = nonorm ] && norm=0
    KILN_NORM_LINEAR=$norm timeout 200 $bin bench --suite decode --preset $preset --peer none \
      --json "$OUT/ab/$preset-$v.json" > "$OUT/ab/$preset-$v.log" 2>&1
    echo "$preset $v rc=$? $(grep -E '^ *graph context|nodes per step' "$OUT/ab/$preset-$v.log" | sed 's/  */ /g' | tr '\n' ';')"
  done
done | tee "$OUT/ab/summary.txt"
KILN_GPU_ONLY='gpu_attention|gpu_linear|gpu_models|both_rotary|attention_decode|gemv' OUT=$OUT/san \
  bash .gpu/gpu-test.sh sanitize > /dev/null 2>&1
cat "$OUT/san/table.txt"
