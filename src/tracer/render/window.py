"""Which positions a grid or table shows when the prompt is longer than the screen.

A window is a list of absolute positions with `None` where a run of positions is
left out. It always keeps the first position (BOS, and often the attention sink)
and a contiguous run around the focus (`--position`, by default the last token),
with more context before the focus than after it, because a causal model reads
backwards. Labels are the absolute indices, so nothing is renumbered.
"""

from __future__ import annotations

from rich.text import Text

GAP = None  # the marker of a left-out run
LEAD = 1  # positions always kept at the start


def window(n: int, focus: int, budget: int, lead: int = LEAD) -> list[int | None]:
    """Positions 0..n-1 to show in at most `budget` slots (a gap marker takes one), around `focus`."""
    if n <= budget:
        return list(range(n))
    focus = min(max(focus, 0), n - 1)
    lead = min(lead, max(budget - 3, 0))
    run = max(budget - lead - 1, 1)  # slots for the contiguous run after the leading gap
    for trailing in (0, 1):
        length = run - trailing
        after = min(n - 1 - focus, length // 3)
        end = min(n, focus + after + 1)
        start = max(lead, end - length)
        end = min(n, start + length)
        if end >= n or trailing:
            break
    shown: list[int | None] = list(range(lead))
    if start > lead:
        shown.append(GAP)
    shown.extend(range(start if start > lead else lead, end))
    if end < n:
        shown.append(GAP)
    return shown


def span_text(shown: list[int | None], n: int | None = None) -> str:
    """'0, 100–119 of 120' (or without 'of N') for a caption."""
    parts, run = [], []
    for k in shown + [GAP]:
        if k is GAP:
            if run:
                parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
            run = []
        else:
            run.append(k)
    return ", ".join(parts) + (f" of {n}" if n is not None else "")


def index_digits(n: int) -> int:
    return len(str(max(n - 1, 0)))


def index_label(pos: int, n: int) -> str:
    """Right-aligned to the widest index of the prompt, so rows line up at any length."""
    return f"{pos:>{index_digits(n)}}"


def index_header(shown: list[int | None], n: int, cell: int, sep: str = " ", gap: str = "⋯") -> Text:
    """Column indices above cells `cell` wide. When an index has more digits than the cell, the digits
    are stacked over several lines (read top to bottom), so every column keeps its whole index."""
    digits = index_digits(n)
    lines = -(-digits // cell)
    width = lines * cell
    rows: list[list[str]] = [[] for _ in range(lines)]
    for k in shown:
        text = (" " * (width - 1) + gap) if k is GAP else f"{k:>{width}}"
        for i in range(lines):
            rows[i].append(text[i * cell : (i + 1) * cell].rjust(cell))
    return Text("\n".join(sep.join(r).rstrip() for r in rows), style="dim")
