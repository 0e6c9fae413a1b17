"""`tracer diff --isolate REF PORT`: the error each block of PORT adds on its own (see tracer.model.isolate).

REF is a checkpoint folder (or GGUF), PORT a trace holding embed.out and every blocks.L.resid_post (each stack's,
under encoder. and decoder., with the encoder's output, for an encoder-decoder). Exit 0
when every block is within tolerance, 1 when one is not (the block adding the most is named), 2 error.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tracer.errors import TracerError


def run_isolate(a: Path, b: Path, text: str | None, id_rows, names: str, atol: float, rtol: float, dtype: str,
                as_json: bool, allow_unused: bool, allow_long: bool) -> None:
    from tracer.cli.common import make_console, rendered
    from tracer.cli.diff_cmd import _input_of, _is_model, _load
    from tracer.diff import aligned_pair
    from tracer.diff.files import load_side
    from tracer.model.isolate import isolate, plan_of
    from tracer.numbers import json_safe

    for p in (a, b):
        if not p.exists():
            raise TracerError(f"{p}: no such file or folder")
    if not _is_model(a) or _is_model(b):
        raise TracerError("--isolate takes the reference model first and the port's trace second",
                          hint="tracer diff --isolate MODEL_DIR port.safetensors")
    port = load_side(b)
    model = _load(a, dtype, allow_unused)
    if text is not None:
        run_inputs = {"text": text}
    elif id_rows:
        run_inputs = {"ids": id_rows}
    else:
        taken = _input_of(port)
        if taken is None:
            raise TracerError(f"{b} has no input.ids to run {a} on", hint="give TEXT or --ids")
        run_inputs = {"ids": taken[0], "pad_side": taken[1]}
        decoder = _input_of(port, "input.decoder_")
        if decoder is not None and model.route == "encoder-decoder":
            run_inputs["decoder_ids"] = decoder[0]
    run_inputs["allow_long"] = allow_long
    if names != "identity":
        plan, memory = plan_of(model.spec)  # the steps --isolate reads, under tracer's names
        keep = tuple(dict.fromkeys([leaving for _, _, leaving in plan] + ([memory] if memory else [])))
        port = aligned_pair(model.run(keep=keep, **run_inputs), port, names)[1]
    result = isolate(model, port, run_inputs, atol, rtol)
    console = make_console()
    if as_json:
        text_out = json.dumps(json_safe(result.to_dict()), ensure_ascii=False, indent=1, allow_nan=False) + "\n"
    else:
        text_out = rendered(console, lambda: console.print(render_isolation(result)))
    console.file.write(text_out)
    raise typer.Exit(1 if result.responsible is not None else 0)


def refuse_with_isolate(given: dict) -> None:
    """Flags of the step-wise diff that --isolate does not read: an error, never ignored."""
    named = [flag for flag, value in given.items() if value]
    if named:
        raise TracerError(f"{', '.join(named)} and --isolate do not go together: --isolate shows one table per block",
                          hint="run tracer diff without --isolate for the step-wise diff")


def render_isolation(result):
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold",
                  title="Error each block adds, alone (the reference rerun from the port's input to the block)",
                  title_justify="left")
    for col, just in (("block", "left"), ("step", "left"), ("added alone", "right"), ("accumulated", "right"),
                      ("max|ref|", "right"), ("", "left")):
        table.add_column(col, justify=just, no_wrap=True)
    for r in result.blocks:
        mark = "ok" if r.within else "OUT"
        style = "bold red" if r.block == result.responsible else None
        table.add_row(r.block, r.step, f"{r.added:.3g}", f"{r.accumulated:.3g}", f"{r.scale:.3g}", mark, style=style)
    if result.responsible is None:
        line = f"every block adds an error within |Δ| <= atol {result.atol:g} + rtol {result.rtol:g} * |ref|"
    else:
        worst = next(r for r in result.blocks if r.block == result.responsible)
        others = max((r.added for r in result.blocks if r.block != result.responsible), default=0.0)
        line = (f"responsible: {result.responsible} adds max|Δ| {worst.added:.3g} on the port's own input "
                f"(every other block adds at most {others:.3g})")
    return Group(table, Text(line, style="bold"))
