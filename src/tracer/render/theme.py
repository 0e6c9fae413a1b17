"""Shared look of the run views: section headings, number and shape formatting, the heat scale.

Colour carries meaning only: special tokens, partial-byte pieces, blocked mask
cells, the weight heat scale, warnings. Everything coloured is also written.
"""

from __future__ import annotations

import math

from rich.color import Color
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.rule import Rule
from rich.style import Style
from rich.text import Text

from tracer.numbers import num  # noqa: F401  (the one number format, shared with the HTML page)

SPECIAL = "magenta"
PARTIAL = "yellow"
WARN = "bold red"
CAUTION = "yellow"  # results to read with care (positions past max_position_embeddings), not errors
DIM = "dim"
OK = "green"
KEEP_CELL = "■"
BLOCK_CELL = "·"


def heading(number: int | str, title: str, caption: str | None = None):
    """A rule with the section title, and one line saying what the section teaches."""
    rule = Rule(Text(f" {number} · {title} ", style="bold"), align="left", style=DIM, characters="─")
    if not caption:
        return rule
    return Group(rule, Text(caption, style=DIM))


def caution_lines(warnings: list[dict] | None, indent: str = "") -> list[Text]:
    """One yellow `warning: ...` line per recorded warning (plain text under NO_COLOR)."""
    return [Text(f"{indent}warning: {w['message']}", style=CAUTION) for w in warnings or ()]


def calm(message: str) -> Text:
    """One quiet line for something a view cannot show (a step kept as statistics only, ...)."""
    return Text("  " + message, style=DIM)


def prob(p: float) -> str:
    """A probability for reading: 0.4123 -> 0.412, tiny ones in exponent form."""
    if p >= 0.001 or p == 0:
        return f"{p:.3f}"
    return f"{p:.1e}"


def stats_text(stats: dict, dtype: str, shape: list[int] | tuple[int, ...] = (), blocked: bool = False,
               stacked: bool = False) -> Text:
    """`μ -0.01 σ 0.98 [-3.1, 4.2]` (the range on a second line when `stacked`); integers as a range;
    booleans as a count; nan/inf flagged."""
    t = Text()
    if dtype == "bool":
        size = math.prod(shape) if shape else 0
        t.append(f"{whole(stats.get('mean', 0.0) * size)} of {size} True")
    elif dtype.startswith(("int", "uint")):
        t.append(f"[{whole(stats['min'])}, {whole(stats['max'])}]")
    elif shape and (stats.get("nan") or 0) + (stats.get("inf") or 0) >= math.prod(shape):
        t.append("no finite value")  # the statistics of the finite values would read μ 0 σ 0 [0, 0]
    else:
        t.append(f"μ {num(stats['mean'], 2)} σ {num(stats['std'], 2)}" + ("\n" if stacked else " "))
        t.append(f"[{num(stats['min'], 2)}, {num(stats['max'], 2)}]")
    if stats.get("inf"):
        t.append(f" {stats['inf']} -inf" if blocked else f" {stats['inf']} inf", style=DIM if blocked else WARN)
    if stats.get("nan"):
        t.append(f" {stats['nan']} NaN", style=WARN)
    return t


def whole(x: float) -> str:
    """A count or an integer statistic: `12`; a non-finite one as `nan` / `inf`, never a crash."""
    return str(round(x)) if math.isfinite(x) else num(x)


def named_shape(axes, shape) -> str:
    """[batch=1, heads=4, q_len=3, d_head=16]"""
    return "[" + ", ".join(f"{a}={n}" for a, n in zip(axes, shape)) + "]"


def bare_shape(shape) -> str:
    return "[" + ",".join(str(n) for n in shape) + "]"


def heat_style(w: float) -> Style:
    """Background from dark to bright as the weight goes 0 -> 1; text stays readable on both ends."""
    w = min(max(w, 0.0), 1.0) if math.isfinite(w) else 0.0  # a NaN weight is written as text; its cell stays dark
    lo, hi = (28, 32, 48), (255, 176, 59)
    rgb = tuple(int(a + (b - a) * math.sqrt(w)) for a, b in zip(lo, hi))
    fg = "black" if w > 0.35 else "grey82"
    return Style(bgcolor=Color.from_rgb(*rgb), color=fg)


def piece_text(token: str, special: bool = False, partial: bool = False, pad: bool = False) -> Text:
    style = DIM if pad else SPECIAL if special else PARTIAL if partial else ""
    return Text(token, style=style)


def short(label: str, width: int) -> str:
    """Cut a label to `width` cells with an ellipsis."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(label) <= width:
        return label
    return set_cell_size(label, width - 1) + "…"


class PairsLine:
    """`label value` pairs flowing over as many lines as the width needs; a pair is never split."""

    def __init__(self, pairs: list[tuple[str, str]], sep: str = "  ·  "):
        self.pairs, self.sep = pairs, sep

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line = Text()
        for label, value in self.pairs:
            pair = Text.assemble((label + " ", DIM), value)
            if line.cell_len and line.cell_len + len(self.sep) + pair.cell_len > options.max_width:
                yield line
                line = Text()
            if line.cell_len:
                line.append(self.sep, style=DIM)
            line.append_text(pair)
        if line.cell_len:
            yield line


def rows_phrase(rows: list[int], noun: str = "row") -> str:
    """'row 1' or 'rows 8, 9, 10'."""
    return f"{noun}{'s' if len(rows) != 1 else ''} {', '.join(map(str, rows))}"
