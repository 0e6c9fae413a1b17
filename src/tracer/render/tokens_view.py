"""Section 2: the tokens of one batch row: position, id, piece, bytes, the text span they came from."""

from __future__ import annotations

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM, PARTIAL, SPECIAL, heading, piece_text
from tracer.render.window import window
from tracer.checkpoint.pieces import SPACE, visible_text

MAX_ROWS = 20  # up to this many tokens the table shows them all
WINDOW_ROWS = 9  # longer inputs: the first token and a window around the focus (--position)
PROMPT_LINES = 2  # a long prompt is shown as its start and its end


def _span_text(t: dict) -> Text:
    if t["pad"]:
        return Text("padding", style=DIM)
    if t["special"] and not t["text"]:
        return Text("(added)", style=DIM)
    if not t["text"]:
        return Text("")
    s, e = t["span"]
    text = Text(visible_text(t["text"]))
    text.append(f"  {s}:{e}", style=DIM)
    if t["part"]:
        text.append(f"  part {t['part']}", style=PARTIAL)
    return text


def _kind(t: dict) -> Text:
    if t["pad"]:
        return Text("pad", style=DIM)
    if t.get("unknown"):
        return Text("unknown text (not in the vocabulary)", style=PARTIAL)
    if t["special"]:
        return Text("special", style=SPECIAL)
    if t.get("continuation"):
        return Text("continues the word", style=DIM)
    if t["partial"]:
        return Text("part of a character", style=PARTIAL)
    return Text("")


def _beyond_ascii(t: dict) -> bool:
    """Bytes are worth showing for pieces outside ASCII, where a character is several bytes."""
    return not t["special"] and any(int(b, 16) >= 0x80 for b in t["bytes"].split())


def _shown_rows(tokens: list[dict], focus: int | None) -> list[dict | None]:
    focus = len(tokens) - 1 if focus is None else focus
    budget = MAX_ROWS if len(tokens) <= MAX_ROWS else WINDOW_ROWS
    return [None if i is None else tokens[i] for i in window(len(tokens), focus, budget)]


class PromptLine:
    """`prompt 春天来了，…` on at most PROMPT_LINES lines: a long prompt keeps its start and its end."""

    def __init__(self, prompt: str):
        self.prompt = prompt

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        label = "prompt "
        room = max(options.max_width - len(label), 10)
        text = visible_text(self.prompt)
        if cell_len(text) <= room * PROMPT_LINES:
            grid = Table.grid()
            grid.add_column(style=DIM, no_wrap=True)
            grid.add_column(overflow="fold")
            grid.add_row(label, text)
            yield grid
            return
        first = text[: _chars_for_cells(text, room)]
        last = text[len(text) - _chars_for_cells(text[::-1], room - 2) :]
        yield Text.assemble((label, DIM), first)
        yield Text.assemble((" " * len(label), DIM), ("… ", DIM), last)


def _chars_for_cells(text: str, cells: int) -> int:
    """How many leading characters of `text` fit in `cells` terminal cells."""
    used = 0
    for i, ch in enumerate(text):
        used += cell_len(ch)
        if used > cells:
            return i
    return len(text)


def _decoder_line(tokens: list[dict]) -> Text:
    """An encoder-decoder model's decoder input, on one line: what the next token is predicted after."""
    line = Text("decoder input ", style=DIM)
    for t in tokens:
        if not t["pad"]:
            line.append(f"{t['pos']}:", style=DIM)
            line.append(piece_text(t["token"], t["special"], t["partial"], t["pad"]))
            line.append(" ")
    return line


def render_tokens(report: dict, number: int = 2) -> Group:
    tokens = report["tokens"]
    row, size = report["batch_row"], report["batch_size"]
    title = "Tokens" + (f"  batch row {row} of {size}" if size > 1 else "")
    prompt = report.get("prompt")
    parts: list = [heading(number, title, report["tokens_note"])]
    if prompt is not None:
        parts.append(PromptLine(prompt))
    has_text = any(t["text"] for t in tokens)
    has_bytes = any(_beyond_ascii(t) for t in tokens)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("pos", justify="right", no_wrap=True)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("piece", no_wrap=True, max_width=24, overflow="ellipsis")
    if has_bytes:
        table.add_column("utf-8 bytes", style=DIM, no_wrap=True)
    shown = _shown_rows(tokens, report.get("position"))
    if has_text:  # the span keeps its width (up to 20 cells); the last column wraps instead
        span_width = max((_span_text(t).cell_len for t in shown if t is not None), default=9)
        table.add_column("text span", overflow="fold", min_width=min(max(span_width, 9), 20))
    has_types = any(t.get("type") for t in tokens)
    if has_types:
        table.add_column("type", justify="right", no_wrap=True)
    table.add_column("", overflow="fold")
    for i, t in enumerate(shown):
        if t is None:
            first = shown[i - 1]["pos"] + 1
            last = shown[i + 1]["pos"] - 1 if i + 1 < len(shown) else len(tokens) - 1
            table.add_row("⋮", "", Text(f"{last - first + 1} more ({first}–{last})", style=DIM))
            continue
        cells: list = [str(t["pos"]), str(t["id"]), piece_text(t["token"], t["special"], t["partial"], t["pad"])]
        if has_bytes:
            cells.append(t["bytes"] if not t["special"] else "")
        if has_text:
            cells.append(_span_text(t))
        if has_types:
            cells.append(str(t.get("type", 0)))
        cells.append(_kind(t))
        table.add_row(*cells)
    parts.append(table)
    legend = []
    if any(SPACE in t["token"] for t in tokens):
        legend.append(f"{SPACE} = space")
    if any(t["partial"] for t in tokens):
        legend.append("<e6 98> = bytes that are only part of a UTF-8 character")
    if legend:
        parts.append(Text("  ".join(legend), style=DIM))
    if report.get("decoder_tokens"):
        parts.append(_decoder_line(report["decoder_tokens"]))
    for other in report.get("other_rows", []):
        pads = f" + {other['pads']} padding" if other["pads"] else ""
        parts.append(Text(f"row {other['row']}: {other['tokens']} tokens{pads} (see it with --batch-row {other['row']})", style=DIM))
    return Group(*parts)
