"""The output of an encoder without a head: the pooled sentence vector, and cosine similarities across the batch."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM, calm, heading, heat_style, short

MODES = {"mean": "the mean of the last layer's vectors over the real tokens",
         "cls": "the last layer's vector at the first real token ([CLS])",
         "max": "the element-wise maximum of the last layer's vectors over the real tokens",
         "mean_sqrt_len": "the sum of the last layer's vectors over the real tokens / sqrt(count)",
         "lasttoken": "the last layer's vector at the last real token",
         "weightedmean": "the position-weighted mean (weights 1, 2, 3, ...) of the last layer's vectors over the real tokens"}


def render_pooled(p: dict, number: int = 6) -> Group:
    how = MODES.get(p["mode"], f"{p['mode']} pooling of the last layer's vectors")
    how += ", then L2-normalised to length 1" if p["normalize"] else ""
    caption = (f"No head: the model's output is one vector per prompt: {how} "
               f"(rule from {p['source']}). Nothing here is a next token.")
    parts: list = [heading(number, f"Sentence embedding  batch row {p['batch_row']}", caption)]
    if p.get("missing"):
        parts.append(calm(p["missing"]))
        return Group(*parts)
    values = " ".join(f"{x:+.4f}" for x in p["head"]) + "  …  " + " ".join(f"{x:+.4f}" for x in p["tail"])
    parts.append(Text.assemble(("pooled ", "bold"), (f"[d_model={p['dim']}]  ", DIM), values))
    line = Text(f"norm {p['norm']:.6f}", style=DIM)
    if p.get("raw_norm") is not None:
        line.append(f" (before normalising: {p['raw_norm']:.4f})", style=DIM)
    parts.append(line)
    if p.get("cosine"):
        parts.append(_cosine_table(p["cosine"], p.get("prompts") or []))
    return Group(*parts)


def _cosine_table(cos: list[list[float]], prompts: list) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold", title_justify="left",
                  title="cosine similarity between the batch's prompts", title_style=DIM)
    table.add_column("row", justify="right", no_wrap=True)
    table.add_column("prompt", no_wrap=True, max_width=28, overflow="ellipsis")
    for j in range(len(cos)):
        table.add_column(str(j), justify="right", no_wrap=True)
    for i, r in enumerate(cos):
        label = short(str(prompts[i]) if i < len(prompts) and prompts[i] is not None else f"ids row {i}", 28)
        table.add_row(str(i), label, *[Text(f"{c:.3f}", style=heat_style(max(0.0, c)) if i != j else DIM) for j, c in enumerate(r)])
    return table
