"""One transformer block: attention and MLP sublayers around the residual stream, pre-norm, post-norm or parallel.

A decoder block of an encoder-decoder model has a third sublayer between the
two: cross-attention, with queries from the decoder and keys and values from
the encoder output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.attention import attention
from tracer.engine.cache import LayerCache
from tracer.engine.mlp import mlp
from tracer.engine.moe import moe
from tracer.engine.norms import norm, norm_op
from tracer.engine.ops import affine_op
from tracer.engine.ports import StepSink, Weights

_BTD = ("batch", "pos", "d_model")


@dataclass(frozen=True)
class BlockMasks:
    """What one block's attention sublayers apply: keep-masks, an optional mask bias, an optional relative bias."""

    keep: np.ndarray  # [batch, 1|heads, q, kv]
    bias: np.ndarray | None = None  # additive (a mask given in another convention)
    position_bias: np.ndarray | None = None  # [1, heads, q, kv] (T5)
    cross_keep: np.ndarray | None = None  # [batch, 1, 1, enc_len]: the encoder's padding
    memory: np.ndarray | None = None  # [batch, enc_pos, d_model]: the encoder output cross-attention reads


def _self_attention(h: np.ndarray, W: Weights, p: str, spec: Spec, m: BlockMasks, rope, rec: StepSink,
                    cache=None) -> np.ndarray:
    a = attention(h, W, p, spec, m.keep, m.bias, rope, rec, position_bias=m.position_bias, cache=cache)
    return rec(p + "attn.out", a, _BTD, "heads merged, " + affine_op("z", "o", W, p + "attn."))


def _cross_attention(h: np.ndarray, W: Weights, p: str, spec: Spec, m: BlockMasks, rec: StepSink,
                     cache=None) -> np.ndarray:
    c = attention(h, W, p, spec, m.cross_keep, None, None, rec, part="cross_attn", memory=m.memory, cache=cache)
    return rec(p + "cross_attn.out", c, _BTD, "heads merged, " + affine_op("z", "o", W, p + "cross_attn."))


def _mlp(h: np.ndarray, W: Weights, p: str, spec: Spec, rec: StepSink) -> np.ndarray:
    if spec.moe is not None and p + "mlp.W_router" in W:
        shared = " + shared.gate * shared.out" if spec.moe.d_shared else ""
        return rec(p + "mlp.out", moe(h, W, p, spec, rec), _BTD, "sum over chosen experts: router.weights * expert_out" + shared)
    return rec(p + "mlp.out", mlp(h, W, p, spec, rec), _BTD, affine_op("post", "out", W, p + "mlp."))


def block(x: np.ndarray, p: str, W: Weights, spec: Spec, m: BlockMasks, rope, rec: StepSink,
          cache: LayerCache | None = None) -> np.ndarray:
    """[batch, pos, d_model] -> [batch, pos, d_model]; p is the block's name prefix, e.g. "decoder.blocks.0.".

    With a cache, x holds only the new positions; keys and values of earlier ones come from the cache."""
    if spec.norm_placement == "post":
        return _post_norm_block(x, p, W, spec, m, rope, rec, cache)
    if spec.norm_placement in ("sandwich", "after"):
        return _sublayer_norm_block(x, p, W, spec, m, rope, rec, cache)
    nop = norm_op(spec)
    h1 = rec(p + "ln1.out", norm(x, W, p + "ln1", spec), _BTD, nop)
    a = _self_attention(h1, W, p, spec, m, rope, rec, cache)
    if spec.residual == "parallel":
        if spec.shared_norm:  # phi-1/2: the MLP reads ln1.out too
            h2 = h1
        else:
            h2 = rec(p + "ln2.out", norm(x, W, p + "ln2", spec), _BTD, nop + " (of the block input: parallel)")
        mo = _mlp(h2, W, p, spec, rec)
        return rec(p + "resid_post", x + a + mo, _BTD, "x + attn.out + mlp.out (parallel residual)")
    x = rec(p + "resid_mid", x + a, _BTD, "x + attn.out")
    before_mlp = "resid_mid"
    if m.memory is not None:
        hc = rec(p + "ln_cross.out", norm(x, W, p + "ln_cross", spec), _BTD, nop)
        c = _cross_attention(hc, W, p, spec, m, rec, cache)
        x = rec(p + "resid_cross", x + c, _BTD, "resid_mid + cross_attn.out")
        before_mlp = "resid_cross"
    h2 = rec(p + "ln2.out", norm(x, W, p + "ln2", spec), _BTD, nop)
    mo = _mlp(h2, W, p, spec, rec)
    return rec(p + "resid_post", x + mo, _BTD, f"{before_mlp} + mlp.out")


def _post_norm_block(x: np.ndarray, p: str, W: Weights, spec: Spec, m: BlockMasks, rope, rec: StepSink,
                     cache=None) -> np.ndarray:
    """BERT, BART, OPT-350m: each sublayer adds to the stream, then the sum is normed."""
    nop = norm_op(spec)
    a = _self_attention(x, W, p, spec, m, rope, rec, cache)
    mid = rec(p + "resid_mid", x + a, _BTD, "x + attn.out (before the post-norm)")
    h = rec(p + "ln1.out", norm(mid, W, p + "ln1", spec), _BTD, nop)
    if m.memory is not None:
        c = _cross_attention(h, W, p, spec, m, rec, cache)
        cross = rec(p + "resid_cross", h + c, _BTD, "ln1.out + cross_attn.out (before the post-norm)")
        h = rec(p + "ln_cross.out", norm(cross, W, p + "ln_cross", spec), _BTD, nop)
    mo = _mlp(h, W, p, spec, rec)
    source = "ln_cross.out" if m.memory is not None else "ln1.out"
    return rec(p + "resid_post", norm(h + mo, W, p + "ln2", spec), _BTD, f"ln2({source} + mlp.out)")


def _sublayer_norm_block(x: np.ndarray, p: str, W: Weights, spec: Spec, m: BlockMasks, rope, rec: StepSink,
                         cache=None) -> np.ndarray:
    """Gemma-2/3 ("sandwich"): norm before and after each sublayer; OLMo-2 ("after"): after only.
    The post-sublayer norm acts on the sublayer's output, inside the residual: x + norm(sublayer(...))."""
    nop = norm_op(spec)
    before = spec.norm_placement == "sandwich"
    h1 = rec(p + "ln1.out", norm(x, W, p + "ln1", spec), _BTD, nop) if before else x
    a = _self_attention(h1, W, p, spec, m, rope, rec, cache)
    a = rec(p + "ln1_post.out", norm(a, W, p + "ln1_post", spec), _BTD, nop + " (of attn.out)")
    x = rec(p + "resid_mid", x + a, _BTD, "x + ln1_post.out")
    h2 = rec(p + "ln2.out", norm(x, W, p + "ln2", spec), _BTD, nop) if before else x
    mo = _mlp(h2, W, p, spec, rec)
    mo = rec(p + "ln2_post.out", norm(mo, W, p + "ln2_post", spec), _BTD, nop + " (of mlp.out)")
    return rec(p + "resid_post", x + mo, _BTD, "resid_mid + ln2_post.out")
