"""The live views' markup: the row-by-hand panel, the distribution controls, and the numbers they read.

The script (live_js.LIVE_SCRIPT) fills the tables; this module writes the controls, the readout elements
of the contract (#row-readout, #dist-readout) and the data holder, a JSON script element.
"""

from __future__ import annotations

import json

from tracer.html.common import esc

GLANCE_OVER = 576  # cells per map (24 x 24): larger maps are drawn by the page's script, heads as small multiples
PART_LABELS = (("causal", "causal"), ("window", "sliding window"), ("padding", "padding"), ("custom", "custom mask"))


def data_holder(data: dict) -> str:
    """The page's numbers as JSON inside <script type="application/json"> ("</" escaped so it cannot close it)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return f'<script type="application/json" id="tracer-live">{text}</script>'


def live_data(report: dict) -> dict | None:
    rows, dist = report.get("live_rows"), report.get("live_dist")
    maps = glance_maps(report)
    if not rows and not dist and not maps:
        return None
    others = [dict(v, held=held_note(v)) for v in report.get("live_row_views") or [] if v.get("layers")]
    if rows and rows.get("layers") and others:
        rows = dict(rows, held=held_note(rows))
    return {"rows": rows if rows and rows.get("layers") else None, "row_views": others, "dist": dist, "maps": maps}


def drawn_by_script(view: dict) -> bool:
    """A long prompt's maps: small multiples on canvases (float16 weights in the page data), one head large."""
    return len(view["row_positions"]) * len(view["col_positions"]) > GLANCE_OVER


def glance_maps(report: dict) -> list[dict]:
    """The weights of the maps the script draws (long prompts): float16 [heads, rows, cols], blocked cells as 0/1."""
    import numpy as np

    from tracer.report.interactive import b64, bits

    out = []
    for view in report.get("attention_maps") or []:
        if not drawn_by_script(view):
            continue
        tokens_r, tokens_c = report.get(view["rows"]) or [], report.get(view["cols"]) or []
        for e in view["layers"]:
            if e.get("missing"):
                continue
            w = np.array([h["weights"] for h in e["heads"]], dtype=np.float32)  # [heads, rows, cols]
            out.append({"stack": view["stack"], "part": view["part"], "layer": e["layer"], "heads": [h["head"] for h in e["heads"]],
                        "rows": view["row_positions"], "cols": view["col_positions"],
                        "row_labels": [tokens_r[p]["token"] for p in view["row_positions"]],
                        "col_labels": [tokens_c[p]["token"] for p in view["col_positions"]],
                        "w16": b64(w, "float16"), "blocked": bits(np.asarray(e["blocked"], dtype=bool))})
    for m in (report.get("mask"), report.get("cross_mask")):
        out.extend(mask_maps(report, m) if m else [])
    return out


def mask_maps(report: dict, m: dict) -> list[dict]:
    """A long prompt's mask grids as maps for the script: kept cells at weight 1, blocked ones grey."""
    import numpy as np

    from tracer.html.mask import grid_positions
    from tracer.report.interactive import b64, bits

    (rk, rp), (ck, cp) = grid_positions(report, m)
    if len(rp) * len(cp) <= GLANCE_OVER:
        return []
    tokens_r, tokens_c = report.get(rk) or [], report.get(ck) or []
    out = []
    for name, grid in (m.get("grids") or {}).items():
        keep = np.asarray(grid, dtype=bool)[np.ix_(rp, cp)]  # [shown rows, shown cols]
        out.append({"stack": m.get("stack") or "", "part": f"mask-{m.get('part', 'attn')}-{name}", "layer": m.get("layer"),
                    "heads": [0], "rows": rp, "cols": cp, "row_labels": [tokens_r[p]["token"] for p in rp],
                    "col_labels": [tokens_c[p]["token"] for p in cp], "w16": b64(keep.astype(np.float32), "float16"),
                    "blocked": bits(~keep), "kind": "mask"})
    return out


def ranges(values: list[int]) -> str:
    """[0, 1, 2, 3, 10, 11] -> "0-3, 10-11"."""
    out, start = [], None
    for k, v in enumerate(values):
        if start is None:
            start = v
        if k + 1 == len(values) or values[k + 1] != v + 1:
            out.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)


KIND_LABELS = {"self": "self-attention", "encoder": "encoder self-attention", "decoder": "decoder self-attention",
               "cross": "cross-attention"}


def held_note(rows: dict) -> str:
    """What the page holds of one attention kind's rows (said on the page, beside the panel)."""
    layers = sorted({e["layer"] for e in rows["layers"] if e.get("decode") is None})
    n_keys = rows["layers"][0]["keys"] if rows["layers"] else 0
    decoded = [e["decode"] for e in rows["layers"] if e.get("decode") is not None]
    dtype = rows["layers"][0].get("dtype", "float32") if rows["layers"] else "float32"
    kind = rows.get("attn", "self")
    what = {"encoder": "encoder ", "decoder": "decoder ", "cross": "decoder "}.get(kind, "")
    keys = f"all {n_keys} encoder positions as keys" if kind == "cross" else f"all {n_keys} keys"
    label = "" if kind == "self" else KIND_LABELS.get(kind, kind) + " "
    return (f'This page holds the {label}scores of {what}query rows {ranges(rows["rows"])} over '
            f'{keys}, exactly ({dtype}), for layer{"s" if len(layers) > 1 else ""} {ranges(layers)}'
            + (f', and each decoding step\'s new query row against the cache ({len(decoded)} steps; click a row of the '
               'KV strip)' if decoded else "") + '.')


def row_panel(rows: dict, intro: str = "", held: str | None = None, views: list[dict] | None = None) -> str:
    """Controls (attention kind, layer, head, query, mask parts), the readout and the table the script fills.
    views: every attention kind the page holds (encoder-decoder: encoder, decoder, cross), `rows` first."""
    layers = sorted({e["layer"] for e in rows["layers"] if e.get("decode") is None})
    labels = rows.get("labels") or []
    layer_opts = "".join(f'<option value="{n}"{" selected" if n == rows["layer"] else ""}>{n}</option>' for n in layers)
    q_opts = "".join(f'<option value="{q}"{" selected" if q == rows["q"] else ""}>{q} {esc(labels[q] if q < len(labels) else "")}'
                     f'</option>' for q in rows["rows"])
    heads = rows["layers"][0]["heads"] if rows["layers"] else 1
    head_opts = "".join(f'<option value="{h}">{h}</option>' for h in range(heads))
    hide_lh = " hidden" if len(layers) == 1 and heads == 1 else ""
    kinds = [v.get("attn", "self") for v in views or [rows]]
    attn = ("" if len(kinds) < 2 else 'attention <select id="rp-attn">' + "".join(
        f'<option value="{k}"{" selected" if k == rows.get("attn") else ""}>{esc(KIND_LABELS.get(k, k))}</option>'
        for k in kinds) + "</select> ")
    parts = "".join(f'<label class="part"><input type="checkbox" data-part="{p}" checked> {esc(t)}</label> '
                    for p, t in PART_LABELS)
    held = held or held_note(rows)
    head = ('<tr><th class="num">key</th><th>token</th><th class="num c-raw" title="attn.scores.raw: before the soft-cap">'
            'raw</th><th class="num c-bias" title="attn.position_bias: already inside the score">bias</th>'
            '<th class="num">score s</th><th>mask</th><th class="num">s − max</th><th class="num">exp</th>'
            '<th class="num">weight</th><th class="num" title="softmax over every key, then the blocked weights deleted">'
            'wrong way</th><th></th></tr>')
    return (f'<div id="row-panel" class="rowpanel">{intro}'
            f'<p class="controls">{attn}<span{hide_lh}>layer <select id="rp-layer">{layer_opts}</select> head '
            f'<select id="rp-head">{head_opts}</select></span> query <select id="rp-q">{q_opts}</select> · mask parts: '
            f'{parts}<button id="rp-reset" type="button">every key on</button></p>'
            f'<p class="note"><span id="rp-held">{esc(held)}</span> Switch a key off with its button: the row renormalises over the keys that are '
            'left. The last column is the wrong way: the softmax over every key, with the blocked and switched-off '
            'weights deleted afterwards, so it no longer sums to 1.</p>'
            f'<p id="row-readout" class="readout" data-layer="{rows["layer"]}" data-q="{rows["q"]}">the row needs the '
            'page\'s script</p><div class="rp-wrap"><table id="rp-table" class="bars rowtable"><thead>'
            f'{head}</thead><tbody></tbody><tfoot></tfoot></table></div></div>')


def dist_controls(dist: dict) -> str:
    """Temperature, top-k, top-p and position controls over the stored top logits; the script draws the bars."""
    pos_opts = "".join(f'<option value="{p}"{" selected" if p == dist["pos"] else ""}>{p}</option>' for p in dist["positions"])
    note = (f'The page stores the top {dist["n"]} logits (of {dist["vocab"]}) at positions {ranges(dist["positions"])}; '
            'the bars are softmax(logits / T) over those stored logits (the rest of the vocabulary is left out of the '
            'sum, so at T = 1 they can be a hair above the model\'s own probabilities), not renormalised to the top-k.')
    return (f'<p class="controls">temperature <input id="dl-temp" type="range" min="0.1" max="2" step="0.05" value="1"> '
            f'<span id="dl-temp-value">1.00</span> · top-k <input id="dl-topk" type="number" min="1" max="{dist["n"]}" '
            f'value="{dist["k"]}"> · top-p <input id="dl-topp" type="number" min="0.01" max="1" step="0.01" value="1"> · '
            f'position <select id="dl-pos">{pos_opts}</select></p><p class="note">{esc(note)}</p>'
            f'<p id="dist-readout" class="readout" data-pos="{dist["pos"]}" data-n="{dist["n"]}"></p>'
            '<table id="dist-live" class="bars"><thead><tr><th class="num">rank</th><th>token</th><th class="num">id</th>'
            '<th>p</th><th class="num">prob</th><th class="num">logit</th><th class="num">cum</th></tr></thead>'
            '<tbody></tbody></table>')
