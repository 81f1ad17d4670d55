"""PyTorch peer of `kiln bench --suite decode` (run by `torch_peer.py --suite decode`): the same
model shapes as kiln's presets (`bench/presets/*.json`, passed as config.json dicts) with
seeded random bf16 weights, decoded one greedy token at a time by the strong PyTorch recipe.

The step is written by hand: embedding, every layer, final norm, LM head, argmax. Attention
keeps a static KV cache of the positions the run decodes (context + steps, rounded up to 64:
kiln decodes from the context on), written by `index_copy_` at a position
held in a device tensor; RoPE tables are indexed by that tensor and an additive mask hides
the unwritten slots, so nothing in the step depends on a host value. Experts run through
`torch._grouped_mm` with group ends from a device-side `scatter_add_` + `cumsum`. LFM2's
gated short convolution and Qwen3.5's Gated DeltaNet keep their conv / recurrent state in
static buffers and follow transformers' modeling code (`causal_conv1d_update`,
`torch_recurrent_gated_delta_rule`, `torch_chunk_gated_delta_rule`). As in gpt-fast and
vLLM, the projections that read the same input are concatenated into one weight (q/k/v;
gate/up; a DeltaNet layer's qkv/z/b/a; the shared expert's gate/up with its sigmoid gate).
The step advances its own token and position buffers, so a replay needs no host input.

Modes, each timed as kiln times its steps (per step: run, then read the 8-byte token, which
syncs; tokens/s = steps / wall time, after `warmup` untimed steps):
  eager     the step as plain PyTorch calls (at most 16 timed steps: it is slow);
  graph     the step captured once in one CUDA graph and replayed;
  compiled  `torch.compile(step, fullgraph=True, dynamic=False)`, then the same capture
            (the gpt-fast recipe; `compile_s` is the compile and capture time).
Then a prompt pass per length in `prompts`: one forward over that many tokens from an empty
cache, attention by `F.scaled_dot_product_attention(is_causal=True)`, eager, the median of
3 after one unmeasured pass, read back as kiln's is.

Input (spec, JSON on stdin; written by crates/kiln-bench/src/decode.rs):
  {"presets": [{"name": "...", "config": {config.json}}], "contexts": [512, 4096],
   "steps": 128, "warmup": 3, "prompts": [512, 4096], "device": "cuda" (default)}
`TORCH_DECODE_MODES` (comma-separated `mode` or `mode@context`) limits the modes, and
`TORCH_DECODE_BUDGET_S` stops starting compiled runs after that many seconds (see `run`).
Output: peer_results([{"preset", "decode": [{"mode", "context", "tokens_per_s",
  "median_ms_per_token", "steps", "compile_s"?}], "prompt": [{"tokens", "median_ms",
  "tokens_per_s", "mode"}], "errors": {what: message}, "skipped": [why]}]).
"""

import math
import os
import signal
import time

import torch
import torch.nn.functional as F

MODES = ("eager", "graph", "compiled")
EAGER_STEPS = 16


class Shape:
    """The sizes of a config.json (a multimodal qwen3_5_moe: its text_config) with
    transformers' defaults, as kiln's config parser reads them."""

    def __init__(self, c):
        if c.get("model_type") == "qwen3_5_moe":
            c = dict(c["text_config"], model_type="qwen3_5_moe_text")
        kind = c["model_type"]
        if kind not in ("llama", "qwen3", "qwen3_moe", "lfm2_moe", "qwen3_5_moe_text"):
            raise ValueError(f"model_type {kind!r} has no PyTorch step here")
        self.kind, self.lfm2, self.qwen35 = kind, kind == "lfm2_moe", kind == "qwen3_5_moe_text"
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads", self.heads)
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.vocab = c["vocab_size"]
        self.eps = c.get("rms_norm_eps", c.get("norm_eps"))
        rope = c.get("rope_parameters") or c.get("rope_scaling") or {}
        self.rope_theta = rope.get("rope_theta", c.get("rope_theta"))
        self.rope = rope if rope.get("rope_type", rope.get("type")) == "llama3" else None
        partial = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
        self.rot_dim = int(self.head_dim * partial)
        self.tie = c.get("tie_embedding", c.get("tie_word_embeddings", self.lfm2))
        self.qk_norm = kind != "llama"
        self.intermediate = c.get("intermediate_size", 0)
        self.experts = c.get("num_experts", c.get("num_local_experts", 0)) if kind != "llama" and kind != "qwen3" else 0
        self.top_k = c.get("num_experts_per_tok", 0)
        self.expert_inter = c.get("moe_intermediate_size", 0)
        self.norm_topk = self.qwen35 or c.get("norm_topk_prob", self.lfm2)
        self.expert_bias = self.lfm2 and c.get("use_expert_bias", True)
        self.routed_scale = c.get("routed_scaling_factor", 1.0) if self.lfm2 else 1.0
        dense = set(range(c.get("num_dense_layers", 2))) if self.lfm2 else set(c.get("mlp_only_layers", []))
        step = 1 if self.lfm2 else c.get("decoder_sparse_step", 1)
        self.moe_layers = [
            self.experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(self.layers)
        ]
        self.shared = c.get("shared_expert_intermediate_size") if self.qwen35 else None
        types = c.get("layer_types") or ["full_attention"] * self.layers
        other = "conv" if self.lfm2 else "linear_attention" if self.qwen35 else None
        self.mixers = [t if t == other else "attention" for t in types]
        self.conv_kernel = c.get("conv_L_cache", 3)
        self.conv_bias = c.get("conv_bias", False)
        if self.conv_bias:
            raise ValueError("conv_bias = true is not implemented here")
        if self.qwen35:
            self.kh, self.vh = c["linear_num_key_heads"], c["linear_num_value_heads"]
            self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
            self.gdn_kernel = c["linear_conv_kernel_dim"]
            self.conv_channels = 2 * self.kh * self.dk + self.vh * self.dv


def param_shapes(s):
    """Name -> shape of every parameter of the step's (fused) layout."""
    h, d = s.hidden, s.head_dim
    q_rows = s.heads * d * (2 if s.qwen35 else 1)
    p = {"embed": (s.vocab, h), "final_norm": (h,)}
    if not s.tie:
        p["lm_head"] = (s.vocab, h)
    for i in range(s.layers):
        L = f"{i}."
        p[L + "in_norm"], p[L + "post_norm"] = (h,), (h,)
        mixer = s.mixers[i]
        if mixer == "attention":
            p[L + "qkv"] = (q_rows + 2 * s.kv_heads * d, h)
            p[L + "o"] = (h, s.heads * d)
            if s.qk_norm:
                p[L + "q_norm"], p[L + "k_norm"] = (d,), (d,)
        elif mixer == "conv":
            p[L + "conv_in"], p[L + "conv_w"], p[L + "conv_out"] = (3 * h, h), (h, s.conv_kernel), (h, h)
        else:
            values = s.vh * s.dv
            p[L + "gdn_in"] = (s.conv_channels + values + 2 * s.vh, h)
            p[L + "conv_w"] = (s.conv_channels, s.gdn_kernel)
            p[L + "dt_bias"], p[L + "A_log"], p[L + "gdn_norm"] = (s.vh,), (s.vh,), (s.dv,)
            p[L + "gdn_out"] = (h, values)
        if s.moe_layers[i]:
            e, inter = s.experts, s.expert_inter
            p[L + "router"] = (e, h)
            if s.expert_bias:
                p[L + "expert_bias"] = (e,)
            p[L + "e_gu"], p[L + "e_down"] = (e, 2 * inter, h), (e, h, inter)
            if s.shared:
                p[L + "s_gu"], p[L + "s_down"] = (2 * s.shared + 1, h), (h, s.shared)
        else:
            p[L + "gu"], p[L + "down"] = (2 * s.intermediate, h), (h, s.intermediate)
    return p


def random_params(s, device, dtype=torch.bfloat16, seed=0):
    """Seeded random weights, scaled so that activations stay finite through every layer."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name, shape in param_shapes(s).items():
        leaf = name.split(".")[-1]
        if leaf.endswith("norm"):
            # Qwen3.5 scales by 1 + weight (zero-initialised); the others by weight (ones).
            zero_centred = s.qwen35 and leaf != "gdn_norm"
            out[name] = torch.full(shape, 0.0 if zero_centred else 1.0, device=device, dtype=dtype)
        elif leaf == "A_log":
            out[name] = torch.empty(shape, device=device).uniform_(0.01, 16, generator=gen).log().to(dtype)
        elif leaf in ("dt_bias", "expert_bias"):
            out[name] = torch.ones(shape, device=device, dtype=torch.float32 if leaf == "expert_bias" else dtype)
        else:
            fan_in = shape[-1]
            w = torch.randn(shape, device=device, dtype=dtype, generator=gen)
            out[name] = w.mul_(1.0 / math.sqrt(fan_in))
    return out


def params_from_state_dict(s, sd):
    """The step's fused layout from a transformers model's state_dict (names as transformers 5
    writes them), for checking the step against transformers."""
    pre = "model.language_model." if "model.language_model.embed_tokens.weight" in sd else "model."
    out = {"embed": sd[pre + "embed_tokens.weight"]}
    out["final_norm"] = sd[pre + ("embedding_norm.weight" if s.lfm2 else "norm.weight")]
    if not s.tie:
        out["lm_head"] = sd["lm_head.weight"]
    for i in range(s.layers):
        L, P = f"{i}.", f"{pre}layers.{i}."
        out[L + "in_norm"] = sd[P + ("operator_norm.weight" if s.lfm2 else "input_layernorm.weight")]
        out[L + "post_norm"] = sd[P + ("ffn_norm.weight" if s.lfm2 else "post_attention_layernorm.weight")]
        mixer = s.mixers[i]
        if mixer == "attention":
            a = P + "self_attn."
            out[L + "qkv"] = torch.cat([sd[a + f"{x}_proj.weight"] for x in "qkv"])
            out[L + "o"] = sd[a + ("out_proj.weight" if s.lfm2 else "o_proj.weight")]
            if s.qk_norm:
                n = ("q_layernorm", "k_layernorm") if s.lfm2 else ("q_norm", "k_norm")
                out[L + "q_norm"], out[L + "k_norm"] = sd[a + n[0] + ".weight"], sd[a + n[1] + ".weight"]
        elif mixer == "conv":
            c = P + "conv."
            out[L + "conv_in"], out[L + "conv_out"] = sd[c + "in_proj.weight"], sd[c + "out_proj.weight"]
            out[L + "conv_w"] = sd[c + "conv.weight"][:, 0, :]
        else:
            g = P + "linear_attn."
            out[L + "gdn_in"] = torch.cat([sd[g + f"in_proj_{x}.weight"] for x in ("qkv", "z", "b", "a")])
            out[L + "conv_w"] = sd[g + "conv1d.weight"][:, 0, :]
            out[L + "dt_bias"], out[L + "A_log"] = sd[g + "dt_bias"], sd[g + "A_log"]
            out[L + "gdn_norm"], out[L + "gdn_out"] = sd[g + "norm.weight"], sd[g + "out_proj.weight"]
        m = P + ("feed_forward." if s.lfm2 else "mlp.")
        if s.moe_layers[i]:
            out[L + "router"] = sd[m + "gate.weight"]
            if s.expert_bias:
                out[L + "expert_bias"] = sd[m + "expert_bias"].float()
            out[L + "e_gu"], out[L + "e_down"] = sd[m + "experts.gate_up_proj"], sd[m + "experts.down_proj"]
            if s.shared:
                se = m + "shared_expert."
                out[L + "s_gu"] = torch.cat(
                    [sd[se + "gate_proj.weight"], sd[se + "up_proj.weight"], sd[m + "shared_expert_gate.weight"]]
                )
                out[L + "s_down"] = sd[se + "down_proj.weight"]
        else:
            names = ("w1", "w3", "w2") if s.lfm2 else ("gate_proj", "up_proj", "down_proj")
            out[L + "gu"] = torch.cat([sd[m + names[0] + ".weight"], sd[m + names[1] + ".weight"]])
            out[L + "down"] = sd[m + names[2] + ".weight"]
    return out


def inv_freq(s):
    """Rotary frequencies, with Llama 3.1's scaling of the low and middle ones."""
    f = 1.0 / (s.rope_theta ** (torch.arange(0, s.rot_dim, 2, dtype=torch.float32) / s.rot_dim))
    r = s.rope
    if r is None:
        return f
    low = r["original_max_position_embeddings"] / r["low_freq_factor"]
    high = r["original_max_position_embeddings"] / r["high_freq_factor"]
    wavelen = 2 * math.pi / f
    scaled = torch.where(wavelen > low, f / r["factor"], f)
    smooth = (r["original_max_position_embeddings"] / wavelen - r["low_freq_factor"]) / (
        r["high_freq_factor"] - r["low_freq_factor"]
    )
    mid = (1 - smooth) * scaled / r["factor"] + smooth * scaled
    return torch.where((wavelen >= high) & (wavelen <= low), mid, scaled)


def rms_norm(x, w, s, eps=None):
    """RMSNorm as the family writes it: Qwen3.5 (x·(1+w)) in f32, the others w·x after the
    cast back."""
    eps = s.eps if eps is None else eps
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if s.qwen35:
        return (xf * (1.0 + w.float())).to(x.dtype)
    return w * xf.to(x.dtype)


def rope(x, cos, sin, rot):
    """x [..., T, D] turned by cos / sin [T, rot] on its leading `rot` dims."""
    xr, xp = x[..., :rot], x[..., rot:]
    half = rot // 2
    turned = torch.cat((-xr[..., half:], xr[..., :half]), dim=-1)
    return torch.cat((xr * cos + turned * sin, xp), dim=-1)


class Model:
    """The weights, the static state (KV cache, conv and recurrent state, token, position)
    and the two passes: `step` (one token, graph-safe) and `prompt` (T tokens from empty)."""

    def __init__(self, shape, params, capacity, device, dtype=torch.bfloat16):
        s = self.s = shape
        self.p, self.dtype, self.capacity = params, dtype, capacity
        freqs = torch.outer(torch.arange(capacity, dtype=torch.float32), inv_freq(s))
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().to(device, dtype), emb.sin().to(device, dtype)
        self.positions = torch.arange(capacity, device=device)
        self.k_cache, self.v_cache, self.conv_state, self.rec_state = {}, {}, {}, {}
        for i, mixer in enumerate(s.mixers):
            if mixer == "attention":
                shape_kv = (s.kv_heads, capacity, s.head_dim)
                self.k_cache[i] = torch.zeros(shape_kv, device=device, dtype=dtype)
                self.v_cache[i] = torch.zeros(shape_kv, device=device, dtype=dtype)
            elif mixer == "conv":
                self.conv_state[i] = torch.zeros(s.hidden, s.conv_kernel - 1, device=device, dtype=dtype)
            else:
                self.conv_state[i] = torch.zeros(s.conv_channels, s.gdn_kernel - 1, device=device, dtype=dtype)
                self.rec_state[i] = torch.zeros(s.vh, s.dk, s.dv, device=device, dtype=torch.float32)
        self.token = torch.ones(1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)

    # --- one token ---------------------------------------------------------------------

    def step(self):
        """Forward of `self.token` at `self.pos`, greedy next token; advances both buffers."""
        s, p = self.s, self.p
        x = p["embed"][self.token]  # [1, H]
        mask = torch.where(self.positions <= self.pos, 0.0, float("-inf")).to(self.dtype)[None]
        cos, sin = self.cos[self.pos], self.sin[self.pos]  # [1, rot]
        for i, mixer in enumerate(s.mixers):
            L = f"{i}."
            h = rms_norm(x, p[L + "in_norm"], s)
            if mixer == "attention":
                h = self.attend_one(i, h, cos, sin, mask)
            elif mixer == "conv":
                h = self.short_conv_one(i, h)
            else:
                h = self.delta_net_one(i, h)
            x = x + h
            x = x + self.ffn(i, rms_norm(x, p[L + "post_norm"], s))
        logits = self.lm_head(rms_norm(x, p["final_norm"], s))
        nxt = logits.argmax(dim=-1)
        self.token.copy_(nxt)
        self.pos.add_(1)
        return nxt

    def split_qkv(self, i, h):
        """q [.., heads, T, D] (normed, with Qwen3.5's output gate [.., T, heads·D]), k, v."""
        s, p, L = self.s, self.p, f"{i}."
        d, t = s.head_dim, h.shape[0]
        q_rows = s.heads * d * (2 if s.qwen35 else 1)
        q, k, v = (h @ p[L + "qkv"].t()).split([q_rows, s.kv_heads * d, s.kv_heads * d], dim=-1)
        gate = None
        if s.qwen35:
            q, gate = q.view(t, s.heads, 2 * d).chunk(2, dim=-1)
            gate = gate.reshape(t, s.heads * d)
        q, k, v = q.reshape(t, s.heads, d), k.view(t, s.kv_heads, d), v.view(t, s.kv_heads, d)
        if s.qk_norm:
            q, k = rms_norm(q, p[L + "q_norm"], s), rms_norm(k, p[L + "k_norm"], s)
        return q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), gate

    def attend_one(self, i, h, cos, sin, mask):
        s, p = self.s, self.p
        q, k, v, gate = self.split_qkv(i, h)  # q [heads, 1, D], k / v [kv_heads, 1, D]
        q, k = rope(q, cos, sin, s.rot_dim), rope(k, cos, sin, s.rot_dim)
        self.k_cache[i].index_copy_(1, self.pos, k)
        self.v_cache[i].index_copy_(1, self.pos, v)
        # The query heads of one KV head are rows of one query: no copy of the cache.
        group = s.heads // s.kv_heads
        qg = q.reshape(1, s.kv_heads, group, s.head_dim)
        o = F.scaled_dot_product_attention(qg, self.k_cache[i][None], self.v_cache[i][None], attn_mask=mask)
        o = o.reshape(1, s.heads * s.head_dim)
        if gate is not None:
            o = o * torch.sigmoid(gate)
        return o @ p[f"{i}.o"].t()

    def short_conv_one(self, i, h):
        """LFM2's gated short convolution of one token (causal_conv1d_update)."""
        p, L = self.p, f"{i}."
        b, c, x = (h @ p[L + "conv_in"].t()).chunk(3, dim=-1)  # [1, H] each
        window = torch.cat((self.conv_state[i], (b * x).t()), dim=-1)  # [H, kernel]
        self.conv_state[i].copy_(window[:, 1:])
        y = c * (window * p[L + "conv_w"]).sum(-1)[None]
        return y @ p[L + "conv_out"].t()

    def delta_gates(self, i, proj):
        """The DeltaNet inputs of `proj` [T, ...]: mixed qkv, z, beta, g (log decay)."""
        s, p, L = self.s, self.p, f"{i}."
        values = s.vh * s.dv
        mixed, z, b, a = proj.split([s.conv_channels, values, s.vh, s.vh], dim=-1)
        beta = b.sigmoid()
        g = -p[L + "A_log"].float().exp() * F.softplus(a.float() + p[L + "dt_bias"])
        return mixed, z, beta, g

    def split_heads(self, mixed):
        """q, k [T, vh, dk] (repeated to the value heads) and v [T, vh, dv]."""
        s, t = self.s, mixed.shape[0]
        q, k, v = mixed.split([s.kh * s.dk, s.kh * s.dk, s.vh * s.dv], dim=-1)
        q, k = q.reshape(t, s.kh, s.dk), k.reshape(t, s.kh, s.dk)
        if s.vh != s.kh:
            q, k = q.repeat_interleave(s.vh // s.kh, dim=1), k.repeat_interleave(s.vh // s.kh, dim=1)
        return q, k, v.reshape(t, s.vh, s.dv)

    def delta_out(self, i, o, z):
        """Gated RMSNorm of the DeltaNet output o [T, vh, dv] by z, then out_proj."""
        s, p, L = self.s, self.p, f"{i}."
        t = o.shape[0]
        of = o.float()
        of = of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + s.eps)
        o = p[L + "gdn_norm"] * of.to(self.dtype)
        o = (o * F.silu(z.reshape(t, s.vh, s.dv).float())).to(self.dtype)
        return o.reshape(t, s.vh * s.dv) @ p[L + "gdn_out"].t()

    def delta_net_one(self, i, h):
        """Qwen3.5's Gated DeltaNet on one token (torch_recurrent_gated_delta_rule)."""
        s, p, L = self.s, self.p, f"{i}."
        mixed, z, beta, g = self.delta_gates(i, h @ p[L + "gdn_in"].t())
        window = torch.cat((self.conv_state[i], mixed.t()), dim=-1)  # [channels, kernel]
        self.conv_state[i].copy_(window[:, 1:])
        mixed = F.silu((window * p[L + "conv_w"]).sum(-1))[None].to(self.dtype)
        q, k, v = (x[0].float() for x in self.split_heads(mixed))  # [vh, d]
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(s.dk)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
        state = self.rec_state[i] * g[0].exp()[:, None, None]
        kv_mem = (state * k[:, :, None]).sum(dim=-2)
        delta = (v - kv_mem) * beta[0, :, None].float()
        state = state + k[:, :, None] * delta[:, None, :]
        self.rec_state[i].copy_(state)
        o = (state * q[:, :, None]).sum(dim=-2).to(self.dtype)  # [vh, dv]
        return self.delta_out(i, o[None], z)

    def ffn(self, i, h):
        p, L = self.p, f"{i}."
        if not self.s.moe_layers[i]:
            g, u = (h @ p[L + "gu"].t()).chunk(2, dim=-1)
            return (F.silu(g) * u) @ p[L + "down"].t()
        return self.experts(i, h)

    def experts(self, i, h):
        """Router, then the chosen experts by torch._grouped_mm over rows sorted by expert,
        group ends by scatter_add_ + cumsum on the device; Qwen3.5's shared expert beside."""
        s, p, L = self.s, self.p, f"{i}."
        t = h.shape[0]
        logits = h @ p[L + "router"].t()
        if s.lfm2:
            scores = logits.sigmoid()
            choose = scores + p[L + "expert_bias"] if s.expert_bias else scores
            idx = choose.topk(s.top_k, dim=-1).indices
            w = scores.gather(1, idx).type_as(logits)
            if s.norm_topk:
                w = w / (w.sum(-1, keepdim=True) + 1e-6)
            w = w * s.routed_scale
        else:
            probs = F.softmax(logits, dim=-1, dtype=torch.float)
            w, idx = probs.topk(s.top_k, dim=-1)
            if s.norm_topk:
                w = w / w.sum(-1, keepdim=True)
            w = w.to(logits.dtype)
        flat = idx.flatten()
        order = flat.argsort(stable=True)
        rows = order // s.top_k
        counts = torch.zeros(s.experts, dtype=torch.int32, device=h.device)
        counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
        ends = counts.cumsum(0, dtype=torch.int32)
        gu = torch._grouped_mm(h[rows], p[L + "e_gu"].transpose(1, 2), offs=ends)
        g, u = gu.chunk(2, dim=-1)
        out = torch._grouped_mm(F.silu(g) * u, p[L + "e_down"].transpose(1, 2), offs=ends)
        out = out * w.flatten()[order, None]
        y = torch.zeros_like(h).index_add_(0, rows, out)
        if s.shared:
            gu = h @ p[L + "s_gu"].t()
            g, u, gate = gu.split([s.shared, s.shared, 1], dim=-1)
            y = y + torch.sigmoid(gate) * ((F.silu(g) * u) @ p[L + "s_down"].t())
        return y

    def lm_head(self, x):
        return x @ self.p["embed" if self.s.tie else "lm_head"].t()

    # --- a prompt ----------------------------------------------------------------------

    def prompt(self, tokens):
        """Forward of `tokens` [T] from an empty cache and state; logits of the last one.
        Leaves the caches and states as decoding them goes on from position T."""
        s, p = self.s, self.p
        t = tokens.shape[0]
        x = p["embed"][tokens]  # [T, H]
        cos, sin = self.cos[:t], self.sin[:t]
        for i, mixer in enumerate(s.mixers):
            L = f"{i}."
            h = rms_norm(x, p[L + "in_norm"], s)
            if mixer == "attention":
                q, k, v, gate = self.split_qkv(i, h)
                q, k = rope(q, cos, sin, s.rot_dim), rope(k, cos, sin, s.rot_dim)
                self.k_cache[i][:, :t] = k
                self.v_cache[i][:, :t] = v
                o = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, enable_gqa=True)
                o = o[0].transpose(0, 1).reshape(t, s.heads * s.head_dim)
                if gate is not None:
                    o = o * torch.sigmoid(gate)
                h = o @ p[L + "o"].t()
            elif mixer == "conv":
                b, c, xx = (h @ p[L + "conv_in"].t()).chunk(3, dim=-1)
                h = c * self.causal_conv(i, (b * xx).t()).t()
                h = h @ p[L + "conv_out"].t()
            else:
                mixed, z, beta, g = self.delta_gates(i, h @ p[L + "gdn_in"].t())
                mixed = F.silu(self.causal_conv(i, mixed.t())).t()
                q, k, v = self.split_heads(mixed)
                o, self.rec_state[i][:] = chunk_gated_delta_rule(q, k, v, g, beta)
                h = self.delta_out(i, o.to(self.dtype), z)
            x = x + h
            x = x + self.ffn(i, rms_norm(x, p[L + "post_norm"], s))
        self.pos.fill_(t)
        return self.lm_head(rms_norm(x[-1:], p["final_norm"], s))

    def causal_conv(self, i, x):
        """Depthwise causal conv of x [channels, T] (causal_conv1d_fn); keeps the last
        kernel - 1 inputs as the state."""
        w = self.p[f"{i}.conv_w"]
        k = w.shape[1]
        padded = F.pad(x, (k - 1, 0))
        self.conv_state[i].copy_(padded[:, padded.shape[1] - (k - 1) :])
        return F.conv1d(padded[None], w[:, None, :], groups=w.shape[0])[0]


def chunk_gated_delta_rule(q, k, v, g, beta, chunk=64):
    """transformers' torch_chunk_gated_delta_rule for one sequence: q, k [T, H, dk] (already
    repeated to the value heads), v [T, H, dv], g and beta [T, H]; returns the output
    [T, H, dv] (f32) and the final recurrent state [H, dk, dv]."""
    t, heads, dk = k.shape
    q, k, v, beta, g = (x.transpose(0, 1).float().contiguous() for x in (q, k, v, beta, g))
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(dk)
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    pad = (chunk - t % chunk) % chunk
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    n = (t + pad) // chunk
    v_beta, k_beta = v * beta[..., None], k * beta[..., None]
    q, k, k_beta, v_beta = (x.reshape(heads, n, chunk, x.shape[-1]) for x in (q, k, k_beta, v_beta))
    cum = g.reshape(heads, n, chunk).cumsum(-1)
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(upper, float("-inf")).exp()
    ut = (k_beta @ k.transpose(-1, -2)) * decay
    intra = (q @ k.transpose(-1, -2)) * decay
    new_values = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
    k_cum = torch.linalg.solve_triangular(ut, k_beta * cum.exp()[..., None], upper=False, unitriangular=True)
    state = torch.zeros(heads, dk, v.shape[-1], dtype=torch.float32, device=q.device)
    out = torch.zeros_like(new_values)
    q = q * cum.exp()[..., None]
    k = k * (cum[..., -1:] - cum).exp()[..., None]
    chunk_decay = cum[..., -1].exp()[..., None, None]
    for c in range(n):
        v_new = new_values[:, c] - k_cum[:, c] @ state
        out[:, c] = q[:, c] @ state + intra[:, c] @ v_new
        state = state * chunk_decay[:, c] + k[:, c].transpose(-1, -2) @ v_new
    return out.reshape(heads, -1, v.shape[-1])[:, :t].transpose(0, 1), state


# --- timing ----------------------------------------------------------------------------


def timed_steps(fn, token, steps, warmup):
    """Runs fn (one step) warmup + steps times, reading the token after each as kiln does."""
    for _ in range(warmup):
        fn()
        token.item()
    ms = []
    t0 = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        token.item()
        ms.append((time.perf_counter() - t) * 1e3)
    secs = time.perf_counter() - t0
    ms.sort()
    return {"tokens_per_s": steps / secs, "median_ms_per_token": ms[len(ms) // 2], "steps": steps}


def capture(fn):
    """fn captured once in a CUDA graph (after warm-up on a side stream); returns replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def decode_mode(model, mode, context, steps, warmup):
    """tokens/s of `mode` with the cache filled to `context` - warmup - 1."""
    start = max(context - warmup - 1, 0)
    model.pos.fill_(start)
    t0 = time.perf_counter()
    if mode == "eager":
        fn, steps = model.step, min(steps, EAGER_STEPS)
    elif mode == "graph":
        fn = capture(model.step)
    else:
        fn = capture(torch.compile(model.step, fullgraph=True, dynamic=False))
    setup_s = time.perf_counter() - t0
    # Capture ran the step; start again from the same position.
    model.pos.fill_(start)
    r = timed_steps(fn, model.token, steps, warmup)
    r.update(mode=mode, context=context)
    if mode == "compiled":
        r["compile_s"] = setup_s
    return r


def prompt_pass(model, length):
    """Median ms of a forward over `length` tokens from an empty cache (3 after 1)."""
    tokens = torch.arange(length, device=model.token.device) % model.s.vocab
    ms = []
    for i in range(4):
        model.token.item()  # the device is idle
        t = time.perf_counter()
        model.prompt(tokens).argmax(-1).item()
        if i:
            ms.append((time.perf_counter() - t) * 1e3)
    ms.sort()
    med = ms[len(ms) // 2]
    return {"tokens": length, "median_ms": med, "tokens_per_s": length / med * 1e3, "mode": "eager"}


def guarded(out, what, fn):
    """fn(), or its error under out["errors"][what]: one failure must not hide the rest."""
    try:
        return fn()
    except Exception as e:
        out["errors"][what] = f"{type(e).__name__}: {e}"[:500]
        return None


def run_modes(preset, out, jobs, steps, warmup, prompts, device, late):
    """The (mode, context) jobs and prompt passes of one preset, its weights built once;
    those not started before `late()` is true are listed under `skipped`."""
    shape = Shape(preset["config"])
    params = random_params(shape, device)
    with torch.inference_mode():
        for mode, context in jobs:
            if late():
                out["skipped"].append(f"{mode}@{context}")
                continue
            model = Model(shape, params, -(-(context + steps) // 64) * 64, device)
            r = guarded(out, f"{mode}@{context}", lambda: decode_mode(model, mode, context, steps, warmup))
            if r:
                out["decode"].append(r)
            del model
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        for length in prompts:
            if late():
                out["skipped"].append(f"prompt@{length}")
                continue
            model = Model(shape, params, length, device)
            r = guarded(out, f"prompt@{length}", lambda: prompt_pass(model, length))
            if r:
                out["prompt"].append(r)
            del model
    del params
    torch.cuda.empty_cache()


def parse_modes(text, contexts):
    """`TORCH_DECODE_MODES`: `mode` (every context) or `mode@context`, comma-separated."""
    jobs = []
    for item in filter(None, text.split(",")):
        mode, _, at = item.partition("@")
        if mode not in MODES or (at and int(at) not in contexts):
            raise ValueError(f"TORCH_DECODE_MODES: {item!r} is not MODE or MODE@CONTEXT ({', '.join(MODES)}; {contexts})")
        jobs += [(mode, c) for c in contexts if not at or int(at) == c]
    return jobs


class OutOfTime(Exception):
    """`TORCH_DECODE_BUDGET_S` ran out during a measurement."""


def on_alarm(signum, frame):
    raise OutOfTime("the time budget ran out")


def run(spec):
    """The cheap modes and prompt passes of every preset first, then the compiled mode,
    context by context (the smallest first) and preset by preset. With
    `TORCH_DECODE_BUDGET_S`, a measurement still running that many seconds after the start
    is stopped (listed under `errors`) and the ones not started are listed under `skipped`,
    so that the peer ends in time with what it measured."""
    from torch_timing import peer_results

    contexts, steps, warmup = spec.get("contexts", [512, 4096]), spec.get("steps", 128), spec.get("warmup", 3)
    jobs = parse_modes(os.environ.get("TORCH_DECODE_MODES", ",".join(MODES)), contexts)
    budget = float(os.environ.get("TORCH_DECODE_BUDGET_S", "inf"))
    if budget != float("inf"):
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(max(1, int(budget)))
    device = spec.get("device", "cuda")  # "cpu" checks the flow where there is no GPU
    t0 = time.perf_counter()
    results = [{"preset": p["name"], "decode": [], "prompt": [], "errors": {}, "skipped": []} for p in spec["presets"]]
    cheap = [j for j in jobs if j[0] != "compiled"]
    plan = [(p, out, cheap, spec.get("prompts", [512, 4096])) for p, out in zip(spec["presets"], results)]
    for context in sorted(contexts):
        if ("compiled", context) in jobs:
            plan += [(p, out, [("compiled", context)], ()) for p, out in zip(spec["presets"], results)]
    def late():
        return time.perf_counter() - t0 > budget

    for p, out, todo, prompts in plan:
        if late():
            out["skipped"] += [f"{m}@{c}" for m, c in todo] + [f"prompt@{n}" for n in prompts]
            continue
        guarded(out, "preset", lambda: run_modes(p, out, todo, steps, warmup, prompts, device, late))
    signal.alarm(0)
    return peer_results(results)
