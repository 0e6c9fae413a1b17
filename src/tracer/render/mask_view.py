"""Rich rendering of the mask lab: the canonical pattern, de-duplicated per (b,h) slice, and its warnings.

Symbols: ■ keep, · hard block, ~ soft (finite-fill) block, + / - kept with a positive / negative bias.
Colour carries meaning only (kept green, soft yellow, bias cyan/magenta, hard dim) and NO_COLOR
turns it off. Big grids are capped with a note; --show b=0,h=0..1,q=0..7 selects.
"""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.text import Text

from tracer.errors import TracerError
from tracer.masks.pitfalls import PITFALLS, cited
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


def result_view(result: MaskResult, show: str | None = None, tokens: list[str] | None = None) -> Group:
    B, H, Q, K = result.score_shape
    out: list = [Text.assemble(("convention ", "bold"), (result.convention, "bold"), f"   {result.summary}"),
                 Text(f"scores     [B={B}, H={H}, Q={Q}, K={K}] {result.score_dtype}")]
    out += input_lines(result)
    if result.steps:
        out.append(Text("steps", style="bold"))
        out += [Text("  " + s.line()) for s in result.steps]
    out += [Text("  note: " + note, style="dim") for note in result.notes]
    out += pattern_lines(result, show, tokens)
    out += extras_lines(result)
    out += fully_masked_lines(result)
    out += warning_lines(result.warnings)
    return Group(*out, *pitfall_legend(out))


def input_lines(result: MaskResult) -> list[Text]:
    info = result.input
    if info.shape is None:
        text = "none" if info.origin == "none" else f"{info.origin} {info.text!r}"
        return [Text(f"input      {text}")]
    values = ", ".join(f"{v}:{n}" for v, n in info.values) + (" ..." if info.distinct > len(info.values) else "")
    line = f"input      shape {tuple(info.shape)} {info.dtype}   values {{{values}}}"
    if info.n_nan or info.n_posinf or info.n_neginf:
        line += f"   nan {info.n_nan}, +inf {info.n_posinf}, -inf {info.n_neginf}"
    out = [Text(line)]
    if info.note:
        out.append(Text(f"           {info.note}", style="dim"))
    return out


def pattern_lines(result: MaskResult, show: str | None, tokens: list[str] | None,
                  grids: dict | None = None, title: str = "pattern") -> list[Text]:
    B, H, Q, K = result.score_shape
    sel = parse_show(show, result.score_shape)
    if grids is None:
        grids = {(b, h): symbol_grid(result, b, h) for b in sel["b"] for h in sel["h"]}
    groups = group_slices(grids)
    legend = "■ keep  · blocked (-inf)  ~ soft block (finite fill)  +/- kept with bias"
    if title != "pattern":
        legend = "× differs  ■ both keep  · both block"
    out = [Text.assemble((title, "bold"), ("   " + legend, "dim"))]
    key_offset = K - Q
    if tokens:
        listing = "  ".join(f"{i}:{t}" for i, t in enumerate(tokens[:MAX_COLS]))
        out.append(Text("  keys  " + listing, style="dim"))
    for cells, grid in groups[:MAX_SLICES]:
        label = group_label(cells, B, H)
        suffix = " identical" if len(cells) > 1 else ""
        out.append(Text(f"  {label}{suffix}", style="bold"))
        out += grid_lines(grid, sel["q"], sel["k"], tokens, key_offset, counts=(title == "pattern"))
    if len(groups) > MAX_SLICES:
        out.append(Text(f"  ... {len(groups) - MAX_SLICES} more distinct slice(s): select with --show b=..,h=..",
                        style="dim"))
    return out


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


def extras_lines(result: MaskResult) -> list[Text]:
    out = []
    if result.bias is not None:
        kept = result.bias[result.keep]
        out.append(Text(f"bias       on kept cells: {kept.min():.4g} .. {kept.max():.4g}  "
                        f"({int(np.count_nonzero(result.bias))} nonzero)"))
    slopes = result.extra.get("alibi_slopes")
    if slopes is not None:
        flat = np.asarray(slopes).reshape(-1)
        out.append(Text("slopes     " + ", ".join(f"{s:.4g}" for s in flat[:8]) + (" ..." if flat.size > 8 else "")))
    buckets = result.extra.get("buckets")
    if buckets is not None:
        out.append(Text("buckets    [Q, K] relative-position bucket ids", style="bold"))
        for q, row in enumerate(np.asarray(buckets)[:MAX_ROWS]):
            out.append(Text(f"    q={q:<3} " + " ".join(f"{int(v):>2}" for v in row[:32]) + (" …" if row.size > 32 else "")))
    objects = result.extra.get("attn_bias_objects")
    if objects:
        out.append(Text("objects    " + ", ".join(objects)))
    return out


def fully_masked_lines(result: MaskResult) -> list[Text]:
    rows = result.fully_masked()
    if not rows:
        return []
    from tracer.masks.warnings import describe_rows

    outcomes = sorted({result.row_outcome(*r) for r in rows})
    out = [Text.assemble(("fully masked ", "bold"), f"{len(rows)} row(s): {describe_rows(rows, result.score_shape)}"),
           Text.assemble("  here: ", (" / ".join(outcomes), "bold"))]
    out += [Text(f"  {backend}: {what}", style="dim") for backend, what in result.outcome_notes.items()]
    return out


def warning_lines(warnings: list[MaskWarning]) -> list[Text]:
    out = []
    for w in warnings:
        out.append(Text.assemble((f"{LEVEL_WORD[w.level]} {w.code}", LEVEL_STYLE[w.level]), f"  {w.message}"))
        if w.code == "ML008" and "top_left" in w.data:
            out += corner_pair_lines(np.asarray(w.data["top_left"]), np.asarray(w.data["bottom_right"]))
    return out


def warnings_view(warnings: list[MaskWarning]) -> Group:
    lines = warning_lines(warnings)
    return Group(*lines, *pitfall_legend(lines))


def pitfall_legend(lines) -> list[Text]:
    """What each porting-pitfall code the lines cite means (`P3 the mask applied after the softmax ...`)."""
    codes = cited(line.plain for line in lines if isinstance(line, Text))
    if not codes:
        return []
    return [Text("pitfalls cited (man tracer, tracer mask: Porting pitfalls)", style="dim"),
            *[Text(f"  {code:<4} {PITFALLS[code]}", style="dim") for code in codes]]


def corner_pair_lines(top_left: np.ndarray, bottom_right: np.ndarray) -> list[Text]:
    Q, K = top_left.shape
    if Q > 12 or K > 24:
        return []
    out = [Text(f"      {'top-left':<{max(K + 2, 10)}}bottom-right", style="dim")]
    for q in range(Q):
        a = "".join("■" if v else "·" for v in top_left[q])
        b = "".join("■" if v else "·" for v in bottom_right[q])
        out.append(Text(f"      {a:<{max(K + 2, 10)}}{b}", style="dim"))
    return out


# ---------- --compare and --check-weights ----------


def compare_view(comparison, show: str | None = None, tokens: list[str] | None = None) -> Group:
    a, b = comparison.a, comparison.b
    style = "green" if comparison.kind == "identical" else "yellow"
    head = Text.assemble(("compare ", "bold"), f"{a.convention} vs {b.convention}: ", (comparison.verdict, style))
    if comparison.kind == "identical" or not comparison.diff.any():
        return Group(head)
    sel = parse_show(show, a.score_shape)
    grids = {}
    for bb in sel["b"]:
        for hh in sel["h"]:
            g = np.where(a.keep[bb, hh] & b.keep[bb, hh], "■", "·").astype("<U1")
            g[comparison.diff[bb, hh]] = "×"
            grids[(bb, hh)] = g
    return Group(head, *pattern_lines(a, show, tokens, grids=grids, title="xor"))


def check_view(check) -> Group:
    head = f"check-weights {check.source}"
    if check.scores_source:
        head += f"  (scores: {check.scores_source})"
    out = [Text(head, style="bold")]
    marks = {"ok": ("ok  ", "green"), "fail": ("FAIL", "bold red"), "info": ("info", "cyan")}
    for c in check.checks:
        word, style = marks[c.status]
        out.append(Text.assemble("  ", (word, style), f"  {c.name}: {c.detail}"))
    return Group(*out, *pitfall_legend(out))
