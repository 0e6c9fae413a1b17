"""When several prompt arguments are a batch, and when they are a mistake.

The shell splits an unquoted sentence into words, and a value given to a flag that
takes none (`--lens true`) lands among the prompts. Both used to run quietly as a
padded batch. The rule:

- one prompt: run it;
- a word `true`, `false`, `yes`, `no`, `on`, `off`, `1` or `0` among several
  prompts is the flag-value mistake, named as such (unless `--batch`);
- several prompts form a padded batch with `--batch`, or without it when any of
  them contains a space: the prompts were evidently quoted one by one (the shell
  never leaves a space inside an unquoted word), so `"A cat sat." "你好!"` is a batch;
- several single words are an error that shows the quoting (`tracer run Spring is`).
"""

from __future__ import annotations

import shlex

from tracer.errors import TracerError

FLAG_VALUES = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def check_prompts(prompts: list[str] | None, batch: bool) -> list[str] | None:
    """The prompts to run, or a TracerError that says how to write what was probably meant."""
    if not prompts or len(prompts) == 1 or batch:
        return prompts
    stray = [p for p in prompts if p.strip().lower() in FLAG_VALUES]
    if stray:
        raise TracerError(
            f"{stray[0]!r} reads as a second prompt: switches such as --lens, --values, --all take no value",
            hint=f"write --lens, not --lens {stray[0]}; to run {stray[0]!r} as a prompt of a batch, add --batch")
    if any(any(ch.isspace() for ch in p) for p in prompts):
        return prompts
    joined = " ".join(prompts)
    raise TracerError(
        f"{len(prompts)} prompt words given ({', '.join(map(repr, prompts[:4]))}{', ...' if len(prompts) > 4 else ''}): "
        "tracer runs one prompt unless asked for a batch",
        hint=f"quote a prompt with spaces: tracer run {shell_quote(joined)}; or add --batch to run the "
             f"{len(prompts)} as a padded batch")


def shell_quote(text: str) -> str:
    """Double quotes, as people type them, unless the text holds something the shell expands there."""
    return shlex.quote(text) if any(ch in text for ch in '"$`\\!') else f'"{text}"'


def batch_line(n_prompts: int, pad_side: str) -> str:
    """What the screen says first when a run is a batch."""
    return f"{n_prompts} prompts → padded batch ({pad_side} padding; --batch-row N shows row N)"
