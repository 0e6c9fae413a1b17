"""A line chart of a positive quantity per step on a log axis, as inline SVG (the diff's error profile)."""

from __future__ import annotations

import math

from tracer.html.common import esc, fmt

W, H = 1100, 320
LEFT, RIGHT, TOP, BOTTOM = 70, 60, 20, 90


def log_ticks(lo: float, hi: float) -> list[int]:
    """Powers of ten between lo and hi (exponents), at most ~10 of them."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    step = max(1, math.ceil((b - a) / 10))
    return list(range(a, b + 1, step))


def spaced_labels(groups, px, gap: float = 34.0) -> list[tuple[int, str]]:
    """The group labels that fit without overlapping; a block's label wins over an outer step's (embed, input)."""
    kept: list[tuple[int, str]] = []
    for x, label in groups:
        if kept and px(x) - px(kept[-1][0]) < gap:
            if "block" in label and "block" not in kept[-1][1]:
                kept[-1] = (x, label)  # block 0 right after the embedding: name the block
            continue
        kept.append((x, label))
    return kept


EXACT_ROW = 14  # px below the lowest gridline: where exactly equal steps are drawn (they have no log value)


def log_chart(points: list[dict], *, floor: float, threshold: float | None = None, marker: int | None = None,
              groups: list[tuple[int, str]] = (), y_label: str = "") -> str:
    """points: {"x": index, "y": value or None (not compared), "status", "tip"}; y <= floor (exactly equal) is
    drawn on its own "exact" row under the log axis, never on a gridline.

    `marker` is the x of the first divergence (a red vertical line); `groups` label x ranges (block starts)."""
    ys = [p["y"] for p in points if p["y"] is not None and p["y"] > floor]
    hi = max(ys + [threshold or floor * 10, floor * 10])
    lo_exp, hi_exp = math.floor(math.log10(floor)), math.ceil(math.log10(hi))
    n = max(1, len(points) - 1)
    px = lambda x: LEFT + (W - LEFT - RIGHT) * x / n  # noqa: E731
    plot = H - TOP - BOTTOM - EXACT_ROW - 6  # the log axis; the exact row sits under it

    def log_y(v):
        return TOP + plot * (1 - (math.log10(v) - lo_exp) / max(1, hi_exp - lo_exp))

    def py(y):
        return H - BOTTOM - 6 if y <= floor else log_y(y)
    out = [f'<svg class="chart" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{esc(y_label)}">']
    for e in log_ticks(10.0 ** lo_exp, 10.0 ** hi_exp):
        y = log_y(10.0 ** e)
        out.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    out.append(f'<text x="{LEFT - 6}" y="{H - BOTTOM - 2}" text-anchor="end" class="dim">exact</text>')
    out.append(f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}"/>'
               f'<line class="axis" x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}"/>')
    out.append(f'<text x="14" y="{(TOP + H - BOTTOM) / 2:.0f}" transform="rotate(-90 14 {(TOP + H - BOTTOM) / 2:.0f})" '
               f'text-anchor="middle">{esc(y_label)}</text>')
    for x, label in spaced_labels(groups, px):
        gx = px(x)
        out.append(f'<line class="grid" x1="{gx:.1f}" y1="{TOP}" x2="{gx:.1f}" y2="{H - BOTTOM}"/>'
                   f'<text x="0" y="0" transform="translate({gx + 3:.1f},{H - BOTTOM + 14}) rotate(40)">{esc(label)}</text>')
    if threshold is not None and threshold > 0:
        ty = py(threshold)
        out.append(f'<line class="tol" x1="{LEFT}" y1="{ty:.1f}" x2="{W - RIGHT}" y2="{ty:.1f}"/>'
                   f'<text x="{W - RIGHT}" y="{ty - 4:.1f}" text-anchor="end" class="dim">atol {esc(fmt(threshold))}</text>')
    path, pen = [], "M"
    for p in points:
        if p["y"] is None or p["y"] <= floor:  # not compared, or exact (a mask, the ids): no line through it
            pen = "M"
            continue
        path.append(f"{pen}{px(p['x']):.1f},{py(p['y']):.1f}")
        pen = "L"
    if path:
        out.append(f'<path class="series" d="{" ".join(path)}"/>')
    if marker is not None:
        mx = px(marker)
        out.append(f'<line class="first" x1="{mx:.1f}" y1="{TOP}" x2="{mx:.1f}" y2="{H - BOTTOM}"/>'
                   f'<text x="{mx + 4:.1f}" y="{H - BOTTOM - 6}" class="first-label">first divergence</text>')
    for p in points:
        if p["y"] is None:
            continue
        css = "exact" if p["y"] <= floor and p["status"] == "pass" else p["status"]
        out.append(f'<circle class="{esc(css)}" cx="{px(p["x"]):.1f}" cy="{py(p["y"]):.1f}" r="3.5">'
                   f'<title>{esc(p["tip"])}</title></circle>')
    out.append("</svg>")
    return "".join(out)
