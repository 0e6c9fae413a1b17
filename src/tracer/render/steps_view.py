"""`tracer steps`: the step names, their axes and what each holds, laid out for the width.

Wide terminals get three columns. Below that the axes go under the name (dim), so the description keeps
the room it needs to read as a sentence rather than a 20-cell column of broken words.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM

MIN_WHAT = 40  # the description column, at least


class StepsTable:
    def __init__(self, rows, title: str, caption: str):
        self.rows, self.title, self.caption = rows, title, caption

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        axes = {name: "[" + ", ".join(d.axes) + "]" for name, d in self.rows}
        name_w = max(cell_len(name) for name, _ in self.rows)
        axes_w = max(cell_len(a) for a in axes.values())
        wide = options.max_width >= name_w + axes_w + MIN_WHAT + 2
        table = Table(title=self.title, title_justify="left", box=None, pad_edge=False, caption=self.caption,
                      caption_justify="left")
        table.add_column("name" if wide else "name and axes", no_wrap=True)
        if wide:
            table.add_column("axes", no_wrap=True)
        table.add_column("what", overflow="fold", ratio=1)
        for name, d in self.rows:
            if wide:
                table.add_row(Text(name, style="bold"), escape(axes[name]), escape(d.what))
            else:
                table.add_row(Text.assemble((name, "bold"), "\n", (axes[name], DIM)), escape(d.what))
        yield table
