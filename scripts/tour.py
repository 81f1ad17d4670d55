#!/usr/bin/env python3
"""Hostile-input tour (issue 37): corrupts copies of the fixture models, VAEs and op
fixtures in a temp dir and runs `kiln generate`, `kiln vae decode` or `kiln check` on the
CPU on each, with a time limit and an address-space limit, counting per family how each
run ended: clear error, accepted, contained (a third-party panic kiln caught and reported
as an error), panic, abort (allocation failure), signal, timeout.

    scripts/tour.py --kiln PATH/TO/kiln [--count 200] [--families config,vae] [--seed 1]

Exit status 1 when any run panicked, aborted, died on a signal or timed out; the cases
that did are listed with the command to reproduce them (their folders are kept).
"""

import argparse
import concurrent.futures as cf
import copy
import json
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "fixtures")
MODELS = ["llama", "qwen3", "qwen3_moe", "lfm2_moe", "qwen3_5_moe"]
VAES = ["wan21_vae_tiny", "wan22_vae_tiny"]
EXTREMES = [0, -1, 1, 3, 7, 2**31, 2**32 + 1, 2**40, 10**6, 10**9, 10**12, 2**63, 2**64,
            1e308, 0.5, -0.0, "7", None, True, [], {}, [1, 2], "x" * 1000]
# Templates a hostile or broken chat_template may hold.
TEMPLATES = [
    "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
    "{% for a in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
    "{{ 'x' * 10000000000 }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% set ns = namespace(s='a') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "{% for m in messages %}{{ m.role + m.content }}{% endfor %}",
    "{{ messages[99].content }}",
    "{{ raise_exception('nope') }}",
    "{% for %}",
    "{{ undefined_thing() }}",
    "{% for i in range(1000000000) %}{% endfor %}",
    "{{ range(100000) | list | string * 1000 }}",
]


def limits(mem_gib):
    def apply():
        b = mem_gib << 30
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
    return apply


def classify(rc, out, err, timed_out, case_name=None):
    """How a run ended, and the number of lines of its error."""
    if timed_out:
        return "timeout"
    if "memory allocation of" in err or rc == -6:
        return "abort"
    if rc == 101:
        return "panic"
    if "panicked at" in err:  # caught by kiln (a third-party crate's) and reported
        return "contained"
    if rc < 0:
        return "signal"
    if case_name is not None:  # kiln check: the mutated case's own line decides
        for line in out.splitlines():
            parts = line.split()
            if len(parts) > 1 and parts[1] == case_name:
                return "clear error" if parts[0] == "FAIL" else "accepted"
        return "clear error" if rc == 1 else "accepted"
    if rc == 0:
        return "accepted"
    return "clear error" if rc == 1 and "error:" in err else "other"


# --- safetensors -----------------------------------------------------------------------

def st_read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_bytes(header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_one(name, dtype, shape, data):
    return st_bytes({name: {"dtype": dtype, "shape": shape, "data_offsets": [0, len(data)]}}, data)


def mutate_st_header(rng, header):
    """One JSON-level change of a safetensors header."""
    names = [k for k in header if k != "__metadata__"]
    t = header[rng.choice(names)]
    kind = rng.randrange(6)
    if kind == 0:
        t["dtype"] = rng.choice(["F32", "BF16", "F8_E4M3", "I64", "BOOL", "C64", "F4", "Q8", "", 7])
    elif kind == 1:
        t["shape"] = [rng.choice([0, 1, 2**20, 2**40, 2**62, 10**12]) for _ in range(rng.randrange(0, 5))]
    elif kind == 2:
        a, b = t["data_offsets"]
        t["data_offsets"] = rng.choice([[b, a], [0, b], [a, 2**62], [a, b + 8], [-1, b], [a, a]])
    elif kind == 3:
        other = header[rng.choice(names)]
        t["data_offsets"] = list(other["data_offsets"])
    elif kind == 4:
        del header[rng.choice(names)]
    else:
        t["shape"] = list(reversed(t["shape"])) + [1]
    return header


def mutate_st_bytes(rng, b):
    kind = rng.randrange(4)
    b = bytearray(b)
    if kind == 0:
        return bytes(b[: rng.randrange(len(b))])
    if kind == 1:
        for _ in range(rng.randrange(1, 8)):
            i = rng.randrange(min(len(b), 8 + struct.unpack("<Q", b[:8])[0] + 8))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 2:
        b[:8] = struct.pack("<Q", rng.choice([0, 1, 7, 2**40, 2**64 - 1, len(b), len(b) + 1]))
        return bytes(b)
    return bytes(b[:8]) + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))


# --- JSON ------------------------------------------------------------------------------

def paths(v, prefix=()):
    """Every (path, value) of a JSON tree."""
    yield prefix, v
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v[:50]):
            yield from paths(x, prefix + (i,))


def set_path(root, path, value, delete=False):
    cur = root
    for p in path[:-1]:
        cur = cur[p]
    if delete:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value


def mutate_json(rng, v, numeric_bias=0.7):
    """One change of a JSON tree: a (mostly numeric) value set to an extreme, or a key
    deleted, or a list emptied / doubled."""
    v = copy.deepcopy(v)
    all_paths = [p for p, _ in paths(v) if p]
    numeric = [p for p, x in paths(v) if p and isinstance(x, (int, float)) and not isinstance(x, bool)]
    path = rng.choice(numeric) if numeric and rng.random() < numeric_bias else rng.choice(all_paths)
    kind = rng.randrange(10)
    if kind == 0 and isinstance(path[-1], str):
        set_path(v, path, None, delete=True)
    elif kind == 1:
        cur = v
        for p in path:
            cur = cur[p]
        if isinstance(cur, list):
            set_path(v, path, rng.choice([[], cur * 2, cur[:1], [cur[0]] * 10**5 if cur else []]))
        else:
            set_path(v, path, rng.choice(EXTREMES))
    else:
        set_path(v, path, rng.choice(EXTREMES))
    return v


def mutate_text(rng, text):
    b = bytearray(text.encode())
    kind = rng.randrange(3)
    if kind == 0:
        return bytes(b[: rng.randrange(len(b))])
    if kind == 1:
        for _ in range(rng.randrange(1, 6)):
            b[rng.randrange(len(b))] = rng.choice(b'{}[]",:0123456789-e')
        return bytes(b)
    i = rng.randrange(len(b))
    return bytes(b[:i]) + b"9" * rng.randrange(1, 30) + bytes(b[i:])


# --- families --------------------------------------------------------------------------

def copy_model(dst, name):
    src = os.path.join(FIX, "models", name)
    os.makedirs(dst)
    for f in os.listdir(src):
        if f.startswith("golden"):
            continue
        if f == "model.safetensors":
            os.symlink(os.path.join(src, f), os.path.join(dst, f))
        else:
            shutil.copy(os.path.join(src, f), os.path.join(dst, f))


def generate_cmd(d):
    # The chat template, where the folder has one, is applied by default.
    return ["generate", "--model", d, "--prompt", "hello there", "--max-tokens", "3",
            "--device", "cpu", "--dtype", "f32"]


def case_config(rng, d):
    name = rng.choice(MODELS)
    copy_model(d, name)
    p = os.path.join(d, "config.json")
    text = open(p).read()
    if rng.random() < 0.85:
        open(p, "w").write(json.dumps(mutate_json(rng, json.loads(text))))
    else:
        open(p, "wb").write(mutate_text(rng, text))
    return generate_cmd(d), None


HOSTILE_POST = [
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<bogus>", "type_id": 0}},
                                              {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<bogus>": {"id": "<bogus>", "ids": [1, 2], "tokens": ["<bogus>"]}}},
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                              {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<s>": {"id": "<s>", "ids": [10**9], "tokens": ["<s>"]}}},
    {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                              {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {"<s>": {"id": "<s>", "ids": [], "tokens": []}}},
    {"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": False,
                                         "trim_offsets": True, "use_regex": True}] * 3},
    {"type": "RobertaProcessing", "sep": ["</s>", 10**9], "cls": ["<s>", 0],
     "trim_offsets": True, "add_prefix_space": True},
    {"type": "BertProcessing", "sep": ["[SEP]", 2**40], "cls": ["[CLS]", 1]},
]


def case_tokenizer(rng, d):
    name = rng.choice(MODELS)
    copy_model(d, name)
    p = os.path.join(d, "tokenizer.json")
    tok = json.load(open(p))
    r = rng.random()
    if r < 0.2:
        tok["post_processor"] = rng.choice(HOSTILE_POST)
    elif r < 0.3:
        tok[rng.choice(["padding", "truncation"])] = rng.choice([
            {"strategy": {"Fixed": rng.choice([10**12, 2**40, 10**6])}, "direction": "Right",
             "pad_to_multiple_of": None, "pad_id": 0, "pad_type_id": 0, "pad_token": "x"},
            {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 5},
            {"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": 2**40,
             "pad_id": 0, "pad_type_id": 0, "pad_token": "x"},
        ])
    elif r < 0.4:
        tok["added_tokens"].append({"id": rng.choice([2**32 - 1, 10**9, -1, 0]), "content": "hello",
                                    "single_word": False, "lstrip": False, "rstrip": False,
                                    "normalized": False, "special": True})
    elif r < 0.85:
        tok = mutate_json(rng, tok, numeric_bias=0.5)
    else:
        open(p, "wb").write(mutate_text(rng, json.dumps(tok)))
        return generate_cmd(d), None
    open(p, "w").write(json.dumps(tok))
    return generate_cmd(d), None


CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content.strip() + "
          "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def case_template(rng, d):
    copy_model(d, rng.choice(MODELS))
    r = rng.random()
    if r < 0.4:
        t = rng.choice(TEMPLATES)
    elif r < 0.7:
        pieces = ["{% for i in range(N) %}", "{% endfor %}", "{{ 'ab' * N }}", "{% if x %}", "{% endif %}",
                  "{{ messages[N] }}", "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "{{ m.content }}"]
        t = "".join(rng.choice(pieces).replace("N", str(rng.choice([1, 10, 1000, 100000, 10**9])))
                    for _ in range(rng.randrange(1, 8)))
    else:
        t = mutate_text(rng, CHATML).decode("utf-8", "replace")
    if rng.random() < 0.5:
        open(os.path.join(d, "chat_template.jinja"), "w").write(t)
    else:
        cfg = {"chat_template": t, "bos_token": rng.choice(["<s>", {"content": 5}, None, 7]),
               "eos_token": "<|im_end|>"}
        open(os.path.join(d, "tokenizer_config.json"), "w").write(json.dumps(cfg))
    return generate_cmd(d), None


def shard(d, name):
    """Writes `name`'s checkpoint as two shards and an index; returns the index."""
    header, data = st_read(os.path.join(FIX, "models", name, "model.safetensors"))
    names = sorted(k for k in header if k != "__metadata__")
    parts = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(parts):
        h, blob = {}, b""
        for n in part:
            a, b = header[n]["data_offsets"]
            h[n] = {"dtype": header[n]["dtype"], "shape": header[n]["shape"],
                    "data_offsets": [len(blob), len(blob) + b - a]}
            blob += data[a:b]
        fname = f"model-0000{i + 1}-of-00002.safetensors"
        open(os.path.join(d, fname), "wb").write(st_bytes(h, blob))
        weight_map.update({n: fname for n in part})
    return {"metadata": {"total_size": len(data)}, "weight_map": weight_map}


def case_index(rng, d):
    name = rng.choice(MODELS)
    copy_model(d, name)
    os.remove(os.path.join(d, "model.safetensors"))
    index = shard(d, name)
    r = rng.random()
    wm = index["weight_map"]
    keys = sorted(wm)
    if r < 0.5:
        k = rng.choice(keys)
        wm[k] = rng.choice(["missing.safetensors", "../../../../etc/passwd", "/dev/zero", "", ".",
                            "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors",
                            "config.json", 7, None, "/proc/self/mem"])
    elif r < 0.65:
        for k in rng.sample(keys, rng.randrange(1, len(keys))):
            del wm[k]
    elif r < 0.8:
        index = mutate_json(rng, index, numeric_bias=0.1)
    elif r < 0.9:
        shard_name = f"model-0000{rng.randrange(1, 3)}-of-00002.safetensors"
        p = os.path.join(d, shard_name)
        b = open(p, "rb").read()
        open(p, "wb").write(mutate_st_bytes(rng, b))
    else:
        open(os.path.join(d, "model.safetensors.index.json"), "wb").write(mutate_text(rng, json.dumps(index)))
        return generate_cmd(d), None
    open(os.path.join(d, "model.safetensors.index.json"), "w").write(json.dumps(index))
    return generate_cmd(d), None


def case_safetensors(rng, d):
    name = rng.choice(MODELS)
    copy_model(d, name)
    p = os.path.join(d, "model.safetensors")
    os.remove(p)
    header, data = st_read(os.path.join(FIX, "models", name, "model.safetensors"))
    if rng.random() < 0.6:
        out = st_bytes(mutate_st_header(rng, header), data)
    else:
        out = mutate_st_bytes(rng, st_bytes(header, data))
    open(p, "wb").write(out)
    return generate_cmd(d), None


def case_vae(rng, d):
    name = rng.choice(VAES)
    src = os.path.join(FIX, "vae", name)
    os.makedirs(d)
    gh, gdata = st_read(os.path.join(src, "golden.safetensors"))
    z = gh["z"]
    a, b = z["data_offsets"]
    latents = gdata[a:b]
    shape = z["shape"]
    r = rng.random()
    if r < 0.1:
        shape = [rng.choice([1, 2**20, 2**40, 0]) if rng.random() < 0.3 else s for s in shape]
    open(os.path.join(d, "z.safetensors"), "wb").write(st_one("z", "F32", shape, latents))
    cfg_text = open(os.path.join(src, "config.json")).read()
    weights = os.path.join(src, "diffusion_pytorch_model.safetensors")
    if 0.1 <= r < 0.2:
        header, data = st_read(weights)
        open(os.path.join(d, "diffusion_pytorch_model.safetensors"), "wb").write(
            st_bytes(mutate_st_header(rng, header), data))
    else:
        os.symlink(weights, os.path.join(d, "diffusion_pytorch_model.safetensors"))
    if r >= 0.2:
        cfg = json.loads(cfg_text)
        if rng.random() < 0.3:
            cfg[rng.choice(["base_dim", "decoder_base_dim", "z_dim", "num_res_blocks", "patch_size"])] = \
                rng.choice([10**9, 2**40, 0, -1, 3, 1, 2**63])
            cfg_text = json.dumps(cfg)
        elif rng.random() < 0.85:
            cfg_text = json.dumps(mutate_json(rng, cfg, numeric_bias=0.8))
        else:
            cfg_text = mutate_text(rng, cfg_text).decode("utf-8", "replace")
    open(os.path.join(d, "config.json"), "w").write(cfg_text)
    return ["vae", "decode", "--model", d, "--input", os.path.join(d, "z.safetensors"),
            "--output", os.path.join(d, "out.safetensors"), "--device", "cpu", "--dtype", "f32"], None


def case_ops(rng, d):
    os.makedirs(d)
    ops = json.load(open(os.path.join(FIX, "ops.json")))
    cases = ops["cases"]
    i = rng.randrange(len(cases))
    c = cases[i]
    r = rng.random()
    if r < 0.3:
        c["n_in"] = rng.choice([0, c["n_in"] - 1, max(c["n_in"] - 2, 0), c["n_in"] + 1, 10**6])
    elif r < 0.4:
        c["n_out"] = rng.choice([0, c["n_out"] - 1, c["n_out"] + 1, 10**6])
    else:
        c = mutate_json(rng, c, numeric_bias=0.8)
        c["case"] = cases[i]["case"]
    ops["cases"] = [c]
    open(os.path.join(d, "ops.json"), "w").write(json.dumps(ops))
    os.symlink(os.path.join(FIX, "ops.safetensors"), os.path.join(d, "ops.safetensors"))
    # `--only-ops`-free: no models/ or vae/ here, so their cases fail at once.
    return ["check", "--fixtures", d, "--device", "cpu"], c["case"]


FAMILIES = {
    "config": case_config,
    "tokenizer": case_tokenizer,
    "template": case_template,
    "index": case_index,
    "safetensors": case_safetensors,
    "vae": case_vae,
    "ops": case_ops,
}


def run_one(kiln, family, i, seed, tmp, timeout, mem_gib):
    rng = random.Random(f"{seed}-{family}-{i}")
    d = os.path.join(tmp, f"{family}-{i}")
    args, case_name = FAMILIES[family](rng, d)
    t0 = time.time()
    try:
        p = subprocess.run([kiln] + args, capture_output=True, text=True, errors="replace",
                           timeout=timeout, preexec_fn=limits(mem_gib),
                           env=dict(os.environ, KILN_FIXTURES=d, RUST_BACKTRACE="0"))
        rc, out, err, to = p.returncode, p.stdout, p.stderr, False
    except subprocess.TimeoutExpired as e:
        rc, out, err, to = None, (e.stdout or b"").decode(errors="replace"), (e.stderr or b"").decode(errors="replace"), True
    kind = classify(rc, out, err, to, case_name)
    err_lines = len([line for line in err.splitlines() if line.strip()])
    return family, i, kind, time.time() - t0, err_lines, args, (err or out)[-400:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True, help="the kiln binary")
    ap.add_argument("--count", type=int, default=200, help="mutations per family")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--seed", default="1")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--mem-gib", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write the per-run outcomes here")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kiln-tour-")
    families = a.families.split(",")
    jobs = [(f, i) for f in families for i in range(a.count)]
    results = []
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(run_one, a.kiln, f, i, a.seed, tmp, a.timeout, a.mem_gib) for f, i in jobs]
        for fut in cf.as_completed(futs):
            results.append(fut.result())
    kinds = ["clear error", "accepted", "contained", "panic", "abort", "signal", "timeout", "other"]
    print(f"{'family':<12}" + "".join(f"{k:>13}" for k in kinds) + f"{'max s':>8}{'max err lines':>15}")
    bad = []
    for f in families:
        rs = [r for r in results if r[0] == f]
        counts = [sum(1 for r in rs if r[2] == k) for k in kinds]
        print(f"{f:<12}" + "".join(f"{c:>13}" for c in counts)
              + f"{max(r[3] for r in rs):>8.1f}{max(r[4] for r in rs):>15}")
        bad += [r for r in rs if r[2] in ("panic", "abort", "signal", "timeout", "other")]
    for f, i, kind, secs, _, args, tail in sorted(bad):
        print(f"\n{kind}: {f}-{i} ({secs:.1f} s): kiln {' '.join(args)}\n  {tail.strip()[-300:]}")
    if a.json:
        json.dump([{"family": r[0], "case": r[1], "outcome": r[2], "seconds": round(r[3], 2),
                    "error_lines": r[4], "args": r[5]} for r in results], open(a.json, "w"), indent=1)
    if not bad:
        shutil.rmtree(tmp)
    else:
        print(f"\nfolders kept in {tmp}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
