"""tracer run --cost on the page: the measured time of each step beside its FLOPs, as bars, the slowest marked."""

from __future__ import annotations

from tracer.html.common import esc, fmt


def _flops(x) -> str:
    return "–" if x is None else f"{x:,}"


def section(report: dict):
    c = report.get("cost")
    if c is None:
        return None
    if not c.get("rows"):
        return "cost", '<p class="note">no step recorded a time (timings are never saved in a trace file)</p>'
    slow = set(c.get("slowest") or [])
    longest = max(r["seconds"] for r in c["rows"]) or 1.0
    rows = []
    for r in c["rows"]:
        mark = ' class="target"' if r["step"] in slow else ""
        bar = f'<div class="fill" style="width:{100 * r["seconds"] / longest:.1f}%"></div>'
        rate = "–" if r.get("gflops_per_second") is None else fmt(r["gflops_per_second"], 3)
        rows.append(f'<tr{mark}><td class="mono">{esc(r["step"])}</td><td class="num">{r["layers"]}</td>'
                    f'<td class="bar">{bar}</td><td class="num">{1e3 * r["seconds"]:.3f} ms</td>'
                    f'<td class="num">{100 * r["time_share"]:.1f}%</td><td class="num">{_flops(r["flops"])}</td>'
                    f'<td class="num">{rate}</td><td>{"slow" if r["step"] in slow else ""}</td></tr>')
    note = (f'<p class="note">Measured time between recorded steps (the recorder\'s own work excluded): '
            f'{1e3 * c["total_seconds"]:.1f} ms in all; FLOPs as the engine computes them (attention over the whole '
            f'square before the mask){"; " + esc(c["note"]) if c.get("note") else ""}. The three slowest are marked.</p>')
    table = ('<table class="bars"><thead><tr><th>step</th><th class="num">×</th><th>time</th><th class="num">ms</th>'
             '<th class="num">share</th><th class="num">FLOPs</th><th class="num">GFLOP/s</th><th></th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>')
    return "cost: time and FLOPs per step", note + table
