"""Section 4: how this run's attention mask was built, broadcast onto the scores, and its keep grid."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.render.side_by_side import Panel, SideBySide
from tracer.render.theme import BLOCK_CELL, DIM, KEEP_CELL, OK, WARN, calm, heading, named_shape, rows_phrase, short

MAX_GRID = 20  # positions shown per axis before the middle is elided
MAX_PART_GRID = 16  # longer inputs show only the combined grid; the parts are described above it
LABEL_WIDTH = 10


def grid_indices(n: int, limit: int = MAX_GRID) -> list[int | None]:
    """All positions, or the first few and the last many (the last queries matter most); None marks the gap."""
    if n <= limit:
        return list(range(n))
    head = limit // 4
    return list(range(head)) + [None] + list(range(n - (limit - head), n))


def key_header(idx: list[int | None], n: int) -> Text:
    digit = (lambda k: str(k % 10)) if n > 10 else str  # noqa: E731
    return Text(" ".join("⋯" if k is None else digit(k) for k in idx), style=DIM)


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


def query_label(pos: int, token: str) -> Text:
    t = Text(f"{pos:>2} ", style=DIM)
    t.append(short(token, LABEL_WIDTH))
    return t


def mask_grids(grids: dict[str, list[list[bool]]], labels: list[str], flagged: set[int], titles: dict[str, str],
               n_keys: int | None = None) -> SideBySide:
    """The parts and their combination side by side, query rows labelled with tokens, flagged rows marked.
    n_keys: the number of key columns when they are not the query positions (cross-attention)."""
    n = len(labels)
    idx = grid_indices(n)
    kn = n if n_keys is None else n_keys
    kidx = idx if n_keys is None else grid_indices(kn)
    row_labels = [None if q is None else query_label(q, labels[q]) for q in idx]
    panels = [Panel(Text(titles.get(name, name), style="bold"), key_header(kidx, kn),
                    [None if q is None else grid_row(g[q], kidx) for q in idx]) for name, g in grids.items()]
    after = [Text("⚠ no key", style=WARN) if q in flagged else Text("") for q in idx] if flagged else None
    return SideBySide(row_labels, panels, after)


def _build_lines(mask: dict) -> Table:
    lines = Table.grid(padding=(0, 2))
    lines.add_column(style="bold", no_wrap=True)
    lines.add_column(overflow="fold")
    for p in mask["parts"]:
        what = Text(p["rule"])
        what.append(f"\n{p['dtype']} {named_shape(p['axes'], p['shape'])}, as {p['broadcast']}", style=DIM)
        lines.add_row(p["name"], what)
    scores = named_shape(["batch", "heads", "q_len", "kv_len"], mask["scores_shape"])
    heads = mask["scores_shape"][1]
    keep = Text(mask["combine"])
    keep.append(f"  {mask['dtype']} {named_shape(mask['axes'], mask['shape'])}, broadcast over heads={heads}", style=DIM)
    keep.append(f"\nmasked_scores = where(keep, scores, -inf), scores {scores}", style=DIM)
    lines.add_row("keep", keep)
    return lines


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


def render_mask(mask: dict, labels: list[str], number: int = 4, key_labels: list[str] | None = None) -> Group:
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
        parts = [heading(number, title, "Built from these parts, each broadcast to [batch, heads, q_len, kv_len], then combined with AND:"),
                 _build_lines(mask)]
    grids = mask["grids"]
    if len(mask.get("parts", [])) < 2 or len(labels) > MAX_PART_GRID:  # the keep grid alone says it all
        grids = {"keep": grids["keep"]} if "keep" in grids else grids
    titles = {"keep": "keep (all combined)" if len(grids) > 1 else "keep"}
    flagged = set(mask.get("fully_masked_rows", []))
    n_keys = len(key_labels) if key_labels is not None else None
    parts.append(mask_grids(grids, labels, flagged, titles, n_keys))
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
