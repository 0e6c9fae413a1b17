"""`tracer diff --verdict`: one line per rule, pass or fail in its own words; and steps of another dtype."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.text import Text

from tracer.diff.verdicts import Verdict
from tracer.render.theme import CAUTION

_SHOWN = 8


def verdicts_view(verdicts: list[Verdict]) -> Group:
    lines = [Text("Verdicts", style="bold")]
    width = max(len(v.name) for v in verdicts)
    for v in verdicts:
        mark, style = ("✓", "green") if v.passed else ("✗", "bold red")
        line = Text(f"  {mark} {v.name:<{width}}  ", style=style)
        line.append(f"{v.level}", style=style if not v.passed else "bold")
        line.append(f"  {v.summary}")
        lines.append(line)
    failed = [v.name for v in verdicts if not v.passed]
    lines.append(Text(f"  exit status 1: {', '.join(failed)} failed" if failed else "  every verdict passes: exit status 0",
                      style="red" if failed else "dim"))
    return Group(*lines)


def dtype_flags_view(flags: list[dict]) -> Group:
    promoted = [f for f in flags if f["promoted"]]
    lines = [Text(f"Steps of another dtype than the reference's ({len(flags)})", style=CAUTION)]
    if promoted:
        lines.append(Text(f"  {len(promoted)} float64 step(s) in a float32 run, first {promoted[0]['name']}: a NumPy 2 "
                          "promotion (a float64 scalar or array joined the computation) gives the same numbers many "
                          "times slower", style=CAUTION))
    for f in flags[:_SHOWN]:
        lines.append(Text.from_markup(f"  {escape(f['name'])}  [dim]ref[/] {f['ref']}  [dim]mine[/] {f['mine']}"))
    if len(flags) > _SHOWN:
        lines.append(Text(f"  ⋮ {len(flags) - _SHOWN} more (--json lists them all)", style="dim"))
    return Group(*lines)
