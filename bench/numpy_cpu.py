"""numpy beside `kiln bench --suite cpu`: f32 1024^3 matmul and a 16M-element add, median
of repeats after a warm-up, on this machine. Prints one JSON object."""
import json, time
import numpy as np

def median_ms(f, reps=10):
    f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(); ts.append((time.perf_counter() - t) * 1e3)
    return sorted(ts)[len(ts) // 2]

rng = np.random.default_rng(0)
a = rng.standard_normal((1024, 1024), dtype=np.float32)
b = rng.standard_normal((1024, 1024), dtype=np.float32)
x = rng.standard_normal(16 << 20, dtype=np.float32)
y = rng.standard_normal(16 << 20, dtype=np.float32)
out = {"numpy": np.__version__, "matmul_f32_1024_ms": median_ms(lambda: a @ b), "add_f32_16M_ms": median_ms(lambda: x + y)}
try:
    from threadpoolctl import threadpool_info
    out["blas"] = [{k: i.get(k) for k in ("internal_api", "num_threads", "architecture")} for i in threadpool_info()]
except ImportError:
    pass
print(json.dumps(out))
