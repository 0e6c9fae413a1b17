"""Section 2: the tokens of one batch row: position, id, piece, bytes, the text span they came from."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracer.render.theme import DIM, PARTIAL, SPECIAL, heading, piece_text
from tracer.report.tokens import SPACE, visible_text

MAX_ROWS = 20  # longer inputs show the first and last tokens


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


def _shown_rows(tokens: list[dict]) -> list[dict | None]:
    if len(tokens) <= MAX_ROWS:
        return list(tokens)
    head = MAX_ROWS // 3
    return tokens[:head] + [None] + tokens[-(MAX_ROWS - head) :]


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
        parts.append(Text.assemble(("prompt ", DIM), visible_text(prompt)))
    has_text = any(t["text"] for t in tokens)
    has_bytes = any(_beyond_ascii(t) for t in tokens)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("pos", justify="right", no_wrap=True)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("piece", no_wrap=True, max_width=24, overflow="ellipsis")
    if has_bytes:
        table.add_column("utf-8 bytes", style=DIM, no_wrap=True)
    if has_text:
        table.add_column("text span", overflow="fold")
    has_types = any(t.get("type") for t in tokens)
    if has_types:
        table.add_column("type", justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for t in _shown_rows(tokens):
        if t is None:
            table.add_row("⋮", "", Text(f"{len(tokens) - MAX_ROWS} more", style=DIM))
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
