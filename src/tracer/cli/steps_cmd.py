"""`tracer steps`: the step names and their axes (the trace contract)."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.table import Table

from tracer.cli.common import handle_errors, make_console
from tracer.steps import CATALOGUE


def register(app: typer.Typer) -> None:
    app.command("steps", help="List the step names a trace uses, with their axes.\n\nExample:\n\n  tracer steps --json")(steps)


@handle_errors
def steps(as_json: bool = typer.Option(False, "--json", help="Print JSON for programs.")):
    if as_json:
        print(json.dumps([{"name": d.template, "axes": list(d.axes), "what": d.what} for d in CATALOGUE], ensure_ascii=False, indent=1))
        return
    table = Table(title="step names ({i} = block index)", title_justify="left", box=None, pad_edge=False)
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("axes", overflow="fold")
    table.add_column("what", overflow="fold")
    for d in CATALOGUE:
        table.add_row(d.template, escape("[" + ", ".join(d.axes) + "]"), escape(d.what))
    make_console().print(table)
