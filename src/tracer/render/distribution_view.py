"""Section 6: the next-token distribution (top-k, target), and section 7: the logit lens."""

from __future__ import annotations

import math

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.render.columns import prob_column, value_column
from tracer.render.theme import DIM, OK, calm, heading, num, piece_text, prob
from tracer.report.target import variant_hint

BAR_WIDTH = 12
WARN_HINT = "yellow"


def bar(p: float, width: int = BAR_WIDTH) -> Text:
    """A probability as a bar of eighth blocks; the number next to it carries the value. No bar for NaN/Inf."""
    if p is None or not math.isfinite(p):
        return Text("")
    eighths = round(max(0.0, min(1.0, p)) * width * 8)
    full, rest = divmod(eighths, 8)
    return Text("█" * full + ("▏▎▍▌▋▊▉"[rest - 1] if rest else ""), style="cyan")


def render_distribution(report: dict, number: int = 6) -> Group:
    fills = report.get("fills")
    if fills:  # an MLM prompt with several mask tokens: one table each
        letters = "abcdefghijklmnopqrstuvwxyz"  # one section, one panel per mask: 6a, 6b, ...
        return Group(*[_one_distribution(f["distribution"], f["top_k"], f"{number}{letters[i % 26]}")
                       for i, f in enumerate(fills)])
    return _one_distribution(report["distribution"], report["top_k"], number)


def _one_distribution(d: dict, top_k: list[dict], number: int | str) -> Group:
    if d.get("kind") == "fill":
        title = f"Fill in  the mask at position {d['position']}"
        caption = ("probs = softmax(logits) at the masked position: what the model thinks belongs there, "
                   "reading the words on both sides. cum = running total.")
    else:
        title = f"Next token  after position {d['position']} ({d['after']})"
        caption = "probs = softmax(logits) here: what the model expects next; cum = running total."
    parts: list = [heading(number, title, caption)]
    if d.get("missing"):
        parts.append(calm(d["missing"]))
        return Group(*parts)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("token", no_wrap=True, max_width=20, overflow="ellipsis")
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("logit", justify="right", no_wrap=True)
    table.add_column("prob", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True, min_width=2)
    table.add_column("cum", justify="right", no_wrap=True, style=DIM)
    target = d.get("target")
    rows = top_k
    logit_f = value_column((t["logit"] for t in rows), digits=4)
    prob_f, cum_f = prob_column(t["prob"] for t in rows), prob_column(t["cum"] for t in rows)
    for t in rows:
        hit = target is not None and t["id"] == target["id"]
        token = piece_text(t["token"], t["special"])
        if hit:
            token.stylize("bold underline")
        table.add_row(str(t["rank"]), token, str(t["id"]), logit_f(t["logit"]), prob_f(t["prob"]), bar(t["prob"]), cum_f(t["cum"]))
    parts.append(table)
    if d.get("entropy_bits") is None:
        summary = Text(f"no entropy: {d.get('nonfinite', 'some')} probabilities at this position are NaN or Inf "
                       "(see the warning above for the step that produced them)", style="bold yellow")
    else:
        summary = Text(f"entropy {d['entropy_bits']:.2f} bits (as uncertain as {d['perplexity']:.1f} equally likely tokens)", style=DIM)
    parts.append(summary)
    if target is not None:
        line = Text("target ", style="bold")
        line.append(target["token"], style="bold underline")
        line.append(f" (id {target['id']}): rank {target['rank']}, prob {prob(target['prob'])}, logit {num(target['logit'])}")
        parts.append(line)
        if target.get("note"):
            parts.append(Text(target["note"], style=DIM))
        for v in target.get("better_variants", [])[:1]:  # the best one; the JSON has them all
            parts.append(Text("hint: " + variant_hint(v), style=WARN_HINT))
    return Group(*parts)


def render_lens(lens: dict, number: int = 7) -> Group:
    final = lens.get("final_top") or {}
    target = lens.get("target")
    if target is not None and target["id"] == final.get("id"):
        target = None  # the final top token is the target: its columns already track it
    watch = f"p({final.get('token', '?')}), the final top token," + (f" and p({target['token']}), the target," if target else "")
    caption = (f"Each layer's residual stream put through the final norm and the head, as if it were the last layer. "
               f"Watch {watch} rise to see where the prediction forms.")
    parts: list = [heading(number, f"Logit lens  position {lens.get('position')}", caption)]
    if lens.get("missing"):
        parts.append(calm(lens["missing"]))
        return Group(*parts)
    rows = lens["layers"]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("after", no_wrap=True)
    table.add_column("top token", no_wrap=True, max_width=20, overflow="ellipsis")
    table.add_column("p(top)", justify="right", no_wrap=True)
    table.add_column(Text(f"p({final.get('token', '?')})"), justify="right", no_wrap=True, max_width=16)
    table.add_column("", no_wrap=True)
    table.add_column("rank", justify="right", no_wrap=True, style=DIM)
    if target is not None:
        table.add_column(Text(f"p({target['token']})", style="bold underline"), justify="right", no_wrap=True, max_width=16)
        table.add_column("", no_wrap=True)
        table.add_column("rank", justify="right", no_wrap=True, style=DIM)
    # one format for every probability of the table: a row can hold one probability twice (the top token is
    # the final one), and 1.000 beside 1.0e+00 reads as two numbers
    every = [r[k] for r in rows for k in ("top_prob", "final_top_prob", "target_prob") if r.get(k) is not None]
    top_f = final_f = target_f = prob_column(every)
    for r in rows:
        where = "embedding" if r["layer"] == "embed" else f"block {r['layer']}"
        top = piece_text(r["top"]["token"], r["top"]["special"])
        if r["top_id"] == final.get("id"):
            top.stylize(OK)
        if target is not None and r["top_id"] == target["id"]:
            top.stylize("bold underline")
        cells = [where, top, top_f(r["top_prob"]), final_f(r["final_top_prob"]), bar(r["final_top_prob"], 8),
                 str(r["final_top_rank"])]
        if target is not None:
            cells += [target_f(r["target_prob"]), bar(r["target_prob"], 8), str(r["target_rank"])]
        table.add_row(*cells)
    parts.append(table)
    return Group(*parts)
