"""A hand-written port of the llama fixture, the way a porter writes one: array code over `xp` (numpy or
jax.numpy), its own [batch, pos, heads, d_head] layout, and a tracer.dump.Recorder call at each step.

`rope="interleaved"` is the classic porting bug: rotating pairs (x0, x1), (x2, x3), ... as ggml and the
original Meta code do, where transformers' checkpoint expects rotate_half's (x0, x_{d/2}), ... pairs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file


def llama3_inv_freq(xp, d_head: int, rope: dict):
    inv = 1.0 / (rope["rope_theta"] ** (xp.arange(0, d_head, 2, dtype=xp.float32) / d_head))
    old, factor = rope["original_max_position_embeddings"], rope["factor"]
    low, high = rope["low_freq_factor"], rope["high_freq_factor"]
    wavelen = 2 * math.pi / inv
    scaled = xp.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return xp.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def rotate(xp, x, cos, sin, rope: str):  # x [b, s, h, d]; cos, sin [s, d/2]
    if rope == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s_ = cos[None, :, None, :], sin[None, :, None, :]
        return xp.stack([x1 * c - x2 * s_, x1 * s_ + x2 * c], axis=-1).reshape(x.shape)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c = xp.concatenate([cos, cos], axis=-1)[None, :, None, :]
    s_ = xp.concatenate([sin, sin], axis=-1)[None, :, None, :]
    return x * c + xp.concatenate([-x2, x1], axis=-1) * s_


def rms_norm(xp, x, w, eps):
    return x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def softmax(xp, x):
    e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def run(folder: Path, ids: list[int], rec, xp=np, rope: str = "rotate_half") -> None:
    """The forward pass of a llama checkpoint on one row of ids, every step handed to `rec(name, array)`."""
    cfg = json.loads((folder / "config.json").read_text())
    W = {k: xp.asarray(v) for k, v in load_file(str(folder / "model.safetensors")).items()}
    d, H, KV, dh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps, n = cfg["rms_norm_eps"], len(ids)
    ids_ = xp.asarray([ids], dtype=xp.int64 if xp is np else xp.int32)
    rec("input.ids", np.asarray(ids_, dtype=np.int64))
    x = W["model.embed_tokens.weight"][ids_]  # [b, s, d]
    rec("embed.tokens", x)
    rec("embed.out", x)
    pos = xp.arange(n, dtype=xp.float32)
    angles = pos[:, None] * llama3_inv_freq(xp, dh, cfg["rope_parameters"])[None, :]  # [s, d/2]
    cos, sin = xp.cos(angles), xp.sin(angles)
    causal = xp.tril(xp.ones((n, n), dtype=bool))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(xp, x, W[p + "input_layernorm.weight"], eps)
        rec(f"blocks.{i}.ln1.out", h)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(1, n, H, dh)  # the port's [b, s, h, d]
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(1, n, KV, dh)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(1, n, KV, dh)
        for name, t in (("q", q), ("k", k), ("v", v)):
            rec(f"blocks.{i}.attn.{name}", t, layout="bshd")
        q, k = rotate(xp, q, cos, sin, rope), rotate(xp, k, cos, sin, rope)
        rec(f"blocks.{i}.attn.q_rot", q, layout="bshd")
        rec(f"blocks.{i}.attn.k_rot", k, layout="bshd")
        q, k, v = (xp.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))  # [b, h, s, d]
        k, v = xp.repeat(k, H // KV, axis=1), xp.repeat(v, H // KV, axis=1)
        scores = q @ xp.swapaxes(k, -1, -2) / math.sqrt(dh)  # [b, h, s, s]
        rec(f"blocks.{i}.attn.scores", scores)
        weights = softmax(xp, xp.where(causal, scores, -xp.inf))
        rec(f"blocks.{i}.attn.weights", weights)
        z = weights @ v  # [b, h, s, d]
        rec(f"blocks.{i}.attn.z", z)
        out = xp.transpose(z, (0, 2, 1, 3)).reshape(1, n, H * dh) @ W[p + "self_attn.o_proj.weight"].T
        rec(f"blocks.{i}.attn.out", out)
        x = x + out
        rec(f"blocks.{i}.resid_mid", x)
        h = rms_norm(xp, x, W[p + "post_attention_layernorm.weight"], eps)
        rec(f"blocks.{i}.ln2.out", h)
        gate, up = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        rec(f"blocks.{i}.mlp.pre", gate)
        rec(f"blocks.{i}.mlp.up", up)
        act = gate / (1 + xp.exp(-gate)) * up
        rec(f"blocks.{i}.mlp.post", act)
        out = act @ W[p + "mlp.down_proj.weight"].T
        rec(f"blocks.{i}.mlp.out", out)
        x = x + out
        rec(f"blocks.{i}.resid_post", x)
    x = rms_norm(xp, x, W["model.norm.weight"], eps)
    rec("final_norm.out", x)
    logits = x @ W["lm_head.weight"].T
    rec("logits", logits)
    rec("probs", softmax(xp, logits))
