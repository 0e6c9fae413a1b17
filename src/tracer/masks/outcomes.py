"""What a fully masked row turns into, per backend, and the weights a convention's softmax produces.

A row with no kept key has no right answer, so frameworks differ (reference §1, P4/P5):
-inf with a naive softmax gives NaN, a safe softmax gives zeros, a finite fill gives uniform
weights (the fill swamps the scores) or, when the fill is precise enough, the unmasked
distribution (softmax is shift invariant).
"""

from __future__ import annotations

import numpy as np

from tracer.masks.literal import numpy_dtype
from tracer.masks.result import MaskResult

OTHER_BACKENDS = {
    "torch SDPA (torch >= 2.5)": "zeros",
    "torch MHA need_weights=True / fast path": "NaN",
    "transformers eager": "uniform",
    "JAX / Flax": "uniform",
    "Keras 3": "zeros",
    "FlashAttention": "zeros",
    "llama.cpp CPU": "NaN",
    "tracer": "zeros (flagged)",
}


def ulp(value: float, score_dtype: str) -> float:
    """Spacing of the score dtype at |value|: how coarsely a score added to the fill survives."""
    dt = numpy_dtype(score_dtype)
    v = np.array(abs(value), dtype=dt)
    below = np.nextafter(v, np.array(0, dtype=dt))  # toward 0: never overflows, even at finfo.max
    return float(v.astype(np.float64) - below.astype(np.float64))


def soft_row_outcome(fill: float, fill_mode: str, score_dtype: str) -> str:
    """A row whose every key carries the same finite fill."""
    if fill_mode == "replace":
        return "uniform"
    # Adding scores of size ~1 to the fill: if the dtype cannot resolve them, every entry rounds to the fill.
    return "uniform" if ulp(fill, score_dtype) >= 1.0 else "unmasked"


def fully_masked_row_outcome(result: MaskResult, b: int, h: int, q: int) -> str:
    if result.nan_rows[b, h, q]:
        return "nan"
    if result.post_zero:
        return "zeros"
    soft = result.soft[b, h, q]
    if not soft.any():
        return result.hard_outcome
    fills = np.unique(result.fill[b, h, q][soft])
    if fills.size > 1 and result.fill_mode == "add":
        return "skewed"  # the least negative fill takes the weight
    return soft_row_outcome(float(fills[0]), result.fill_mode, result.score_dtype)


def expected_weights(result: MaskResult, scores: np.ndarray) -> np.ndarray:
    """float64 [B,H,Q,K]: the attention weights this convention's softmax gives for these scores.

    Additions happen in the score dtype (so finfo.min + score rounds like the framework's), the
    softmax in float64. Rows of only hard blocks follow `hard_outcome`; NaN-poisoned rows are NaN.
    """
    dt = numpy_dtype(result.score_dtype)
    s = np.broadcast_to(np.asarray(scores), result.score_shape)
    s_dt = s.astype(dt)
    bias = np.zeros(result.score_shape) if result.bias is None else result.bias
    with np.errstate(over="ignore", invalid="ignore"):
        kept = (s_dt + bias.astype(dt)).astype(np.float64)
        if result.fill_mode == "replace":
            softv = np.broadcast_to(result.fill, result.score_shape).astype(dt).astype(np.float64)
        else:
            softv = (s_dt + result.fill.astype(dt)).astype(np.float64)
    x = np.where(result.keep, kept, np.where(result.soft, softv, -np.inf))
    m = x.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)  # no finite entry at all: a row of hard blocks
    e = np.exp(x - np.where(empty, 0.0, m))
    e = np.where(np.isfinite(x), e, 0.0)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = e / total
    hard_row = {"zeros": 0.0, "nan": np.nan, "uniform": 1.0 / result.score_shape[-1], "unspecified": np.nan}
    w = np.where(empty, hard_row.get(result.hard_outcome, np.nan), w)
    if result.post_zero:
        w = np.where(result.keep, w, 0.0)
    w = np.where(result.nan_rows[..., None], np.nan, w)
    return w


def softmax(x: np.ndarray) -> np.ndarray:
    """Plain float64 softmax over the last axis (the unmasked reference)."""
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
