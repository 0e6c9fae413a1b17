"""How `tracer diff` writes its numbers: dB, gains, cosines near 1, and one format per column."""

from __future__ import annotations

import math


def fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf"
    return f"{x:.2e}" if abs(x) < 1e-2 or abs(x) >= 1e4 else f"{x:.4g}"


def fmt_cos(x: float | None) -> str:
    """Near 1 the digits that matter are in 1 - cos: 0.99999999712 reads as 1-2.9e-09."""
    if x is None:
        return ""
    if x == 1.0:
        return "1"
    return f"1-{1.0 - x:.1e}" if x > 0.9999 else f"{x:.4f}"


def fmt_db(x: float | None, exact_word: str = "exact") -> str:
    if x is None:
        return ""
    if x == -math.inf:
        return exact_word
    if x == math.inf:
        return "inf"
    return f"{x:.1f}"


def fmt_gain(x: float | None) -> str:
    if x is None:
        return ""
    if x == math.inf:
        return "new"
    if x == -math.inf:
        return "→exact"
    if x == 0:
        return "+0"
    return f"{x:+.1f} dB"


def shape_text(shape) -> str:
    return "" if shape is None else "[" + ", ".join(str(n) for n in shape) + "]"


def prob_change_format(values: list[float], signed: bool = False):
    """One format for a column of probabilities or their changes: 3 decimals when every nonzero value
    shows in them, else 2 significant digits in exponent form, so 4.6e-07 -> 4.7e-07 (+1.2e-08) is not 0.000."""
    nonzero = [abs(v) for v in values if v]
    sign = "+" if signed else ""
    if all(v >= 5e-3 for v in nonzero):
        return lambda v: f"{v:{sign}.3f}"
    return lambda v: f"{v:{sign}.1e}"


def error_column(values: list[float | None]):
    """One format down a column of errors: exponent form on every row once any nonzero value needs it
    (below 0.01 or from 1e4), else the same decimals on every row; an exact 0 stays `0`."""
    nonzero = [abs(v) for v in values if v is not None and v != 0 and math.isfinite(v)]
    decimals = max(4 - len(str(int(max(nonzero, default=0.0)))), 1)
    # exponent form when a value needs it, or when the decimals the largest leaves would show the smallest with
    # fewer than 2 significant digits (0.0185 beside 4500.0 read `0.0`)
    if any(v < 1e-2 or v >= 1e4 for v in nonzero) or any(v * 10 ** decimals < 10 for v in nonzero):
        return lambda v: "" if v is None else "0" if v == 0 else "inf" if math.isinf(v) else f"{v:.2e}"
    return lambda v: "" if v is None else "0" if v == 0 else "inf" if math.isinf(v) else f"{v:.{decimals}f}"
