"""Section 5: attention weights: query rows, key columns, colour by weight.

The layout follows the prompt and the width. Short prompts get the whole matrix
(all heads side by side, or one head with its row sums). Longer ones get a window
of keys and queries around the focus (`--position`) with a `rest` column for the
weight on the keys left out, or, when too few key columns fit, each query's
top-k keys (`--attn-top K` asks for that layout at any width).
"""

from __future__ import annotations

import numpy as np
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from tracer.render.side_by_side import Panel, SideBySide
from tracer.render.theme import BLOCK_CELL, DIM, OK, WARN, calm, heading, heat_style, num, rows_phrase, short
from tracer.render.window import GAP, index_digits, index_header, index_label, span_text, window

COMPACT_LIMIT = 16  # positions per axis in the all-heads matrices
ROWS = 16  # query rows shown at most in one head's grid or top-k list
MIN_WINDOW = 16  # fewer key columns than this and the top-k layout reads better than a window
LABEL_WIDTH = 8
CELL = 4  # `.52` and its space
SUM_WIDTH = len("1.000 ✓") + 1
REST_WIDTH = len("rest") + 1
TOP_MIN, TOP_MAX = 2, 8  # automatic k of the top-k layout


def compact_cell(w: float, blocked: bool) -> Text:
    """3 cells: `.52`, `1.0`; a blocked key is `·` so it is never mistaken for a tiny weight."""
    if blocked:
        return Text(f" {BLOCK_CELL} ", style=DIM)
    text = "1.0" if w >= 0.995 else f"{w:.2f}"[1:]
    return Text(text, style=heat_style(w))


def _label(pos: int, token: str, n: int, width: int = LABEL_WIDTH) -> Text:
    t = Text(index_label(pos, n) + " ", style=DIM)
    t.append(short(token, width))
    return t


def head_title(h: dict, n_heads: int, n_kv: int) -> str:
    return f"head {h['head']}" + (f" (kv {h['kv_head']})" if n_kv != n_heads else "")


def row_labels(att: dict) -> list[str]:
    """Query labels: the key labels, except in cross-attention (decoder rows, encoder columns)."""
    return att.get("row_labels") or att["labels"]


def real_positions(att: dict, rows: bool = False) -> list[int]:
    """Non-pad positions of the keys (or of the query rows): padding is in the mask view."""
    if rows and "row_labels" in att:
        labels, pads = att["row_labels"], set(att.get("row_pad_positions", []))
    else:
        labels, pads = att["labels"], set(att.get("pad_positions", []))
    return [p for p in range(len(labels)) if p not in pads]


def focus_of(att: dict, real: list[int]) -> int:
    """The query the views centre on: --position, else the last real token."""
    focus = att.get("focus")
    return focus if focus in real else real[-1]


def key_focus(att: dict, keys: list[int], query_focus: int) -> int:
    """Self-attention: the key window follows the query focus; cross-attention keys are another text."""
    return query_focus if "row_labels" not in att and query_focus in keys else keys[-1]


def shown(real: list[int], focus: int, budget: int) -> list[int | None]:
    """A window over the real positions, as absolute positions."""
    idx = window(len(real), real.index(focus), budget)
    return [GAP if i is GAP else real[i] for i in idx]


def top_keys(weights: np.ndarray, blocked: np.ndarray, k: int) -> list[int]:
    """The k keys a query row reads most, strongest first (blocked keys never count)."""
    order = np.argsort(-np.where(blocked, -1.0, weights), kind="stable")
    return [int(j) for j in order[:k] if not blocked[j]]


def _entry(key: int, w: float, labels: list[str], n: int, label_w: int = 4) -> Text:
    t = Text(f"{index_label(key, n)} ", style=DIM)
    t.append(short(labels[key], label_w) + " ")
    t.append("1.0" if w >= 0.995 else f"{w:.2f}"[1:], style=heat_style(w))
    return t


def _rest(weights: np.ndarray, shown_keys: list[int]) -> Text:
    """The weight on the keys not shown, so the row still adds up on screen."""
    rest = float(weights.sum() - weights[shown_keys].sum()) if shown_keys else float(weights.sum())
    rest = max(rest, 0.0)
    return Text("1.0" if rest >= 0.995 else f"{rest:.2f}"[1:], style=DIM)


TOP_GAP = 2  # cells between the top-k table's columns
LABEL_MAX = 12  # a key's label in a top-k entry, at most


def fit_top(width: int, first_w: int, n: int, longest: int, k: int | None) -> tuple[int, int]:
    """(k, label width) of the top-k layout at this width: entries `12 ␣word .34` are never cut. The labels get
    the room the width leaves (up to their longest, at most LABEL_MAX); an asked-for k that cannot fit even with
    3-cell labels is lowered to what fits."""
    room = width - first_w - TOP_GAP - len("rest")

    def each(label_w: int) -> int:
        return index_digits(n) + 1 + label_w + 1 + 3 + TOP_GAP

    want = max(3, min(longest, LABEL_MAX))
    if k is None:
        k = max(TOP_MIN, min(TOP_MAX, room // each(want)))
    k = max(1, min(k, room // each(3)))
    label_w = max(3, min(want, room // k - each(0)))
    return k, label_w


class AttentionBody:
    """Picks the layout for the width it is given; see the module docstring."""

    def __init__(self, att: dict, top: int | None = None):
        self.att, self.top = att, top

    def layout(self, width: int) -> str:
        att = self.att
        real, qreal = real_positions(att), real_positions(att, rows=True)
        if self.top is not None:
            return "top"
        label_w = index_digits(len(row_labels(att))) + 1 + LABEL_WIDTH + 1
        if att["selected"] == "all":
            return "heads" if max(len(real), len(qreal)) <= COMPACT_LIMIT else "top"
        cols_fit = key_columns(width, label_w)
        if len(real) <= cols_fit:
            return "grid"
        return "window" if cols_fit >= MIN_WINDOW else "top"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        att, width = self.att, options.max_width
        real, qreal = real_positions(att), real_positions(att, rows=True)
        focus = focus_of(att, qreal)
        mode = self.layout(width)
        n = len(att["labels"])
        label_w = index_digits(len(row_labels(att))) + 1 + LABEL_WIDTH + 1
        if mode == "heads":
            yield from all_heads(att, real, qreal, width)
        elif mode in ("grid", "window"):
            cols = shown(real, key_focus(att, real, focus), max(key_columns(width, label_w), 4))
            rows = shown(qreal, focus, ROWS)
            yield single_head(att, rows, cols)
            if GAP in rows or GAP in cols:
                yield Text(f"Shown: queries {span_text(rows)}, keys {span_text(cols, n)} (--position N moves this); "
                           "rest = the weight on the keys left out; --attn-top K lists each row's strongest keys.",
                           style=DIM)
        else:
            yield top_k_table(att, qreal, focus, self.top, width)


QUERY_HEADER = "query ↓ key →"


def key_columns(width: int, label_w: int) -> int:
    """How many 4-cell key columns one head's grid holds beside its query labels (at least as wide as their
    header), the rest column and the checked row sum; each of the grid's columns has one cell of padding."""
    first = max(label_w, cell_len(QUERY_HEADER) + 1)
    return (width - first - SUM_WIDTH - REST_WIDTH - 1) // CELL


def all_heads(att: dict, real: list[int], qreal: list[int], width: int) -> RenderResult:
    """Every head's matrix side by side when that stays short at this width; else each head's last row."""
    idx = shown(real, real[-1], COMPACT_LIMIT)
    qidx = shown(qreal, qreal[-1], COMPACT_LIMIT)
    labels = row_labels(att)
    header = index_header(idx, len(att["labels"]), 3)
    panels = [Panel(Text(head_title(h, att["n_heads"], att["n_kv_heads"]), style="bold"), header,
                    [None if q is None else _compact_row(h["weights"][q], att["blocked"][q], idx) for q in qidx])
              for h in att["heads"]]
    grid = SideBySide([None if q is None else _label(q, labels[q], len(labels)) for q in qidx], panels)
    if grid.n_lines(width) > 24:
        yield last_query_rows(att, idx, qidx)
    else:
        yield grid


def _compact_row(weights: list[float], blocked: list[bool], idx: list[int | None]) -> Text:
    t = Text()
    for n, k in enumerate(idx):
        if n:
            t.append(" ")
        t.append("  ⋯" if k is None else compact_cell(weights[k], blocked[k]))
    return t


def last_query_rows(att: dict, idx: list[int | None], qidx: list[int | None]) -> Group:
    """One line per head: what the last real token reads. Compact for models with many heads."""
    q = [k for k in qidx if k is not None][-1]
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style=DIM)
    table.add_column(no_wrap=True)
    for k in idx:
        table.add_column("⋯" if k is None else Text(f"{k}\n{short(att['labels'][k], 3)}"), justify="right", no_wrap=True)
    for h in att["heads"]:
        table.add_row(Text(head_title(h, att["n_heads"], att["n_kv_heads"]), style="bold"),
                      *[Text("⋯", style=DIM) if k is None else compact_cell(h["weights"][q][k], att["blocked"][q][k]) for k in idx])
    note = Text(f"Rows are heads; each shows what query {q} ({row_labels(att)[q]}) reads.", style=DIM)
    return Group(table, note)


def single_head(att: dict, rows: list[int | None], cols: list[int | None]) -> Table:
    """One head: key indices as column headers, compact weights, the weight on left-out keys, each row's checked sum."""
    h = att["heads"][0]
    labels, n = row_labels(att), len(att["labels"])
    windowed = GAP in cols
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0), show_header=True)
    table.add_column(Text(QUERY_HEADER, style=DIM), no_wrap=True)
    table.add_column(index_header(cols, n, 3), no_wrap=True)
    if windowed:
        table.add_column(Text("rest", style=DIM), justify="right", no_wrap=True)
    table.add_column("Σ row", justify="right", no_wrap=True)
    weights = np.asarray(h["weights"])
    blocked = np.asarray(att["blocked"])
    keys = [k for k in cols if k is not None]
    for q in rows:
        if q is None:
            table.add_row(Text("   ⋮", style=DIM))
            continue
        line = _compact_row(h["weights"][q], att["blocked"][q], cols)
        s = h["row_sums"][q]
        masked = q in att["fully_masked_rows"]
        ok = abs(s - (0.0 if masked else 1.0)) <= 1e-4
        extra = [_rest(np.where(blocked[q], 0.0, weights[q]), keys)] if windowed else []
        table.add_row(_label(q, labels[q], len(labels)), line, *extra, Text(f"{s:.3f} " + ("✓" if ok else "✗"), style=OK if ok else WARN))
    return table


def top_k_table(att: dict, qreal: list[int], focus: int, k: int | None = None, width: int = 120) -> Group:
    """Per query row (one head) or per head (all heads, the focus row): its k strongest keys, then the rest.
    k None: as many as the width holds (TOP_MIN..TOP_MAX); the key labels take the room left."""
    labels, qlabels = att["labels"], row_labels(att)
    n = len(labels)
    blocked = np.asarray(att["blocked"])
    every_head = att["selected"] == "all"
    pairs = ([(h, focus) for h in att["heads"]] if every_head
             else [(att["heads"][0], q) for q in shown(qreal, focus, ROWS)])
    if every_head:
        first_w = max(cell_len(head_title(h, att["n_heads"], att["n_kv_heads"])) for h in att["heads"])
    else:
        first_w = max(_label(q, qlabels[q], len(qlabels)).cell_len for _, q in pairs if q is not None)
    asked = k
    k, label_w = fit_top(width, max(first_w, len("query")), n, max(cell_len(labels[p]) for p in key_positions(att)), k)
    table = Table(box=None, pad_edge=False, padding=(0, TOP_GAP, 0, 0), header_style=DIM)
    if every_head:  # every row is the focus query: the note names it
        table.add_column("head", no_wrap=True, header_style=DIM)
    else:
        table.add_column("query", no_wrap=True)
    for r in range(k):
        table.add_column(f"key {r + 1}", no_wrap=True)
    table.add_column("rest", no_wrap=True, justify="right")
    for h, q in pairs:
        first = [Text(head_title(h, att["n_heads"], att["n_kv_heads"]), style="bold")] if every_head else []
        if q is None:
            table.add_row(Text("   ⋮", style=DIM))
            continue
        w = np.asarray(h["weights"][q])
        top = top_keys(w, blocked[q], k)
        entries = [_entry(j, float(w[j]), labels, n, label_w) for j in top] + [Text("")] * (k - len(top))
        query = [] if every_head else [_label(q, qlabels[q], len(qlabels))]
        table.add_row(*first, *query, *entries, _rest(np.where(blocked[q], 0.0, w), top))
    what = f"Per head, the keys query {focus} ({qlabels[focus]}) reads most" if every_head else "Per query, the keys it reads most"
    fewer = f" ({k} of the {asked} asked fit this width)" if asked is not None and k < asked else ""
    note = Text(f"{what}; rest = all others (--attn-top K){fewer}.", style=DIM)
    return Group(table, note)


def key_positions(att: dict) -> list[int]:
    """The key positions a top-k entry can name (every real key)."""
    return real_positions(att) or [0]


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
    caption = f"Softmax of masked scores: how much each query reads from each key; {BLOCK_CELL} = blocked."
    if kind:
        caption = (f"Softmax of decoder queries against encoder keys: how much each decoder position (row) reads "
                   f"from each input token (column); {BLOCK_CELL} = blocked (encoder padding).")
    parts: list = [heading(number, title, caption)]
    if att.get("missing"):
        parts.append(calm(att["missing"]))
        return Group(*parts)
    parts.append(AttentionBody(att, att.get("top")))
    parts.append(_check_line(att))
    if att["selected"] == "all":
        hint = "--head N: one head in full; --layer N: another layer."
        if att.get("stack"):
            hint += " --stack encoder|decoder, --attn self|cross: another attention."
        if att["n_kv_heads"] != att["n_heads"]:
            hint = f"{att['n_heads'] // att['n_kv_heads']} heads per kv head. " + hint
        parts.append(Text(hint, style=DIM))
    return Group(*parts)
