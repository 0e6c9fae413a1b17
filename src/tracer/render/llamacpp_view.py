"""`tracer diff REF LOG`: a llama.cpp tensor dump held to tracer's run, one row per printed graph node."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.capture.llamacpp_compare import LogJudgement
from tracer.numbers import num
from tracer.render.theme import CAUTION, DIM, OK, WARN

_AROUND = 3  # rows shown after the first divergence (all with --all)


def log_view(j: LogJudgement, log_label: str, show_all: bool = False) -> Group:
    first = j.first_divergence
    rows = j.judged
    if not show_all and first is not None:
        rows = rows[: rows.index(first) + 1 + _AROUND]
    table = Table(box=None, pad_edge=False, header_style="bold", show_edge=False)
    for col, justify in (("step", "left"), ("llama.cpp node", "left"), ("op", "left"), ("values", "right"),
                         ("max|Δ|", "right"), ("tolerance", "right"), ("Δsum", "right"), ("", "left")):
        table.add_column(col, justify=justify, no_wrap=col != "llama.cpp node")
    for r in rows:
        c = r.comparison
        dsum = "—" if r.sum_ok is None else num(abs(c.sum_llamacpp - c.sum_tracer))
        mark = Text("ok", style=OK) if r.ok else Text("DIVERGED", style=WARN)
        rows_note = "" if c.rows == "all" else " (last row)" if c.rows == "last 1" else f" ({c.rows} rows)"
        table.add_row(c.step, c.ggml_name + rows_note, c.op, f"{c.compared:,}", num(c.max_abs), num(r.tolerance),
                      dsum, mark)
    lines: list = [Text(f"llama.cpp's tensors ({log_label}) against tracer's run", style="bold"), table]
    hidden = len(j.judged) - len(rows)
    if hidden:
        lines.append(Text(f"  ⋮ {hidden} more nodes after the first divergence (--all shows them)", style=DIM))
    lines.append(Text(
        f"compared: {len(j.judged)} of {j.printed} printed nodes, on what the log holds (each tensor's first and last 3 "
        f"values per axis at 4 decimals, and its sum); {len(j.unmapped)} nodes name no tracer step (views, masks, "
        "bare norms)", style=DIM))
    if j.flash_attention:
        lines.append(Text("note: the log has no kq_soft_max node: llama.cpp ran with flash attention, which never "
                          "forms the attention weights; rerun it with -fa off to compare them", style=CAUTION))
    if first is None:
        lines.append(Text(f"✓ no divergence: every compared node is within tolerance", style=OK))
    else:
        c = first.comparison
        why = (f"max|Δ| {num(c.max_abs)} > {num(first.tolerance)}" if not first.values_ok else
               f"sums differ: llama.cpp {num(c.sum_llamacpp)}, tracer {num(c.sum_tracer)}")
        lines.append(Text(f"✗ first divergence: {c.step} (llama.cpp {c.ggml_name}, log line {c.line}): {why}",
                          style=WARN))
    return Group(*lines)
