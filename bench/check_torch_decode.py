#!/usr/bin/env python3
"""Checks `torch_decode.py`'s hand-written model against transformers on the fixture models
(`fixtures/models/*`, or $KILN_FIXTURES/models), on the CPU in float32: the prompt pass's
last logits, then 16 greedy tokens by the decode step against `generate`. Needs torch and
transformers; prints one line per model and exits 1 on a mismatch.

    python3 bench/check_torch_decode.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_decode import Model, Shape, params_from_state_dict  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
STEPS = 16
PROMPT = 80


def check(folder):
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with open(os.path.join(folder, "config.json")) as f:
        shape = Shape(json.load(f))
    params = params_from_state_dict(shape, ref.state_dict())
    # Over one 64-token chunk of the DeltaNet's prompt path.
    ids = torch.randint(1, shape.vocab, (PROMPT,), generator=torch.Generator().manual_seed(0))
    model = Model(shape, params, len(ids) + STEPS, "cpu", torch.float32)
    with torch.inference_mode():
        want_logits = ref(ids[None]).logits[0, -1]
        got_logits = model.prompt(ids)[0]
        want = ref.generate(ids[None], max_new_tokens=STEPS, do_sample=False, min_new_tokens=STEPS)[0, len(ids) :]
        model.token.fill_(int(got_logits.argmax()))
        got = [int(model.token)]
        for _ in range(STEPS - 1):
            got.append(int(model.step()))
    err = (want_logits - got_logits).abs().max().item()
    ok = err < 1e-3 * max(1.0, want_logits.abs().max().item()) and got == want.tolist()
    print(f"{os.path.basename(folder):<12} tokens {got}")
    print(f"{os.path.basename(folder):<12} prompt logits max |diff| {err:.2e}; "
          f"{STEPS} greedy tokens {'equal' if got == want.tolist() else f'DIFFER: {got} vs {want.tolist()}'}"
          f" -> {'ok' if ok else 'FAIL'}")
    return ok


def check_llama3_rope():
    """inv_freq with Llama 3.1's scaling (the llama-3.1-8b preset) against transformers'."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from torch_decode import inv_freq

    with open(os.path.join(ROOT, "bench", "presets", "llama-3.1-8b.json")) as f:
        raw = json.load(f)
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](LlamaConfig(**raw), "cpu")
    err = (inv_freq(Shape(raw)) - want).abs().max().item()
    print(f"llama3 rope  inv_freq max |diff| {err:.2e} -> {'ok' if err < 1e-9 else 'FAIL'}")
    return err < 1e-9


def main():
    base = os.path.join(os.environ.get("KILN_FIXTURES", os.path.join(ROOT, "fixtures")), "models")
    results = [check(os.path.join(base, name)) for name in sorted(os.listdir(base))]
    results.append(check_llama3_rope())
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
