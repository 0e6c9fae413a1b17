"""The routing section: each token's experts and weights at one layer, and the load per expert per layer."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM, calm, heading


def render_routing(routing: dict | None, number: int):
    if routing is None:
        return Group(heading(number, "Routing"), calm("this model has no mixture of experts"))
    k, n = routing["top_k"], routing["n_experts"]
    weighting = "renormalised to 1" if routing["normalized"] else "router probabilities, not renormalised"
    caption = f"each token goes to {k} of {n} experts; weights are {weighting}"
    if routing.get("shared"):  # qwen2_moe
        caption += "; and through the shared expert, scaled by its gate"
    parts = [heading(number, f"Routing  block {routing['layer']}", caption)]
    for missing in routing["missing"]:
        parts.append(calm(missing))
    if routing["tokens"]:
        table = Table(box=None, pad_edge=False, padding=(0, 1), header_style=DIM)
        table.add_column("pos", justify="right", style=DIM, no_wrap=True)
        table.add_column("token", no_wrap=True, max_width=20, overflow="ellipsis")
        table.add_column("experts (weight)", overflow="fold")
        gated = "shared_gate" in routing["tokens"][0]
        if gated:
            table.add_column("shared gate", justify="right", no_wrap=True)
        for t in routing["tokens"]:
            chosen = "  ".join(f"e{e} {w:.2f}" for e, w in zip(t["experts"], t["weights"]))
            table.add_row(str(t["pos"]), t["token"], chosen, *([f"{t['shared_gate']:.2f}"] if gated else []))
        parts.append(table)
    if routing["load"]:
        parts.append(Text("load: how many of the row's tokens each expert served", style=DIM))
        load = Table(box=None, pad_edge=False, padding=(0, 1), header_style=DIM)
        load.add_column("block", justify="right", style=DIM, no_wrap=True)
        for e in range(n):
            load.add_column(f"e{e}", justify="right", no_wrap=True)
        for row in routing["load"]:
            busiest = max(row["tokens"])
            load.add_row(str(row["layer"]), *[Text(str(c), style="bold" if c == busiest and c else ("dim" if not c else ""))
                                               for c in row["tokens"]])
        parts.append(load)
    return Group(*parts)
