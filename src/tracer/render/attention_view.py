"""Section 5: attention weights as heatmap tables: query rows, key columns, colour by weight."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from tracer.render.mask_panel import grid_indices
from tracer.render.side_by_side import Panel, SideBySide
from tracer.render.theme import BLOCK_CELL, DIM, OK, WARN, calm, heading, heat_style, num, rows_phrase, short

COMPACT_LIMIT = 16  # positions per axis in the all-heads view
SINGLE_LIMIT = 24
LABEL_WIDTH = 8


def compact_cell(w: float, blocked: bool) -> Text:
    """3 cells: `.52`, `1.0`; a blocked key is `·` so it is never mistaken for a tiny weight."""
    if blocked:
        return Text(f" {BLOCK_CELL} ", style=DIM)
    text = "1.0" if w >= 0.995 else f"{w:.2f}"[1:]
    return Text(text, style=heat_style(w))


def _label(pos: int, token: str) -> Text:
    t = Text(f"{pos:>2} ", style=DIM)
    t.append(short(token, LABEL_WIDTH))
    return t


def head_title(h: dict, n_heads: int, n_kv: int) -> str:
    return f"head {h['head']}" + (f" (kv {h['kv_head']})" if n_kv != n_heads else "")


def row_labels(att: dict) -> list[str]:
    """Query labels: the key labels, except in cross-attention (decoder rows, encoder columns)."""
    return att.get("row_labels") or att["labels"]


def shown_positions(att: dict, limit: int, rows: bool = False) -> list[int | None]:
    """Real (non-pad) positions of the keys (or of the query rows), the middle elided past `limit`;
    padding is in the mask view."""
    labels, pads = (row_labels(att), att.get("row_pad_positions", att.get("pad_positions", []))) if rows and "row_labels" in att \
        else (att["labels"], att.get("pad_positions", []))
    real = [p for p in range(len(labels)) if p not in set(pads)]
    return [None if i is None else real[i] for i in grid_indices(len(real), limit)]


def _compact_row(weights: list[float], blocked: list[bool], idx: list[int | None]) -> Text:
    t = Text()
    for n, k in enumerate(idx):
        if n:
            t.append(" ")
        t.append("  ⋯" if k is None else compact_cell(weights[k], blocked[k]))
    return t


def _key_header(idx: list[int | None]) -> Text:
    return Text(" ".join("  ⋯" if k is None else f"{k:>3}" for k in idx), style=DIM)


class AllHeads:
    """Every head's matrix side by side when that stays short at this width; else each head's last query row."""

    MAX_LINES = 24

    def __init__(self, att: dict):
        self.att = att

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        att = self.att
        idx = shown_positions(att, COMPACT_LIMIT)
        qidx = shown_positions(att, COMPACT_LIMIT, rows=True)
        labels = row_labels(att)
        panels = [Panel(Text(head_title(h, att["n_heads"], att["n_kv_heads"]), style="bold"), _key_header(idx),
                        [None if q is None else _compact_row(h["weights"][q], att["blocked"][q], idx) for q in qidx])
                  for h in att["heads"]]
        grid = SideBySide([None if q is None else _label(q, labels[q]) for q in qidx], panels)
        if grid.n_lines(options.max_width) > self.MAX_LINES:
            yield last_query_rows(att, idx, qidx)
        else:
            yield grid


def last_query_rows(att: dict, idx: list[int | None], qidx: list[int | None] | None = None) -> Group:
    """One line per head: what the last real token reads. Compact for models with many heads."""
    q = [k for k in (qidx or idx) if k is not None][-1]
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style=DIM)
    table.add_column(no_wrap=True)
    for k in idx:
        table.add_column("⋯" if k is None else Text(f"{k}\n{short(att['labels'][k], 3)}"), justify="right", no_wrap=True)
    for h in att["heads"]:
        table.add_row(Text(head_title(h, att["n_heads"], att["n_kv_heads"]), style="bold"),
                      *[Text("⋯", style=DIM) if k is None else compact_cell(h["weights"][q][k], att["blocked"][q][k]) for k in idx])
    note = Text(f"Rows are heads; each shows what query {q} ({row_labels(att)[q]}) reads.", style=DIM)
    return Group(table, note)


def single_head(att: dict) -> Table:
    """One head in full: key tokens as column headers, weights to 2 decimals, and each row's checked sum."""
    h = att["heads"][0]
    labels, qlabels = att["labels"], row_labels(att)
    idx = grid_indices(len(labels), SINGLE_LIMIT)
    qidx = grid_indices(len(qlabels), SINGLE_LIMIT)
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column(Text("query ↓ key →", style=DIM), no_wrap=True)
    for k in idx:
        table.add_column("⋯" if k is None else Text(f"{k}\n{short(labels[k], 4)}"), justify="right", no_wrap=True)
    table.add_column("Σ row", justify="right", no_wrap=True)
    for q in qidx:
        if q is None:
            table.add_row(Text("   ⋮", style=DIM))
            continue
        cells = []
        for k in idx:
            if k is None:
                cells.append(Text("⋯", style=DIM))
            elif att["blocked"][q][k]:
                cells.append(Text(BLOCK_CELL, style=DIM))
            else:
                w = h["weights"][q][k]
                cells.append(Text(f"{w:.2f}", style=heat_style(w)))
        s = h["row_sums"][q]
        masked = q in att["fully_masked_rows"]
        ok = abs(s - (0.0 if masked else 1.0)) <= 1e-4
        cells.append(Text(f"{s:.3f} " + ("✓" if ok else "✗"), style=OK if ok else WARN))
        table.add_row(_label(q, qlabels[q]), *cells)
    return table


def _check_line(att: dict) -> Text:
    err = att["max_row_error"]
    if att["rows_sum_to_one"]:
        line = Text(f"Every row sums to 1 (checked: largest deviation {num(err, 2)})", style=DIM)
    else:
        line = Text(f"⚠ rows do not all sum to 1: largest deviation {num(err, 2)}", style=WARN)
    if att["fully_masked_rows"]:
        rows = att["fully_masked_rows"]
        line.append(f"; fully masked {rows_phrase(rows)} {'is' if len(rows) == 1 else 'are'} all zero", style=DIM)
    line.append(".", style=DIM)
    return line


def render_attention(att: dict, number: int = 5) -> Group:
    layer = att["layer"]
    which = "all heads" if att["selected"] == "all" else f"head {att['selected']}"
    where = {"encoder": "encoder ", "decoder": "decoder "}.get(att.get("stack", ""), "")
    kind = " cross-attention" if att.get("part") == "cross_attn" else ""
    title = f"Attention  {where}layer {layer}{kind}, {which}, batch row {att['batch_row']}"
    caption = f"Softmax of the masked scores: how much each query (row) reads from each key (column); {BLOCK_CELL} = blocked."
    if kind:
        caption = (f"Softmax of decoder queries against encoder keys: how much each decoder position (row) reads "
                   f"from each input token (column); {BLOCK_CELL} = blocked (encoder padding).")
    parts: list = [heading(number, title, caption)]
    if att.get("missing"):
        parts.append(calm(att["missing"]))
        return Group(*parts)
    parts.append(AllHeads(att) if att["selected"] == "all" else single_head(att))
    parts.append(_check_line(att))
    if att["selected"] == "all":
        hint = "--head N: one head with its row sums; --layer N: another layer."
        if att.get("stack"):
            hint += " --stack encoder|decoder, --attn self|cross: another attention."
        if att["n_kv_heads"] != att["n_heads"]:
            hint = f"Heads share kv heads in groups of {att['n_heads'] // att['n_kv_heads']}. " + hint
        parts.append(Text(hint, style=DIM))
    return Group(*parts)
