#!/usr/bin/env bash
# GPU machine, repo root, carry [".gpu", ".gpu-lab/fp8-gemm-split"] (stage-gpu.sh, then
# make-variants.sh here): checks each split variant against the CPU backend (gpu_fp8
# own_gemm), takes one Nsight Compute look at split4's 8192³ launch, times the variants
# beside the built-in kernel (run_gemm_variants.sh, 3 rounds), then runs the whole fp8
# suite with split4 and PyTorch in the same call (its provenance lists the replaced
# source). Logs go to $OUT/lab.tar.gz (the device tool returns few files); table last.
set -u
OUT=${OUT:-/tmp/out}
L=$OUT/lab
mkdir -p "$L"
tar xJf .gpu/bundle.tar.xz -C .gpu
export KILN_FIXTURES=$PWD/.gpu/fixtures KILN_CACHE_DIR=/tmp/kiln-cache KILN_COMMIT=$(cat .gpu/COMMIT) KILN_BENCH_DIR=$PWD/.gpu
lab=$PWD/.gpu-lab/fp8-gemm-split
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw,clocks.sm --format=csv,noheader
for v in split4 split8; do
  KILN_KERNEL_DIR=$lab/$v timeout 180 .gpu/tests/gpu_fp8 own_gemm > "$L/own_gemm-$v.txt" 2>&1
  echo "own_gemm $v: rc=$? $(tail -1 "$L/own_gemm-$v.txt")"
done
KILN_KERNEL_DIR=$lab/split4 timeout 200 ncu --clock-control none -k regex:fp8_gemm -c 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  .gpu/kiln bench --suite fp8 --peer none > "$L/ncu-split4.txt" 2>&1
grep -E "^  fp8_gemm|Duration|SM Frequency|Compute \(SM\)|L1/TEX Cache" "$L/ncu-split4.txt" | head -8
LAB_VARIANTS="- $lab/split4 $lab/split8" LAB_ROUNDS=${LAB_ROUNDS:-3} OUT=$L \
  timeout 420 bash bench/lab/run_gemm_variants.sh > "$L/variants.txt" 2>&1
KILN_KERNEL_DIR=$lab/split4 timeout 200 .gpu/kiln bench --suite fp8 --json "$L/fp8-split4-torch.json" \
  > "$L/fp8-split4-torch.txt" 2>&1
grep -E "8192x8192x8192|NOTE" "$L/fp8-split4-torch.txt"
tar czf "$OUT/lab.tar.gz" -C "$OUT" lab && rm -r "$L"
tar xzf "$OUT/lab.tar.gz" -O lab/variants.txt | tail -12
