"""Where the shipped default model lives: inside the installed package, or in the source tree's fixtures/."""

from __future__ import annotations

from pathlib import Path

from tracer.errors import TracerError


def default_model_path() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "_data" / "default-model", here.parents[2] / "fixtures" / "default-model"):
        if (candidate / "config.json").is_file():
            return candidate
    raise TracerError("the default model is not installed", hint="pass --model DIR")
