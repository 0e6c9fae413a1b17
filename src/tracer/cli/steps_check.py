"""`tracer steps --check FILE`: a port's dump reviewed against the step contract, before any diff."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tracer.dump import FileCheck, check_file
from tracer.steps import block_of
from tracer.trace import Trace

_SHOWN = 12  # rows per list on screen; --json has them all


def check_dump(path: Path, model: Path | None, as_json: bool, console) -> int:
    """Print the review; the exit status: 0 when every step is a tracer name of the right shape and dtype."""
    result = check_file(Trace.load(path), model)
    if as_json:
        print(json.dumps({"file": str(path), **result.to_dict()}, ensure_ascii=False, indent=1))
    else:
        console.print(check_view(path, model, result))
    return 0 if result.ok else 1


def check_view(path: Path, model: Path | None, r: FileCheck) -> Group:
    parts = [Text.from_markup(f"[bold]{escape(str(path))}[/]: {r.n_steps} steps, {len(r.named)} under tracer's names"
                              + (f", checked against {escape(str(model))}" if model else
                                 " (sizes checked against each other; --model DIR checks them against the config)"))]
    for title, rows, style in (("not tracer step names", [(n, "") for n in r.unknown], "red"),
                               ("misshaped", list(r.misshaped), "red"),
                               ("unexpected dtype", list(r.wrong_dtype), "red"),
                               ("recorded by the model, absent from the file", _grouped(r.missing), "yellow")):
        if rows:
            parts += [Text(f"{title} ({len(rows)})", style=style), _table(rows)]
    verdict = "[green]ok[/]: every step has a tracer name, its axes and dtype" if r.ok else \
        "[red]not ok[/]: fix the rows above before diffing"
    parts.append(Text.from_markup(verdict))
    return Group(*parts)


def _grouped(names: tuple[str, ...]) -> list[tuple[str, str]]:
    """blocks.0.attn.k, blocks.1.attn.k -> ("blocks.{i}.attn.k", "blocks 0, 1"): one row per step kind."""
    groups: dict[str, list[int]] = {}
    for name in names:
        i = block_of(name)
        key = name.replace(f"blocks.{i}.", "blocks.{i}.", 1) if i is not None else name
        groups.setdefault(key, []).append(i)
    return [(k, "" if v == [None] else "block" + ("s " if len(v) > 1 else " ") + ", ".join(map(str, v)))
            for k, v in groups.items()]


def _table(rows: list[tuple[str, str]]) -> Table:
    t = Table(box=None, pad_edge=False, show_header=False, padding=(0, 2, 0, 2))
    t.add_column("name", no_wrap=True, overflow="fold")
    t.add_column("why", overflow="fold")
    for name, why in rows[:_SHOWN]:
        t.add_row(escape(name), escape(why))
    if len(rows) > _SHOWN:
        t.add_row(f"⋮ {len(rows) - _SHOWN} more", "(--json lists them all)")
    return t
