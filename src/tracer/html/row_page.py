"""`tracer mask --row ... --export-html`: the article's widget on the given numbers (one row, one query).

The same row-by-hand panel as the run page, holding the row the command worked (float64, as the command
computes it), with the causal part (--query) or the explicit flags (--row-keep) as its mask.
"""

from __future__ import annotations

import numpy as np

from tracer.html.common import esc
from tracer.html.live import row_panel
from tracer.html.page import document
from tracer.report.interactive import PART_REASONS, b64, bits


def row_data(worked) -> dict:
    """The live-rows data of one worked row (tracer.masks.row.WorkedRow)."""
    scores = np.asarray(worked.scores, dtype=np.float64)  # [K]
    k = scores.size
    labels = list(worked.tokens) if worked.tokens else [str(j) for j in range(k)]
    if worked.query is not None:
        parts = {"causal": bits(worked.keep)}
    elif not all(worked.keep):
        parts = {"custom": bits(worked.keep)}
    else:
        parts = {}
    q = worked.query if worked.query is not None else 0
    reasons = dict(PART_REASONS, custom="--row-keep flag 0")
    return {"stack": "", "rows": [q], "labels": labels, "layer": 0, "q": q, "reasons": reasons,
            "layers": [{"layer": 0, "step": "--row", "heads": 1, "keys": k, "dtype": "float64",
                        "scores": b64(scores.reshape(1, 1, k), "float64"), "parts": parts}]}


def row_page(worked, command: str) -> str:
    rows = row_data(worked)
    mask = (f"causal for query {worked.query}: keys 0..{worked.query}" if worked.query is not None
            else "the --row-keep flags" if not all(worked.keep) else "no mask (every key kept)")
    header = (f'<h1>tracer mask · one attention row, by hand</h1><p class="prompt mono">{esc(command)}</p>'
              f'<p class="note">{len(worked.scores)} scores; mask: {esc(mask)}. Switch the mask off (the causal box) '
              'or a key off (its button) and watch the row renormalise; the URL fragment keeps the view '
              '(#causal=off&amp;off=2).</p>')
    intro = ('<p class="note">softmax(s)_j = exp(s_j − max) / Σ_k exp(s_k − max) over the kept keys; blocked keys get '
             '−∞ before the softmax, so exp(−∞) = 0 and the kept weights sum to 1.</p>')
    return document("tracer mask · one row", header, [("row", "the row", row_panel(rows, intro, held="The page holds the row exactly as the command computed it (float64)."))],
                    {"rows": rows, "dist": None})
