"""The whole forward pass: embed, blocks, final norm, unembed. Every step goes through `rec`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.attention import attention
from tracer.engine.mlp import mlp
from tracer.engine.ops import affine_op, layer_norm, linear, rms_norm, softmax
from tracer.engine.rope import cos_sin, inverse_frequencies
from tracer.masks.build import MaskParts, build_keep

_BT = ("batch", "pos")
_BTD = ("batch", "pos", "d_model")


@dataclass(frozen=True)
class MaskOverride:
    """A mask given from outside (e.g. read in another framework's convention), replacing the built one."""

    keep: np.ndarray  # bool, broadcastable to [batch, heads, q, kv]
    bias: np.ndarray | None = None  # additive, broadcastable to the scores
    note: str = ""


@dataclass(frozen=True)
class ForwardInputs:
    ids: np.ndarray  # [batch, pos] int64
    attention_mask: np.ndarray  # [batch, pos] int64, 1 = real token
    positions: np.ndarray  # [batch, pos] int64


def norm(x: np.ndarray, W: dict, name: str, spec: Spec) -> np.ndarray:
    if spec.norm == "rmsnorm":
        return rms_norm(x, W[name + ".w"], spec.norm_eps, spec.norm_offset)
    return layer_norm(x, W.get(name + ".w"), W.get(name + ".b"), spec.norm_eps)


def _norm_op(spec: Spec) -> str:
    if spec.norm == "rmsnorm":
        return "x / rms(x) * (1 + w)" if spec.norm_offset else "x / rms(x) * w"
    return "(x - mean) / std * w + b"


def embed(inputs: ForwardInputs, W: dict, spec: Spec, rec) -> np.ndarray:
    x = rec("embed.tokens", W["embed.W_E"][inputs.ids], _BTD, "W_E[ids]")  # [batch, pos, d_model]
    if spec.positions == "learned":
        pos = rec("embed.positions", W["embed.W_pos"][inputs.positions + spec.position_offset], _BTD,
                  f"W_pos[positions + {spec.position_offset}]" if spec.position_offset else "W_pos[positions]")
        x = x + pos
        op = "tokens + positions"
    elif spec.embed_scale is not None:
        x = x * x.dtype.type(spec.embed_scale)  # scaled in the compute dtype, as transformers does
        op = f"tokens * sqrt(d_model) = {spec.embed_scale:.4g}"
    else:
        op = "tokens (positions enter through rotary)" if spec.positions == "rotary" else "tokens"
    return rec("embed.out", x, _BTD, op)


def block(x: np.ndarray, i: int, W: dict, spec: Spec, keep, bias, rope, rec) -> np.ndarray:
    p = f"blocks.{i}."
    nop = _norm_op(spec)
    if spec.norm_placement == "post":
        a = rec(p + "attn.out", attention(x, W, p, spec, keep, bias, rope, rec), _BTD, "heads merged, " + affine_op("z", "o", W, p + "attn."))
        mid = rec(p + "resid_mid", x + a, _BTD, "x + attn.out (before the post-norm)")
        h = rec(p + "ln1.out", norm(mid, W, p + "ln1", spec), _BTD, nop)
        m = rec(p + "mlp.out", mlp(h, W, p, spec, rec), _BTD, affine_op("post", "out", W, p + "mlp."))
        return rec(p + "resid_post", norm(h + m, W, p + "ln2", spec), _BTD, "ln2(ln1.out + mlp.out)")
    h1 = rec(p + "ln1.out", norm(x, W, p + "ln1", spec), _BTD, nop)
    a = rec(p + "attn.out", attention(h1, W, p, spec, keep, bias, rope, rec), _BTD, "heads merged, " + affine_op("z", "o", W, p + "attn."))
    if spec.residual == "parallel":
        h2 = rec(p + "ln2.out", norm(x, W, p + "ln2", spec), _BTD, nop + " (of the block input: parallel)")
        m = rec(p + "mlp.out", mlp(h2, W, p, spec, rec), _BTD, affine_op("post", "out", W, p + "mlp."))
        return rec(p + "resid_post", x + a + m, _BTD, "x + attn.out + mlp.out (parallel residual)")
    mid = rec(p + "resid_mid", x + a, _BTD, "x + attn.out")
    h2 = rec(p + "ln2.out", norm(mid, W, p + "ln2", spec), _BTD, nop)
    m = rec(p + "mlp.out", mlp(h2, W, p, spec, rec), _BTD, affine_op("post", "out", W, p + "mlp."))
    return rec(p + "resid_post", mid + m, _BTD, "resid_mid + mlp.out")


def unembed(x: np.ndarray, W: dict, spec: Spec) -> np.ndarray:
    """Final-norm output -> logits [batch, pos, vocab]."""
    return linear(x, W["unembed.W_U"], W.get("unembed.b_U"))


def layer_masks(inputs: ForwardInputs, spec: Spec) -> dict[int | None, MaskParts]:
    """One keep-mask per distinct window size (None = full attention), shared by the layers that use it."""
    q_len = inputs.ids.shape[1]
    windows = {spec.window(i) for i in range(spec.n_layers)}
    return {w: build_keep(inputs.attention_mask, spec.causal, w, q_len) for w in windows}


def forward(inputs: ForwardInputs, W: dict, spec: Spec, rec, override: MaskOverride | None = None,
            masks: dict[int | None, MaskParts] | None = None) -> np.ndarray:
    """Run the model; returns probs [batch, pos, vocab]. Everything else reaches `rec`."""
    rec("input.ids", inputs.ids, _BT, "token ids")
    rec("input.mask", inputs.attention_mask, _BT, "1 = real token, 0 = padding")
    rec("input.positions", inputs.positions, _BT, "cumsum(mask) - 1, pads 0")
    dtype = W["embed.W_E"].dtype
    rope = None
    if spec.positions == "rotary":
        rope = cos_sin(inputs.positions, inverse_frequencies(spec.rope, dtype), dtype)
    masks = masks if masks is not None else layer_masks(inputs, spec)
    x = embed(inputs, W, spec, rec)
    for i in range(spec.n_layers):
        if override is not None:
            keep, bias = override.keep, override.bias
        else:
            keep, bias = masks[spec.window(i)].keep, None
        x = block(x, i, W, spec, keep, bias, rope, rec)
    if spec.final_norm:
        x = rec("final_norm.out", norm(x, W, "final_norm", spec), _BTD, _norm_op(spec))
    logits = rec("logits", unembed(x, W, spec), ("batch", "pos", "vocab"), "final_norm.out @ W_U")
    return rec("probs", softmax(logits), ("batch", "pos", "vocab"), "softmax over the vocabulary")
