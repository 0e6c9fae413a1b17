"""Elided values of chosen steps: the first and last few entries along each axis, as tables of one batch row."""

from __future__ import annotations

import itertools

from tracer.html.common import esc, fmt, shape_text, uniform

MAX_TABLES = 12  # 2-D slices shown per step


def _cells(texts: list[str], index: list[int]) -> str:
    out = []
    for k, (i, v) in enumerate(zip(index, texts)):
        if k and i != index[k - 1] + 1:
            out.append('<td class="dim">…</td>')
        out.append(f'<td class="num">{esc(v)}</td>')
    return "".join(out)


def table_2d(data, axes: list[str], index: list[list[int]]) -> str:
    """rows = the first of the two axes, columns = the second; absolute indices, … where entries are skipped."""
    rows_ix, cols_ix = index
    head = "".join(('<th class="dim">…</th>' if k and j != cols_ix[k - 1] + 1 else "") + f'<th class="num">{j}</th>'
                   for k, j in enumerate(cols_ix))
    flat = uniform([v for row in data for v in row])  # one number format for the whole table
    width = len(cols_ix)
    texts = [flat[r * width:(r + 1) * width] for r in range(len(data))]
    body = []
    for k, (i, row) in enumerate(zip(rows_ix, texts)):
        if k and i != rows_ix[k - 1] + 1:
            body.append(f'<tr><th class="dim">⋮</th><td colspan="{len(cols_ix) + 1}"></td></tr>')
        body.append(f'<tr><th class="num">{i}</th>{_cells(row, cols_ix)}</tr>')
    return (f'<table class="values"><thead><tr><th class="dim">{esc(axes[0])} \\ {esc(axes[1])}</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def step_tables(s: dict) -> str:
    data, axes, index = s.get("data"), list(s.get("axes") or []), s.get("index") or []
    if not index:  # a scalar
        return f'<p class="mono">{esc(fmt(data) if not isinstance(data, str) else data)}</p>'
    if len(index) == 1:
        return table_2d([data], ["", axes[0] if axes else ""], [[0], index[0]]).replace("<th class=\"num\">0</th>", "<th></th>", 1)
    lead = list(itertools.product(*[range(len(ix)) for ix in index[:-2]]))
    parts = []
    for combo in lead[:MAX_TABLES]:
        block = data
        for k in combo:
            block = block[k]
        where = ", ".join(f"{a}={index[d][k]}" for d, (a, k) in enumerate(zip(axes, combo)))
        parts.append((f'<p class="dim mono">[{esc(where)}, :, :]</p>' if where else "") + table_2d(block, axes[-2:], index[-2:]))
    if len(lead) > MAX_TABLES:
        parts.append(f'<p class="note">{len(lead) - MAX_TABLES} more slices (--json has them)</p>')
    return "".join(parts)


def section(report: dict):
    values = report.get("values")
    if values is None:
        return None
    parts = [f'<p class="note">steps matching {esc(", ".join(values.get("globs", [])))}, batch row {values.get("batch_row")}: '
             'the first and last few entries along each axis, with their indices</p>']
    for n, s in enumerate(values.get("steps") or []):
        body = f'<p class="note">{esc(s["missing"])}</p>' if s.get("missing") else step_tables(s)
        parts.append(f'<details{" open" if n < 2 else ""}><summary class="mono">{esc(s["name"])} {esc(shape_text(s.get("step_shape") or s.get("shape")))}'
                     f'</summary><div class="body">{body}</div></details>')
    if values.get("more"):
        parts.append(f'<p class="note">{values["more"]} more steps matched (narrow --steps)</p>')
    return "values", "".join(parts)
