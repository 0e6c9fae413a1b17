"""What every command shares: the console, error reporting, option parsing helpers."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from typing import Callable

import typer
from rich.console import Console
from rich.markup import escape

from tracer.errors import TracerError

DEBUG_ENV = "TRACER_DEBUG"


def make_console(stderr: bool = False, record: bool = False) -> Console:
    """A console that respects NO_COLOR and the terminal width (rich reads COLUMNS)."""
    no_color = "NO_COLOR" in os.environ
    return Console(
        stderr=stderr,
        record=record,
        no_color=no_color,
        color_system=None if no_color else "auto",  # no_color alone still emits bold/dim escapes
        highlight=False,
        soft_wrap=False,
    )


def fail(message: str, hint: str | None = None) -> "typer.Exit":
    """Print `error: ...` (one line, plus an optional hint line) and return Exit(2) to raise."""
    err = make_console(stderr=True)
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    if hint:
        err.print(f"[dim]hint: {escape(hint)}[/]", soft_wrap=True)
    return typer.Exit(2)


def handle_errors(fn: Callable) -> Callable:
    """Turn TracerError (and a few expected OS errors) into `error: ...` and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TracerError as exc:
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            raise fail(exc.message, exc.hint) from None
        except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            raise fail(f"{exc.filename or ''}: {exc.strerror}".lstrip(": ")) from None
        except MemoryError:
            raise fail("out of memory", hint="narrow --keep or shorten the input") from None
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


def parse_int_list(text: str, what: str) -> list[int]:
    """'5,17,42' -> [5, 17, 42], with a clear error for anything else."""
    items = [t.strip() for t in text.replace(" ", ",").split(",") if t.strip()]
    if not items:
        raise TracerError(f"{what} is empty")
    try:
        return [int(t) for t in items]
    except ValueError:
        bad = next(t for t in items if not t.lstrip("-").isdigit())
        raise TracerError(f"{what}: {bad!r} is not an integer") from None
