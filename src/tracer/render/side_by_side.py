"""Small grids (mask parts, attention heads) side by side with shared row labels, wrapping to the width."""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

GAP = 3


@dataclass
class Panel:
    title: Text
    header: Text  # the column index line(s): long indices stack their digits
    rows: list[Text | None]  # one per label; None = the elided-rows marker line


class SideBySide:
    """As many panels per line as fit after the labels; more lines of panels when they do not."""

    def __init__(self, labels: list[Text | None], panels: list[Panel], after: list[Text] | None = None):
        self.labels, self.panels, self.after = labels, panels, after

    def _widths(self) -> tuple[int, int, int]:
        label_w = max((lab.cell_len for lab in self.labels if lab is not None), default=0)
        panel_w = max(max(*(cell_len(line) for line in p.header.plain.split("\n")), p.title.cell_len,
                          *(r.cell_len for r in p.rows if r is not None))
                      for p in self.panels)
        after_w = max((a.cell_len for a in self.after or []), default=0) + GAP if self.after else 0
        return label_w, panel_w, after_w

    def per_line(self, width: int) -> int:
        label_w, panel_w, after_w = self._widths()
        return max(1, (width - label_w - after_w) // (panel_w + GAP))

    def n_lines(self, width: int) -> int:
        """Screen lines this takes at `width`: per line of panels a title, a header and the rows."""
        groups = -(-len(self.panels) // self.per_line(width))
        header_lines = max(p.header.plain.count("\n") + 1 for p in self.panels)
        return groups * (len(self.labels) + 1 + header_lines)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        label_w, panel_w, _ = self._widths()
        per_line = self.per_line(options.max_width)
        for start in range(0, len(self.panels), per_line):
            chunk = self.panels[start : start + per_line]
            last_chunk = start + per_line >= len(self.panels)
            table = Table.grid(padding=(0, GAP, 0, 0))
            table.add_column(no_wrap=True, width=label_w)
            for _ in chunk:
                table.add_column(no_wrap=True, width=panel_w)
            if self.after and last_chunk:
                table.add_column(no_wrap=True)
            extra = [""] if self.after and last_chunk else []
            table.add_row("", *[p.title for p in chunk], *extra)
            table.add_row("", *[p.header for p in chunk], *extra)
            for i, label in enumerate(self.labels):
                if label is None:
                    table.add_row(Text("   ⋮", style="dim"), *["" for _ in chunk], *extra)
                    continue
                tail = [self.after[i]] if self.after and last_chunk else []
                table.add_row(label, *[p.rows[i] or "" for p in chunk], *tail)
            yield table
