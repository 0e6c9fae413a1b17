"""One number format per table column, chosen from all its values, so a column reads down evenly.

`1.000` above `4.6e-07`, or `19.6` above `5.05` above `4.4`, makes a reader compare
formats instead of numbers. A column of probabilities is fixed-point when every
value shows in three decimals, else all in exponent form; a column of logits has
the same number of decimals on every row.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

PROB_FLOOR = 1e-3  # below this a probability reads 0.000 in fixed point


def prob_column(values: Iterable[float | None]) -> Callable[[float | None], str]:
    """`0.412` on every row when all are >= 0.001 (or exactly 0), `0.4123` when all are >= 0.0001;
    otherwise `4.1e-01` on every row."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    smallest = min(finite, default=1.0)
    decimals = 3 if smallest >= PROB_FLOOR else 4 if smallest >= PROB_FLOOR / 10 else None

    def fmt(v: float | None) -> str:
        if v is None:
            return "-"
        return f"{v:.{decimals}f}" if decimals is not None else f"{v:.1e}"

    return fmt


def value_column(values: Iterable[float | None], digits: int = 3) -> Callable[[float | None], str]:
    """Logits and scores: the same number of decimals on every row, enough for `digits` significant
    digits on the largest magnitude (at most 4 decimals); exponent form for every row past 1e5."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    big = max(finite, default=0.0)
    if big >= 1e5:
        return lambda v: "-" if v is None else f"{v:.2e}"
    whole = len(str(int(big))) if big >= 1 else 1
    decimals = min(max(digits - whole, 1), 4)
    return lambda v: "-" if v is None else (f"{v:.{decimals}f}" if math.isfinite(v) else str(v))
