"""What a patch or an ablation changed: the first step that moved, and the next-token distribution before/after."""

from __future__ import annotations

import math

import numpy as np

from tracer.report.distribution import distribution_at, vocab_entry


def first_changed(base, patched) -> str | None:
    """The first step, in the engine's order, whose value is not bit-identical to the unpatched run's."""
    for step in patched.steps:
        if step.name not in base:
            continue
        a, b = base.step(step.name), step
        if a.kept and b.kept:
            if not np.array_equal(a.array, b.array, equal_nan=True):
                return step.name
        elif a.stats != b.stats:
            return step.name
    return None


def intervention_report(base, patched, row: int, position: int, k: int, vocab) -> dict:
    """Top-k before and after at one position; each token of either top-k with its probability change; KL."""
    out = {"changes": patched.meta.get("intervention", []), "first_changed": first_changed(base, patched),
           "batch_row": row, "position": position, "k": k}
    if "probs" not in patched and "logits" not in patched and "pooled" in patched:  # no head: the sentence vector
        a, b = (t["pooled"][row].astype(np.float64) for t in (base, patched))
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        out["pooled"] = {"max_abs_change": float(np.abs(b - a).max()),
                         "cosine": float(a @ b / norms) if norms > 0 else None}
        return out
    before, _, missing = distribution_at(base, row, position)
    after, _, _ = distribution_at(patched, row, position)
    if before is None or after is None:
        out["missing"] = missing or "no next-token distribution"
        return out
    p, q = before.astype(np.float64), after.astype(np.float64)
    top_before = [int(i) for i in np.argsort(-p, kind="stable")[:k]]
    top_after = [int(i) for i in np.argsort(-q, kind="stable")[:k]]
    ranks_b, ranks_a = _ranks(p), _ranks(q)
    tokens = []
    for tid in dict.fromkeys(top_before + top_after):
        entry = vocab_entry(tid, vocab)
        entry.update({"prob_before": float(p[tid]), "prob_after": float(q[tid]), "change": float(q[tid] - p[tid]),
                      "rank_before": int(ranks_b[tid]), "rank_after": int(ranks_a[tid])})
        tokens.append(entry)
    out.update({"top_before": top_before, "top_after": top_after, "tokens": tokens,
                "top1_changed": top_before[0] != top_after[0], "kl_nats": _kl(p, q),
                "max_abs_prob_change": float(np.abs(q - p).max())})
    return out


def _ranks(p: np.ndarray) -> np.ndarray:
    order = np.argsort(-p, kind="stable")
    ranks = np.empty_like(order)
    ranks[order] = np.arange(1, len(p) + 1)
    return ranks


def _kl(p: np.ndarray, q: np.ndarray) -> float | None:
    """KL(before || after) in nats; None when a token the unpatched run gives mass gets none (infinite)."""
    live = p > 0
    if (q[live] <= 0).any():
        return None
    value = float((p[live] * (np.log(p[live]) - np.log(q[live]))).sum())
    return max(value, 0.0) if math.isfinite(value) else None
