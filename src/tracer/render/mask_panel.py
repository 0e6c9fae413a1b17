"""Section 4: how this run's attention mask was built, broadcast onto the scores, and its keep grid."""

from __future__ import annotations

import re

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from tracer.render.side_by_side import Panel, SideBySide
from tracer.render.theme import BLOCK_CELL, DIM, KEEP_CELL, OK, WARN, calm, heading, named_shape, rows_phrase, short
from tracer.render.window import index_digits, index_header, index_label, span_text, window

MAX_PART_GRID = 16  # longer inputs show only the combined grid; the parts are described above it
LABEL_WIDTH = 10
ALL_ROWS = 20  # up to this many positions every query row is shown
ROWS = 10  # longer inputs: query rows shown at most; the window follows --position
CELL = 2  # a mask cell and its space


def grid_row(cells: list[bool], idx: list[int | None]) -> Text:
    t = Text()
    for n, k in enumerate(idx):
        if n:
            t.append(" ")
        if k is None:
            t.append("⋯", style=DIM)
        elif cells[k]:
            t.append(KEEP_CELL, style=OK)
        else:
            t.append(BLOCK_CELL, style=DIM)
    return t


def query_label(pos: int, token: str, n: int, width: int = LABEL_WIDTH) -> Text:
    t = Text(index_label(pos, n) + " ", style=DIM)
    t.append(short(token, width))
    return t


class MaskGrids:
    """The parts and their combination side by side, query rows labelled with tokens, flagged rows marked.

    Past what fits the width, a window of keys and queries around the focus (absolute indices, ⋯ and ⋮
    where positions are left out), and only the combined grid."""

    def __init__(self, grids: dict[str, list[list[bool]]], labels: list[str], flagged: set[int],
                 titles: dict[str, str], focus: int | None = None, n_keys: int | None = None):
        self.grids, self.labels, self.flagged, self.titles = grids, labels, flagged, titles
        self.focus = len(labels) - 1 if focus is None or not 0 <= focus < len(labels) else focus
        self.n_keys = n_keys  # key columns when they are not the query positions (cross-attention)

    def layout(self, width: int) -> tuple[list[int | None], list[int | None], dict]:
        """(rows, columns, grids) shown at this width."""
        n = len(self.labels)
        label_w = index_digits(n) + 1 + LABEL_WIDTH
        after_w = len("⚠ no key") + 3 if self.flagged else 0
        cols_fit = max((width - label_w - after_w - 3) // CELL, 8)
        grids = self.grids
        if max(n, self.n_keys or 0) > cols_fit or n > MAX_PART_GRID:
            grids = {"keep": grids["keep"]} if "keep" in grids else grids
        keys = n if self.n_keys is None else self.n_keys
        key_focus = self.focus if self.n_keys is None else keys - 1
        return window(n, self.focus, n if n <= ALL_ROWS else ROWS), window(keys, key_focus, cols_fit), grids

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        n = len(self.labels)
        rows, cols, grids = self.layout(options.max_width)
        row_labels = [None if q is None else query_label(q, self.labels[q], n) for q in rows]
        header = index_header(cols, n if self.n_keys is None else self.n_keys, 1)
        titles = dict(self.titles)
        if len(grids) == 1:
            titles["keep"] = "keep"
        panels = [Panel(Text(titles.get(name, name), style="bold"), header,
                        [None if q is None else grid_row(g[q], cols) for q in rows]) for name, g in grids.items()]
        after = [Text("⚠ no key", style=WARN) if q in self.flagged else Text("") for q in rows] if self.flagged else None
        yield SideBySide(row_labels, panels, after)
        if None in rows or None in cols:
            yield Text(f"Shown: queries {span_text(rows)}, keys {span_text(cols, self.n_keys or n)} "
                       "(--position N moves this).",
                       style=DIM)


class BuildLines:
    """Each part's rule, dtype, shape and broadcast, then their AND. Where a line would wrap, its shapes
    drop the axis names (`[1, 1, 512, 512]`): the caption and the shape flow name them."""

    def __init__(self, mask: dict):
        self.mask = mask

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        mask = self.mask
        room = options.max_width - max([len(p["name"]) for p in mask["parts"]] + [4]) - 2
        lines = Table.grid(padding=(0, 2))
        lines.add_column(style="bold", no_wrap=True)
        lines.add_column(overflow="fold")
        for p in mask["parts"]:
            what = Text(p["rule"])
            what.append("\n" + _fit(f"{p['dtype']} {named_shape(p['axes'], p['shape'])}, as {p['broadcast']}", room), style=DIM)
            lines.add_row(p["name"], what)
        scores = named_shape(["batch", "heads", "q_len", "kv_len"], mask["scores_shape"])
        heads = mask["scores_shape"][1]
        keep = Text(mask["combine"])
        keep.append(_fit(f"  {mask['dtype']} {named_shape(mask['axes'], mask['shape'])}, broadcast over heads={heads}",
                         room - len(mask["combine"])), style=DIM)
        keep.append("\n" + _fit(f"masked_scores = where(keep, scores, -inf), scores {scores}", room), style=DIM)
        lines.add_row("keep", keep)
        yield lines


_NAMED_AXIS = re.compile(r"\b[a-z_]+=(\d+)")
_SHAPE = re.compile(r"\[[^\]]*\]")


def _fit(line: str, room: int) -> str:
    """`[q_len=512, kv_len=512]` -> `[512, 512]` when the line would not fit in `room` cells."""
    return line if len(line) <= room else _SHAPE.sub(lambda m: _NAMED_AXIS.sub(r"\1", m.group(0)), line)


def _bucket_table(b: dict) -> Group:
    """T5: distance -> bucket -> bias per head, for one query row."""
    if b.get("missing"):
        return Group(calm(b["missing"]))
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style=DIM)
    table.add_column("key - query", justify="right", no_wrap=True)
    table.add_column("bucket", justify="right", no_wrap=True)
    n_heads = len(b["rows"][0]["bias"]) if b["rows"] else 0
    for h in range(n_heads):
        table.add_column(f"head {h}", justify="right", no_wrap=True)
    for r in b["rows"]:
        table.add_row(f"{r['distance']:+d}", str(r["bucket"]), *[f"{x:+.3f}" for x in r["bias"]])
    way = "both directions (half the buckets each)" if b["bidirectional"] else "looking back only"
    note = Text(f"relative position bias {b['step']}: {b['num_buckets']} buckets, {way}, exact up to "
                f"{b['num_buckets'] // (4 if b['bidirectional'] else 2)} then log-spaced to {b['max_distance']}; "
                f"{b['shared']}. Rows: what query {b.get('query')} adds to each key's score.", style=DIM)
    return Group(note, table)


def render_mask(mask: dict, labels: list[str], number: int | str = 4, key_labels: list[str] | None = None) -> Group:
    sharing = mask["layers_sharing"]
    where = {"encoder": "encoder ", "decoder": "decoder "}.get(mask.get("stack", ""), "")
    if mask.get("part") == "cross_attn":
        title = f"Mask  {where}layer {mask['layer']} cross-attention (the same for all layers)"
    elif sharing == "all":
        title = f"Mask  {where}layer {mask['layer']} (the same for all layers)"
    elif len(sharing) > 1:
        title = f"Mask  {where}layer {mask['layer']} (the same for layers {', '.join(map(str, sharing))})"
    else:
        title = f"Mask  {where}layer {mask['layer']} (this layer only)"
    if mask["source"] == "override":
        parts: list = [heading(number, title, f"Given from outside: {mask.get('note') or 'a mask override'}.")]
        if not mask["grids"]:
            parts.append(calm("the mask step was kept as statistics only; add --keep '*.attn.mask' to see its grid"))
            return Group(*parts)
    else:
        parts = [heading(number, title, "Built from these parts, broadcast to the scores and combined with AND:"),
                 BuildLines(mask)]
    grids = mask["grids"]
    if len(mask.get("parts", [])) < 2:  # the keep grid alone says it all
        grids = {"keep": grids["keep"]} if "keep" in grids else grids
    titles = {"keep": "keep (all combined)" if len(grids) > 1 else "keep"}
    flagged = set(mask.get("fully_masked_rows", []))
    n_keys = len(key_labels) if key_labels is not None else None
    parts.append(MaskGrids(grids, labels, flagged, titles, mask.get("focus"), n_keys))
    caption = (f"{KEEP_CELL} = the query (row) may attend to the key (column); {BLOCK_CELL} = blocked. "
               f"Batch row {mask['batch_row']}.")
    parts.append(Text(caption, style=DIM))
    if flagged:
        which = rows_phrase(sorted(flagged), "query row")
        verb = "has" if len(flagged) == 1 else "have"
        parts.append(Text(f"⚠ {which} {verb} no key to attend to: the weights there are all zero (flagged, not NaN).",
                          style=WARN))
    pos = mask.get("positions")
    if pos:
        parts.append(Text(f"positions  {pos['rule']}: {pos['row']} (batch row {mask['batch_row']})"))
        w = pos["warning"]
        parts.append(Text(f"{'⚠' if w['level'] == 'warn' else 'note'} {w['code']} {w['message']}",
                          style=WARN if w["level"] == "warn" else DIM))
    for note in mask.get("notes", []):
        parts.append(Text(f"note {note}", style=DIM))
    if mask.get("buckets"):
        parts.append(_bucket_table(mask["buckets"]))
    if mask.get("matches_recorded") is False:
        parts.append(Text("⚠ the recorded attn.mask differs from the mask rebuilt here", style=WARN))
    return Group(*parts)
