"""--values: the first and last few values along each axis of the chosen steps, as small labelled tables."""

from __future__ import annotations

import itertools

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM, calm, heading, named_shape, num


def _with_gaps(index: list[int]) -> list[int | None]:
    """Kept indices with None where some were skipped."""
    out: list[int | None] = []
    for n, i in enumerate(index):
        if n and i != index[n - 1] + 1:
            out.append(None)
        out.append(i)
    return out


def _cell(v) -> str:
    return num(v, 3) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else str(v)


def matrix_table(data, rows: list[int], cols: list[int], row_axis: str, col_axis: str) -> Table:
    """A 2-D block of values with its indices along both edges; ⋯ marks skipped indices."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style=DIM)
    corner = f"{row_axis} ↓ {col_axis} →" if row_axis else f"{col_axis} →"
    table.add_column(Text(corner, style=DIM), justify="right", no_wrap=True)
    col_marks = _with_gaps(cols)
    for c in col_marks:
        table.add_column("⋯" if c is None else str(c), justify="right", no_wrap=True)
    pos = {c: n for n, c in enumerate(cols)}
    for r in _with_gaps(rows):
        if r is None:
            table.add_row("⋮", *["" for _ in col_marks])
            continue
        row = data[rows.index(r)]
        label = Text(str(r) if row_axis else "", style=DIM)
        table.add_row(label, *["⋯" if c is None else _cell(row[pos[c]]) for c in col_marks])
    return table


def step_values(entry: dict) -> Group:
    where = f" batch={entry['selected']['batch']}" if entry.get("selected") else ""
    title = Text(entry["name"], style="bold")
    title.append(f"{where}  {named_shape(entry['axes'], entry['shape'])}  {entry['dtype']}", style=DIM)
    if entry.get("missing"):
        return Group(title, calm(entry["missing"]))
    axes, index, data = entry["axes"], entry["index"], entry["data"]
    if len(axes) == 0:
        return Group(title, Text("  " + _cell(data)))
    if len(axes) == 1:
        return Group(title, matrix_table([data], [0], index[0], "", axes[0]))
    parts: list = [title]
    lead_axes, lead_index = axes[:-2], index[:-2]
    for combo in itertools.product(*[range(len(ix)) for ix in lead_index]):
        block = data
        for n in combo:
            block = block[n]
        if lead_axes:
            label = ", ".join(f"{a}={lead_index[k][n]}" for k, (a, n) in enumerate(zip(lead_axes, combo)))
            parts.append(Text("  " + label, style=DIM))
        parts.append(matrix_table(block, index[-2], index[-1], axes[-2], axes[-1]))
    return Group(*parts)


def render_values(values: dict, number: int | str = "v") -> Group:
    chosen = ", ".join(values["globs"])
    caption = "First and last few values along each axis; ⋯ marks what is left out."
    if values["default"]:
        caption += " A few landmark steps; choose others with --steps GLOB."
    parts: list = [heading(number, f"Values  {chosen}", caption)]
    if not values["steps"]:
        parts.append(calm("no step matches; `tracer steps` lists the names"))
    for entry in values["steps"]:
        parts.append(step_values(entry))
    if values["more"]:
        parts.append(calm(f"... and {values['more']} more matching steps; narrow --steps to see them"))
    return Group(*parts)
