"""`tracer generate --check-chunked N`: the prompt prefilled N tokens at a time through the KV cache equals
the whole prompt prefilled in one pass.

Both runs start from an empty cache. The chunked one feeds positions [0, N), [N, 2N), ... each against the
cache the earlier chunks filled (causality aligned bottom-right, windows and padding in cache-index space,
positions sliced from the whole prompt's). Compared at real positions: every position's logits, and every
layer's cached keys and values. The bound is --check-cache's: tol * max(1, |logit|) (float32 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.engine.decode import forward_cached, new_cache
from tracer.engine.forward import ForwardInputs
from tracer.errors import TracerError
from tracer.trace.recorder import NullRecorder

CHECK_TOL = {"float32": 1e-5, "float64": 1e-10}  # as model.generate's --check-cache


@dataclass
class ChunkedCheck:
    chunk: int
    chunks: int  # passes the chunked prefill took
    prompt_len: int
    logits_max_abs: float  # max |chunked - whole| over real positions and the vocabulary
    bound: float
    cache_max_abs: float  # max |chunked - whole| over every layer's cached keys and values, real slots
    first_layer: int | None  # the first layer whose cached keys or values pass the bound
    worst_position: int | None  # where the logits differ most (a prompt position)
    dtype: str

    @property
    def passed(self) -> bool:
        return self.logits_max_abs <= self.bound and self.cache_max_abs <= self.bound

    def to_json(self) -> dict:
        return {"chunk": self.chunk, "chunks": self.chunks, "prompt_len": self.prompt_len, "passed": self.passed,
                "logits_max_abs": self.logits_max_abs, "cache_max_abs": self.cache_max_abs, "bound": self.bound,
                "tolerance": CHECK_TOL[self.dtype], "first_cache_layer": self.first_layer,
                "worst_position": self.worst_position}

    def line(self) -> str:
        what = (f"prefill in {self.chunks} chunk(s) of {self.chunk} vs the whole prompt ({self.prompt_len} positions): "
                f"max |Δ logit| = {self.logits_max_abs:.3g}, max |Δ| of the cached keys and values = {self.cache_max_abs:.3g}; "
                f"bound {self.bound:.3g} ({self.dtype}: {CHECK_TOL[self.dtype]:g} × max(1, |logit|)) ")
        if self.passed:
            return what + "✓ the same computation"
        where = [] if self.worst_position is None or self.logits_max_abs <= self.bound else [f"logits worst at position {self.worst_position}"]
        if self.first_layer is not None:
            where.append(f"the cache differs from layer {self.first_layer}")
        return what + "✗ beyond the bound" + (f" ({'; '.join(where)})" if where else "")


def check_chunked(model, text=None, ids=None, chunk: int = 1, special_tokens: bool = True,
                  allow_long: bool = False) -> ChunkedCheck:
    """Prefill the (left-padded) prompt whole, then in chunks of `chunk` tokens; compare logits and caches."""
    if chunk < 1:
        raise TracerError(f"the prefill chunk must be at least 1 token, not {chunk}")
    if model.route == "encoder":
        raise TracerError(f"{model.folder.name} is an encoder-only model ({model.family}): it has no KV cache to prefill")
    b = model.batch(text, ids, pad_side="left", special_tokens=special_tokens, allow_long=allow_long)
    spec, W = model.spec, model.weights
    dec = b.inputs.decoder if model.route == "encoder-decoder" else b.inputs
    n_rows, length = dec.ids.shape
    with np.errstate(over="ignore", under="ignore"):
        whole = new_cache(spec, n_rows, length, W.dtype)
        ref = forward_cached(b.inputs, W, spec, NullRecorder(), whole)  # [batch, pos, vocab]
        parts = new_cache(spec, n_rows, length, W.dtype)
        pieces = [forward_cached(_chunk_inputs(b.inputs, model.route, s, min(s + chunk, length)), W, spec,
                                 NullRecorder(), parts) for s in range(0, length, chunk)]
    got = np.concatenate(pieces, axis=1)
    real = dec.attention_mask != 0  # [batch, pos]
    diff = np.where(real[..., None], np.abs(got.astype(np.float64) - ref.astype(np.float64)), 0.0)
    logit_max = float(diff.max()) if diff.size else 0.0
    worst = int(np.unravel_index(int(diff.argmax()), diff.shape)[1]) if diff.size else None
    dtype = "float64" if W.dtype == np.float64 else "float32"
    absmax = float(np.abs(np.where(real[..., None], ref, 0)).max()) if ref.size else 0.0
    bound = CHECK_TOL[dtype] * max(1.0, absmax)
    per_layer = [_cache_gap(a, c, real, length) for a, c in zip(whole.layers, parts.layers)]
    first = next((i for i, g in enumerate(per_layer) if g > bound), None)
    return ChunkedCheck(chunk, len(pieces), length, logit_max, bound, max(per_layer, default=0.0), first, worst, dtype)


def _chunk_inputs(inputs: ForwardInputs, route: str, start: int, stop: int) -> ForwardInputs:
    """Positions [start, stop) of the prompt (the decoder's, for an encoder-decoder model, whose encoder runs
    with the first chunk)."""
    if route == "encoder-decoder":
        return ForwardInputs(inputs.ids, inputs.attention_mask, inputs.positions, inputs.token_types,
                             _chunk_inputs(inputs.decoder, "decoder", start, stop))
    cut = lambda a: None if a is None else a[:, start:stop]  # noqa: E731
    return ForwardInputs(cut(inputs.ids), cut(inputs.attention_mask), cut(inputs.positions), cut(inputs.token_types))


def _cache_gap(whole, parts, real: np.ndarray, length: int) -> float:
    """max |Δ| of one layer's cached keys and values over the real slots: [batch, kv_heads, slot, d_head]."""
    keep = real[:, None, :length, None]
    gaps = [np.abs(np.where(keep, a[:, :, :length].astype(np.float64) - b[:, :, :length].astype(np.float64), 0.0)).max(initial=0.0)
            for a, b in ((whole.k, parts.k), (whole.v, parts.v))]
    return float(max(gaps))
