"""`tracer cost`: what a forward pass and a decoding step cost, counted from config.json alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from tracer.cli.common import handle_errors, make_console, parse_int_list
from tracer.errors import TracerError

COST_HELP = """Count what the model costs, from config.json alone (no weights are read).

Parameters by group; per step multiply-adds, FLOPs, weights read and activations written; a prefill of n positions against one decoding step at position n (with and without a KV cache); KV cache bytes; where attention's n² terms overtake the MLP; a growth table over --tokens.

Examples:

  tracer cost                                        # the shipped model

  tracer cost --model DIR --tokens 512,4096,32768 --dtype bfloat16

  tracer cost --model path/to/config.json --batch 8 --json
"""


def register(app: typer.Typer) -> None:
    app.command("cost", help=COST_HELP, no_args_is_help=False)(cost)


@handle_errors
def cost(
    model: Optional[Path] = typer.Option(None, "--model", "-m", help="Checkpoint folder, or its config.json. Default: the shipped model."),
    tokens: str = typer.Option("128,1024,8192", "--tokens", help="Sequence lengths, comma separated; the per-step table uses the first."),
    batch: int = typer.Option(1, "--batch", help="Sequences per pass."),
    dtype: str = typer.Option("float32", "--dtype", help="Bytes per number: float32, float64, bfloat16 or float16."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON for programs."),
):
    from tracer.cost.summary import DTYPE_BYTES, cost_report
    from tracer.cli.default_model import default_model_path

    lengths = parse_int_list(tokens, "--tokens")
    bad = [n for n in lengths if n < 1]
    if bad:
        raise TracerError(f"--tokens: {bad[0]} is not a positive length")
    if batch < 1:
        raise TracerError(f"--batch must be at least 1, got {batch}")
    if dtype not in DTYPE_BYTES:
        raise TracerError(f"--dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    path = model if model is not None else default_model_path()
    spec, name = spec_from_path(path)
    report = cost_report(spec, lengths, batch, dtype)
    not_used = stored_not_used_of(path, spec)
    if as_json:
        extra = {"stored_not_used": not_used.to_json()} if not_used is not None else {}
        print(json.dumps({"model_name": name, **report, **extra}, ensure_ascii=False, indent=1, allow_nan=False))
        return
    from tracer.render.cost_view import render_cost

    console = make_console()
    console.print(render_cost(report, name))
    if not_used is not None:
        console.print(f"[dim]note: {escape(not_used.line('they are not counted here; tracer run counts every stored parameter'))}[/]")


def stored_not_used_of(path: Path, spec):
    """A folder's tensors the forward never reads (from the headers); None for a config file given alone."""
    from tracer.checkpoint.config import read_config
    from tracer.model.stored import stored_not_used

    if not path.is_dir():
        return None
    cfg, _ = read_config(path)
    return stored_not_used(path, cfg, spec.tied_embeddings)


def spec_from_path(path: Path):
    """The Spec from a checkpoint folder's config.json, a config file given directly (through the one
    config -> Spec that tracer run uses, pooling included), or a GGUF file's metadata."""
    from tracer.model.gguf_open import gguf_spec, is_gguf
    from tracer.model.open import checkpoint_spec, open_config

    if is_gguf(path):  # the metadata and tensor headers only: nothing is dequantized
        return gguf_spec(path)
    if not path.exists():
        raise TracerError(f"{path}: no such checkpoint folder or config file")
    if path.is_file() and path.suffix != ".json":
        raise TracerError(f"{path}: expected a checkpoint folder or its config.json")
    cc = open_config(path)
    return checkpoint_spec(cc), cc.name
