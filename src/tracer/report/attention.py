"""Attention weights of one layer for one batch row: per head a [q_len, kv_len] table whose rows are checked to sum to 1."""

from __future__ import annotations

import numpy as np

from tracer.errors import TracerError

ROW_SUM_TOLERANCE = 1e-4  # float32 softmax over a few thousand keys stays well inside this


def resolve_head(head: int | None, n_heads: int) -> list[int]:
    if head is None:
        return list(range(n_heads))
    chosen = head + n_heads if head < 0 else head
    if not 0 <= chosen < n_heads:
        raise TracerError(f"`head` {head} is out of range: the model has {n_heads} heads (0..{n_heads - 1})")
    return [chosen]


def row_sums_check(weights: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, float, bool]:
    """Row sums of [q, kv] weights, the largest deviation from what they should be, and whether all pass.

    A row with at least one key to attend to must sum to 1; a fully masked row has all-zero weights.
    """
    sums = weights.astype(np.float64).sum(axis=-1)  # [q]
    expected = keep.any(axis=-1).astype(np.float64)  # [q]
    error = float(np.abs(sums - expected).max()) if sums.size else 0.0
    return sums, error, error <= ROW_SUM_TOLERANCE


def attention_report(trace, spec: dict, row: int, layer: int, head: int | None, keep_grid: list[list[bool]] | None,
                     stack: str = "", part: str = "attn") -> dict:
    """stack: "", "encoder" or "decoder"; part: "attn" (self) or "cross_attn" (decoder rows, encoder columns)."""
    name = f"{stack + '.' if stack else ''}blocks.{layer}.{part}.weights"
    out = {"layer": layer, "step": name, "batch_row": row, "heads": [], "n_heads": spec["n_heads"],
           "n_kv_heads": spec["n_kv_heads"], "stack": stack, "part": part}
    heads = resolve_head(head, spec["n_heads"])
    out["selected"] = "all" if head is None else heads[0]
    if name not in trace:
        out["missing"] = f"{name} is not in this trace"
        return out
    step = trace.step(name)
    if not step.kept:
        out["missing"] = f"{name} was kept as statistics only; add --keep '{name}' to see the weights"
        return out
    w = step.array[row]  # [heads, q_len, kv_len]
    keep = np.asarray(keep_grid, dtype=bool) if keep_grid is not None else np.ones(w.shape[1:], dtype=bool)
    group = spec["n_heads"] // spec["n_kv_heads"]
    worst = 0.0
    for h in heads:
        sums, error, ok = row_sums_check(w[h], keep)
        worst = max(worst, error)
        out["heads"].append({"head": h, "kv_head": h // group, "weights": w[h].tolist(), "row_sums": sums.tolist(),
                             "rows_sum_to_one": ok, "max_row_error": error})
    out["blocked"] = (~keep).tolist()
    out["max_row_error"] = worst
    out["rows_sum_to_one"] = all(h["rows_sum_to_one"] for h in out["heads"])
    out["fully_masked_rows"] = [int(q) for q in np.flatnonzero(~keep.any(axis=-1))]
    return out
