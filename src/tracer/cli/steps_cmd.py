"""`tracer steps`: the step names and their axes (the trace contract), for every route or for one."""

from __future__ import annotations

import json
from pathlib import Path
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

  tracer steps --check port.safetensors --model fixtures/models/llama
"""


def register(app: typer.Typer) -> None:
    app.command("steps", help=HELP)(steps)


@handle_errors
def steps(
    route: Optional[str] = typer.Option(None, "--route", help="Only the names one route records, stack prefixes spelled out: decoder, encoder or encoder-decoder."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for programs."),
    check: Optional[Path] = typer.Option(None, "--check", metavar="FILE", help="Review a port's dump (a trace or any safetensors file of tracer-named tensors): steps that are not tracer names, misshaped or of an unexpected dtype, and with --model the steps it lacks. Exit 1 when a step is wrong."),
    model: Optional[Path] = typer.Option(None, "--model", metavar="DIR", help="With --check: the checkpoint folder whose config gives the sizes and the steps to expect."),
):
    if model is not None and check is None:
        raise TracerError("--model goes with --check FILE")
    if check is not None:
        from tracer.cli.steps_check import check_dump

        raise typer.Exit(check_dump(check, model, as_json, make_console()))
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
