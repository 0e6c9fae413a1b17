"""Elided values of chosen steps: the first and last few entries, as nested tables of one batch row."""

from __future__ import annotations

import json

from tracer.html.common import esc, shape_text


def section(report: dict):
    values = report.get("values")
    if values is None:
        return None
    parts = [f'<p class="note">steps matching {esc(", ".join(values.get("globs", [])))}; first and last few entries '
             'along each axis</p>']
    for s in values.get("steps") or []:
        if s.get("missing"):
            body = f'<p class="note">{esc(s["missing"])}</p>'
        else:
            body = f'<pre class="json">{esc(json.dumps(s.get("data"), ensure_ascii=False))}</pre>'
        parts.append(f'<details><summary class="mono">{esc(s["name"])} {esc(shape_text(s.get("shape")))}</summary>'
                     f'<div class="body">{body}</div></details>')
    if values.get("more"):
        parts.append(f'<p class="note">{values["more"]} more steps matched (narrow --steps)</p>')
    return "values", "".join(parts)
