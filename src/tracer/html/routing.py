"""Mixture of experts: each token's weight on each expert at one layer (a tokens × experts heatmap; the
experts it was not routed to are blank), and the load per expert per MoE layer."""

from __future__ import annotations

from tracer.html.common import esc
from tracer.html.heatmap import heatmap_svg


def section(report: dict):
    r = report.get("routing")
    if r is None:
        return None
    n = r["n_experts"]
    experts = [f"e{e}" for e in range(n)]
    body = (f'<p class="note">each token goes to {r["top_k"]} of {n} experts; weights '
            f'{"renormalised to 1" if r["normalized"] else "are the router probabilities"}</p>')
    body += "".join(f'<p class="note warn">{esc(m)}</p>' for m in r.get("missing", []))
    if r["tokens"]:
        grid = [[None] * n for _ in r["tokens"]]
        for row, t in zip(grid, r["tokens"]):
            for e, w in zip(t["experts"], t["weights"]):
                row[e] = w
        labels = [t["token"] for t in r["tokens"]]
        tip = lambda i, e, v: f"{labels[i]} → e{e}: " + ("not routed" if v is None else f"weight {v:.3f}")  # noqa: E731
        svg = heatmap_svg(grid, labels, experts, tip=tip, row_index=[t["pos"] for t in r["tokens"]],
                          caption=f"block {r['layer']}: weight per expert", attrs={"data-routing": r["layer"]})
        body += f'<h3>block {r["layer"]}: which experts each token went to</h3><div class="readable"><div class="readout"></div>{svg}</div>'
    if r["load"]:
        head = "".join(f"<th>{e}</th>" for e in experts)
        rows = "".join(f'<tr><th>block {row["layer"]}</th>' + "".join(f"<td>{c}</td>" for c in row["tokens"]) + "</tr>"
                       for row in r["load"])
        body += f'<h3>load: tokens each expert served</h3><table class="grid"><tr><th></th>{head}</tr>{rows}</table>'
    return "routing", body
