#!/usr/bin/env bash
# Call 6 (call 5 cut to fit the device time left): parity of what changed, memcheck of
# gpu_linear, decode old vs new, the experts suite, then PyTorch peers while time lasts.
set -u
OUT=${OUT:-/tmp/out}
R=/tmp/call5; mkdir -p $R/ab
pack() { tar czf "$OUT/call5.tgz" -C /tmp call5 2>/dev/null; }
[ -f .gpu/bundle.tar.xz ] && [ ! -f .gpu/kiln ] && tar xJf .gpu/bundle.tar.xz -C .gpu
export KILN_FIXTURES="$PWD/.gpu/fixtures" KILN_CACHE_DIR=/tmp/kiln-cache KILN_BENCH_DIR="$PWD/.gpu"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/gpu.txt
for t in gpu_linear gpu_models; do
  timeout 90 .gpu/tests/$t > $R/$t.log 2>&1; echo "$t rc=$? $(grep -E 'passed' $R/$t.log | tail -1)"
done | tee $R/tests.txt; grep -h "FAIL" $R/gpu_*.log | cut -c1-200
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 .gpu/tests/gpu_linear experts_sum experts swiglu > $R/memcheck.log 2>&1
echo "memcheck gpu_linear experts_sum experts swiglu rc=$? $(grep 'ERROR SUMMARY' $R/memcheck.log)" | tee -a $R/tests.txt; pack
xz -dc .gpu-exp/old/kiln.xz > /tmp/kiln-old && chmod +x /tmp/kiln-old
for preset in qwen3-30b-a3b llama-3.1-8b; do
  for v in old new; do
    bin=.gpu/kiln; [[ $v == old* ]] && bin=/tmp/kiln-old
    timeout 100 $bin bench --suite decode --preset $preset --peer none \
      --json "$R/ab/$preset-$v.json" > "$R/ab/$preset-$v.log" 2>&1
    echo "$preset $v rc=$? $(grep -E '^ *graph context|nodes per step' "$R/ab/$preset-$v.log" | sed 's/  */ /g' | tr '\n' ';')"
  done
done | tee "$R/ab/summary.txt"; pack
timeout 60 .gpu/kiln bench --suite experts --json $R/experts.json > $R/experts.log 2>&1; tail -7 $R/experts.log; pack
OUT=$OUT/peers bash .gpu/gpu-test.sh decode:qwen3-30b-a3b decode:llama-3.1-8b > /dev/null 2>&1
cat $OUT/peers/table.txt
