"""The whole forward pass on each route: embed, blocks, final norm, then the head. Every step goes through `rec`.

- decoder: causal self-attention, logits over the vocabulary at every position;
- encoder: bidirectional self-attention (padding masked on keys only), then an MLM head or a pooled vector;
- encoder-decoder: the encoder runs once; every decoder block reads its output through cross-attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.block import BlockMasks, block
from tracer.engine.ports import StepSink, Weights
from tracer.engine.row_blocks import HEAD_BLOCK_BYTES, block_rows
from tracer.engine.cache import KVCache
from tracer.engine.embed import embed
from tracer.engine.heads import mlm_transform, pool, pool_op, unembed, unembed_op
from tracer.engine.norms import norm, norm_op
from tracer.engine.ops import linear, softcap, softmax
from tracer.engine.relative_bias import position_bias
from tracer.engine.rope import rope_tables
from tracer.engine.masks import MaskParts, build_keep, padding_keep

__all__ = ["ForwardInputs", "MaskOverride", "forward", "layer_masks", "norm", "unembed"]

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
    token_types: np.ndarray | None = None  # [batch, pos] int64 segment ids (BERT family)
    decoder: "ForwardInputs | None" = None  # encoder-decoder: what the decoder reads


def layer_masks(attention_mask: np.ndarray, spec: Spec) -> dict[int | None, MaskParts]:
    """One self-attention keep-mask per distinct window size (None = full attention) of a stack."""
    q_len = attention_mask.shape[1]
    windows = {spec.window(i) for i in range(spec.n_layers)}
    return {w: build_keep(attention_mask, spec.causal, w, q_len) for w in windows}


def record_inputs(inputs: ForwardInputs, spec: Spec, rec: StepSink, prefix: str = "input.") -> None:
    axes = ("batch", "dec_pos") if prefix == "input.decoder_" else _BT
    rec(prefix + "ids", inputs.ids, axes, "token ids")
    rec(prefix + "mask", inputs.attention_mask, axes, "1 = real token, 0 = padding")
    if spec.positions != "relative":
        rule = "0..n-1 (index; padding does not shift it)" if spec.position_rule == "index" else "cumsum(mask) - 1, pads 0"
        rec(prefix + "positions", inputs.positions, axes, rule)
    if spec.token_types:
        rec(prefix + "token_types", inputs.token_types, _BT, "segment ids (0 = first text, 1 = second)")


def run_stack(inputs: ForwardInputs, W: Weights, spec: Spec, rec: StepSink, prefix: str,
              masks: dict[int | None, MaskParts], override: MaskOverride | None = None, memory: np.ndarray | None = None,
              memory_mask: np.ndarray | None = None, cache: KVCache | None = None) -> np.ndarray:
    """Embed and run every block of one stack -> [batch, pos, d_model] (after its final norm, if any).

    With a cache, `inputs` are only the new positions: `cache.past` earlier ones sit in the cache (see engine.decode)."""
    dtype = W.dtype
    q_len = inputs.ids.shape[1]
    rope = rope_local = None
    if spec.positions == "rotary":
        rope = rope_local = rope_tables(inputs.positions, spec.rope, dtype)
        if spec.rope_local is not None:
            rope_local = rope_tables(inputs.positions, spec.rope_local, dtype)
    rel = None
    if spec.relative_bias is not None:  # computed once by the block that owns the table, shared by all
        past = cache.past if cache is not None else 0  # the new query rows sit after the cached ones
        rel = position_bias(W[prefix + "rel_bias.W"], spec.relative_bias, not spec.causal, q_len, past + q_len, past)
    cross_keep = padding_keep(memory_mask) if memory is not None else None  # [batch, 1, 1, enc_len]
    x = embed(inputs.ids, inputs.positions, inputs.token_types, W, spec, rec, prefix)
    for i in range(spec.n_layers):
        keep, bias = (override.keep, override.bias) if override is not None else (masks[spec.window(i)].keep, None)
        m = BlockMasks(keep, bias, rel, cross_keep, memory)
        layer_rope = rope if spec.window(i) is None else rope_local  # gemma3: sliding layers have their own
        x = block(x, f"{prefix}blocks.{i}.", W, spec, m, layer_rope, rec, cache.layers[i] if cache is not None else None)
    if spec.final_norm:
        x = rec(prefix + "final_norm.out", norm(x, W, prefix + "final_norm", spec), _BTD, norm_op(spec))
    if spec.d_embed is not None:  # OPT-350m: back to the embedding width the head reads
        x = rec(prefix + "project_out", linear(x, W["project_out.W"]), ("batch", "pos", "d_embed"), "x @ W_project_out")
    return x


def forward(inputs: ForwardInputs, W: Weights, spec: Spec, rec: StepSink, override: MaskOverride | None = None,
            masks: dict[int | None, MaskParts] | None = None) -> np.ndarray:
    """Run the model; returns probs [batch, pos, vocab] (pooled [batch, d_model] without a head), or None
    when the head ran in blocks because neither logits nor probs is kept whole (see record_head).

    `masks` are the self-attention masks of the stack that produces the output (the decoder's in an
    encoder-decoder model); built here when not given.
    """
    record_inputs(inputs, spec.encoder or spec, rec)
    if spec.route == "encoder-decoder":
        dec = inputs.decoder
        record_inputs(dec, spec, rec, "input.decoder_")
        memory = run_stack(inputs, W, spec.encoder, rec, "encoder.", layer_masks(inputs.attention_mask, spec.encoder))
        masks = masks if masks is not None else layer_masks(dec.attention_mask, spec)
        x = run_stack(dec, W, spec, rec, "decoder.", masks, override, memory, inputs.attention_mask)
        source = "decoder.final_norm.out" if spec.final_norm else f"decoder.blocks.{spec.n_layers - 1}.resid_post"
    else:
        masks = masks if masks is not None else layer_masks(inputs.attention_mask, spec)
        x = run_stack(inputs, W, spec, rec, "", masks, override)
        source = "final_norm.out" if spec.final_norm else f"blocks.{spec.n_layers - 1}.resid_post"
    if spec.head == "none":
        return rec("pooled", pool(x, inputs.attention_mask, spec.pooling), ("batch", "d_model"), pool_op(spec.pooling))
    if spec.head == "mlm":
        x = mlm_transform(x, W, spec, rec)
        source = "head.ln.out"
    return record_head(x, W, spec, rec, source)


_BTV = ("batch", "pos", "vocab")
_PROBS_OP = "softmax over the vocabulary"


def record_head(x: np.ndarray, W: Weights, spec: Spec, rec: StepSink, source: str) -> np.ndarray | None:
    """logits (and gemma2's logits.raw) and probs [batch, pos, vocab]; returns probs.

    When none of them is kept whole they are computed a block of positions at a time, recorded as
    statistics, and None is returned: a long input's [pos, vocab] tensors never exist."""
    b, n, _ = x.shape
    itemsize = x.dtype.itemsize
    rows = block_rows(rec, ("logits.raw", "logits", "probs"), n, b * spec.vocab_size * itemsize, HEAD_BLOCK_BYTES)
    if rows is None:
        logits = record_logits(x, W, spec, rec, source)
        return rec("probs", softmax(logits), _BTV, _PROBS_OP)
    shape, cap = (b, n, spec.vocab_size), spec.logit_softcap
    op = unembed_op(spec, "project_out" if spec.d_embed is not None else source)
    raw = rec.blocks("logits.raw", _BTV, op, shape, x.dtype) if cap is not None else None
    capped = rec.blocks("logits", _BTV, op if cap is None else f"tanh(logits.raw / {cap:g}) * {cap:g}", shape, x.dtype)
    probs = rec.blocks("probs", _BTV, _PROBS_OP, shape, x.dtype)
    for p0 in range(0, n, rows):
        logits = unembed(x[:, p0 : p0 + rows], W, spec)  # [batch, rows, vocab]
        if cap is not None:
            logits = softcap(raw.add(logits), cap)
        probs.add(softmax(capped.add(logits)))
    for part in (raw, capped, probs):
        if part is not None:
            part.close()
    return None


def record_logits(x: np.ndarray, W: Weights, spec: Spec, rec: StepSink, source: str) -> np.ndarray:
    """The head's output [batch, pos, vocab]: x @ W_U, then gemma2's soft-capping (logits.raw -> logits).
    `source` names x in the op text (OPT-350m's head reads project_out)."""
    if spec.d_embed is not None:
        source = "project_out"
    if spec.logit_softcap is None:
        return rec("logits", unembed(x, W, spec), _BTV, unembed_op(spec, source))
    cap = spec.logit_softcap
    raw = rec("logits.raw", unembed(x, W, spec), _BTV, unembed_op(spec, source))
    return rec("logits", softcap(raw, cap), _BTV, f"tanh(logits.raw / {cap:g}) * {cap:g}")
