"""Section 3: the shape flow, one row per step in order: name, op, input shapes -> output shape, statistics."""

from __future__ import annotations

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM, WARN, bare_shape, heading, named_shape, stats_text

_SHORT_INPUT = {"input.mask": "mask", "input.ids": "ids", "input.positions": "positions"}


def _local(name: str, block: int | None, indent: bool) -> str:
    """Inside an unfolded block the `blocks.i.` prefix is the group label, so rows show the rest."""
    if block is None or not indent:
        return name
    return "  " + name.split(f"blocks.{block}.", 1)[-1]


def _input_label(name: str) -> str:
    return _SHORT_INPUT.get(name, name.rsplit(".", 1)[-1] if ".blocks." in f".{name}" else name)


def _shape_cell(r: dict, compute_dtype: str | None) -> Text:
    """`[1,3,32] -> [batch=1, heads=4, pos=3, d_head=8]`: inputs only when the shape changes."""
    out = Text()
    ins = r["inputs"]
    changed = any(i["shape"] != r["shape"] for i in ins)
    if changed:
        for n, i in enumerate(ins):
            if n:
                out.append(" ")
            if len(ins) > 1:
                out.append(_input_label(i["name"]), style=DIM)
            out.append(bare_shape(i["shape"]), style=DIM)
            if r.get("kv_repeat") and i["name"].rsplit(".", 1)[-1] in ("k", "k_rot", "v"):
                out.append(f"×{r['kv_repeat']}", style="bold")
        out.append("\n→ " if len(ins) > 1 else " → ", style=DIM)  # several inputs: the output on its own line
    out.append(named_shape(r["axes"], r["shape"]))
    if r["dtype"] != compute_dtype:
        out.append(f" {r['dtype']}", style=DIM)
    return out


def _caption(flow: dict) -> str:
    if flow["mode"] == "filtered":
        return f"Only steps matching {', '.join(flow['globs'])}, in execution order; stats are μ mean, σ std, [min, max]."
    folded = flow["folded"]
    text = "One row per step, in order; named axes; μ mean, σ std, [min, max]."
    if folded:
        which = f"Blocks {_ranges(folded)} folded to their outputs" if len(folded) > 1 else f"Block {folded[0]} folded to its output"
        text += f" {which} (--layers N, --steps GLOB, --all unfold)."
    return text


def _ranges(blocks: list) -> str:
    """`1–5` for a run of block numbers; `encoder.1, decoder.1–2` for the stacks of an encoder-decoder model."""
    if blocks and all(isinstance(b, str) for b in blocks):
        stacks: dict[str, list[int]] = {}
        for b in blocks:
            stack, _, i = b.partition(".")
            stacks.setdefault(stack, []).append(int(i))
        return ", ".join(f"{stack}.{_ranges(ids)}" for stack, ids in stacks.items())
    if len(blocks) > 1 and blocks == list(range(blocks[0], blocks[-1] + 1)):
        return f"{blocks[0]}–{blocks[-1]}"
    return ", ".join(map(str, blocks))


def _fold_row(r: dict, stacked: bool) -> list:
    last = r["last"]
    name = Text(f"{r['stack'] + '.' if r.get('stack') else ''}blocks.{r['block']}", style="bold")
    name.append(" ⋯", style=DIM)
    same = "" if r["same_shapes"] else f"; shapes differ from block {r['reference']}"
    op = Text(f"{last['name'].split('.', 2)[2]} ({r['n_steps']} steps folded{same})", style=DIM)
    stats = stats_text(last["stats"], last["dtype"], last["shape"], stacked=stacked)
    for bad in r["non_finite"]:
        stats.append(f"  ⚠ {bad['name']}: {bad['nan']} NaN {bad['inf']} inf", style=WARN)
    return [name, op, Text(named_shape(last["axes"], last["shape"])), stats]


WIDE = 150  # from here every step fits on one line: step | op | in -> out | stats
NARROW = 80  # from here to WIDE the op and the stats share a line under the shape; below, each has its own


class FlowTable:
    """The step table, laid out for the width it is given (wide: one line per step; else stacked cells)."""

    def __init__(self, rows: list[dict], compute: str | None, indent: bool):
        self.rows, self.compute, self.indent = rows, compute, indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        layout = "wide" if width >= WIDE else "medium" if width >= NARROW else "narrow"
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
        names = [len(_local(r["name"], r.get("block"), self.indent)) for r in self.rows if r["kind"] == "step"]
        step_width = min(max(names, default=12), 30 if layout != "narrow" else 20)
        table.add_column("step", no_wrap=True, overflow="ellipsis", max_width=step_width)
        headers = {"wide": ["op", "in → out", "stats"], "medium": ["in → out, then op · stats"],
                   "narrow": ["in → out, op, stats"]}[layout]
        for n, header in enumerate(headers):
            kept_whole = n == len(headers) - 1 and layout == "wide"
            kept_whole = kept_whole or (layout == "wide" and n == 1)  # wide: shapes keep one line too
            flexible = n == 0  # the op (wide) or the stacked cell: it wraps so the rest need not
            table.add_column(header, no_wrap=kept_whole, overflow="fold",
                             ratio=1 if flexible else None)
        current_block = None
        for r in self.rows:
            if r["kind"] == "gap":
                cells = [Text(f"⋮ blocks {_ranges(r['blocks'])}", style=DIM), Text("folded (--layers to open)", style=DIM)]
                table.add_row(*cells)
                continue
            if r["kind"] == "fold":
                name, op, shape, stats = _fold_row(r, stacked=False)
                current_block = None
            else:
                block = r["block"]
                group = (r.get("stack", ""), block)
                if self.indent and block is not None and group != current_block:
                    table.add_row(Text(f"{group[0] + '.' if group[0] else ''}blocks.{block}", style="bold"))
                current_block = group
                name = Text(_local(r["name"], block, self.indent))
                op, shape = Text(r["op"], style=DIM), _shape_cell(r, self.compute)
                stats = stats_text(r["stats"], r["dtype"], r["shape"], blocked=r["name"].endswith("masked_scores"))
            if layout == "wide":
                table.add_row(name, op, shape, stats)
            elif layout == "medium":  # op and stats share the second line when they fit: two lines per step
                together = op.cell_len + 2 + stats.cell_len <= width - step_width - 3
                table.add_row(name, _stack(shape, Text.assemble(op, "  ", stats) if together else _stack(op, stats)))
            else:
                table.add_row(name, _stack(_stack(shape, op), stats))
        yield table


def _stack(first: Text, second: Text) -> Text:
    return Text.assemble(first, "\n", second)


def render_shape_flow(report: dict, number: int = 3) -> Group:
    flow = report["flow"]
    parts: list = [heading(number, "Shape flow", _caption(flow))]
    if not flow["rows"]:
        parts.append(Text(f"  no step matches {', '.join(flow.get('globs', []))}; `tracer steps` lists the names", style=DIM))
        return Group(*parts)
    parts.append(FlowTable(flow["rows"], report.get("dtype"), indent=flow["mode"] != "filtered"))
    return Group(*parts)
