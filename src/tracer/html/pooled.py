"""An encoder without a head: the pooled sentence vector, its norm, and the cosine between the batch's prompts."""

from __future__ import annotations

from tracer.html.common import esc, fmt
from tracer.html.heatmap import heatmap_svg


def section(report: dict):
    p = report.get("pooled")
    if p is None:
        return None
    how = f"{p.get('mode', 'mean')} pooling" + (", L2-normalised" if p.get("normalize") else "") + f" ({p.get('source', '')})"
    if p.get("missing"):
        return "sentence vector", f'<p class="note">{esc(how)}</p><p class="note warn">{esc(p["missing"])}</p>'
    values = ", ".join(fmt(x, 3) for x in p.get("head", [])) + ", …, " + ", ".join(fmt(x, 3) for x in p.get("tail", []))
    raw = f" (before normalising: {fmt(p['raw_norm'])})" if p.get("raw_norm") is not None else ""
    body = (f'<p class="note">{esc(how)}: the step <span class="mono">pooled</span>, row {p.get("batch_row")}</p>'
            f'<p>{p.get("dim")} numbers: <span class="mono">[{esc(values)}]</span>; norm {fmt(p.get("norm"))}{esc(raw)}</p>')
    cos = p.get("cosine")
    if cos:
        prompts = p.get("prompts") or [None] * len(cos)
        labels = [str(t) if t is not None else f"ids row {i}" for i, t in enumerate(prompts)]
        tip = lambda r, c, v: f"{labels[r]} · {labels[c]}: cosine {v:.4f}"  # noqa: E731
        svg = heatmap_svg([[max(0.0, v) for v in row] for row in cos], labels, labels, tip=tip,
                          caption="cosine similarity", cell_text=lambda r, c, v: f"{cos[r][c]:.2f}",
                          attrs={"data-cosine": len(cos)})
        body += f'<h3>cosine similarity between the batch rows</h3><div class="readable"><div class="readout"></div>{svg}</div>'
    return "sentence vector", body
