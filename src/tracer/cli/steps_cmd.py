"""`tracer steps`: the step names and their axes (the trace contract), for every route or for one."""

from __future__ import annotations

import json
from typing import Optional

import typer

from tracer.cli.common import handle_errors, make_console
from tracer.errors import TracerError
from tracer.steps import CATALOGUE, ROUTES, route_templates

HELP = """List the step names a trace uses, with their axes.

Examples:

  tracer steps

  tracer steps --route encoder-decoder

  tracer steps --json
"""


def register(app: typer.Typer) -> None:
    app.command("steps", help=HELP)(steps)


@handle_errors
def steps(
    route: Optional[str] = typer.Option(None, "--route", help="Only the names one route records, stack prefixes spelled out: decoder, encoder or encoder-decoder."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for programs."),
):
    if route is not None and route not in ROUTES:
        raise TracerError(f"--route must be one of {', '.join(ROUTES)}, not {route!r}")
    rows = route_templates(route) if route else [(d.template, d) for d in CATALOGUE]
    if as_json:
        print(json.dumps([{"name": name, "axes": list(d.axes), "what": d.what, "routes": list(d.routes)} for name, d in rows],
                         ensure_ascii=False, indent=1))
        return
    from tracer.render.steps_view import StepsTable

    title = f"step names of the {route} route ({{i}} = block index)" if route else "step names ({i} = block index)"
    make_console().print(StepsTable(rows, title, "tracer generate records decoding step t under decode.{t}. + these names"))
