"""One attention row worked by hand: scores -> exponentials -> sum -> weights, then masked two ways.

The stable softmax subtracts the row maximum first: exp(s - max) never overflows, and the
weights are the same because softmax ignores a constant shift. Masking the right way removes
the blocked keys BEFORE the softmax (they get -inf, exp(-inf) = 0) and renormalises over the
rest. The wrong way takes the softmax of everything and deletes blocked weights afterwards:
that row no longer sums to 1 (pitfall P3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.errors import TracerError


@dataclass(frozen=True)
class RowSoftmax:
    """softmax over the keys in `over` (others are blocked: weight exactly 0)."""

    scores: list[float]
    over: list[bool]  # the keys that take part
    max: float  # the max over the keys that take part
    shifted: list[float | None]  # s - max (None for blocked keys)
    exps: list[float]  # exp(s - max), 0 for blocked keys
    total: float
    weights: list[float]

    def to_json(self) -> dict:
        return {"max": self.max, "shifted": self.shifted, "exp": self.exps, "sum": self.total,
                "weights": self.weights, "weights_sum": float(sum(self.weights))}


@dataclass(frozen=True)
class WorkedRow:
    scores: list[float]
    tokens: list[str] | None
    query: int | None
    keep: list[bool]
    unmasked: RowSoftmax
    masked: RowSoftmax  # blocked keys removed before the softmax, then renormalised
    wrong_way: list[float]  # softmax of everything, blocked weights deleted afterwards
    wrong_sum: float

    def to_json(self) -> dict:
        return {"mode": "row", "scores": self.scores, "tokens": self.tokens, "query": self.query,
                "keep": [int(k) for k in self.keep], "unmasked": self.unmasked.to_json(),
                "masked": self.masked.to_json(),
                "wrong_way": {"weights": self.wrong_way, "sum": self.wrong_sum,
                              "note": "softmax first, then blocked weights deleted: the row no longer sums to 1"}}


def softmax_by_hand(scores: np.ndarray, over: np.ndarray | None = None) -> RowSoftmax:
    """Stable softmax of one row over the keys in `over` (default: all)."""
    s = np.asarray(scores, dtype=np.float64)  # [K]
    over = np.ones(s.shape, dtype=bool) if over is None else np.asarray(over, dtype=bool)
    if not over.any():
        raise TracerError("every key is blocked: the row has nothing to attend to (frameworks give NaN, zeros or uniform)")
    top = float(s[over].max())
    shifted = np.where(over, s - top, -np.inf)
    exps = np.exp(shifted)  # exp(-inf) = 0 for blocked keys
    total = float(exps.sum())
    weights = exps / total
    return RowSoftmax(
        scores=s.tolist(), over=over.tolist(), max=top,
        shifted=[float(x) if o else None for x, o in zip(s - top, over)],
        exps=exps.tolist(), total=total, weights=weights.tolist(),
    )


def causal_keep_row(kv_len: int, query: int, past: int = 0) -> np.ndarray:
    """[K]: keys a query at position `query` may see under a causal mask (key j <= query + past)."""
    if not 0 <= query + past < kv_len:
        raise TracerError(f"--query {query} is outside the row's {kv_len} keys")
    return np.arange(kv_len) <= query + past


def work_row(scores, tokens: list[str] | None = None, query: int | None = None,
             keep=None) -> WorkedRow:
    """The whole worked example. keep: explicit [K] keep flags; else causal at `query`; else everything kept."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise TracerError("--row takes one row of scores, e.g. --row 1.2,2.0,0.4")
    if not np.isfinite(s).all():
        raise TracerError("--row scores must be finite numbers")
    if tokens is not None and len(tokens) != s.size:
        raise TracerError(f"--tokens has {len(tokens)} labels for {s.size} scores")
    if keep is not None:
        k = np.asarray(keep, dtype=bool)
        if k.shape != s.shape:
            raise TracerError(f"--row-keep has {k.size} flags for {s.size} scores")
    elif query is not None:
        k = causal_keep_row(s.size, query)
    else:
        k = np.ones(s.shape, dtype=bool)
    unmasked = softmax_by_hand(s)
    masked = softmax_by_hand(s, k)
    wrong = np.where(k, np.asarray(unmasked.weights), 0.0)
    return WorkedRow(scores=s.tolist(), tokens=tokens, query=query, keep=k.tolist(), unmasked=unmasked,
                     masked=masked, wrong_way=wrong.tolist(), wrong_sum=float(wrong.sum()))
