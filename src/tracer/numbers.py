"""How tracer writes a number: one format for people (the screen and the HTML page), one for programs (JSON).

JSON has no NaN or infinities: every `--json` output and every page's data writes them as the strings
"nan", "inf" and "-inf" (so a reader can tell a NaN from a missing value, which is `null`).
"""

from __future__ import annotations

import math
from numbers import Integral


def json_safe(x):
    """A value strict JSON can hold: non-finite floats as "nan" / "inf" / "-inf", NumPy scalars and arrays
    as Python numbers and lists, tuples as lists, mapping keys as strings."""
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if hasattr(x, "tolist") and type(x).__module__ == "numpy":  # ndarray or NumPy scalar, without importing NumPy
        return json_safe(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def num(x, digits: int = 3) -> str:
    """A number as a person reads it: `digits` significant digits, exponent form only below 1e-3 or from 1e5;
    a value that rounds to a whole number keeps one decimal (`1.0`) so it does not read as an integer;
    integers as integers; None as `-`."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if isinstance(x, Integral):  # bool, int and NumPy integers
        return str(int(x))
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1e5 or a < 1e-3:
        return f"{x:.{digits - 1}e}".replace("e-0", "e-").replace("e+0", "e+")
    text = f"{x:.{digits}g}"
    if "e" in text:  # 99.9 at 2 digits would read 1e+02
        return f"{x:.0f}"
    if "." not in text and a < 10 ** (digits - 1):
        text += ".0"  # 1 -> 1.0, so a rounded value does not read as an integer
    return text
