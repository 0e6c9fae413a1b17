"""Generation: the text, each step's token and probability, the cache check, and the KV cache as a strip."""

from __future__ import annotations

from tracer.html.common import esc, fmt, ramp


def strip_table(v: dict) -> str:
    width = max((s["cache_len"] for s in v["strip"]), default=0)
    labels = v["labels"]
    head = "".join(f'<th class="{"prompt" if j < v["prompt_len"] else "new"}" title="position {j}">{j}<br>'
                   f'{esc(labels[j] if j < len(labels) else "")}</th>' for j in range(width))
    rows = []
    for s in v["strip"]:
        cells = []
        for j in range(width):
            if j >= s["cache_len"]:
                cells.append('<td class="empty"></td>')
                continue
            w = s["weights"][j]
            css = "prompt" if j < v["prompt_len"] else "gen"
            if j == s["cache_len"] - 1 and s["t"] > 0:
                css += " added"
            cells.append(f'<td class="{css}" style="background:{ramp(w ** 0.5)}" title="step {s["t"]}: query {s["query"]} → '
                         f'k {j} {esc(labels[j] if j < len(labels) else "")}: {w:.4f}"></td>')
        rows.append(f'<tr data-t="{s["t"]}" data-cache="{s["cache_len"]}" data-q="{s["query"]}"><th>{s["t"]} {esc(s.get("token") or "")}</th>'
                    f'{"".join(cells)}</tr>')
    return (f'<table class="kv" data-layer="{v["layer"]}"><thead><tr><th>step</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def section(report: dict):
    v = report.get("generation_view")
    if not v:
        return None
    steps = "".join(f'<tr><td class="num">{s["t"]}</td><td class="piece">{esc(s.get("token"))}</td>'
                    f'<td class="num dim">{s.get("token_id")}</td><td class="num">{fmt(s.get("prob"))}</td>'
                    f'<td class="num">{s.get("cache_len")}</td>'
                    f'<td class="num">{fmt(s.get("recompute_max_abs")) if s.get("recompute_max_abs") is not None else "–"}</td></tr>'
                    for s in v["steps"])
    check = v.get("check")
    check_line = (f'<p class="ok">--check-cache: every step was also recomputed without a cache; max |Δ logit| = '
                  f'{fmt(check["max_abs"])} over {check["steps"]} steps</p>' if check else
                  '<p class="note">not checked against a recompute (tracer generate --check-cache does it)</p>')
    body = (f'<p>{esc(v["sampling"] or "")} · stop: {esc(v.get("stop") or "")}</p>'
            f'<p class="prompt"><span class="dim">{esc(v["prompt"] if v.get("prompt") is not None else " ".join(v["labels"][:v["prompt_len"]]))}</span>'
            f'<strong>{esc(v["text"])}</strong></p>{check_line}'
            f'<h3>the KV cache, step by step (layer {v["layer"]})</h3>'
            '<p class="note">One row per decoding step, one column per cached position: the prompt\'s columns are grey-headed, '
            'each step appends one column (outlined). Colour = the new query\'s attention weight on each cached key, '
            'the mean over heads (step 0 is the prefill\'s last row). Click a row to work it by hand in the row panel.</p>'
            f'<div class="rp-wrap">{strip_table(v)}</div>'
            + "".join(f'<p class="note warn">{esc(m)} was not kept</p>' for m in v["missing"][:3])
            + (f'<p class="note">{v["more"]} more steps not drawn</p>' if v.get("more") else "")
            + '<details><summary>every step</summary><div class="body"><table><thead><tr><th class="num">t</th><th>token</th>'
            '<th class="num">id</th><th class="num">p</th><th class="num">cache</th><th class="num">|Δ| recomputed</th></tr></thead>'
            f'<tbody>{steps}</tbody></table></div></details>')
    return "generation", body
