"""The mask: how it was built (parts and broadcasts) and the keep grid of the batch row, as an SVG grid."""

from __future__ import annotations

from tracer.html.collect import focus_position, shown_positions
from tracer.html.common import esc
from tracer.html.heatmap import heatmap_svg


def grid_map(name: str, grid, labels: list[str], positions: list[int]) -> str:
    values = [[1.0 if grid[q][k] else 0.0 for k in positions] for q in positions]
    tip = lambda r, c, v: f"q {positions[r]} {labels[r]} → k {positions[c]} {labels[c]}: " + ("keep" if v else "blocked")  # noqa: E731
    return heatmap_svg(values, labels, labels, tip=tip, row_index=positions, col_index=positions, vmax=1.6,
                       caption=f"mask {name}", cell_text=lambda r, c, v: "✓" if v else "·",
                       attrs={"data-grid": name, "data-q": len(positions), "data-k": len(positions)})


def section(report: dict):
    m = report.get("mask")
    if not m:
        return None
    tokens = report.get("tokens") or []
    n = len(tokens)
    positions = report.get("page_positions") or shown_positions(n, focus_position(report))
    labels = [tokens[p]["token"] for p in positions]
    parts = m.get("parts") or []
    lines = [f"layer {m.get('layer')} · {m.get('source', 'built')} · applied as {m.get('dtype')} "
             f"{m.get('shape')} ({', '.join(m.get('axes') or [])}) onto scores {m.get('scores_shape')}"]
    if m.get("note"):
        lines.append(m["note"])
    rows = "".join(f'<tr><td>{esc(p["name"])}</td><td>{esc(p["rule"])}</td><td class="mono">{esc(p.get("broadcast", ""))}</td></tr>'
                   for p in parts)
    table = (f'<table><thead><tr><th>part</th><th>rule</th><th>broadcast</th></tr></thead><tbody>{rows}</tbody></table>'
             if rows else "")
    combine = f'<p>keep = <span class="mono">{esc(m["combine"])}</span></p>' if m.get("combine") else ""
    grids = m.get("grids") or {}
    maps = "".join(f'<div class="head"><div class="label">{esc(name)}</div>{grid_map(name, g, labels, positions)}</div>'
                   for name, g in grids.items())
    extra = []
    if m.get("fully_masked_rows"):
        extra.append(f"fully masked query rows: {', '.join(map(str, m['fully_masked_rows']))} (their weights are zero)")
    if m.get("matches_recorded") is False:
        extra.append("the rebuilt mask does not match the one recorded in the trace")
    pos = m.get("positions")
    if pos:
        extra.append(f"{pos['warning']['code']}: {pos['warning']['message']}; positions {pos['row']}")
    if len(positions) < n:
        extra.append(f"{n} positions: showing {len(positions)} of them; dotted lines mark skipped positions")
    note = "".join(f'<p class="note warn">{esc(x)}</p>' for x in extra)
    return "mask", (f'<p class="note">{esc(" · ".join(lines))}</p>{table}{combine}{note}'
                    f'<div class="readable"><div class="readout">hover a cell</div><div class="heads">{maps}</div></div>')
