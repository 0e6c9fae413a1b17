"""What every command shares: the console, error reporting, option parsing helpers."""

from __future__ import annotations

import functools
import os
import re
import sys
import traceback
from typing import Callable

import typer

try:  # typer >= 0.2x vendors click as typer._click; its exceptions are not click's
    from typer._click import exceptions as cx
except ImportError:  # pragma: no cover
    from click import exceptions as cx
from typer.core import TyperGroup
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
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(0) from None
        except OSError as exc:  # not found, permission denied, name too long, no space, loops, ...
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            raise fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")) from None
        except MemoryError:
            raise fail("out of memory", hint="narrow --keep or shorten the input") from None
        except RecursionError:
            raise fail("the input is nested too deeply") from None

    return wrapper


_ASCII_INT = re.compile(r"[+-]?[0-9]{1,18}")


def check_outputs(outputs: dict, reading=()) -> None:
    """Every output path (option name -> Path or None) is usable and distinct, before any work starts."""
    from tracer.outputs import check_distinct, check_output

    for what, path in outputs.items():
        if path is not None:
            check_output(path, what, reading)
    check_distinct(outputs)


def checkpoint_files(folder) -> list:
    """The files a run reads from a checkpoint folder (outputs must not replace them)."""
    from pathlib import Path

    folder = Path(folder)
    if not folder.is_dir():
        return []
    names = ("config.json", "tokenizer.json", "model.safetensors.index.json", "tokenizer_config.json")
    return [folder / n for n in names] + sorted(folder.glob("*.safetensors"))


def parse_int_list(text: str, what: str) -> list[int]:
    """'5,17,42' -> [5, 17, 42]: ASCII digits only (no '²' or '⑤'), at most 18 digits each."""
    items = [t.strip() for t in text.replace(" ", ",").split(",") if t.strip()]
    if not items:
        raise TracerError(f"{what} is empty")
    for t in items:
        if not _ASCII_INT.fullmatch(t):
            if re.fullmatch(r"[+-]?[0-9]+", t):
                raise TracerError(f"{what}: {t[:24]!r}... is too large" if len(t) > 24 else f"{what}: {t!r} is too large")
            raise TracerError(f"{what}: {t[:40]!r} is not an integer")
    return [int(t) for t in items]


# ---------- command-line errors in tracer's one-line form ----------


def check_argv(args: list[str]) -> None:
    """Arguments that are not valid UTF-8 (Python keeps them as lone surrogates) are refused up front."""
    for i, a in enumerate(args, start=1):
        try:
            a.encode("utf-8")
        except UnicodeEncodeError:
            shown = a.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            raise TracerError(f"argument {i} ({shown[:40]!r}) is not valid UTF-8 text",
                              hint="pass text in UTF-8; give exact token ids with --ids") from None


_PYDANTIC_MESSAGES = (
    (re.compile(r"Input should be greater than or equal to (\S+)"), "must be at least {0}"),
    (re.compile(r"Input should be greater than (\S+)"), "must be greater than {0}"),
    (re.compile(r"Input should be less than or equal to (\S+)"), "must be at most {0}"),
    (re.compile(r"Input should be less than (\S+)"), "must be less than {0}"),
    (re.compile(r"Input should be a valid integer"), "not an integer"),
    (re.compile(r"Input should be a valid number"), "not a number"),
    (re.compile(r"Input should be a finite number"), "not a finite number"),
    (re.compile(r"(.+) is not in the range x>=(\S+?)\.?$"), "must be at least {1}"),
    (re.compile(r"(.+) is not in the range x<=(\S+?)\.?$"), "must be at most {1}"),
)


def _param_name(param) -> str:
    opts = getattr(param, "opts", None) or []
    if opts and opts[0].startswith("-"):
        return opts[0]
    return (getattr(param, "metavar", None) or getattr(param, "name", None) or "argument").upper()


def _given_value(exc) -> str | None:
    """The value the user typed, when the validator kept it (pydantic errors do)."""
    cause = exc.__cause__
    try:
        value = cause.errors()[0]["input"]  # pydantic ValidationError
    except Exception:  # noqa: BLE001 - any other cause has no value to show
        return None
    return repr(value)[:40]


def usage_message(exc) -> tuple[str, str | None]:
    """click's (or typer's) usage error -> (tracer's one-line message, hint)."""
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "tracer"
    hint = f"{command} --help"
    if isinstance(exc, cx.NoSuchOption):
        more = f"; did you mean {', '.join(sorted(exc.possibilities)[:3])}?" if exc.possibilities else ""
        return f"{exc.option_name}: no such option{more}", hint
    if isinstance(exc, cx.MissingParameter) and exc.param is not None:
        return f"missing {_param_name(exc.param)}", hint
    if isinstance(exc, cx.BadParameter) and exc.param is not None:
        text = exc.message.strip().rstrip(".")
        for pattern, form in _PYDANTIC_MESSAGES:
            m = pattern.match(text)
            if m:
                text = form.format(*m.groups())
                break
        given = _given_value(exc)
        return f"{_param_name(exc.param)}: {text}" + (f" (got {given})" if given else ""), hint
    message = exc.format_message().strip().rstrip(".")
    return (message[:1].lower() + message[1:]) if message else "invalid command line", hint


def plain_type_word(shown: str) -> str:
    """typer 0.2x writes an option's Python annotation in --help (<list[str]>, <int range>, <path>); people read
    the words click uses: TEXT, INTEGER, FLOAT, PATH, or the choices a|b."""
    label = shown.strip("<>") if isinstance(shown, str) else ""
    inner = label.removeprefix("list[").removesuffix("]")
    if "|" in inner:
        return inner
    kind = inner.split()[0] if inner else "str"
    return {"path": "PATH", "int": "INTEGER", "float": "FLOAT"}.get(kind, "TEXT")


def _install_plain_help_types() -> None:
    """--help shows no type for a flag (typer 0.2x prints <bool>) and plain words for the others."""
    try:
        from typer.core import _TyperParameter
    except ImportError:  # pragma: no cover - an older typer prints click's words already
        return
    typer_display_type = _TyperParameter.display_type
    if getattr(typer_display_type, "_tracer_plain", False):
        return

    def display_type(self, ctx):
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return ""
        return plain_type_word(typer_display_type(self, ctx))

    display_type._tracer_plain = True
    _TyperParameter.display_type = display_type


_install_plain_help_types()


class TracerGroup(TyperGroup):
    """The root command: usage errors, bad argv and uncaught errors end as `error: ...`, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        try:
            check_argv(argv)
            rv = super().main(args=argv, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra)
        except cx.NoArgsIsHelpError:
            rv = 0  # typer has printed the help
        except cx.ClickException as exc:
            message, hint = usage_message(exc)
            _exit(fail(message, hint).exit_code, standalone_mode)
            return 2
        except TracerError as exc:
            _exit(fail(exc.message, exc.hint).exit_code, standalone_mode)
            return 2
        except typer.Abort:
            _exit(fail("interrupted").exit_code, standalone_mode)
            return 2
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug: still one line, the traceback on request
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            _exit(fail(f"internal error: {exc.__class__.__name__}: {str(exc)[:200]}",
                       hint=f"this is a bug in tracer; {DEBUG_ENV}=1 shows the traceback").exit_code, standalone_mode)
            return 2
        code = rv if isinstance(rv, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


def _exit(code: int, standalone: bool) -> None:
    if standalone:
        sys.exit(code)
