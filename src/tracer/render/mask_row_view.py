"""Rich views for `tracer mask --row` (one attention row worked by hand) and `tracer mask --list`."""

from __future__ import annotations

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from tracer.masks.row import WorkedRow
from tracer.render.mask_view import pitfall_legend


def _f(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}f}"


def worked_row_view(row: WorkedRow) -> Group:
    n = len(row.scores)
    out: list = [Text("one attention row, worked by hand", style="bold")]
    out.append(Text("  softmax(s)_j = exp(s_j - max) / Σ_k exp(s_k - max)   (subtracting the max changes nothing "
                       "but keeps exp from overflowing)", style="dim"))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("key", justify="left")
    table.add_column("score s", justify="right")
    table.add_column("s - max", justify="right")
    table.add_column("exp(s - max)", justify="right")
    table.add_column("weight", justify="right")
    masked = row.query is not None or not all(row.keep)
    if masked:
        table.add_column("mask", justify="center")
        table.add_column("masked exp", justify="right")
        table.add_column("masked weight", justify="right", style="green")
        table.add_column("wrong way", justify="right", style="red")
    for j in range(n):
        label = f"{j}" + (f" {row.tokens[j]}" if row.tokens else "")
        cells = [label, _f(row.scores[j], 3), _f(row.unmasked.shifted[j]), _f(row.unmasked.exps[j]),
                 _f(row.unmasked.weights[j])]
        if masked:
            kept = row.keep[j]
            cells += ["keep" if kept else Text("block", style="dim"),
                      _f(row.masked.exps[j]) if kept else Text("0 (removed)", style="dim"),
                      _f(row.masked.weights[j]),
                      _f(row.wrong_way[j])]
        table.add_row(*cells)
    sums = ["Σ", "", "", _f(row.unmasked.total), _f(sum(row.unmasked.weights))]
    if masked:
        sums += ["", _f(row.masked.total), _f(sum(row.masked.weights)), Text(_f(row.wrong_sum), style="bold red")]
    table.add_row(*sums, style="bold")
    out.append(table)
    out.append(Text(f"  unmasked: max = {row.unmasked.max:.3f}, Σ exp = {row.unmasked.total:.4f}, "
                       f"each weight = exp / Σ"))
    if masked:
        where = f"query {row.query} (causal: keys 0..{row.query})" if row.query is not None else "the given keep flags"
        out.append(Text.assemble(("  right: ", "green"), f"for {where}, blocked keys get -inf BEFORE the softmax "
                                    f"(exp(-inf) = 0); max = {row.masked.max:.3f} over kept keys, Σ exp = "
                                    f"{row.masked.total:.4f}, the kept weights sum to 1 and blocked weights are exactly 0"))
        out.append(Text.assemble(("  wrong: ", "red"), f"softmax over every key, then delete the blocked weights: "
                                    f"the row sums to {row.wrong_sum:.4f} < 1 (pitfall P3: mask after softmax "
                                    f"without renormalising)"))
    return Group(*out, *pitfall_legend(out))


def _longest_word(texts) -> int:
    return max((cell_len(w) for t in texts for w in t.split()), default=0)


class ConventionsView:
    """A table when every word fits its column; on narrower terminals each convention is stacked (name and
    mask on one line, the semantics under it), so no word is ever split."""

    def __init__(self, conventions):
        self.conventions = conventions

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        conventions = self.conventions
        name_w = max(cell_len(c.name) for c in conventions)
        accepts_w = max(_longest_word(c.accepts for c in conventions), 14)
        if options.max_width - name_w - accepts_w - 4 >= _longest_word(c.summary for c in conventions):
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=True)
            table.add_column("convention", style="bold", no_wrap=True)
            table.add_column("mask", width=accepts_w)
            table.add_column("semantics", ratio=1)
            family = None
            for c in conventions:
                if family is not None and c.family != family:
                    table.add_section()
                family = c.family
                table.add_row(c.name, c.accepts, c.summary)
            yield table
        else:
            family = None
            for c in conventions:
                if family is not None and c.family != family:
                    yield Text("")
                family = c.family
                yield Text.assemble((c.name, "bold"), "  ", (c.accepts, "dim"))
                body = Table.grid()
                body.add_column(width=4, no_wrap=True)
                body.add_column()
                body.add_row("", c.summary)
                yield body
        yield Text("aliases: additive = torch-sdpa-float; see `tracer mask --help` for the options each reads",
                   style="dim")
