"""PyTorch peer of `kiln bench --suite reductions` (run by `torch_peer.py --suite
reductions`): the same workloads under the same names, timed the same way (20 calls
captured in one CUDA graph, median of 50 replays with CUDA events, divided by 20; bincount,
which reads the max back to the host, eagerly per call). `run` takes no spec (the workloads
are fixed here) and returns {"torch": version, "device": name, "results": {name: µs}}."""
import torch
import torch.nn.functional as F
from torch_timing import eager_samples_us, graph_samples_us

PER_GRAPH, REPS = 20, 50


def graph_us(fn):
    times = graph_samples_us(lambda _: fn(), PER_GRAPH, REPS)
    return times[len(times) // 2]


def eager_us(fn):
    times = eager_samples_us(fn, REPS)
    return times[len(times) // 2]


def run(spec=None):
    dev = "cuda"
    res = {}
    for outer, r in [(1, 32000), (1, 128256), (1, 151936), (1, 262144), (32, 128256), (4096, 1024), (64, 8192)]:
        x = torch.randn(outer, r, device=dev)
        res[f"softmax_f32_{outer}x{r}"] = graph_us(lambda: torch.softmax(x, -1))
        if (outer, r) == (1, 128256):
            res[f"log_softmax_f32_{outer}x{r}"] = graph_us(lambda: torch.log_softmax(x, -1))
            xb = x.bfloat16()
            res[f"softmax_bf16_{outer}x{r}"] = graph_us(lambda: torch.softmax(xb, -1))
    for outer, r in [(32, 4096), (1, 4 << 20)]:
        x = torch.randn(outer, r, device=dev)
        res[f"std_mean_f32_{outer}x{r}"] = graph_us(lambda: torch.std_mean(x, -1))
    for n in [64, 16 << 20]:
        a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
        res[f"mse_loss_f32_{n}_mean"] = graph_us(lambda: F.mse_loss(a, b))
    n = 4 << 20
    one = torch.full((n,), 3, dtype=torch.int64, device=dev)
    uniform = torch.randint(0, 1024, (n,), device=dev)
    for name, x in [("one_bin", one), ("uniform1024", uniform)]:
        res[f"bincount_4M_{name}"] = eager_us(lambda: torch.bincount(x))
    for outer, r, k in [(1, 128256, 50), (64, 32000, 8), (1, 262144, 64)]:
        x = torch.randn(outer, r, device=dev)
        res[f"topk_f32_{outer}x{r}_k{k}"] = graph_us(lambda: torch.topk(x, k, -1))
    for r in [128, 256]:
        x = torch.randn(1, r, device=dev)
        bias = torch.randn(r, device=dev) * 0.1

        def softmax_top8(norm):
            p = torch.softmax(x, -1, dtype=torch.float)
            w, i = torch.topk(p, 8, -1)
            return (w / w.sum(-1, keepdim=True), i) if norm else (w, i)

        def sigmoid_bias_top8():
            s = x.sigmoid()
            _, i = torch.topk(s + bias, 8, -1)
            w = s.gather(-1, i)
            return w / (w.sum(-1, keepdim=True) + 1e-20), i

        res[f"router_softmax_top8_1x{r}"] = graph_us(lambda: softmax_top8(False))
        res[f"router_softmax_top8_norm_1x{r}"] = graph_us(lambda: softmax_top8(True))
        res[f"router_sigmoid_bias_top8_1x{r}"] = graph_us(sigmoid_bias_top8)
    return {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "results": res}
