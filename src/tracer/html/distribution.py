"""The next token: top-k as bars, the target token when asked, entropy."""

from __future__ import annotations

import math

from tracer.html.common import esc, fmt, uniform
from tracer.html.live import dist_controls


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _bar_row(e: dict, texts: tuple[str, str, str], css: str = "") -> str:
    width = 100.0 * min(1.0, max(0.0, e["prob"])) if _finite(e["prob"]) else 0.0  # the bar is the probability; none for NaN
    prob, logit, cum = texts
    return (f'<tr class="{css}"><td class="num">{e.get("rank", "")}</td><td class="piece">{esc(e["token"])}</td>'
            f'<td class="num dim">{e["id"]}</td><td class="bar"><div class="fill" style="width:{width:.1f}%" '
            f'title="{esc(prob)}"></div></td><td class="num">{esc(prob)}</td>'
            f'<td class="num dim">{esc(logit)}</td><td class="num dim">{esc(cum)}</td></tr>')


def section(report: dict):
    dist, top_k = report.get("distribution"), report.get("top_k")
    if dist is None and top_k is None:
        return None
    fills = report.get("fills")
    if fills:  # a masked LM: one table per mask token
        return "masked tokens", "".join(bars(f.get("distribution") or {}, f.get("top_k")) for f in fills)
    title = "masked token" if (dist or {}).get("kind") == "fill" else "next token"
    live = report.get("live_dist")
    body = bars(dist or {}, top_k)
    if live:
        body = dist_controls(live) + f'<div class="static-bars">{body}</div>'
    return title, body


def bars(dist: dict, top_k) -> str:
    if dist.get("missing"):
        return f'<p class="note warn">{esc(dist["missing"])}</p>'
    target = dist.get("target")
    entries = list(top_k or []) + ([dict(target, cum=None)] if target is not None else [])
    columns = [uniform([e.get(k) for e in entries], 4 if k != "logit" else 2) for k in ("prob", "logit", "cum")]
    rows = [_bar_row(e, (columns[0][i], columns[1][i], columns[2][i]), "target" if target is not None and i == len(entries) - 1 else "")
            for i, e in enumerate(entries)]
    where = "in place of" if dist.get("kind") == "fill" else "after"
    if dist.get("nonfinite"):
        summary = (f'<span class="warn">no entropy: {dist["nonfinite"]} probabilities here are NaN or Inf, '
                   'so no bar or number below means what it seems</span>')
    else:
        summary = f'entropy {fmt(dist.get("entropy_bits"), 3)} bits (perplexity {fmt(dist.get("perplexity"), 3)})'
    head = (f'<p class="note">{where} position {dist.get("position")} <strong>{esc(dist.get("after", ""))}</strong>: '
            f'{summary}</p>')
    tnote = ""
    if target is not None:
        tnote = (f'<p class="note">target {esc(target.get("text") or target["token"])}: rank {target["rank"]}, '
                 f'p {fmt(target["prob"])}{" · " + esc(target["note"]) if target.get("note") else ""}</p>')
    table = ('<table class="bars"><thead><tr><th class="num">rank</th><th>token</th><th class="num">id</th><th>p</th>'
             '<th class="num">prob</th><th class="num">logit</th><th class="num">cum</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>')
    return head + tnote + table
