"""llama.cpp (llama-cpp-python) greedy decode tokens/s on the CPU: STEPS tokens after the prompt,
timed from the first generated token on (prompt excluded). Usage: MODEL THREADS REPS PROMPT STEPS."""
import sys, time
from llama_cpp import Llama

path, threads, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
llm = Llama(model_path=path, n_ctx=512, n_threads=threads, verbose=False)
ids = llm.tokenize(sys.argv[4].encode(), add_bos=True)
STEPS = int(sys.argv[5])
for rep in range(reps):
    llm.reset()
    t0 = None
    n = 0
    for tok in llm.generate(ids, temp=0, top_k=1, repeat_penalty=1.0, reset=True):
        n += 1
        if n == 1:
            t0 = time.perf_counter()
        if n == STEPS + 1:
            break
    dt = time.perf_counter() - t0
    print(f"{path.split('/')[-1]} threads={threads} rep={rep}: decode {STEPS} tokens, {STEPS / dt:.1f} tokens/s", flush=True)
