"""The `tracer` command: each subcommand lives in its own module and registers itself here."""

from __future__ import annotations

import typer
from typer.core import TyperCommand

from tracer import __version__
from tracer.cli.common import TracerCommand, TracerGroup

app = typer.Typer(
    name="tracer",
    cls=TracerGroup,
    help=(
        "See how a transformer turns text into a next-token distribution, one step at a time, in NumPy.\n\n"
        "Examples:\n\n"
        "# the shipped model, the whole story\n"
        "tracer run \"春天来\"\n\n"
        "# run a checkpoint folder and save the trace\n"
        "tracer run \"Hello\" --model DIR --save t.safetensors\n\n"
        "# a self-contained HTML report of a saved trace\n"
        "tracer report t.safetensors -o t.html\n\n"
        "# generate 8 tokens with a KV cache, checked against the whole sequence recomputed\n"
        "tracer generate \"春天来\" -n 8 --check-cache\n\n"
        "# the first step where two runs disagree\n"
        "tracer diff ref.safetensors mine.safetensors\n\n"
        "# what a mask does, read the way torch's MultiheadAttention reads it\n"
        "tracer mask -c torch-mha-bool --mask \"[[0,1],[0,0]]@bool\" --scores 1,1,2,2"
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


def _version(value: bool):
    if value:
        print(f"tracer {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
):
    """tracer: a transformer's forward pass, step by step."""


def _register_commands() -> None:
    from tracer.cli import capture_cmd, cost_cmd, diff_cmd, generate_cmd, mask_cmd, report_cmd, run_cmd, steps_cmd

    for module in (run_cmd, report_cmd, generate_cmd, diff_cmd, mask_cmd, capture_cmd, steps_cmd, cost_cmd):
        module.register(app)
    for info in app.registered_commands:  # a repeated single-valued option is an error, not last-one-wins
        if info.cls in (None, TyperCommand):
            info.cls = TracerCommand


_register_commands()


def main() -> None:
    from tracer.model.allocator import reuse_freed_memory

    reuse_freed_memory()
    app()


if __name__ == "__main__":
    main()
