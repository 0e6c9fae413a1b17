"""Summary statistics kept for every step, even when its tensor is not."""

from __future__ import annotations

import math

import numpy as np

STAT_KEYS = ("mean", "std", "min", "max", "absmax", "nan", "inf")


def tensor_stats(a: np.ndarray) -> dict[str, float]:
    """mean, std, min, max, abs-max over finite values, plus NaN and Inf counts.

    The common all-finite case costs four passes (min, max, sum, dot) and no
    temporaries, so keeping statistics for every step stays cheap.
    """
    if a.size == 0:
        return dict.fromkeys(STAT_KEYS, 0.0)
    if a.dtype.kind not in "fc":
        a = a.astype(np.float64)
    flat = a.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi, total = float(flat.min()), float(flat.max()), float(flat.sum())
    if math.isfinite(lo) and math.isfinite(hi) and not math.isfinite(total):
        total = float(flat.sum(dtype=np.float64))  # finite values whose float32 sum overflowed
    nan = inf = 0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        nan, inf = int(np.isnan(flat).sum()), int(np.isinf(flat).sum())
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0, "absmax": 0.0, "nan": nan, "inf": inf}
        lo, hi, total = float(flat.min()), float(flat.max()), float(flat.sum())
    n = flat.size
    mean = total / n
    if flat.dtype == np.float32 and n > 4096 and max(abs(lo), abs(hi)) < 1e18:
        var = float(np.dot(flat, flat)) / n - mean * mean  # one BLAS pass; display precision
    else:
        var = float(np.var(flat, dtype=np.float64))
    return {
        "mean": mean,
        "std": math.sqrt(max(var, 0.0)),
        "min": lo,
        "max": hi,
        "absmax": max(abs(lo), abs(hi)),
        "nan": nan,
        "inf": inf,
    }
