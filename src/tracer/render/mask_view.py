"""Rich rendering of the mask lab: the canonical pattern, de-duplicated per (b,h) slice, and its warnings.

Symbols: ■ keep, · hard block, ~ soft (finite-fill) block, + / - kept with a positive / negative bias.
Colour carries meaning only (kept green, soft yellow, bias cyan/magenta, hard dim) and NO_COLOR
turns it off. Big grids are capped with a note; --show b=0,h=0..1,q=0..7 selects.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console
from rich.text import Text

from tracer.errors import TracerError
from tracer.masks.result import MaskResult, MaskWarning
from tracer.masks.warnings import _ranges

MAX_SLICES = 6
MAX_ROWS = 40
MAX_COLS = 64
SYMBOL_STYLE = {"■": "green", "·": "dim", "~": "yellow", "+": "cyan", "-": "magenta", "×": "bold red"}
LEVEL_STYLE = {"error": "bold red", "warn": "yellow", "info": "cyan"}
LEVEL_WORD = {"error": "ERROR", "warn": "WARN ", "info": "note "}


# ---------- selection ----------


def parse_show(text: str | None, shape) -> dict[str, list[int]]:
    """'b=0,h=0..1,q=2..5' -> {'b': [0], 'h': [0, 1], 'q': [2, 3, 4, 5]}; ranges inclusive, '..' or '-'."""
    B, H, Q, K = shape
    sizes = {"b": B, "h": H, "q": Q, "k": K}
    out = {axis: list(range(n)) for axis, n in sizes.items()}
    if not text:
        return out
    current = None
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if "=" in part:
            current, _, spec = part.partition("=")
            current = current.strip().lower()
            if current not in sizes:
                raise TracerError(f"--show {text!r}: axes are b, h, q, k")
            out[current] = []
        elif current is None:
            raise TracerError(f"--show {text!r}: write axis=values, e.g. b=0,h=0..1")
        else:
            spec = part
        out[current].extend(_expand(spec, sizes[current], text))
    return {k: sorted(set(v)) for k, v in out.items()}


def _expand(spec: str, size: int, whole: str) -> list[int]:
    spec = spec.strip().replace("-", "..") if not spec.strip().startswith("-") else spec.strip()
    try:
        if ".." in spec:
            lo, hi = spec.split("..")
            lo_i, hi_i = int(lo or 0), int(hi) if hi else size - 1
        else:
            lo_i = hi_i = int(spec)
    except ValueError:
        raise TracerError(f"--show {whole!r}: {spec!r} is not an index or a range like 0..3") from None
    if lo_i < 0 or hi_i >= size or lo_i > hi_i:
        raise TracerError(f"--show {whole!r}: {spec} is outside 0..{size - 1}")
    return list(range(lo_i, hi_i + 1))


# ---------- symbols and grouping ----------


def symbol_grid(result: MaskResult, b: int, h: int) -> np.ndarray:
    """[Q, K] of symbols for one slice."""
    keep, soft = result.keep[b, h], result.soft[b, h]
    grid = np.full(keep.shape, "·", dtype="<U1")
    grid[soft] = "~"
    grid[keep] = "■"
    if result.bias is not None:
        bias = result.bias[b, h]
        grid[keep & (bias > 0)] = "+"
        grid[keep & (bias < 0)] = "-"
    return grid


def group_slices(grids: dict[tuple[int, int], np.ndarray]) -> list[tuple[list[tuple[int, int]], np.ndarray]]:
    """Identical slices together, in first-seen order."""
    groups: dict[bytes, tuple[list, np.ndarray]] = {}
    for bh, g in grids.items():
        key = g.tobytes()
        if key not in groups:
            groups[key] = ([], g)
        groups[key][0].append(bh)
    return list(groups.values())


def group_label(cells: list[tuple[int, int]], B: int, H: int) -> str:
    """'b=0..1, h=0..3' when the cells form a rectangle, else per batch 'b=0 h=0,2; b=1 h=1'."""
    bs = sorted({c[0] for c in cells})
    hs = sorted({c[1] for c in cells})
    if len(cells) == len(bs) * len(hs):
        return f"b={_ranges(bs)}, h={_ranges(hs)}"
    parts = []
    for b in bs:
        parts.append(f"b={b} h={_ranges(sorted(c[1] for c in cells if c[0] == b))}")
    return "; ".join(parts)


# ---------- the main view ----------


def render_result(console: Console, result: MaskResult, show: str | None = None, tokens: list[str] | None = None) -> None:
    B, H, Q, K = result.score_shape
    console.print(Text.assemble(("convention ", "bold"), (result.convention, "bold"), f"   {result.summary}"))
    console.print(f"scores     [B={B}, H={H}, Q={Q}, K={K}] {result.score_dtype}")
    render_input(console, result)
    if result.steps:
        console.print(Text("steps", style="bold"))
        for s in result.steps:
            console.print(Text("  " + s.line()))
    for note in result.notes:
        console.print(Text("  note: " + note, style="dim"))
    render_pattern(console, result, show, tokens)
    render_extras(console, result)
    render_fully_masked(console, result)
    render_warnings(console, result.warnings)


def render_input(console: Console, result: MaskResult) -> None:
    info = result.input
    if info.shape is None:
        text = "none" if info.origin == "none" else f"{info.origin} {info.text!r}"
        console.print(f"input      {text}")
        return
    values = ", ".join(f"{v}:{n}" for v, n in info.values) + (" ..." if info.distinct > len(info.values) else "")
    line = f"input      shape {tuple(info.shape)} {info.dtype}   values {{{values}}}"
    if info.n_nan or info.n_posinf or info.n_neginf:
        line += f"   nan {info.n_nan}, +inf {info.n_posinf}, -inf {info.n_neginf}"
    console.print(Text(line))
    if info.note:
        console.print(Text(f"           {info.note}", style="dim"))


def render_pattern(console: Console, result: MaskResult, show: str | None, tokens: list[str] | None,
                   grids: dict | None = None, title: str = "pattern") -> None:
    B, H, Q, K = result.score_shape
    sel = parse_show(show, result.score_shape)
    if grids is None:
        grids = {(b, h): symbol_grid(result, b, h) for b in sel["b"] for h in sel["h"]}
    groups = group_slices(grids)
    legend = "■ keep  · blocked (-inf)  ~ soft block (finite fill)  +/- kept with bias"
    if title != "pattern":
        legend = "× differs  ■ both keep  · both block"
    console.print(Text.assemble((title, "bold"), ("   " + legend, "dim")))
    key_offset = K - Q
    if tokens:
        listing = "  ".join(f"{i}:{t}" for i, t in enumerate(tokens[:MAX_COLS]))
        console.print(Text("  keys  " + listing, style="dim"))
    for cells, grid in groups[:MAX_SLICES]:
        label = group_label(cells, B, H)
        suffix = " identical" if len(cells) > 1 else ""
        console.print(Text(f"  {label}{suffix}", style="bold"))
        for line in grid_lines(grid, sel["q"], sel["k"], tokens, key_offset, counts=(title == "pattern")):
            console.print(line)
    if len(groups) > MAX_SLICES:
        console.print(Text(f"  ... {len(groups) - MAX_SLICES} more distinct slice(s): select with --show b=..,h=..",
                           style="dim"))


def grid_lines(grid: np.ndarray, qs: list[int], ks: list[int], tokens, key_offset: int, counts: bool = True) -> list[Text]:
    lines = []
    shown_k = ks[:MAX_COLS]
    width = len(str(max(qs))) if qs else 1
    header = Text(" " * (7 + width) + "".join(str(k % 10) for k in shown_k), style="dim")
    lines.append(header)
    for q in qs[:MAX_ROWS]:
        t = Text(f"    q={q:<{width}} ")
        for k in shown_k:
            sym = grid[q, k]
            t.append(sym, style=SYMBOL_STYLE.get(sym, ""))
        if len(ks) > MAX_COLS:
            t.append(" …", style="dim")
        if counts:
            kept = int(np.isin(grid[q], ("■", "+", "-")).sum())
            t.append(f"  {kept}/{grid.shape[1]}", style="dim" if kept else "bold red")
        label = query_token(tokens, q, key_offset)
        if label:
            t.append(f"  {label}", style="dim")
        lines.append(t)
    if len(qs) > MAX_ROWS:
        lines.append(Text(f"    ... {len(qs) - MAX_ROWS} more rows: --show q=A..B", style="dim"))
    if len(ks) > MAX_COLS:
        lines.append(Text(f"    ... {len(ks) - MAX_COLS} more keys: --show k=A..B", style="dim"))
    return lines


def query_token(tokens, q: int, key_offset: int) -> str | None:
    if not tokens:
        return None
    i = q + key_offset
    return tokens[i] if 0 <= i < len(tokens) else None


def render_extras(console: Console, result: MaskResult) -> None:
    if result.bias is not None:
        kept = result.bias[result.keep]
        console.print(Text(f"bias       on kept cells: {kept.min():.4g} .. {kept.max():.4g}  "
                           f"({int(np.count_nonzero(result.bias))} nonzero)"))
    slopes = result.extra.get("alibi_slopes")
    if slopes is not None:
        flat = np.asarray(slopes).reshape(-1)
        console.print(Text("slopes     " + ", ".join(f"{s:.4g}" for s in flat[:8]) + (" ..." if flat.size > 8 else "")))
    buckets = result.extra.get("buckets")
    if buckets is not None:
        console.print(Text("buckets    [Q, K] relative-position bucket ids", style="bold"))
        for q, row in enumerate(np.asarray(buckets)[:MAX_ROWS]):
            console.print(Text(f"    q={q:<3} " + " ".join(f"{int(v):>2}" for v in row[:32]) + (" …" if row.size > 32 else "")))
    objects = result.extra.get("attn_bias_objects")
    if objects:
        console.print(Text("objects    " + ", ".join(objects)))


def render_fully_masked(console: Console, result: MaskResult) -> None:
    rows = result.fully_masked()
    if not rows:
        return
    from tracer.masks.warnings import describe_rows

    outcomes = sorted({result.row_outcome(*r) for r in rows})
    console.print(Text.assemble(("fully masked ", "bold"), f"{len(rows)} row(s): {describe_rows(rows, result.score_shape)}"))
    console.print(Text.assemble("  here: ", (" / ".join(outcomes), "bold")))
    for backend, what in result.outcome_notes.items():
        console.print(Text(f"  {backend}: {what}", style="dim"))


def render_warnings(console: Console, warnings: list[MaskWarning]) -> None:
    for w in warnings:
        console.print(Text.assemble((f"{LEVEL_WORD[w.level]} {w.code}", LEVEL_STYLE[w.level]), f"  {w.message}"))
        if w.code == "ML008" and "top_left" in w.data:
            render_corner_pair(console, np.asarray(w.data["top_left"]), np.asarray(w.data["bottom_right"]))


def render_corner_pair(console: Console, top_left: np.ndarray, bottom_right: np.ndarray) -> None:
    Q, K = top_left.shape
    if Q > 12 or K > 24:
        return
    console.print(Text(f"      {'top-left':<{max(K + 2, 10)}}bottom-right", style="dim"))
    for q in range(Q):
        a = "".join("■" if v else "·" for v in top_left[q])
        b = "".join("■" if v else "·" for v in bottom_right[q])
        console.print(Text(f"      {a:<{max(K + 2, 10)}}{b}", style="dim"))


# ---------- --compare and --check-weights ----------


def render_compare(console: Console, comparison, show: str | None = None, tokens: list[str] | None = None) -> None:
    a, b = comparison.a, comparison.b
    style = "green" if comparison.kind == "identical" else "yellow"
    console.print(Text.assemble(("compare ", "bold"), f"{a.convention} vs {b.convention}: ",
                                (comparison.verdict, style)))
    if comparison.kind == "identical" or not comparison.diff.any():
        return
    B, H, Q, K = a.score_shape
    sel = parse_show(show, a.score_shape)
    grids = {}
    for bb in sel["b"]:
        for hh in sel["h"]:
            g = np.where(a.keep[bb, hh] & b.keep[bb, hh], "■", "·").astype("<U1")
            g[comparison.diff[bb, hh]] = "×"
            grids[(bb, hh)] = g
    render_pattern(console, a, show, tokens, grids=grids, title="xor")


def render_check(console: Console, check) -> None:
    head = f"check-weights {check.source}"
    if check.scores_source:
        head += f"  (scores: {check.scores_source})"
    console.print(Text(head, style="bold"))
    marks = {"ok": ("ok  ", "green"), "fail": ("FAIL", "bold red"), "info": ("info", "cyan")}
    for c in check.checks:
        word, style = marks[c.status]
        console.print(Text.assemble("  ", (word, style), f"  {c.name}: {c.detail}"))
