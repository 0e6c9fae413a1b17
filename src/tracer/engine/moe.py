"""Mixture of experts in place of the MLP: a router scores the experts per token, the top k run on it.

router logits -> softmax -> the k most probable experts (transformers' torch.topk order: most probable
first) and their probabilities (renormalised to sum to 1 when the model says so). Each expert is a gated
MLP run only on the tokens routed to it; a token's output is the weighted sum of its experts' outputs,
added in expert order as transformers' index_add_ does. Qwen2-MoE adds a shared expert every token goes
through, scaled by a sigmoid gate: out = routed + sigmoid(x @ W_gate) * shared(x).
"""

from __future__ import annotations

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.ops import ACTIVATIONS, linear, softmax
from tracer.engine.ports import StepSink, Weights

_BTE = ("batch", "pos", "experts")
_BTK = ("batch", "pos", "top_k")


def route(logits: np.ndarray, top_k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """logits [..., experts] -> (experts [..., top_k] int64, most probable first; weights [..., top_k])."""
    probs = softmax(logits)
    chosen = np.argsort(-probs, axis=-1, kind="stable")[..., :top_k].astype(np.int64)
    weights = np.take_along_axis(probs, chosen, axis=-1)
    if normalize:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return chosen, weights


def expert_mlp(x: np.ndarray, W: Weights, e: str, spec: Spec) -> np.ndarray:
    """One expert, a gated MLP: act(x @ W_in) * (x @ W_up) @ W_out; x [tokens, d_model]."""
    act = ACTIVATIONS[spec.activation]
    return linear(act(linear(x, W[e + "W_in"])) * linear(x, W[e + "W_up"]), W[e + "W_out"])


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def shared_expert(x: np.ndarray, W: Weights, p: str, spec: Spec, rec: StepSink) -> np.ndarray:
    """Qwen2-MoE's shared expert, scaled by its gate: [batch, pos, d_model] -> [batch, pos, d_model]."""
    y = rec(p + "mlp.shared.out", expert_mlp(x, W, p + "mlp.shared.", spec), ("batch", "pos", "d_model"),
            f"the shared expert (width {spec.moe.d_shared}) on every token, a gated MLP, before its gate")
    gate = rec(p + "mlp.shared.gate", sigmoid(linear(x, W[p + "mlp.shared.W_gate"]))[..., 0], ("batch", "pos"),
               "sigmoid(x @ W_shared_gate), one scalar per token")
    return gate[..., None] * y


def moe(x: np.ndarray, W: Weights, p: str, spec: Spec, rec: StepSink) -> np.ndarray:
    """[batch, pos, d_model] -> [batch, pos, d_model]; records the routing and each chosen expert's output."""
    m = spec.moe
    b, t, d = x.shape
    logits = rec(p + "mlp.router.logits", linear(x, W[p + "mlp.W_router"]), _BTE, "x @ W_router")
    chosen, weights = route(logits, m.top_k, m.normalize)
    rec(p + "mlp.router.experts", chosen, _BTK, f"the {m.top_k} most probable experts, most probable first")
    norm = ", renormalised to sum to 1" if m.normalize else ""
    weights = rec(p + "mlp.router.weights", weights, _BTK, f"softmax(router.logits) of the chosen experts{norm}")
    flat_x, flat_chosen = x.reshape(b * t, d), chosen.reshape(b * t, m.top_k)
    outputs = np.zeros((b * t, m.top_k, d), dtype=x.dtype)  # [tokens, top_k, d_model]
    out = np.zeros_like(flat_x)
    for e in range(m.n_experts):
        tokens, slots = np.nonzero(flat_chosen == e)  # only the tokens routed to expert e
        if tokens.size == 0:
            continue
        y = expert_mlp(flat_x[tokens], W, f"{p}mlp.experts.{e}.", spec)  # [routed, d_model]
        outputs[tokens, slots] = y
        np.add.at(out, tokens, y * weights.reshape(b * t, m.top_k)[tokens, slots, None])
    rec(p + "mlp.expert_out", outputs.reshape(b, t, m.top_k, d), ("batch", "pos", "top_k", "d_model"),
        "each chosen expert's output for the token (run on routed tokens only), before weighting")
    out = out.reshape(b, t, d)
    if m.d_shared:  # transformers: routed sum + sigmoid(gate) * shared
        return out + shared_expert(x, W, p, spec, rec)
    return out
