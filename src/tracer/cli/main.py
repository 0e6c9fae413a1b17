"""The `tracer` command: each subcommand lives in its own module and registers itself here.

Ctrl-C, at any moment, ends the command with one line `interrupted` on stderr and exit status 130, no
traceback: while the modules load (the first lines below, before anything else is imported) the handler
exits at once (nothing has been written yet); once the command runs it raises `Interrupted`, so temp files
are removed on the way out, and TracerGroup prints the line.
"""

from __future__ import annotations

import signal as _signal

from tracer import _SIGINT_IGNORED as _IGNORED  # noqa: E402
from tracer import _interrupted_while_loading  # the console script's handler, set by tracer/__init__ already

# `python -m tracer.cli.main`: its argv[0] is no `tracer`, so the handler is set here, as the module starts
if __name__ == "__main__" and not _IGNORED:  # a script's ignore stands
    _signal.signal(_signal.SIGINT, _interrupted_while_loading)

import typer  # noqa: E402
from typer.core import TyperCommand  # noqa: E402

from tracer import __version__
from tracer.cli.common import Interrupted, TracerCommand, TracerGroup  # noqa: E402

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


def _raise_interrupted(_signum, _frame):
    raise Interrupted()


def main() -> None:
    from tracer.model.allocator import reuse_freed_memory

    if _IGNORED:  # Ctrl-C cannot reach this process: nothing to handle
        reuse_freed_memory()
        app()
        return
    _signal.signal(_signal.SIGINT, _raise_interrupted)
    try:
        reuse_freed_memory()
        app()
    except Interrupted:
        _signal.signal(_signal.SIGINT, _interrupted_while_loading)
        Interrupted.report_and_exit()
    finally:
        _signal.signal(_signal.SIGINT, _interrupted_while_loading)  # while Python shuts down, too


if __name__ == "__main__":
    main()
