"""Small helpers every section shares: escaping, number formats, label widths, colours."""

from __future__ import annotations

import html
import math
import unicodedata

from tracer.numbers import num


def esc(value) -> str:
    """Every string that reaches the page goes through here (quotes too: it may land in an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt(x, digits: int = 4) -> str:
    """A number as a person reads it: the screen's format (tracer.numbers.num), so both print one number alike."""
    return "–" if x is None else num(x, digits)


def uniform(values, decimals: int = 3) -> list[str]:
    """One format for a whole column: fixed decimals when every value reads well that way, else scientific."""
    finite = [abs(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    nonzero = [v for v in finite if v]
    fixed = not nonzero or (min(nonzero) >= 10 ** -decimals and max(nonzero) < 1e6)
    out = []
    for v in values:
        if v is None or isinstance(v, str) or not math.isfinite(v):
            out.append(fmt(v))
        else:
            out.append(f"{v:.{decimals}f}" if fixed else f"{v:.{max(1, decimals - 1)}e}")
    return out


def text_width(text: str, size: float = 11.0) -> float:
    """Rough rendered width in px of a label: wide (CJK) characters take a full em, others about 0.6 em."""
    return sum(size if unicodedata.east_asian_width(ch) in ("W", "F") else 0.62 * size for ch in text)


def clip_label(text: str, max_px: float, size: float = 11.0) -> str:
    """Shorten a label to fit, ending with an ellipsis (the full text stays in the tooltip)."""
    if text_width(text, size) <= max_px:
        return text
    out = ""
    for ch in text:
        if text_width(out + ch + "…", size) > max_px:
            break
        out += ch
    return out + "…"


# A sequential ramp (light to dark blue), in a few stops, interpolated in RGB.
_RAMP = [(0.0, (247, 251, 255)), (0.25, (198, 219, 239)), (0.5, (107, 174, 214)), (0.75, (33, 113, 181)),
         (1.0, (8, 48, 107))]


def ramp(t: float) -> str:
    """0..1 -> a fill colour from the ramp (clamped)."""
    t = 0.0 if not math.isfinite(t) else min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in zip(_RAMP, _RAMP[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(c0, c1))
    return "#08306b"


def ink_for(t: float) -> str:
    """Text colour readable on ramp(t)."""
    return "#ffffff" if t > 0.55 else "#1b1f24"


def shape_text(shape) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]" if shape is not None else "–"
