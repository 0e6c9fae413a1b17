"""The mask: how it was built (parts and broadcasts) and the keep grids of the batch row, as SVG grids.

An encoder-decoder model has two: the chosen stack's self-attention mask and the cross-attention mask
(decoder rows over encoder columns)."""

from __future__ import annotations

from tracer.report.collect import focus_position, shown_positions
from tracer.html.common import esc, fmt
from tracer.html.heatmap import heatmap_svg
from tracer.html.live import GLANCE_OVER


def grid_map(name: str, grid, rows: list[str], cols: list[str], rp: list[int], cp: list[int]) -> str:
    values = [[1.0 if grid[q][k] else 0.0 for k in cp] for q in rp]
    tip = lambda r, c, v: f"q {rp[r]} {rows[r]} → k {cp[c]} {cols[c]}: " + ("keep" if v else "blocked")  # noqa: E731
    return heatmap_svg(values, rows, cols, tip=tip, row_index=rp, col_index=cp, vmax=1.6, caption=f"mask {name}",
                       cell_text=lambda r, c, v: "✓" if v else "·",
                       attrs={"data-grid": name, "data-q": len(rp), "data-k": len(cp)})


def _positions(report: dict, key: str) -> list[int]:
    shown = (report.get("page_positions") or {}).get(key)
    if shown is not None:
        return shown
    tokens = report.get(key) or []
    return shown_positions(len(tokens), focus_position(report))


def bucket_table(b: dict) -> str:
    if b.get("missing"):
        return f'<p class="note">{esc(b["missing"])}</p>'
    n_heads = len(b["rows"][0]["bias"]) if b.get("rows") else 0
    head = "".join(f'<th class="num">head {h}</th>' for h in range(n_heads))
    rows = "".join(f'<tr><td class="num">{r["distance"]}</td><td class="num">{r["bucket"]}</td>'
                   + "".join(f'<td class="num">{fmt(x, 3)}</td>' for x in r["bias"]) + "</tr>" for r in b["rows"])
    return (f'<p class="note">relative position bias {esc(b["step"])}: {b["num_buckets"]} buckets up to distance '
            f'{b["max_distance"]} ({"both directions" if b.get("bidirectional") else "looking back only"}); '
            f'{esc(b.get("shared", ""))}; seen from query {b.get("query")}</p>'
            f'<table><thead><tr><th class="num">key − query</th><th class="num">bucket</th>{head}</tr></thead>'
            f'<tbody>{rows}</tbody></table>')


def grid_positions(report: dict, m: dict) -> tuple[tuple[str, list[int]], tuple[str, list[int]]]:
    """((row token key, shown rows), (column token key, shown columns)) of a mask's grids."""
    cross = m.get("part") == "cross_attn"
    row_key = "decoder_tokens" if m.get("stack") == "decoder" else "tokens"
    col_key = "tokens" if cross else row_key
    return (row_key, _positions(report, row_key)), (col_key, _positions(report, col_key))


def mask_block(report: dict, m: dict) -> str:
    cross = m.get("part") == "cross_attn"
    (row_key, rp), (col_key, cp) = grid_positions(report, m)
    row_tokens, col_tokens = report.get(row_key) or [], report.get(col_key) or []
    rows, cols = [row_tokens[p]["token"] for p in rp], [col_tokens[p]["token"] for p in cp]
    where = f"{m['stack']} " if m.get("stack") else ""
    lines = [f"{where}{'cross-attention ' if cross else ''}layer {m.get('layer')} · {m.get('source', 'built')} · "
             f"applied as {m.get('dtype')} {m.get('shape')} ({', '.join(m.get('axes') or [])}) onto scores {m.get('scores_shape')}"]
    if m.get("note"):
        lines.append(m["note"])
    parts = m.get("parts") or []
    table = "".join(f'<tr><td>{esc(p["name"])}</td><td>{esc(p["rule"])}</td><td class="mono">{esc(p.get("broadcast", ""))}</td></tr>'
                    for p in parts)
    table = (f'<table><thead><tr><th>part</th><th>rule</th><th>broadcast</th></tr></thead><tbody>{table}</tbody></table>'
             if table else "")
    combine = f'<p>keep = <span class="mono">{esc(m["combine"])}</span></p>' if m.get("combine") else ""
    extra = list(m.get("notes") or [])
    if m.get("fully_masked_rows"):
        extra.append(f"fully masked query rows: {', '.join(map(str, m['fully_masked_rows']))} (their weights are zero)")
    if m.get("matches_recorded") is False:
        extra.append("the rebuilt mask does not match the one recorded in the trace")
    pos = m.get("positions")
    if pos:
        extra.append(f"{pos['warning']['code']}: {pos['warning']['message']}; positions {pos['row']}")
    if len(rp) < len(row_tokens) or len(cp) < len(col_tokens):
        extra.append(f"showing {len(rp)} x {len(cp)} of {len(row_tokens)} x {len(col_tokens)} positions; "
                     "dotted lines mark skipped positions")
    note = "".join(f'<p class="note warn">{esc(x)}</p>' for x in extra)
    maps = "".join(f'<div class="head"><div class="label">{esc(name)}</div>{grid_map(name, g, rows, cols, rp, cp)}</div>'
                   for name, g in (m.get("grids") or {}).items())
    buckets = bucket_table(m["buckets"]) if m.get("buckets") else ""
    if len(rp) * len(cp) > GLANCE_OVER:  # a long prompt: drawn by the page's script (live.glance_maps)
        where = f'data-stack="{esc(m.get("stack") or "")}" data-layer="{m.get("layer")}" data-head="0"'
        maps = "".join(f'<div class="head"><div class="label">{esc(name)}</div><canvas class="big" {where} '
                       f'data-part="mask-{esc(m.get("part", "attn"))}-{esc(name)}"></canvas></div>' for name in m.get("grids") or {})
        return (f'<p class="note">{esc(" · ".join(lines))}</p>{table}{combine}{note}'
                f'<div class="readable"><div class="glance-readout readout">hover a cell</div><div class="heads">{maps}</div></div>{buckets}')
    return (f'<p class="note">{esc(" · ".join(lines))}</p>{table}{combine}{note}'
            f'<div class="readable"><div class="readout">hover a cell</div><div class="heads">{maps}</div></div>{buckets}')


def section(report: dict):
    m = report.get("mask")
    if not m:
        return None
    body = mask_block(report, m)
    if report.get("cross_mask"):
        body += "<h3>cross-attention mask</h3>" + mask_block(report, report["cross_mask"])
    return "mask", body
