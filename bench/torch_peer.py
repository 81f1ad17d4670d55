#!/usr/bin/env python3
"""PyTorch peer of `kiln bench`: one entry point for the suites that have a peer. It runs the
suite's workloads in PyTorch on the same GPU by the same method (`torch_timing.py`: calls
captured in one CUDA graph, replayed, timed with CUDA events) and prints one JSON object on
stdout, which `kiln bench` merges into its table and JSON.

    python3 bench/torch_peer.py --suite linear|reductions|fp8|grouped|linalg|attention|decode [--json FILE]

The suite's spec comes as JSON on stdin (linear, fp8, grouped, linalg and attention: the shapes
kiln ran; decode: the presets, contexts and steps kiln ran; reductions:
none, its workloads are fixed). `kiln bench --peer torch` runs this. With --json FILE it
also writes {"schema", "suite", "provenance", "results"}: the printed object under
"results", beside the torch build, device, host and time it came from.

    echo '{"shapes": [[1, 4096, 4096]], "gemv_max_m": 16}' |
        python3 bench/torch_peer.py --suite fp8 --json torch_fp8.json
"""
import argparse
import datetime
import importlib
import json
import socket
import subprocess
import sys
import time

SUITES = ("linear", "reductions", "fp8", "grouped", "linalg", "attention", "decode")


def driver_release():
    """The NVIDIA driver release (e.g. 580.159.04) from nvidia-smi, or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return out.strip().splitlines()[0] if out.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance():
    import torch
    now = time.time()
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "cc": list(torch.cuda.get_device_capability(0)),
        "driver_release": driver_release(),
        "host": socket.gethostname(),
        "unix_time": int(now),
        "timestamp": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def read_spec():
    """The JSON spec on stdin; {} when stdin is empty or a terminal."""
    if sys.stdin is None or sys.stdin.isatty():
        return {}
    text = sys.stdin.read()
    return json.loads(text) if text.strip() else {}


def main():
    ap = argparse.ArgumentParser(description="PyTorch peer of kiln bench")
    ap.add_argument("--suite", required=True, choices=SUITES)
    ap.add_argument("--json", help="also write the result with its provenance here")
    args = ap.parse_args()
    spec = read_spec()
    suite = importlib.import_module(f"torch_{args.suite}")  # bench/ is sys.path[0]
    results = suite.run(spec)
    print(json.dumps(results))
    if args.json:
        doc = {"schema": 1, "suite": args.suite, "provenance": provenance(), "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
