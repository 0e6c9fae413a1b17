"""The logit lens: a layers x positions heatmap (how much each layer already believes the final answer)."""

from __future__ import annotations

from tracer.html.common import clip_label, esc, fmt
from tracer.html.heatmap import heatmap_svg, legend


def _layer_name(label: str) -> str:
    return "embed" if label == "embed" else f"block {label}"


def grid_map(report: dict, grid: dict) -> str:
    tokens = report.get(grid.get("tokens", "tokens")) or []
    positions = grid["positions"]
    labels = [tokens[p]["token"] if p < len(tokens) else "" for p in positions]
    layers = grid["layers"]
    values = [[c["final_prob"] for c in layer["cells"]] for layer in layers]
    target = grid.get("target")

    def tip(r, c, v):
        cell, final = layers[r]["cells"][c], grid["final_top"][c]
        text = (f"{_layer_name(layers[r]['layer'])}, position {positions[c]} {labels[c]}: lens top {cell['top']['token']} "
                f"(p {cell['top_prob']:.3f}); final answer {final['token']} p {cell['final_prob']:.3f}, rank {cell['final_rank']}")
        if target is not None and "target_prob" in cell:
            text += f"; target {target['token']} p {cell['target_prob']:.3f}, rank {cell['target_rank']}"
        return text

    return heatmap_svg(values, [_layer_name(x["layer"]) for x in layers], labels, tip=tip, row_index=list(range(len(layers))),
                       col_index=positions, caption="logit lens", number_rows=False,
                       cell_text=lambda r, c, v: clip_label(layers[r]["cells"][c]["top"]["token"], 34, 10),
                       attrs={"data-lens": "1", "data-rows": len(layers), "data-cols": len(positions)})


def focus_table(lens: dict) -> str:
    rows = "".join(
        f'<tr><td>{esc(_layer_name(r["layer"]))}</td><td class="mono">{esc(r["step"])}</td><td>{esc(r["top"]["token"])}</td>'
        f'<td class="num">{fmt(r["top_prob"])}</td><td class="num">{fmt(r["final_top_prob"])}</td>'
        f'<td class="num">{r["final_top_rank"]}</td></tr>' for r in lens.get("layers") or [])
    if not rows:
        return ""
    final = (lens.get("final_top") or {}).get("token", "")
    return (f'<h3>at position {lens.get("position")}, layer by layer</h3><table><thead><tr><th>layer</th><th>reads</th>'
            f'<th>lens top</th><th class="num">p</th><th class="num">p({esc(final)})</th><th class="num">rank</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>')


def section(report: dict):
    grid, lens = report.get("lens_grid"), report.get("lens")
    if grid is None and lens is None:
        return None
    intro = ('<p class="note">Each residual stream read through the final norm and the unembedding, as if it were the '
             'last layer. Colour = probability the layer already gives the token the model finally predicts at that '
             'position; the text is the layer\'s own top token. Hover for details.</p>')
    parts = [intro]
    if grid is not None and grid.get("layers"):
        n = len(report.get(grid.get("tokens", "tokens")) or [])
        if len(grid["positions"]) < n:
            parts.append(f'<p class="note warn">{n} positions: showing {len(grid["positions"])} of them</p>')
        parts.append(legend(1.0, "p(final answer)"))
        parts.append(f'<div class="readable"><div class="readout">hover a cell</div>{grid_map(report, grid)}</div>')
    elif grid is not None and grid.get("missing"):
        parts.append(f'<p class="note warn">{esc(grid["missing"])}</p>')
    if lens is not None:
        if lens.get("missing") and not (grid or {}).get("missing"):
            parts.append(f'<p class="note warn">{esc(lens["missing"])}</p>')
        parts.append(focus_table(lens))
    return "logit lens", "".join(parts)
