"""`tracer report TRACE -o page.html`: the HTML report of a saved trace (tracer run --save)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from tracer.cli.common import check_outputs, checkpoint_files, handle_errors
from tracer.errors import TracerError

REPORT_HELP = """Write the HTML report of a saved trace: one self-contained page that opens offline.

Model card, tokens, the shape flow with collapsible blocks, the mask, every layer's attention as heatmaps (hover for the weights), the next token and, when the model's weights are at hand, the logit lens over positions.

The lens and token names need the model: --model DIR, or nothing for a trace of the shipped model (found by its config hash).

Examples:

  tracer run "春天来" --save t.safetensors

  tracer report t.safetensors -o t.html

  tracer report t.safetensors -o t.html --model DIR --position 2

  tracer report t.safetensors -o t.html --only attention,mask
"""


def register(app: typer.Typer) -> None:
    app.command("report", help=REPORT_HELP)(report)


@handle_errors
def report(
    trace_file: Path = typer.Argument(..., metavar="TRACE", help="A trace file from tracer run --save (or tracer capture, with --model).", show_default=False),
    output: Path = typer.Option(..., "--output", "-o", help="The page to write, e.g. report.html.", show_default=False),
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="The checkpoint the trace came from: names tokens and draws the logit lens. Default: the shipped model, when the trace is of it."),
    only: Optional[List[str]] = typer.Option(None, "--only", help="Only these sections: model, tokens, steps, values, mask, attention, top_k, lens."),
    batch_row: int = typer.Option(0, "--batch-row", help="Which batch row the page shows (negative counts back)."),
    position: Optional[int] = typer.Option(None, "--position", help="Position whose next token is shown (default: the last real token; negative counts back)."),
    layer: Optional[int] = typer.Option(None, "--layer", help="Attention layer opened first (default: the last; negative counts back)."),
    top_k: Optional[int] = typer.Option(None, "--top-k", min=1, help="How many next tokens to show (default 10)."),
):
    from tracer.cli.run_cmd import DEFAULT_TOP_K, refuse_headless, vocab_lookup, write_run_page
    from tracer.report import RunOptions, build_report
    from tracer.report.collect import vocab_from_trace
    from tracer.report.options import DEFAULT_SECTIONS, resolve_sections
    from tracer.trace import Trace

    check_outputs({"--output": output}, reading=[trace_file, *(checkpoint_files(model) if model is not None else [])])
    if not trace_file.is_file():
        raise TracerError(f"{trace_file}: no such trace file")
    trace = Trace.load(trace_file)
    if trace.meta.get("format") == "foreign" or not trace.meta.get("tokens"):
        raise TracerError(f"{trace_file} has no tracer metadata (tokens, model)",
                          hint="make the trace with tracer run --save, or tracer capture")
    m = resolve_model(trace, model)
    if "spec" not in trace.meta.get("model", {}):
        if m is None:
            raise TracerError(f"{trace_file} does not describe its model's shape", hint="give the checkpoint: --model DIR")
        trace.meta["model"].update(spec=m.spec.to_dict(), n_params=m.n_params, storage_dtypes=m.files.storage_dtypes())
    if only:
        sections = resolve_sections(only, lens=False, values=False, steps_filter=False)
    else:
        spec = trace.meta["model"]["spec"]
        has_lens = m is not None and spec.get("head", "lm") == "lm"  # a decoder stack read through an LM head
        sections = DEFAULT_SECTIONS + (("lens",) if has_lens else ())
    refuse_headless(trace.meta["model"]["spec"].get("head", "lm"), top_k=top_k)
    options = RunOptions(batch_row=batch_row, top_k=DEFAULT_TOP_K if top_k is None else top_k, position=position, layer=layer, sections=sections)
    vocab = vocab_lookup(m.tokenizer) if m is not None and m.tokenizer is not None else vocab_from_trace(trace.meta)
    report_data = build_report(trace, options, vocab=vocab, model=m)
    write_run_page(output, report_data, trace, m, vocab)  # it says what it wrote, once


def resolve_model(trace, folder: Path | None):
    """The model the trace was made with: --model (checked by config hash), else the shipped one if it matches."""
    from tracer.api import load_model
    from tracer.cli.default_model import default_model_path

    want = trace.meta.get("model", {}).get("config_sha256")
    if folder is not None:
        m = load_model(folder, dtype=trace.meta.get("dtype") or "float32")
        if want and m.config_sha256 != want:
            raise TracerError(f"{folder} is not the model this trace was made with (config.json differs)",
                              hint="give the checkpoint the trace came from, or leave out --model")
        return m
    try:
        path = default_model_path()
    except TracerError:
        return None
    import hashlib

    if want and hashlib.sha256((path / "config.json").read_bytes()).hexdigest() == want:
        return load_model(path, dtype=trace.meta.get("dtype") or "float32")
    return None
