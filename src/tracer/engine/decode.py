"""The forward pass with a KV cache: the prompt once (prefill), then one new position per step.

A cached step computes the new positions' queries, keys and values only; their
queries score against every cached key. The keep-mask is built in cache-index
space (`build_keep(..., past=...)`: causality aligned bottom-right, sliding
windows blocking slots older than the window, the cache's padding blocked).
Positions (rotary angles, learned rows) are the caller's: for left padding,
cumsum(mask) - 1 continues from the prompt.

An encoder-decoder model runs its encoder at the first step only; the encoder
output stays in the cache and every decoder block's cross-attention keys and
values are computed once from it.
"""

from __future__ import annotations

import numpy as np

from tracer.arch.spec import Spec
from tracer.engine.cache import KVCache, empty_cache
from tracer.engine.forward import ForwardInputs, layer_masks, record_inputs, record_logits, run_stack
from tracer.engine.ops import softmax
from tracer.engine.masks import MaskParts, build_keep
from tracer.engine.ports import StepSink, Weights

__all__ = ["new_cache", "cached_masks", "forward_cached"]


def new_cache(spec: Spec, batch: int, capacity: int, dtype) -> KVCache:
    """An empty cache for the stack that generates (the decoder), `capacity` positions long."""
    return empty_cache(batch, spec.n_layers, spec.n_kv_heads, spec.d_head, capacity, dtype)


def cached_masks(full_mask: np.ndarray, spec: Spec, q_len: int, past: int) -> dict[int | None, MaskParts]:
    """One keep-mask [batch, 1, q_len, past + q_len] per window size, for the new query rows."""
    windows = {spec.window(i) for i in range(spec.n_layers)}
    return {w: build_keep(full_mask, spec.causal, w, q_len, past) for w in windows}


def forward_cached(inputs: ForwardInputs, W: Weights, spec: Spec, rec: StepSink, cache: KVCache) -> np.ndarray:
    """New positions in, their logits [batch, q_len, vocab] out (probs recorded); the cache grows by q_len.

    Decoder models: `inputs` are the new tokens (ids, their 1/0 mask, positions). Encoder-decoder models:
    `inputs` are the encoder's (read at the first step only) and `inputs.decoder` the new decoder tokens.
    The first call (empty cache) is the prefill and records the usual names; later calls record the same
    names (the caller prefixes them), with `attn.k`/`attn.k_rot`/`attn.v` holding the whole cache.
    """
    dec = inputs.decoder if spec.route == "encoder-decoder" else inputs
    q_len, past = dec.ids.shape[1], cache.past
    full_mask = np.concatenate([cache.mask, dec.attention_mask], axis=1)  # [batch, past + q_len]
    prefix, memory = "", None
    if spec.route == "encoder-decoder":
        prefix = "decoder."
        if cache.memory is None:
            record_inputs(inputs, spec.encoder, rec)
            cache.memory = run_stack(inputs, W, spec.encoder, rec, "encoder.", layer_masks(inputs.attention_mask, spec.encoder))
            cache.memory_mask = inputs.attention_mask
        record_inputs(dec, spec, rec, "input.decoder_")
        memory = cache.memory
    else:
        record_inputs(dec, spec, rec)
    x = run_stack(dec, W, spec, rec, prefix, cached_masks(full_mask, spec, q_len, past), None, memory,
                  cache.memory_mask, cache)
    cache.mask = full_mask
    source = f"{prefix}final_norm.out" if spec.final_norm else f"{prefix}blocks.{spec.n_layers - 1}.resid_post"
    logits = record_logits(x, W, spec, rec, source)  # with gemma2's capping
    rec("probs", softmax(logits), ("batch", "pos", "vocab"), "softmax over the vocabulary")
    return logits
