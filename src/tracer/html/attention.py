"""Attention: per view and layer, one heatmap per head (query rows x key columns), token labels, weights on hover."""

from __future__ import annotations

from tracer.html.common import esc, fmt
from tracer.html.heatmap import heatmap_svg, legend
from tracer.html.live import drawn_by_script, row_panel

GAMMA = 0.5  # colour = sqrt(weight): long rows spread thin weights that a linear scale leaves white
OPEN_ALL_UP_TO = 4000  # cells: small pages open every layer, larger ones only the layer in focus


def _labels(report: dict, key: str, positions: list[int]) -> list[str]:
    tokens = report.get(key) or []
    return [tokens[p]["token"] if p < len(tokens) else "" for p in positions]


def head_map(view: dict, layer: int, head: dict, blocked, rows: list[str], cols: list[str], kv_head: int | None) -> str:
    w = head["weights"]
    rp, cp = view["row_positions"], view["col_positions"]
    values = [[None if blocked and blocked[r][c] else w[r][c] for c in range(len(w[r]))] for r in range(len(w))]

    def tip(r, c, v):
        where = f"q {rp[r]} {rows[r]} → k {cp[c]} {cols[c]}"
        return f"{where}: blocked" if v is None else f"{where}: {v:.4f}"

    stack = view.get("stack") or ""
    caption = f"{stack + ' ' if stack else ''}{'cross-attention ' if view.get('part') == 'cross_attn' else ''}layer {layer} head {head['head']}"
    attrs = {"data-stack": stack, "data-part": view.get("part", "attn"), "data-layer": layer,
             "data-head": head["head"], "data-q": len(w), "data-k": len(w[0]) if w else 0}
    svg = heatmap_svg(values, rows, cols, tip=tip, row_index=rp, col_index=cp, caption=caption,
                      cell_text=lambda r, c, v: f"{v:.2f}", gamma=GAMMA, attrs=attrs)
    kv = f" · kv head {kv_head}" if kv_head is not None else ""
    return f'<div class="head"><div class="label">head {head["head"]}{kv}</div>{svg}</div>'


def layer_block(report: dict, view: dict, entry: dict, opened: bool, group: int) -> str:
    layer = entry["layer"]
    if entry.get("missing"):
        return f'<details class="layer"><summary>layer {layer}</summary><p class="note">{esc(entry["missing"])}</p></details>'
    rows = _labels(report, view["rows"], view["row_positions"])
    cols = _labels(report, view["cols"], view["col_positions"])
    if drawn_by_script(view):
        return glance_block(view, entry, opened, group)
    maps = "".join(head_map(view, layer, h, entry.get("blocked"), rows, cols, h["head"] // group if group > 1 else None)
                   for h in entry["heads"])
    return (f'<details class="layer"{" open" if opened else ""}><summary>layer {layer} · {len(entry["heads"])} heads · '
            f'<span class="mono dim">{esc(entry["step"])}</span></summary><div class="body readable">'
            f'<div class="readout">hover a cell for its weight</div><div class="heads">{maps}</div></div></details>')


def glance_block(view: dict, entry: dict, opened: bool, group: int) -> str:
    """Every head of one layer as a small multiple; a click opens that head large (drawn by the script)."""
    layer, stack, part = entry["layer"], view.get("stack") or "", view.get("part", "attn")
    where = f'data-stack="{esc(stack)}" data-part="{esc(part)}" data-layer="{layer}"'
    w, h3 = 3 * len(view["col_positions"]), 3 * len(view["row_positions"])
    kv = lambda h: f" · kv {h // group}" if group > 1 else ""  # noqa: E731
    thumbs = "".join(
        f'<figure class="thumb"><canvas class="thumb" {where} data-head="{h["head"]}" width="{w}" height="{h3}"></canvas>'
        f'<figcaption>head {h["head"]}{kv(h["head"])}</figcaption></figure>' for h in entry["heads"])
    return (f'<details class="layer"{" open" if opened else ""}><summary>layer {layer} · {len(entry["heads"])} heads · '
            f'<span class="mono dim">{esc(entry["step"])}</span></summary><div class="body">'
            f'<p class="note">every head at a glance; click one to open it large (float16 weights, for the eye; '
            f'the row panel reads the exact scores)</p><div class="glance" {where}>{thumbs}</div>'
            f'<div class="readout glance-readout">hover the large map for a weight</div>'
            f'<canvas class="big" {where} data-head="{entry["heads"][0]["head"] if entry["heads"] else 0}"></canvas>'
            '</div></details>')


def view_notes(report: dict, view: dict) -> list[str]:
    notes = []
    for key, shown in ((view["rows"], view["row_positions"]), (view["cols"], view["col_positions"])):
        n = len(report.get(key) or [])
        if len(shown) < n:
            notes.append(f"{n} {'decoder ' if key == 'decoder_tokens' else ''}positions: showing {len(shown)} of them "
                         f"(the first few and a window ending at position {shown[-1]}); dotted lines mark skipped positions")
            break
    if view.get("omitted"):
        notes.append(f"layers {', '.join(map(str, view['omitted']))} are left out to keep the page small "
                     "(tracer run --layer N --json has any layer in full)")
    return notes


def section(report: dict):
    views = report.get("attention_maps")
    att = report.get("attention") or {}
    if views is None and not att:
        return None
    n_heads, n_kv = att.get("n_heads", 1), att.get("n_kv_heads", 1) or 1
    group = max(1, n_heads // n_kv)
    intro = ('<p class="note">Each heatmap is one head: row = query position (who is reading), column = key position '
             '(what it reads); colour = softmax weight, each real row sums to 1. Grey cells are blocked by the mask. '
             'Hover a cell for its value.</p>' + legend(1.0, "attention weight", GAMMA))
    if att.get("rows_sum_to_one") is False:
        intro += f'<p class="note warn">rows of layer {att.get("layer")} do not sum to 1 (max error {fmt(att.get("max_row_error"))})</p>'
    if views is None:  # a report from the screen only: its one layer
        if att.get("missing"):
            return "attention", intro + f'<p class="note">{esc(att["missing"])}</p>'
        n_q = len(att["heads"][0]["weights"]) if att.get("heads") else 0
        n_k = len(att["heads"][0]["weights"][0]) if n_q else 0
        view = {"rows": "tokens", "cols": "tokens", "row_positions": list(range(n_q)), "col_positions": list(range(n_k))}
        return "attention", intro + layer_block(report, view, dict(att, step=att.get("step", "")), True, group)
    parts = [intro]
    rows = report.get("live_rows")
    if rows and rows.get("layers"):
        kinds = [rows] + [v for v in report.get("live_row_views") or [] if v.get("layers")]
        parts.append('<h3>the row, by hand</h3>' + row_panel(rows, '<p class="note">Click a row of any heatmap below '
                     '(or a token chip above) to work that query\'s row: its scores, the mask with the reason for each '
                     'blocked key, exp, their sum and the weights.'
                     + (' Encoder self-attention, decoder self-attention and cross-attention each have their rows '
                        '(the attention switch; cross-attention keys are encoder positions, masked by padding only).'
                        if len(kinds) > 1 else '') + '</p>', views=kinds))
    for view in views:
        if view.get("title"):
            parts.append(f"<h3>{esc(view['title'])}</h3>")
        cells = sum(len(e.get("heads", [])) for e in view["layers"]) * len(view["row_positions"]) * len(view["col_positions"])
        parts.extend(f'<p class="note warn">{esc(n)}</p>' for n in view_notes(report, view))
        focus = att.get("layer") if att.get("stack", "") == view["stack"] and att.get("part", "attn") == view["part"] else None
        if focus is None and view["layers"]:
            focus = view["layers"][-1]["layer"]
        parts.extend(layer_block(report, view, e, cells <= OPEN_ALL_UP_TO or e["layer"] == focus, group)
                     for e in view["layers"])
    return "attention", "".join(parts)
