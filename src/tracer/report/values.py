"""Elided values of chosen steps: the first and last few entries along each axis, for one batch row."""

from __future__ import annotations

import numpy as np

from tracer.numbers import json_safe
from tracer.steps import matches

EDGE = 3  # entries kept at each end of an axis
MAX_STEPS = 12
DEFAULT_STEPS = ("embed.out", "final_norm.out", "logits")


def kept_indices(size: int, edge: int = EDGE) -> list[int]:
    """All indices when the axis is short, else the first and last `edge` (the gap is implied)."""
    if size <= 2 * edge + 1:
        return list(range(size))
    return list(range(edge)) + list(range(size - edge, size))


def elide(a: np.ndarray, edge: int = EDGE) -> tuple[list[list[int]], np.ndarray]:
    """The kept indices per axis and the sub-array they select."""
    index = [kept_indices(n, edge) for n in a.shape]
    sub = a[np.ix_(*index)] if a.ndim else a
    return index, sub


def values_report(trace, globs: tuple[str, ...], row: int) -> dict:
    """Values of the steps matching `globs` (or a few landmarks when none are given)."""
    chosen_by = list(globs) if globs else list(DEFAULT_STEPS)
    names = [s.name for s in trace.steps if matches(s.name, chosen_by)]
    out = {"globs": chosen_by, "default": not globs, "batch_row": row, "steps": [],
           "more": max(0, len(names) - MAX_STEPS)}
    for name in names[:MAX_STEPS]:
        s = trace.step(name)
        entry = {"name": name, "axes": list(s.axes), "shape": list(s.shape), "step_shape": list(s.shape), "dtype": s.dtype}
        if not s.kept:
            entry["missing"] = f"kept as statistics only; add --keep '{name}'"
            out["steps"].append(entry)
            continue
        a, axes = s.array, list(s.axes)
        if axes and axes[0] == "batch":
            a, axes = a[row], axes[1:]
            entry["selected"] = {"batch": row}
        index, sub = elide(a)
        entry.update({"axes": axes, "shape": list(a.shape), "index": index, "data": json_safe(sub.tolist())})
        out["steps"].append(entry)
    return out
