"""One heatmap as inline SVG: a rect per cell with its value in a <title> (the hover tooltip), real text labels.

Labels are SVG <text>, not characters counted into monospace cells, so CJK and
byte-level pieces line up at any width. Rows and columns carry their absolute
indices; a jump in the indices (a window of a long prompt) is drawn as a gap.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tracer.html.common import clip_label, esc, fmt, ink_for, ramp, text_width

FONT = 11.0
GAP = 10.0  # px between two shown indices that are not neighbours
MAX_LABEL = 150.0
SMALL_FONT = 10.5  # px: the labels of dense maps stay readable (9.5 px rendered as ~7 px high glyphs)


def cell_size(n_rows: int, n_cols: int) -> float:
    n = max(n_rows, n_cols)
    return 38.0 if n <= 8 else 24.0 if n <= 16 else 16.0 if n <= 32 else 12.0


def n(x: float) -> str:
    """A coordinate, short: most are whole pixels."""
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def offsets(index: Sequence[int], size: float) -> list[float]:
    """Left/top edge of each shown cell, with a gap wherever the absolute index jumps."""
    out, at = [], 0.0
    for k, i in enumerate(index):
        if k and i != index[k - 1] + 1:
            at += GAP
        out.append(at)
        at += size
    return out


def heatmap_svg(values: Sequence[Sequence[float | None]], row_labels: Sequence[str], col_labels: Sequence[str], *,
                tip: Callable[[int, int, float | None], str], row_index: Sequence[int] | None = None,
                col_index: Sequence[int] | None = None, vmax: float = 1.0, show_values: bool | None = None,
                cell: float | None = None, caption: str = "", attrs: dict | None = None,
                cell_text: Callable[[int, int, float | None], str] | None = None, number_rows: bool = True,
                gamma: float = 1.0) -> str:
    """values[r][c] in [0, vmax] (None = blocked, drawn grey). `tip(r, c, v)` is the hover text of a cell.

    Colour is (v / vmax) ** gamma: gamma 0.5 lifts the small weights of long rows out of the white."""
    n_r, n_c = len(values), len(values[0]) if values else 0
    row_index = list(row_index) if row_index is not None else list(range(n_r))
    col_index = list(col_index) if col_index is not None else list(range(n_c))
    size = cell or cell_size(n_r, n_c)
    show_values = size >= 30 if show_values is None else show_values
    font = FONT if size >= 14 else SMALL_FONT
    rows = [clip_label(f"{i} {t}" if number_rows else t, MAX_LABEL, font) for i, t in zip(row_index, row_labels)]
    cols = [clip_label(f"{i} {t}", MAX_LABEL, font) for i, t in zip(col_index, col_labels)]
    left = round(max((text_width(t, font) for t in rows), default=0) + 10)
    top = round(max((text_width(t, font) for t in cols), default=0) * 0.82 + 16)
    xs, ys = offsets(col_index, size), offsets(row_index, size)
    width = left + (xs[-1] + size if xs else 0) + 24
    height = top + (ys[-1] + size if ys else 0) + 6
    extra = "".join(f' {esc(k)}="{esc(v)}"' for k, v in (attrs or {}).items())
    small = " small" if font != FONT else ""
    out = [f'<svg class="heatmap{small}" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(caption)}"{extra}>']

    out.append('<g class="col-labels">')
    for c, label in enumerate(cols):
        x, y = left + xs[c] + size / 2 + 3, top - 5
        out.append(f'<text x="0" y="0" transform="translate({x:.1f},{y:.1f}) rotate(-55)">{esc(label)}</text>')
    out.append('</g><g class="row-labels">')
    for r, label in enumerate(rows):
        out.append(f'<text x="{left - 6:.1f}" y="{top + ys[r] + size / 2 + 4:.1f}" text-anchor="end">{esc(label)}</text>')
    out.append('</g><g class="cells">')
    for r in range(n_r):
        for c in range(n_c):
            v = values[r][c]
            x, y = left + xs[c], top + ys[r]
            tip_text = esc(tip(r, c, v))
            if v is None:
                out.append(f'<rect class="cell blocked" x="{n(x)}" y="{n(y)}" width="{n(size)}" height="{n(size)}">'
                           f'<title>{tip_text}</title></rect>')
                continue
            t = (max(0.0, v) / vmax) ** gamma if vmax else 0.0
            out.append(f'<rect class="cell" x="{n(x)}" y="{n(y)}" width="{n(size)}" height="{n(size)}" '
                       f'fill="{ramp(t)}"><title>{tip_text}</title></rect>')
            if show_values:
                text = cell_text(r, c, v) if cell_text else fmt(v, 2)
                dark = " on-dark" if ink_for(t) == "#ffffff" else ""
                out.append(f'<text class="v{dark}" x="{x + size / 2:.1f}" y="{y + size / 2 + 3.5:.1f}" '
                           f'text-anchor="middle">{esc(text)}</text>')
    out.append("</g>")
    out.extend(_gap_marks(left, top, xs, ys, col_index, row_index, size))
    out.append("</svg>")
    return "".join(out)


def _gap_marks(left, top, xs, ys, col_index, row_index, size) -> list[str]:
    """A dotted line and an ellipsis where indices were skipped."""
    marks = []
    for k in range(1, len(col_index)):
        if col_index[k] != col_index[k - 1] + 1:
            x = left + xs[k] - GAP / 2
            marks.append(f'<line class="gap" x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{top + ys[-1] + size:.1f}"/>')
    for k in range(1, len(row_index)):
        if row_index[k] != row_index[k - 1] + 1:
            y = top + ys[k] - GAP / 2
            marks.append(f'<line class="gap" x1="{left:.1f}" y1="{y:.1f}" x2="{left + xs[-1] + size:.1f}" y2="{y:.1f}"/>')
    return marks


def legend(vmax: float = 1.0, label: str = "", gamma: float = 1.0) -> str:
    """A small colour bar from 0 to vmax (a CSS gradient over the same ramp); a gamma scale names its middle."""
    stops = ", ".join(ramp(t) for t in (0, 0.25, 0.5, 0.75, 1))
    middle = f'<span class="dim">(middle = {esc(fmt(vmax * 0.5 ** (1 / gamma), 2))})</span>' if gamma != 1.0 else ""
    return (f'<span class="legend"><span>0</span><span class="bar" style="background:linear-gradient(to right, {stops})">'
            f'</span><span>{esc(fmt(vmax, 2))}</span> <span class="dim">{esc(label)}</span> {middle}</span>')
