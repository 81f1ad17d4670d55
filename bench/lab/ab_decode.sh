#!/usr/bin/env bash
# GPU machine, repo root, carry [".gpu", ".gpu-lab/prev"]: the decode suite for one preset
# with the previously staged binaries (.gpu-lab/prev/bundle.tar.xz, copied there from .gpu/
# before re-staging) and the current ones, alternating A B A B in one call so both see the
# same GPU state. Usage: bash bench/lab/ab_decode.sh PRESET [ROUNDS]. JSON and logs go to
# $OUT/ab.tar.gz; a table of tokens/s per context and round is printed last.
set -u
preset=${1:?usage: ab_decode.sh PRESET [ROUNDS]} rounds=${2:-2}
OUT=${OUT:-/tmp/out}
R=/tmp/ab
mkdir -p "$R/prev" "$OUT"
[ -f .gpu/kiln ] || tar xJf .gpu/bundle.tar.xz -C .gpu
tar xJf .gpu-lab/prev/bundle.tar.xz -C "$R/prev"
export KILN_CACHE_DIR=/tmp/kiln-cache
for r in $(seq 1 "$rounds"); do
  for side in prev cur; do
    dir=$R/prev; [ $side = cur ] && dir=$PWD/.gpu
    KILN_COMMIT=$(cat "$dir/COMMIT") KILN_BENCH_DIR=$dir timeout 240 "$dir/kiln" bench --suite decode \
      --preset "$preset" --json "$R/$side-$r.json" > "$R/$side-$r.txt" 2>&1
    echo "$side round $r ($(cat "$dir/COMMIT")): rc=$?"
  done
done
tar czf "$OUT/ab.tar.gz" -C /tmp --exclude ab/prev ab
python3 - "$R" "$preset" "$rounds" <<'PY'
import json, sys
r, preset, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
print(f"{preset}: tokens/s (median ms/token)")
for side in ("prev", "cur"):
    for i in range(1, rounds + 1):
        try:
            d = json.load(open(f"{r}/{side}-{i}.json"))
            p = d["suites"]["decode"]["presets"][preset]
            row = "  ".join(f"ctx {x['context']}: {x['tokens_per_s']:.1f} ({x['median_ms_per_token']:.2f})" for x in p["decode"])
            print(f"{side} {d['suites']['decode']['provenance']['commit']} round {i}: {row}")
        except Exception as e:
            print(f"{side} round {i}: no result ({e})")
PY
