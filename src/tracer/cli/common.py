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
from typer.core import TyperCommand, TyperGroup
from rich.console import Console
from rich.markup import escape

from tracer.errors import TracerError

DEBUG_ENV = "TRACER_DEBUG"
INTERRUPTED_STATUS = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class Interrupted(BaseException):
    """Ctrl-C while a command runs (the command's SIGINT handler raises it; click does not catch it)."""

    @staticmethod
    def report_and_exit(standalone: bool = True) -> int:
        try:
            sys.stderr.write("interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        if standalone:
            sys.exit(INTERRUPTED_STATUS)
        return INTERRUPTED_STATUS


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


def rendered(console, draw) -> str:
    """What `draw` prints, as text in the console's width and colours: the screen is made whole before any
    output file is written, so a failure while drawing leaves no file behind."""
    with console.capture() as cap:
        draw()
    return cap.get()


def fail(message: str, hint: str | None = None) -> "typer.Exit":
    """Print `error: ...` (one line, plus an optional hint line) and return Exit(2) to raise."""
    err = make_console(stderr=True)
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    if hint:
        err.print(f"[dim]hint: {escape(hint)}[/]", soft_wrap=True)
    return typer.Exit(2)


# The library names its parameters in backticks (`pad_side`, `allow_long`); a command names the flag.
LIBRARY_FLAGS = {
    "ids": "--ids", "text": "the prompt", "pair": "--pair", "pad_side": "--pad-side", "positions": "--positions",
    "special_tokens": "--no-special-tokens", "token_types": "--token-types", "decoder_text": "--decoder-text",
    "decoder_ids": "--decoder-ids", "allow_long": "--allow-long", "keep": "--keep", "mask": "--mask",
    "mask_override": "--mask", "max_new_tokens": "--max-new-tokens", "stop": "--stop", "panel_layer": "--layer",
    "temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p", "seed": "--seed",
    "dtype": "--dtype", "allow_unused": "--allow-unused",
    # the views' options (report.RunOptions)
    "layer": "--layer", "batch_row": "--batch-row", "head": "--head", "position": "--position", "stack": "--stack",
    "attn": "--attn", "lens": "--lens",
}
_LIBRARY_NAME = re.compile(r"`([a-z_]+)(?:=[^`]*)?`")


def cli_terms(text: str | None) -> str | None:
    """A library message in a command's terms: `pad_side` -> --pad-side (unknown names keep their backticks)."""
    if not text:
        return text
    return _LIBRARY_NAME.sub(lambda m: LIBRARY_FLAGS.get(m.group(1), m.group(0)), text)


def handle_errors(fn: Callable) -> Callable:
    """Turn TracerError (and a few expected OS errors) into `error: ...` and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TracerError as exc:
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            raise fail(cli_terms(exc.message), cli_terms(exc.hint)) from None
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


INPUT_STEPS = ("input.*",)  # what a run was run on: kept whatever --keep says
DECODE_INPUT_STEPS = ("decode.*.input.*",)  # and each decoding step's input, in a generation


def keep_globs(keep: list[str] | None, decoding: bool = False) -> tuple[str, ...] | None:
    """--keep globs plus the inputs (a trace without input.ids cannot be re-run or diffed against a folder);
    `decoding`: a generation, whose decoding steps have inputs of their own."""
    return tuple(keep) + INPUT_STEPS + (DECODE_INPUT_STEPS if decoding else ()) if keep else None


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
    if folder.is_file():  # a single-file checkpoint (GGUF)
        return [folder]
    if not folder.is_dir():
        return []
    names = ("config.json", "tokenizer.json", "model.safetensors.index.json", "tokenizer_config.json")
    return [folder / n for n in names] + sorted(folder.glob("*.safetensors"))


_SEPARATOR = re.compile(r"\s*,\s*|\s+")


def split_list(text: str, what: str) -> list[str]:
    """'5,17,42' (or '5, 17, 42', '5 17 42') -> ['5', '17', '42']; an empty item ('1,,2', '1,', ',1') is an error,
    never skipped: a list that silently loses an item runs something the user did not write."""
    stripped = text.strip()
    if not stripped:
        raise TracerError(f"{what} is empty")
    items = _SEPARATOR.split(stripped)
    if "" in items:
        shown = stripped if len(stripped) <= 40 else stripped[:37] + "..."
        n = items.index("") + 1
        raise TracerError(f"{what} {shown!r}: item {n} is empty (two commas in a row, or a comma at an end)")
    return items


def parse_int_list(text: str, what: str) -> list[int]:
    """'5,17,42' -> [5, 17, 42]: ASCII digits only (no '²' or '⑤'), at most 18 digits each, no empty item."""
    items = split_list(text, what)
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


class TracerCommand(TyperCommand):
    """A subcommand whose single-valued options may be given once: a repeated `--layer 1 --layer 2` is refused
    (click keeps the last one silently). Options that take a list (--ids, --keep, ...) and flags repeat freely."""

    def parse_args(self, ctx, args):
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            for param in self.get_params(ctx):
                if getattr(param, "param_type_name", "") != "option" or param.multiple or param.count or param.is_flag:
                    continue
                n = sum(1 for p in order if p is param)
                if n > 1:
                    raise TracerError(f"{param.opts[0]} is given {n} times; it takes one value",
                                      hint=f"{ctx.command_path} --help")
        return super().parse_args(ctx, args)


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
            _exit(fail(cli_terms(exc.message), cli_terms(exc.hint)).exit_code, standalone_mode)
            return 2
        except (Interrupted, KeyboardInterrupt, typer.Abort):  # Ctrl-C: one line, exit 130, never a traceback
            return Interrupted.report_and_exit(standalone_mode)
        except SystemExit:
            raise
        except Exception as exc:  # a bug: still one line, the traceback on request
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            _exit(fail(f"internal error: {exc.__class__.__name__}: {str(exc)[:200]}",
                       hint=f"this is a bug in tracer; {DEBUG_ENV}=1 shows the traceback").exit_code, standalone_mode)
            return 2
        code = rv if isinstance(rv, int) else 0
        if code == INTERRUPTED_STATUS:  # typer turns a KeyboardInterrupt into Exit(130), silently
            return Interrupted.report_and_exit(standalone_mode)
        if standalone_mode:
            sys.exit(code)
        return code


def _exit(code: int, standalone: bool) -> None:
    if standalone:
        sys.exit(code)
