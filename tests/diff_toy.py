"""A toy llama-shaped forward in NumPy that records tracer's step names, for the diff tests.

Independent of the engine on purpose: the diff is tested on traces whose
every value is known, and a weight perturbed here propagates downstream the
way it would in a real model.
"""

from __future__ import annotations

import numpy as np

from tracer.names.hf import hf_module
from tracer.steps import describe
from tracer.trace import Recorder, Trace

D, H, DH, F, V = 8, 2, 4, 12, 16


def toy_weights(n_layers: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    weights = {"W_E": w(V, D) * 4, "W_U": w(D, V)}
    for i in range(n_layers):
        for name, shape in (("W_q", (D, H * DH)), ("W_k", (D, H * DH)), ("W_v", (D, H * DH)), ("W_o", (H * DH, D)),
                            ("W_in", (D, F)), ("W_up", (D, F)), ("W_out", (F, D))):
            weights[f"{i}.{name}"] = w(*shape)
    return weights


def _rms(x):
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)).astype(np.float32)


def _heads(x):  # [b, t, h*dh] -> [b, h, t, dh]
    b, t, _ = x.shape
    return x.reshape(b, t, H, DH).transpose(0, 2, 1, 3)


def toy_trace(ids: list[list[int]], weights: dict[str, np.ndarray] | None = None, mask: list[list[int]] | None = None,
              keep=("*",), meta: dict | None = None, family: str = "llama") -> Trace:
    weights = weights if weights is not None else toy_weights()
    n_layers = sum(1 for k in weights if k.endswith(".W_q"))
    ids_np = np.asarray(ids, dtype=np.int64)
    mask_np = np.ones_like(ids_np) if mask is None else np.asarray(mask, dtype=np.int64)
    rec = Recorder(keep, hf_module=lambda name: hf_module(family, name))

    def r(name, a, op="toy"):
        return rec(name, a, describe(name).axes, op)

    b, t = ids_np.shape
    r("input.ids", ids_np, "input")
    r("input.mask", mask_np, "input")
    r("input.positions", np.where(mask_np == 1, np.cumsum(mask_np, 1) - 1, 0).astype(np.int64), "input")
    x = r("embed.tokens", weights["W_E"][ids_np])
    x = r("embed.out", x)
    keep_mask = np.tril(np.ones((t, t), dtype=bool))[None, None] & (mask_np[:, None, None, :] == 1)  # [b, 1, t, t]
    for i in range(n_layers):
        p = f"blocks.{i}."
        h = r(p + "ln1.out", _rms(x))
        q = r(p + "attn.q", _heads(h @ weights[f"{i}.W_q"]))
        k = r(p + "attn.k", _heads(h @ weights[f"{i}.W_k"]))
        v = r(p + "attn.v", _heads(h @ weights[f"{i}.W_v"]))
        scores = r(p + "attn.scores", (q @ k.transpose(0, 1, 3, 2)) * np.float32(DH**-0.5))
        m = r(p + "attn.mask", keep_mask)
        masked = r(p + "attn.masked_scores", np.where(m, scores, np.float32(-np.inf)))
        shifted = np.exp(masked - masked.max(-1, keepdims=True))
        weights_ = r(p + "attn.weights", (shifted / shifted.sum(-1, keepdims=True)).astype(np.float32))
        z = r(p + "attn.z", weights_ @ v)
        attn_out = r(p + "attn.out", z.transpose(0, 2, 1, 3).reshape(b, t, H * DH) @ weights[f"{i}.W_o"])
        x = r(p + "resid_mid", x + attn_out)
        h2 = r(p + "ln2.out", _rms(x))
        gate = r(p + "mlp.pre", h2 @ weights[f"{i}.W_in"])
        up = r(p + "mlp.up", h2 @ weights[f"{i}.W_up"])
        post = r(p + "mlp.post", (gate / (1 + np.exp(-gate)) * up).astype(np.float32))
        mlp_out = r(p + "mlp.out", post @ weights[f"{i}.W_out"])
        x = r(p + "resid_post", x + mlp_out)
    x = r("final_norm.out", _rms(x))
    logits = r("logits", x @ weights["W_U"])
    e = np.exp(logits - logits.max(-1, keepdims=True))
    r("probs", (e / e.sum(-1, keepdims=True)).astype(np.float32))
    base = {"tracer_version": "test", "model": {"name": "toy", "family": family}}
    return Trace(rec.steps, {**base, **(meta or {})})


def foreign(trace: Trace, rename=lambda name: name, transform=lambda name, a: a) -> dict[str, np.ndarray]:
    """The tensors of a trace as a plain {name: array} dump, renamed and rearranged, as a port would write it."""
    return {rename(s.name): np.ascontiguousarray(transform(s.name, s.array)) for s in trace.steps if s.array is not None}
